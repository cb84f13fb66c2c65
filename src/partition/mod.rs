//! Partitions: which nodes an engine should run together as one call.
//!
//! Engines whose calls have a fixed cost (a session run, a GPU launch, a remote call) pay it on
//! every node; on graphs of short nodes the calls can cost more than the kernels. A partition
//! groups the operator nodes into **clusters**, each to be run as one call: the cluster reads
//! what its members read from outside it, writes what is read outside it (or is a graph output),
//! and keeps the rest to itself.
//!
//! The model. A node's duration (given, or learned by runs) is one call: the call's fixed cost
//! plus the node's own work. A cluster costs one call plus its members' work, so merging k nodes
//! saves k - 1 calls, and gives up whatever overlap the schedule had between them. Its internal
//! values live for the cluster's whole time, all at once (any engine can keep within that), and
//! count against the memory limit. Clusters are **convex**: no path leaves a cluster and comes
//! back, so the cluster graph is a DAG that graphsched can run like any other.
//!
//! The choice is the simulator's ([`crate::sim`], the runs' own policy and admission): every
//! partition the search keeps simulates, as a cluster graph on the given threads and under the
//! memory limit, no slower than the one before it, and the search starts from the graph itself
//! (one node a cluster). So the result is never slower in simulation than the graph
//! unpartitioned, and it fits the limit whenever the graph does with each node costing at least
//! one call; at or above the graph's max-live bound (`Graph::lowest_live_order`), always, since
//! admission completes there in any order. How the search goes:
//! `partition::search`; how a partition becomes a graph: `partition::quotient`.
//!
//! This layer reads `graph`, `sched` (the estimates) and `sim`; nothing below knows about it.
//!
//! ```
//! use graphsched::partition::{partition, PartitionOptions};
//! use graphsched::{GraphBuilder, NodeDesc, ValueRef};
//!
//! // A chain of four 1 us nodes, each call costing 0.8 us of it: one call does the same work.
//! let mut b = GraphBuilder::new();
//! let mut last = b.add_input("x", 64).unwrap();
//! for i in 0..4 {
//!     let n = NodeDesc::new(format!("n{i}"), "Op", Box::new(|_| Ok(()))).input(last).output(64).estimate_ns(1000);
//!     last = ValueRef::new(b.add_node(n).unwrap(), 0);
//! }
//! b.mark_output(last).unwrap();
//! let g = b.finalize().unwrap();
//! let p = partition(&g, &PartitionOptions { call_cost_ns: 800, ..Default::default() }).unwrap();
//! assert_eq!(p.clusters(), [vec![1, 2, 3, 4]]);
//! assert_eq!((p.before().makespan_ns, p.after().makespan_ns), (4000, 1600));
//! ```

mod quotient;
mod search;

use crate::error::{err, ErrorKind, Result};
use crate::graph::Graph;
use crate::sched::Policy;
use crate::sim::{SimOptions, SimResult};
use quotient::{cluster_map, members, Costs};

/// What a partition is chosen for.
#[derive(Clone, Copy, Debug)]
pub struct PartitionOptions {
    /// The fixed cost of one call, in nanoseconds; each node's duration includes one.
    pub call_cost_ns: u64,
    /// Threads the clusters will run on; at least 1.
    pub threads: usize,
    /// The policy the runs will use.
    pub policy: Policy,
    /// Most bytes of values live at once, clusters' internal values included; 0: no limit.
    pub memory_limit_bytes: u64,
}

impl Default for PartitionOptions {
    /// Calls that cost nothing, one thread, the runs' default policy, no memory limit.
    fn default() -> Self {
        PartitionOptions {
            call_cost_ns: 0,
            threads: 1,
            policy: Policy::default(),
            memory_limit_bytes: 0,
        }
    }
}

impl PartitionOptions {
    fn sim(&self) -> SimOptions {
        SimOptions {
            threads: self.threads,
            policy: self.policy,
            window: 0,
            memory_limit_bytes: self.memory_limit_bytes,
        }
    }
}

/// A partition of a graph's operator nodes into convex clusters, with the simulated run before
/// and after.
#[derive(Clone, Debug)]
pub struct Partition {
    clusters: Vec<Vec<u32>>,
    cluster_of: Vec<u32>,
    before: SimResult,
    after: SimResult,
    evaluations: u64,
}

impl Partition {
    /// The clusters, as node ids in topological order, in an order that runs them: every cluster
    /// after each cluster it reads from (among those free to go, the one whose first node comes
    /// first in the graph's topological order).
    pub fn clusters(&self) -> &[Vec<u32>] {
        &self.clusters
    }

    /// The cluster of `node` (an index into [`clusters`](Self::clusters)); `None` for graph
    /// inputs and ids out of range.
    pub fn cluster_of(&self, node: u32) -> Option<usize> {
        match self.cluster_of.get(node as usize) {
            Some(&c) if c != u32::MAX => Some(c as usize),
            _ => None,
        }
    }

    /// The graph unpartitioned, simulated with one call a node.
    pub fn before(&self) -> SimResult {
        self.before
    }

    /// The clusters, simulated with one call a cluster.
    pub fn after(&self) -> SimResult {
        self.after
    }

    /// How many partitions the search simulated.
    pub fn evaluations(&self) -> u64 {
        self.evaluations
    }
}

/// Proposes a partition of `graph` for calls costing `options.call_cost_ns`, on
/// `options.threads` threads, under `options.memory_limit_bytes` (see the module docs), from the
/// graph's current estimates.
///
/// Fails with [`ErrorKind::InvalidArgument`] for 0 threads or a graph whose inputs are sized per
/// run (partition a graph of fixed sizes), and with [`ErrorKind::MemoryLimit`] when the graph
/// itself cannot run under the limit.
pub fn partition(graph: &Graph, options: &PartitionOptions) -> Result<Partition> {
    check(graph, options)?;
    let costs = Costs::of(graph, options.call_cost_ns);
    let singletons: Vec<u32> = singletons(graph);
    let clusters = graph.node_count() - graph.graph_inputs().len();
    let sim = options.sim();
    let start = match search::evaluate(graph, singletons, clusters, &costs, &sim)? {
        Some(start) => start,
        // Singletons are convex: the limit is what failed. The graph's own simulation says why,
        // naming the node; if it fits, the calls' cost is what changed the order.
        None => {
            return crate::sim::simulate(graph, &sim).and_then(|_| unfit_with_calls(graph, options));
        }
    };
    let before = start.sim;
    let found = search::search(graph, start, &costs, &sim)?;
    Ok(finish(
        graph,
        found.best.cluster_of,
        found.best.clusters,
        before,
        found.best.sim,
        found.evaluations,
    ))
}

/// Simulates a given partition (clusters of node ids, as [`Partition::clusters`] gives them,
/// in any order): the cluster graph on `options`' threads and limit, one call a cluster.
/// Fails with [`ErrorKind::InvalidArgument`] when the clusters do not cover every operator node
/// exactly once or are not convex, and with [`ErrorKind::MemoryLimit`] when they do not fit.
/// An empty list stands for one node a cluster.
pub fn simulate_partition(graph: &Graph, clusters: &[Vec<u32>], options: &PartitionOptions) -> Result<SimResult> {
    check(graph, options)?;
    let (cluster_of, count) = if clusters.is_empty() {
        let s = singletons(graph);
        let count = s.iter().filter(|&&c| c != u32::MAX).count();
        (s, count)
    } else {
        (cluster_map(graph, clusters)?, clusters.len())
    };
    let costs = Costs::of(graph, options.call_cost_ns);
    let q = match quotient::quotient(graph, &cluster_of, count, &costs) {
        Err(e) if e.kind() == ErrorKind::Cycle => {
            return err(
                ErrorKind::InvalidArgument,
                format!("the clusters are not convex: a path leaves one and comes back ({e})"),
            )
        }
        other => other?,
    };
    quotient::simulate_quotient(&q, &options.sim(), None)
}

fn check(graph: &Graph, options: &PartitionOptions) -> Result<()> {
    if options.threads == 0 {
        return err(ErrorKind::InvalidArgument, "threads must be at least 1");
    }
    if graph.has_dynamic_inputs() {
        return err(
            ErrorKind::InvalidArgument,
            format!(
                "{} has inputs sized per run; partition a graph whose sizes are fixed",
                graph.describe()
            ),
        );
    }
    Ok(())
}

/// The refusal of a graph that fits the limit with its own durations but not once each node
/// costs at least one call: its nodes then run in another order, which admission may take below
/// the graph's max-live bound.
fn unfit_with_calls<T>(graph: &Graph, options: &PartitionOptions) -> Result<T> {
    err(
        ErrorKind::MemoryLimit,
        format!(
            "{} does not fit the {}-byte memory limit once each node costs at least one call of {} ns \
             (its nodes then run in another order); at or above its max-live bound, {} bytes, it always fits",
            graph.describe(),
            options.memory_limit_bytes,
            options.call_cost_ns,
            graph.lowest_live_order().peak
        ),
    )
}

/// One cluster per operator node, numbered in node id order.
fn singletons(graph: &Graph) -> Vec<u32> {
    let mut next = 0;
    (0..graph.node_count() as u32)
        .map(|v| {
            if graph.is_graph_input(v) {
                u32::MAX
            } else {
                next += 1;
                next - 1
            }
        })
        .collect()
}

/// The partition as callers see it: clusters in topological order, members too.
///
/// Sorting clusters by their first nodes is not enough: with edges a -> c and b -> c, {a, c} is
/// convex and comes before {b} by its first node, yet it reads b's output. So clusters go in
/// Kahn's order over the cluster graph, ties by first node.
fn finish(
    graph: &Graph,
    cluster_of: Vec<u32>,
    count: usize,
    before: SimResult,
    after: SimResult,
    evaluations: u64,
) -> Partition {
    let pos = graph.topological_positions();
    let mut clusters = members(&cluster_of, count);
    for list in &mut clusters {
        list.sort_unstable_by_key(|&v| pos[v as usize]);
    }
    let clusters = run_order(graph, &cluster_of, clusters, pos);
    let mut renumbered = vec![u32::MAX; cluster_of.len()];
    for (c, list) in clusters.iter().enumerate() {
        for &v in list {
            renumbered[v as usize] = c as u32;
        }
    }
    Partition {
        clusters,
        cluster_of: renumbered,
        before,
        after,
        evaluations,
    }
}

/// `clusters` (members sorted by `pos`) in Kahn's order over the cluster graph that
/// `cluster_of` makes, ties by the position of their first members.
fn run_order(graph: &Graph, cluster_of: &[u32], clusters: Vec<Vec<u32>>, pos: &[u32]) -> Vec<Vec<u32>> {
    use std::cmp::Reverse;
    use std::collections::BinaryHeap;
    let mut waiting = vec![0usize; clusters.len()];
    let crossing = |v: u32| {
        let from = cluster_of[v as usize];
        graph
            .successors(v)
            .iter()
            .map(move |&w| cluster_of[w as usize])
            .filter(move |&to| to != from && to != u32::MAX)
    };
    for list in &clusters {
        for &v in list {
            crossing(v).for_each(|to| waiting[to as usize] += 1);
        }
    }
    let mut free: BinaryHeap<_> = (0..clusters.len())
        .filter(|&c| waiting[c] == 0)
        .map(|c| Reverse((pos[clusters[c][0] as usize], c)))
        .collect();
    let mut order = Vec::with_capacity(clusters.len());
    while let Some(Reverse((_, c))) = free.pop() {
        order.push(c);
        for &v in &clusters[c] {
            for to in crossing(v) {
                waiting[to as usize] -= 1;
                if waiting[to as usize] == 0 {
                    free.push(Reverse((pos[clusters[to as usize][0] as usize], to as usize)));
                }
            }
        }
    }
    // A convex partition's cluster graph is acyclic (`quotient` refused it otherwise).
    debug_assert_eq!(order.len(), clusters.len(), "the cluster graph has a cycle");
    let mut slots: Vec<Option<Vec<u32>>> = clusters.into_iter().map(Some).collect();
    order.into_iter().filter_map(|c| slots[c].take()).collect()
}

#[cfg(test)]
mod tests;
