//! `gs_ctx_*`: what a C kernel calls while it runs.

use std::ffi::{c_char, c_void, CStr};

use super::executor::gs_executor;
use super::gs_status::*;
use super::handle::{out_arg, str_arg};
use super::observe::CRunData;
use super::pool::gs_pool;
use super::status::{guard, FfiError, FfiResult};
use super::{gs_status, Tensor};
use crate::kernel::{KernelCtx, TaggedCtx};

/// The context of one running kernel; valid only during that kernel call.
// Opaque: a pointer to it is a pointer to the run's `TaggedCtx` (`kernel`).
pub struct gs_kernel_ctx {
    _opaque: [u8; 0],
}

/// The running kernel's context, if `c` is one.
///
/// # Safety
/// A non-NULL `c` is either a context handed to a kernel that is still running, or garbage
/// that the tag check rejects only if it is readable: kernels must not keep contexts.
pub(super) unsafe fn ctx<'a>(c: *const gs_kernel_ctx) -> FfiResult<&'a mut KernelCtx<'static>> {
    // SAFETY: per the function contract; every context a kernel receives is a `TaggedCtx`.
    match unsafe { c.cast::<TaggedCtx>().as_ref() } {
        None => Err(FfiError::new(GS_ERR_NULL_ARGUMENT, "argument 'ctx' is NULL")),
        Some(c) if c.tag != TaggedCtx::TAG => Err(FfiError::new(
            GS_ERR_INVALID_HANDLE,
            "argument 'ctx' is not the context of a running kernel",
        )),
        // SAFETY: a tagged context points at the live `KernelCtx` of its kernel call, which
        // only this kernel's thread uses until it returns.
        Some(c) => Ok(unsafe { &mut *c.ctx }),
    }
}

/// Number of inputs of the running node; 0 for a bad context.
///
/// Only inside the kernel call that received `ctx`, on its thread.
///
/// # Safety
/// `c` is NULL or the `ctx` the running kernel received, used on its thread before the kernel
/// returns.
#[no_mangle]
pub unsafe extern "C" fn gs_ctx_num_inputs(c: *const gs_kernel_ctx) -> u32 {
    let mut n = 0;
    // SAFETY: `c` comes from the kernel's arguments (C contract).
    guard(|| unsafe { ctx(c) }.map(|x| n = x.num_inputs() as u32));
    n
}

/// Number of outputs of the running node; 0 for a bad context.
///
/// Only inside the kernel call that received `ctx`, on its thread.
///
/// # Safety
/// `c` is NULL or the `ctx` the running kernel received, used on its thread before the kernel
/// returns.
#[no_mangle]
pub unsafe extern "C" fn gs_ctx_num_outputs(c: *const gs_kernel_ctx) -> u32 {
    let mut n = 0;
    // SAFETY: as above.
    guard(|| unsafe { ctx(c) }.map(|x| n = x.num_outputs() as u32));
    n
}

/// Input `i` of the running node, read-only; NULL (last error set) if `i` is out of range.
///
/// The descriptor and its data stay valid until the kernel returns; never keep the pointer. It
/// is the value's own descriptor, which the value's other consumers read too, not a copy: never
/// write through it.
/// Only inside the kernel call that received `ctx`, on its thread.
///
/// # Safety
/// `c` is NULL or the `ctx` the running kernel received, used on its thread before the kernel
/// returns.
#[no_mangle]
pub unsafe extern "C" fn gs_ctx_input(c: *const gs_kernel_ctx, i: u32) -> *const Tensor {
    let mut t = std::ptr::null();
    guard(|| {
        // SAFETY: as above.
        let x = unsafe { ctx(c) }?;
        let n = x.num_inputs();
        t = x.input(i as usize).ok_or_else(|| {
            FfiError::new(
                GS_ERR_INVALID_ARGUMENT,
                format!("node '{}' has no input {i} ({n} inputs)", x.node_name()),
            )
        })?;
        Ok(())
    });
    t
}

/// Output `i` of the running node; NULL (last error set) if `i` is out of range. A static output
/// is allocated already; a dynamic one has `data == NULL` until `gs_ctx_alloc_output`. The
/// kernel may set dtype, ndim, dims and strides, and lower nbytes.
///
/// The descriptor and its data stay valid until the kernel returns; the run owns the buffer. It
/// is the value's own descriptor, which its consumers will read: write it only before the kernel
/// returns.
/// Only inside the kernel call that received `ctx`, on its thread.
///
/// # Safety
/// `c` is NULL or the `ctx` the running kernel received, used on its thread before the kernel
/// returns.
#[no_mangle]
pub unsafe extern "C" fn gs_ctx_output(c: *mut gs_kernel_ctx, i: u32) -> *mut Tensor {
    let mut t = std::ptr::null_mut();
    guard(|| {
        // SAFETY: as above.
        let x = unsafe { ctx(c) }?;
        let n = x.num_outputs();
        let name = x.node_name().to_owned();
        t = x.output(i as usize).ok_or_else(|| {
            FfiError::new(
                GS_ERR_INVALID_ARGUMENT,
                format!("node '{name}' has no output {i} ({n} outputs)"),
            )
        })?;
        Ok(())
    });
    t
}

/// Allocates dynamic output `i` with its real byte count (0 makes an empty output); `out` (may
/// be NULL) receives its descriptor. A dtype or shape set on the output before is kept.
///
/// Only inside the kernel call that received `ctx`, on its thread.
///
/// # Safety
/// `c` is NULL or the `ctx` the running kernel received, used on its thread before the kernel
/// returns; `out` is NULL or writable.
#[no_mangle]
pub unsafe extern "C" fn gs_ctx_alloc_output(
    c: *mut gs_kernel_ctx,
    i: u32,
    nbytes: usize,
    out: *mut *mut Tensor,
) -> gs_status {
    guard(|| {
        // SAFETY: as above.
        let x = unsafe { ctx(c) }?;
        let t: *mut Tensor = x.alloc_output(i as usize, nbytes)?;
        if !out.is_null() {
            // SAFETY: non-NULL and writable by contract.
            *unsafe { out_arg(out, "out") }? = t;
        }
        Ok(())
    })
}

/// Records why the kernel is failing; the run's error message quotes it with the node's name.
///
/// Only inside the kernel call that received `ctx`, on its thread.
///
/// # Safety
/// `c` is NULL or the `ctx` the running kernel received, used on its thread before the kernel
/// returns; `message` is NULL or NUL-terminated.
#[no_mangle]
pub unsafe extern "C" fn gs_ctx_set_error(c: *mut gs_kernel_ctx, message: *const c_char) {
    let _ = guard(|| {
        // SAFETY: as above.
        let x = unsafe { ctx(c) }?;
        // SAFETY: NUL-terminated by contract; NULL is reported.
        let text = match unsafe { str_arg(message, "message") } {
            Ok(t) => t.to_owned(),
            // SAFETY: non-NULL here, NUL-terminated by contract.
            Err(_) if !message.is_null() => unsafe { CStr::from_ptr(message) }.to_string_lossy().into_owned(),
            Err(e) => return Err(e),
        };
        x.set_error(text);
        Ok(())
    });
}

/// Name of the running node, valid while the graph lives; NULL for a bad context.
///
/// The name stays valid as long as the graph.
/// Only inside the kernel call that received `ctx`, on its thread.
///
/// # Safety
/// `c` is NULL or the `ctx` the running kernel received, used on its thread before the kernel
/// returns.
#[no_mangle]
pub unsafe extern "C" fn gs_ctx_node_name(c: *const gs_kernel_ctx) -> *const c_char {
    let mut name = std::ptr::null();
    guard(|| {
        // SAFETY: as above.
        let x = unsafe { ctx(c) }?;
        name = x.node_name_c().as_ptr();
        Ok(())
    });
    name
}

/// 1 if output `i` took over its in-place input's buffer (`GS_NODE_IN_PLACE`): its data pointer
/// is then the input's, so the kernel must read each input element before writing it. 0 if not,
/// or for a bad context or index.
///
/// Only inside the kernel call that received `ctx`, on its thread.
///
/// # Safety
/// `c` is NULL or the `ctx` the running kernel received, used on its thread before the kernel
/// returns.
#[no_mangle]
pub unsafe extern "C" fn gs_ctx_output_in_place(c: *const gs_kernel_ctx, i: u32) -> i32 {
    let mut yes = 0;
    guard(|| {
        // SAFETY: `c` comes from the kernel's arguments (C contract).
        yes = unsafe { ctx(c) }?.output_in_place(i as usize) as i32;
        Ok(())
    });
    yes
}

/// One pointer of the run's `CRunData` (NULL when the kernel runs in a run not started by
/// `gs_run`, or for a bad context).
///
/// # Safety
/// As for the `gs_ctx_*` calls: `c` is NULL or the running kernel's context, on its thread.
unsafe fn run_pointer<T>(c: *const gs_kernel_ctx, pick: fn(&CRunData) -> *mut T) -> *mut T {
    let mut out = std::ptr::null_mut();
    guard(|| {
        // SAFETY: `c` comes from the kernel's arguments (the caller's contract).
        let x = unsafe { ctx(c) }?;
        out = x
            .run_data()
            .and_then(|d| d.downcast_ref::<CRunData>())
            .map_or(std::ptr::null_mut(), pick);
        Ok(())
    });
    out
}

/// The `user_data` of the run's `gs_run_options`; NULL if it had none, or for a bad context.
///
/// Only inside the kernel call that received `ctx`, on its thread.
///
/// # Safety
/// `c` is NULL or the `ctx` the running kernel received, used on its thread before the kernel
/// returns.
#[no_mangle]
pub unsafe extern "C" fn gs_ctx_user_data(c: *const gs_kernel_ctx) -> *mut c_void {
    // SAFETY: the same contract, passed on.
    unsafe { run_pointer(c, |d| d.user_data) }
}

/// The pool the run was started with: a kernel may run a nested graph with it (`gs_run` from
/// inside the kernel), or take scratch memory from it. NULL for a bad context.
///
/// Only inside the kernel call that received `ctx`, on its thread. The handle is the caller's,
/// valid while its `gs_run` lasts.
///
/// # Safety
/// `c` is NULL or the `ctx` the running kernel received, used on its thread before the kernel
/// returns.
#[no_mangle]
pub unsafe extern "C" fn gs_ctx_pool(c: *const gs_kernel_ctx) -> *mut gs_pool {
    // SAFETY: the same contract, passed on.
    unsafe { run_pointer(c, |d| d.pool) }
}

/// The executor running this node; NULL if the run has none (or for a bad context). A nested
/// `gs_run` on it shares its threads and cannot deadlock: the thread waiting for the nested run
/// works on it (and on whatever else is queued) until it is over.
///
/// Only inside the kernel call that received `ctx`, on its thread. The handle is the caller's,
/// valid while its `gs_run` lasts.
///
/// # Safety
/// `c` is NULL or the `ctx` the running kernel received, used on its thread before the kernel
/// returns.
#[no_mangle]
pub unsafe extern "C" fn gs_ctx_executor(c: *const gs_kernel_ctx) -> *mut gs_executor {
    // SAFETY: the same contract, passed on.
    unsafe { run_pointer(c, |d| d.executor) }
}

/// The body of a parallel loop: runs items `begin..end` (end excluded) with the `user` pointer
/// given to `gs_ctx_parallel_for`. Called from several threads at once; must not throw.
#[allow(non_camel_case_types)]
pub type gs_range_fn = Option<unsafe extern "C" fn(begin: usize, end: usize, user: *mut c_void)>;

/// A C loop body and its data, callable from any thread (the header's contract).
struct CRange {
    f: unsafe extern "C" fn(usize, usize, *mut c_void),
    user: *mut c_void,
}

// SAFETY: the header requires the body to be callable from several threads at once with its
// `user` pointer; graphsched only passes the pointer back.
unsafe impl Sync for CRange {}

/// Runs `fn` over `begin..end` in chunks of `grain` items (0 counts as 1): on this thread and
/// on the run's executor's other threads as they come free, ahead of other ready nodes; without
/// an executor, on this thread in order. Returns once every chunk has run. No thread is created;
/// it cannot deadlock, even when every thread is inside such a call (each caller runs every
/// chunk nobody else has claimed, then waits only for chunks being run).
///
/// `begin == end` runs nothing and returns `GS_OK`; `begin > end` runs nothing and returns
/// `GS_ERR_INVALID_ARGUMENT`; a NULL `fn` is `GS_ERR_NULL_ARGUMENT`. The loop does not watch
/// the run's cancel token or deadline: called in a cancelled run (or one past its deadline), it
/// still runs every chunk and returns `GS_OK`; the run starts no new node after it. For loops
/// inside chunks, use `gs_ctx_parallel_for_nested`.
///
/// Only inside the kernel call that received `ctx`, on its thread.
///
/// # Safety
/// `c` is NULL or the `ctx` the running kernel received, used on its thread before the kernel
/// returns; `f` may be called with `user` from several threads at once until this returns.
#[no_mangle]
pub unsafe extern "C" fn gs_ctx_parallel_for(
    c: *mut gs_kernel_ctx,
    begin: usize,
    end: usize,
    grain: usize,
    f: gs_range_fn,
    user: *mut c_void,
) -> gs_status {
    guard(|| {
        // SAFETY: `c` comes from the kernel's arguments (C contract).
        let x = unsafe { ctx(c) }?;
        let f = f.ok_or_else(|| FfiError::new(GS_ERR_NULL_ARGUMENT, "argument 'f' is NULL"))?;
        check_range(x.node_name(), begin, end)?;
        let body = &CRange { f, user };
        let run = move |r: std::ops::Range<usize>| {
            // SAFETY: the caller vouched for `f` and `user` (C contract); each call gets a chunk.
            unsafe { (body.f)(r.start, r.end, body.user) }
        };
        x.parallel_for(begin..end, grain, &run)
            .map_err(|e| FfiError::new(GS_ERR_KERNEL_FAILED, format!("node '{}': {e}", x.node_name())))
    })
}

/// A parallel loop's range, refused when it ends before it begins (`gs_ctx_parallel_for` and the
/// nested loops of `exec::node::parallel` alike).
pub(super) fn check_range(node: impl std::fmt::Display, begin: usize, end: usize) -> FfiResult<()> {
    if begin > end {
        return Err(FfiError::new(
            GS_ERR_INVALID_ARGUMENT,
            format!("node '{node}': parallel loop from {begin} to {end}, which ends before it begins"),
        ));
    }
    Ok(())
}
