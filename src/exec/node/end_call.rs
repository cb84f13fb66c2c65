//! The end of a kernel call: what the observer, the learned estimates and the trace are told,
//! the checks of what the kernel left (its outputs' descriptors, the red zones), and either the
//! outputs becoming values or every block the node took going back. At once for most calls; for
//! a node whose kernel deferred its end ([`pending`](crate::exec::node::pending)), once its completion came, on the thread
//! that ends it.

use std::panic::{catch_unwind, AssertUnwindSafe};
use std::time::Instant;

use crate::error::{err, Error, ErrorKind, Result};
use crate::exec::node::pending::{Called, PendingNode};
use crate::exec::node::scratch::Scratch;
use crate::exec::state::annex::Step;
use crate::exec::state::{lock, RunState};
use crate::graph::Graph;
use crate::kernel::Slot;
use crate::sched::Sample;
use crate::tensor::MAX_DIMS;
use crate::trace::NodeEvent;

impl RunState<'_> {
    /// Ends a kernel call (`completion`: the time and error of a deferred one's completion):
    /// tells the observer, learns, traces, and checks what the kernel left. On success the
    /// node's outputs are values; on failure every block it took is back and its output slots
    /// are empty. Inlined: in `call_kernel`, without a completion, it reduces to the checks of
    /// a plain call (no per-node cost for what deferred calls need).
    #[inline(always)]
    pub(in crate::exec) fn end_call(
        &self,
        node: u32,
        outputs: &mut [Slot],
        called: Called,
        completion: Option<(Instant, Option<String>)>,
        scratch: &mut Scratch,
    ) -> Result<()> {
        let g = self.graph;
        let Called {
            mut failure,
            thread,
            start,
            returned,
            sample,
            width,
            reserved_dynamic,
            allocated,
            in_place_output,
            taken,
        } = called;
        let deferred = completion.is_some();
        let mut ended = returned;
        if let Some((at, error)) = completion {
            // A completion that came before the kernel returned ends the node as it returns.
            ended = ended.map(|r| r.max(at));
            if let (None, Some(error)) = (&failure, error) {
                let message = format!("node {} failed after deferring: {error}", g.node_label(node));
                failure = Some(Error::new(ErrorKind::KernelFailed, message));
            }
        }
        if let (Some(start), Some(returned), Some(end)) = (start, returned, ended) {
            let times = CallTimes {
                thread,
                start,
                returned,
                end,
                deferred,
                ok: failure.is_none(),
            };
            self.record_call(node, times, sample.then_some(width), scratch);
        }
        if failure.is_none() {
            failure = check_outputs(g, node, outputs)
                .and_then(|_| self.check_red_zones(node, outputs))
                .err();
        }
        if let Some(e) = failure {
            // The slots hold every block the node took, dynamic ones included.
            self.unplace(outputs, in_place_output);
            self.sub_live(reserved_dynamic);
            return Err(e);
        }
        // The outputs are values now: their slots hold their descriptors and blocks.
        scratch.taken = taken;
        if let Some(input) = taken {
            // The block now belongs to the output's slot alone: the input's slot keeps only its
            // size (the value's end in `end_node_ok` counts it), so that nothing, not even the
            // sweep after a panic, gives the block back twice.
            // SAFETY: this node is the input's last reader (`take_over`); nobody else touches it.
            unsafe { (*self.slots[input as usize].get()).buffer.ptr = std::ptr::null_mut() };
        }
        if self.gate.is_none() {
            // Under a limit the kernel reserved them as it allocated (`reserve_dynamic`).
            self.add_live(allocated, &mut scratch.counts.peak_live);
        }
        Ok(())
    }

    /// What a timed kernel call tells: the observer its end, the learned estimates its
    /// duration (`width`: the widest loop of a sampled call), a traced run its event.
    fn record_call(&self, node: u32, t: CallTimes, width: Option<u32>, scratch: &mut Scratch) {
        let g = self.graph;
        if let Some(observer) = self.observer {
            let at = self.observation(node, t.thread, t.start, Some((t.end, t.ok)));
            let _ = catch_unwind(AssertUnwindSafe(|| observer.node_finished(&at)));
        }
        let on_thread = t.returned.duration_since(t.start).as_nanos() as u64;
        if let Some(width) = width {
            let sample = Sample {
                ns: t.end.duration_since(t.start).as_nanos() as u64,
                // A node whose work completed before its kernel returned held its thread
                // throughout.
                thread_ns: t.deferred.then_some(on_thread),
                width,
            };
            g.learn_sample(node, sample);
        }
        if let Some(trace) = &self.trace {
            scratch.counts.busy_ns += on_thread;
            let started = self.started.unwrap_or(t.start);
            let since = |at: Instant| at.saturating_duration_since(started).as_nanos() as u64;
            let event = NodeEvent {
                node,
                thread: t.thread,
                start_ns: since(t.start),
                end_ns: since(t.returned),
                completed_ns: if t.deferred { since(t.end).max(1) } else { 0 },
                live_bytes: self.tally.live(),
                reserved_bytes: self.pool.reserved_bytes(),
            };
            lock(&trace.events).push(event);
        }
    }

    /// Ends a pending node's kernel call once its completion came, on the thread that ends it.
    pub(in crate::exec) fn end_deferred_call(
        &self,
        pending: &PendingNode,
        step: &Step,
        scratch: &mut Scratch,
    ) -> Result<()> {
        let (_, node) = pending.run();
        let (called, at, error) = pending.take();
        // SAFETY: the node's outputs are its own until it ends, which is now, on this thread.
        let outputs = unsafe { self.output_slots(step.values()) };
        self.end_call(node, outputs, called, Some((at, error)), scratch)
    }
}

/// When a timed kernel call ran, on which thread, and how it ended.
#[derive(Clone, Copy)]
struct CallTimes {
    thread: u32,
    start: Instant,
    returned: Instant,
    /// Its end: when it returned, or a deferred call's completion (if later).
    end: Instant,
    deferred: bool,
    ok: bool,
}

/// After a kernel succeeded: every output exists, sits where the run put it, and fits.
#[inline(always)]
pub(in crate::exec) fn check_outputs(g: &Graph, node: u32, outputs: &[Slot]) -> Result<()> {
    for (
        k,
        Slot {
            tensor: t, buffer: b, ..
        },
    ) in outputs.iter().enumerate()
    {
        let problem = if b.ptr.is_null() {
            "is dynamic but the kernel did not allocate it".to_string()
        } else if t.data != b.ptr {
            format!("had its data pointer changed from {:p} to {:p}", b.ptr, t.data)
        } else if t.nbytes > b.capacity {
            format!("claims {} bytes but its buffer holds {}", t.nbytes, b.capacity)
        } else if !(0..=MAX_DIMS as i32).contains(&t.ndim) {
            format!("has ndim {}, outside 0..={MAX_DIMS}", t.ndim)
        } else {
            continue;
        };
        return err(
            ErrorKind::KernelFailed,
            format!("output {k} of node {} {problem}", g.node_label(node)),
        );
    }
    Ok(())
}
