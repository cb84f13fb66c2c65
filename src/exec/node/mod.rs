//! One node's path, from ready to ended: its outputs placed and its kernel called (`call`, or the
//! short path `lean`), the call's end (`call_returned`: checks, observer, learned durations), then
//! the node's end (`end`: releases and readiness). A kernel that defers its end makes the node
//! pending (`pending`); what a kernel reaches of its run is its context (`context`, `parallel`).
//! A thread's scratch space (`scratch`) carries the lists every node reuses.

pub(in crate::exec) mod call;
pub(in crate::exec) mod context;
pub(in crate::exec) mod end;
pub(in crate::exec) mod end_call;
pub(in crate::exec) mod lean;
pub(in crate::exec) mod parallel;
pub(in crate::exec) mod pending;
pub(in crate::exec) mod scratch;

use std::panic::{catch_unwind, AssertUnwindSafe};
use std::sync::Arc;

use crate::exec::node::pending::PendingNode;
use crate::exec::node::scratch::Scratch;
use crate::exec::state::annex::Step;
use crate::exec::state::RunState;

impl RunState<'_> {
    /// Runs one node: outputs from the pool, the kernel, then releases and readiness. Nodes it
    /// makes ready (and admits) are appended to `scratch.ready`, most critical first. A failure
    /// is recorded in the run, not returned: the node's own buffers go back, and nothing it
    /// would have made ready is started. Returns the node if its kernel deferred its end
    /// ([`pending`]): the caller hands the run its counts, then arrives at the node
    /// (`PendingNode::kernel_arrives`), and whoever arrives last ends it (`end_pending_node`).
    pub(super) fn execute(&self, node: u32, scratch: &mut Scratch) -> Option<Arc<PendingNode>> {
        if self.failed() || self.stopped() {
            return None;
        }
        // By reference: a copy of the record costs more than the reads it saves.
        let step = &self.steps[node as usize];
        match self.lean_cache(step, scratch) {
            Some(cache) => self.execute_lean(node, step, cache, scratch),
            None => self.execute_general(node, step, scratch),
        }
    }

    /// `execute` for a node off the short path ([`lean`]): out of line, so that the short
    /// path's frame stays small.
    #[inline(never)]
    fn execute_general(&self, node: u32, step: &Step, scratch: &mut Scratch) -> Option<Arc<PendingNode>> {
        if self.gate.is_none() {
            self.add_live(self.prio.output_bytes[node as usize], &mut scratch.counts.peak_live);
        }
        // A panic here is a bug in graphsched (kernel panics are caught around the kernel):
        // it fails the run with `KernelPanicked`, never unwinds into the executor's threads.
        let outcome = catch_unwind(AssertUnwindSafe(|| self.run_kernel(node, step, scratch)));
        match outcome.unwrap_or_else(|panic| Err(self.internal_error(node, "while running", &*panic))) {
            Ok(Some(pending)) => return Some(pending),
            Ok(None) => self.end_node::<false>(node, step, Ok(()), scratch),
            Err(e) => self.end_node::<false>(node, step, Err(e), scratch),
        }
        None
    }

    /// Ends a pending node once its completion came, as `execute` ends any other node.
    pub(super) fn end_pending_node(&self, pending: &PendingNode, scratch: &mut Scratch) {
        let (_, node) = pending.run();
        let step = self.steps[node as usize];
        let ended = catch_unwind(AssertUnwindSafe(|| self.end_deferred_call(pending, &step, scratch)));
        let result = ended.unwrap_or_else(|panic| Err(self.internal_error(node, "while ending", &*panic)));
        self.end_node::<true>(node, &step, result, scratch);
    }
}
