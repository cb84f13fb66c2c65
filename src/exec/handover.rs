//! A run's state at its end. After success its arrays go to the result (`RunResult`), graph
//! outputs still in their slots, bindings emptied or, marked as outputs, copied so that the
//! result owns all it shows. After a failure whatever the run still holds goes back, and the arrays, every slot
//! empty, to the graph for its next run.

use std::mem::ManuallyDrop;

use super::cache::release;
use super::recycle::RunArrays;
use super::state::RunState;
use crate::error::Result;
use crate::kernel::{Buffer, Slot};
use crate::pool::{Owner, NEVER};

impl RunState<'_> {
    /// Ends the run's bindings (caller memory, nothing to give back): each emptied, but for one
    /// marked as a graph output, which the result gets its own copy of, in a block of the pool:
    /// the caller's memory need outlive only the run, and a result owns all it shows. Rare (an
    /// engine seldom asks for an input back), so a copy rather than a borrow the result would
    /// have to carry. Before [`take_arrays`](Self::take_arrays).
    #[inline]
    pub fn end_bindings(&mut self) -> Result<()> {
        let g = self.graph;
        for &node in g.graph_inputs() {
            let v = g.node_values(node).start;
            let slot = self.slots[v as usize].get_mut();
            if !g.is_graph_output(v) {
                *slot = Slot::default();
                continue;
            }
            let bytes = slot.tensor.nbytes;
            let block = self.pool.acquire_until(bytes.max(1), false, NEVER, Owner::Run)?;
            // SAFETY: the binding is readable for `nbytes` bytes while the run goes on (its
            // contract, checked against the input's size), and the block just taken holds at
            // least as many, overlapping nothing.
            unsafe { std::ptr::copy_nonoverlapping(slot.tensor.data as *const u8, block.as_ptr(), bytes) };
            slot.tensor.data = block.as_ptr().cast();
            slot.buffer = Buffer::new(block.as_ptr().cast(), bytes.max(1));
            *self.acquires.get_mut() += 1;
        }
        Ok(())
    }

    /// Ends a run that succeeded: its arrays, for the result to hold while it lives
    /// (`RunResult`), with the graph's priorities. Only the graph outputs' slots still hold
    /// anything: every other value was freed by its last reader, and the bindings were ended
    /// (`end_bindings`). The last call on the state: `prio` has gone with the arrays.
    pub fn take_arrays(&mut self) -> Box<RunArrays> {
        let g = self.graph;
        debug_assert!(
            self.slots.iter_mut().enumerate().all(|(v, s)| {
                let s = s.get_mut();
                g.is_graph_output(v as u32) || (s.tensor.data.is_null() && s.buffer.ptr.is_null())
            }),
            "a finished run holds nothing but its graph outputs"
        );
        let mut arrays = self.arrays.take().expect("a run's arrays are taken once");
        self.stow(&mut arrays);
        arrays
    }

    /// Moves the arrays' fields back into their box, with the graph's priorities, which wait
    /// there for its next run.
    fn stow(&mut self, arrays: &mut RunArrays) {
        std::mem::forget(std::mem::replace(&mut arrays.slots, std::mem::take(&mut *self.slots)));
        std::mem::forget(std::mem::replace(&mut arrays.inputs, std::mem::take(&mut *self.inputs)));
        std::mem::forget(std::mem::replace(&mut arrays.refs, std::mem::take(&mut *self.refs)));
        std::mem::forget(std::mem::replace(
            &mut arrays.pending,
            std::mem::take(&mut *self.pending),
        ));
        std::mem::forget(std::mem::replace(&mut arrays.caches, std::mem::take(&mut *self.caches)));
        // SAFETY: the arrays are taken once, by `take_arrays` (the state's last use) or the
        // drop, and nothing reads `prio` after that.
        let prio = unsafe { ManuallyDrop::take(&mut self.prio) };
        arrays.prio = self.prio_samples.map(|samples| (prio, samples));
    }
}

impl Drop for RunState<'_> {
    /// After a failure, whatever the run still holds goes back, and then the arrays, every slot
    /// empty, go back to the graph for its next run. After success the result has them
    /// (`take_arrays`): nothing is left.
    fn drop(&mut self) {
        if self.arrays.is_none() {
            return;
        }
        for i in 0..self.slots.len() {
            let slot = self.slots[i].get_mut();
            // Only slots a value or a binding filled: most are empty already, and rewriting
            // every one would cost as much as the run's own work on a graph of small nodes.
            if !slot.tensor.data.is_null() || !slot.buffer.ptr.is_null() {
                let buffer = std::mem::take(slot).buffer;
                self.give_back(buffer);
            }
        }
        release(self.pool, std::mem::replace(&mut self.arena, Buffer::NONE));
        // While the state still has its arrays: the caches spill into their reserve.
        self.flush_caches();
        let mut arrays = self.arrays.take().expect("checked above");
        self.stow(&mut arrays);
        arrays.give_back(self.graph);
    }
}
