//! Intra-op parallelism: a kernel splits a range into chunks that the executor's threads run
//! beside other ready nodes, the kernel's own thread taking part.
//!
//! The model: `KernelCtx::parallel_for(range, grain, f)` cuts `range` into chunks of about
//! `grain` items and queues one helper task per other thread of the executor, in the most
//! urgent band. Every participant claims chunks one at a time, the caller from the front of the
//! range and helpers from the back (with one helper, each thread runs one contiguous stretch),
//! and runs `f` on
//! them until none is left; the caller then waits for the chunks other threads are still
//! running. No thread is created per call.
//!
//! Why it cannot deadlock, even with every thread inside such a kernel: the caller never waits
//! for a chunk nobody has claimed, since it claims every unclaimed chunk itself; it waits only
//! for chunks being run, on live threads, which finish. A helper task that starts after the last
//! chunk was claimed finds nothing and returns. Why `f`, a borrow of the caller's stack, is never
//! called after `parallel_for` returns: a chunk is run only by the thread that claimed it, and
//! the caller returns only once every claimed chunk is done. The job itself lives in an `Arc`
//! that each queued helper task holds, so a late helper reads live memory.

use std::ops::Range;
use std::panic::{catch_unwind, AssertUnwindSafe};
use std::sync::atomic::{AtomicBool, AtomicU64, AtomicUsize, Ordering};
use std::sync::Arc;

use crate::kernel::KernelCtx;

/// The body of a parallel loop, as the caller lent it.
type Body<'a> = dyn Fn(Range<usize>) + Sync + 'a;

/// One `parallel_for` call, shared by its participants.
pub(in crate::exec) struct Job {
    /// The caller's body, lifetime erased: called only for claimed chunks, all done before the
    /// caller returns (module docs).
    body: *const Body<'static>,
    start: usize,
    end: usize,
    grain: usize,
    /// The chunks nobody has claimed, `front..back`, packed as `back << 32 | front`. The caller
    /// claims from the front and helpers from the back, so that each thread runs one contiguous
    /// stretch of the range: loop after loop along a chain of nodes split alike, a thread then
    /// reads the rows it wrote itself, from its own core's cache, as with oneTBB's halving
    /// splits. Relaxed: claiming publishes nothing.
    claims: AtomicU64,
    /// Chunks finished. Release by each finisher, Acquire by the waiting caller: the caller sees
    /// every write the chunks made.
    done: AtomicUsize,
    panicked: AtomicBool,
    /// Threads that ran at least one chunk, the caller included: how wide the loop really
    /// went, for the learned estimates. Relaxed: a count read once the loop is over.
    width: AtomicUsize,
}

thread_local! {
    /// The widest loop the kernel on this thread ran since `take_loop_width`: what the run
    /// learns of a parallel node (`sched::Sample::width`).
    static LOOP_WIDTH: std::cell::Cell<u32> = const { std::cell::Cell::new(0) };
}

/// The widest loop run on this thread since the last call, and starts counting anew from
/// `from` (0: none): a kernel call counts from 0 and gives back what an enclosing call (a
/// nested run's kernel inside another kernel) had counted.
pub(in crate::exec) fn swap_loop_width(from: u32) -> u32 {
    LOOP_WIDTH.with(|w| w.replace(from))
}

// SAFETY: `body` is `Sync` (the bound of `Body`) and called from several threads at once by
// design; everything else is atomic or immutable.
unsafe impl Send for Job {}
// SAFETY: as above.
unsafe impl Sync for Job {}

impl Job {
    /// Claims a chunk: the first unclaimed one, or the last (`from_back`, for helpers).
    fn claim(&self, from_back: bool) -> Option<usize> {
        let mut now = self.claims.load(Ordering::Relaxed);
        loop {
            let (front, back) = (now & u64::from(u32::MAX), now >> 32);
            if front >= back {
                return None;
            }
            let (next, chunk) = match from_back {
                true => ((back - 1) << 32 | front, back - 1),
                false => (back << 32 | (front + 1), front),
            };
            match self
                .claims
                .compare_exchange_weak(now, next, Ordering::Relaxed, Ordering::Relaxed)
            {
                Ok(_) => return Some(chunk as usize),
                Err(seen) => now = seen,
            }
        }
    }

    /// Runs chunks until none is left to claim: from the front for the loop's caller, from the
    /// back for a helper.
    pub(in crate::exec) fn help(&self, helper: bool) {
        let mut first = true;
        while let Some(chunk) = self.claim(helper) {
            if std::mem::take(&mut first) {
                self.width.fetch_add(1, Ordering::Relaxed);
            }
            // chunk < chunks = ceil(len / grain), so from < end; the end is computed from what
            // is left, which cannot overflow where `from + grain` could (a grain near
            // usize::MAX, a range ending near it).
            let from = self.start + chunk * self.grain;
            let to = from + self.grain.min(self.end - from);
            // SAFETY: this thread claimed `chunk`, so the caller is still waiting for it and
            // its body is alive (module docs).
            let body = unsafe { &*self.body };
            if catch_unwind(AssertUnwindSafe(|| body(from..to))).is_err() {
                self.panicked.store(true, Ordering::Relaxed);
            }
            self.done.fetch_add(1, Ordering::Release);
        }
    }
}

/// What a parallel loop needs of its run: the executor, if any. `Copy` and `Sync`, so that a
/// chunk (on any thread) can start a loop of its own, which a kernel's context cannot.
#[derive(Clone, Copy)]
pub struct Parallel<'a> {
    executor: Option<&'a crate::exec::Executor>,
}

impl KernelCtx<'_> {
    /// Runs `body` over `range` in chunks of `grain` items (at least 1; more if the range would
    /// make over `u32::MAX` chunks), on this thread and on
    /// the run's executor's other threads as they come free; without an executor, here, in
    /// order. Returns once every chunk has run. A panic in `body` is reported as an error (the
    /// remaining chunks still run). For a loop inside a chunk, use [`KernelCtx::parallel`].
    pub fn parallel_for(
        &self,
        range: Range<usize>,
        grain: usize,
        body: &(dyn Fn(Range<usize>) + Sync),
    ) -> Result<(), String> {
        self.parallel().for_each(range, grain, body)
    }

    /// A handle for parallel loops that chunks, on any thread, may use too.
    pub fn parallel(&self) -> Parallel<'_> {
        Parallel {
            executor: self.executor(),
        }
    }
}

impl Parallel<'_> {
    /// [`KernelCtx::parallel_for`], from the kernel's thread or from inside a chunk.
    pub fn for_each(
        &self,
        range: Range<usize>,
        grain: usize,
        body: &(dyn Fn(Range<usize>) + Sync),
    ) -> Result<(), String> {
        let len = range.end.saturating_sub(range.start);
        // At most u32::MAX chunks (`Job::claims` packs two chunk numbers in 64 bits).
        let grain = grain.max(1).max(len.div_ceil(u32::MAX as usize));
        let chunks = len.div_ceil(grain);
        let executor = self.executor.filter(|e| e.threads() > 1 && chunks > 1);
        // SAFETY: only the lifetime is erased; `body` outlives every call of it (module docs).
        let body: *const Body<'static> = unsafe { std::mem::transmute::<&Body<'_>, *const Body<'static>>(body) };
        let job = Arc::new(Job {
            body,
            start: range.start,
            end: range.end,
            grain,
            claims: AtomicU64::new((chunks as u64) << 32),
            done: AtomicUsize::new(0),
            panicked: AtomicBool::new(false),
            width: AtomicUsize::new(0),
        });
        if let Some(executor) = executor {
            executor.push_job(&job, (executor.threads() - 1).min(chunks - 1));
        }
        job.help(false);
        let mut spins = 0u32;
        while job.done.load(Ordering::Acquire) < chunks {
            // Only chunks other threads are running remain: they end soon.
            spins += 1;
            if spins < 1 << 10 {
                std::hint::spin_loop();
            } else {
                std::thread::yield_now();
            }
        }
        let width = job.width.load(Ordering::Relaxed) as u32;
        LOOP_WIDTH.with(|w| w.set(w.get().max(width)));
        match job.panicked.load(Ordering::Relaxed) {
            true => Err("a chunk of its parallel loop panicked".into()),
            false => Ok(()),
        }
    }
}
