//! Scheduling policy: which ready node should run first, and which may start under a memory limit.
//! The executor (`exec`) and the simulator (`sim`) both read it; neither decides on its own.
//!
//! Two list orders, from the estimated durations. The default, [`Policy::BottomLevel`], runs the
//! node with the longest path still ahead of it (its *bottom level*) first.
//! [`Policy::CriticalPath`] runs the node with the least *slack* first: how long it may wait
//! without stretching the critical path (0 on it). Ties go to the shorter node, then to the earlier
//! one in topological order, so no two nodes share a rank. Against the tight makespan bound
//! ([`MakespanBound`]), bottom level first was better on 164 and worse on 2 of 200 random DAGs at 2
//! threads, and as good or better on the seed pipelines and real graphs (BENCHMARKS.md, "Which
//! order"). The executor works with priority *bands*: band 0 holds the critical path, band k > 0
//! nodes whose slack (or shortfall of bottom level) is at most 2^(k - BANDS + 1) of the critical
//! path, so the bands resolve small differences finely and large ones coarsely.
//!
//! [`Graph::priorities`] gives the [`Priorities`] of the current estimates: a pure function of
//! the graph and them, immutable, shared through an `Arc`, replaced (never changed) when learned
//! durations move by more than a fifth, so a run keeps the ones it started with. Drivers read
//! [`ranks`](Priorities::ranks), [`band`](Priorities::band) and
//! [`continuation`](Priorities::continuation); [`Admission`], one per run, is the memory rule.
//!
//! ```
//! use graphsched::sched::{BoundTerm, Policy};
//! use graphsched::{GraphBuilder, NodeDesc, ValueRef};
//!
//! let op = |name: &str, ns| NodeDesc::new(name, "Op", Box::new(|_| Ok(()))).output(8).estimate_ns(ns);
//! let mut b = GraphBuilder::new();
//! let a = b.add_node(op("a", 10)).unwrap();
//! let c = b.add_node(op("c", 5)).unwrap();
//! let d = b.add_node(op("d", 20).input(ValueRef::new(a, 0))).unwrap();
//! let g = b.finalize().unwrap();
//! let p = g.priorities();
//! assert_eq!(g.critical_path(), [a, d]);
//! assert_eq!(p.ranks(Policy::BottomLevel)[c as usize], 2, "5 ns ahead of c: last");
//! assert_eq!((p.band(Policy::BottomLevel, a), p.band(Policy::BottomLevel, c)), (0, 15));
//! let two = p.makespan_bound(2);
//! assert_eq!((two.makespan_lb_ns, two.binding), (30, BoundTerm::CriticalPath));
//! assert_eq!(p.makespan_bound(1).binding, BoundTerm::Work, "35 ns on one thread");
//! ```

use crate::graph::Graph;

mod admission;
mod bound;
mod constrained;
mod estimates;
mod spread;
pub use admission::Admission;
pub use bound::{BoundTerm, MakespanBound, MAX_EXACT_NODES};
pub use estimates::{NodeKind, Sample, Staleness, DEFAULT_ESTIMATE_NS, MIN_MOVE_NS, SAMPLE_EVERY, SAMPLE_EVERY_CHEAP};
pub use spread::NODE_COST_NS;

/// Number of priority bands the executor queues by.
pub const BANDS: usize = 16;

/// How urgent a run is against the other runs on its executor: every node of a high-priority run
/// is taken before any node of a normal one, on every thread (within a run, the policy's order
/// holds). Into a shared memory budget, an urgent run enters ahead of the normal runs waiting, but
/// at most 8 in a row ahead of the oldest, so normal runs are never starved of memory; on the
/// threads they get what the urgent runs leave.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub enum RunPriority {
    /// The default.
    #[default]
    Normal,
    /// Ahead of every normal run's nodes.
    High,
}

/// How ready nodes are ordered.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub enum Policy {
    /// Critical path first (least slack), then shortest estimate.
    CriticalPath,
    /// Readiness order, no priorities: the baseline.
    Fifo,
    /// Highest bottom level first (the longest path still ahead of the node), then shortest
    /// estimate: HLFET's list order. Unlike slack, it ignores how long the path into the node was.
    /// The default: it beat critical path first on a corpus (`cargo bench -p
    /// graphsched-workloads --bench policy`).
    #[default]
    BottomLevel,
}

/// Priorities of every node of a graph under one set of estimates, all per node id and in
/// nanoseconds unless said otherwise. Immutable; runs share one through [`Graph::priorities`].
pub struct Priorities {
    /// Estimated duration of each node (0 for graph inputs).
    pub(crate) weight: Vec<u64>,
    /// Per node: thread time, all threads together ([`Graph::work_ns`]): the weight, but
    /// times its loops' width for a parallel node, and only its time on a thread for a
    /// deferring one.
    pub(crate) work: Vec<u64>,
    /// Per node: how it spends its time ([`Graph::node_kind`]).
    pub(crate) kind: Vec<NodeKind>,
    /// Longest path from the node's start to the end of the graph, the node included.
    pub(crate) bottom_level: Vec<u64>,
    /// Longest path into the node: its earliest start on unlimited threads.
    pub(crate) top_level: Vec<u64>,
    /// How much later than its top level the node may start without stretching the critical
    /// path: `critical_path_ns - top_level - bottom_level`, 0 on a longest path.
    pub(crate) slack: Vec<u64>,
    /// Length of the longest path.
    pub(crate) critical_path_ns: u64,
    /// Operator nodes of one longest path, in execution order.
    pub(crate) critical_path: Vec<u32>,
    /// Sum of every node's work ([`Priorities::work`]): what one thread takes.
    pub(crate) total_work_ns: u64,
    /// Operator nodes (graph inputs are not run).
    pub(crate) operators: u64,
    /// Some node's kernel has deferred its end, once at least (`KernelCtx::defer`).
    pub(crate) defers: bool,
    /// Some operator node's op type has not been measured by a run yet (whatever its
    /// estimate): nothing is known of how its kernels spend their time, deferring or not.
    pub(crate) unmeasured: bool,
    /// Position of each node in priority order (critical path first): lower runs first.
    pub(crate) rank: Vec<u32>,
    /// Queue band under [`Policy::CriticalPath`], below [`BANDS`]: 0 for no slack, higher for more.
    pub(crate) band: Vec<u8>,
    /// The same for [`Policy::BottomLevel`]: position in highest-bottom-level-first order, and
    /// bands by how far the bottom level falls short of the critical path.
    pub(crate) rank_by_level: Vec<u32>,
    /// Queue band under [`Policy::BottomLevel`], below [`BANDS`].
    pub(crate) band_by_level: Vec<u8>,
    /// Per node: operator inputs not yet produced at the start of a run (graph inputs are
    /// bound before it starts).
    pub(crate) initial_pending: Vec<u32>,
    /// Operator nodes ready at the start, most critical first.
    pub(crate) roots: Vec<u32>,
    /// Bytes of each node's statically sized outputs: what memory admission reserves.
    pub(crate) output_bytes: Vec<u64>,
    /// Per node: the work of its strict ancestors and of its strict descendants (empty for
    /// graphs over [`MAX_EXACT_NODES`] nodes), for [`makespan_bound`](Self::makespan_bound):
    /// computed on first use, since runs do not need it (O(n² / 64)).
    work_around: std::sync::OnceLock<(Vec<u64>, Vec<u64>)>,
    /// Consumers of each node, one per input slot as in [`Graph::successors`], most critical first.
    succ_start: Vec<u32>,
    succ: Vec<u32>,
    /// The same lists, highest bottom level first.
    succ_by_level: Vec<u32>,
    /// The learned op-type estimates these priorities were computed from.
    basis: Vec<u64>,
    /// The op types' kinds they were computed from.
    kinds_basis: Vec<NodeKind>,
}

impl Priorities {
    /// Per node: its estimated duration (0 for graph inputs).
    pub fn weight(&self) -> &[u64] {
        &self.weight
    }

    /// Per node: its thread time, all threads together ([`Graph::work_ns`]).
    pub fn work(&self) -> &[u64] {
        &self.work
    }

    /// Per node: the longest path from its start to the end of the graph, itself included.
    pub fn bottom_level(&self) -> &[u64] {
        &self.bottom_level
    }

    /// Per node: the longest path into it, its earliest start on unlimited threads.
    pub fn top_level(&self) -> &[u64] {
        &self.top_level
    }

    /// Per node: how much later than its top level it may start without stretching the
    /// critical path (0 on a longest path).
    pub fn slack(&self) -> &[u64] {
        &self.slack
    }

    /// The length of the longest path.
    pub fn critical_path_ns(&self) -> u64 {
        self.critical_path_ns
    }

    /// The operator nodes of one longest path, in execution order.
    pub fn critical_path(&self) -> &[u32] {
        &self.critical_path
    }

    /// The sum of every node's work: what one thread takes.
    pub fn total_work_ns(&self) -> u64 {
        self.total_work_ns
    }

    /// How many operator nodes the graph has (graph inputs are not run).
    pub fn operators(&self) -> u64 {
        self.operators
    }

    /// Whether some node's kernel has deferred its end, once at least.
    pub fn defers(&self) -> bool {
        self.defers
    }

    /// Whether some operator node's op type has not been measured by a run yet.
    pub fn unmeasured(&self) -> bool {
        self.unmeasured
    }

    /// Computes every figure from `g`'s current estimates: linear in nodes and edges, plus the
    /// sorts. Runs call [`Graph::priorities`] instead, which caches the result.
    pub fn compute(g: &Graph) -> Priorities {
        let n = g.node_count();
        let weight: Vec<u64> = (0..n as u32).map(|v| g.expected_ns(v)).collect();
        let work: Vec<u64> = (0..n as u32).map(|v| g.work_ns(v)).collect();
        let kind: Vec<NodeKind> = (0..n as u32).map(|v| g.node_kind(v)).collect();
        let (top_level, bottom_level) = levels(g.topological_order(), |v| g.successors(v), &weight);
        let critical_path_ns = bottom_level.iter().copied().max().unwrap_or(0);
        let slack: Vec<u64> = (0..n)
            .map(|v| critical_path_ns.saturating_sub(top_level[v] + bottom_level[v]))
            .collect();
        let position = g.topological_positions();
        // Each node's position when sorted by `key`, ties to the shorter, then the earlier node.
        // The keys are laid out beside the nodes before the sort: a sort that looked them up
        // through a closure at every comparison was most of the time a recomputation takes
        // (random500 of benches/c/run_kernels.sh: 100 us for 500 nodes, recomputed in one run
        // in nine as its kernels' estimates move).
        let ranks = |key: &dyn Fn(usize) -> u64| {
            let mut order: Vec<(u64, u64, u32, u32)> =
                (0..n).map(|v| (key(v), weight[v], position[v], v as u32)).collect();
            order.sort_unstable();
            let mut rank = vec![0u32; n];
            for (r, &(.., v)) in order.iter().enumerate() {
                rank[v as usize] = r as u32;
            }
            rank
        };
        let rank = ranks(&|v| slack[v]);
        let rank_by_level = ranks(&|v| u64::MAX - bottom_level[v]);
        let band = slack.iter().map(|&s| band_of(s, critical_path_ns)).collect();
        let band_by_level = bottom_level
            .iter()
            .map(|&bl| band_of(critical_path_ns.saturating_sub(bl), critical_path_ns))
            .collect();

        let mut succ_start = Vec::with_capacity(n + 1);
        let (mut succ, mut succ_by_level) = (Vec::new(), Vec::new());
        succ_start.push(0);
        for v in 0..n as u32 {
            let from = succ.len();
            let next = g.successors(v);
            succ.extend_from_slice(next);
            succ_by_level.extend_from_slice(next);
            if next.len() > 1 {
                succ[from..].sort_unstable_by_key(|&s| rank[s as usize]);
                succ_by_level[from..].sort_unstable_by_key(|&s| rank_by_level[s as usize]);
            }
            succ_start.push(succ.len() as u32);
        }
        let initial_pending: Vec<u32> = (0..n as u32)
            .map(|v| {
                g.node_inputs(v)
                    .iter()
                    .filter(|&&val| !g.is_graph_input(g.value_producer(val)))
                    .count() as u32
            })
            .collect();
        let mut roots: Vec<u32> = (0..n as u32)
            .filter(|&v| !g.is_graph_input(v) && initial_pending[v as usize] == 0)
            .collect();
        roots.sort_unstable_by_key(|&v| rank[v as usize]);
        let output_bytes = (0..n as u32)
            .map(|v| {
                g.node_values(v)
                    .map(|val| g.value_size(val).bytes().unwrap_or(0) as u64)
                    .sum()
            })
            .collect();
        let critical_path = critical_path(g, &weight, &top_level, &bottom_level, critical_path_ns);
        Priorities {
            critical_path,
            output_bytes,
            work_around: std::sync::OnceLock::new(),
            total_work_ns: work.iter().copied().fold(0, u64::saturating_add),
            operators: (n - g.graph_inputs().len()) as u64,
            defers: g.any_op_deferred(),
            unmeasured: (0..n as u32).any(|v| !g.is_graph_input(v) && g.learned_op_ns(g.op_index(v)) == 0),
            weight,
            work,
            kind,
            bottom_level,
            top_level,
            slack,
            critical_path_ns,
            rank,
            band,
            rank_by_level,
            band_by_level,
            initial_pending,
            roots,
            succ_start,
            succ,
            succ_by_level,
            basis: (0..g.op_type_count() as u32).map(|op| g.learned_op_ns(op)).collect(),
            kinds_basis: (0..g.op_type_count() as u32).map(|op| g.op_kind(op)).collect(),
        }
    }

    /// Each node's position in `policy`'s order (lower first); FIFO uses the critical-path order
    /// where it needs one (the memory waiting list).
    pub fn ranks(&self, policy: Policy) -> &[u32] {
        match policy {
            Policy::BottomLevel => &self.rank_by_level,
            Policy::CriticalPath | Policy::Fifo => &self.rank,
        }
    }

    /// Each node's queue band under `policy` (all 0 for FIFO: one band).
    pub fn bands(&self, policy: Policy) -> Option<&[u8]> {
        match policy {
            Policy::BottomLevel => Some(&self.band_by_level),
            Policy::CriticalPath => Some(&self.band),
            Policy::Fifo => None,
        }
    }

    /// A node's queue band under `policy` (0 for every node under FIFO: one band).
    pub fn band(&self, policy: Policy, node: u32) -> usize {
        self.bands(policy).map_or(0, |b| b[node as usize] as usize)
    }

    /// Which of the nodes that `node` just made ready (most urgent first, as
    /// [`successors_in`](Self::successors_in) lists them) the thread that ran `node` should run
    /// next without queueing it: the first, if it is in `node`'s band or a more urgent one, or
    /// else if it is more urgent than anything `queued` says may wait (the most urgent band that
    /// may hold a task; None: nothing waits). The rest are queued for any thread. FIFO keeps
    /// none: it runs in readiness order.
    ///
    /// The second case is the thread's next look at the queues, without the queues: it would
    /// find that node first anyway, so running it at once saves a push, a pop and a wake-up, and
    /// keeps it where its inputs are in cache. Along a chain or up a tree each successor has less
    /// left below it than its producer, so under [`Policy::BottomLevel`] it often falls in a less
    /// urgent band: a 2-node run forced onto 2 threads took 0.53 us where one node took 0.21, its
    /// second node queued and a sleeping thread woken every time. A node of the same band already
    /// queued came first, so the successor must be strictly more urgent.
    pub fn continuation(
        &self,
        policy: Policy,
        node: u32,
        ready: &[u32],
        queued: impl FnOnce() -> Option<usize>,
    ) -> Option<u32> {
        let &first = ready.first().filter(|_| policy != Policy::Fifo)?;
        let band = self.band(policy, first);
        (band <= self.band(policy, node) || queued().map_or(true, |q| band < q)).then_some(first)
    }

    /// What no schedule on `threads` threads can beat, under these estimates, and which term
    /// binds (see [`MakespanBound`]).
    pub fn makespan_bound(&self, threads: usize) -> MakespanBound {
        let (before, after) = self
            .work_around
            .get_or_init(|| bound::ancestor_and_descendant_work(&self.work, |v| self.successors(v)));
        if !self.kind.contains(&NodeKind::Parallel) {
            return bound::makespan_bound(
                threads,
                &self.weight,
                &self.work,
                &self.top_level,
                &self.bottom_level,
                before,
                after,
            );
        }
        // A parallel node takes at least its work over all the threads: paths are measured so.
        let p = threads.max(1) as u64;
        let path: Vec<u64> = (0..self.weight.len())
            .map(|v| match self.kind[v] {
                NodeKind::Parallel => self.work[v].div_ceil(p),
                _ => self.weight[v],
            })
            .collect();
        let order = bound::topological_order(path.len(), &|v| self.successors(v));
        let (top, bottom) = levels(&order, |v| self.successors(v), &path);
        bound::makespan_bound(threads, &path, &self.work, &top, &bottom, before, after)
    }

    /// Consumers of `node`, one per input slot, most urgent first under `policy`.
    #[inline]
    pub fn successors_in(&self, policy: Policy, node: u32) -> &[u32] {
        let range = self.succ_start[node as usize] as usize..self.succ_start[node as usize + 1] as usize;
        match policy {
            Policy::BottomLevel => &self.succ_by_level[range],
            Policy::CriticalPath | Policy::Fifo => &self.succ[range],
        }
    }

    /// Consumers of `node`, one per input slot, in critical-path order whatever the policy.
    pub fn successors(&self, node: u32) -> &[u32] {
        &self.succ[self.succ_start[node as usize] as usize..self.succ_start[node as usize + 1] as usize]
    }

    /// Whether a thread of a run on these priorities that has executed `executed` nodes should
    /// time a node of op type `op` (`Graph::op_index`): every node of an op type not measured yet, then one node in
    /// [`SAMPLE_EVERY`], or in [`SAMPLE_EVERY_CHEAP`] for op types cheaper than
    /// `CHEAP_OP_NS` when these priorities were computed. An op type
    /// measured before then costs one array read: an average never returns to 0.
    #[inline]
    pub fn should_sample_op(&self, g: &Graph, op: u32, executed: u64) -> bool {
        let basis = self.basis.get(op as usize).copied().unwrap_or(0);
        if basis == 0 && g.learned_op_ns(op) == 0 {
            return true;
        }
        let every = match basis {
            1..estimates::CHEAP_OP_NS => SAMPLE_EVERY_CHEAP,
            _ => SAMPLE_EVERY,
        };
        executed % every == 0
    }
}

/// The window rule, for runs and simulations alike: a window of `window` nodes in flight
/// (running, or pending: deferred by their kernels and not completed yet) caps a run (0: no
/// window). On `threads` threads, a window of `threads` or more caps only pending nodes, so a
/// graph whose kernels never defer runs as without one.
pub fn window_cap(window: usize) -> Option<usize> {
    (window != 0).then_some(window)
}

/// Top and bottom levels (the longest path ending before a node, and from it on, the node
/// included) under `weight`, along `order` (topological) and the consumer lists `succ`.
fn levels<'a>(order: &[u32], succ: impl Fn(u32) -> &'a [u32], weight: &[u64]) -> (Vec<u64>, Vec<u64>) {
    let n = weight.len();
    let mut top = vec![0u64; n];
    for &v in order {
        for &s in succ(v) {
            let t = top[v as usize].saturating_add(weight[v as usize]);
            top[s as usize] = top[s as usize].max(t);
        }
    }
    let mut bottom = vec![0u64; n];
    for &v in order.iter().rev() {
        let best = succ(v).iter().map(|&s| bottom[s as usize]).max().unwrap_or(0);
        bottom[v as usize] = weight[v as usize].saturating_add(best);
    }
    (top, bottom)
}

/// One longest path: from the first source on one, each step to the first successor that stays
/// on it; graph inputs left out.
fn critical_path(g: &Graph, weight: &[u64], top: &[u64], bottom: &[u64], length: u64) -> Vec<u32> {
    let mut path = Vec::new();
    let on_path = |v: usize, top_v: u64| top_v.saturating_add(bottom[v]) == length;
    let mut next = (0..g.node_count()).find(|&v| top[v] == 0 && on_path(v, 0));
    while let Some(v) = next {
        path.push(v as u32);
        let want = top[v].saturating_add(weight[v]);
        next = g
            .successors(v as u32)
            .iter()
            .map(|&s| s as usize)
            .find(|&s| top[s] == want && on_path(s, want));
    }
    path.retain(|&v| !g.is_graph_input(v));
    path
}

/// Band 0 for no slack; otherwise one band per halving of slack relative to the critical path.
fn band_of(slack: u64, critical_path_ns: u64) -> u8 {
    if slack == 0 || critical_path_ns == 0 {
        return 0;
    }
    // slack / cp in (2^-(k+1), 2^-k]  ->  band BANDS - 1 - k, at least 1.
    let ratio = critical_path_ns / slack.max(1); // >= 1
    let halvings = (u64::BITS - 1 - ratio.leading_zeros()) as usize;
    (BANDS - 1).saturating_sub(halvings).max(1) as u8
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::graph::{GraphBuilder, NodeDesc, ValueRef};

    #[test]
    fn a_successor_in_a_less_urgent_band_runs_next_only_if_nothing_more_urgent_waits() {
        // A chain a -> b -> c: under the bottom-level policy b falls in a less urgent band than
        // a, so it runs next on a's thread only if the queues hold nothing at least as urgent.
        let mut gb = GraphBuilder::new();
        let mut add = |name: &str, input: Option<u32>| {
            let d = NodeDesc::new(name, "Op", Box::new(|_| Ok(()))).output(8);
            gb.add_node(match input {
                Some(from) => d.input(ValueRef::new(from, 0)),
                None => d,
            })
            .unwrap()
        };
        let a = add("a", None);
        let b = add("b", Some(a));
        add("c", Some(b));
        let g = gb.finalize().unwrap();
        let p = g.priorities();
        let level = Policy::BottomLevel;
        let band = p.band(level, b);
        assert!(band > p.band(level, a), "b is less urgent than a");
        assert_eq!(p.continuation(level, a, &[b], || None), Some(b), "nothing waits");
        assert_eq!(
            p.continuation(level, a, &[b], || Some(band + 1)),
            Some(b),
            "only less urgent work waits"
        );
        assert_eq!(
            p.continuation(level, a, &[b], || Some(band)),
            None,
            "as urgent a task came first"
        );
        assert_eq!(
            p.continuation(level, a, &[b], || Some(0)),
            None,
            "more urgent work waits"
        );
        // On the critical path every node of a chain is in band 0: kept whatever waits.
        assert_eq!(p.continuation(Policy::CriticalPath, a, &[b], || Some(0)), Some(b));
        // FIFO runs nodes in readiness order: none is kept.
        assert_eq!(p.continuation(Policy::Fifo, a, &[b], || None), None);
        assert_eq!(p.continuation(level, a, &[], || None), None);
    }

    #[test]
    fn bands_are_finer_near_the_critical_path() {
        assert_eq!(band_of(0, 1000), 0);
        assert_eq!(band_of(1000, 1000), BANDS as u8 - 1);
        assert_eq!(band_of(500, 1000), BANDS as u8 - 2);
        assert_eq!(band_of(1, 1 << 40), 1);
        assert!(band_of(10, 1000) < band_of(100, 1000));
    }
}
