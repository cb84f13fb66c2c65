//! What a run hands back: its graph outputs, its figures and trace, held until the caller drops
//! them.

use std::mem::ManuallyDrop;
use std::sync::Arc;

use crate::error::{err, ErrorKind, Result};
use crate::exec::memory::cache::{empty_slot, release, release_many};
use crate::exec::run::outcome::RunStats;
use crate::exec::state::arrays::RunArrays;
use crate::graph::{Graph, ValueRef};
use crate::kernel::Buffer;
use crate::pool::Pool;
use crate::tensor::Tensor;
use crate::trace::NodeEvent;

/// The graph outputs of a successful run. It owns their buffers and keeps the graph and pool
/// alive; dropping it returns the buffers to the pool. `Send + Sync`: outputs are read-only.
///
/// It holds the run's arrays, whose slots describe the outputs where the run left them: the
/// next run of the graph takes other arrays while it lives (kept by the graph after their
/// first use: a caller holding two results of one graph at a time has two sets), and gets
/// these back once it is dropped.
pub struct RunResult {
    graph: Arc<Graph>,
    pool: Arc<Pool>,
    /// Only the graph outputs' slots hold anything (`RunState::end_run`), and its
    /// `outcome` holds the run's figures, events and arena. Given back to the graph when the
    /// result drops.
    arrays: ManuallyDrop<Box<RunArrays>>,
}

// SAFETY: a result owns its output buffers exclusively (nothing else frees or writes them until
// it drops), and the pool it returns them to is thread-safe.
unsafe impl Send for RunResult {}
// SAFETY: shared access only reads descriptors.
unsafe impl Sync for RunResult {}

impl RunResult {
    /// The result of a run that succeeded, holding its arrays (`RunState::end_run` left only the
    /// graph outputs in their slots).
    pub(in crate::exec) fn new(graph: Arc<Graph>, pool: Arc<Pool>, arrays: Box<RunArrays>) -> Self {
        RunResult {
            graph,
            pool,
            arrays: ManuallyDrop::new(arrays),
        }
    }

    /// The descriptor of graph output `value`.
    pub fn output(&self, value: ValueRef) -> Result<&Tensor> {
        let g = &self.graph;
        if value.node as usize >= g.node_count() {
            return err(
                ErrorKind::UnknownValue,
                format!(
                    "value ({}, {}) does not exist: the graph has {} nodes",
                    value.node,
                    value.output,
                    g.node_count()
                ),
            );
        }
        let Some(index) = g.value_index(value) else {
            let outputs = g.node_values(value.node).len();
            return err(
                ErrorKind::OutputIndex,
                format!(
                    "node '{}' has {outputs} output{}; output {} does not exist",
                    g.node_name(value.node),
                    if outputs == 1 { "" } else { "s" },
                    value.output
                ),
            );
        };
        match g.is_graph_output(index) {
            // SAFETY: nothing writes the slots while the result lives (they are its own).
            true => Ok(&unsafe { &*self.arrays.slots[index as usize].get() }.tensor),
            false => err(
                ErrorKind::NotAnOutput,
                format!(
                    "output {} of node '{}' is not a graph output; mark it as one (GraphBuilder::mark_output) to keep it",
                    value.output,
                    self.graph.node_name(value.node)
                ),
            ),
        }
    }

    /// The bytes of graph output `value` (its descriptor's `nbytes`).
    pub fn output_bytes(&self, value: ValueRef) -> Result<&[u8]> {
        let t = self.output(value)?;
        // SAFETY: the buffer lives as long as `self` and holds at least `nbytes` bytes.
        Ok(unsafe { std::slice::from_raw_parts(t.data as *const u8, t.nbytes) })
    }

    /// The run's figures.
    pub fn stats(&self) -> RunStats {
        self.arrays.outcome.stats
    }

    /// Every executed node, in the order they ended: traced runs only.
    pub fn events(&self) -> &[NodeEvent] {
        &self.arrays.outcome.events
    }

    /// How long the run waited to enter its executor's memory budget
    /// ([`Executor::set_memory_budget`](crate::exec::Executor::set_memory_budget)); 0 without one.
    pub fn budget_wait_ns(&self) -> u64 {
        self.arrays.outcome.budget_wait_ns
    }

    /// The run as Chrome trace-event JSON (see [`crate::trace::chrome_trace`]); `None` unless the
    /// run was traced.
    pub fn chrome_trace(&self) -> Option<String> {
        let outcome = &self.arrays.outcome;
        outcome
            .traced
            .then(|| crate::trace::chrome_trace(&self.graph, &outcome.events))
    }
}

impl Drop for RunResult {
    fn drop(&mut self) {
        let arrays = &mut *self.arrays;
        let arena = std::mem::replace(&mut arrays.outcome.arena, Buffer::NONE);
        // The figures stay (rewritten by the run that next holds the arrays); the events go.
        drop(std::mem::take(&mut arrays.outcome.events));
        // Each slot emptied (its two pointers: the rest is rewritten before it is read again);
        // small blocks kept in the arrays' reserve for the graph's next run, the rest back to
        // the pool under one lock (a binding marked as output was copied into one).
        let (slots, reserve) = (&mut arrays.slots, &mut arrays.reserve);
        let pool = &*self.pool;
        let blocks = self.graph.graph_outputs().iter().filter_map(|&v| {
            let b = empty_slot(slots[v as usize].get_mut());
            (!b.ptr.is_null() && !arena.holds(b) && !reserve.keep_live(pool, b)).then_some(b)
        });
        release_many(pool, blocks, false);
        release(pool, arena);
        // SAFETY: this is the result's drop: nothing reads `arrays` after this.
        let arrays = unsafe { ManuallyDrop::take(&mut self.arrays) };
        crate::exec::state::annex::give_back(arrays, &self.graph);
    }
}
