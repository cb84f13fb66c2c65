//! Scheduled plans: lifetimes from one simulated schedule, made safe for every real one.
//!
//! A parallel-safe plan lets two values share bytes only when the graph orders them. Most pairs
//! the graph leaves unordered never overlap in the schedule the executor follows, so a scheduled
//! plan takes lifetimes from that schedule instead: the simulator's, on `threads` threads, with
//! the estimates and the runs' default policy. Each start and finish is a position in one
//! sequence of events, and a value lives from its producer's start to its last reader's finish
//! (its producer's finish when nobody reads it; the end for graph outputs). Values whose
//! lifetimes do not overlap may share bytes, exactly as along a sequential order.
//!
//! Real durations differ from the estimates, so the plan adds an *ordering constraint* for every
//! sharing the graph does not already make safe: when value `a` and a later value `b` overlap in
//! the arena, each reader of `a` (its producer, if nobody reads it) must finish before `b`'s
//! producer starts. The executor honours the constraints as edges (the plan's
//! [`Priorities`]), so a run on the plan is safe whatever the durations.
//! In the schedule every constraint goes from an earlier event to a later one, so they keep the
//! graph acyclic, and the schedule itself satisfies them: the simulated makespan with them is
//! the one without them, up to ties (`makespan_ns` against `free_makespan_ns`).

use std::sync::Arc;

use crate::error::Result;
use crate::graph::memory::readers;
use crate::graph::reach::Ancestors;
use crate::graph::Graph;
use crate::sched::Priorities;
use crate::sim::{simulate_with, SimOptions};

/// What a scheduled plan was made for and what it adds to the graph.
#[derive(Clone)]
pub struct Scheduled {
    /// Threads of the schedule.
    pub threads: usize,
    /// Ordering constraints (from, to): `to` starts only after `from` has finished.
    pub constraints: Vec<(u32, u32)>,
    /// Simulated makespan with the constraints, and without them (the schedule planned for).
    pub makespan_ns: u64,
    /// Simulated makespan of the schedule the plan was made for, without constraints.
    pub free_makespan_ns: u64,
    /// The graph's priorities when the plan was made, with the constraints as edges: what runs
    /// on the plan follow.
    pub priorities: Arc<Priorities>,
}

impl std::fmt::Debug for Scheduled {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Scheduled")
            .field("threads", &self.threads)
            .field("constraints", &self.constraints.len())
            .field("makespan_ns", &self.makespan_ns)
            .field("free_makespan_ns", &self.free_makespan_ns)
            .finish()
    }
}

/// One simulated schedule: every node's start and finish events, and the order of the starts.
pub(super) struct Schedule {
    /// Per node: positions of its start and finish in the schedule's event sequence (graph
    /// inputs `[0, 0]`).
    pub events: Vec<[u32; 2]>,
    /// Every node in start order, graph inputs first: a topological order, of the graph and of
    /// the constraints.
    pub order: Vec<u32>,
    pub makespan_ns: u64,
}

impl Schedule {
    /// The simulator's schedule of `graph` on `threads` threads, no window or memory limit.
    pub(super) fn simulate(graph: &Graph, prio: &Priorities, threads: usize) -> Result<Schedule> {
        let mut events = Vec::new();
        let options = SimOptions {
            threads,
            ..SimOptions::default()
        };
        let makespan_ns = simulate_with(graph, prio, &options, Some(&mut events))?.makespan_ns;
        let mut order: Vec<u32> = (0..graph.node_count() as u32).collect();
        order.sort_by_key(|&v| (!graph.is_graph_input(v), events[v as usize][0]));
        Ok(Schedule {
            events,
            order,
            makespan_ns,
        })
    }

    /// First and last event at which value `v` is live (inclusive; `u32::MAX` for outputs).
    pub(super) fn lifetime(&self, graph: &Graph, v: u32) -> (u32, u32) {
        let producer = graph.value_producer(v) as usize;
        let start = self.events[producer][0];
        if graph.is_graph_output(v) {
            return (start, u32::MAX);
        }
        let end = readers(graph, v)
            .iter()
            .map(|&r| self.events[r as usize][1])
            .max()
            .unwrap_or(self.events[producer][1]);
        (start, end)
    }
}

/// The ordering constraints that make a placement safe in every order: for values sharing
/// bytes (`offsets` and `bytes` per value, `same_block` for in-place chains, which share on
/// purpose), each reader of the earlier one (by `lifetimes`, which must not overlap) before the
/// later one's producer, unless the graph (`reach`) orders them already.
pub(super) fn constraints(
    graph: &Graph,
    reach: &Ancestors,
    lifetimes: &[(u32, u32)],
    offsets: &[Option<u64>],
    bytes: impl Fn(u32) -> u64,
    same_block: impl Fn(u32, u32) -> bool,
) -> Vec<(u32, u32)> {
    let mut placed: Vec<u32> = (0..offsets.len() as u32)
        .filter(|&v| offsets[v as usize].is_some())
        .collect();
    placed.sort_by_key(|&v| offsets[v as usize]);
    // The nodes whose finish ends each placed value's life: its readers, else its producer.
    let ends: Vec<Vec<u32>> = placed
        .iter()
        .map(|&v| match readers(graph, v) {
            r if r.is_empty() => vec![graph.value_producer(v)],
            r => r,
        })
        .collect();
    let mut edges = Vec::new();
    for (i, &a) in placed.iter().enumerate() {
        let end = offsets[a as usize].unwrap() + bytes(a);
        // Sorted by offset: the values overlapping `a` from above are the ones that follow it
        // and start below its end.
        // Pairs sharing bytes: as many as the square of the values in the worst case (a chain
        // whose every other value sits at offset 0), each a few bit tests.
        let overlapping = placed[i + 1..]
            .iter()
            .take_while(|&&b| offsets[b as usize].unwrap() < end);
        for (j, &b) in (i + 1..).zip(overlapping) {
            if bytes(b) == 0 || bytes(a) == 0 || same_block(a, b) {
                continue;
            }
            let (x, y) = (lifetimes[a as usize], lifetimes[b as usize]);
            let (first, then) = if x.1 < y.0 { (i, b) } else { (j, a) };
            debug_assert!(
                x.1 < y.0 || y.1 < x.0,
                "the placement keeps overlapping lifetimes apart"
            );
            let producer = graph.value_producer(then);
            for &r in &ends[first] {
                if !reach.before(r, producer) {
                    edges.push((r, producer));
                }
            }
        }
    }
    edges.sort_unstable();
    edges.dedup();
    edges
}

#[cfg(test)]
mod tests {
    use std::sync::Arc;

    use crate::graph::{GraphBuilder, NodeDesc, ValueRef};
    use crate::plan::{Mode, Plan};

    /// Two chains, one estimated long and one short, planned for one thread: the short chain
    /// reuses the long one's block, which is safe only with the constraint.
    #[test]
    fn the_verifier_needs_the_constraints() {
        let mut b = GraphBuilder::new();
        let op = |name: &str, ns| {
            NodeDesc::new(name, "Op", Box::new(|_| Ok(())))
                .output(1024)
                .estimate_ns(ns)
        };
        let a1 = b.add_node(op("a1", 1000)).unwrap();
        let a2 = b.add_node(op("a2", 1000).input(ValueRef::new(a1, 0))).unwrap();
        let b1 = b.add_node(op("b1", 1)).unwrap();
        let b2 = b.add_node(op("b2", 1).input(ValueRef::new(b1, 0))).unwrap();
        for n in [a2, b2] {
            b.mark_output(ValueRef::new(n, 0)).unwrap();
        }
        let graph = Arc::new(b.finalize().unwrap());
        let mut plan = Plan::new(&graph, Mode::Scheduled { threads: 1 }).unwrap();
        plan.verify().unwrap();
        assert_eq!(plan.arena_bytes(), 3 * 1024, "a1's block goes to b1");
        let scheduled = plan.scheduled.as_mut().unwrap();
        assert_eq!(scheduled.constraints, [(a2, b1)]);
        scheduled.priorities = Arc::new(graph.priorities().constrained(&[]));
        let e = plan.verify().unwrap_err();
        assert!(e.message().contains("share bytes"), "{e}");
        // An order that runs b1 before a2 breaks the constraint it needs.
        let mut plan = Plan::new(&graph, Mode::Scheduled { threads: 1 }).unwrap();
        let (i, j) = (
            plan.order.iter().position(|&v| v == a2).unwrap(),
            plan.order.iter().position(|&v| v == b1).unwrap(),
        );
        plan.order.swap(i, j);
        let e = plan.verify().unwrap_err();
        assert!(e.message().contains("runs node 'b1' before 'a2'"), "{e}");
        let e = Plan::new(&graph, Mode::Scheduled { threads: 0 }).unwrap_err();
        assert_eq!(e.message(), "a scheduled plan needs at least 1 thread");
    }
}
