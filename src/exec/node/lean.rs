//! The short path of a node: what most nodes of most runs take.
//!
//! A run is lean when nothing it was asked for needs more of a node than its outputs placed, its
//! kernel called and its values released: no memory limit and no red zones (so its threads have
//! block caches), no static plan, no trace, no observer. A node takes the short path in a lean
//! run when it is plain (`Step::plain`: small static outputs, none in place, none cleared, none
//! given a hint) and its thread has a cache. On an executor's threads (`execute_lean`), not for
//! a call the learned estimates time; the sequential driver ([`sequential`](crate::exec::sequential)) times such calls on
//! the short path too (`call_lean::<true>`).
//!
//! The short path does what the general one (`RunState::execute_general`, `run_kernel`) does for
//! such a node, with everything that cannot arise left out: its output blocks come from the
//! thread's cache, the kernel is called (a Rust kernel behind its own panic guard; a C API
//! kernel straight through its function, which cannot unwind), its descriptors are checked, and
//! the node ends (`end_node_ok`) under the same guard as the rest (one per node here, one per
//! stretch in [`sequential`](crate::exec::sequential)), which knows from a flag whether the panic it caught came before the
//! kernel's end or after. Whatever is not a plain success (a failed, panicking or deferring
//! kernel, a broken descriptor, a refill the pool refused) goes to the general path's end at the
//! point it arose, out of line.

use std::cell::Cell;
use std::panic::{catch_unwind, AssertUnwindSafe};
use std::sync::Arc;
use std::time::{Duration, Instant};

use crate::error::Result;
use crate::exec::memory::cache::BlockCache;
use crate::exec::node::end_call::check_outputs;
use crate::exec::node::pending::{Called, PendingNode};
use crate::exec::node::scratch::Scratch;
use crate::exec::run::stopwatch::Stopwatch;
use crate::exec::state::annex::Step;
use crate::exec::state::{RunState, Slot};
use crate::kernel::{CKernel, KernelCtx};
use crate::sched::Sample;
use crate::tensor::Tensor;

impl RunState<'_> {
    /// The thread's block cache, if the node of `step` takes the short path now (module docs):
    /// not if this call, the thread's next (`Scratch::executed + 1`), is one the estimates time.
    #[inline(always)]
    pub(in crate::exec) fn lean_cache(&self, step: &Step, scratch: &Scratch) -> Option<&mut BlockCache> {
        if !(self.lean && step.plain) || (step.hinted && self.hints.is_some()) {
            return None;
        }
        let cache = self.cache(scratch.slot)?;
        let sampled = self.learn && self.prio.should_sample_op(self.graph, step.op, scratch.executed + 1);
        (!sampled).then_some(cache)
    }

    /// Runs `node` on the short path (module docs), as `execute` runs any node: a failure is
    /// recorded in the run, and a node whose kernel deferred its end is returned.
    #[inline(always)]
    pub(in crate::exec) fn execute_lean(
        &self,
        node: u32,
        step: &Step,
        cache: &mut BlockCache,
        scratch: &mut Scratch,
    ) -> Option<Arc<PendingNode>> {
        scratch.executed += 1;
        // Its outputs are counted at its end, with what it frees (`settle_live`), or before it
        // leaves the short path any other way (`count_unadded`).
        scratch.unadded = self.prio.output_bytes[node as usize];
        // Set once the kernel's call ended well: a panic after it is in the node's end.
        let called = Cell::new(false);
        let outcome = catch_unwind(AssertUnwindSafe(|| {
            let pending = self.call_lean::<false>(node, step, cache, scratch)?;
            if pending.is_none() {
                called.set(true);
                self.end_node_ok::<true, true>(node, step, Some(cache), scratch);
            }
            Ok(pending)
        }));
        match outcome {
            Ok(Ok(pending)) => pending,
            Ok(Err(e)) => {
                self.count_unadded(scratch);
                self.node_failed(node, e);
                None
            }
            Err(panic) => {
                self.count_unadded(scratch);
                self.lean_panicked(node, called.get(), &*panic, scratch);
                None
            }
        }
    }

    /// Counts the outputs of the node on the short path as live now, if its end has not: before
    /// it leaves the short path by any way but a plain success (the general path's ends take
    /// them off as they were counted before the call).
    #[cold]
    pub(in crate::exec) fn count_unadded(&self, scratch: &mut Scratch) {
        let unadded = std::mem::take(&mut scratch.unadded);
        self.add_live(unadded, &mut scratch.counts.peak_live);
    }

    /// The run's own code panicked on the short path at `node`: after its kernel's call ended
    /// well (`called`: in the node's end), or before.
    #[cold]
    pub(in crate::exec) fn lean_panicked(
        &self,
        node: u32,
        called: bool,
        panic: &(dyn std::any::Any + Send),
        scratch: &mut Scratch,
    ) {
        match called {
            true => self.failed_after(node, panic, scratch),
            false => self.node_failed(node, self.internal_error(node, "while running", panic)),
        }
    }

    /// Places the outputs of `node` from `cache`, calls its kernel and checks what it left.
    /// `Ok(None)`: the outputs are values. As `run_kernel` otherwise. `SAMPLE`: the call is one
    /// the estimates time (`Priorities::should_sample_op`); a success is learned from.
    #[inline(always)]
    pub(in crate::exec) fn call_lean<const SAMPLE: bool>(
        &self,
        node: u32,
        step: &Step,
        cache: &mut BlockCache,
        scratch: &mut Scratch,
    ) -> Result<Option<Arc<PendingNode>>> {
        let g = self.graph;
        // SAFETY: this thread executes the node whose outputs these are.
        let outputs = unsafe { self.output_slots(step.values()) };
        self.place_plain(node, step, outputs, &mut scratch.counts.acquires, cache)?;
        let inputs = &self.inputs[step.inputs()];
        // SAFETY: as in `call_kernel`: every pointer is to the slot of an input whose producer
        // finished before this node became ready, and which nobody writes until it is done.
        let inputs: &[&Tensor] = unsafe { std::slice::from_raw_parts(inputs.as_ptr().cast(), inputs.len()) };
        let mut ctx = KernelCtx {
            node,
            names: g.node_names_c(),
            inputs,
            outputs: &mut *outputs,
            error: None,
            in_place: None,
            dynamic: None,
            run: (&self.context as *const crate::exec::RunContext<'_>).cast(),
            deferred: None,
        };
        // Timed from just before the call to just after, with the widest loop it ran (a sample
        // outside any kernel counts from none).
        let timer = SAMPLE.then(|| (crate::exec::node::parallel::swap_loop_width(0), Stopwatch::start()));
        let returned = match &step.c_kernel {
            // The C API's kernels: their function, called directly. It cannot unwind, so no
            // guard, and its return code is its whole result.
            Some(c) => Returned::C(c.call_raw(&mut ctx)),
            None => {
                let kernel = g.kernel(node).expect("operator nodes have kernels");
                Returned::Rust(catch_unwind(AssertUnwindSafe(|| kernel(&mut ctx))))
            }
        };
        let timed =
            timer.map(|(outer, watch)| (watch.elapsed_ns(), crate::exec::node::parallel::swap_loop_width(outer)));
        // An error message set by a kernel that then succeeded is not the node's.
        if returned.succeeded() && ctx.deferred.is_none() && check_outputs(g, node, ctx.outputs).is_ok() {
            if let Some((ns, width)) = timed {
                g.learn_sample(
                    node,
                    Sample {
                        ns,
                        thread_ns: None,
                        width: width.max(1),
                    },
                );
            }
            // A success owns nothing but, maybe, that message: no call to drop glue otherwise.
            std::mem::forget(returned);
            if ctx.error.is_some() {
                drop(ctx.error.take());
            }
            std::mem::forget(ctx);
            return Ok(None);
        }
        let (detail, deferred) = (ctx.error.take(), ctx.deferred.take());
        drop(ctx);
        self.lean_call_returned(node, outputs, returned.outcome(), (detail, deferred), timed, scratch)
    }

    /// A kernel call on the short path that was not a plain success: ended as the general path
    /// ends any call. `timed`: the call's duration and widest loop, if the estimates time it;
    /// they learn from it as from the general path's timed calls (a deferred one at its
    /// completion), its start put that long before now.
    #[cold]
    #[inline(never)]
    fn lean_call_returned(
        &self,
        node: u32,
        outputs: &mut [Slot],
        outcome: std::thread::Result<std::result::Result<(), String>>,
        (detail, deferred): (Option<String>, Option<Arc<dyn std::any::Any + Send + Sync>>),
        timed: Option<(u64, u32)>,
        scratch: &mut Scratch,
    ) -> Result<Option<Arc<PendingNode>>> {
        // The general path's ends (a failure's, a deferred call's) find the outputs counted.
        self.count_unadded(scratch);
        let failure = self.call_failure(node, outcome, detail, None);
        let thread = scratch.thread;
        let returned = timed.map(|_| Instant::now());
        let start = timed
            .zip(returned)
            .and_then(|((ns, _), at)| at.checked_sub(Duration::from_nanos(ns)));
        let called = move || Called {
            failure,
            thread,
            start,
            returned,
            sample: timed.is_some(),
            width: timed.map_or(1, |(_, width)| width.max(1)),
            reserved_dynamic: 0,
            allocated: 0,
            in_place_output: None,
            taken: None,
        };
        self.call_returned(node, outputs, deferred, called, scratch)
    }
}

/// How a kernel call on the short path returned.
enum Returned {
    /// A C function's return code (0: success).
    C(i32),
    /// A Rust kernel's result, or its panic.
    Rust(std::thread::Result<std::result::Result<(), String>>),
}

impl Returned {
    #[inline(always)]
    fn succeeded(&self) -> bool {
        matches!(self, Returned::C(0) | Returned::Rust(Ok(Ok(()))))
    }

    /// As a guarded call of the kernel's closure returns (`KernelFn`).
    fn outcome(self) -> std::thread::Result<std::result::Result<(), String>> {
        match self {
            Returned::C(rc) => Ok(CKernel::result(rc)),
            Returned::Rust(outcome) => outcome,
        }
    }
}
