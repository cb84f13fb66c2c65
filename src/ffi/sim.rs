//! `gs_simulate`: the scheduling policy on a virtual clock.

use super::gs_status::*;
use super::handle::{handle_ref, out_arg};
use super::run::policy_from_c;
use super::status::{guard, FfiError};
use super::{gs_graph, gs_status};
use crate::sim::{simulate, SimOptions, SimResult};

/// What to simulate. Zero-initialize, then fill in.
#[repr(C)]
#[derive(Clone, Copy, Debug, Default)]
pub struct gs_sim_options {
    /// Threads to simulate; at least 1.
    pub threads: u32,
    /// `GS_POLICY_*`.
    pub policy: u32,
    /// Most nodes in flight at once, running or pending (deferred, `gs_ctx_defer`); 0: no cap
    /// but the threads on running nodes.
    pub window: u32,
    /// Most live bytes; 0: no limit.
    pub memory_limit_bytes: u64,
}

/// Simulates a run of a finalized graph with the executor's policy on `threads` threads, using
/// the estimated durations (given, learned, or the default): makespan, its lower bound, peak live
/// bytes and utilization, deterministically and for any thread count.
///
/// Thread-safe: any thread, concurrently with any call but a free of the same handle.
///
/// # Safety
/// `options` is readable; `out` is writable; no other thread frees `graph` during this call.
#[no_mangle]
pub unsafe extern "C" fn gs_simulate(
    graph: *const gs_graph,
    options: *const gs_sim_options,
    out: *mut SimResult,
) -> gs_status {
    guard(|| {
        // SAFETY: the handle is not freed concurrently (C contract).
        let g = unsafe { handle_ref(graph, "graph") }?;
        // SAFETY: readable by contract.
        let o = unsafe { options.as_ref() }
            .ok_or_else(|| FfiError::new(GS_ERR_NULL_ARGUMENT, "argument 'options' is NULL"))?;
        // SAFETY: writable by contract.
        let out = unsafe { out_arg(out, "out") }?;
        let policy = policy_from_c(o.policy)?;
        let options = SimOptions {
            threads: o.threads as usize,
            policy,
            window: o.window as usize,
            memory_limit_bytes: o.memory_limit_bytes,
        };
        *out = simulate(g.compiled()?, &options)?;
        Ok(())
    })
}
