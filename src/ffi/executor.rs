//! `gs_executor_*`: worker threads that runs share.

use super::gs_status;
use super::handle::{free_handle, handle_ref, into_handle, out_arg, Handle};
use super::status::guard;
use crate::exec::Executor;

/// Worker threads that runs use through `gs_run_options.executor`; one executor serves many
/// concurrent runs.
pub struct gs_executor {
    pub(crate) executor: Executor,
}

impl Handle for gs_executor {
    const NAME: &'static str = "gs_executor";
    const TAG: u8 = 6;
}

/// Executor settings; zero fields take their defaults.
#[repr(C)]
#[derive(Clone, Copy, Debug, Default)]
pub struct gs_executor_config {
    /// Threads in all, counting the thread that calls `gs_run` (which works too): `threads - 1`
    /// workers are started. 0: one per core.
    pub threads: u32,
}

/// Starts an executor; `config` may be NULL for defaults.
///
/// Thread-safe: any thread, concurrently with any call but a free of the same handle.
///
/// # Safety
/// `config` is NULL or readable; `out` is writable.
#[no_mangle]
pub unsafe extern "C" fn gs_executor_new(config: *const gs_executor_config, out: *mut *mut gs_executor) -> gs_status {
    guard(|| {
        // SAFETY: writable by contract.
        let out = unsafe { out_arg(out, "out") }?;
        // SAFETY: NULL or readable by contract.
        let config = unsafe { config.as_ref() }.copied().unwrap_or_default();
        *out = into_handle(gs_executor {
            executor: Executor::new(config.threads as usize)?,
        })?;
        Ok(())
    })
}

/// Stops the workers and frees the executor. NULL does nothing. No run may be using it.
///
/// Waits for its worker threads to stop.
/// Thread-safe with respect to other handles; no other call may be using this handle, on any
/// thread.
///
/// # Safety
/// No other thread is inside a call on `executor` (a `gs_run` given it in its options included)
/// during this call.
#[no_mangle]
pub unsafe extern "C" fn gs_executor_free(executor: *mut gs_executor) {
    let _ = guard(|| {
        // SAFETY: no other thread uses the handle while it is freed (C contract).
        unsafe { free_handle(executor, "executor") };
        Ok(())
    });
}

/// Threads the executor runs on, the caller's included; 0 (last error set) for a bad handle.
///
/// Thread-safe: any thread, concurrently with any call but a free of the same handle.
///
/// # Safety
/// No other thread frees `executor` during this call.
#[no_mangle]
pub unsafe extern "C" fn gs_executor_threads(executor: *const gs_executor) -> u32 {
    let mut threads = 0;
    guard(|| {
        // SAFETY: the handle is not freed concurrently (C contract).
        threads = unsafe { handle_ref(executor, "executor") }?.executor.threads() as u32;
        Ok(())
    });
    threads
}

/// Sets the memory budget the runs given this executor share, in bytes (0: none, the default).
/// Each run reserves its own bound when it enters (its `memory_limit_bytes` if it gives one, its
/// plan's arena if it has one, else the max-live bound of the order its memory admission keeps
/// safe) and keeps within it, so the live bytes of all runs together never exceed the budget,
/// and at any budget at or above the largest run's bound every run completes. Runs enter first
/// come, first served, high-priority runs first (a run waits for the runs queued before it, and
/// a normal run at the head of the queue for at most 8 high-priority runs in a row besides;
/// `gs_result_budget_wait_ns` says how long); a run whose bound exceeds the whole budget fails at once with
/// `GS_ERR_MEMORY_LIMIT`, naming the graph and the bytes, and so does a run started inside a
/// kernel that does not fit at once (it cannot wait for memory its caller holds). Runs inside
/// keep their reservations when the budget changes.
///
/// A run that has to wait is set up first and queued; the run that makes room for it starts it
/// on the executor's threads, and its caller only waits. So that the queued runs still have as
/// many threads as the executor was made with, the first budget set starts one more thread, in
/// the callers' place (`GS_ERR_OUT_OF_MEMORY` if it cannot be started; the budget is then not
/// set).
///
/// Thread-safe: any thread, concurrently with any call but a free of the same handle.
///
/// # Safety
/// No other thread frees `executor` during this call.
#[no_mangle]
pub unsafe extern "C" fn gs_executor_set_memory_budget(executor: *const gs_executor, bytes: u64) -> gs_status {
    guard(|| {
        // SAFETY: the handle is not freed concurrently (C contract).
        unsafe { handle_ref(executor, "executor") }?
            .executor
            .set_memory_budget(bytes)?;
        Ok(())
    })
}

/// The executor's memory budget (`bytes`), what the runs inside reserve now (`reserved`) and the
/// most they reserved at once (`peak_reserved`); any pointer may be NULL.
///
/// Thread-safe: any thread, concurrently with any call but a free of the same handle.
///
/// # Safety
/// Every pointer is NULL or writable; no other thread frees `executor` during this call.
#[no_mangle]
pub unsafe extern "C" fn gs_executor_memory_budget(
    executor: *const gs_executor,
    bytes: *mut u64,
    reserved: *mut u64,
    peak_reserved: *mut u64,
) -> gs_status {
    guard(|| {
        // SAFETY: the handle is not freed concurrently (C contract).
        let b = unsafe { handle_ref(executor, "executor") }?.executor.memory_budget();
        // SAFETY: each NULL or writable by contract.
        unsafe {
            if let Some(x) = bytes.as_mut() {
                *x = b.bytes;
            }
            if let Some(x) = reserved.as_mut() {
                *x = b.reserved;
            }
            if let Some(x) = peak_reserved.as_mut() {
                *x = b.peak_reserved;
            }
        }
        Ok(())
    })
}

/// Lowers the OS priority of the executor's threads to `nice` (1 to 19, never below a value set
/// before: a process may not raise its threads' priority back), so that high-priority runs
/// preempt the others' kernels. From then on every normal-priority run under the executor's
/// memory budget (`gs_executor_set_memory_budget`) is run by the executor's threads while its
/// caller waits, and a `GS_PRIORITY_HIGH` run goes on its caller's thread as before, at the
/// caller's priority, which the OS lets run ahead of them. A normal run is not starved: the OS
/// shares a core by weight. Runs with a plan, and runs while no budget is set, go as before.
/// `GS_ERR_INVALID_ARGUMENT` for a value out of range or lower than before, or if the OS refuses
/// (only Linux sets one thread's priority).
///
/// Thread-safe: any thread, concurrently with any call but a free of the same handle.
///
/// # Safety
/// No other thread frees `executor` during this call.
#[no_mangle]
pub unsafe extern "C" fn gs_executor_set_background_nice(executor: *const gs_executor, nice: i32) -> gs_status {
    guard(|| {
        // SAFETY: the handle is not freed concurrently (C contract).
        unsafe { handle_ref(executor, "executor") }?
            .executor
            .set_background_nice(nice)?;
        Ok(())
    })
}
