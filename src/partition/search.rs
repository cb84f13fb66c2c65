//! The search: merges kept only when the simulator says they help.
//!
//! 1. **Chains.** A node whose values only one node reads, and that node reads values of no
//!    other operator node, can never overlap with it: the pair becomes one call at no cost in
//!    parallelism. All such pairs merge at once (kept only if the simulation agrees).
//! 2. **Greedy merges, in passes** (after Sarkar's edge zeroing, *Partitioning and Scheduling
//!    Parallel Programs for Multiprocessors*, 1989, with a saved call in place of a zeroed edge).
//!    The candidates are the pairs of clusters joined by an edge of the cluster graph, and the
//!    pairs that run one after the other on one thread of the current simulated schedule (so
//!    that independent nodes the schedule already serializes can share a call, which edges alone
//!    never merge: IOS's stages, Ding et al., MLSys 2021, group independent operators the same
//!    way). Cheapest pair first: merging small clusters gives up the least. A pair is skipped
//!    when merging it would make the cluster graph cyclic, or when the longest path through the
//!    merged cluster alone would already pass the current makespan; otherwise the merged
//!    partition is simulated and kept if its makespan is shorter, or equal with a call saved
//!    (under a memory limit, only if it also fits). Passes repeat until one keeps nothing.
//!
//! Every partition kept simulates no slower than the one before it, so the result is never
//! slower than the graph unpartitioned, whatever the call cost.

use std::collections::HashSet;

use super::quotient::{quotient, simulate_quotient, Costs, Quotient};
use crate::error::{ErrorKind, Result};
use crate::graph::Graph;
use crate::sim::{SimOptions, SimResult};

/// Most passes of greedy merges.
const MAX_PASSES: usize = 8;

/// A partition and what it simulates to.
pub(super) struct Candidate {
    /// Cluster per node (`u32::MAX` for graph inputs), dense from 0.
    pub(super) cluster_of: Vec<u32>,
    pub(super) clusters: usize,
    pub(super) sim: SimResult,
    q: Quotient,
    /// Each cluster node's start and finish, as positions in one sequence of events.
    events: Vec<[u32; 2]>,
}

/// Simulates the partition `cluster_of`; `None` when it does not fit the memory limit or is not
/// convex.
pub(super) fn evaluate(
    graph: &Graph,
    cluster_of: Vec<u32>,
    clusters: usize,
    costs: &Costs,
    options: &SimOptions,
) -> Result<Option<Candidate>> {
    let q = match quotient(graph, &cluster_of, clusters, costs) {
        Ok(q) => q,
        Err(e) if e.kind() == ErrorKind::Cycle => return Ok(None),
        Err(e) => return Err(e),
    };
    let mut events = Vec::new();
    match simulate_quotient(&q, options, Some(&mut events)) {
        Ok(sim) => Ok(Some(Candidate {
            cluster_of,
            clusters,
            sim,
            q,
            events,
        })),
        Err(e) if e.kind() == ErrorKind::MemoryLimit => Ok(None),
        Err(e) => Err(e),
    }
}

/// The search's outcome: the best partition and how many partitions were simulated.
pub(super) struct Found {
    pub(super) best: Candidate,
    pub(super) evaluations: u64,
}

/// Searches from `start` (which must fit): chains, then greedy passes.
pub(super) fn search(graph: &Graph, start: Candidate, costs: &Costs, options: &SimOptions) -> Result<Found> {
    let mut evaluations = 1u64;
    let mut best = start;
    let chained = chain_clusters(graph, &best.cluster_of);
    if chained.1 < best.clusters {
        evaluations += 1;
        if let Some(c) = evaluate(graph, chained.0, chained.1, costs, options)? {
            if better(&c, &best, costs) {
                best = c;
            }
        }
    }
    for _ in 0..MAX_PASSES {
        let mut kept = false;
        for (a, b) in candidates(&best) {
            // Candidates name clusters by a member node: clusters merge as the pass goes on.
            let (ca, cb) = (best.cluster_of[a as usize], best.cluster_of[b as usize]);
            if ca == cb || !worth_trying(&best, ca, cb, costs) {
                continue;
            }
            let (cluster_of, clusters) = merged(&best.cluster_of, ca, cb);
            evaluations += 1;
            if let Some(c) = evaluate(graph, cluster_of, clusters, costs, options)? {
                if better(&c, &best, costs) {
                    best = c;
                    kept = true;
                }
            }
        }
        if !kept {
            break;
        }
    }
    Ok(Found { best, evaluations })
}

/// Whether `c` should replace `best`: shorter, or as short with fewer calls when calls cost.
fn better(c: &Candidate, best: &Candidate, costs: &Costs) -> bool {
    c.sim.makespan_ns < best.sim.makespan_ns
        || (c.sim.makespan_ns == best.sim.makespan_ns && costs.call_ns > 0 && c.clusters < best.clusters)
}

/// The partition with clusters `a` and `b` merged, ids made dense again.
fn merged(cluster_of: &[u32], a: u32, b: u32) -> (Vec<u32>, usize) {
    let (keep, gone) = (a.min(b), a.max(b));
    let mut out = cluster_of.to_vec();
    let mut clusters = 0;
    for c in out.iter_mut().filter(|c| **c != u32::MAX) {
        if *c == gone {
            *c = keep;
        } else if *c > gone {
            *c -= 1;
        }
        clusters = clusters.max(*c as usize + 1);
    }
    (out, clusters)
}

/// Pairs (a member of each) worth simulating merged: clusters joined by an edge of the cluster
/// graph, and clusters that run one after the other on one thread of the simulated schedule;
/// cheapest pair first.
fn candidates(best: &Candidate) -> Vec<(u32, u32)> {
    let q = &best.q;
    let member = first_members(&best.cluster_of, best.clusters);
    let cluster_at = cluster_at(q, best.clusters);
    let cost = |c: u32| q.graph.estimate_ns(q.node_of[c as usize]).unwrap_or(0);
    let mut pairs: HashSet<(u32, u32)> = HashSet::new();
    for c in 0..best.clusters as u32 {
        for &s in q.graph.successors(q.node_of[c as usize]) {
            let d = cluster_at[s as usize];
            if d != u32::MAX && d != c {
                pairs.insert((c.min(d), c.max(d)));
            }
        }
    }
    for run in thread_runs(&best.events, &cluster_at, best.sim.nodes_run as usize) {
        for w in run.windows(2) {
            pairs.insert((w[0].min(w[1]), w[0].max(w[1])));
        }
    }
    let mut pairs: Vec<(u32, u32)> = pairs.into_iter().collect();
    pairs.sort_unstable_by_key(|&(a, b)| (cost(a).saturating_add(cost(b)), a, b));
    pairs
        .into_iter()
        .map(|(a, b)| (member[a as usize], member[b as usize]))
        .collect()
}

/// A member node of each cluster.
fn first_members(cluster_of: &[u32], clusters: usize) -> Vec<u32> {
    let mut member = vec![u32::MAX; clusters];
    for (node, &c) in cluster_of.iter().enumerate() {
        if c != u32::MAX && member[c as usize] == u32::MAX {
            member[c as usize] = node as u32;
        }
    }
    member
}

/// Cluster of each node of the cluster graph (`u32::MAX` for its graph inputs).
fn cluster_at(q: &Quotient, clusters: usize) -> Vec<u32> {
    let mut at = vec![u32::MAX; q.graph.node_count()];
    for c in 0..clusters {
        at[q.node_of[c] as usize] = c as u32;
    }
    at
}

/// The clusters each thread of the simulated schedule ran, in order. Threads are handed out as
/// the executor's continuations would: the thread freed last takes the next start.
fn thread_runs(events: &[[u32; 2]], cluster_at: &[u32], started: usize) -> Vec<Vec<u32>> {
    let mut timeline: Vec<(u32, bool, u32)> = Vec::with_capacity(2 * started);
    for (node, &[start, finish]) in events.iter().enumerate() {
        if cluster_at[node] != u32::MAX && start > 0 {
            timeline.push((start, true, node as u32));
            timeline.push((finish, false, node as u32));
        }
    }
    timeline.sort_unstable();
    let mut runs: Vec<Vec<u32>> = Vec::new();
    let mut free: Vec<usize> = Vec::new();
    let mut on = vec![usize::MAX; cluster_at.len()];
    for (_, is_start, node) in timeline {
        if is_start {
            let t = free.pop().unwrap_or_else(|| {
                runs.push(Vec::new());
                runs.len() - 1
            });
            on[node as usize] = t;
            runs[t].push(cluster_at[node as usize]);
        } else {
            free.push(on[node as usize]);
        }
    }
    runs
}

/// Whether merging clusters `a` and `b` of `best` can keep the cluster graph acyclic and its
/// longest path within the current makespan.
fn worth_trying(best: &Candidate, a: u32, b: u32, costs: &Costs) -> bool {
    let q = &best.q;
    let (na, nb) = (q.node_of[a as usize], q.node_of[b as usize]);
    let prio = q.graph.priorities();
    let (wa, wb) = (prio.weight[na as usize], prio.weight[nb as usize]);
    let merged_ns = (wa + wb).saturating_sub(costs.call_ns);
    // The merged cluster starts no earlier than either member could, and what follows it is at
    // least what follows either (minima: one member's levels may count the other).
    let into = prio.top_level[na as usize].min(prio.top_level[nb as usize]);
    let after = (prio.bottom_level[na as usize] - wa).min(prio.bottom_level[nb as usize] - wb);
    if into + merged_ns + after > best.sim.makespan_ns {
        return false;
    }
    let pos = q.graph.topological_positions();
    let (from, to) = if pos[na as usize] < pos[nb as usize] {
        (na, nb)
    } else {
        (nb, na)
    };
    !reaches_indirectly(&q.graph, pos, from, to)
}

/// Whether a path of two edges or more leads from `from` to `to`: merging the two would then
/// put a cycle in the cluster graph.
fn reaches_indirectly(g: &Graph, pos: &[u32], from: u32, to: u32) -> bool {
    let limit = pos[to as usize];
    let mut seen = HashSet::new();
    let mut stack: Vec<u32> = g.successors(from).iter().copied().filter(|&s| s != to).collect();
    while let Some(v) = stack.pop() {
        if pos[v as usize] >= limit || !seen.insert(v) {
            continue;
        }
        for &s in g.successors(v) {
            if s == to {
                return true;
            }
            stack.push(s);
        }
    }
    false
}

/// `cluster_of` with every chain link merged: a cluster whose values only one other cluster
/// reads, when that cluster reads from no other one.
fn chain_clusters(graph: &Graph, cluster_of: &[u32]) -> (Vec<u32>, usize) {
    let n = graph.node_count();
    let clusters = cluster_of
        .iter()
        .filter(|&&c| c != u32::MAX)
        .map(|&c| c as usize + 1)
        .max()
        .unwrap_or(0);
    // Per cluster: the one cluster reading it / read by it, u32::MAX for none, MANY for more.
    const MANY: u32 = u32::MAX - 1;
    let mut reader = vec![u32::MAX; clusters];
    let mut source = vec![u32::MAX; clusters];
    let note = |slot: &mut u32, c: u32| {
        *slot = match *slot {
            u32::MAX => c,
            s if s == c => c,
            _ => MANY,
        }
    };
    for node in 0..n as u32 {
        let c = cluster_of[node as usize];
        if c == u32::MAX {
            continue;
        }
        for &v in graph.node_inputs(node) {
            let p = cluster_of[graph.value_producer(v) as usize];
            if p != u32::MAX && p != c {
                note(&mut reader[p as usize], c);
                note(&mut source[c as usize], p);
            }
        }
    }
    // Union-find over the links.
    let mut parent: Vec<u32> = (0..clusters as u32).collect();
    fn root(parent: &mut [u32], mut c: u32) -> u32 {
        while parent[c as usize] != c {
            parent[c as usize] = parent[parent[c as usize] as usize];
            c = parent[c as usize];
        }
        c
    }
    for (c, &r) in reader.iter().enumerate() {
        if r < MANY && source[r as usize] == c as u32 {
            let (x, y) = (root(&mut parent, c as u32), root(&mut parent, r));
            parent[x.max(y) as usize] = x.min(y);
        }
    }
    let mut dense = vec![u32::MAX; clusters];
    let mut next = 0u32;
    let mut out = cluster_of.to_vec();
    for c in out.iter_mut().filter(|c| **c != u32::MAX) {
        let r = root(&mut parent, *c) as usize;
        if dense[r] == u32::MAX {
            dense[r] = next;
            next += 1;
        }
        *c = dense[r];
    }
    (out, next as usize)
}
