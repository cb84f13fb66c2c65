//! Run state that outlives its run: the per-value and per-node arrays of a graph's runs, kept
//! with the graph and reused, so that a steady run neither allocates nor page-faults them
//! (a value's slot alone is 176 bytes: 17 MB for a graph of 100,000 values).
//!
//! Invariant: arrays in the bin have every slot empty (the run that held them took each value
//! out, see `RunState`'s `Drop`), so reuse only resets the counters, from the graph's templates.

use std::cell::UnsafeCell;
use std::sync::atomic::AtomicU32;
use std::sync::Mutex;

use super::state::Slot;
use crate::graph::{Annex, Graph};
use crate::sched::Priorities;

/// A run's arrays: value slots, value reference counts, node pending counts.
pub(super) struct RunArrays {
    pub slots: Box<[UnsafeCell<Slot>]>,
    pub refs: Box<[AtomicU32]>,
    pub pending: Box<[AtomicU32]>,
}

// SAFETY: in the bin the arrays belong to nobody: every slot is empty (no pointer to anything),
// and a run that takes them owns them alone until it gives them back.
unsafe impl Send for RunArrays {}

/// The graph's spare arrays, and the reference counts every run starts from.
struct Bin {
    /// Per value: readers, plus one for a graph output.
    initial_refs: Box<[u32]>,
    spare: Mutex<Vec<RunArrays>>,
}

fn bin(graph: &Graph) -> &Bin {
    graph.annex(Annex::Runs, || Bin {
        initial_refs: (0..graph.value_count() as u32)
            .map(|v| graph.consumers(v) + graph.is_graph_output(v) as u32)
            .collect(),
        spare: Mutex::new(Vec::new()),
    })
}

impl RunArrays {
    /// Arrays for a new run of `graph`: spare ones if a run left some, else new; counters set
    /// to their start (`prio` gives the pending counts).
    pub fn take(graph: &Graph, prio: &Priorities) -> RunArrays {
        let bin = bin(graph);
        let spare = bin.spare.lock().unwrap_or_else(|e| e.into_inner()).pop();
        let Some(mut arrays) = spare else {
            return RunArrays {
                slots: (0..graph.value_count()).map(|_| UnsafeCell::new(Slot::default())).collect(),
                refs: bin.initial_refs.iter().map(|&r| AtomicU32::new(r)).collect(),
                pending: prio.initial_pending.iter().map(|&p| AtomicU32::new(p)).collect(),
            };
        };
        for (r, &start) in arrays.refs.iter_mut().zip(bin.initial_refs.iter()) {
            *r.get_mut() = start;
        }
        for (p, &start) in arrays.pending.iter_mut().zip(&prio.initial_pending) {
            *p.get_mut() = start;
        }
        arrays
    }

    /// Keeps the arrays for the next run of `graph`. Every slot must be empty.
    pub fn give_back(self, graph: &Graph) {
        if self.slots.len() != graph.value_count() {
            return; // not arrays of this graph's runs (none yet: the run took none)
        }
        let mut spare = bin(graph).spare.lock().unwrap_or_else(|e| e.into_inner());
        // As many as runs of the graph went on at once; more would only hold memory.
        if spare.len() < 8 {
            spare.push(self);
        }
    }
}
