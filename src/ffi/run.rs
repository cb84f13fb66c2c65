//! `gs_run` and `gs_result_*`.

use std::cell::Cell;
use std::mem::MaybeUninit;

use std::ffi::c_void;

use super::cancel::gs_cancel_token;
use super::executor::gs_executor;
use super::graph::gs_graph;
use super::gs_status::*;
use super::handle::{free_handle_with, handle_ref, into_handle_boxed, out_arg, slice_arg, Handle};
use super::observe::{gs_observer_fn, CObserver, CRunData};
use super::plan::gs_plan;
use super::pool::gs_pool;
use super::status::{guard, FfiError};
use super::{gs_status, RunStats, Tensor, ValueRef};
use crate::exec::{self, InputBinding, RunOptions, RunResult};
use crate::sched::{Policy, RunPriority};

/// `gs_run_options.policy` (and `gs_sim_options.policy`): the recommended order, what zeroed
/// options get: highest bottom level first, which beat critical path first on a corpus
/// (BENCHMARKS.md, "Which order").
pub const GS_POLICY_DEFAULT: u32 = 0;
/// `gs_run_options.policy`: readiness order, no priorities (the baseline).
pub const GS_POLICY_FIFO: u32 = 1;
/// `gs_run_options.policy`: highest bottom level first (the longest path still ahead), then
/// shortest estimate.
pub const GS_POLICY_BOTTOM_LEVEL: u32 = 2;
/// `gs_run_options.policy`: critical path first (least slack), then shortest estimate.
pub const GS_POLICY_CRITICAL_PATH: u32 = 3;
/// `gs_run_options.flags`: do not time kernels; keep the learned estimates as they are. A graph
/// `gs_run_options.priority`: the default.
pub const GS_PRIORITY_NORMAL: u32 = 0;
/// `gs_run_options.priority`: ahead of every normal run's nodes on the executor's threads.
pub const GS_PRIORITY_HIGH: u32 = 1;

/// no run has measured then keeps the executor's threads (see `gs_run_options.executor`).
pub const GS_RUN_FREEZE_ESTIMATES: u32 = 1;
/// `gs_run_options.flags`: record when and where every node runs (`gs_result_write_trace`) and
/// the time spent in kernels (`gs_run_stats.busy_ns`); a clock reading and a lock per node.
pub const GS_RUN_TRACE: u32 = 2;
/// `gs_run_options.flags`: without `plan`, use the graph's own static plan, made at the first
/// run that asks (sequential on the caller alone, for the executor's threads when the run goes
/// on them: see `gs_run_options.executor`), so that
/// later runs place every static value in one arena. Ignored under a memory limit. A result
/// keeps the whole arena while it lives.
pub const GS_RUN_AUTO_PLAN: u32 = 4;
/// `gs_run_options.flags`: run on the executor's threads even where graphsched expects the
/// calling thread alone to be faster: a graph that can never have two nodes ready at once, or
/// one whose kernels, as estimated, are too short to pay for the threads (see
/// `gs_run_options.executor`).
pub const GS_RUN_FORCE_EXECUTOR: u32 = 8;
/// `gs_run_options.flags`: read no clock for the run's wall time (`gs_run_stats.wall_ns` stays
/// 0). The two reads (the time-stamp counter, or `clock_gettime`: 20-40 ns each on a virtual
/// machine) are a fifth of a one-node run's round trip; a caller that times its runs itself, or
/// not at all, need not pay them.
pub const GS_RUN_NO_WALL_TIME: u32 = 16;

/// A `GS_POLICY_*` value from C, checked.
pub(crate) fn policy_from_c(policy: u32) -> Result<Policy, FfiError> {
    match policy {
        GS_POLICY_DEFAULT => Ok(Policy::default()),
        GS_POLICY_CRITICAL_PATH => Ok(Policy::CriticalPath),
        GS_POLICY_FIFO => Ok(Policy::Fifo),
        GS_POLICY_BOTTOM_LEVEL => Ok(Policy::BottomLevel),
        other => Err(FfiError::new(
            GS_ERR_INVALID_ARGUMENT,
            format!("options.policy is {other}, not a GS_POLICY_* value"),
        )),
    }
}

/// Caller memory for one graph input. `tensor.nbytes` must equal the input's declared size and
/// `tensor.data` be 16-byte aligned; kernels only read it. The memory must stay valid, and
/// unwritten, until `gs_run` returns. A binding of 0 bytes (an empty batch) may point anywhere,
/// NULL included: kernels see it as every empty tensor, at `GS_EMPTY_DATA`.
#[repr(C)]
#[derive(Clone, Copy, Debug)]
pub struct gs_input_binding {
    /// The graph input, as `gs_graph_add_input` returned it.
    pub value: ValueRef,
    /// The caller's bytes and, if the engine wants kernels to see one, their shape.
    pub tensor: Tensor,
}

// `gs_run` reads the caller's array as `InputBinding`s in place: the same fields, in the same
// order, under `repr(C)` (the Rust type's borrow marker is zero-sized).
static_assertions::assert_eq_size!(gs_input_binding, InputBinding<'static>);
static_assertions::assert_eq_align!(gs_input_binding, InputBinding<'static>);
const _: () = assert!(std::mem::offset_of!(gs_input_binding, tensor) == exec::INPUT_BINDING_TENSOR_OFFSET);

/// How to run a graph. Zero-initialize, then fill in; all zeros means defaults. NULL options
/// are fine for a graph without inputs.
#[repr(C)]
#[derive(Clone, Copy, Debug)]
pub struct gs_run_options {
    /// One binding per graph input.
    pub inputs: *const gs_input_binding,
    /// Length of `inputs`; 0 for a graph without inputs (`inputs` may then be NULL).
    pub num_inputs: usize,
    /// Run on this executor's threads, by priority. NULL: on the calling thread alone, in
    /// topological order (policy and window do not apply). So does, unless `memory_limit_bytes`
    /// or `GS_RUN_FORCE_EXECUTOR` is set, a graph that can never have two nodes ready at once (a
    /// chain), and one whose kernels, as estimated, are too short for the threads to save more
    /// than they cost (150 ns a node, README: on two threads, kernels under about 300 ns). Its
    /// kernels still reach the executor (`gs_ctx_executor`).
    pub executor: *mut gs_executor,
    /// Most bytes the run's values may hold at once; 0: no limit. Ready nodes whose outputs do
    /// not fit wait for releases; a run that cannot go on fails with `GS_ERR_MEMORY_LIMIT`. With
    /// a scheduled plan (`gs_plan_new_scheduled`, `GS_PLAN_SCHEDULED`), whose arena fixes what
    /// the run holds, a limit is refused: `GS_ERR_INVALID_ARGUMENT`.
    pub memory_limit_bytes: u64,
    /// Most nodes of the run in flight at once: executing, or pending (deferred by their kernels,
    /// `gs_ctx_defer`, and not completed yet); 0: no cap but the executor's threads, and none on
    /// pending nodes.
    pub window: u32,
    /// `GS_POLICY_*`.
    pub policy: u32,
    /// `GS_RUN_*` bits.
    pub flags: u32,
    /// `GS_PRIORITY_NORMAL` (0) or `GS_PRIORITY_HIGH`: a high-priority run's nodes are taken
    /// before any normal run's on every thread of the executor (within a run, `policy` holds),
    /// and under the executor's memory budget it enters ahead of the normal runs waiting (at
    /// most 8 in a row ahead of the oldest, `gs_executor_set_memory_budget`).
    /// Added in 0.4 where 0.3 had padding: zero-initialized options keep their meaning.
    pub priority: u32,
    /// Place statically sized values at this plan's offsets (`gs_plan_new`), in one arena taken
    /// from the pool per run and kept by the result. NULL: every value from the pool. A
    /// sequential plan runs only without an executor.
    pub plan: *const gs_plan,
    /// A token another thread may cancel the run with (`gs_cancel_token_new`); NULL: none.
    pub cancel: *const gs_cancel_token,
    /// Nanoseconds from the call after which no new node starts (`GS_ERR_DEADLINE`); 0: none.
    pub timeout_ns: u64,
    /// This run's data for its kernels (`gs_ctx_user_data`); graphsched never reads it.
    pub user_data: *mut c_void,
    /// Called as each node's kernel starts; NULL: nothing is called, at no cost.
    pub on_node_start: gs_observer_fn,
    /// Called as each node's kernel ends (a deferred node's: once it completed, on the thread
    /// that ends it).
    pub on_node_end: gs_observer_fn,
    /// Passed to both observers.
    pub observer_data: *mut c_void,
}

impl Default for gs_run_options {
    fn default() -> Self {
        gs_run_options {
            inputs: std::ptr::null(),
            num_inputs: 0,
            executor: std::ptr::null_mut(),
            memory_limit_bytes: 0,
            window: 0,
            policy: GS_POLICY_DEFAULT,
            flags: 0,
            priority: GS_PRIORITY_NORMAL,
            plan: std::ptr::null(),
            cancel: std::ptr::null(),
            timeout_ns: 0,
            user_data: std::ptr::null_mut(),
            on_node_start: None,
            on_node_end: None,
            observer_data: std::ptr::null_mut(),
        }
    }
}

/// The graph outputs and statistics of a successful run.
pub struct gs_run_result {
    result: RunResult,
}

impl Handle for gs_run_result {
    const NAME: &'static str = "gs_run_result";
    const TAG: u8 = 5;
}

/// Runs a finalized graph with buffers from `pool`. On success `*out` holds the graph outputs
/// until `gs_result_free`. On failure nothing is left allocated, `*out` is untouched, and the
/// graph can run again. Many threads may run the same graph at once.
///
/// Everything `options` points to (bindings and their memory, executor, plan, cancel token) must
/// stay valid until the call returns; the graph and the pool too. Input memory is only read.
/// Thread-safe: any thread, concurrently with any call but a free of the same handle.
///
/// # Safety
/// `options` is NULL or readable, with its arrays; `out` is writable; each binding's
/// `tensor.data` is readable for `tensor.nbytes` bytes, and nothing writes it, until the call
/// returns; no other thread frees `graph`, `pool`, or the executor, plan or cancel token of
/// `options` during this call.
#[no_mangle]
pub unsafe extern "C" fn gs_run(
    graph: *const gs_graph,
    pool: *mut gs_pool,
    options: *const gs_run_options,
    out: *mut *mut gs_run_result,
) -> gs_status {
    guard(|| {
        // SAFETY: handles are not freed concurrently (C contract).
        let g = unsafe { handle_ref(graph, "graph") }?;
        // SAFETY: as above.
        let p = unsafe { handle_ref(pool, "pool") }?;
        // SAFETY: writable by contract.
        let out = unsafe { out_arg(out, "out") }?;
        let compiled = g.compiled()?;
        let mut run_options = RunOptions::default();
        let mut data = CRunData {
            user_data: std::ptr::null_mut(),
            pool,
            executor: std::ptr::null_mut(),
        };
        let mut observer = None;
        // SAFETY: NULL or readable by contract.
        if let Some(o) = unsafe { options.as_ref() } {
            // SAFETY: readable for `num_inputs` bindings by contract.
            let bindings = unsafe { slice_arg(o.inputs, o.num_inputs, compiled.node_count(), "options.inputs") }?;
            // SAFETY: the two types share their layout (asserted above), and the C contract keeps
            // every bound buffer valid and unwritten until this call returns, which outlives the
            // borrow.
            run_options.inputs =
                unsafe { std::slice::from_raw_parts(bindings.as_ptr().cast::<InputBinding<'_>>(), bindings.len()) };
            if !o.executor.is_null() {
                // SAFETY: the handle is not freed concurrently (C contract).
                run_options.executor = Some(&unsafe { handle_ref(o.executor, "options.executor") }?.executor);
            }
            run_options.policy = policy_from_c(o.policy)?;
            let known =
                GS_RUN_FREEZE_ESTIMATES | GS_RUN_TRACE | GS_RUN_AUTO_PLAN | GS_RUN_FORCE_EXECUTOR | GS_RUN_NO_WALL_TIME;
            if o.flags & !known != 0 {
                let unknown = o.flags & !known;
                return Err(FfiError::new(
                    GS_ERR_INVALID_ARGUMENT,
                    format!("options.flags has unknown bits {unknown:#x}"),
                ));
            }
            run_options.freeze_estimates = o.flags & GS_RUN_FREEZE_ESTIMATES != 0;
            run_options.trace = o.flags & GS_RUN_TRACE != 0;
            run_options.auto_plan = o.flags & GS_RUN_AUTO_PLAN != 0;
            run_options.force_executor = o.flags & GS_RUN_FORCE_EXECUTOR != 0;
            run_options.no_wall_time = o.flags & GS_RUN_NO_WALL_TIME != 0;
            if !o.cancel.is_null() {
                // SAFETY: the handle is not freed concurrently (C contract).
                run_options.cancel = Some(&unsafe { handle_ref(o.cancel, "options.cancel") }?.token);
            }
            if o.timeout_ns != 0 {
                run_options.deadline =
                    std::time::Instant::now().checked_add(std::time::Duration::from_nanos(o.timeout_ns));
            }
            if !o.plan.is_null() {
                // SAFETY: the handle is not freed concurrently (C contract).
                run_options.plan = Some(&unsafe { handle_ref(o.plan, "options.plan") }?.plan);
            }
            run_options.priority = match o.priority {
                GS_PRIORITY_NORMAL => RunPriority::Normal,
                GS_PRIORITY_HIGH => RunPriority::High,
                other => {
                    return Err(FfiError::new(
                        GS_ERR_INVALID_ARGUMENT,
                        format!("options.priority is {other}, not GS_PRIORITY_NORMAL (0) or GS_PRIORITY_HIGH (1)"),
                    ))
                }
            };
            run_options.window = o.window as usize;
            run_options.memory_limit_bytes = o.memory_limit_bytes;
            data.user_data = o.user_data;
            data.executor = o.executor;
            if o.on_node_start.is_some() || o.on_node_end.is_some() {
                observer = Some(CObserver {
                    on_start: o.on_node_start,
                    on_end: o.on_node_end,
                    data: o.observer_data,
                });
            }
        }
        run_options.data = Some(&data);
        run_options.observer = observer.as_ref().map(|o| o as &dyn crate::exec::Observer);
        let result = exec::run(compiled, &p.pool, &run_options)?;
        *out = into_handle_boxed(boxed_result(gs_run_result { result }))?;
        Ok(())
    })
}

/// The descriptor of graph output `value`. Its data stays valid until the result is freed.
///
/// The descriptor's data stays valid until `gs_result_free`; the result owns it.
/// Thread-safe: any thread, concurrently with any call but a free of the same handle.
///
/// # Safety
/// `out` is writable; no other thread frees `result` during this call.
#[no_mangle]
pub unsafe extern "C" fn gs_result_output(
    result: *const gs_run_result,
    value: ValueRef,
    out: *mut Tensor,
) -> gs_status {
    guard(|| {
        // SAFETY: the handle is not freed concurrently (C contract).
        let r = unsafe { handle_ref(result, "result") }?;
        // SAFETY: writable by contract.
        let out = unsafe { out_arg(out, "out") }?;
        // The core names its own API; a C caller marks outputs with gs_graph_mark_output.
        *out = *r.result.output(value).map_err(|e| match e.kind() {
            crate::ErrorKind::NotAnOutput => crate::Error::new(
                e.kind(),
                e.message().replace("GraphBuilder::mark_output", "gs_graph_mark_output"),
            ),
            _ => e,
        })?;
        Ok(())
    })
}

/// Statistics of the run.
///
/// Thread-safe: any thread, concurrently with any call but a free of the same handle.
///
/// # Safety
/// `out` is writable; no other thread frees `result` during this call.
#[no_mangle]
pub unsafe extern "C" fn gs_result_stats(result: *const gs_run_result, out: *mut RunStats) -> gs_status {
    guard(|| {
        // SAFETY: the handle is not freed concurrently (C contract).
        let r = unsafe { handle_ref(result, "result") }?;
        // SAFETY: writable by contract.
        *unsafe { out_arg(out, "out") }? = r.result.stats();
        Ok(())
    })
}

/// How long the run waited to enter its executor's memory budget (`gs_executor_set_memory_budget`),
/// in nanoseconds: 0 without one.
///
/// Thread-safe: any thread, concurrently with any call but a free of the same handle.
///
/// # Safety
/// `out` is writable; no other thread frees `result` during this call.
#[no_mangle]
pub unsafe extern "C" fn gs_result_budget_wait_ns(result: *const gs_run_result, out: *mut u64) -> gs_status {
    guard(|| {
        // SAFETY: the handle is not freed concurrently (C contract).
        let r = unsafe { handle_ref(result, "result") }?;
        // SAFETY: writable by contract.
        *unsafe { out_arg(out, "out") }? = r.result.budget_wait_ns();
        Ok(())
    })
}

/// Writes a traced run (`GS_RUN_TRACE`) as Chrome trace-event JSON to `path`: one track per
/// thread, one slice per node, counters for live and reserved bytes. Opens in Perfetto
/// (ui.perfetto.dev) or chrome://tracing.
///
/// Thread-safe: any thread, concurrently with any call but a free of the same handle.
///
/// # Safety
/// `path` is NUL-terminated; no other thread frees `result` during this call.
#[no_mangle]
pub unsafe extern "C" fn gs_result_write_trace(
    result: *const gs_run_result,
    path: *const std::ffi::c_char,
) -> gs_status {
    guard(|| {
        // SAFETY: the handle is not freed concurrently (C contract).
        let r = unsafe { handle_ref(result, "result") }?;
        // SAFETY: NUL-terminated by contract.
        let path = unsafe { super::handle::str_arg(path, "path") }?;
        let Some(json) = r.result.chrome_trace() else {
            return Err(FfiError::new(
                GS_ERR_INVALID_ARGUMENT,
                "the run was not traced: set GS_RUN_TRACE in gs_run_options.flags",
            ));
        };
        std::fs::write(path, json)
            .map_err(|e| FfiError::new(GS_ERR_IO, format!("cannot write the trace to '{path}': {e}")))
    })
}

/// Frees a result; its output buffers go back to the pool. NULL does nothing.
///
/// Returns the result's buffers to its pool, which the result keeps alive until then, and its
/// run's per-value arrays to the graph for its next run (a run while a result lives takes
/// another set: free results once their outputs are read).
/// Thread-safe with respect to other handles; no other call may be using this handle, on any
/// thread.
///
/// # Safety
/// No other thread is inside a call on `result` during this call.
#[no_mangle]
pub unsafe extern "C" fn gs_result_free(result: *mut gs_run_result) {
    let _ = guard(|| {
        // SAFETY: no other thread uses the handle while it is freed (C contract).
        unsafe { free_handle_with(result, "result", keep_result_box) };
        Ok(())
    });
}

thread_local! {
    /// The allocation of the last result this thread freed, for its next run: a loop of `gs_run`
    /// and `gs_result_free` allocates nothing once it is steady.
    static SPARE_RESULT: Cell<Option<Box<MaybeUninit<gs_run_result>>>> = const { Cell::new(None) };
}

/// `value` on the heap, in the thread's spare allocation if it has one.
fn boxed_result(value: gs_run_result) -> Box<gs_run_result> {
    match SPARE_RESULT.try_with(Cell::take).ok().flatten() {
        Some(mut spare) => {
            spare.write(value);
            // SAFETY: just initialized; `MaybeUninit<T>` and `T` share their layout.
            unsafe { Box::from_raw(Box::into_raw(spare).cast::<gs_run_result>()) }
        }
        None => Box::new(value),
    }
}

/// Drops a freed result and keeps its allocation as the thread's spare.
fn keep_result_box(result: Box<gs_run_result>) {
    let raw = Box::into_raw(result);
    // SAFETY: `raw` came from a live box; the value is dropped where it is, once, and the
    // allocation is then owned as uninitialized memory of the same layout.
    let spare = unsafe {
        std::ptr::drop_in_place(raw);
        Box::from_raw(raw.cast::<MaybeUninit<gs_run_result>>())
    };
    // A thread that is exiting has no spare slot left: the allocation is freed with `spare`.
    let _ = SPARE_RESULT.try_with(|s| s.set(Some(spare)));
}
