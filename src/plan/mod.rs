//! Static memory plans: every statically sized value of a graph gets a fixed offset in one arena,
//! computed once, so repeated runs allocate nothing per value.
//!
//! Placement starts greedy by size with best fit (as TFLite's arena planner, "Efficient Memory
//! Management for Deep Neural Net Inference", 2020): values are placed largest first, each in the
//! tightest gap left between the already placed values it *conflicts* with, or above them all.
//! Three more greedy orders compete with it, and where none reaches the lower bound (the most
//! bytes live at one step) a bounded search over placement orders goes on (`plan::place`): a plan is
//! never larger than greedy by size, and the same graph always gets the same plan.
//! Two modes decide what conflicts:
//! - [`Mode::Sequential`]: lifetimes are intervals of one fixed order (the run follows it on one
//!   thread); two values conflict when their intervals overlap.
//! - [`Mode::ParallelSafe`]: two values may share bytes only when every consumer of one is an
//!   ancestor of the producer of the other in the graph's partial order, so any order an executor
//!   picks is safe. This needs reachability, kept as one ancestor bitset per node.
//!
//! Invariants, which [`Plan::verify`] checks: values that may be live at once under the mode share
//! no byte (except an in-place output and the input it takes over), and every offset is a
//! multiple of [`PLAN_ALIGNMENT`]. A plan knows its graph (without keeping it alive: a graph
//! keeps plans of its own, `RunOptions::auto_plan`), and runs refuse it for any other.
//! Graph inputs live in caller memory and dynamic values come from the pool as the kernel asks;
//! neither is planned. A run follows a plan given in `RunOptions::plan`.
//!
//! ```
//! use graphsched::plan::{Mode, Order, Plan};
//! use graphsched::{GraphBuilder, NodeDesc, ValueRef};
//! use std::sync::Arc;
//!
//! // a -> b -> c, 1 KiB each: once b has run, nobody reads a, and c takes its bytes.
//! let mut g = GraphBuilder::new();
//! let node = |name: &str| NodeDesc::new(name, "Op", Box::new(|_| Ok(()))).output(1024);
//! let a = g.add_node(node("a")).unwrap();
//! let b = g.add_node(node("b").input(ValueRef::new(a, 0))).unwrap();
//! let c = g.add_node(node("c").input(ValueRef::new(b, 0))).unwrap();
//! g.mark_output(ValueRef::new(c, 0)).unwrap();
//! let graph = Arc::new(g.finalize().unwrap());
//! let plan = Plan::new(&graph, Mode::Sequential(Order::Topological)).unwrap();
//! let offset = |n| plan.offset(graph.value_index(ValueRef::new(n, 0)).unwrap());
//! assert_eq!((plan.arena_bytes(), offset(a), offset(c)), (2048, Some(0), Some(0)));
//! ```

mod place;
mod placements;
mod scheduled;

use std::sync::{Arc, Weak};

pub(crate) use placements::{place_intervals, place_parallel_safe, place_scheduled};
use scheduled::Schedule;
pub use scheduled::Scheduled;

use crate::error::{err, ErrorKind, Result};
use crate::graph::memory::{lifetime, readers, static_values, LiveOrder};
use crate::graph::reach::Ancestors;
use crate::graph::Graph;

/// Alignment of every planned value's offset (and so of its address: arenas are 64-aligned).
pub const PLAN_ALIGNMENT: usize = 16;

/// Most conflict-list entries a plan may need (see `plan::place`): 16 million, 128 MB of lists,
/// seconds of placement. Reached by graphs that keep thousands of values live at once.
pub const MAX_CONFLICT_ENTRIES: u64 = 16_000_000;

/// Largest graph a parallel-safe plan takes on: its reachability bitsets grow with the square of
/// the node count (20,000 nodes: 50 MB).
pub const MAX_PARALLEL_SAFE_NODES: usize = 20_000;

/// Which order the sequential mode follows.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub enum Order {
    /// The graph's topological order (the insertion order when that is valid).
    #[default]
    Topological,
    /// A topological order chosen to keep live bytes low: among ready nodes, the one that
    /// frees the most bytes net of what it allocates goes first; the topological order instead
    /// if that one has the lower max-live bound.
    MemoryAware,
}

/// What may share bytes: values whose lifetimes cannot overlap, as judged by one fixed order or
/// by the graph's partial order (see the module docs).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Mode {
    /// Lifetimes along one order; runs must follow it on the calling thread (no executor).
    Sequential(Order),
    /// Sharing only between values the graph's edges keep apart; any executor may run it.
    /// Costs a bitset per node, so at most [`MAX_PARALLEL_SAFE_NODES`] nodes.
    ParallelSafe,
    /// Lifetimes from the simulated schedule on `threads` threads, made safe for any executor
    /// and any durations by ordering constraints that runs on the plan follow (`plan::scheduled`).
    /// At most [`MAX_PARALLEL_SAFE_NODES`] nodes, as parallel-safe plans.
    Scheduled {
        /// Threads of the schedule planned for; at least 1.
        threads: usize,
    },
}

/// A computed plan of one graph. It knows the graph it was made for, and runs refuse it for any
/// other: its offsets mean nothing there.
#[derive(Clone, Debug)]
pub struct Plan {
    /// The graph, weakly: a graph may cache a plan of itself, which must not keep it alive.
    graph: Weak<Graph>,
    /// The graph as error messages name it.
    made_for: String,
    mode: Mode,
    /// Bytes of the arena that holds every planned value.
    arena_bytes: u64,
    /// Per value: its offset in the arena, or `None` if not planned (graph inputs, dynamic).
    offsets: Vec<Option<u64>>,
    /// The order a sequential plan was made for (every node, graph inputs included).
    order: Vec<u32>,
    /// The max-live lower bound for `order`: no placement following it needs less.
    max_live_bytes: u64,
    /// Per value: the input value whose bytes it takes over (a node's in-place pair, when the
    /// node is that input's last reader under the mode), placed at the same offset.
    alias_of: Vec<Option<u32>>,
    /// A scheduled plan's schedule, constraints and the priorities its runs follow.
    scheduled: Option<Scheduled>,
}

impl Plan {
    /// Plans `graph` in `mode`.
    /// Fails with [`ErrorKind::InvalidArgument`] for a graph with inputs of dynamic size
    /// (`refuse_dynamic_inputs`).
    pub fn new(graph: &Arc<Graph>, mode: Mode) -> Result<Plan> {
        refuse_dynamic_inputs(graph)?;
        let owner = Arc::downgrade(graph);
        let made_for = graph.describe();
        let graph: &Graph = graph;
        let n = graph.node_count();
        let values = static_values(graph);
        if !matches!(mode, Mode::Sequential(_)) && n > MAX_PARALLEL_SAFE_NODES {
            return err(
                ErrorKind::InvalidArgument,
                format!(
                    "a {} plan handles at most {MAX_PARALLEL_SAFE_NODES} nodes; this graph has {n}",
                    if mode == Mode::ParallelSafe {
                        "parallel-safe"
                    } else {
                        "scheduled"
                    }
                ),
            );
        }
        let prio = graph.priorities();
        let schedule = match mode {
            Mode::Scheduled { threads: 0 } => {
                return err(ErrorKind::InvalidArgument, "a scheduled plan needs at least 1 thread")
            }
            Mode::Scheduled { threads } => Some((threads, Schedule::simulate(graph, &prio, threads)?)),
            _ => None,
        };
        // Lifetimes along an order (the memory-aware one keeps the graph's own order when that
        // one is better), or along the schedule; positions serve the in-place rule of
        // sequential plans only.
        let (order, position, lifetimes, max_live_bytes) = match &schedule {
            Some((_, s)) => {
                let lifetimes: Vec<(u32, u32)> = values.iter().map(|&v| s.lifetime(graph, v)).collect();
                // The most bytes live at once in the schedule: no placement of it needs less.
                let sizes: Vec<u64> = values.iter().map(|&v| size(graph, v)).collect();
                let peak = place::lower_bound(&sizes, &lifetimes);
                (s.order.clone(), Vec::new(), lifetimes, peak)
            }
            None => {
                let LiveOrder {
                    order, position, peak, ..
                } = match mode {
                    Mode::Sequential(Order::MemoryAware) => graph.lowest_live_order().clone(),
                    _ => LiveOrder::of(graph, graph.topological_order().to_vec()),
                };
                let lifetimes = values.iter().map(|&v| lifetime(graph, &position, v)).collect();
                (order, position, lifetimes, peak)
            }
        };
        // Parallel-safe conflicts come from reachability; the in-place rule uses it in both
        // parallel modes, and scheduled plans need it for their constraints.
        let reach = (!matches!(mode, Mode::Sequential(_))).then(|| Ancestors::of_graph(graph));
        let by_reach = mode == Mode::ParallelSafe;
        let conflicts = |a: usize, b: usize| match &reach {
            Some(r) if by_reach => !disjoint(r, graph, values[a], values[b]),
            _ => {
                let (x, y) = (lifetimes[a], lifetimes[b]);
                x.0 <= y.1 && y.0 <= x.1
            }
        };
        // In place: an output joins the group of the input it takes over, when the node is the
        // input's last reader (in the order, or after every other reader in the partial order)
        // and the output fits. A group is placed as one block, as large as its largest member.
        let index_of: std::collections::HashMap<u32, usize> = values.iter().enumerate().map(|(i, &v)| (v, i)).collect();
        let mut alias_of = vec![None; graph.value_count()];
        // Inputs some output has taken over already: each lends its bytes to one output.
        let mut lent = vec![false; graph.value_count()];
        let mut group: Vec<usize> = (0..values.len()).collect();
        let root = |group: &[usize], mut i: usize| {
            while group[i] != i {
                i = group[i];
            }
            i
        };
        for node in 0..n as u32 {
            let Some((k, j)) = graph.in_place(node) else { continue };
            if graph.zero_output(node) {
                continue; // clearing the output would clear the input it shares bytes with
            }
            let output = graph.node_values(node).start + k;
            let Some(&input) = graph.node_inputs(node).get(j as usize) else {
                continue;
            };
            let (Some(&io), Some(&ii)) = (index_of.get(&output), index_of.get(&input)) else {
                continue;
            };
            let last_reader = readers(graph, input).iter().all(|&r| {
                r == node
                    || match &reach {
                        Some(a) => a.before(r, node),
                        None => position[r as usize] < position[node as usize],
                    }
            });
            if last_reader
                && !lent[input as usize]
                && !graph.is_graph_output(input)
                && size(graph, output) <= size(graph, input)
            {
                alias_of[output as usize] = Some(input);
                lent[input as usize] = true;
                let (ro, ri) = (root(&group, io), root(&group, ii));
                group[ro] = ri;
            }
        }
        let mut members: Vec<Vec<usize>> = vec![Vec::new(); values.len()];
        for i in 0..values.len() {
            members[root(&group, i)].push(i);
        }
        let groups: Vec<Vec<usize>> = members.into_iter().filter(|m| !m.is_empty()).collect();
        let spans: Vec<(u32, u32)> = groups
            .iter()
            .map(|m| {
                let start = m.iter().map(|&i| lifetimes[i].0).min().unwrap_or(0);
                (start, m.iter().map(|&i| lifetimes[i].1).max().unwrap_or(0))
            })
            .collect();
        let bytes: Vec<u64> = groups
            .iter()
            .map(|m| m.iter().map(|&i| aligned(size(graph, values[i]))).max().unwrap_or(0))
            .collect();
        // Groups whose spans along the order do not overlap conflict in no mode (an overlap in
        // a topological order is one in the partial order too): the cheap test first.
        let overlap = |a: usize, b: usize| spans[a].0 <= spans[b].1 && spans[b].0 <= spans[a].1;
        let clash = |a: usize, b: usize| groups[a].iter().any(|&x| groups[b].iter().any(|&y| conflicts(x, y)));
        let maybe = |a: usize, b: usize| by_reach || overlap(a, b);
        // Placement lists each group's conflicts: along an order, at most (groups x most groups
        // live at once) entries. A graph that keeps too many values live at once (100,000 side
        // by side) would take minutes and gigabytes. (Parallel-safe plans are held to
        // `MAX_PARALLEL_SAFE_NODES` instead.)
        let width = match by_reach {
            true => 0,
            false => place::lower_bound(&vec![1; groups.len()], &spans),
        };
        if groups.len() as u64 * width > MAX_CONFLICT_ENTRIES {
            return err(
                ErrorKind::InvalidArgument,
                format!(
                    "{} of this graph's values may be live at once, too many pairs to plan ({} groups): \
                     run it on the dynamic pool, which places values as they come",
                    width,
                    groups.len()
                ),
            );
        }
        let bound = place::lower_bound(&bytes, &spans);
        // Along an order (sequential or scheduled), a group's members cover one interval (an
        // in-place output starts where its input ends), so groups conflict exactly when their
        // spans overlap: a sweep lists the pairs. The parallel-safe rule asks for every pair.
        let placing = match by_reach {
            true => place::Groups::new(bytes, &maybe, &clash),
            false => place::Groups::of_intervals(bytes, &spans),
        };
        let offsets_by_group = place::place(&placing, &spans, bound, place::SEARCH_WORK);
        let mut offsets = vec![None; graph.value_count()];
        let mut arena_bytes = 0u64;
        for (g, members) in groups.iter().enumerate() {
            for &i in members {
                let v = values[i];
                offsets[v as usize] = Some(offsets_by_group[g]);
                arena_bytes = arena_bytes.max(offsets_by_group[g] + aligned(size(graph, v)));
            }
        }
        let mut plan = Plan {
            graph: owner,
            made_for,
            mode,
            arena_bytes,
            offsets,
            order,
            max_live_bytes,
            alias_of,
            scheduled: None,
        };
        if let (Some((threads, schedule)), Some(reach)) = (schedule, reach) {
            let mut by_value = vec![(0, 0); graph.value_count()];
            for (i, &v) in values.iter().enumerate() {
                by_value[v as usize] = lifetimes[i];
            }
            let constraints = scheduled::constraints(
                graph,
                &reach,
                &by_value,
                &plan.offsets,
                |v| size(graph, v),
                |a, b| plan.group_of(a) == plan.group_of(b),
            );
            let priorities = Arc::new(prio.constrained(&constraints));
            let options = crate::sim::SimOptions {
                threads,
                ..Default::default()
            };
            plan.scheduled = Some(Scheduled {
                threads,
                makespan_ns: crate::sim::simulate_with(graph, &priorities, &options, None)?.makespan_ns,
                free_makespan_ns: schedule.makespan_ns,
                constraints,
                priorities,
            });
        }
        Ok(plan)
    }

    /// A scheduled plan's schedule and constraints; `None` in the other modes.
    pub fn scheduled(&self) -> Option<&Scheduled> {
        self.scheduled.as_ref()
    }

    /// The graph this plan was made for, while it lives.
    pub fn graph(&self) -> Option<Arc<Graph>> {
        self.graph.upgrade()
    }

    /// The mode the plan was made in; it decides whether a run may use an executor.
    pub fn mode(&self) -> Mode {
        self.mode
    }

    /// Bytes of the arena that holds every planned value.
    pub fn arena_bytes(&self) -> u64 {
        self.arena_bytes
    }

    /// The max-live lower bound of the plan's order: no placement following it needs less.
    pub fn max_live_bytes(&self) -> u64 {
        self.max_live_bytes
    }

    /// The order a sequential plan was made for (every node, graph inputs included).
    pub fn order(&self) -> &[u32] {
        &self.order
    }

    /// Where value `v` lives in the arena; `None` if it is not planned (graph inputs, dynamic
    /// sizes) or out of range.
    pub fn offset(&self, v: u32) -> Option<u64> {
        self.offsets.get(v as usize).copied().flatten()
    }

    /// The input value whose bytes value `v` takes over in place, if any.
    pub fn alias_of(&self, v: u32) -> Option<u32> {
        self.alias_of.get(v as usize).copied().flatten()
    }

    /// How many values take over an input's bytes in place.
    pub fn aliases(&self) -> usize {
        self.alias_of.iter().filter(|a| a.is_some()).count()
    }

    /// Ok if this plan was made for `graph`; otherwise an `InvalidArgument` error naming both.
    pub fn check_graph(&self, graph: &Arc<Graph>) -> Result<()> {
        // The weak reference keeps the graph's allocation, so no other graph can share its address.
        if std::ptr::eq(self.graph.as_ptr(), Arc::as_ptr(graph)) {
            return Ok(());
        }
        err(
            ErrorKind::InvalidArgument,
            format!(
                "the plan was made for {} and cannot place the values of {}: make one plan per graph",
                self.made_for,
                graph.describe()
            ),
        )
    }

    /// Checks the plan: no two values that may be live at once (under the plan's mode) share a
    /// byte, and every planned offset is aligned. Returns the first violation as an error naming
    /// the values.
    pub fn verify(&self) -> Result<()> {
        let Some(owner) = self.graph.upgrade() else {
            return err(
                ErrorKind::InvalidArgument,
                format!(
                    "the plan's graph, {}, was dropped: a plan does not keep its graph alive",
                    self.made_for
                ),
            );
        };
        let graph: &Graph = &owner;
        let mut position = vec![0u32; graph.node_count()];
        for (i, &v) in self.order.iter().enumerate() {
            position[v as usize] = i as u32;
        }
        let planned: Vec<u32> = (0..graph.value_count() as u32)
            .filter(|&v| self.offsets[v as usize].is_some())
            .collect();
        // A scheduled plan's order must be a topological order of the graph with its
        // constraints: runs without an executor follow it, and the reachability below assumes it.
        if let Some(s) = &self.scheduled {
            for &u in &self.order {
                if let Some(&v) = s
                    .priorities
                    .successors(u)
                    .iter()
                    .find(|&&v| position[v as usize] <= position[u as usize])
                {
                    return err(
                        ErrorKind::InvalidArgument,
                        format!(
                            "the plan's order runs node '{}' before '{}', which must wait for it",
                            graph.node_name(v),
                            graph.node_name(u)
                        ),
                    );
                }
            }
        }
        // Parallel-safe: the graph's order; scheduled: the graph's with the constraints, which
        // the plan's start order is a topological order of.
        let reach = match (&self.mode, &self.scheduled) {
            (Mode::ParallelSafe, _) => Some(Ancestors::of_graph(graph)),
            (_, Some(s)) => Some(Ancestors::new(graph.node_count(), &self.order, |v| {
                s.priorities.successors(v)
            })),
            _ => None,
        };
        for (i, &a) in planned.iter().enumerate() {
            let oa = self.offsets[a as usize].unwrap();
            if oa % PLAN_ALIGNMENT as u64 != 0 || oa + size(graph, a) > self.arena_bytes {
                return err(
                    ErrorKind::InvalidArgument,
                    format!("value {} is misplaced at offset {oa}", describe(graph, a)),
                );
            }
            for &b in &planned[i + 1..] {
                if self.group_of(a) == self.group_of(b) {
                    continue; // in place: one takes over the other's bytes on purpose
                }
                let ob = self.offsets[b as usize].unwrap();
                let overlap = oa < ob + size(graph, b) && ob < oa + size(graph, a);
                if !overlap {
                    continue;
                }
                let conflict = match &reach {
                    Some(r) => !disjoint(r, graph, a, b),
                    None => {
                        let (x, y) = (lifetime(graph, &position, a), lifetime(graph, &position, b));
                        x.0 <= y.1 && y.0 <= x.1
                    }
                };
                if conflict {
                    return err(
                        ErrorKind::InvalidArgument,
                        format!(
                            "values {} and {} may be live at once but share bytes",
                            describe(graph, a),
                            describe(graph, b)
                        ),
                    );
                }
            }
        }
        Ok(())
    }
}

impl Plan {
    /// The value at the start of `v`'s in-place chain.
    fn group_of(&self, mut v: u32) -> u32 {
        while let Some(from) = self.alias_of[v as usize] {
            v = from;
        }
        v
    }
}

/// Refuses a graph with inputs of dynamic size, whose every run binds sizes anew: a plan fixes
/// every size. Runs of such a graph go on the graph made for their sizes
/// ([`Graph::specialize`]), which automatic plans serve. Plans and runs say it alike.
pub(crate) fn refuse_dynamic_inputs(graph: &Graph) -> Result<()> {
    match graph.has_dynamic_inputs() {
        true => err(
            ErrorKind::InvalidArgument,
            format!(
                "{} has inputs of dynamic size, and a plan fixes every size: ask for automatic plans \
                 instead (GS_RUN_AUTO_PLAN, RunOptions::auto_plan), made once per set of input sizes",
                graph.describe()
            ),
        ),
        false => Ok(()),
    }
}

fn describe(graph: &Graph, v: u32) -> String {
    let r = graph.value_ref(v);
    format!("{} of node '{}'", r.output, graph.node_name(r.node))
}

fn size(graph: &Graph, v: u32) -> u64 {
    crate::graph::memory::value_bytes(graph, v)
}

fn aligned(bytes: u64) -> u64 {
    bytes.next_multiple_of(PLAN_ALIGNMENT as u64)
}

/// Whether value `x`'s whole life ends before value `y` is produced, whatever the order.
fn ends_before(reach: &Ancestors, graph: &Graph, x: u32, y: u32) -> bool {
    if graph.is_graph_output(x) {
        return false;
    }
    let py = graph.value_producer(y);
    let readers = readers(graph, x);
    if readers.is_empty() {
        return reach.before(graph.value_producer(x), py);
    }
    readers.iter().all(|&c| reach.before(c, py))
}

/// Whether two values can never be live at once, whatever the order.
fn disjoint(reach: &Ancestors, graph: &Graph, x: u32, y: u32) -> bool {
    ends_before(reach, graph, x, y) || ends_before(reach, graph, y, x)
}

#[cfg(test)]
mod tests;
