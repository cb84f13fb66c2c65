//! The statuses the header states for calls a C kernel or size function makes inside a run: a
//! loop that ends before it begins, a loop in a cancelled run, a second `gs_ctx_defer`, a
//! failed completion (its message names the status), a size function's oversized answer (0 is an empty tensor, and runs).
//! Each through the C ABI, as an engine sees it.

use std::ffi::{c_void, CStr};
use std::ptr::{null, null_mut};
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::Mutex;

use graphsched::ffi::*;
use graphsched::{Tensor, ValueRef};

fn last_error() -> String {
    // SAFETY: the last error is a valid C string owned by this thread.
    unsafe { CStr::from_ptr(gs_last_error_message()) }
        .to_string_lossy()
        .into_owned()
}

/// What a kernel saw, for the test to check after the run: each call's status and sentence.
#[derive(Default)]
struct Seen {
    token: usize,
    calls: Mutex<Vec<(gs_status, String)>>,
    items: AtomicUsize,
}

impl Seen {
    fn note(&self, status: gs_status) {
        let message = if status == gs_status::GS_OK {
            String::new()
        } else {
            last_error()
        };
        self.calls.lock().unwrap().push((status, message));
    }
}

unsafe extern "C" fn count(begin: usize, end: usize, user: *mut c_void) {
    // SAFETY: `user` is the `Seen` the kernel passed, alive until the loop returns.
    unsafe { &*(user as *const Seen) }
        .items
        .fetch_add(end - begin, Ordering::Relaxed);
}

/// A loop that ends before it begins, then its run's token cancelled, then a loop of 1000 items.
unsafe extern "C" fn looper(ctx: *mut gs_kernel_ctx, user: *mut c_void) -> i32 {
    // SAFETY: `user` is the test's `Seen`, alive for the run.
    let seen = unsafe { &*(user as *const Seen) };
    // SAFETY: `ctx` is this kernel's; `count` takes the `Seen`.
    seen.note(unsafe { gs_ctx_parallel_for(ctx, 10, 5, 1, Some(count), user) });
    // SAFETY: the token outlives the run. (No assert here: a panic must not leave a C kernel.)
    unsafe { gs_cancel_token_cancel(seen.token as *const gs_cancel_token) };
    // SAFETY: as for the first loop.
    seen.note(unsafe { gs_ctx_parallel_for(ctx, 0, 1000, 10, Some(count), user) });
    0
}

/// Defers twice, then completes the first deferral with a failure.
unsafe extern "C" fn defer_twice(ctx: *mut gs_kernel_ctx, user: *mut c_void) -> i32 {
    // SAFETY: `user` is the test's `Seen`, alive for the run.
    let seen = unsafe { &*(user as *const Seen) };
    let (mut first, mut second) = (null_mut(), null_mut());
    // SAFETY: `ctx` is this kernel's; the outs are writable.
    seen.note(unsafe { gs_ctx_defer(ctx, &mut first) });
    // SAFETY: as above.
    seen.note(unsafe { gs_ctx_defer(ctx, &mut second) });
    // SAFETY: `first` is the live completion the first call made.
    seen.note(unsafe { gs_complete(first, gs_status::GS_ERR_OUT_OF_MEMORY as i32, c"device lost".as_ptr()) });
    0
}

fn node(name: &CStr, kernel: gs_kernel_fn, user: *mut c_void, inputs: &[ValueRef], size: &[usize]) -> gs_node_desc {
    gs_node_desc {
        name: name.as_ptr(),
        op_type: c"Op".as_ptr(),
        kernel,
        user_data: user,
        inputs: inputs.as_ptr(),
        num_inputs: inputs.len() as u32,
        num_outputs: size.len() as u32,
        output_sizes: size.as_ptr(),
        estimated_ns: 0,
        flags: 0,
        in_place_output: 0,
        in_place_input: 0,
        size_fn: None,
    }
}

/// A finalized graph of the one node `d`, its output the graph's.
fn one_node(d: &gs_node_desc, input: Option<&mut ValueRef>) -> *mut gs_graph {
    let mut g = null_mut();
    // SAFETY: every pointer is a live local or the descriptor's, read during the calls.
    unsafe {
        assert_eq!(gs_graph_new(&mut g), gs_status::GS_OK);
        if let Some(x) = input {
            assert_eq!(
                gs_graph_add_input(g, c"x".as_ptr(), GS_SIZE_DYNAMIC, x),
                gs_status::GS_OK
            );
            let mut d = *d;
            d.inputs = x;
            d.num_inputs = 1;
            assert_eq!(gs_graph_add_node(g, &d, null_mut()), gs_status::GS_OK);
            assert_eq!(gs_graph_mark_output(g, ValueRef::new(1, 0)), gs_status::GS_OK);
        } else {
            assert_eq!(gs_graph_add_node(g, d, null_mut()), gs_status::GS_OK);
            assert_eq!(gs_graph_mark_output(g, ValueRef::new(0, 0)), gs_status::GS_OK);
        }
        assert_eq!(gs_graph_finalize(g), gs_status::GS_OK, "{}", last_error());
    }
    g
}

/// Runs `g` (on a 2-thread executor when `executor` is not NULL) and returns the status and the
/// last error's sentence; frees a result.
fn run(g: *mut gs_graph, pool: *mut gs_pool, options: gs_run_options) -> (gs_status, String) {
    let mut r = null_mut();
    // SAFETY: the options' pointers are the caller's live handles and locals.
    let status = unsafe { gs_run(g, pool, &options, &mut r) };
    let message = last_error();
    if status == gs_status::GS_OK {
        // SAFETY: `r` is the result the run made.
        unsafe { gs_result_free(r) };
    }
    (status, message)
}

fn new_pool_and_executor() -> (*mut gs_pool, *mut gs_executor) {
    let (mut pool, mut executor) = (null_mut(), null_mut());
    let config = gs_executor_config { threads: 2 };
    // SAFETY: NULL config means defaults; the outs are writable.
    unsafe {
        assert_eq!(gs_pool_new(null(), &mut pool), gs_status::GS_OK);
        assert_eq!(gs_executor_new(&config, &mut executor), gs_status::GS_OK);
    }
    (pool, executor)
}

#[test]
fn a_reversed_loop_is_refused_and_a_loop_in_a_cancelled_run_runs_every_item() {
    let (pool, executor) = new_pool_and_executor();
    let mut token = null_mut();
    // SAFETY: writable out.
    assert_eq!(unsafe { gs_cancel_token_new(&mut token) }, gs_status::GS_OK);
    let seen = Seen {
        token: token as usize,
        ..Default::default()
    };
    // "loop" -> "after": the run is cancelled while "loop" runs, before "after" starts.
    let d = node(c"loop", Some(looper), &seen as *const Seen as *mut c_void, &[], &[8]);
    let first = [ValueRef::new(0, 0)];
    let after = node(c"after", Some(nothing), null_mut(), &first, &[8]);
    let mut g = null_mut();
    // SAFETY: live locals and descriptors, read during the calls.
    unsafe {
        assert_eq!(gs_graph_new(&mut g), gs_status::GS_OK);
        assert_eq!(gs_graph_add_node(g, &d, null_mut()), gs_status::GS_OK);
        assert_eq!(gs_graph_add_node(g, &after, null_mut()), gs_status::GS_OK);
        assert_eq!(gs_graph_mark_output(g, ValueRef::new(1, 0)), gs_status::GS_OK);
        assert_eq!(gs_graph_finalize(g), gs_status::GS_OK);
    }
    for on in [null_mut(), executor] {
        let (status, message) = run(
            g,
            pool,
            gs_run_options {
                executor: on,
                flags: GS_RUN_FORCE_EXECUTOR,
                cancel: token,
                ..Default::default()
            },
        );
        let calls = std::mem::take(&mut *seen.calls.lock().unwrap());
        assert_eq!(calls[0].0, gs_status::GS_ERR_INVALID_ARGUMENT, "{calls:?}");
        assert!(
            calls[0].1.contains("from 10 to 5, which ends before it begins"),
            "{calls:?}"
        );
        // The loop does not look at the token: every chunk runs, and the run says the rest.
        assert_eq!(calls[1], (gs_status::GS_OK, String::new()));
        assert_eq!(seen.items.swap(0, Ordering::Relaxed), 1000);
        assert_eq!(status, gs_status::GS_ERR_CANCELLED, "{message}");
        // SAFETY: the token is live; between runs.
        assert_eq!(unsafe { gs_cancel_token_reset(token) }, 1);
    }
    // SAFETY: every handle is live and no run uses it any more.
    unsafe {
        gs_graph_free(g);
        gs_cancel_token_free(token);
        gs_executor_free(executor);
        gs_pool_free(pool);
    }
}

#[test]
fn a_second_defer_is_refused_and_a_failed_completion_names_its_status() {
    let (pool, executor) = new_pool_and_executor();
    let seen = Seen::default();
    let d = node(
        c"device",
        Some(defer_twice),
        &seen as *const Seen as *mut c_void,
        &[],
        &[8],
    );
    let g = one_node(&d, None);
    for on in [null_mut(), executor] {
        let (status, message) = run(
            g,
            pool,
            gs_run_options {
                executor: on,
                flags: GS_RUN_FORCE_EXECUTOR,
                ..Default::default()
            },
        );
        let calls = std::mem::take(&mut *seen.calls.lock().unwrap());
        assert_eq!(calls[0].0, gs_status::GS_OK, "{calls:?}");
        assert_eq!(calls[1].0, gs_status::GS_ERR_INVALID_ARGUMENT, "{calls:?}");
        assert!(
            calls[1].1.contains("node 'device' deferred its end already"),
            "{calls:?}"
        );
        assert_eq!(calls[2].0, gs_status::GS_OK, "{calls:?}");
        assert_eq!(status, gs_status::GS_ERR_KERNEL_FAILED, "{message}");
        assert!(
            message.contains("node 'device'")
                && message.contains("completed with status 12 (GS_ERR_OUT_OF_MEMORY): device lost"),
            "{message}"
        );
    }
    // SAFETY: every handle is live and no run uses it any more.
    unsafe {
        gs_graph_free(g);
        gs_executor_free(executor);
        gs_pool_free(pool);
    }
}

unsafe extern "C" fn nothing(_: *mut gs_kernel_ctx, _: *mut c_void) -> i32 {
    0
}

/// Answers with the node's `user_data` as the output's size.
unsafe extern "C" fn answer(_: *const usize, _: u32, out: *mut usize, _: u32, user: *mut c_void) -> i32 {
    // SAFETY: one writable output size (the node has one output).
    unsafe { *out = user as usize };
    0
}

#[test]
fn a_size_function_answering_too_many_bytes_fails_the_run_and_0_bytes_is_an_empty_tensor() {
    let (pool, executor) = new_pool_and_executor();
    let too_many = isize::MAX as usize; // more than a buffer can have, not GS_SIZE_DYNAMIC
    for (bytes, want, words) in [
        (0, gs_status::GS_OK, ""),
        (
            too_many,
            gs_status::GS_ERR_SIZE_OVERFLOW,
            "more than one buffer can have",
        ),
    ] {
        let mut d = node(c"shape", Some(nothing), bytes as *mut c_void, &[], &[16]);
        d.size_fn = Some(answer);
        let mut x = ValueRef::new(0, 0);
        let g = one_node(&d, Some(&mut x));
        let mut data = [0u8; 32];
        let binding = gs_input_binding {
            value: x,
            tensor: Tensor::new(data.as_mut_ptr() as *mut c_void, data.len()),
        };
        for on in [null_mut(), executor] {
            let (status, message) = run(
                g,
                pool,
                gs_run_options {
                    inputs: &binding,
                    num_inputs: 1,
                    executor: on,
                    ..Default::default()
                },
            );
            assert_eq!(status, want, "{bytes}: {message}");
            if want != gs_status::GS_OK {
                assert!(message.contains("node 'shape'") && message.contains(words), "{message}");
            }
        }
        // An empty batch bound through C, its data NULL: the run goes on.
        let empty = gs_input_binding {
            value: x,
            tensor: Tensor::new(null_mut(), 0),
        };
        let options = gs_run_options {
            inputs: &empty,
            num_inputs: 1,
            ..Default::default()
        };
        let (status, message) = run(g, pool, options);
        assert_eq!(status, want, "{bytes}, an empty binding: {message}");
        // SAFETY: live, unused.
        unsafe { gs_graph_free(g) };
    }
    // SAFETY: every handle is live and no run uses it any more.
    unsafe {
        gs_executor_free(executor);
        gs_pool_free(pool);
    }
}

/// One counter per item, and the statuses the outer chunks' inner loops returned.
struct Marks {
    items: Vec<AtomicUsize>,
    statuses: Mutex<Vec<gs_status>>,
}

unsafe extern "C" fn mark(_: *const gs_parallel, begin: usize, end: usize, user: *mut c_void) {
    // SAFETY: `user` is the test's `Marks`, alive until the loop returns.
    let marks = unsafe { &*(user as *const Marks) };
    for i in begin..end {
        marks.items[i].fetch_add(1, Ordering::Relaxed);
    }
}

/// A chunk of the outer loop: an inner loop over its items, three at a time, on the same handle.
unsafe extern "C" fn outer(p: *const gs_parallel, begin: usize, end: usize, user: *mut c_void) {
    // SAFETY: `p` is this chunk's handle; `user` the test's `Marks`.
    let status = unsafe { gs_parallel_for(p, begin, end, 3, Some(mark), user) };
    // SAFETY: as above.
    let reversed = unsafe { gs_parallel_for(p, end, begin, 3, Some(mark), user) };
    // SAFETY: `user` is the test's `Marks`.
    let marks = unsafe { &*(user as *const Marks) };
    marks.statuses.lock().unwrap().extend([status, reversed]);
}

unsafe extern "C" fn nested_kernel(ctx: *mut gs_kernel_ctx, user: *mut c_void) -> i32 {
    // SAFETY: `ctx` is this kernel's; `user` the test's `Marks`.
    unsafe { gs_ctx_parallel_for_nested(ctx, 0, 1000, 50, Some(outer), user) as i32 }
}

#[test]
fn chunks_of_a_c_loop_start_loops_of_their_own_on_any_thread() {
    let (pool, executor) = new_pool_and_executor();
    let marks = Marks {
        items: (0..1000).map(|_| AtomicUsize::new(0)).collect(),
        statuses: Mutex::new(Vec::new()),
    };
    let d = node(
        c"nest",
        Some(nested_kernel),
        &marks as *const Marks as *mut c_void,
        &[],
        &[8],
    );
    let g = one_node(&d, None);
    for on in [null_mut(), executor] {
        for _ in 0..20 {
            let (status, message) = run(
                g,
                pool,
                gs_run_options {
                    executor: on,
                    flags: GS_RUN_FORCE_EXECUTOR,
                    ..Default::default()
                },
            );
            assert_eq!(status, gs_status::GS_OK, "{message}");
            assert!(marks.items.iter().all(|m| m.swap(0, Ordering::Relaxed) == 1));
            // Every outer chunk's inner loop ran (OK) and its reversed one was refused.
            let statuses = std::mem::take(&mut *marks.statuses.lock().unwrap());
            assert_eq!(statuses.len(), 2 * 20, "{statuses:?}");
            for pair in statuses.chunks(2) {
                assert_eq!(pair, [gs_status::GS_OK, gs_status::GS_ERR_INVALID_ARGUMENT]);
            }
        }
    }
    // SAFETY: every handle is live and no run uses it any more.
    unsafe {
        gs_graph_free(g);
        gs_executor_free(executor);
        gs_pool_free(pool);
    }
}
