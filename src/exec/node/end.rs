//! A node's end: on failure, the run's error; on success, the values nobody reads any more go
//! back and the nodes it made ready are listed (`Scratch::ready`). Ordering is the protocol of
//! [`state`](crate::exec::state): the decrement of a value's `refs` that reaches 0 frees it, the one of a node's
//! `pending` that reaches 0 makes it ready.

use std::panic::{catch_unwind, AssertUnwindSafe};
use std::sync::atomic::Ordering;

use crate::error::{Error, Result};
use crate::exec::memory::cache::BlockCache;
use crate::exec::node::scratch::Scratch;
use crate::exec::state::annex::Step;
use crate::exec::state::RunState;

impl RunState<'_> {
    /// After the kernel call ended: on failure, records it; on success, releases and readiness.
    /// `PENDING` only gives the end of a pending node its own copy: shared with
    /// `execute_general`, the panic guard around `end_node_ok` was no longer inlined there (11
    /// instructions a node, counted by benches/c/instructions.sh).
    #[inline(always)]
    pub(in crate::exec) fn end_node<const PENDING: bool>(
        &self,
        node: u32,
        step: &Step,
        result: Result<()>,
        scratch: &mut Scratch,
    ) {
        if let Err(e) = result {
            self.node_failed(node, e);
            return;
        }
        let cache = self.cache(scratch.slot);
        let finished = catch_unwind(AssertUnwindSafe(|| {
            self.end_node_ok::<false, false>(node, step, cache, scratch)
        }));
        if let Err(panic) = finished {
            self.failed_after(node, &*panic, scratch);
        }
    }

    /// A node that never produced its outputs: the run fails with `e`.
    #[cold]
    pub(in crate::exec) fn node_failed(&self, node: u32, e: Error) {
        // Static reservations of a node that never produced: nothing will release them.
        self.sub_live(self.prio.output_bytes[node as usize]);
        self.fail(e);
    }

    /// The run's own code panicked in a node's end.
    #[cold]
    pub(in crate::exec) fn failed_after(&self, node: u32, panic: &(dyn std::any::Any + Send), scratch: &mut Scratch) {
        // The run stops here: what it made ready is dropped (the failure ends the run once the
        // running tasks finish), and whatever its values hold goes back when it drops.
        scratch.ready.clear();
        scratch.admitted.clear();
        self.fail(self.internal_error(node, "after", panic));
    }

    /// After a successful kernel: drop what nobody needs any more (small blocks into `cache`, the
    /// thread's), then mark successors. `LEAN`: a node on the short path ([`lean`](crate::exec::node::lean)), which took
    /// no input's buffer over, in a run with neither a memory limit nor a plan. `SETTLE`: a node
    /// run by `execute_lean` (on an executor's threads, or one node between the sequential
    /// driver's stretches), whose outputs are not counted live yet: they and what it drops are
    /// counted in one step (`RunState::settle_live`: one atomic on the threads, plain stores in
    /// a sequential run). The sequential driver's stretches count outputs before the call and
    /// each drop as it goes.
    #[inline(always)]
    pub(in crate::exec) fn end_node_ok<const LEAN: bool, const SETTLE: bool>(
        &self,
        node: u32,
        step: &Step,
        mut cache: Option<&mut BlockCache>,
        scratch: &mut Scratch,
    ) {
        #[cfg(feature = "fault-injection")]
        crate::exec::fault::check(self.graph, node);
        let g = self.graph;
        // Values this node freed, kept only under a memory limit: admission hears of them
        // (`readmit`); without one nothing needs the list.
        let gated = !LEAN && self.gate.is_some();
        let freed = &mut scratch.freed;
        if !LEAN {
            freed.clear();
        }
        // SETTLE: bytes dropped, taken off the run's count at once below.
        let mut dropped = 0;
        // Its outputs' counts of readers (`RunState::refs`), on the lines it placed them on, before
        // any reader is made ready below. Only where readers count down: a count of 0 or 1 is
        // never read (see `refs`).
        if step.counted {
            for v in step.values() {
                let reads = self.initial_refs[v as usize];
                if reads > 1 {
                    self.refs(v).store(reads, Ordering::Relaxed);
                }
            }
        }
        for v in step.values().filter(|_| step.unread) {
            if self.initial_refs[v as usize] == 0 {
                let bytes = self.drop_value::<LEAN, SETTLE>(v, cache.as_deref_mut());
                if SETTLE {
                    dropped += bytes;
                }
                if bytes > 0 && gated {
                    freed.push(v);
                }
            }
        }
        // On the threads, its outputs count before it lets go of an input another node reads:
        // the reader that frees that input acquires this node's decrement (`release_ref`, AcqRel),
        // so its own add to the run's count comes later and finds them there. The peak then
        // holds every output placed while the input lived (a fan-out's: its root and all its
        // middles, whichever frees the root). Counted after the loop, a middle's outputs could
        // still be missing when another middle freed the root.
        if SETTLE && step.shares_input && !self.sequential {
            let unadded = std::mem::take(&mut scratch.unadded);
            self.settle_live(unadded, 0, &mut scratch.counts.peak_live);
        }
        for &v in &g.input_values()[step.inputs()] {
            // A value with one read, this one, and no place in the result is done now: its count
            // is nobody else's to decrement, so it is left alone (no atomic on the hot path).
            let only_read = self.initial_refs[v as usize] == 1;
            if only_read || self.release_ref(v) {
                if !LEAN && scratch.taken == Some(v) {
                    // Its buffer lives on as this node's output: only the value goes.
                    // SAFETY: the last reference is gone; only this thread touches the slot.
                    let moved = unsafe { crate::exec::memory::cache::empty_slot(&mut *self.slots[v as usize].get()) };
                    self.sub_live(moved.capacity as u64);
                    // The run's count went down: waiting nodes get their look, as after a release.
                    if gated {
                        freed.push(v);
                    }
                    continue;
                }
                let bytes = self.drop_value::<LEAN, SETTLE>(v, cache.as_deref_mut());
                if SETTLE {
                    dropped += bytes;
                }
                if bytes > 0 && gated {
                    freed.push(v);
                }
            }
        }
        if SETTLE {
            // Before the successors are marked: their readers free these outputs after this.
            // (Its outputs, unless counted above: then what it dropped.)
            let unadded = std::mem::take(&mut scratch.unadded);
            self.settle_live(unadded, dropped, &mut scratch.counts.peak_live);
        }
        scratch.counts.nodes_run += 1;
        if gated && !scratch.freed.is_empty() {
            self.readmit(&mut scratch.admitted, &scratch.freed);
        }
        // A sequential run goes in an order fixed beforehand (`serial::in_order`): nobody waits for
        // its nodes to become ready.
        if self.sequential {
            return;
        }
        let ready = &mut scratch.ready;
        for &s in self.prio.successors_in(self.policy, node) {
            // A successor whose only producer is this node is ready now, its count untouched.
            let only_producer = self.prio.initial_pending[s as usize] == 1;
            if only_producer || self.producer_done(s) {
                ready.push(s);
            }
        }
    }

    /// Drops one reference to value `v`; true for the last (see `RunState::refs`). In a
    /// sequential run every count is its thread's alone (as its live bytes are,
    /// `RunState::add_live`): a plain load and store, where a locked decrement cost a few times
    /// more.
    #[inline(always)]
    fn release_ref(&self, v: u32) -> bool {
        let refs = self.refs(v);
        let before = match self.sequential {
            true => {
                let before = refs.load(Ordering::Relaxed);
                refs.store(before.wrapping_sub(1), Ordering::Relaxed);
                before
            }
            false => refs.fetch_sub(1, Ordering::AcqRel),
        };
        debug_assert!(before > 0, "value {v} released more often than it is read");
        before == 1
    }

    /// Counts one producer of node `s` done; true when it was the last (see
    /// `RunState::pending`).
    #[inline(always)]
    fn producer_done(&self, s: u32) -> bool {
        let before = self.pending.at(s).fetch_sub(1, Ordering::AcqRel);
        debug_assert!(before > 0, "node {s} made ready more often than it has producers");
        before == 1
    }
}
