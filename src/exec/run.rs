//! Running a graph: options, the two drivers (the calling thread alone in topological order,
//! or an executor), and the result.

use std::ffi::c_void;
use std::marker::PhantomData;
use std::mem::ManuallyDrop;
use std::sync::Arc;
use std::time::Instant;

use super::cache::{empty_slot, release, release_many};
use super::executor::Executor;
use super::outcome::{Outcome, RunStats};
use super::recycle::{Lent, RunArrays};
use super::state::{RunState, StateOptions};
use super::stopwatch::Stopwatch;
use crate::error::{err, ErrorKind, Result};
use crate::graph::{Graph, ValueRef};
use crate::kernel::Buffer;
use crate::plan::{Mode, Plan};
use crate::pool::Pool;
use crate::sched::{Policy, Priorities, RunPriority};
use crate::tensor::{Tensor, MAX_DIMS};
use crate::trace::NodeEvent;

/// Caller memory for one graph input, borrowed for as long as the binding lives (so for the
/// whole run). Its size must equal the input's declared size and its address be 16-byte
/// aligned (the run checks both); kernels only read it.
///
/// The layout is that of the C `gs_input_binding` (the borrow marker takes no space), so the C
/// API passes the caller's array through without copying it.
#[repr(C)]
#[derive(Clone, Copy, Debug)]
pub struct InputBinding<'a> {
    value: ValueRef,
    tensor: Tensor,
    _data: PhantomData<&'a [u8]>,
}

/// Where the descriptor sits in an [`InputBinding`], in bytes from its start: the C API relies
/// on it.
pub const INPUT_BINDING_TENSOR_OFFSET: usize = std::mem::offset_of!(InputBinding<'static>, tensor);

impl<'a> InputBinding<'a> {
    /// Binds graph input `value` to `data`.
    pub fn new(value: ValueRef, data: &'a [u8]) -> Self {
        InputBinding {
            value,
            tensor: Tensor::new(data.as_ptr() as *mut c_void, data.len()),
            _data: PhantomData,
        }
    }

    /// Sets the dtype and shape kernels see (graphsched never reads them).
    pub fn with_shape(mut self, dtype: i32, dims: &[i64]) -> Self {
        let n = dims.len().min(MAX_DIMS);
        self.tensor.dtype = dtype;
        self.tensor.ndim = n as i32;
        self.tensor.dims[..n].copy_from_slice(&dims[..n]);
        self
    }

    /// Binds graph input `value` to the memory `tensor` describes.
    ///
    /// # Safety
    /// `tensor.data` is valid for reads of `tensor.nbytes` bytes, and nothing writes them, for
    /// as long as `'a` (so for every run that uses the binding).
    pub unsafe fn from_raw(value: ValueRef, tensor: Tensor) -> Self {
        InputBinding {
            value,
            tensor,
            _data: PhantomData,
        }
    }

    /// The graph input this binding is for.
    pub fn value(&self) -> ValueRef {
        self.value
    }

    /// The descriptor kernels see.
    pub fn tensor(&self) -> &Tensor {
        &self.tensor
    }
}

/// How to run a graph.
#[derive(Clone, Copy, Default)]
pub struct RunOptions<'a> {
    /// One binding per graph input.
    pub inputs: &'a [InputBinding<'a>],
    /// Run on these threads, by priority; `None`: on the calling thread alone, in topological
    /// order (policy and window do not apply). So does, unless `memory_limit_bytes` or
    /// `force_executor` is set, a graph that can never have two nodes ready at once (a chain),
    /// and one whose kernels, as estimated, are too short for the threads to save more than
    /// they cost ([`Priorities::spreading_pays`]). Its kernels still reach the executor.
    pub executor: Option<&'a Executor>,
    /// Run on the `executor`'s threads even where the calling thread alone is expected to be
    /// faster (see `executor`).
    pub force_executor: bool,
    /// Which ready node runs first on an executor (default: [`Policy::BottomLevel`]).
    pub policy: Policy,
    /// Most nodes of this run in flight at once: executing, or pending (deferred by their
    /// kernels, `KernelCtx::defer`, and not completed yet); 0: no cap but the executor's
    /// threads, and none on pending nodes.
    pub window: usize,
    /// Most bytes this run's values may hold at once; 0: no limit. Nodes whose outputs do not
    /// fit wait for releases; a run that cannot go on fails with `ErrorKind::MemoryLimit`.
    /// Outputs of dynamic size are counted once allocated, not admitted in advance.
    pub memory_limit_bytes: u64,
    /// Keep the graph's learned estimates as they are (do not time the kernels). A graph no run
    /// has measured then keeps the executor's threads (`Priorities::spreading_pays`).
    pub freeze_estimates: bool,
    /// Record when and where every node ran ([`RunResult::events`]) and the time spent in
    /// kernels; costs a clock reading and a lock per node.
    pub trace: bool,
    /// Place statically sized values at this plan's offsets, in one arena taken from the pool
    /// per run (kept by the result while it lives). A sequential plan runs without an executor,
    /// in the plan's order; a parallel-safe or scheduled plan runs either way (on a scheduled
    /// plan, nodes also wait for the plan's ordering constraints).
    pub plan: Option<&'a Plan>,
    /// Without a `plan`: use the graph's own, made at the first run that asks (sequential for
    /// runs on their caller alone, scheduled for the executor's threads when the run goes on
    /// them: see `executor`), so that later runs place every static value in one arena.
    /// Ignored under a memory limit, which admission keeps on the dynamic pool. Not the
    /// default: a result keeps the whole arena while it holds its outputs.
    pub auto_plan: bool,
    /// Another thread may stop the run with this token: no new node starts, running kernels
    /// finish, every buffer goes back, and the run returns `ErrorKind::Cancelled`.
    pub cancel: Option<&'a CancelToken>,
    /// Past this instant no new node starts; the run returns `ErrorKind::DeadlineExceeded`.
    pub deadline: Option<Instant>,
    /// Data of this run for its kernels ([`KernelCtx::run_data`](crate::KernelCtx::run_data)): what a graph-wide closure
    /// cannot know, such as the request being served.
    pub data: Option<&'a (dyn std::any::Any + Send + Sync)>,
    /// Hears each node start and end ([`Observer`](super::Observer)); `None` costs nothing.
    pub observer: Option<&'a dyn super::Observer>,
    /// How urgent the run is against the other runs on its executor: a high-priority run's
    /// nodes are taken before any normal run's, on every thread ([`RunPriority`]).
    pub priority: RunPriority,
}

/// Stops runs from another thread. One token may serve many runs; once cancelled it stays so
/// until [`reset`](Self::reset).
#[derive(Debug, Default)]
pub struct CancelToken {
    /// Set by `cancel`, cleared only by `reset` (between runs). The swap that sets it is AcqRel
    /// so exactly one caller sees `false` (and reports that it cancelled); runs read it with
    /// Acquire between nodes, and nothing else is published through it.
    cancelled: std::sync::atomic::AtomicBool,
}

impl CancelToken {
    /// A token not cancelled yet. Share it by reference (it is `Sync`) or in an `Arc`.
    pub fn new() -> Self {
        CancelToken::default()
    }

    /// Cancels; true for the call that did it, false if the token was cancelled already.
    pub fn cancel(&self) -> bool {
        !self.cancelled.swap(true, std::sync::atomic::Ordering::AcqRel)
    }

    /// Makes the token usable for another run; true if it was cancelled. Between runs: a run
    /// still using it may or may not see the cancellation that this undoes.
    pub fn reset(&self) -> bool {
        self.cancelled.swap(false, std::sync::atomic::Ordering::AcqRel)
    }

    /// Whether [`cancel`](Self::cancel) has been called, by any thread.
    pub fn is_cancelled(&self) -> bool {
        self.cancelled.load(std::sync::atomic::Ordering::Acquire)
    }
}

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
    /// Only the graph outputs' slots hold anything (`RunState::finish`), and its
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
                    "output {} of node '{}' is not a graph output; mark it (gs_graph_mark_output) to keep it",
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
    /// ([`Executor::set_memory_budget`]); 0 without one.
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
        arrays.give_back(&self.graph);
    }
}

/// Runs `graph` once. On failure every buffer the run took is back in the pool before this
/// returns, exactly one error is reported (the first), and the graph can run again.
pub fn run(graph: &Arc<Graph>, pool: &Arc<Pool>, options: &RunOptions<'_>) -> Result<RunResult> {
    if graph.has_dynamic_inputs() {
        // Runs go on the graph made for these input sizes (`graph/specialize.rs`).
        if options.plan.is_some() {
            // `Plan::new` refuses such a graph; a plan of another graph gets the same answer.
            crate::plan::refuse_dynamic_inputs(graph)?;
        }
        let sizes = super::bind::dynamic_sizes(graph, options.inputs)?;
        return run(&graph.specialize(&sizes)?, pool, options);
    }
    // Under the executor's memory budget the run reserves its own bound, and keeps within it
    // (`budget.rs`); the entry is released when the run returns, whichever way.
    let entry = match options.executor {
        Some(e) => e
            .shared()
            .budget
            .enter(|| reservation(graph, options), || graph.describe())?,
        None => None,
    };
    let asked = *options;
    let mut options = *options;
    if let Some(entry) = &entry {
        if options.plan.is_none() {
            options.memory_limit_bytes = entry.bytes();
        }
    }
    let options = &options;
    let stopwatch = Stopwatch::start();
    // Traces and observers count times from the run's start; no other run reads the clock for it.
    let started = (options.trace || options.observer.is_some()).then(Instant::now);
    if let Some(plan) = options.plan {
        plan.check_graph(graph)?;
        if matches!(plan.mode(), Mode::Sequential(_)) && options.executor.is_some() {
            return err(
                ErrorKind::InvalidArgument,
                "a sequential plan holds only for its own order: run it without an executor, or plan in parallel-safe mode",
            );
        }
        if plan.scheduled().is_some() && options.memory_limit_bytes > 0 {
            // Admission orders nodes by the graph's edges alone; the plan's arena already fixes
            // what the run holds.
            return err(
                ErrorKind::InvalidArgument,
                "a scheduled plan orders nodes beyond the graph's edges, which memory admission does not know: \
                 run it without a memory limit (its arena fixes the run's memory), or plan in parallel-safe mode",
            );
        }
    }
    let mut arrays = Lent::take(graph);
    let (graph_prio, samples) = arrays.priorities(graph);
    // A limit the budget set does not keep a run on the threads: on its caller alone it follows
    // the order admission's guarantee is about, within the same bound.
    let executor = options.executor.filter(|e| spreads(graph, &graph_prio, e, &asked));
    let plan = match options.plan {
        None if options.auto_plan && options.memory_limit_bytes == 0 => {
            super::auto_plan::auto_plan(graph, executor.map(Executor::threads))
        }
        caller => caller,
    };
    let os_allocs_before = pool.os_allocs();
    // Start from a settled pool, so that repeated runs make the same placement choices.
    pool.settle();
    let threads = executor.map_or(1, Executor::threads);
    arrays.fit_caches(super::cache::cache_count(pool, options.memory_limit_bytes, threads));
    arrays.open_reserve(pool, executor.is_none());
    // Large values go where a placement of the graph's lifetimes puts them, from free space
    // the pool has now (`hints.rs`); a caller's plan places them itself.
    let executor_hints;
    let hints = match (plan, executor) {
        (Some(_), _) => None,
        (None, None) => super::hints::sequential(graph),
        (None, Some(e)) => {
            executor_hints = super::hints::parallel(graph, e.threads(), &graph_prio);
            executor_hints.as_deref()
        }
    };
    // A scheduled plan's runs follow its priorities: the graph's, with its ordering constraints;
    // so do runs on hints along a schedule, unless a memory limit's admission is in charge.
    let constrained = match (hints, options.memory_limit_bytes) {
        (Some(h), 0) => h.priorities(&graph_prio),
        _ => None,
    };
    let prio = match (plan.and_then(Plan::scheduled), constrained) {
        (Some(s), _) => (s.priorities.clone(), None),
        (None, Some(p)) => (p, None),
        _ => (graph_prio, Some(samples)),
    };
    let hints = hints.and_then(|h| Some((h, pool.room_for(h.bytes as usize)?)));
    let templates = super::recycle::templates(graph);
    arrays.reset(templates.1, &prio.0);
    // A block, so that the state drops where it lies (`drop(state)` moved it whole first), and
    // before the arrays it borrows: after a failure they go back to the graph empty.
    let ((nodes_run, peak_live_bytes, acquires), busy_ns, events, arena, prio) = {
        let mut state = RunState::new(
            graph,
            pool,
            &arrays,
            StateOptions {
                memory_limit: options.memory_limit_bytes,
                window: crate::sched::window_cap(options.window).map(|w| w.min(u32::MAX as usize) as u32),
                learn: !options.freeze_estimates,
                policy: options.policy,
                priority: options.priority,
                parallel: executor.is_some(),
                trace: options.trace,
                plan,
                cancel: options.cancel,
                deadline: options.deadline,
                hints,
                context: super::RunContext {
                    data: options.data,
                    pool,
                    executor: options.executor,
                },
                observer: options.observer,
                started,
                prio,
                templates,
            },
        );
        state.bind(options.inputs)?;
        state.take_arena_from_pool()?;
        match executor {
            Some(executor) => {
                executor.drive(&state, &state.prio.roots);
            }
            None => super::serial::in_order(&state, plan.map_or(state.sequential_order(), |p| p.order())),
        }
        state.flush_caches();
        // Dropping `state` on failure returns every buffer it holds.
        if let Some(e) = state.take_error() {
            return Err(e);
        }
        let (nodes_run, _, _) = state.stats();
        let operators = graph.node_count() - graph.graph_inputs().len();
        if nodes_run as usize != operators {
            // A run that ends early without an error would hand back missing outputs: never.
            return err(
                ErrorKind::KernelPanicked,
                format!(
                    "internal error: the run ended with {} of {operators} nodes executed",
                    nodes_run
                ),
            );
        }
        state.end_bindings()?;
        let (stats, busy_ns, events, arena) = (state.stats(), state.busy_ns(), state.take_events(), state.take_arena());
        (stats, busy_ns, events, arena, state.finish())
    };
    let mut arrays = arrays.keep();
    arrays.prio = prio;
    arrays.outcome = Outcome {
        stats: RunStats {
            wall_ns: stopwatch.elapsed_ns(),
            nodes_run,
            peak_live_bytes,
            acquires,
            os_allocs: pool.os_allocs() - os_allocs_before,
            threads: threads as u64,
            busy_ns,
        },
        events,
        traced: options.trace,
        arena,
        budget_wait_ns: entry.as_ref().map_or(0, |e| e.waited_ns),
    };
    Ok(RunResult {
        graph: graph.clone(),
        pool: pool.clone(),
        arrays: ManuallyDrop::new(arrays),
    })
}

/// What a run reserves of its executor's memory budget: its plan's arena, or its own memory
/// limit, or else the max-live bound of the order its admission keeps safe (at which it always
/// completes).
fn reservation(graph: &Graph, options: &RunOptions<'_>) -> u64 {
    match (options.plan, options.memory_limit_bytes) {
        (Some(plan), _) => plan.arena_bytes(),
        (None, 0) => graph.lowest_live_order().peak,
        (None, limit) => limit,
    }
}

/// Whether a run of `graph` given `executor` goes on its threads, rather than on its caller
/// alone, as a run without one. Always under a memory limit (whose admission differs without an
/// executor) or when the caller insists (`RunOptions::force_executor`). Otherwise not for a graph
/// that can never have two nodes ready at once (a chain): the threads could add nothing but
/// their queues. Nor for one whose kernels, as estimated, are too short to pay for the threads
/// (`Priorities::spreading_pays`). Either way its kernels still reach the executor through
/// their context.
fn spreads(graph: &Graph, prio: &Priorities, executor: &Executor, options: &RunOptions<'_>) -> bool {
    options.memory_limit_bytes > 0
        || options.force_executor
        || (!super::recycle::is_serial(graph) && prio.spreading_pays(executor.threads()))
}
