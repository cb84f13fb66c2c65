//! The C ABI driven from Rust: handle checks, argument checks, and a status table that proves
//! every status code the header declares is produced by some misuse.

use std::collections::BTreeSet;
use std::ffi::{c_void, CStr};
use std::ptr::{null, null_mut};

use graphsched::ffi::*;
use graphsched::{GraphInfo, PoolConfig, PoolStats, RunStats, Tensor, ValueRef};

fn last_error() -> String {
    // SAFETY: the last error is a valid C string owned by this thread.
    unsafe { CStr::from_ptr(gs_last_error_message()) }
        .to_string_lossy()
        .into_owned()
}

/// Asserts a status and that the last error mentions `needle`; records the status.
fn expect(seen: &mut BTreeSet<i32>, status: gs_status, want: gs_status, needle: &str) {
    assert_eq!(status, want, "last error: {}", last_error());
    if want != gs_status::GS_OK {
        let msg = last_error();
        assert!(msg.contains(needle), "message {msg:?} does not mention {needle:?}");
    }
    seen.insert(status as i32);
}

unsafe extern "C" fn fill_kernel(ctx: *mut gs_kernel_ctx, user: *mut c_void) -> i32 {
    let value = user as usize as u8;
    // SAFETY: the context this kernel received, on its thread, while it runs.
    let out = unsafe { gs_ctx_output(ctx, 0) };
    // SAFETY: a static output is allocated with `nbytes` bytes while the kernel runs.
    unsafe { std::ptr::write_bytes((*out).data as *mut u8, value, (*out).nbytes) };
    0
}

unsafe extern "C" fn add_kernel(ctx: *mut gs_kernel_ctx, _user: *mut c_void) -> i32 {
    // SAFETY: the context this kernel received, on its thread, while it runs.
    let n = unsafe { gs_ctx_num_inputs(ctx) };
    // SAFETY: as above.
    let out = unsafe { gs_ctx_output(ctx, 0) };
    // SAFETY: inputs and output are valid for `nbytes` while the kernel runs; `ctx` as above.
    unsafe {
        let dst = std::slice::from_raw_parts_mut((*out).data as *mut u8, (*out).nbytes);
        dst.fill(0);
        for i in 0..n {
            let t = gs_ctx_input(ctx, i);
            let src = std::slice::from_raw_parts((*t).data as *const u8, (*t).nbytes);
            for (d, s) in dst.iter_mut().zip(src) {
                *d = d.wrapping_add(*s);
            }
        }
    }
    // Out of range: NULL, not a crash.
    // SAFETY: `ctx` as above.
    if unsafe { !gs_ctx_input(ctx, n).is_null() || !gs_ctx_output(ctx, 5).is_null() } {
        return 99;
    }
    0
}

unsafe extern "C" fn failing_kernel(ctx: *mut gs_kernel_ctx, _user: *mut c_void) -> i32 {
    // SAFETY: the context this kernel received, on its thread, while it runs; a static C string.
    unsafe { gs_ctx_set_error(ctx, c"bad shape".as_ptr()) };
    7
}

unsafe extern "C" fn dynamic_kernel(ctx: *mut gs_kernel_ctx, _user: *mut c_void) -> i32 {
    let mut t: *mut Tensor = null_mut();
    // SAFETY: the context this kernel received, on its thread, while it runs; `t` is writable.
    let first = unsafe { gs_ctx_alloc_output(ctx, 0, 48, &mut t) };
    // SAFETY: `ctx` as above; a NULL `out` is allowed.
    let again = unsafe { gs_ctx_alloc_output(ctx, 0, 48, null_mut()) };
    if first != gs_status::GS_OK || again != gs_status::GS_ERR_INVALID_ARGUMENT || t.is_null() {
        return 1;
    }
    // SAFETY: 48 bytes were just allocated.
    unsafe { std::ptr::write_bytes((*t).data as *mut u8, 3, 48) };
    0
}

fn desc(name: &CStr, kernel: gs_kernel_fn, inputs: &[ValueRef], sizes: &[usize], user: usize) -> gs_node_desc {
    gs_node_desc {
        name: name.as_ptr(),
        op_type: c"Op".as_ptr(),
        kernel,
        user_data: user as *mut c_void,
        inputs: inputs.as_ptr(),
        num_inputs: inputs.len() as u32,
        num_outputs: sizes.len() as u32,
        output_sizes: sizes.as_ptr(),
        estimated_ns: 0,
        flags: 0,
        in_place_output: 0,
        in_place_input: 0,
    }
}

fn new_graph() -> *mut gs_graph {
    let mut g = null_mut();
    // SAFETY: `g` is writable.
    assert_eq!(unsafe { gs_graph_new(&mut g) }, gs_status::GS_OK);
    g
}

fn new_pool() -> *mut gs_pool {
    let mut p = null_mut();
    // SAFETY: NULL config means defaults; `p` is writable.
    assert_eq!(unsafe { gs_pool_new(null(), &mut p) }, gs_status::GS_OK);
    p
}

fn live_bytes(p: *mut gs_pool) -> u64 {
    let mut s = PoolStats::default();
    // SAFETY: `s` is writable; the caller's pool is freed by no other thread.
    assert_eq!(unsafe { gs_pool_get_stats(p, &mut s) }, gs_status::GS_OK);
    s.live_bytes
}

#[test]
fn a_graph_runs_end_to_end_through_the_c_abi() {
    let g = new_graph();
    let mut x = ValueRef::new(0, 0);
    // SAFETY: (whole test) arguments are valid pointers to live locals.
    unsafe {
        assert_eq!(gs_graph_add_input(g, c"x".as_ptr(), 32, &mut x), gs_status::GS_OK);
        let mut a = 0;
        assert_eq!(
            gs_graph_add_node(g, &desc(c"a", Some(fill_kernel), &[], &[32], 5), &mut a),
            gs_status::GS_OK
        );
        let ins = [x, ValueRef::new(a, 0), ValueRef::new(a, 0)];
        let mut sum = 0;
        assert_eq!(
            gs_graph_add_node(g, &desc(c"sum", Some(add_kernel), &ins, &[32], 0), &mut sum),
            gs_status::GS_OK
        );
        let mut dy = 0;
        assert_eq!(
            gs_graph_add_node(
                g,
                &desc(c"dyn", Some(dynamic_kernel), &[], &[GS_SIZE_DYNAMIC], 0),
                &mut dy
            ),
            gs_status::GS_OK
        );
        assert_eq!(gs_graph_mark_output(g, ValueRef::new(sum, 0)), gs_status::GS_OK);
        assert_eq!(gs_graph_mark_output(g, ValueRef::new(dy, 0)), gs_status::GS_OK);
        assert_eq!(gs_graph_finalize(g), gs_status::GS_OK);

        let mut info = GraphInfo::default();
        assert_eq!(gs_graph_get_info(g, &mut info), gs_status::GS_OK);
        assert_eq!(
            (info.num_nodes, info.num_inputs, info.num_outputs, info.num_edges),
            (4, 1, 2, 3)
        );
        let mut len = 0usize;
        assert_eq!(gs_graph_topological_order(g, null_mut(), 0, &mut len), gs_status::GS_OK);
        let mut order = vec![0u32; len];
        assert_eq!(
            gs_graph_topological_order(g, order.as_mut_ptr(), order.len(), &mut len),
            gs_status::GS_OK
        );
        assert_eq!(order, [0, 1, 2, 3]);
        let mut cp = [0u32; 8];
        assert_eq!(
            gs_graph_critical_path(g, cp.as_mut_ptr(), cp.len(), &mut len),
            gs_status::GS_OK
        );
        assert_eq!(&cp[..len], &[a, sum]);
        assert_eq!(CStr::from_ptr(gs_graph_node_name(g, sum)).to_str().unwrap(), "sum");
        let mut found = 0;
        assert_eq!(gs_graph_find_node(g, c"dyn".as_ptr(), &mut found), gs_status::GS_OK);
        assert_eq!(found, dy);

        let pool = new_pool();
        let input = graphsched::Tensor::new(Box::into_raw(Box::new([1u128; 2])) as *mut c_void, 32);
        let bind = [gs_input_binding {
            value: x,
            tensor: input,
        }];
        let opts = gs_run_options {
            inputs: bind.as_ptr(),
            num_inputs: 1,
            ..Default::default()
        };
        let mut r = null_mut();
        assert_eq!(gs_run(g, pool, &opts, &mut r), gs_status::GS_OK, "{}", last_error());
        let mut t = Tensor::empty();
        assert_eq!(gs_result_output(r, ValueRef::new(sum, 0), &mut t), gs_status::GS_OK);
        let bytes = std::slice::from_raw_parts(t.data as *const u8, t.nbytes);
        // Input bytes of 1u128 are [1, 0, 0, ...]: byte 0 and 16 are 1, the rest 0; plus 5 + 5.
        assert_eq!(bytes[0], 11);
        assert_eq!(bytes[1], 10);
        assert_eq!(gs_result_output(r, ValueRef::new(dy, 0), &mut t), gs_status::GS_OK);
        assert_eq!((t.nbytes, *(t.data as *const u8)), (48, 3));
        let mut stats = RunStats::default();
        assert_eq!(gs_result_stats(r, &mut stats), gs_status::GS_OK);
        assert_eq!(stats.nodes_run, 3);
        // The graph can be freed before its result.
        gs_graph_free(g);
        gs_result_free(r);
        assert_eq!(live_bytes(pool), 0);
        gs_pool_free(pool);
        drop(Box::from_raw(input.data as *mut [u128; 2]));
    }
}

/// Each misuse gets its own status and a message naming the culprit; together they produce
/// every status the header declares (GS_ERR_PANIC: see the guard's unit test, since a C caller
/// cannot make graphsched panic on purpose).
#[test]
fn every_status_is_produced_by_some_misuse() {
    use gs_status::*;
    let mut seen = BTreeSet::new();
    let mut garbage = [0u64; 8];
    let fake_graph = garbage.as_mut_ptr() as *mut gs_graph;
    // SAFETY: (whole test) every pointer passed is NULL, a live local, or a registered handle
    // (or garbage the registry rejects before any dereference).
    unsafe {
        let mut g = null_mut();
        expect(&mut seen, gs_graph_new(&mut g), GS_OK, "");
        expect(&mut seen, gs_graph_new(null_mut()), GS_ERR_NULL_ARGUMENT, "'out'");
        expect(
            &mut seen,
            gs_graph_add_input(null_mut(), c"x".as_ptr(), 8, null_mut()),
            GS_ERR_NULL_ARGUMENT,
            "'graph'",
        );
        expect(
            &mut seen,
            gs_graph_add_input(fake_graph, c"x".as_ptr(), 8, null_mut()),
            GS_ERR_INVALID_HANDLE,
            "not a live gs_graph",
        );
        let pool = new_pool();
        expect(
            &mut seen,
            gs_graph_finalize(pool as *mut gs_graph),
            GS_ERR_INVALID_HANDLE,
            "'graph'",
        );
        expect(
            &mut seen,
            gs_graph_add_node(g, null(), null_mut()),
            GS_ERR_NULL_ARGUMENT,
            "'desc'",
        );
        expect(
            &mut seen,
            gs_graph_add_node(g, &desc(c"k", None, &[], &[8], 0), null_mut()),
            GS_ERR_NULL_ARGUMENT,
            "'k'",
        );
        let bad_utf8 = [0xffu8, 0xfe, 0];
        let mut d = desc(c"x", Some(fill_kernel), &[], &[8], 0);
        d.name = bad_utf8.as_ptr() as *const _;
        expect(
            &mut seen,
            gs_graph_add_node(g, &d, null_mut()),
            GS_ERR_INVALID_ARGUMENT,
            "UTF-8",
        );
        let mut d = desc(c"flags", Some(fill_kernel), &[], &[8], 0);
        d.flags = 0x80;
        expect(
            &mut seen,
            gs_graph_add_node(g, &d, null_mut()),
            GS_ERR_INVALID_ARGUMENT,
            "flag",
        );
        let mut d = desc(c"many", Some(fill_kernel), &[], &[8], 0);
        d.num_inputs = 1 << 20;
        expect(
            &mut seen,
            gs_graph_add_node(g, &d, null_mut()),
            GS_ERR_INVALID_ARGUMENT,
            "desc.inputs",
        );
        expect(
            &mut seen,
            gs_graph_add_node(g, &desc(c"", Some(fill_kernel), &[], &[8], 0), null_mut()),
            GS_ERR_EMPTY_NAME,
            "empty",
        );
        expect(
            &mut seen,
            gs_graph_add_node(g, &desc(c"a", Some(fill_kernel), &[], &[8], 0), null_mut()),
            GS_OK,
            "",
        );
        expect(
            &mut seen,
            gs_graph_add_node(g, &desc(c"a", Some(fill_kernel), &[], &[8], 0), null_mut()),
            GS_ERR_DUPLICATE_NAME,
            "'a'",
        );
        expect(
            &mut seen,
            gs_graph_add_node(
                g,
                &desc(c"big", Some(fill_kernel), &[], &[usize::MAX - 1], 0),
                null_mut(),
            ),
            GS_ERR_SIZE_OVERFLOW,
            "'big'",
        );
        expect(
            &mut seen,
            gs_graph_add_node(g, &desc(c"none", Some(fill_kernel), &[], &[], 0), null_mut()),
            GS_ERR_INVALID_ARGUMENT,
            "'none'",
        );
        // Node 1 reads node 9, which does not exist yet.
        expect(
            &mut seen,
            gs_graph_add_node(
                g,
                &desc(c"reader", Some(add_kernel), &[ValueRef::new(9, 0)], &[8], 0),
                null_mut(),
            ),
            GS_OK,
            "",
        );
        let mut r = null_mut();
        expect(
            &mut seen,
            gs_run(g, pool, null(), &mut r),
            GS_ERR_NOT_FINALIZED,
            "not finalized",
        );
        let mut info = GraphInfo::default();
        expect(
            &mut seen,
            gs_graph_get_info(g, &mut info),
            GS_ERR_NOT_FINALIZED,
            "finalize",
        );
        expect(&mut seen, gs_graph_finalize(g), GS_ERR_UNKNOWN_VALUE, "'reader'");
        // Nodes 2..=8 fill the gap; node 9 reads output 4 of "a"; node 10 and 11 form a cycle.
        for i in 2..=8 {
            let name = std::ffi::CString::new(format!("pad{i}")).unwrap();
            expect(
                &mut seen,
                gs_graph_add_node(g, &desc(&name, Some(fill_kernel), &[], &[8], 0), null_mut()),
                GS_OK,
                "",
            );
        }
        expect(
            &mut seen,
            gs_graph_add_node(
                g,
                &desc(c"nine", Some(add_kernel), &[ValueRef::new(0, 4)], &[8], 0),
                null_mut(),
            ),
            GS_OK,
            "",
        );
        expect(
            &mut seen,
            gs_graph_finalize(g),
            GS_ERR_OUTPUT_INDEX,
            "output 4 of node 'a'",
        );
        gs_graph_free(g);
        // A freed handle is rejected, not dereferenced.
        expect(&mut seen, gs_graph_finalize(g), GS_ERR_INVALID_HANDLE, "freed");
        gs_graph_free(g); // twice: harmless
        gs_graph_free(fake_graph); // garbage: harmless
        gs_graph_free(null_mut());

        let g = new_graph();
        expect(
            &mut seen,
            gs_graph_add_node(
                g,
                &desc(c"p", Some(add_kernel), &[ValueRef::new(1, 0)], &[8], 0),
                null_mut(),
            ),
            GS_OK,
            "",
        );
        expect(
            &mut seen,
            gs_graph_add_node(
                g,
                &desc(c"q", Some(add_kernel), &[ValueRef::new(0, 0)], &[8], 0),
                null_mut(),
            ),
            GS_OK,
            "",
        );
        expect(&mut seen, gs_graph_finalize(g), GS_ERR_CYCLE, "'p' -> 'q' -> 'p'");
        gs_graph_free(g);

        // A runnable graph: input x -> fail (fails on demand) ; "ok" is the graph output.
        let g = new_graph();
        let mut x = ValueRef::new(0, 0);
        expect(&mut seen, gs_graph_add_input(g, c"x".as_ptr(), 16, &mut x), GS_OK, "");
        let mut ok = 0;
        expect(
            &mut seen,
            gs_graph_add_node(g, &desc(c"ok", Some(add_kernel), &[x], &[16], 0), &mut ok),
            GS_OK,
            "",
        );
        let mut fail = 0;
        expect(
            &mut seen,
            gs_graph_add_node(
                g,
                &desc(c"fail", Some(failing_kernel), &[ValueRef::new(ok, 0)], &[16], 0),
                &mut fail,
            ),
            GS_OK,
            "",
        );
        expect(&mut seen, gs_graph_mark_output(g, ValueRef::new(ok, 0)), GS_OK, "");
        expect(&mut seen, gs_graph_finalize(g), GS_OK, "");
        expect(&mut seen, gs_graph_finalize(g), GS_ERR_FINALIZED, "finalized");
        expect(
            &mut seen,
            gs_graph_add_input(g, c"late".as_ptr(), 8, null_mut()),
            GS_ERR_FINALIZED,
            "finalized",
        );
        let mut name_out = 0;
        expect(
            &mut seen,
            gs_graph_find_node(g, c"nobody".as_ptr(), &mut name_out),
            GS_ERR_UNKNOWN_VALUE,
            "'nobody'",
        );
        assert!(gs_graph_node_name(g, 77).is_null());
        let mut len = 0;
        expect(
            &mut seen,
            gs_graph_critical_path(g, null_mut(), 4, &mut len),
            GS_ERR_NULL_ARGUMENT,
            "'nodes'",
        );

        expect(&mut seen, gs_run(g, pool, null(), &mut r), GS_ERR_INPUT_BINDING, "'x'");
        let buf = Box::into_raw(Box::new([7u128; 1]));
        let bind = [gs_input_binding {
            value: x,
            tensor: Tensor::new(buf as *mut c_void, 16),
        }];
        let opts = gs_run_options {
            inputs: bind.as_ptr(),
            num_inputs: 1,
            ..Default::default()
        };
        expect(
            &mut seen,
            gs_run(g, pool, &opts, &mut r),
            GS_ERR_KERNEL_FAILED,
            "'fail'",
        );
        assert!(last_error().contains("bad shape"));
        assert_eq!(live_bytes(pool), 0);
        expect(
            &mut seen,
            gs_run(g, pool, &opts, null_mut()),
            GS_ERR_NULL_ARGUMENT,
            "'out'",
        );
        let bad_opts = gs_run_options {
            inputs: null(),
            num_inputs: 1,
            ..Default::default()
        };
        expect(
            &mut seen,
            gs_run(g, pool, &bad_opts, &mut r),
            GS_ERR_NULL_ARGUMENT,
            "options.inputs",
        );
        drop(Box::from_raw(buf));

        // Pool misuse.
        let mut other = null_mut();
        let bad = PoolConfig {
            large_threshold_bytes: 1 << 30,
            ..Default::default()
        };
        expect(
            &mut seen,
            gs_pool_new(&bad, &mut other),
            GS_ERR_INVALID_ARGUMENT,
            "large_threshold_bytes",
        );
        assert!(other.is_null(), "a failed gs_pool_new leaves *out alone");
        let mut p: *mut c_void = null_mut();
        expect(
            &mut seen,
            gs_pool_acquire(pool, 0, &mut p),
            GS_ERR_INVALID_ARGUMENT,
            "0 bytes",
        );
        expect(
            &mut seen,
            gs_pool_acquire(pool, 1 << 62, &mut p),
            GS_ERR_OUT_OF_MEMORY,
            "refused",
        );
        expect(
            &mut seen,
            gs_pool_acquire(pool, usize::MAX, &mut p),
            GS_ERR_SIZE_OVERFLOW,
            "cannot acquire",
        );
        expect(
            &mut seen,
            gs_pool_acquire(pool, 100, null_mut()),
            GS_ERR_NULL_ARGUMENT,
            "'out'",
        );
        expect(&mut seen, gs_pool_acquire(pool, 100, &mut p), GS_OK, "");
        assert_eq!(p as usize % 16, 0);
        expect(&mut seen, gs_pool_release(pool, p), GS_OK, "");
        expect(
            &mut seen,
            gs_pool_release(pool, p),
            GS_ERR_UNKNOWN_POINTER,
            "already released",
        );
        expect(
            &mut seen,
            gs_pool_release(pool, garbage.as_mut_ptr() as *mut c_void),
            GS_ERR_UNKNOWN_POINTER,
            "not handed out",
        );
        expect(
            &mut seen,
            gs_pool_release(pool, null_mut()),
            GS_ERR_NULL_ARGUMENT,
            "'ptr'",
        );
        expect(
            &mut seen,
            gs_pool_trim(fake_graph as *mut gs_pool),
            GS_ERR_INVALID_HANDLE,
            "gs_pool",
        );
        expect(&mut seen, gs_pool_reset_peaks(pool), GS_OK, "");
        expect(
            &mut seen,
            gs_pool_get_stats(pool, null_mut()),
            GS_ERR_NULL_ARGUMENT,
            "'out'",
        );

        // Reading results: a value that is not a graph output, and one that does not exist.
        let never_fail = new_graph();
        expect(
            &mut seen,
            gs_graph_add_node(never_fail, &desc(c"one", Some(fill_kernel), &[], &[8], 1), null_mut()),
            GS_OK,
            "",
        );
        expect(
            &mut seen,
            gs_graph_add_node(never_fail, &desc(c"two", Some(fill_kernel), &[], &[8], 2), null_mut()),
            GS_OK,
            "",
        );
        expect(
            &mut seen,
            gs_graph_mark_output(never_fail, ValueRef::new(0, 0)),
            GS_OK,
            "",
        );
        expect(&mut seen, gs_graph_finalize(never_fail), GS_OK, "");
        let mut token = null_mut();
        expect(&mut seen, gs_cancel_token_new(&mut token), GS_OK, "");
        assert_eq!(gs_cancel_token_cancel(token), 1, "the first cancel cancels");
        assert_eq!(gs_cancel_token_cancel(token), 0, "later ones report it was done");
        let cancelled = gs_run_options {
            cancel: token,
            ..Default::default()
        };
        expect(
            &mut seen,
            gs_run(never_fail, pool, &cancelled, &mut r),
            GS_ERR_CANCELLED,
            "cancelled",
        );
        gs_cancel_token_free(token);
        assert_eq!(gs_cancel_token_cancel(token), -1, "a freed token is refused");
        let hurried = gs_run_options {
            timeout_ns: 1,
            ..Default::default()
        };
        expect(
            &mut seen,
            gs_run(never_fail, pool, &hurried, &mut r),
            GS_ERR_DEADLINE,
            "deadline",
        );
        assert_eq!(live_bytes(pool), 0);
        let mut plan = null_mut();
        expect(
            &mut seen,
            gs_plan_new(never_fail, 7, &mut plan),
            GS_ERR_INVALID_ARGUMENT,
            "mode",
        );
        expect(
            &mut seen,
            gs_plan_new(never_fail, GS_PLAN_PARALLEL_SAFE, &mut plan),
            GS_OK,
            "",
        );
        let (mut arena, mut bound) = (0u64, 0u64);
        expect(&mut seen, gs_plan_bytes(plan, &mut arena, &mut bound), GS_OK, "");
        assert_eq!(
            (arena, bound),
            (32, 16),
            "two 8-byte values that may overlap in time, 16-byte aligned"
        );
        let planned = gs_run_options {
            plan,
            ..Default::default()
        };
        expect(&mut seen, gs_run(never_fail, pool, &planned, &mut r), GS_OK, "");
        let mut planned_out = Tensor::empty();
        expect(
            &mut seen,
            gs_result_output(r, ValueRef::new(0, 0), &mut planned_out),
            GS_OK,
            "",
        );
        assert_eq!(std::slice::from_raw_parts(planned_out.data as *const u8, 8), &[1u8; 8]);
        gs_result_free(r);
        gs_plan_free(plan);
        expect(
            &mut seen,
            gs_run(never_fail, pool, &planned, &mut r),
            GS_ERR_INVALID_HANDLE,
            "'options.plan'",
        );
        gs_plan_free(null_mut());
        let tight = gs_run_options {
            memory_limit_bytes: 4,
            ..Default::default()
        };
        expect(
            &mut seen,
            gs_run(never_fail, pool, &tight, &mut r),
            GS_ERR_MEMORY_LIMIT,
            "'one'",
        );
        let bad_policy = gs_run_options {
            policy: 9,
            ..Default::default()
        };
        expect(
            &mut seen,
            gs_run(never_fail, pool, &bad_policy, &mut r),
            GS_ERR_INVALID_ARGUMENT,
            "policy",
        );
        let garbage_executor = gs_run_options {
            executor: garbage.as_mut_ptr() as *mut gs_executor,
            ..Default::default()
        };
        expect(
            &mut seen,
            gs_run(never_fail, pool, &garbage_executor, &mut r),
            GS_ERR_INVALID_HANDLE,
            "'options.executor'",
        );
        let mut sim = graphsched::sim::SimResult::default();
        let zero_threads = gs_sim_options::default();
        expect(
            &mut seen,
            gs_simulate(never_fail, &zero_threads, &mut sim),
            GS_ERR_INVALID_ARGUMENT,
            "threads",
        );
        expect(&mut seen, gs_run(never_fail, pool, null(), &mut r), GS_OK, "");
        expect(
            &mut seen,
            gs_result_write_trace(r, c"/tmp/untraced.json".as_ptr()),
            GS_ERR_INVALID_ARGUMENT,
            "not traced",
        );
        gs_result_free(r);
        let traced = gs_run_options {
            flags: GS_RUN_TRACE,
            ..Default::default()
        };
        expect(&mut seen, gs_run(never_fail, pool, &traced, &mut r), GS_OK, "");
        expect(
            &mut seen,
            gs_result_write_trace(r, c"/nonexistent-dir/trace.json".as_ptr()),
            GS_ERR_IO,
            "/nonexistent-dir/trace.json",
        );
        let path = std::env::temp_dir().join(format!("graphsched-ffi-trace-{}.json", std::process::id()));
        let cpath = std::ffi::CString::new(path.to_str().unwrap()).unwrap();
        expect(&mut seen, gs_result_write_trace(r, cpath.as_ptr()), GS_OK, "");
        let written = std::fs::read_to_string(&path).unwrap();
        assert!(written.contains("\"name\":\"one\"") && written.contains("traceEvents"));
        let _ = std::fs::remove_file(&path);
        let mut t = Tensor::empty();
        expect(
            &mut seen,
            gs_result_output(r, ValueRef::new(1, 0), &mut t),
            GS_ERR_NOT_AN_OUTPUT,
            "'two'",
        );
        expect(
            &mut seen,
            gs_result_output(r, ValueRef::new(5, 0), &mut t),
            GS_ERR_UNKNOWN_VALUE,
            "(5, 0)",
        );
        expect(
            &mut seen,
            gs_result_stats(r as *const gs_run_result, null_mut()),
            GS_ERR_NULL_ARGUMENT,
            "'out'",
        );
        gs_result_free(r);
        expect(
            &mut seen,
            gs_result_output(r, ValueRef::new(0, 0), &mut t),
            GS_ERR_INVALID_HANDLE,
            "gs_run_result",
        );
        gs_result_free(null_mut());
        gs_graph_free(never_fail);
        gs_graph_free(g);
        assert_eq!(live_bytes(pool), 0);
        gs_pool_free(pool);
        gs_pool_free(null_mut());
    }
    let all: BTreeSet<i32> = (0..=16).chain(18..=21).collect();
    assert_eq!(seen, all, "statuses produced through the C ABI");
    assert_eq!(
        // SAFETY: static string.
        unsafe { CStr::from_ptr(gs_status_name(gs_status::GS_ERR_PANIC as i32)) }
            .to_str()
            .unwrap(),
        "GS_ERR_PANIC"
    );
}

#[test]
fn a_freed_handle_stays_invalid_after_its_memory_is_reused() {
    let first = new_graph();
    // SAFETY: (whole test) the handles are this thread's alone; a freed one is rejected by the
    // registry before any dereference.
    unsafe {
        gs_graph_free(first);
        let handles: Vec<*mut gs_graph> = (0..64).map(|_| new_graph()).collect();
        assert!(!handles.contains(&first), "handles are never reused");
        assert_eq!(gs_graph_finalize(first), gs_status::GS_ERR_INVALID_HANDLE);
        for h in handles {
            gs_graph_free(h);
        }
    }
}

#[test]
fn kernel_context_rejects_bad_pointers() {
    // SAFETY: (whole block) contexts are NULL, or a readable zeroed array whose tag the check
    // rejects before anything else is read; the pool is NULL and `p` is writable.
    unsafe {
        assert_eq!(gs_ctx_num_inputs(null()), 0);
        assert!(gs_ctx_input(null(), 0).is_null());
        assert!(last_error().contains("'ctx' is NULL"));
        let garbage = [0u64; 4];
        assert!(gs_ctx_output(garbage.as_ptr() as *mut gs_kernel_ctx, 0).is_null());
        assert!(last_error().contains("not the context of a running kernel"));
        assert_eq!(
            // NULL output pointer is allowed; the context is rejected first.
            gs_ctx_alloc_output(null_mut(), 0, 8, null_mut()),
            gs_status::GS_ERR_NULL_ARGUMENT
        );
        assert!(gs_ctx_node_name(null()).is_null());
        assert_eq!(gs_ctx_num_outputs(garbage.as_ptr() as *const gs_kernel_ctx), 0);
        assert_eq!(gs_ctx_output_in_place(null(), 0), 0);
        let mut p: *mut c_void = null_mut();
        assert_eq!(
            gs_pool_acquire_zeroed(null_mut(), 64, &mut p),
            gs_status::GS_ERR_NULL_ARGUMENT
        );
        assert!(p.is_null());
    }
    // The only call that cannot be misused: it agrees with the header's number.
    assert_eq!(gs_version_number(), GS_VERSION_NUMBER);
}
