//! `gs_ctx_defer` and `gs_complete`: asynchronous kernels (see `exec/pending.rs`).

use std::ffi::{c_char, CStr};

use super::ctx::{ctx, gs_kernel_ctx};
use super::gs_status;
use super::handle::{into_handle, out_arg, take_handle, Handle};
use super::status::{gs_status_name, guard, FfiError};
use crate::exec::Completion;

/// The right to end a node whose kernel deferred its end (`gs_ctx_defer`); `gs_complete`
/// consumes it.
pub struct gs_completion {
    completion: Completion,
}

impl Handle for gs_completion {
    const NAME: &'static str = "gs_completion";
    const TAG: u8 = 7;
}

/// Defers the end of the running node: the kernel starts its work elsewhere (a device, an I/O
/// request, another thread), returns `GS_OK`, and the work calls `gs_complete(*out, ...)` when
/// it is done, from any thread. Until then the node is pending: its inputs stay alive, its
/// outputs stay allocated for the work to write, and the kernel's thread runs other nodes
/// (without an executor the run waits at the node; so does, once, a run that went to its caller
/// before any kernel of this op type deferred: see `gs_run_options.executor`). A pending node
/// keeps its place in the run's window (`gs_run_options.window` bounds nodes running or
/// pending). A run that is cancelled, passes its deadline or fails while nodes are pending
/// waits for their completions before it returns its buffers and its status: every
/// `gs_completion` must be completed. Everything else is settled when the kernel returns:
/// dynamic outputs allocated, descriptors set. A kernel that returns an error after deferring
/// fails the run, which still waits for the completion. At most once per kernel call: a second
/// call returns `GS_ERR_INVALID_ARGUMENT` ("... deferred its end already"), writes nothing to
/// `out`, and leaves the first deferral in force (its completion must still be completed).
///
/// Only inside the kernel call that received `ctx`, on its thread.
///
/// # Safety
/// `c` is NULL or the `ctx` the running kernel received, used on its thread before the kernel
/// returns; `out` is writable.
#[no_mangle]
pub unsafe extern "C" fn gs_ctx_defer(c: *mut gs_kernel_ctx, out: *mut *mut gs_completion) -> gs_status {
    guard(|| {
        // SAFETY: `c` comes from the kernel's arguments (C contract).
        let x = unsafe { ctx(c) }?;
        // SAFETY: writable by contract.
        let out = unsafe { out_arg(out, "out") }?;
        let completion = x.defer()?;
        *out = into_handle(gs_completion { completion })?;
        Ok(())
    })
}

/// Ends a node whose kernel deferred its end, and frees `completion`. `status` is `GS_OK` if
/// the work succeeded; any other value fails the run with `GS_ERR_KERNEL_FAILED`, its message
/// naming the node, `status` as a number and as a name (`gs_status_name`; `GS_UNKNOWN_STATUS`
/// for an engine's own code) and `message` (which may be NULL), as in "node 'conv' (op Conv)
/// failed after deferring: completed with status 12 (GS_ERR_OUT_OF_MEMORY): device lost". The
/// node's outputs must hold their final
/// contents before this is called. The call only queues the node's end: it runs no kernel.
///
/// Thread-safe: any thread; each completion once (a second call is `GS_ERR_INVALID_HANDLE`).
///
/// # Safety
/// `completion` is NULL or a handle `gs_ctx_defer` made; `message` is NULL or a
/// NUL-terminated string.
#[no_mangle]
pub unsafe extern "C" fn gs_complete(completion: *mut gs_completion, status: i32, message: *const c_char) -> gs_status {
    guard(|| {
        // Read before the handle is taken: a bad message leaves the node pending, not failed
        // with a garbled reason.
        let text = match message.is_null() {
            true => None,
            // SAFETY: non-NULL and NUL-terminated by contract.
            false => Some(unsafe { CStr::from_ptr(message) }.to_string_lossy().into_owned()),
        };
        // SAFETY: by contract, a handle from `gs_ctx_defer` or garbage the registry rejects.
        let handle = unsafe { take_handle(completion, "completion") }?;
        let result = match status {
            0 => Ok(()),
            _ => {
                // SAFETY: `gs_status_name` returns a static NUL-terminated string.
                let name = unsafe { CStr::from_ptr(gs_status_name(status)) }.to_string_lossy();
                Err(match text {
                    Some(t) => format!("completed with status {status} ({name}): {t}"),
                    None => format!("completed with status {status} ({name})"),
                })
            }
        };
        handle.completion.complete(result);
        Ok::<(), FfiError>(())
    })
}
