//! A run's state at its end. After success its arrays go to the result (`RunResult`), graph
//! outputs still in their slots, bindings emptied or, marked as outputs, copied so that the
//! result owns all it shows. After a failure whatever the run still holds goes back, and the
//! arrays, every slot empty, to the graph for its next run.

use std::mem::ManuallyDrop;
use std::sync::Arc;

use crate::error::Result;
use crate::exec::memory::cache::release;
use crate::exec::state::RunState;
use crate::kernel::{Buffer, Slot};
use crate::pool::{Owner, NEVER};
use crate::sched::Priorities;

impl RunState<'_> {
    /// Ends the run's bindings (caller memory, nothing to give back): each emptied, but for one
    /// marked as a graph output, which the result gets its own copy of, in a block of the pool:
    /// the caller's memory need outlive only the run, and a result owns all it shows. Rare (an
    /// engine seldom asks for an input back), so a copy rather than a borrow the result would
    /// have to carry. Before [`end_run`](Self::end_run).
    #[inline]
    pub(crate) fn end_bindings(&mut self) -> Result<()> {
        let g = self.graph;
        for &node in g.graph_inputs() {
            let v = g.node_values(node).start;
            let pool = self.pool;
            let slot = self.slot_mut(v);
            if !g.is_graph_output(v) {
                *slot = Slot::default();
                continue;
            }
            let bytes = slot.tensor.nbytes;
            if bytes == 0 {
                // An empty binding's descriptor already points at EMPTY_DATA: nothing to copy.
                continue;
            }
            let block = pool.acquire_until(bytes, false, NEVER, Owner::Run)?;
            // SAFETY: the binding is readable for `nbytes` bytes while the run goes on (its
            // contract, checked against the input's size), and the block just taken holds at
            // least as many, overlapping nothing.
            unsafe { std::ptr::copy_nonoverlapping(slot.tensor.data as *const u8, block.as_ptr(), bytes) };
            slot.tensor.data = block.as_ptr().cast();
            slot.buffer = Buffer::new(block.as_ptr().cast(), bytes);
            self.tally.count_acquire();
        }
        Ok(())
    }

    /// Ends a run that succeeded, as its state's last call: the graph's priorities, if the run
    /// followed them, to wait in the arrays for its next run (with the count of learned samples
    /// they are current for). Only the graph outputs' slots still hold anything: every other
    /// value was freed by its last reader, and the bindings were ended (`end_bindings`); the
    /// arrays go to the result as they are (`recycle::Lent::keep`).
    pub(crate) fn end_run(&mut self) -> Option<(Arc<Priorities>, u64)> {
        let g = self.graph;
        debug_assert!(
            (0..g.value_count() as u32).all(|v| {
                let s = self.slot_mut(v);
                g.is_graph_output(v) || (s.tensor.data.is_null() && s.buffer.ptr.is_null())
            }),
            "a ended run holds nothing but its graph outputs"
        );
        debug_assert!(!self.ended, "a run finishes once");
        self.ended = true;
        // SAFETY: `ended` is set: neither this nor the drop takes `prio` again, and nothing
        // reads it after the state's last call.
        let prio = unsafe { ManuallyDrop::take(&mut self.prio) };
        self.prio_samples.map(|samples| (prio, samples))
    }
}

impl Drop for RunState<'_> {
    /// After a failure, whatever the run still holds goes back, every slot is left empty, and
    /// the arrays go back to the graph (`recycle::Lent`'s drop, after this one). After success
    /// the result has them (`end_run`): nothing is left.
    fn drop(&mut self) {
        if self.ended {
            return;
        }
        for v in 0..self.slots.len() as u32 {
            let slot = self.slot_mut(v);
            // Only slots a value or a binding filled: most are empty already, and rewriting
            // every one would cost as much as the run's own work on a graph of small nodes.
            if !slot.tensor.data.is_null() || !slot.buffer.ptr.is_null() {
                let buffer = std::mem::take(slot).buffer;
                self.give_back(buffer);
            }
        }
        release(self.pool, std::mem::replace(&mut self.arena, Buffer::NONE));
        // The caches spill into the arrays' reserve.
        self.flush_caches();
        // SAFETY: `ended` is not set, so `end_run` did not take it; this is the last use.
        unsafe { ManuallyDrop::drop(&mut self.prio) };
    }
}
