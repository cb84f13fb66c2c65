//! What a run counts while it goes: its live bytes and their peak, nodes run, acquires and busy
//! time; each thread keeps its own during a task and hands them over once (`flush`).

use std::sync::atomic::Ordering;

use crate::exec::node::scratch::Scratch;
use crate::exec::state::RunState;
use crate::trace::NodeEvent;

impl RunState<'_> {
    pub(crate) fn stats(&self) -> (u64, u64, u64) {
        (
            self.nodes_run.load(Ordering::Relaxed),
            self.peak_live.load(Ordering::Relaxed),
            self.acquires.load(Ordering::Relaxed),
        )
    }

    /// Counts `bytes` more as live, raising `highest`, the thread's own peak (`Scratch::peak_live`).
    ///
    /// The run's peak is exact without a shared write per node beyond the add itself: the count
    /// only rises here, and each rise returns its new value to the thread that made it (one
    /// atomic add, in one order for all threads), so the highest count ever reached is the
    /// highest any thread saw. Each thread keeps its own and hands it over when it flushes
    /// (`flush`). A sequential run's counts have one writer, its thread: a plain load and store.
    pub(in crate::exec) fn add_live(&self, bytes: u64, highest: &mut u64) {
        if bytes == 0 {
            return;
        }
        let now = match self.sequential {
            true => {
                let now = self.live.load(Ordering::Relaxed) + bytes;
                self.live.store(now, Ordering::Relaxed);
                now
            }
            false => self.live.fetch_add(bytes, Ordering::Relaxed) + bytes,
        };
        *highest = (*highest).max(now);
    }

    /// Counts `bytes` fewer as live (as `add_live`, a plain store in a sequential run).
    pub(in crate::exec) fn sub_live(&self, bytes: u64) {
        match self.sequential {
            true => self
                .live
                .store(self.live.load(Ordering::Relaxed) - bytes, Ordering::Relaxed),
            false => _ = self.live.fetch_sub(bytes, Ordering::Relaxed),
        }
    }

    /// Adds the counts of a thread's task to the run's: to the thread's own place in the run if
    /// it has one (plain adds, no line another thread writes), else to the shared counts. Before
    /// the task leaves `active`: that AcqRel decrement publishes them to whoever sees the run end.
    pub(crate) fn flush(&self, scratch: &mut Scratch) {
        let counts = std::mem::take(&mut scratch.counts);
        if let Some(cache) = self.cache(scratch.slot) {
            cache.counts.add(counts);
            return;
        }
        if counts.busy_ns > 0 {
            self.busy_ns.fetch_add(counts.busy_ns, Ordering::Relaxed);
        }
        if counts.nodes_run > 0 {
            self.nodes_run.fetch_add(counts.nodes_run, Ordering::Relaxed);
        }
        if counts.acquires > 0 {
            self.acquires.fetch_add(counts.acquires, Ordering::Relaxed);
        }
        self.raise_peak(counts.peak_live);
    }

    /// Raises the run's peak to `highest`, a count of its live bytes some thread saw (a plain
    /// load first: the peak rarely moves).
    pub(in crate::exec) fn raise_peak(&self, highest: u64) {
        if highest > self.peak_live.load(Ordering::Relaxed) {
            self.peak_live.fetch_max(highest, Ordering::Relaxed);
        }
    }

    /// Nanoseconds spent in kernels (traced runs only).
    pub(crate) fn busy_ns(&self) -> u64 {
        self.busy_ns.load(Ordering::Relaxed)
    }

    /// The nodes executed, in the order they ended (traced runs only).
    pub(crate) fn take_events(&mut self) -> Vec<NodeEvent> {
        match &mut self.trace {
            Some(t) => std::mem::take(t.events.get_mut().unwrap_or_else(|p| p.into_inner())),
            None => Vec::new(),
        }
    }
}
