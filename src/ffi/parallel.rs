//! `gs_ctx_parallel_for_nested` and `gs_parallel_for`: parallel loops whose chunks may start
//! loops of their own, on whichever thread runs them (`KernelCtx::parallel` in Rust).

use std::ffi::{c_void, CStr};
use std::ops::Range;

use super::ctx::{ctx, gs_kernel_ctx};
use super::gs_status;
use super::gs_status::*;
use super::status::{guard, FfiError, FfiResult};
use crate::exec::Parallel;

/// What the chunks of a loop started with `gs_ctx_parallel_for_nested` receive: pass it to
/// `gs_parallel_for` to start a loop inside the chunk, from any thread. Valid only until the
/// chunk function that received it returns.
// Opaque in C. It lives on the stack of the `gs_ctx_parallel_for_nested` call, which returns
// only once every chunk (and so every nested loop) is done.
pub struct gs_parallel {
    /// [`gs_parallel::TAG`] while the loop runs; 0 once it returned.
    tag: u64,
    parallel: Parallel<'static>,
    /// The kernel's node name, for messages; the graph outlives the loop.
    node: *const CStr,
}

impl gs_parallel {
    /// The tag of a live handle: "gspar_ok".
    const TAG: u64 = 0x6773_7061_725f_6f6b;

    fn node(&self) -> String {
        // SAFETY: the name belongs to the running kernel's graph, alive while the loop runs.
        unsafe { &*self.node }.to_string_lossy().into_owned()
    }
}

impl Drop for gs_parallel {
    fn drop(&mut self) {
        // A handle kept past its loop is then refused while its stack slot is not reused.
        self.tag = 0;
    }
}

/// The body of a loop whose chunks may start loops of their own: runs items `begin..end` (end
/// excluded) with the `user` pointer given to the loop, and may pass `p` to `gs_parallel_for`
/// while it runs. Called from several threads at once; must not throw.
pub type gs_parallel_fn =
    Option<unsafe extern "C" fn(p: *const gs_parallel, begin: usize, end: usize, user: *mut c_void)>;

/// A C loop body, its data and the handle its chunks get, callable from any thread.
struct CNested {
    f: unsafe extern "C" fn(*const gs_parallel, usize, usize, *mut c_void),
    user: *mut c_void,
    handle: *const gs_parallel,
}

// SAFETY: the header requires the body to be callable from several threads at once with its
// `user` pointer; `handle` is read-only while the loop runs and `Parallel` is `Sync`.
unsafe impl Sync for CNested {}

/// Runs `f` over `begin..end` with `p`'s executor, each chunk given `p`.
fn run_loop(
    p: &gs_parallel,
    begin: usize,
    end: usize,
    grain: usize,
    f: gs_parallel_fn,
    user: *mut c_void,
) -> FfiResult<()> {
    let f = f.ok_or_else(|| FfiError::new(GS_ERR_NULL_ARGUMENT, "argument 'f' is NULL"))?;
    super::ctx::check_range(p.node(), begin, end)?;
    let body = &CNested { f, user, handle: p };
    let run = move |r: Range<usize>| {
        // SAFETY: the caller vouched for `f` and `user` (C contract); `handle` is alive until
        // this loop returns, after every chunk.
        unsafe { (body.f)(body.handle, r.start, r.end, body.user) }
    };
    p.parallel
        .for_each(begin..end, grain, &run)
        .map_err(|e| FfiError::new(GS_ERR_KERNEL_FAILED, format!("node '{}': {e}", p.node())))
}

/// As `gs_ctx_parallel_for`, with a body that receives a handle `p` for loops of its own:
/// inside a chunk, on whichever thread runs it, `gs_parallel_for(p, ...)` runs a nested loop on
/// the same threads (it cannot deadlock either: each caller runs the chunks nobody claimed).
/// The same statuses as `gs_ctx_parallel_for`.
///
/// Only inside the kernel call that received `ctx`, on its thread.
///
/// # Safety
/// `c` is NULL or the `ctx` the running kernel received, used on its thread before the kernel
/// returns; `f` may be called with `user` from several threads at once until this returns.
#[no_mangle]
pub unsafe extern "C" fn gs_ctx_parallel_for_nested(
    c: *mut gs_kernel_ctx,
    begin: usize,
    end: usize,
    grain: usize,
    f: gs_parallel_fn,
    user: *mut c_void,
) -> gs_status {
    guard(|| {
        // SAFETY: `c` comes from the kernel's arguments (C contract).
        let x = unsafe { ctx(c) }?;
        // SAFETY: only the lifetime is erased: the handle lives on this frame, and the loop
        // returns (after every chunk that may use it) before the kernel does.
        let parallel = unsafe { std::mem::transmute::<Parallel<'_>, Parallel<'static>>(x.parallel()) };
        let handle = gs_parallel {
            tag: gs_parallel::TAG,
            parallel,
            node: x.node_name_c(),
        };
        run_loop(&handle, begin, end, grain, f, user)
    })
}

/// Runs `f` over `begin..end` in chunks of `grain` items (0 counts as 1) from inside a chunk
/// of a loop started with `gs_ctx_parallel_for_nested`, which passed `p` to the chunk: on this
/// thread and the run's other threads as they come free; returns once every chunk has run. The
/// chunks get `p` too, so loops nest to any depth. Statuses: `GS_ERR_NULL_ARGUMENT` for a NULL
/// `p` or `f`, `GS_ERR_INVALID_HANDLE` for a `p` that is not a live loop's, and as
/// `gs_ctx_parallel_for` otherwise (`GS_ERR_INVALID_ARGUMENT` when `begin > end`).
///
/// Thread-safe: any thread, while the chunk that received `p` runs.
///
/// # Safety
/// `p` is NULL or the handle a running chunk received, used before that chunk returns; `f` may
/// be called with `user` from several threads at once until this returns.
#[no_mangle]
pub unsafe extern "C" fn gs_parallel_for(
    p: *const gs_parallel,
    begin: usize,
    end: usize,
    grain: usize,
    f: gs_parallel_fn,
    user: *mut c_void,
) -> gs_status {
    guard(|| {
        // SAFETY: NULL, a live handle, or garbage the tag check rejects (C contract).
        let handle = match unsafe { p.as_ref() } {
            None => return Err(FfiError::new(GS_ERR_NULL_ARGUMENT, "argument 'p' is NULL")),
            Some(h) if h.tag != gs_parallel::TAG => {
                return Err(FfiError::new(
                    GS_ERR_INVALID_HANDLE,
                    "argument 'p' is not the handle of a running parallel loop",
                ))
            }
            Some(h) => h,
        };
        run_loop(handle, begin, end, grain, f, user)
    })
}
