//! `gs_pool_*`: the buffer pool, for runs and for a caller's own scratch memory.

use std::ffi::c_void;
use std::ptr::NonNull;
use std::sync::Arc;

use super::gs_status::*;
use super::handle::{free_handle, handle_ref, into_handle, out_arg, Handle};
use super::status::{guard, FfiError};
use super::{gs_status, PoolConfig, PoolStats};
use crate::pool::Pool;

/// A thread-safe buffer pool.
pub struct gs_pool {
    pub(crate) pool: Arc<Pool>,
}

impl Handle for gs_pool {
    const NAME: &'static str = "gs_pool";
    const TAG: u8 = 1;
}

/// Makes a pool; `config` may be NULL for defaults, and zero fields take their defaults. A
/// `large_threshold_bytes` over 65536 is `GS_ERR_INVALID_ARGUMENT`.
///
/// Thread-safe: any thread, concurrently with any call but a free of the same handle.
///
/// # Safety
/// `config` is NULL or readable; `out` is writable.
#[no_mangle]
pub unsafe extern "C" fn gs_pool_new(config: *const PoolConfig, out: *mut *mut gs_pool) -> gs_status {
    guard(|| {
        // SAFETY: writable by contract.
        let out = unsafe { out_arg(out, "out") }?;
        // SAFETY: NULL or readable by contract.
        let config = unsafe { config.as_ref() }.copied().unwrap_or_default();
        *out = into_handle(gs_pool {
            pool: Arc::new(Pool::new(config)?),
        })?;
        Ok(())
    })
}

/// Frees a pool and the memory it caches. NULL does nothing. Buffers still held by run results
/// stay valid until those are freed; buffers from `gs_pool_acquire` still held become invalid.
///
/// Thread-safe with respect to other handles; no other call may be using this handle, on any
/// thread.
///
/// # Safety
/// No other thread is inside a call on `pool` (a `gs_run` on it included) during this call.
#[no_mangle]
pub unsafe extern "C" fn gs_pool_free(pool: *mut gs_pool) {
    let _ = guard(|| {
        // SAFETY: no other thread uses the handle while it is freed (C contract).
        unsafe { free_handle(pool, "pool") };
        Ok(())
    });
}

/// `gs_pool_acquire` and `gs_pool_acquire_zeroed`.
///
/// # Safety
/// As for `gs_pool_acquire`.
unsafe fn acquire(pool: *mut gs_pool, nbytes: usize, zero: bool, out: *mut *mut c_void) -> gs_status {
    guard(|| {
        // SAFETY: the handle is not freed concurrently (C contract).
        let p = unsafe { handle_ref(pool, "pool") }?;
        // SAFETY: writable by contract.
        let out = unsafe { out_arg(out, "out") }?;
        *out = p.pool.acquire(nbytes, zero)?.as_ptr().cast();
        Ok(())
    })
}

/// A block of at least `nbytes`, not cleared: 16-byte aligned, and 64-byte aligned when
/// `nbytes` is at least the pool's `large_threshold_bytes`. Give it back with `gs_pool_release`.
///
/// The caller owns the block until `gs_pool_release`; freeing the pool frees it too.
/// Thread-safe: any thread, concurrently with any call but a free of the same handle.
///
/// # Safety
/// `out` is writable; no other thread frees `pool` during this call.
#[no_mangle]
pub unsafe extern "C" fn gs_pool_acquire(pool: *mut gs_pool, nbytes: usize, out: *mut *mut c_void) -> gs_status {
    // SAFETY: the same contract.
    unsafe { acquire(pool, nbytes, false, out) }
}

/// Like `gs_pool_acquire`, with the first `nbytes` cleared to zero.
///
/// Thread-safe: any thread, concurrently with any call but a free of the same handle.
///
/// # Safety
/// As for `gs_pool_acquire`.
#[no_mangle]
pub unsafe extern "C" fn gs_pool_acquire_zeroed(pool: *mut gs_pool, nbytes: usize, out: *mut *mut c_void) -> gs_status {
    // SAFETY: the same contract as `gs_pool_acquire`.
    unsafe { acquire(pool, nbytes, true, out) }
}

/// Gives back a block from `gs_pool_acquire`. Releasing a pointer twice, or one the pool did not
/// hand out, returns `GS_ERR_UNKNOWN_POINTER` and changes nothing.
///
/// Only blocks from `gs_pool_acquire*`: buffers a run handed to a kernel or a result belong to the
/// run.
/// Thread-safe: any thread, concurrently with any call but a free of the same handle.
///
/// # Safety
/// If `ptr` is a block of `pool` from `gs_pool_acquire*`, not yet released, nobody uses it after
/// this call (the pool may hand its bytes to another caller at once); no other thread frees
/// `pool` during this call.
#[no_mangle]
pub unsafe extern "C" fn gs_pool_release(pool: *mut gs_pool, ptr: *mut c_void) -> gs_status {
    guard(|| {
        // SAFETY: the handle is not freed concurrently (C contract).
        let p = unsafe { handle_ref(pool, "pool") }?;
        let ptr = NonNull::new(ptr.cast::<u8>())
            .ok_or_else(|| FfiError::new(GS_ERR_NULL_ARGUMENT, "argument 'ptr' is NULL"))?;
        // SAFETY: the caller's contract: a live block from `gs_pool_acquire*` is not used after
        // this call. A pointer the pool did not hand out, or handed to a run (a value's buffer,
        // which only the run gives back), is refused with a status before anything is touched.
        Ok(unsafe { p.pool.release(ptr) }?)
    })
}

/// The pool's counters.
///
/// Thread-safe: any thread, concurrently with any call but a free of the same handle.
///
/// # Safety
/// `out` is writable; no other thread frees `pool` during this call.
#[no_mangle]
pub unsafe extern "C" fn gs_pool_get_stats(pool: *const gs_pool, out: *mut PoolStats) -> gs_status {
    guard(|| {
        // SAFETY: the handle is not freed concurrently (C contract).
        let p = unsafe { handle_ref(pool, "pool") }?;
        // SAFETY: writable by contract.
        *unsafe { out_arg(out, "out") }? = p.pool.stats();
        Ok(())
    })
}

/// Restarts peak tracking from the current levels.
///
/// Thread-safe: any thread, concurrently with any call but a free of the same handle.
///
/// # Safety
/// No other thread frees `pool` during this call.
#[no_mangle]
pub unsafe extern "C" fn gs_pool_reset_peaks(pool: *mut gs_pool) -> gs_status {
    guard(|| {
        // SAFETY: the handle is not freed concurrently (C contract).
        unsafe { handle_ref(pool, "pool") }?.pool.reset_peaks();
        Ok(())
    })
}

/// Returns all cached memory to the system.
///
/// Thread-safe: any thread, concurrently with any call but a free of the same handle.
///
/// # Safety
/// No other thread frees `pool` during this call.
#[no_mangle]
pub unsafe extern "C" fn gs_pool_trim(pool: *mut gs_pool) -> gs_status {
    guard(|| {
        // SAFETY: the handle is not freed concurrently (C contract).
        unsafe { handle_ref(pool, "pool") }?.pool.trim();
        Ok(())
    })
}
