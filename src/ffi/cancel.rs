//! `gs_cancel_token_*`: stopping runs from another thread.

use super::gs_status;
use super::handle::{free_handle, handle_ref, into_handle, out_arg, Handle};
use super::status::guard;
use crate::exec::CancelToken;

/// Stops the runs it is given to (`gs_run_options.cancel`) when cancelled from any thread.
pub struct gs_cancel_token {
    pub(crate) token: CancelToken,
}

impl Handle for gs_cancel_token {
    const NAME: &'static str = "gs_cancel_token";
    const TAG: u8 = 4;
}

/// Makes a token, not cancelled.
///
/// The token must outlive every run that uses it.
/// Thread-safe: any thread, concurrently with any call but a free of the same handle.
///
/// # Safety
/// `out` is writable.
#[no_mangle]
pub unsafe extern "C" fn gs_cancel_token_new(out: *mut *mut gs_cancel_token) -> gs_status {
    guard(|| {
        // SAFETY: writable by contract.
        let out = unsafe { out_arg(out, "out") }?;
        *out = into_handle(gs_cancel_token {
            token: CancelToken::new(),
        })?;
        Ok(())
    })
}

/// Frees a token. NULL does nothing. No run may be using it.
///
/// Thread-safe with respect to other handles; no other call may be using this handle, on any
/// thread.
///
/// # Safety
/// No other thread is inside a call on `token` (a `gs_run` given it in its options included)
/// during this call.
#[no_mangle]
pub unsafe extern "C" fn gs_cancel_token_free(token: *mut gs_cancel_token) {
    let _ = guard(|| {
        // SAFETY: no other thread uses the handle while it is freed (C contract).
        unsafe { free_handle(token, "token") };
        Ok(())
    });
}

/// Cancels: runs using the token start no new node, let running kernels finish, return every
/// buffer and fail with `GS_ERR_CANCELLED` (a run whose nodes had all started has nothing left
/// to stop, and ends with its outputs, `GS_OK`). Returns 1 for the call that cancelled, 0 if the token
/// was cancelled already, -1 (last error set) for a bad token. Safe from any thread, any time.
///
/// Thread-safe: any thread, concurrently with any call but a free of the same handle.
///
/// # Safety
/// No other thread frees `token` during this call.
#[no_mangle]
pub unsafe extern "C" fn gs_cancel_token_cancel(token: *const gs_cancel_token) -> i32 {
    let mut result = -1;
    guard(|| {
        // SAFETY: the handle is not freed concurrently (C contract).
        result = unsafe { handle_ref(token, "token") }?.token.cancel() as i32;
        Ok(())
    });
    result
}

/// Makes a cancelled token usable for another run: not cancelled any more. Returns 1 if it was
/// cancelled, 0 if not, -1 (last error set) for a bad token. Reset a token between runs: a run
/// still using it may or may not see the cancellation that the reset undoes.
///
/// Thread-safe: any thread, concurrently with any call but a free of the same handle.
///
/// # Safety
/// No other thread frees `token` during this call.
#[no_mangle]
pub unsafe extern "C" fn gs_cancel_token_reset(token: *const gs_cancel_token) -> i32 {
    let mut result = -1;
    guard(|| {
        // SAFETY: the handle is not freed concurrently (C contract).
        result = unsafe { handle_ref(token, "token") }?.token.reset() as i32;
        Ok(())
    });
    result
}
