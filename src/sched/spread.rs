//! Whether a run is worth spreading over an executor's threads.
//!
//! Threads save kernel time only where kernels overlap, and they cost time on every node: the
//! executor's queues, the atomic counts that two threads share, the cache lines that move
//! between them. For kernels of a few nanoseconds (shape arithmetic, element-wise ops on small
//! tensors, the empty kernels of an overhead benchmark) the cost is the larger part, and the
//! caller alone, on the sequential driver, finishes first: on this project's 2-core machine a
//! tree of 65,535 empty kernels ran in 49 ns a node alone and 132 on two threads
//! (`benches/c/run_overhead.sh`).
//!
//! The rule, from the current estimates (learned, given, or the default): spread when the time
//! the threads can save exceeds what they add. On `k` threads the kernels take at least the
//! longer of `total work / k` and the critical path, so they save at most
//! `total work - max(total work / k, critical path)`; the threads add [`NODE_COST_NS`] per
//! operator node. On two threads and a wide graph, spreading pays above about 300 ns a kernel.
//!
//! Two kinds of graph always spread, whatever their figures. One with a kernel that has deferred
//! its end (`KernelCtx::defer`; every deferral is noted, timed or not, `Graph::note_deferral`):
//! alone, the caller would wait out each deferred node with nothing else running, where an
//! executor's threads, even its caller alone, run other nodes meanwhile (and one node's
//! completion may wait for another node). And one with an op type no run has measured yet,
//! given estimates or not: nothing is known of how its kernels spend their time, deferring or
//! not. So the first run of a graph behaves as the executor always
//! did, and measures every op type; later runs follow the estimates (given, else measured), so
//! a graph whose kernels turn out long goes back to the threads. Estimates move the decision
//! only when they move the priorities (by a fifth and [`MIN_MOVE_NS`](super::MIN_MOVE_NS)), so it
//! does not flip from run to run.
//!
//! What this cannot see: an op type that starts deferring only after the graph's runs went to
//! the caller. That run waits at the node, as a run without an executor does, and the runs after
//! it spread again; its completion must not wait for another node of the same run meanwhile
//! (`RunOptions::force_executor` keeps such a graph on the threads).

use super::Priorities;

/// What running a node through an executor's threads costs over the caller's loop, in wall
/// time, as the estimates measure kernels: on this 2-core machine the threads added 50-90 ns a
/// node (fan-out, tree and layered graph of `benches/c/run_overhead.sh`, 2 threads against
/// none), so two threads pay for themselves above about 170 ns of kernel a node. A sampled
/// call of a kernel that short measures high, though: its empty kernels read 75-190 ns on
/// average (two clock readings, and the cold path of a call timed one in 64). Against those
/// figures, 150 ns a node puts the break-even at about 300 ns measured.
pub const NODE_COST_NS: u64 = 150;

impl Priorities {
    /// Whether a run of the graph on `threads` threads, the caller's included, is expected to
    /// end sooner than on its caller alone (module docs).
    pub fn spreading_pays(&self, threads: usize) -> bool {
        if self.defers || self.unmeasured {
            return true;
        }
        if threads < 2 {
            return false;
        }
        let work = self.total_work_ns;
        let spread = (work / threads as u64).max(self.critical_path_ns);
        work.saturating_sub(spread) > self.operators.saturating_mul(NODE_COST_NS)
    }
}
