//! What a run counts while it goes: its live bytes and their peak, nodes run, acquires and busy
//! time; each thread keeps its own during a task and hands them over once (`flush`).

use std::sync::atomic::{AtomicU64, Ordering};

use crate::exec::node::scratch::Counts;
use crate::exec::padded::CachePadded;

use crate::exec::node::scratch::Scratch;
use crate::exec::state::RunState;
use crate::trace::NodeEvent;

/// What a run counts while it goes. Its fields are read once the run is over (after its
/// `active` count reached 0), but for `live`, which admission reads while it goes.
#[derive(Default)]
pub(in crate::exec) struct Tally {
    /// Bytes the run holds: reserved outputs and values not yet released. A counter, not a
    /// publication: admission reads and raises it only under the gate's lock, and a releaser
    /// lowers it before it takes that lock to readmit, so the lock orders every decision after
    /// the releases it could depend on. Nothing else is published through it: Relaxed. On an
    /// executor every node's threads write it: on its own cache line, so that the fields every
    /// node reads do not go with it.
    live: CachePadded<AtomicU64>,
    /// The most `live` reached; with `acquires` and `nodes_run`, counters read once the run is
    /// over (after `active` reached 0): Relaxed.
    peak_live: AtomicU64,
    acquires: AtomicU64,
    nodes_run: AtomicU64,
    /// Kernel time of a traced run; a counter like `acquires`.
    busy_ns: AtomicU64,
}

impl Tally {
    /// The run's live bytes now (Relaxed: see `live`).
    pub(in crate::exec) fn live(&self) -> u64 {
        self.live.load(Ordering::Relaxed)
    }

    /// Counts one block taken from the pool outside any thread's counts.
    pub(in crate::exec) fn count_acquire(&self) {
        self.acquires.fetch_add(1, Ordering::Relaxed);
    }

    /// Nodes run so far (exact once the run is over).
    pub(in crate::exec) fn nodes_run(&self) -> u64 {
        self.nodes_run.load(Ordering::Relaxed)
    }

    /// Adds the threads' counts, gathered once the run is over.
    pub(in crate::exec) fn gather(&mut self, counts: Counts) {
        *self.busy_ns.get_mut() += counts.busy_ns;
        *self.nodes_run.get_mut() += counts.nodes_run;
        *self.acquires.get_mut() += counts.acquires;
        let peak = self.peak_live.get_mut();
        *peak = (*peak).max(counts.peak_live);
    }
}

impl RunState<'_> {
    pub(crate) fn stats(&self) -> (u64, u64, u64) {
        (
            self.tally.nodes_run.load(Ordering::Relaxed),
            self.tally.peak_live.load(Ordering::Relaxed),
            self.tally.acquires.load(Ordering::Relaxed),
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
                let now = self.tally.live.load(Ordering::Relaxed) + bytes;
                self.tally.live.store(now, Ordering::Relaxed);
                now
            }
            false => self.tally.live.fetch_add(bytes, Ordering::Relaxed) + bytes,
        };
        *highest = (*highest).max(now);
    }

    /// A node's end on the short path: counts `added` bytes of its outputs more and `freed`
    /// bytes of the values it dropped fewer, in one step, and raises `highest` to what was
    /// live while it ran (its outputs and its inputs both). On an executor's threads this is
    /// the node's one atomic on the run's count, where counting its outputs before the call and
    /// each dropped value after it took two or more on a line every thread writes (a tenth of
    /// a node's time on two threads). Called before the node marks its successors: a value's
    /// bytes are still counted before any reader can free them. A node with an input another
    /// node reads counts its outputs in a call of its own before it lets go of that input
    /// (`end_node_ok`), so that the peak stays exact.
    pub(in crate::exec) fn settle_live(&self, added: u64, freed: u64, highest: &mut u64) {
        if added == 0 && freed == 0 {
            return;
        }
        let before = match self.sequential {
            true => {
                let before = self.tally.live.load(Ordering::Relaxed);
                self.tally.live.store(before + added - freed, Ordering::Relaxed);
                before
            }
            false if added >= freed => self.tally.live.fetch_add(added - freed, Ordering::Relaxed),
            false => self.tally.live.fetch_sub(freed - added, Ordering::Relaxed),
        };
        // What it freed was counted (by its producers, before it became ready).
        debug_assert!(
            before + added >= freed,
            "{freed} live bytes released of {}",
            before + added
        );
        if added > 0 {
            *highest = (*highest).max(before + added);
        }
    }

    /// Counts `bytes` fewer as live (as `add_live`, a plain store in a sequential run).
    pub(in crate::exec) fn sub_live(&self, bytes: u64) {
        match self.sequential {
            true => self
                .tally
                .live
                .store(self.tally.live.load(Ordering::Relaxed) - bytes, Ordering::Relaxed),
            false => {
                let before = self.tally.live.fetch_sub(bytes, Ordering::Relaxed);
                // A value's bytes are counted before any reader can free it (its producer
                // counts them before it runs), so the count never goes below 0.
                debug_assert!(before >= bytes, "{bytes} live bytes released of {before}");
            }
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
            self.tally.busy_ns.fetch_add(counts.busy_ns, Ordering::Relaxed);
        }
        if counts.nodes_run > 0 {
            self.tally.nodes_run.fetch_add(counts.nodes_run, Ordering::Relaxed);
        }
        if counts.acquires > 0 {
            self.tally.acquires.fetch_add(counts.acquires, Ordering::Relaxed);
        }
        self.raise_peak(counts.peak_live);
    }

    /// Raises the run's peak to `highest`, a count of its live bytes some thread saw (a plain
    /// load first: the peak rarely moves).
    pub(in crate::exec) fn raise_peak(&self, highest: u64) {
        if highest > self.tally.peak_live.load(Ordering::Relaxed) {
            self.tally.peak_live.fetch_max(highest, Ordering::Relaxed);
        }
    }

    /// Nanoseconds spent in kernels (traced runs only).
    pub(crate) fn busy_ns(&self) -> u64 {
        self.tally.busy_ns.load(Ordering::Relaxed)
    }

    /// The nodes executed, in the order they ended (traced runs only).
    pub(crate) fn take_events(&mut self) -> Vec<NodeEvent> {
        match &mut self.trace {
            Some(t) => std::mem::take(t.events.get_mut().unwrap_or_else(|p| p.into_inner())),
            None => Vec::new(),
        }
    }
}
