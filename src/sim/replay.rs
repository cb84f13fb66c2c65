//! Several runs on one executor, arriving at given times with their priorities, on a virtual
//! clock: what a server's requests would wait, before the choice is made.
//!
//! The model follows the executor's queues: a ready node waits in its band (the policy's band,
//! behind every band of the high-priority runs for a normal run: `RunPriority`), first in first
//! out within a band, and a free thread takes the most urgent band's oldest node. A node runs for
//! its graph's estimate ([`Priorities::weight`]); a run's roots become ready at its arrival.
//! Continuations, memory and the budget are not modelled: this is the order on the threads.
//!
//! ```
//! use graphsched::sched::RunPriority;
//! use graphsched::sim::{replay, ReplayRun};
//! use graphsched::{GraphBuilder, NodeDesc};
//!
//! let wide = |n: usize| {
//!     let mut b = GraphBuilder::new();
//!     for i in 0..n {
//!         b.add_node(NodeDesc::new(format!("n{i}"), "Op", Box::new(|_| Ok(()))).output(8).estimate_ns(100)).unwrap();
//!     }
//!     b.finalize().unwrap()
//! };
//! let (batch, request) = (wide(40), wide(4));
//! let runs = [
//!     ReplayRun { graph: &batch, arrival_ns: 0, priority: RunPriority::Normal },
//!     ReplayRun { graph: &request, arrival_ns: 50, priority: RunPriority::High },
//! ];
//! let times = replay(&runs, 2, Default::default()).unwrap();
//! assert_eq!(times[1].end_ns, 300, "the request's 4 nodes go first once threads free up");
//! assert_eq!(times[0].end_ns, 2200);
//! ```

use std::cmp::Reverse;
use std::collections::BinaryHeap;

use crate::error::{err, ErrorKind, Result};
use crate::graph::Graph;
use crate::sched::{Policy, Priorities, RunPriority, BANDS};

/// One run to replay.
#[derive(Clone, Copy)]
pub struct ReplayRun<'g> {
    /// What it runs (its estimates are the durations).
    pub graph: &'g Graph,
    /// When it arrives, in virtual nanoseconds.
    pub arrival_ns: u64,
    /// How urgent it is against the others.
    pub priority: RunPriority,
}

/// When a replayed run started its first node and ended its last, in virtual nanoseconds.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct RunTimes {
    /// Its first node's start (its arrival for a run without operators).
    pub start_ns: u64,
    /// Its last node's end; `end_ns - arrival_ns` is its latency.
    pub end_ns: u64,
}

/// Replays `runs` on `threads` threads under `policy`; the times of each, in the order given.
/// Fails with [`ErrorKind::InvalidArgument`] for 0 threads.
pub fn replay(runs: &[ReplayRun<'_>], threads: usize, policy: Policy) -> Result<Vec<RunTimes>> {
    if threads == 0 {
        return err(ErrorKind::InvalidArgument, "threads must be at least 1");
    }
    let prios: Vec<std::sync::Arc<Priorities>> = runs.iter().map(|r| r.graph.priorities()).collect();
    let mut pending: Vec<Vec<u32>> = prios.iter().map(|p| p.initial_pending.clone()).collect();
    let mut left: Vec<usize> = runs
        .iter()
        .map(|r| r.graph.node_count() - r.graph.graph_inputs().len())
        .collect();
    let mut times: Vec<RunTimes> = runs
        .iter()
        .map(|r| RunTimes {
            start_ns: u64::MAX,
            end_ns: r.arrival_ns,
        })
        .collect();
    // Ready nodes: (band, readiness sequence, run, node), least first.
    let mut ready: BinaryHeap<Reverse<(usize, u64, usize, u32)>> = BinaryHeap::new();
    // Events: (time, what: 0 = a node ends, 1 = a run arrives, run, node).
    let mut events: BinaryHeap<Reverse<(u64, u8, usize, u32)>> = BinaryHeap::new();
    for (i, r) in runs.iter().enumerate() {
        events.push(Reverse((r.arrival_ns, 1, i, 0)));
    }
    let band = |run: usize, node: u32| {
        prios[run].band(policy, node)
            + match runs[run].priority {
                RunPriority::High => 0,
                RunPriority::Normal => BANDS,
            }
    };
    let (mut free, mut seq) = (threads, 0u64);
    while let Some(Reverse((now, what, run, node))) = events.pop() {
        let mut batch = vec![(what, run, node)];
        while let Some(&Reverse((t, w, r, n))) = events.peek() {
            if t != now {
                break;
            }
            events.pop();
            batch.push((w, r, n));
        }
        for (what, run, node) in batch {
            if what == 1 {
                for &root in &prios[run].roots {
                    seq += 1;
                    ready.push(Reverse((band(run, root), seq, run, root)));
                }
                continue;
            }
            free += 1;
            left[run] -= 1;
            times[run].end_ns = times[run].end_ns.max(now);
            for &s in prios[run].successors(node) {
                pending[run][s as usize] -= 1;
                if pending[run][s as usize] == 0 {
                    seq += 1;
                    ready.push(Reverse((band(run, s), seq, run, s)));
                }
            }
        }
        while free > 0 {
            let Some(Reverse((_, _, run, node))) = ready.pop() else {
                break;
            };
            free -= 1;
            times[run].start_ns = times[run].start_ns.min(now);
            events.push(Reverse((now + prios[run].weight[node as usize], 0, run, node)));
        }
    }
    debug_assert!(left.iter().all(|&l| l == 0), "every node of every run ran");
    for (t, r) in times.iter_mut().zip(runs) {
        if t.start_ns == u64::MAX {
            t.start_ns = r.arrival_ns;
        }
    }
    Ok(times)
}
