//! One node's kernel call: placing its outputs (in place, in the plan's arena, from the thread's
//! cache or the pool), binding its inputs and calling the kernel. Its end, the checks of what the
//! kernel left included, is [`call_returned`](crate::exec::node::end_call).

use std::any::Any;
use std::cell::UnsafeCell;
use std::ffi::c_void;
use std::ops::Range;
use std::panic::{catch_unwind, AssertUnwindSafe};
use std::sync::atomic::Ordering;
use std::sync::Arc;
use std::time::Instant;

use crate::error::{err, Error, ErrorKind, Result};
use crate::exec::memory::cache::{BlockCache, CACHE_MAX_BYTES};
use crate::exec::node::pending::{Called, PendingNode};
use crate::exec::node::scratch::Scratch;
use crate::exec::state::annex::Step;
use crate::exec::state::{panic_text, RunState};
use crate::graph::OutputSize;
use crate::kernel::{Buffer, DynamicOutputs, KernelCtx, Slot};
use crate::pool::{sanitize, Owner, NEVER};
use crate::tensor::Tensor;

impl RunState<'_> {
    /// The input whose buffer output `k` (of `n` bytes) of `node` may take over, if the node
    /// declared the pair and it is safe now: the input holds a pool buffer (never caller memory
    /// or a planned arena slice) of at least `n` bytes, this node is its last reader (its
    /// reference count is this node's own reads; a graph output keeps one more), and the output
    /// need not be cleared first.
    pub(in crate::exec) fn take_over(&self, node: u32, k: u32, n: usize) -> Option<u32> {
        let (out, slot) = self.graph.in_place(node)?;
        if out != k
            || self.graph.zero_output(node)
            || self
                .plan
                .is_some_and(|p| p.offset(self.graph.node_values(node).start + k).is_some())
        {
            return None;
        }
        let inputs = self.graph.node_inputs(node);
        let v = *inputs.get(slot as usize)?;
        let reads = inputs.iter().filter(|&&x| x == v).count() as u32;
        // This node makes every read of the value (then its count, set or not, is not needed:
        // `refs`), or the others' decrements, and so their reads, happened before (Acquire).
        if self.initial_refs[v as usize] != reads && self.refs(v).load(Ordering::Acquire) != reads {
            return None;
        }
        // SAFETY: the producer of `v` finished before this node became ready.
        let held = unsafe { (*self.slots[v as usize].get()).buffer };
        (!held.ptr.is_null() && held.capacity >= n && !self.in_arena(held)).then_some(v)
    }

    /// With the pool's red zones on: after a kernel ran, checks the guards around its outputs
    /// and inputs, and names the node if it wrote out of bounds.
    #[inline(always)]
    pub(in crate::exec) fn check_red_zones(&self, node: u32, outputs: &[Slot]) -> Result<()> {
        match self.pool.config().red_zones {
            0 => Ok(()),
            _ => self.check_guards(node, outputs),
        }
    }

    /// `check_red_zones`, with red zones on: off the path of runs without them.
    #[inline(never)]
    fn check_guards(&self, node: u32, outputs: &[Slot]) -> Result<()> {
        let g = self.graph;
        let intact = |b: Buffer| match std::ptr::NonNull::new(b.ptr.cast::<u8>()) {
            // SAFETY: `b` is a live pool block of this run, `block` bytes long.
            Some(p) if b.capacity > 0 && !self.in_arena(b) => unsafe { self.pool.guards_intact(p, b.block) },
            _ => true,
        };
        // An in-place output's buffer is its input's block, whose `block` bytes the guards
        // surround: checked like any other.
        for (k, slot) in outputs.iter().enumerate() {
            if !intact(slot.buffer) {
                return err(
                    ErrorKind::KernelFailed,
                    format!(
                        "node {} wrote out of the bounds of output {k} ({} bytes): its red zone was overwritten",
                        g.node_label(node),
                        slot.buffer.capacity
                    ),
                );
            }
        }
        for (i, &v) in g.node_inputs(node).iter().enumerate() {
            // SAFETY: this node still holds its inputs; their slots do not change under it.
            let b = unsafe { (*self.slots[v as usize].get()).buffer };
            if !intact(b) {
                return err(
                    ErrorKind::KernelFailed,
                    format!(
                        "node {} wrote out of the bounds of input {i} ({} bytes): its red zone was overwritten",
                        g.node_label(node),
                        b.capacity
                    ),
                );
            }
        }
        Ok(())
    }

    /// The output slots of a node (its `values`), for the node alone to write.
    ///
    /// # Safety
    /// Only the thread executing `node` may call this, once at a time: nothing else touches a
    /// node's output slots until it finishes (module docs of `state`).
    #[allow(clippy::mut_from_ref)]
    pub(in crate::exec) unsafe fn output_slots(&self, values: Range<u32>) -> &mut [Slot] {
        let cells = &self.slots[values.start as usize..values.end as usize];
        // SAFETY: `UnsafeCell<Slot>` has the layout of `Slot`; exclusive per the contract.
        unsafe { std::slice::from_raw_parts_mut(UnsafeCell::raw_get(cells.as_ptr()), cells.len()) }
    }

    /// Asks the processor to bring the slot of `value` into cache, for writing: a hint, which
    /// neither reads nor writes it (nothing if `value` is out of range).
    #[inline(always)]
    pub(in crate::exec) fn prefetch_slot(&self, value: u32) {
        #[cfg(target_arch = "x86_64")]
        if let Some(cell) = self.slots.get(value as usize) {
            // SAFETY: a prefetch has no effect on memory; the address is a live slot's.
            unsafe { std::arch::x86_64::_mm_prefetch::<{ std::arch::x86_64::_MM_HINT_ET0 }>(cell.get().cast::<i8>()) }
        }
        #[cfg(not(target_arch = "x86_64"))]
        let _ = value;
    }

    /// Gives back what a node that failed holds in its output slots (a taken-over input stays
    /// its own, and arena slices are not the pool's) and empties them: its outputs never
    /// became values.
    pub(in crate::exec) fn unplace(&self, outputs: &mut [Slot], in_place_output: Option<usize>) {
        for (k, slot) in outputs.iter_mut().enumerate() {
            let buffer = std::mem::take(slot).buffer;
            if Some(k) != in_place_output {
                self.give_back(buffer);
            }
        }
    }

    /// Names the output whose placement failed.
    pub(in crate::exec) fn placement_error(&self, node: u32, v: u32, e: Error) -> Error {
        let g = self.graph;
        let k = v - g.node_values(node).start;
        let n = g.value_size(v).bytes().unwrap_or(0);
        Error::new(
            e.kind(),
            format!(
                "output {k} of node '{}' ({n} bytes): {}",
                g.node_name(node),
                e.message()
            ),
        )
    }

    /// Runs a node's kernel: places its outputs in their slots, calls it, and checks what it
    /// left. On failure every block the node took is back and its output slots are empty. A node
    /// whose kernel deferred its end is returned instead, its blocks where they are: it is
    /// checked, and cleaned up on failure, when it ends (`end_deferred_call`).
    pub(in crate::exec) fn run_kernel(
        &self,
        node: u32,
        step: &Step,
        scratch: &mut Scratch,
    ) -> Result<Option<Arc<PendingNode>>> {
        scratch.taken = None;
        let first = step.first;
        // SAFETY: this thread executes the node whose outputs these are.
        let outputs = unsafe { self.output_slots(step.values()) };
        let plain = step.plain && self.plain_run && !(step.hinted && self.hints.is_some());
        let placed = match self.cache(scratch.slot) {
            Some(cache) if plain => self
                .place_plain(node, step, outputs, &mut scratch.counts.acquires, cache)
                .map(|()| None),
            _ => self.place_outputs(node, first, outputs, scratch),
        };
        match placed {
            Ok(in_place_output) => self.call_kernel(node, step, outputs, scratch, in_place_output, plain),
            Err(e) => Err(e),
        }
    }

    /// The outputs of a plain node (see `Step::plain`) in a run without a plan, on a thread
    /// with a block cache: each a block of that cache. What `place_outputs` does for such a
    /// node, without the cases that cannot arise, for the nodes most graphs are made of (and
    /// what the short path places them with, [`lean`](crate::exec::node::lean)).
    #[inline(always)]
    pub(in crate::exec) fn place_plain(
        &self,
        node: u32,
        step: &Step,
        outputs: &mut [Slot],
        acquires: &mut u64,
        cache: &mut BlockCache,
    ) -> Result<()> {
        for k in 0..outputs.len() {
            let v = step.first + k as u32;
            // Plain outputs are statically sized; the first one's size is in the record.
            let n = match k {
                0 => step.first_bytes as usize,
                _ => self.graph.value_size(v).bytes().unwrap_or(0),
            };
            debug_assert_eq!(Some(n), self.graph.value_size(v).bytes(), "a plain node's record");
            let buffer = match self.take_cached(cache, n) {
                Ok((buffer, refills)) => {
                    *acquires += refills;
                    buffer
                }
                Err(e) => {
                    self.unplace(&mut outputs[..k], None);
                    return Err(self.placement_error(node, v, e));
                }
            };
            sanitize::reveal(buffer.ptr.cast(), n);
            outputs[k].place(buffer, n);
        }
        Ok(())
    }

    /// Places every output of `node` in the first way that applies: the input it takes over,
    /// its slice of the plan's arena, a block of the thread's cache, a block of the pool. A
    /// dynamic output has none until the kernel allocates it. Returns the output placed in
    /// place, if any.
    fn place_outputs(
        &self,
        node: u32,
        first: u32,
        outputs: &mut [Slot],
        scratch: &mut Scratch,
    ) -> Result<Option<usize>> {
        let g = self.graph;
        let mut cache = self.cache(scratch.slot);
        let mut in_place_output = None;
        for k in 0..outputs.len() {
            let v = first + k as u32;
            let placed: Result<Buffer> = 'placed: {
                let OutputSize::Bytes(n) = g.value_size(v) else {
                    break 'placed Ok(Buffer::NONE);
                };
                if n == 0 {
                    // An empty tensor: no block, wherever a plan would put it.
                    break 'placed Ok(Buffer::EMPTY);
                }
                let hint = self.hint(v);
                if let Some(input) = self.take_over(node, k as u32, n) {
                    // SAFETY: the producer of `input` finished, and this node is its last reader.
                    let held = unsafe { (*self.slots[input as usize].get()).buffer };
                    scratch.taken = Some(input);
                    in_place_output = Some(k);
                    break 'placed Ok(Buffer {
                        ptr: held.ptr,
                        capacity: n,
                        block: held.block,
                    });
                }
                let (buffer, cleared) = if let Some(offset) = self.plan.and_then(|p| p.offset(v)) {
                    if self.plan.is_some_and(|p| p.alias_of(v).is_some()) {
                        in_place_output = Some(k);
                    }
                    // The plan gives this value `n` bytes of the arena, which no value live at the
                    // same time overlaps.
                    (
                        Buffer::new((self.arena.ptr as usize + offset as usize) as *mut c_void, n),
                        false,
                    )
                } else if let Some(cache) = cache.as_deref_mut().filter(|_| n <= CACHE_MAX_BYTES && hint.is_none()) {
                    let buffer = match self.take_cached(cache, n) {
                        Ok((buffer, refills)) => {
                            scratch.counts.acquires += refills;
                            buffer
                        }
                        Err(e) => break 'placed Err(e),
                    };
                    sanitize::reveal(buffer.ptr.cast(), n);
                    (buffer, false)
                } else {
                    if let Some(cache) = cache.as_deref_mut() {
                        cache.report_parked(self.pool);
                    }
                    let until = g.release_tick(v).map_or(NEVER, u64::from);
                    match self.pool.acquire_at(n, g.zero_output(node), until, Owner::Run, hint) {
                        Ok(p) => {
                            scratch.counts.acquires += 1;
                            (Buffer::new(p.as_ptr().cast(), n), true)
                        }
                        Err(e) => break 'placed Err(e),
                    }
                };
                if g.zero_output(node) && !cleared {
                    // SAFETY: the buffer holds `n` bytes and is this node's alone.
                    unsafe { buffer.ptr.cast::<u8>().write_bytes(0, n) };
                }
                Ok(buffer)
            };
            match placed {
                // The descriptor goes straight into the value's slot, where the kernel fills it
                // in and the consumers will read it: no copy at the end.
                Ok(buffer) => outputs[k].place(buffer, buffer.capacity),
                Err(e) => {
                    self.unplace(&mut outputs[..k], in_place_output);
                    return Err(self.placement_error(node, v, e));
                }
            }
        }
        Ok(in_place_output)
    }

    /// Calls the kernel of `node`, whose outputs are in their slots, and ends the call
    /// (`end_call`), unless the kernel deferred its end: then the node is returned, and the
    /// caller arrives at it (`PendingNode::kernel_arrives`). A plain node has no dynamic output
    /// to serve.
    #[allow(clippy::too_many_arguments)]
    fn call_kernel(
        &self,
        node: u32,
        step: &Step,
        outputs: &mut [Slot],
        scratch: &mut Scratch,
        in_place_output: Option<usize>,
        plain: bool,
    ) -> Result<Option<Arc<PendingNode>>> {
        let g = self.graph;
        // The inputs' descriptors where their producers left them: no copy.
        let inputs = &self.inputs[step.inputs()];
        // SAFETY: `*const Tensor` and `&Tensor` have one layout; every pointer is to the slot of
        // an input whose producer finished before this node became ready, and which nobody
        // writes until this node (one of its readers) is done (module docs).
        let inputs: &[&Tensor] = unsafe { std::slice::from_raw_parts(inputs.as_ptr().cast(), inputs.len()) };
        let kernel = g.kernel(node).expect("operator nodes have kernels");
        let mut dynamic = (!plain).then_some(NodeOutputs {
            run: self,
            node,
            slot: scratch.slot,
            reserved: 0,
            refused: None,
            acquired: 0,
            bytes: 0,
        });
        let mut ctx = KernelCtx {
            node,
            names: g.node_names_c(),
            inputs,
            outputs: &mut *outputs,
            error: None,
            in_place: in_place_output,
            dynamic: dynamic.as_mut().map(|d| d as &mut dyn DynamicOutputs),
            run: (&self.context as *const crate::exec::RunContext<'_>).cast(),
            deferred: None,
        };
        scratch.executed += 1;
        let sample = self.learn && self.prio.should_sample_op(g, step.op, scratch.executed);
        if let Some(observer) = self.observer {
            let at = self.observation(node, scratch.thread, Instant::now(), None);
            // An observer's panic must not fail the node or reach a worker.
            let _ = catch_unwind(AssertUnwindSafe(|| observer.node_started(&at)));
        }
        // Timed after the observer's call, so that what it costs is not the kernel's.
        let start = (sample || self.trace.is_some() || self.observer.is_some()).then(Instant::now);
        let outer_width = if sample {
            crate::exec::node::parallel::swap_loop_width(0)
        } else {
            0
        };
        let outcome = catch_unwind(AssertUnwindSafe(|| kernel(&mut ctx)));
        let returned = start.map(|_| Instant::now());
        let width = match sample {
            true => crate::exec::node::parallel::swap_loop_width(outer_width).max(1),
            false => 1,
        };
        let detail = ctx.error.take();
        let deferred = ctx.deferred.take();
        let (refused, reserved_dynamic, allocated) = match dynamic {
            Some(mut d) => {
                scratch.counts.acquires += d.acquired;
                (d.refused.take(), d.reserved, d.bytes)
            }
            None => (None, 0, 0),
        };
        let failure = self.call_failure(node, outcome, detail, refused);
        // Made where it is used: built once before the branches, the record lived in memory on
        // every node's path (71 instructions a node, benches/c/instructions.sh).
        let (thread, taken) = (scratch.thread, scratch.taken);
        let called = move || Called {
            failure,
            thread,
            start,
            returned,
            sample,
            width,
            reserved_dynamic,
            allocated,
            in_place_output,
            taken,
        };
        self.call_returned(node, outputs, deferred, called, scratch)
    }

    /// The kernel's failure, from how its call went: the panic it raised, the error it returned
    /// (with the message it set), or a dynamic output the memory limit refused, which fails the
    /// node whatever the kernel made of the refusal.
    #[inline(always)]
    pub(in crate::exec) fn call_failure(
        &self,
        node: u32,
        outcome: std::thread::Result<std::result::Result<(), String>>,
        detail: Option<String>,
        refused: Option<Error>,
    ) -> Option<Error> {
        let g = self.graph;
        match outcome {
            Ok(_) if refused.is_some() => refused,
            Ok(Ok(())) => None,
            Ok(Err(msg)) => {
                let msg = match detail {
                    Some(d) => format!("{d} ({msg})"),
                    None => msg,
                };
                Some(Error::new(
                    ErrorKind::KernelFailed,
                    format!("node {} failed: {msg}", g.node_label(node)),
                ))
            }
            Err(panic) => Some(Error::new(
                ErrorKind::KernelPanicked,
                format!(
                    "kernel of node {} panicked: {}",
                    g.node_label(node),
                    panic_text(&*panic)
                ),
            )),
        }
    }

    /// After a kernel returned: ends its call (`end_call`), unless it deferred its end; then
    /// the node is returned, and the caller arrives at it (`PendingNode::kernel_arrives`).
    #[inline(always)]
    pub(in crate::exec) fn call_returned(
        &self,
        node: u32,
        outputs: &mut [Slot],
        deferred: Option<Arc<dyn Any + Send + Sync>>,
        called: impl FnOnce() -> Called,
        scratch: &mut Scratch,
    ) -> Result<Option<Arc<PendingNode>>> {
        let Some(deferred) = deferred else {
            self.end_call(node, outputs, called(), None, scratch)?;
            return Ok(None);
        };
        self.graph.note_deferral(node);
        let called = called();
        if let Some(e) = &called.failure {
            // The run stops starting nodes now, not only once the work completes; the node's
            // blocks stay where they are until then.
            self.fail(e.clone());
        }
        let pending = PendingNode::from_ctx(deferred);
        pending.kernel_returned(self, node, called);
        Ok(Some(pending))
    }
}

/// The run's side of one kernel call's dynamic outputs: reserves their bytes under the memory
/// limit and takes their blocks from the pool.
struct NodeOutputs<'s, 'r> {
    run: &'s RunState<'r>,
    node: u32,
    /// The thread's slot in the run (its block cache).
    slot: Option<usize>,
    /// Bytes reserved under the limit so far (given back if the node fails).
    reserved: u64,
    /// An allocation the memory limit refused: the run fails with it whatever the kernel returns.
    refused: Option<Error>,
    /// Blocks taken from the pool, and their bytes.
    acquired: u64,
    bytes: u64,
}

impl DynamicOutputs for NodeOutputs<'_, '_> {
    fn is_dynamic(&self, i: usize) -> bool {
        let g = self.run.graph;
        g.value_size(g.node_values(self.node).start + i as u32) == OutputSize::Dynamic
    }

    fn allocate(&mut self, i: usize, nbytes: usize) -> Result<*mut c_void> {
        let (run, g) = (self.run, self.run.graph);
        if run.has_gate() {
            if let Err(e) = run.reserve_dynamic(self.node, nbytes as u64) {
                self.refused = Some(e.clone());
                return Err(e);
            }
            self.reserved += nbytes as u64;
        }
        if let Some(cache) = run.cache(self.slot) {
            cache.report_parked(run.pool);
        }
        let value = g.node_values(self.node).start + i as u32;
        let until = g.release_tick(value).map_or(NEVER, u64::from);
        match run
            .pool
            .acquire_until(nbytes, g.zero_output(self.node), until, Owner::Run)
        {
            Ok(block) => {
                self.acquired += 1;
                self.bytes += nbytes as u64;
                Ok(block.as_ptr().cast())
            }
            Err(e) => {
                if run.has_gate() {
                    // The kernel may go on (try a smaller size): this reservation holds nothing.
                    run.sub_live(nbytes as u64);
                    self.reserved -= nbytes as u64;
                }
                err(
                    e.kind(),
                    format!(
                        "dynamic output {i} of node '{}': {}",
                        g.node_name(self.node),
                        e.message()
                    ),
                )
            }
        }
    }
}

impl RunState<'_> {
    /// What an observer is told of `node` on `thread`: started at `start`, ended at `end` (with
    /// whether it succeeded) if it has.
    pub(in crate::exec) fn observation(
        &self,
        node: u32,
        thread: u32,
        start: Instant,
        end: Option<(Instant, bool)>,
    ) -> crate::exec::NodeObservation {
        let started = self.started.unwrap_or(start);
        let since = |t: Instant| t.saturating_duration_since(started).as_nanos() as u64;
        crate::exec::NodeObservation {
            node,
            thread,
            start_ns: since(start),
            end_ns: end.map_or(0, |(t, _)| since(t).max(1)),
            ok: end.map_or(true, |(_, ok)| ok),
        }
    }
}
