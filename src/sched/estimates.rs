//! What the scheduler assumes each node takes, and what runs teach it.
//!
//! A node's expected duration is the caller's estimate if it gave one, else what runs have
//! measured for its op type, else [`DEFAULT_ESTIMATE_NS`]. Runs sample kernel durations
//! ([`Priorities::should_sample_op`]) and fold them into a moving average per op type
//! ([`Graph::learn`]); the [`Priorities`] and the figures of [`Graph::info`] follow the current
//! estimates: at once for an op type measured for the first time, and when an average has moved
//! by more than a fifth (and by at least [`MIN_MOVE_NS`], and by more than its op type's noise:
//! `Graph::learned_op_dev`) once a thousand times the last computation's time has passed since
//! it (`RECOMPUTE_SHARE`).
//!
//! The state lives with the graph (runs of the same graph share what they learn), in the slot
//! [`Graph`] keeps for the scheduler, so that `graph` itself knows nothing of scheduling.

use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use super::Priorities;
use crate::graph::{Annex, Graph, GraphInfo};

/// Duration assumed for a node without an estimate, until runs have measured its op type.
pub const DEFAULT_ESTIMATE_NS: u64 = 1_000;

/// Smallest move of an op type's average that makes the priorities stale: below the executor's
/// own cost per node (100-200 ns), a difference in estimates changes no good order, and kernels
/// that short jitter by more than a fifth from run to run. Recomputing costs O(n log n) per run.
pub const MIN_MOVE_NS: u64 = 250;

/// A run measures one kernel call in this many (and every call of an op type not measured yet):
/// reading the clock twice per node would cost more than the smallest kernels.
pub const SAMPLE_EVERY: u64 = 8;

/// Op types whose average is below this are measured eight times less often
/// ([`SAMPLE_EVERY_CHEAP`]): two clock readings (about 50 ns here) would be a few percent of
/// their time, and their estimates barely change an order (see [`MIN_MOVE_NS`]).
pub(super) const CHEAP_OP_NS: u64 = 2_000;

/// How often a kernel of a cheap op type (below `CHEAP_OP_NS`) is measured: one call in this
/// many.
pub const SAMPLE_EVERY_CHEAP: u64 = 64;

/// The priorities a graph's runs follow, and what it took to compute them.
struct Cached {
    prio: Arc<Priorities>,
    /// `samples` when they were last found current.
    checked: u64,
    /// When they were computed, and how long that took: a recompute for a drift waits until
    /// [`RECOMPUTE_SHARE`] times that has passed.
    at: Instant,
    cost: Duration,
}

/// A recompute for estimates that moved ([`Staleness::Moved`]) waits until this many times what
/// the last computation took has passed since it, so that recomputing takes at most about a
/// thousandth of the time, however noisy the kernels. One op type of kernels of 0.1-20 us on 500
/// nodes (benches/c/run_kernels.sh's random500): a sampled kernel of 10-20 us moves the average
/// 2-4x, so that it moved past any fair bound on one run in ten, and recomputing (50-100 us) took
/// 1% of the runs' time. Something new (`Staleness::New`) recomputes at once.
const RECOMPUTE_SHARE: u32 = 1000;

/// The sample count [`Graph::current_priorities`] gives priorities kept while a move waits: no
/// count of learned samples equals it, so that whoever keeps them asks again.
const NOT_CURRENT: u64 = u64::MAX;

/// The scheduler's per-graph state.
struct Learned {
    /// Per op type: an exponential moving average of measured durations, in ns; 0 until the
    /// first, at least 1 after (so 0 always means "nothing learned yet").
    /// Relaxed: each is a self-contained number and no other memory is published through it;
    /// a lost update between racing runs only delays learning.
    op_ns: Vec<AtomicU64>,
    /// Per op type: an exponential moving average (weight 1/8) of how far each measured
    /// duration was from `op_ns` before it was folded in, in ns: the op type's noise. An
    /// average of weight 1/8 wanders by about a quarter of the samples' spread on its own, so a
    /// move smaller than this is noise, not news (`Priorities::is_stale`). Relaxed, as `op_ns`.
    op_dev: Vec<AtomicU64>,
    /// Per op type, for kernels that split their work (`KernelCtx::parallel_for`): a moving
    /// average of the threads their loops ran on, in sixteenths (0: never measured in a loop).
    op_width: Vec<AtomicU64>,
    /// Per op type, once a kernel of it deferred its end (`KernelCtx::defer`): a moving average
    /// of the time its kernels held their thread (a call that did not defer: all of its time);
    /// 0 while none has deferred.
    op_thread_ns: Vec<AtomicU64>,
    /// Per op type: a kernel of it has deferred its end, in any call, sampled or not
    /// (`Graph::note_deferral`). Set before `samples` moves (Release there), so a run that sees
    /// the new count sees the flag.
    op_deferred: Vec<AtomicBool>,
    /// Priorities for the current estimates, computed on first use and again when they move,
    /// with the count of `samples` when they were last found current: while no sample has been
    /// folded in since, they need no check against the estimates.
    priorities: Mutex<Option<Cached>>,
    /// Samples folded in so far. Bumped (Release) after the estimates it counts; read (Acquire)
    /// before the estimates are, so a sample folded meanwhile makes the next run check again.
    samples: AtomicU64,
}

/// How a node spends its time, as runs have seen its op type's kernels: before any run, and
/// unless its kernels split loops or defer, [`Serial`](NodeKind::Serial).
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub enum NodeKind {
    /// On one thread from start to end.
    #[default]
    Serial,
    /// Its kernel splits loops over the executor's threads (`KernelCtx::parallel_for`): its work
    /// divides among the threads free when it starts.
    Parallel,
    /// Its kernel defers its end (`KernelCtx::defer`), holding its thread for less than half
    /// of its time on average: it holds a thread only until the kernel returns, then stays in
    /// flight, off every thread, until its completion.
    Deferring,
}

/// One measured kernel call.
#[derive(Clone, Copy, Debug)]
pub struct Sample {
    /// From kernel start to the node's end (its completion, if it deferred).
    pub ns: u64,
    /// For a deferred node: how long the kernel held its thread.
    pub thread_ns: Option<u64>,
    /// The most threads one of its parallel loops ran on (1: none, or not split).
    pub width: u32,
}

impl Default for Sample {
    fn default() -> Self {
        Sample {
            ns: 0,
            thread_ns: None,
            width: 1,
        }
    }
}

/// One step of a moving average (weight 1/8); 0 means "nothing yet", so it stays at least 1.
fn fold(slot: &AtomicU64, x: u64) {
    let old = slot.load(Ordering::Relaxed);
    let new = match old {
        0 => x.max(1),
        _ => (old - old / 8 + x / 8).max(1),
    };
    slot.store(new, Ordering::Relaxed);
}

fn learned(g: &Graph) -> &Learned {
    g.annex(Annex::Scheduling, || Learned {
        op_ns: (0..g.op_type_count()).map(|_| AtomicU64::new(0)).collect(),
        op_dev: (0..g.op_type_count()).map(|_| AtomicU64::new(0)).collect(),
        op_width: (0..g.op_type_count()).map(|_| AtomicU64::new(0)).collect(),
        op_thread_ns: (0..g.op_type_count()).map(|_| AtomicU64::new(0)).collect(),
        op_deferred: (0..g.op_type_count()).map(|_| AtomicBool::new(false)).collect(),
        priorities: Mutex::new(None),
        samples: AtomicU64::new(0),
    })
}

impl Graph {
    /// The duration the scheduler assumes for a node: the caller's estimate, else what runs have
    /// learned for its op type, else [`DEFAULT_ESTIMATE_NS`]; 0 for graph inputs.
    pub fn expected_ns(&self, node: u32) -> u64 {
        if self.is_graph_input(node) {
            return 0;
        }
        self.estimate_ns(node)
            .unwrap_or_else(|| match self.learned_op_ns(self.op_index(node)) {
                0 => DEFAULT_ESTIMATE_NS,
                learned => learned,
            })
    }

    /// What runs have learned an op type takes (0: nothing yet).
    pub fn learned_op_ns(&self, op: u32) -> u64 {
        learned(self)
            .op_ns
            .get(op as usize)
            .map_or(0, |a| a.load(Ordering::Relaxed))
    }

    /// How far an op type's measured durations fall from their average, on average (0: not
    /// known yet): the noise its average moves by without its kernels changing.
    pub fn learned_op_dev(&self, op: u32) -> u64 {
        learned(self)
            .op_dev
            .get(op as usize)
            .map_or(0, |a| a.load(Ordering::Relaxed))
    }

    /// Folds one measured duration of `node` into its op type's moving average (weight 1/8).
    pub fn learn(&self, node: u32, ns: u64) {
        self.learn_sample(
            node,
            Sample {
                ns,
                ..Sample::default()
            },
        );
    }

    /// Folds one measured kernel call of `node` into its op type's moving averages.
    pub fn learn_sample(&self, node: u32, sample: Sample) {
        let l = learned(self);
        let op = self.op_index(node) as usize;
        let Some(slot) = l.op_ns.get(op) else { return };
        let before = slot.load(Ordering::Relaxed);
        if before != 0 {
            fold(&l.op_dev[op], sample.ns.abs_diff(before));
        }
        fold(slot, sample.ns);
        if sample.width > 1 || l.op_width[op].load(Ordering::Relaxed) != 0 {
            fold(&l.op_width[op], u64::from(sample.width.max(1)) * 16);
        }
        // Once an op type has deferred, every sample tells how long it held its thread (all of
        // its time, if it did not defer this time): a kernel that defers only sometimes, or no
        // longer, moves back towards serial.
        if sample.thread_ns.is_some() || l.op_thread_ns[op].load(Ordering::Relaxed) != 0 {
            fold(
                &l.op_thread_ns[op],
                sample.thread_ns.unwrap_or(sample.ns).min(sample.ns),
            );
        }
        l.samples.fetch_add(1, Ordering::Release);
    }

    /// How many samples runs have folded into the learned estimates: unchanged, the estimates
    /// are as they were.
    pub fn learned_samples(&self) -> u64 {
        learned(self).samples.load(Ordering::Acquire)
    }

    /// Whether a kernel of op type `op` has ever deferred its end (`KernelCtx::defer`).
    pub fn op_has_deferred(&self, op: u32) -> bool {
        learned(self)
            .op_deferred
            .get(op as usize)
            .is_some_and(|d| d.load(Ordering::Relaxed))
    }

    /// Whether a kernel of any op type has ever deferred its end.
    pub fn any_op_deferred(&self) -> bool {
        learned(self).op_deferred.iter().any(|d| d.load(Ordering::Relaxed))
    }

    /// Records that `node`'s kernel deferred its end, on every deferral (not only the sampled
    /// calls): the first one of its op type makes the priorities stale, and runs of the graph
    /// keep the executor's threads from then on (`sched::spread`).
    pub fn note_deferral(&self, node: u32) {
        let l = learned(self);
        let Some(flag) = l.op_deferred.get(self.op_index(node) as usize) else {
            return;
        };
        if !flag.load(Ordering::Relaxed) {
            flag.store(true, Ordering::Relaxed);
            // Release: a run that reads the new count (Acquire) rechecks its priorities and sees
            // the flag.
            l.samples.fetch_add(1, Ordering::Release);
        }
    }

    /// How runs have seen an op type's kernels spend their time.
    pub fn op_kind(&self, op: u32) -> NodeKind {
        let l = learned(self);
        let get = |v: &[AtomicU64]| v.get(op as usize).map_or(0, |a| a.load(Ordering::Relaxed));
        let thread_ns = get(&l.op_thread_ns);
        if thread_ns != 0 && thread_ns < get(&l.op_ns) / 2 {
            // Holds its thread for less than half its time: the rest is worth modelling apart.
            NodeKind::Deferring
        } else if get(&l.op_width) > 16 + 8 {
            // More than one and a half threads on average: a loop that really splits.
            NodeKind::Parallel
        } else {
            NodeKind::Serial
        }
    }

    /// How `node` spends its time (its op type's [`NodeKind`]); graph inputs are serial.
    pub fn node_kind(&self, node: u32) -> NodeKind {
        match self.is_graph_input(node) {
            true => NodeKind::Serial,
            false => self.op_kind(self.op_index(node)),
        }
    }

    /// The thread time a node costs, all threads together: its expected duration, times the
    /// threads its loops use for a parallel node, or only the time its kernel keeps a thread
    /// for a deferring one.
    pub fn work_ns(&self, node: u32) -> u64 {
        let ns = self.expected_ns(node);
        let l = learned(self);
        let op = self.op_index(node) as usize;
        match self.node_kind(node) {
            NodeKind::Serial => ns,
            NodeKind::Parallel => ns.saturating_mul(l.op_width[op].load(Ordering::Relaxed)) / 16,
            NodeKind::Deferring => ns.min(l.op_thread_ns[op].load(Ordering::Relaxed)),
        }
    }

    /// The scheduling priorities for the current estimates, recomputed when they have moved.
    pub fn priorities(&self) -> Arc<Priorities> {
        self.current_priorities().0
    }

    /// [`priorities`](Self::priorities), with the count of learned samples they are current
    /// for: while [`learned_samples`](Self::learned_samples) still returns it, they are.
    pub(crate) fn current_priorities(&self) -> (Arc<Priorities>, u64) {
        let mut cached = learned(self).priorities.lock().unwrap_or_else(|e| e.into_inner());
        let samples = self.learned_samples();
        if let Some(c) = &mut *cached {
            // Nothing learned since they were last current: most runs of graphs of cheap
            // kernels, which sample one call in 64.
            if c.checked == samples {
                return (c.prio.clone(), samples);
            }
            match c.prio.staleness(self) {
                Staleness::Fresh => {
                    c.checked = samples;
                    return (c.prio.clone(), samples);
                }
                // Not current: the next run checks again, even one that kept them in its
                // arrays and learned nothing since (or never learns: frozen estimates).
                Staleness::Moved if c.at.elapsed() < c.cost * RECOMPUTE_SHARE => return (c.prio.clone(), NOT_CURRENT),
                _ => {}
            }
        }
        let at = Instant::now();
        let prio = Arc::new(Priorities::compute(self));
        *cached = Some(Cached {
            prio: prio.clone(),
            checked: samples,
            at,
            cost: at.elapsed(),
        });
        (prio, samples)
    }

    /// Makes the cached priorities look as if computing them took `cost`: zero, and the next
    /// check of a move recomputes them; an hour, and a move waits (tests of that rule).
    #[cfg(test)]
    pub(crate) fn set_priorities_cost(&self, cost: Duration) {
        let mut cached = learned(self).priorities.lock().unwrap_or_else(|e| e.into_inner());
        if let Some(c) = &mut *cached {
            c.cost = cost;
        }
    }

    /// Figures about the graph: its structure, and its critical path and total work under the
    /// current estimates (the ones the scheduler follows).
    pub fn info(&self) -> GraphInfo {
        let p = self.priorities();
        GraphInfo {
            critical_path_nodes: p.critical_path.len() as u64,
            critical_path_ns: p.critical_path_ns,
            total_work_ns: p.total_work_ns,
            ..self.structure()
        }
    }

    /// Operator nodes of one longest path under the current estimates, in execution order: the
    /// path the scheduler puts first.
    pub fn critical_path(&self) -> Vec<u32> {
        self.priorities().critical_path.clone()
    }
}

/// How far a graph's learned estimates have moved from those its priorities were computed
/// from ([`Priorities::staleness`]).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Staleness {
    /// Not enough to change an order.
    Fresh,
    /// An average moved by more than a fifth and more than its op type's noise: worth a
    /// recompute once that costs little beside the runs.
    Moved,
    /// Something not known before: an op type measured for the first time, or of another kind
    /// (its kernels split their work, or deferred their end). Recomputed at once.
    New,
}

impl Priorities {
    /// Whether learned estimates have moved since these were computed ([`staleness`](Self::staleness)
    /// is not [`Staleness::Fresh`]).
    pub fn is_stale(&self, g: &Graph) -> bool {
        self.staleness(g) != Staleness::Fresh
    }

    /// How far learned estimates have moved since these were computed.
    /// - [`New`](Staleness::New): an op type measured for the first time, or whose kind
    ///   changed (its kernels split their work, or deferred their end).
    /// - [`Moved`](Staleness::Moved): an average moved by more than a fifth, by at least
    ///   [`MIN_MOVE_NS`] and by more than its noise: its samples' mean deviation from the
    ///   average (`Graph::learned_op_dev`), capped at the old average.
    ///
    /// The noise keeps an op type of widely spread durations (one type for kernels of 0.1 to 20
    /// us) from looking moved on nearly every run: its average (weight 1/8) wanders by about a
    /// quarter of the samples' spread on its own, so a move past their mean deviation is mostly
    /// news. The cap makes a real change of such kernels by 2x or more show all the same (and a
    /// single sample of 9 times the average or more). For steady kernels the deviation is
    /// small and the fifth decides (a step from 1 to 2 us shows after 3 samples either way).
    /// How soon a move is acted on is the graph's choice ([`Graph::priorities`]).
    pub fn staleness(&self, g: &Graph) -> Staleness {
        let kinds_moved = self
            .kinds_basis
            .iter()
            .enumerate()
            .any(|(op, &k)| g.op_kind(op as u32) != k);
        if kinds_moved || (!self.defers && g.any_op_deferred()) {
            return Staleness::New;
        }
        let mut staleness = Staleness::Fresh;
        for (op, &old) in self.basis.iter().enumerate() {
            let new = g.learned_op_ns(op as u32);
            if old == 0 && new != 0 {
                return Staleness::New;
            }
            let moved = new.abs_diff(old);
            // The noise allowed for is at most the old average.
            let noise = g.learned_op_dev(op as u32).min(old);
            if moved * 5 > old && moved >= MIN_MOVE_NS && moved > noise {
                staleness = Staleness::Moved;
            }
        }
        staleness
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::graph::{GraphBuilder, NodeDesc};
    use std::sync::Arc;

    /// Adds a node of op type `op` that does nothing, with one 8-byte output.
    fn no_op(b: &mut GraphBuilder, name: &str, op: &str) -> u32 {
        b.add_node(NodeDesc::new(name, op, Box::new(|_| Ok(()))).output(8))
            .unwrap()
    }

    /// Whether `g` recomputes its priorities (replacing `old`) once the wait for a move is over.
    fn recomputed_once_due(g: &Graph, old: &Arc<Priorities>) -> bool {
        g.set_priorities_cost(std::time::Duration::ZERO);
        !Arc::ptr_eq(old, &g.priorities())
    }

    #[test]
    fn priorities_follow_real_moves_of_the_estimates_not_jitter() {
        let mut b = GraphBuilder::new();
        let n = no_op(&mut b, "n", "Op");
        let g = b.finalize().unwrap();
        let first = g.priorities();
        g.learn(n, 100);
        assert_eq!(first.staleness(&g), Staleness::New);
        let learned = g.priorities();
        assert!(!Arc::ptr_eq(&first, &learned), "a first measurement counts at once");
        g.learn(n, 400); // 100 -> 138: a third more, but 38 ns
        assert_eq!(learned.staleness(&g), Staleness::Fresh, "jitter of a tiny kernel");
        assert!(Arc::ptr_eq(&learned, &g.priorities()));
        for _ in 0..8 {
            g.learn(n, 10_000);
        }
        assert_eq!(learned.staleness(&g), Staleness::Moved, "a real move");
        // Recomputed once a thousand times the last computation's time has passed.
        assert!(recomputed_once_due(&g, &learned), "a real move, recomputed");
    }

    #[test]
    fn a_noisy_op_type_recomputes_on_news_not_on_its_noise() {
        let mut b = GraphBuilder::new();
        let n = no_op(&mut b, "n", "Op");
        let g = b.finalize().unwrap();
        // Kernels of 0.2 to 6 us around 1.4 us, most short and a few long (as lognormal
        // durations are): their mean deviation is about 1.9 us.
        let noisy = [200, 6_000, 300, 400, 5_000, 250, 300, 600];
        for _ in 0..8 {
            for ns in noisy {
                g.learn(n, ns);
            }
        }
        g.set_priorities_cost(std::time::Duration::ZERO);
        let settled = g.priorities();
        let dev = g.learned_op_dev(g.op_index(n));
        assert!((1_000..3_000).contains(&dev), "mean deviation {dev} ns");
        // The same noise again moves the average by more than a fifth (and 250 ns) on 6 of 16
        // samples, but never by more than its deviation: the priorities stay, however long ago
        // they were computed.
        for ns in noisy.iter().chain(&noisy) {
            g.learn(n, *ns);
            assert_eq!(settled.staleness(&g), Staleness::Fresh, "noise taken for a move");
            assert!(!recomputed_once_due(&g, &settled), "noise recomputed them");
        }
        // Kernels three times slower: news, within a few samples.
        let mut seen = 0;
        for k in 1..=8 {
            g.learn(n, 4_500);
            if settled.staleness(&g) == Staleness::Moved {
                seen = k;
                break;
            }
        }
        assert!((1..=6).contains(&seen), "a 3x move took {seen} samples (0: never)");
        assert!(recomputed_once_due(&g, &settled), "a 3x move, recomputed");
    }

    #[test]
    fn a_move_waits_for_its_share_of_the_time_and_news_does_not() {
        let mut b = GraphBuilder::new();
        let n = no_op(&mut b, "n", "Op");
        let m = no_op(&mut b, "m", "Other");
        let g = b.finalize().unwrap();
        g.learn(n, 1_000);
        let p = g.priorities();
        // Moved 10x: kept until a thousand times the computation's time has passed (here as if
        // it had taken an hour), then recomputed.
        g.set_priorities_cost(std::time::Duration::from_secs(3600));
        for _ in 0..16 {
            g.learn(n, 10_000);
        }
        assert_eq!(p.staleness(&g), Staleness::Moved);
        assert!(Arc::ptr_eq(&p, &g.priorities()), "a move recomputed before its time");
        // Kept while the move waits, but never marked current: a run's arrays that hold them
        // ask again at the next run, learned samples or not.
        let (kept, current_for) = g.current_priorities();
        assert!(Arc::ptr_eq(&p, &kept));
        assert_ne!(current_for, g.learned_samples(), "a waiting move marked current");
        // Something new (the other op type's first measurement) recomputes at once.
        g.learn(m, 1_000);
        assert_eq!(p.staleness(&g), Staleness::New);
        let q = g.priorities();
        assert!(!Arc::ptr_eq(&p, &q));
        assert_eq!(q.staleness(&g), Staleness::Fresh);
        assert!(q.weight()[n as usize] > 5_000, "the recompute took the move in too");
    }
}
