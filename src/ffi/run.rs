//! `gs_run` and `gs_result_*`.

use super::graph::gs_graph;
use super::handle::{free_handle, handle_ref, into_handle, out_arg, slice_arg, Handle};
use super::pool::gs_pool;
use super::status::guard;
use super::{gs_status, InputBinding, RunStats, Tensor, ValueRef};
use crate::exec::{self, RunOptions, RunResult};

/// How to run a graph. Zero-initialize, then fill in; all zeros means defaults. NULL options
/// are fine for a graph without inputs.
#[repr(C)]
#[derive(Clone, Copy, Debug)]
pub struct gs_run_options {
    /// One binding per graph input.
    pub inputs: *const InputBinding,
    pub num_inputs: usize,
}

/// The graph outputs and statistics of a successful run.
pub struct gs_run_result {
    result: RunResult,
}

impl Handle for gs_run_result {
    const NAME: &'static str = "gs_run_result";
}

/// Runs a finalized graph with buffers from `pool`. On success `*out` holds the graph outputs
/// until `gs_result_free`. On failure nothing is left allocated, `*out` is untouched, and the
/// graph can run again. Many threads may run the same graph at once.
///
/// # Safety
/// `options` is NULL or readable, with its arrays; `out` is writable.
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
        // SAFETY: NULL or readable by contract.
        let inputs = match unsafe { options.as_ref() } {
            None => &[][..],
            // SAFETY: readable for `num_inputs` bindings by contract.
            Some(o) => unsafe { slice_arg(o.inputs, o.num_inputs, compiled.node_count(), "options.inputs") }?,
        };
        let result = exec::run(compiled, &p.pool, &RunOptions { inputs })?;
        *out = into_handle(gs_run_result { result });
        Ok(())
    })
}

/// The descriptor of graph output `value`. Its data stays valid until the result is freed.
#[no_mangle]
pub extern "C" fn gs_result_output(result: *const gs_run_result, value: ValueRef, out: *mut Tensor) -> gs_status {
    guard(|| {
        // SAFETY: the handle is not freed concurrently (C contract).
        let r = unsafe { handle_ref(result, "result") }?;
        // SAFETY: writable by contract.
        let out = unsafe { out_arg(out, "out") }?;
        *out = *r.result.output(value)?;
        Ok(())
    })
}

/// Statistics of the run.
#[no_mangle]
pub extern "C" fn gs_result_stats(result: *const gs_run_result, out: *mut RunStats) -> gs_status {
    guard(|| {
        // SAFETY: the handle is not freed concurrently (C contract).
        let r = unsafe { handle_ref(result, "result") }?;
        // SAFETY: writable by contract.
        *unsafe { out_arg(out, "out") }? = r.result.stats();
        Ok(())
    })
}

/// Frees a result; its output buffers go back to the pool. NULL does nothing.
#[no_mangle]
pub extern "C" fn gs_result_free(result: *mut gs_run_result) {
    let _ = guard(|| {
        // SAFETY: no other thread uses the handle while it is freed (C contract).
        unsafe { free_handle(result, "result") };
        Ok(())
    });
}
