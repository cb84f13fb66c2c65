//! What the scheduler assumes each node takes, and what runs teach it.
//!
//! A node's expected duration is the caller's estimate if it gave one, else what runs have
//! measured for its op type, else [`DEFAULT_ESTIMATE_NS`]. Runs sample kernel durations
//! ([`Priorities::should_sample`]) and fold them into a moving average per op type
//! ([`Graph::learn`]); the [`Priorities`] and the figures of [`Graph::info`] follow the current
//! estimates, recomputed when the averages have moved by more than a fifth (and by at least
//! [`MIN_MOVE_NS`]).
//!
//! The state lives with the graph (runs of the same graph share what they learn), in the slot
//! [`Graph`] keeps for the scheduler, so that `graph` itself knows nothing of scheduling.

use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex};

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
pub const CHEAP_OP_NS: u64 = 2_000;

/// How often a kernel of a cheap op type (below [`CHEAP_OP_NS`]) is measured: one call in this
/// many.
pub const SAMPLE_EVERY_CHEAP: u64 = 64;

/// The scheduler's per-graph state.
struct Learned {
    /// Per op type: an exponential moving average of measured durations, in ns; 0 until the
    /// first, at least 1 after (so 0 always means "nothing learned yet").
    /// Relaxed: each is a self-contained number and no other memory is published through it;
    /// a lost update between racing runs only delays learning.
    op_ns: Vec<AtomicU64>,
    /// Priorities for the current estimates, computed on first use and again when they move.
    priorities: Mutex<Option<Arc<Priorities>>>,
}

fn learned(g: &Graph) -> &Learned {
    g.annex(Annex::Scheduling, || Learned {
        op_ns: (0..g.op_type_count()).map(|_| AtomicU64::new(0)).collect(),
        priorities: Mutex::new(None),
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

    /// Folds one measured duration of `node` into its op type's moving average (weight 1/8).
    pub fn learn(&self, node: u32, ns: u64) {
        let Some(slot) = learned(self).op_ns.get(self.op_index(node) as usize) else {
            return;
        };
        let old = slot.load(Ordering::Relaxed);
        let new = if old == 0 {
            ns.max(1)
        } else {
            (old - old / 8 + ns / 8).max(1)
        };
        slot.store(new, Ordering::Relaxed);
    }

    /// The scheduling priorities for the current estimates, recomputed when they have moved.
    pub fn priorities(&self) -> Arc<Priorities> {
        let mut cached = learned(self).priorities.lock().unwrap_or_else(|e| e.into_inner());
        match &*cached {
            Some(p) if !p.is_stale(self) => p.clone(),
            _ => {
                let p = Arc::new(Priorities::compute(self));
                *cached = Some(p.clone());
                p
            }
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
