//! `gs_plan_*`: static memory plans.

use super::gs_status::*;
use super::handle::{free_handle, handle_ref, into_handle, out_arg, Handle};
use super::status::{guard, FfiError, FfiResult};
use super::{gs_graph, gs_status};
use crate::plan::{Mode, Order, Plan};

/// `gs_plan_new` mode: lifetimes from the topological order; runs without an executor follow it.
pub const GS_PLAN_SEQUENTIAL: u32 = 0;
/// `gs_plan_new` mode: like `GS_PLAN_SEQUENTIAL`, in a memory-aware topological order.
pub const GS_PLAN_SEQUENTIAL_MEMORY_ORDER: u32 = 1;
/// `gs_plan_new` mode: values share bytes only when the graph orders them, so any executor
/// order is safe.
pub const GS_PLAN_PARALLEL_SAFE: u32 = 2;
/// `gs_plan_new` mode: lifetimes from the simulated schedule on one thread per core, made safe
/// for any executor and any durations by ordering constraints that runs on the plan follow
/// (`gs_plan_new_scheduled` picks the thread count).
pub const GS_PLAN_SCHEDULED: u32 = 3;

/// A static memory plan of one finalized graph: an offset in one arena for every statically
/// sized value. Pass it in `gs_run_options.plan`.
pub struct gs_plan {
    pub(crate) plan: Plan,
    /// What keeps the plan's graph alive as long as the plan.
    _graph: std::sync::Arc<crate::graph::Graph>,
}

impl Handle for gs_plan {
    const NAME: &'static str = "gs_plan";
    const TAG: u8 = 3;
}

/// Plans a finalized graph in `mode` (`GS_PLAN_*`); the plan is checked before it is returned.
/// `GS_ERR_INVALID_ARGUMENT` for a graph with an input of size `GS_SIZE_DYNAMIC`: a plan fixes
/// every size (its runs take `GS_RUN_AUTO_PLAN` instead, a plan per set of input sizes).
///
/// The plan belongs to this graph: it keeps the finalized graph alive and runs of any other graph
/// refuse it. It must outlive every run that uses it.
/// Thread-safe: any thread, concurrently with any call but a free of the same handle.
///
/// # Safety
/// `out` is writable; no other thread frees `graph` during this call.
#[no_mangle]
pub unsafe extern "C" fn gs_plan_new(graph: *const gs_graph, mode: u32, out: *mut *mut gs_plan) -> gs_status {
    guard(|| {
        // SAFETY: the handle is not freed concurrently (C contract).
        let g = unsafe { handle_ref(graph, "graph") }?;
        // SAFETY: writable by contract.
        let out = unsafe { out_arg(out, "out") }?;
        let mode = match mode {
            GS_PLAN_SEQUENTIAL => Mode::Sequential(Order::Topological),
            GS_PLAN_SEQUENTIAL_MEMORY_ORDER => Mode::Sequential(Order::MemoryAware),
            GS_PLAN_PARALLEL_SAFE => Mode::ParallelSafe,
            GS_PLAN_SCHEDULED => Mode::Scheduled { threads: 0 },
            other => {
                return Err(FfiError::new(
                    GS_ERR_INVALID_ARGUMENT,
                    format!("mode is {other}, not a GS_PLAN_* value"),
                ))
            }
        };
        *out = new_plan(g, mode)?;
        Ok(())
    })
}

/// Plans a finalized graph for its simulated schedule on `threads` threads (0: one per core):
/// values share bytes when their lifetimes in that schedule do not overlap, and the plan adds
/// the ordering constraints that make the sharing safe for any executor and any durations.
/// Runs on the plan follow them (a node also waits for the nodes it was ordered after), with or
/// without an executor, and refuse a memory limit (`GS_ERR_INVALID_ARGUMENT`: the arena fixes
/// what they hold). The plan is
/// checked before it is returned; `gs_plan_schedule` tells what the constraints cost. As
/// `gs_plan_new`, `GS_ERR_INVALID_ARGUMENT` for a graph with an input of dynamic size.
///
/// Thread-safe: any thread, concurrently with any call but a free of the same handle.
///
/// # Safety
/// `out` is writable; no other thread frees `graph` during this call.
#[no_mangle]
pub unsafe extern "C" fn gs_plan_new_scheduled(
    graph: *const gs_graph,
    threads: u32,
    out: *mut *mut gs_plan,
) -> gs_status {
    guard(|| {
        // SAFETY: the handle is not freed concurrently (C contract).
        let g = unsafe { handle_ref(graph, "graph") }?;
        // SAFETY: writable by contract.
        let out = unsafe { out_arg(out, "out") }?;
        if threads > MAX_SCHEDULE_THREADS {
            return Err(FfiError::new(
                GS_ERR_INVALID_ARGUMENT,
                format!("threads is {threads}; a schedule has at most {MAX_SCHEDULE_THREADS}"),
            ));
        }
        *out = new_plan(
            g,
            Mode::Scheduled {
                threads: threads as usize,
            },
        )?;
        Ok(())
    })
}

/// Most threads a scheduled plan plans for, as executors have.
const MAX_SCHEDULE_THREADS: u32 = 4096;

/// A checked plan of `g` in `mode`; a scheduled mode of 0 threads plans for one per core.
fn new_plan(g: &gs_graph, mode: Mode) -> FfiResult<*mut gs_plan> {
    let mode = match mode {
        Mode::Scheduled { threads: 0 } => Mode::Scheduled {
            threads: std::thread::available_parallelism().map_or(1, |n| n.get()),
        },
        other => other,
    };
    let graph = g.compiled()?;
    let plan = Plan::new(graph, mode)?;
    plan.verify()?;
    into_handle(gs_plan {
        plan,
        _graph: graph.clone(),
    })
}

/// What a scheduled plan's ordering constraints cost: the threads it was planned for, how many
/// constraints it adds, and the simulated makespan (with the graph's estimates when it was made)
/// with the constraints and without them. Any pointer may be NULL. `GS_ERR_INVALID_ARGUMENT`
/// for a plan made in another mode.
///
/// Thread-safe: any thread, concurrently with any call but a free of the same handle.
///
/// # Safety
/// Every pointer is NULL or writable; no other thread frees `plan` during this call.
#[no_mangle]
pub unsafe extern "C" fn gs_plan_schedule(
    plan: *const gs_plan,
    threads: *mut u32,
    constraints: *mut u64,
    makespan_ns: *mut u64,
    free_makespan_ns: *mut u64,
) -> gs_status {
    guard(|| {
        // SAFETY: the handle is not freed concurrently (C contract).
        let p = &unsafe { handle_ref(plan, "plan") }?.plan;
        let Some(s) = p.scheduled() else {
            return Err(FfiError::new(
                GS_ERR_INVALID_ARGUMENT,
                "the plan was not made for a schedule (GS_PLAN_SCHEDULED or gs_plan_new_scheduled)",
            ));
        };
        // SAFETY: each NULL or writable by contract.
        unsafe {
            if let Some(t) = threads.as_mut() {
                *t = s.threads as u32;
            }
            if let Some(c) = constraints.as_mut() {
                *c = s.constraints.len() as u64;
            }
            if let Some(m) = makespan_ns.as_mut() {
                *m = s.makespan_ns;
            }
            if let Some(f) = free_makespan_ns.as_mut() {
                *f = s.free_makespan_ns;
            }
        }
        Ok(())
    })
}

/// Frees a plan. NULL does nothing. No run may be using it.
///
/// Thread-safe with respect to other handles; no other call may be using this handle, on any
/// thread.
///
/// # Safety
/// No other thread is inside a call on `plan` (a `gs_run` given it in its options included)
/// during this call.
#[no_mangle]
pub unsafe extern "C" fn gs_plan_free(plan: *mut gs_plan) {
    let _ = guard(|| {
        // SAFETY: no other thread uses the handle while it is freed (C contract).
        unsafe { free_handle(plan, "plan") };
        Ok(())
    });
}

/// Bytes of the plan's arena, and the max-live lower bound of its order (either may be NULL). The
/// bound counts every value apart: with in-place nodes (`GS_NODE_IN_PLACE`), whose outputs share
/// their input's bytes, the arena can be smaller.
///
/// Thread-safe: any thread, concurrently with any call but a free of the same handle.
///
/// # Safety
/// `arena_bytes` and `lower_bound_bytes` are NULL or writable; no other thread frees `plan`
/// during this call.
#[no_mangle]
pub unsafe extern "C" fn gs_plan_bytes(
    plan: *const gs_plan,
    arena_bytes: *mut u64,
    lower_bound_bytes: *mut u64,
) -> gs_status {
    guard(|| {
        // SAFETY: the handle is not freed concurrently (C contract).
        let p = &unsafe { handle_ref(plan, "plan") }?.plan;
        // SAFETY: NULL or writable by contract.
        if let Some(a) = unsafe { arena_bytes.as_mut() } {
            *a = p.arena_bytes();
        }
        // SAFETY: as above.
        if let Some(l) = unsafe { lower_bound_bytes.as_mut() } {
            *l = p.max_live_bytes();
        }
        Ok(())
    })
}
