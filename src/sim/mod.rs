//! Simulated runs: the policy of [`crate::sched`] driven by a virtual clock instead of threads,
//! so that "what would 8 or 64 cores do" has a deterministic answer on any machine.
//!
//! The model mirrors a real run. A node takes its estimated duration
//! ([`Priorities::weight`](crate::sched::Priorities::weight)) and becomes ready when all its
//! operator inputs are done (graph inputs are done at time 0); whenever a thread is free, the
//! ready node the policy prefers starts. Its static outputs become live when it starts and are
//! released when their last consumer finishes, or when it finishes if nobody reads them; graph
//! outputs stay. Under a memory limit a ready node starts only if its outputs fit and the
//! executor's admission rule ([`crate::sched::Admission`]) lets it, and a less critical node that
//! may start goes ahead of one that may not. Kernels never run and nothing is allocated.
//!
//! Nodes whose kernels runs have seen split loops or defer their end ([`NodeKind`], learned per
//! op type) are modelled as they run. A **parallel** node takes every thread free when it starts
//! (its loops' helpers go ahead of queued nodes) and lasts its work
//! ([`Priorities::work`](crate::sched::Priorities::work)) divided among them. A **deferring**
//! node holds a thread for its kernel's time on it, then stays in flight, off every thread, until
//! its estimated end. A window caps nodes in flight, pending ones included; threads cap the
//! running ones.
//!
//! What holds for every result: the same graph, estimates and options give the same figures;
//! `makespan_lb_ns <= makespan_ns`; `peak_live_bytes` stays within the limit; one thread and no
//! limit take exactly the total work when no node defers.
//!
//! Cost: O((n + e) log n). Running nodes sit in a heap keyed by finish time. Ready nodes sit in a
//! min-tree over policy order (rank, or readiness sequence under FIFO) holding the bytes each one
//! needs, so "the most critical ready node that fits" is one descent even under a memory limit,
//! where a heap would have to pop and re-push the nodes that do not fit.
//!
//! ```
//! use graphsched::{simulate, GraphBuilder, NodeDesc, SimOptions};
//!
//! let mut b = GraphBuilder::new();
//! for i in 0..4 {
//!     b.add_node(NodeDesc::new(format!("n{i}"), "Op", Box::new(|_| Ok(()))).output(64).estimate_ns(10))
//!         .unwrap();
//! }
//! let g = b.finalize().unwrap();
//! let two = SimOptions { threads: 2, ..SimOptions::default() };
//! let r = simulate(&g, &two).unwrap();
//! assert_eq!((r.makespan_ns, r.makespan_lb_ns, r.peak_live_bytes), (20, 20, 128), "two waves");
//! let tight = simulate(&g, &SimOptions { memory_limit_bytes: 64, ..two }).unwrap();
//! assert_eq!((tight.makespan_ns, tight.peak_live_bytes), (40, 64), "one node at a time");
//! ```
use std::cmp::Reverse;
use std::collections::BinaryHeap;

use crate::error::{err, ErrorKind, Result};
use crate::graph::{Graph, OutputSize};
use crate::sched::{Admission, NodeKind, Policy, Priorities};

/// Kinds of events on the virtual clock, in the order they happen at one instant.
const RETURN: u8 = 0;
const FINISH: u8 = 1;

mod ready;
mod replay;
use ready::{ReadySet, FITS_ANY};
pub use replay::{replay, ReplayRun, RunTimes};

/// What to simulate: the knobs of a real run that change its schedule.
#[derive(Clone, Copy, Debug)]
pub struct SimOptions {
    /// Worker threads; at least 1.
    pub threads: usize,
    /// Which ready node starts first; the default is the runs' default, `Policy::default()`.
    pub policy: Policy,
    /// Most nodes in flight at once, running or pending (a deferring node after its kernel
    /// returned); 0: no cap but the threads on running nodes. A window as wide as the threads or
    /// wider caps only pending ones.
    pub window: usize,
    /// Most bytes of values live at once; 0 means no limit.
    pub memory_limit_bytes: u64,
}

impl Default for SimOptions {
    /// One thread, the default policy, no window or memory limit: the serial baseline.
    fn default() -> Self {
        SimOptions {
            threads: 1,
            policy: Policy::default(),
            window: 0,
            memory_limit_bytes: 0,
        }
    }
}

/// Figures of one simulated run, in virtual nanoseconds. (C: `gs_sim_result`)
#[repr(C)]
#[derive(Clone, Copy, Debug, Default, PartialEq)]
pub struct SimResult {
    /// When the last node finished.
    pub makespan_ns: u64,
    /// What no schedule can beat: the critical path, work / threads, and for every node its
    /// ancestors' work / threads plus its longest path (and the mirror), whichever is largest
    /// (src/sched/bound.rs).
    pub makespan_lb_ns: u64,
    /// Longest path of estimates, a parallel node's counting its work divided among the threads
    /// (so it depends on `threads` once runs have seen a kernel split its loops).
    pub critical_path_ns: u64,
    /// Thread time of all nodes ([`Priorities::work`](crate::sched::Priorities::work)): their
    /// estimates, unless runs have seen their kernels split loops or defer.
    pub work_ns: u64,
    /// Most bytes values held at once (graph inputs, which the caller owns, excluded).
    pub peak_live_bytes: u64,
    /// Operator nodes executed.
    pub nodes_run: u64,
    /// work / (makespan * threads): the share of thread time spent running nodes.
    pub utilization: f64,
}

/// Simulates one run of `graph` under `options` with the graph's current estimates. Reads the
/// graph only: safe from any thread, alongside real runs of it.
///
/// Fails with [`ErrorKind::InvalidArgument`] when `threads` is 0, and with
/// [`ErrorKind::MemoryLimit`] when a node's outputs can never fit: larger than the limit, or
/// blocked by live values while nothing is running that could free them.
pub fn simulate(graph: &Graph, options: &SimOptions) -> Result<SimResult> {
    simulate_with(graph, &graph.priorities(), options, None)
}

/// [`simulate`] on given priorities (a scheduled plan's, whose successor lists carry its
/// ordering constraints), recording in `events`, if given, each node's start and finish as
/// positions in one sequence of every start and finish the simulation makes: a total order
/// that puts a node's finish before the start of anything it made ready. Graph inputs keep
/// `[0, 0]`; other nodes' positions start at 1.
pub(crate) fn simulate_with(
    graph: &Graph,
    prio: &Priorities,
    options: &SimOptions,
    mut events: Option<&mut Vec<[u32; 2]>>,
) -> Result<SimResult> {
    if options.threads == 0 {
        return err(ErrorKind::InvalidArgument, "threads must be at least 1");
    }
    if let Some(e) = events.as_deref_mut() {
        e.clear();
        e.resize(graph.node_count(), [0, 0]);
    }
    let mut event = 0u32;
    let mut record = |node: u32, which: usize| {
        event += 1;
        if let Some(e) = events.as_deref_mut() {
            e[node as usize][which] = event;
        }
    };
    let n = graph.node_count();
    let limit = options.memory_limit_bytes;
    // Nodes in flight (running or pending) at once; threads bound the running ones.
    let cap = crate::sched::window_cap(options.window).unwrap_or(usize::MAX);
    let value_bytes = |v: u32| match graph.value_size(v) {
        OutputSize::Bytes(b) => b as u64,
        OutputSize::Dynamic => 0,
    };
    // The executor's admission reserves exactly these bytes.
    let need = |node: u32| prio.output_bytes[node as usize];

    // A node larger than the limit blocks the run whatever else happens: name it rather than
    // whichever node the simulation would get stuck on first.
    if limit > 0 {
        for &node in graph.topological_order() {
            let bytes = need(node);
            if !graph.is_graph_input(node) && bytes > limit {
                return err(
                    ErrorKind::MemoryLimit,
                    format!(
                        "node {} needs {bytes} bytes for its outputs, more than the whole {limit}-byte memory limit",
                        graph.node_label(node)
                    ),
                );
            }
        }
    }

    let mut ready = ReadySet::new(graph, prio, options.policy);
    let mut pending = prio.initial_pending.clone();
    // Consumer slots still to finish per value; graph inputs' entries are never touched.
    let mut remaining: Vec<u32> = (0..graph.value_count() as u32).map(|v| graph.consumers(v)).collect();
    // (time, what, node): a node's end (`FINISH`), or a deferring node's kernel returning its
    // thread (`RETURN`, before the node's end); ties go in node id order.
    let mut running: BinaryHeap<Reverse<(u64, u8, u32)>> = BinaryHeap::with_capacity(options.threads.min(n));
    // Threads each running node holds, and the threads free.
    let mut held = vec![0usize; n];
    let (mut free, mut in_flight) = (options.threads, 0usize);
    let mut batch = prio.roots.clone();
    ready.add(&mut batch, prio.ranks(options.policy), need);

    // The executor's admission rule (the banker's, over a safe completion order), as it runs.
    let mut admission = (limit > 0).then(|| Admission::new(graph, limit, true));
    let mut refused: Vec<(usize, u32, u64)> = Vec::new();
    let (mut now, mut live, mut peak, mut nodes_run) = (0u64, 0u64, 0u64, 0u64);
    loop {
        // Start what the policy prefers while threads are free and outputs fit; nodes the
        // admission rule turns away wait, as they do in a real run.
        while free > 0 && in_flight < cap {
            let budget = if limit == 0 { FITS_ANY } else { limit - live };
            let Some(slot) = ready.first_fitting(budget) else { break };
            let (node, bytes) = ready.take(slot);
            if admission.as_mut().is_some_and(|a| !a.try_admit(node, bytes, live)) {
                refused.push((slot, node, bytes));
                continue;
            }
            live = live.saturating_add(bytes);
            peak = peak.max(live);
            let (weight, work) = (prio.weight[node as usize], prio.work[node as usize]);
            let threads = match prio.kind[node as usize] {
                NodeKind::Serial => 1,
                // Its loops take every thread free now, helpers going ahead of queued nodes.
                NodeKind::Parallel => free,
                NodeKind::Deferring => {
                    running.push(Reverse((now.saturating_add(work), RETURN, node)));
                    1
                }
            };
            let duration = match prio.kind[node as usize] {
                NodeKind::Parallel => work.div_ceil(threads as u64),
                _ => weight,
            };
            held[node as usize] = threads;
            free -= threads;
            in_flight += 1;
            running.push(Reverse((now.saturating_add(duration), FINISH, node)));
            record(node, 0);
            nodes_run += 1;
        }
        for (slot, node, bytes) in refused.drain(..) {
            ready.put_back(slot, node, bytes);
        }
        let Some(&Reverse((next, _, _))) = running.peek() else {
            break;
        };
        // Everything finishing at the same instant completes before anything new starts.
        now = next;
        while let Some(&Reverse((t, what, node))) = running.peek() {
            if t != now {
                break;
            }
            running.pop();
            // A deferring node's thread is free once its kernel returns; other nodes' at their end.
            free += std::mem::take(&mut held[node as usize]);
            if what == RETURN {
                continue;
            }
            in_flight -= 1;
            record(node, 1);
            let mut release = |v: u32| {
                if !graph.is_graph_output(v) {
                    live -= value_bytes(v);
                    if let Some(a) = admission.as_mut() {
                        a.release(graph.value_producer(v), value_bytes(v));
                    }
                }
            };
            for v in graph.node_values(node) {
                if remaining[v as usize] == 0 {
                    release(v);
                }
            }
            for &v in graph.node_inputs(node) {
                if graph.is_graph_input(graph.value_producer(v)) {
                    continue;
                }
                remaining[v as usize] -= 1;
                if remaining[v as usize] == 0 {
                    release(v);
                }
            }
            for &s in prio.successors(node) {
                pending[s as usize] -= 1;
                if pending[s as usize] == 0 {
                    batch.push(s);
                }
            }
        }
        ready.add(&mut batch, prio.ranks(options.policy), need);
    }

    // Nothing runs: either every node ran, or the memory limit holds the rest back.
    if let Some(slot) = ready.first_fitting(FITS_ANY) {
        let (node, bytes) = ready.take(slot);
        return err(
            ErrorKind::MemoryLimit,
            format!(
                "node {} needs {bytes} bytes for its outputs, but {live} of the {limit}-byte memory limit are live \
                 and nothing else is running to free them",
                graph.node_label(node)
            ),
        );
    }
    debug_assert_eq!(
        nodes_run as usize,
        n - graph.graph_inputs().len(),
        "every operator node ran"
    );

    let threads = options.threads as u64;
    // The bound's critical path: a parallel node's work divided among the threads, so that it is
    // no longer than the makespan.
    let bound = prio.makespan_bound(options.threads);
    let (work_ns, critical_path_ns) = (prio.total_work_ns, bound.critical_path_ns);
    Ok(SimResult {
        makespan_ns: now,
        makespan_lb_ns: bound.makespan_lb_ns,
        critical_path_ns,
        work_ns,
        peak_live_bytes: peak,
        nodes_run,
        utilization: if now == 0 {
            1.0
        } else {
            work_ns as f64 / (now as f64 * threads as f64)
        },
    })
}

#[cfg(test)]
mod tests;
