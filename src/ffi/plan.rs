//! `gs_plan_*`: static memory plans.

use super::gs_status::*;
use super::handle::{free_handle, handle_ref, into_handle, out_arg, Handle};
use super::status::{guard, FfiError};
use super::{gs_graph, gs_status};
use crate::plan::{Mode, Order, Plan};

/// `gs_plan_new` mode: lifetimes from the topological order; runs without an executor follow it.
pub const GS_PLAN_SEQUENTIAL: u32 = 0;
/// `gs_plan_new` mode: like `GS_PLAN_SEQUENTIAL`, in a memory-aware topological order.
pub const GS_PLAN_SEQUENTIAL_MEMORY_ORDER: u32 = 1;
/// `gs_plan_new` mode: values share bytes only when the graph orders them, so any executor
/// order is safe.
pub const GS_PLAN_PARALLEL_SAFE: u32 = 2;

/// A static memory plan of one finalized graph: an offset in one arena for every statically
/// sized value. Pass it in `gs_run_options.plan`.
pub struct gs_plan {
    pub(crate) plan: Plan,
}

impl Handle for gs_plan {
    const NAME: &'static str = "gs_plan";
    const TAG: u8 = 3;
}

/// Plans a finalized graph in `mode` (`GS_PLAN_*`); the plan is checked before it is returned.
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
            other => {
                return Err(FfiError::new(
                    GS_ERR_INVALID_ARGUMENT,
                    format!("mode is {other}, not a GS_PLAN_* value"),
                ))
            }
        };
        let compiled = g.compiled()?;
        let plan = Plan::new(compiled, mode)?;
        plan.verify()?;
        *out = into_handle(gs_plan { plan })?;
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
