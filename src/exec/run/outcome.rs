//! What a finished run reports besides its outputs: its figures, its trace, and the arena of a
//! planned run. Kept in the run's arrays ([`arrays`](crate::exec::state::arrays)), which the result holds, so that a
//! result is three pointers.

use crate::kernel::Buffer;
use crate::trace::NodeEvent;

/// Figures of one run. (C: `gs_run_stats`).
#[repr(C)]
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct RunStats {
    /// Wall-clock duration of the run, in nanoseconds; 0 where the run was asked to read no clock
    /// for it (`RunOptions::no_wall_time`, `GS_RUN_NO_WALL_TIME`).
    pub wall_ns: u64,
    /// Operator nodes executed (graph inputs are not run).
    pub nodes_run: u64,
    /// Most bytes this run's values held at once (graph inputs, which the caller owns, excluded).
    pub peak_live_bytes: u64,
    /// Buffers this run took from the pool: refills of its per-thread caches (which then serve
    /// many values each) and larger blocks, not one per value.
    pub acquires: u64,
    /// System allocations the pool made while the run went on (by any user of the pool).
    pub os_allocs: u64,
    /// Threads the run could use, its caller's included: 1 for a run on its caller alone. A
    /// chain, and a graph of kernels too short to pay for the threads, run so even when given
    /// an executor.
    pub threads: u64,
    /// Time spent in kernels, summed over threads; traced runs only (0 otherwise). Utilization
    /// is `busy_ns / (wall_ns * threads)`.
    pub busy_ns: u64,
}

/// What a result keeps besides its outputs' slots (`RunResult`).
pub(in crate::exec) struct Outcome {
    pub stats: RunStats,
    /// Every executed node, in the order they ended: traced runs only.
    pub events: Vec<NodeEvent>,
    /// The run recorded its events (`RunOptions::trace`); a graph without operators has none.
    pub traced: bool,
    /// The planned run's arena: graph outputs may live in it.
    pub arena: Buffer,
    /// How long the run waited to enter its executor's memory budget.
    pub budget_wait_ns: u64,
}

impl Default for Outcome {
    fn default() -> Self {
        Outcome {
            stats: RunStats::default(),
            events: Vec::new(),
            traced: false,
            budget_wait_ns: 0,
            arena: Buffer::NONE,
        }
    }
}
