//! A thread's scratch space: the lists every node it executes reuses, and the counts it adds to
//! the run once per task. Workers keep theirs for their life; a thread that calls `run` keeps
//! its own between runs, so that a steady run allocates nothing.

/// What a thread counts of a run's nodes it executes: kept in its scratch during a task, then
/// added to its own place in the run, or to the run's shared counts if it has none there
/// (`RunState::flush`).
#[derive(Default, Clone, Copy)]
pub(in crate::exec) struct Counts {
    pub nodes_run: u64,
    pub acquires: u64,
    /// The highest count of the run's live bytes this thread's additions returned (see
    /// `RunState::add_live`): the run's peak is the highest of all.
    pub peak_live: u64,
    /// Nanoseconds spent in kernels while the run is traced.
    pub busy_ns: u64,
}

impl Counts {
    /// Adds `other` (a peak counts as the higher of the two).
    pub(crate) fn add(&mut self, other: Counts) {
        self.nodes_run += other.nodes_run;
        self.acquires += other.acquires;
        self.peak_live = self.peak_live.max(other.peak_live);
        self.busy_ns += other.busy_ns;
    }
}

/// Per-thread scratch space reused by every node a thread executes, and its counts of the task
/// under way (see [`Counts`]).
#[derive(Default)]
pub(in crate::exec) struct Scratch {
    pub ready: Vec<u32>,
    /// Waiting nodes a release let in (memory reserved), most critical first.
    pub admitted: Vec<u32>,
    pub(in crate::exec) counts: Counts,
    /// Nodes executed by this thread, for sampling kernel durations (see `for_caller`).
    pub(in crate::exec) executed: u64,
    /// `executed` when the thread's last run as a caller started.
    pub(in crate::exec) run_start: u64,
    /// This thread's block cache in the run being executed, if it has one (see `RunState::caches`).
    pub slot: Option<usize>,
    /// Track of this thread in traces: 0 for a calling thread, worker index + 1.
    pub thread: u32,
    /// An input whose buffer the current node's output took over (in place): at the node's
    /// end its value goes without giving the buffer back.
    pub(in crate::exec) taken: Option<u32>,
    /// Values the current node freed.
    pub(in crate::exec) freed: Vec<u32>,
    /// Bytes of the outputs of the node in `execute_lean` (module `lean`) that the run's live count
    /// does not hold yet: counted at its end, with what it freed, in one atomic
    /// (`RunState::settle_live`), or before any other way out (`RunState::count_unadded`).
    pub(in crate::exec) unadded: u64,
}

thread_local! {
    /// The scratch of the runs this thread calls, kept between them (a run it calls from inside
    /// a kernel finds none and makes its own). Boxed: a run takes and gives back a pointer, not
    /// the whole record.
    static CALLER_SCRATCH: std::cell::Cell<Option<Box<Scratch>>> = const { std::cell::Cell::new(None) };
    /// This thread's track in traces and observations: a worker's index + 1, set when it starts;
    /// 0 for any other thread. A worker that calls a nested run keeps its own track there.
    pub(in crate::exec) static TRACK: std::cell::Cell<u32> = const { std::cell::Cell::new(0) };
}

impl Scratch {
    /// Scratch for a run this thread calls: the one its last run left, emptied, else new.
    pub(in crate::exec) fn for_caller() -> Box<Scratch> {
        // While the thread's storage is being torn down (a run from a thread-exit destructor),
        // there is none to keep: a fresh scratch.
        let mut s = CALLER_SCRATCH.try_with(|c| c.take()).ok().flatten().unwrap_or_default();
        // Sampling times one node in a period (a power of two) of those a thread executes,
        // counting across runs. With `n` nodes a run in a fixed order, the count advances by `n`
        // each run, and only the positions at multiples of gcd(n, period) would ever be timed
        // again; an odd advance visits every position, one run in a period each. So a run of an
        // even number of nodes counts one more. The count goes on across runs: a graph of fewer
        // nodes than the sampling period run by the same thread would otherwise never be timed
        // again.
        let executed = s.executed + ((s.executed - s.run_start + 1) & 1);
        s.ready.clear();
        s.admitted.clear();
        s.freed.clear();
        s.counts = Counts::default();
        (s.executed, s.run_start) = (executed, executed);
        s.slot = None;
        s.thread = TRACK.try_with(|t| t.get()).unwrap_or(0);
        s.taken = None;
        s
    }

    /// Keeps this scratch for the thread's next run.
    pub(in crate::exec) fn keep_for_caller(self: Box<Self>) {
        let _ = CALLER_SCRATCH.try_with(|c| c.set(Some(self)));
    }
}
