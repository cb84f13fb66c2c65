//! The sequential driver: a run on its caller alone (no executor, or threads the graph would not
//! pay for, `sched::spread`) executes its operator nodes in a topological order fixed beforehand,
//! each one ending before the next starts.
//!
//! Most nodes of most such runs go in lean stretches: in a lean run ([`lean`](crate::exec::node::lean)), the nodes that
//! take the short path, one after the other in one loop under one panic guard. What the general
//! path asks of every node the stretch asks once: the run is lean and sequential (its thread's
//! block cache at hand, no memory limit to admit against) and has no deadline to read the clock
//! for. A call the estimates time stays in the stretch: timed with the run's stopwatch
//! ([`stopwatch`](crate::exec::run::stopwatch)) and learned from. A node off the short path ends the stretch and takes the
//! general path (`RunState::execute`); a node that did not simply succeed (it failed or
//! deferred its end) is ended as the general path ends it, and ends the stretch. Either way the
//! next node starts a new one.

use std::cell::Cell;
use std::panic::{catch_unwind, AssertUnwindSafe};
use std::sync::Arc;

use crate::error::Result;
use crate::exec::memory::cache::BlockCache;
use crate::exec::node::pending::PendingNode;
use crate::exec::node::scratch::Scratch;
use crate::exec::state::annex::Step;
use crate::exec::state::RunState;

/// A stretch asks for the slot this many values past the first output of the node under way:
/// a node's first touch of its output slot is otherwise a cache miss in a long run of small
/// nodes (each slot is its own line; a graph of 100,000 values holds 19 MB of them). Values are
/// numbered in node order, and a sequential order mostly follows it, so that slot is usually
/// the output of a node a few places on; where it is not, the hint costs a few cycles and
/// changes nothing (no slot is read or written).
const PREFETCH_AHEAD: u32 = 4;

/// Executes every operator node of `order` (topological) on the calling thread.
pub(in crate::exec) fn in_order(state: &RunState<'_>, order: &[u32]) {
    let mut scratch = Scratch::for_caller();
    scratch.slot = Some(0);
    let mut at = 0;
    while at < order.len() {
        let taken = state.lean_stretch(&order[at..], &mut scratch);
        if taken > 0 {
            // A stretch ends at a node off the short path (the next one returns at once) or
            // after one that broke it: the next node starts a new one.
            at += taken;
            continue;
        }
        let node = order[at];
        at += 1;
        if state.failed() {
            break;
        }
        if state.graph.is_graph_input(node) {
            continue;
        }
        if !state.admit(node) {
            // Nothing else runs, so nothing will free memory: this fails the run.
            scratch.ready.clear();
            state.resolve_stall(&mut scratch.ready);
            break;
        }
        if let Some(pending) = state.execute(node, &mut scratch) {
            state.await_pending(&pending, &mut scratch);
        }
    }
    state.flush(&mut scratch);
    scratch.keep_for_caller();
}

impl<'r> RunState<'r> {
    /// The order a run without an executor follows: the one admission's guarantee is about
    /// under a memory limit, else the topological order.
    pub(crate) fn sequential_order(&self) -> &'r [u32] {
        match self.gate {
            Some(_) => &self.graph.lowest_live_order().order,
            None => self.graph.topological_order(),
        }
    }

    /// Executes the nodes of `order` from its start while each can take the short path (module
    /// docs); returns how many of them it took, graph inputs passed over included. The node at
    /// that index, if any, is the general path's. One panic guard for the stretch: a panic of
    /// the run's own code (kernels' are caught around their call) fails the run at the node
    /// under way, before its kernel's end or after, as the general path's guards would.
    fn lean_stretch(&self, order: &[u32], scratch: &mut Scratch) -> usize {
        if !(self.lean && self.sequential) || self.stop.has_deadline() {
            return 0;
        }
        // Where the stretch is, for the guard: the node under way, and whether its kernel's
        // call ended well (a panic after that is in the node's end).
        let (at, called) = (Cell::new(0), Cell::new(false));
        let outcome = catch_unwind(AssertUnwindSafe(|| self.stretch(order, scratch, &at, &called)));
        outcome.unwrap_or_else(|panic| {
            self.lean_panicked(order[at.get()], called.get(), &*panic, scratch);
            at.get() + 1
        })
    }

    /// `lean_stretch` under its guard.
    #[inline(always)]
    fn stretch(&self, order: &[u32], scratch: &mut Scratch, at: &Cell<usize>, called: &Cell<bool>) -> usize {
        // A local borrow, not a parameter: a node that ends the stretch is ended by the general
        // path, which looks the cache up itself once this borrow is no longer used.
        let Some(cache) = self.cache(scratch.slot) else {
            return 0;
        };
        let (g, steps, hinted_run) = (self.graph, self.steps, self.hints.is_some());
        for (i, &node) in order.iter().enumerate() {
            let step = &steps[node as usize];
            self.prefetch_slot(step.first.saturating_add(PREFETCH_AHEAD));
            let off_path = !step.plain || (step.hinted && hinted_run);
            // Without a deadline, only a cancellation stops the run: one load, not a call.
            let cancelled = self.stop.cancelled();
            if off_path || self.failed() || (cancelled && self.stopped()) {
                if g.is_graph_input(node) {
                    continue;
                }
                return i;
            }
            at.set(i);
            called.set(false);
            scratch.executed += 1;
            let sample = self.learn && self.prio.should_sample_op(g, step.op, scratch.executed);
            self.add_live(self.prio.output_bytes[node as usize], &mut scratch.counts.peak_live);
            let outcome = match sample {
                true => self.lean_sampled(node, step, cache, scratch, called),
                false => match self.call_lean::<false>(node, step, cache, scratch) {
                    Ok(None) => {
                        called.set(true);
                        self.end_node_ok::<true, false>(node, step, Some(&mut *cache), scratch);
                        continue;
                    }
                    outcome => outcome,
                },
            };
            if !matches!(outcome, Ok(None)) {
                self.stretch_broken(node, outcome, scratch);
                return i + 1;
            }
        }
        order.len()
    }

    /// A node of a lean stretch whose call the estimates time: out of line, off the path of the
    /// others. `Ok(None)`: it succeeded and ended.
    #[inline(never)]
    fn lean_sampled(
        &self,
        node: u32,
        step: &Step,
        cache: &mut BlockCache,
        scratch: &mut Scratch,
        called: &Cell<bool>,
    ) -> Result<Option<Arc<PendingNode>>> {
        let outcome = self.call_lean::<true>(node, step, cache, scratch);
        if let Ok(None) = outcome {
            called.set(true);
            self.end_node_ok::<true, false>(node, step, Some(cache), scratch);
        }
        outcome
    }

    /// A node of a lean stretch that did not simply succeed: a failure is the run's, a node
    /// whose kernel deferred its end is waited for and ended.
    #[cold]
    #[inline(never)]
    fn stretch_broken(&self, node: u32, outcome: Result<Option<Arc<PendingNode>>>, scratch: &mut Scratch) {
        match outcome {
            Ok(Some(pending)) => self.await_pending(&pending, scratch),
            Ok(None) => {}
            Err(e) => self.node_failed(node, e),
        }
    }

    /// A node whose kernel deferred its end, in a sequential run: nothing else runs meanwhile,
    /// so its completion is waited for here, then the node ends.
    fn await_pending(&self, pending: &PendingNode, scratch: &mut Scratch) {
        if !pending.kernel_arrives() {
            pending.wait();
        }
        self.end_pending_node(pending, scratch);
    }
}
