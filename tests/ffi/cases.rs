//! The cases, one table per API area (see `spec!` in `tests/ffi.rs` for the row forms). Each area
//! makes its own graphs and pool, so it runs alone as `area::<name>`.

use std::ffi::{c_void, CString};
use std::ptr::{null, null_mut};
use std::sync::atomic::{AtomicUsize, Ordering};

use graphsched::ffi::*;
use graphsched::{GraphInfo, PoolConfig, Tensor, ValueRef};

use super::{add_kernel, desc, failing_kernel, fill_kernel, last_error, live_bytes, new_graph, new_pool, Spec};

/// Input `x` (16 bytes) -> "ok" (adds its inputs; the graph output) -> "fail" (fails with
/// "bad shape"), finalized.
fn runnable_graph(s: &mut Spec) -> (*mut gs_graph, ValueRef) {
    let (g, mut x, mut ok, mut fail) = (new_graph(), ValueRef::new(0, 0), 0, 0);
    spec! { s;
        "an input 'x' of 16 bytes": gs_graph_add_input(g, c"x".as_ptr(), 16, &mut x) => GS_OK, "";
        "'ok' adds up 'x'": gs_graph_add_node(g, &desc(c"ok", Some(add_kernel), &[x], &[16], 0), &mut ok) => GS_OK, "";
        "'fail' reads 'ok' and fails":
            gs_graph_add_node(g, &desc(c"fail", Some(failing_kernel), &[ValueRef::new(ok, 0)], &[16], 0), &mut fail)
            => GS_OK, "";
        "'ok' is the graph output": gs_graph_mark_output(g, ValueRef::new(ok, 0)) => GS_OK, "";
        "the graph finalizes": gs_graph_finalize(g) => GS_OK, "";
    }
    (g, x)
}

/// "one" fills its 8 bytes with 1 (the graph output), "two" with 2; no inputs, finalized.
fn two_fills_graph(s: &mut Spec) -> *mut gs_graph {
    let g = new_graph();
    spec! { s;
        "'one' fills with 1": gs_graph_add_node(g, &desc(c"one", Some(fill_kernel), &[], &[8], 1), null_mut()) => GS_OK, "";
        "'two' fills with 2": gs_graph_add_node(g, &desc(c"two", Some(fill_kernel), &[], &[8], 2), null_mut()) => GS_OK, "";
        "'one' is the graph output": gs_graph_mark_output(g, ValueRef::new(0, 0)) => GS_OK, "";
        "the graph finalizes": gs_graph_finalize(g) => GS_OK, "";
    }
    g
}

/// Checks that every buffer went back to the pool, then frees the graphs and the pool.
fn finish(s: &mut Spec, graphs: &[*mut gs_graph], pool: *mut gs_pool) {
    spec! { s; "every buffer went back to the pool": live_bytes(pool) => is 0; }
    for &g in graphs {
        spec! { s; "the graph is freed": gs_graph_free(g) => returns (), ""; }
    }
    spec! { s;
        "the pool is freed": gs_pool_free(pool) => returns (), "";
        "freeing a NULL pool does nothing": gs_pool_free(null_mut()) => returns (), "";
    }
}

pub(super) fn graph_building(s: &mut Spec) {
    let mut garbage = [0u64; 8];
    let fake = garbage.as_mut_ptr() as *mut gs_graph;
    let mut g = null_mut();
    let bad_utf8 = [0xffu8, 0xfe, 0];
    let mut bad_name = desc(c"x", Some(fill_kernel), &[], &[8], 0);
    bad_name.name = bad_utf8.as_ptr() as *const _;
    let mut bad_flags = desc(c"flags", Some(fill_kernel), &[], &[8], 0);
    bad_flags.flags = 0x80;
    let mut too_many = desc(c"many", Some(fill_kernel), &[], &[8], 0);
    too_many.num_inputs = 1 << 20;
    spec! { s;
        "a new graph": gs_graph_new(&mut g) => GS_OK, "";
        "a NULL out for the new graph": gs_graph_new(null_mut()) => GS_ERR_NULL_ARGUMENT, "'out'";
        "a NULL graph": gs_graph_add_input(null_mut(), c"x".as_ptr(), 8, null_mut()) => GS_ERR_NULL_ARGUMENT, "'graph'";
        "a graph handle that is garbage":
            gs_graph_add_input(fake, c"x".as_ptr(), 8, null_mut()) => GS_ERR_INVALID_HANDLE, "not a live gs_graph";
        "an output of a NULL graph": gs_graph_mark_output(null_mut(), ValueRef::new(0, 0)) => GS_ERR_NULL_ARGUMENT, "'graph'";
        "the info of a NULL graph": gs_graph_get_info(null(), &mut GraphInfo::default()) => GS_ERR_NULL_ARGUMENT, "'graph'";
        "a NULL node description": gs_graph_add_node(g, null(), null_mut()) => GS_ERR_NULL_ARGUMENT, "'desc'";
        "a node without a kernel":
            gs_graph_add_node(g, &desc(c"k", None, &[], &[8], 0), null_mut()) => GS_ERR_NULL_ARGUMENT, "'k'";
        "a node name that is not UTF-8": gs_graph_add_node(g, &bad_name, null_mut()) => GS_ERR_INVALID_ARGUMENT, "UTF-8";
        "an unknown node flag": gs_graph_add_node(g, &bad_flags, null_mut()) => GS_ERR_INVALID_ARGUMENT, "flag";
        "more inputs than a node may have":
            gs_graph_add_node(g, &too_many, null_mut()) => GS_ERR_INVALID_ARGUMENT, "desc.inputs";
        "and the message names the node": super::last_error().starts_with("node 'many': ") => is true;
        "an empty node name":
            gs_graph_add_node(g, &desc(c"", Some(fill_kernel), &[], &[8], 0), null_mut()) => GS_ERR_EMPTY_NAME, "empty";
        "a node named 'a'": gs_graph_add_node(g, &desc(c"a", Some(fill_kernel), &[], &[8], 0), null_mut()) => GS_OK, "";
        "a second node named 'a'":
            gs_graph_add_node(g, &desc(c"a", Some(fill_kernel), &[], &[8], 0), null_mut()) => GS_ERR_DUPLICATE_NAME, "'a'";
        "an output size that overflows":
            gs_graph_add_node(g, &desc(c"big", Some(fill_kernel), &[], &[usize::MAX - 1], 0), null_mut())
            => GS_ERR_SIZE_OVERFLOW, "'big'";
        "a node without outputs":
            gs_graph_add_node(g, &desc(c"none", Some(fill_kernel), &[], &[], 0), null_mut())
            => GS_ERR_INVALID_ARGUMENT, "'none'";
        "the graph is freed": gs_graph_free(g) => returns (), "";
    }
}

pub(super) fn finalize(s: &mut Spec) {
    let mut garbage = [0u64; 8];
    let fake = garbage.as_mut_ptr() as *mut gs_graph;
    let (pool, g, mut r, mut info) = (new_pool(), new_graph(), null_mut(), GraphInfo::default());
    spec! { s;
        "a graph handle that is a pool": gs_graph_finalize(pool as *mut gs_graph) => GS_ERR_INVALID_HANDLE, "'graph'";
        "node 0, 'a', has one output":
            gs_graph_add_node(g, &desc(c"a", Some(fill_kernel), &[], &[8], 0), null_mut()) => GS_OK, "";
        "node 1, 'reader', may read node 9 before it exists":
            gs_graph_add_node(g, &desc(c"reader", Some(add_kernel), &[ValueRef::new(9, 0)], &[8], 0), null_mut())
            => GS_OK, "";
        "running a graph not finalized": gs_run(g, pool, null(), &mut r) => GS_ERR_NOT_FINALIZED, "not finalized";
        "the info of a graph not finalized": gs_graph_get_info(g, &mut info) => GS_ERR_NOT_FINALIZED, "finalize";
        "a read of node 9, which never came": gs_graph_finalize(g) => GS_ERR_UNKNOWN_VALUE, "'reader'";
    }
    for i in 2..=8 {
        let name = CString::new(format!("pad{i}")).unwrap();
        spec! { s;
            "nodes 2..=8 fill the gap":
                gs_graph_add_node(g, &desc(&name, Some(fill_kernel), &[], &[8], 0), null_mut()) => GS_OK, "";
        }
    }
    spec! { s;
        "node 9 reads output 4 of 'a'":
            gs_graph_add_node(g, &desc(c"nine", Some(add_kernel), &[ValueRef::new(0, 4)], &[8], 0), null_mut())
            => GS_OK, "";
        "an output index a node does not have": gs_graph_finalize(g) => GS_ERR_OUTPUT_INDEX, "output 4 of node 'a'";
        "the graph is freed": gs_graph_free(g) => returns (), "";
        "a freed graph is rejected, not dereferenced": gs_graph_finalize(g) => GS_ERR_INVALID_HANDLE, "freed";
        "freeing it twice does nothing": gs_graph_free(g) => returns (), "";
        "freeing garbage does nothing": gs_graph_free(fake) => returns (), "";
        "freeing NULL does nothing": gs_graph_free(null_mut()) => returns (), "";
    }
    let cyclic = new_graph();
    spec! { s;
        "'p' reads 'q'":
            gs_graph_add_node(cyclic, &desc(c"p", Some(add_kernel), &[ValueRef::new(1, 0)], &[8], 0), null_mut())
            => GS_OK, "";
        "'q' reads 'p'":
            gs_graph_add_node(cyclic, &desc(c"q", Some(add_kernel), &[ValueRef::new(0, 0)], &[8], 0), null_mut())
            => GS_OK, "";
        "a cycle, named node by node": gs_graph_finalize(cyclic) => GS_ERR_CYCLE, "'p' -> 'q' -> 'p'";
    }
    let (g, _) = runnable_graph(s);
    let (mut found, mut len) = (0, 0);
    spec! { s;
        "finalizing twice": gs_graph_finalize(g) => GS_ERR_FINALIZED, "finalized";
        "an input added after finalize": gs_graph_add_input(g, c"late".as_ptr(), 8, null_mut()) => GS_ERR_FINALIZED, "finalized";
        "an output marked after finalize": gs_graph_mark_output(g, ValueRef::new(0, 0)) => GS_ERR_FINALIZED, "finalized";
        "a name no node has": gs_graph_find_node(g, c"nobody".as_ptr(), &mut found) => GS_ERR_UNKNOWN_VALUE, "'nobody'";
        "a node that does not exist has no name": gs_graph_node_name(g, 77).is_null() => returns true, "77";
        "a critical path into NULL with room for 4":
            gs_graph_critical_path(g, null_mut(), 4, &mut len) => GS_ERR_NULL_ARGUMENT, "'nodes'";
        "a topological order into NULL with room for 4":
            gs_graph_topological_order(g, null_mut(), 4, &mut len) => GS_ERR_NULL_ARGUMENT, "'nodes'";
    }
    finish(s, &[cyclic, g], pool);
}

pub(super) fn runs_and_bindings(s: &mut Spec) {
    let (pool, mut r) = (new_pool(), null_mut());
    let (g, x) = runnable_graph(s);
    let mut buf = [7u128; 1];
    let bind = [gs_input_binding {
        value: x,
        tensor: Tensor::new(buf.as_mut_ptr() as *mut c_void, 16),
    }];
    let opts = gs_run_options {
        inputs: bind.as_ptr(),
        num_inputs: 1,
        ..Default::default()
    };
    let null_inputs = gs_run_options {
        inputs: null(),
        num_inputs: 1,
        ..Default::default()
    };
    spec! { s;
        "an input left unbound": gs_run(g, pool, null(), &mut r) => GS_ERR_INPUT_BINDING, "'x'";
        "a failing kernel fails the run, naming its node": gs_run(g, pool, &opts, &mut r) => GS_ERR_KERNEL_FAILED, "'fail'";
        "... with the kernel's own message": last_error().contains("bad shape") => is true;
        "a failed run gives every buffer back": live_bytes(pool) => is 0;
        "a NULL out for the result": gs_run(g, pool, &opts, null_mut()) => GS_ERR_NULL_ARGUMENT, "'out'";
        "NULL inputs with a count of 1": gs_run(g, pool, &null_inputs, &mut r) => GS_ERR_NULL_ARGUMENT, "options.inputs";
    }
    let fills = two_fills_graph(s);
    let hurried = gs_run_options {
        timeout_ns: 1,
        ..Default::default()
    };
    let tight = gs_run_options {
        memory_limit_bytes: 4,
        ..Default::default()
    };
    let bad_policy = gs_run_options {
        policy: 9,
        ..Default::default()
    };
    spec! { s;
        "a deadline of 1 ns": gs_run(fills, pool, &hurried, &mut r) => GS_ERR_DEADLINE, "deadline";
        "a run past its deadline gives every buffer back": live_bytes(pool) => is 0;
        "a memory limit below the first node's output": gs_run(fills, pool, &tight, &mut r) => GS_ERR_MEMORY_LIMIT, "'one'";
        "a policy that does not exist": gs_run(fills, pool, &bad_policy, &mut r) => GS_ERR_INVALID_ARGUMENT, "policy";
    }
    finish(s, &[g, fills], pool);
}

pub(super) fn results(s: &mut Spec) {
    static TRACES: AtomicUsize = AtomicUsize::new(0);
    let (pool, g, mut r, mut t) = (new_pool(), two_fills_graph(s), null_mut(), Tensor::empty());
    let traced = gs_run_options {
        flags: GS_RUN_TRACE,
        ..Default::default()
    };
    let untimed = gs_run_options {
        flags: GS_RUN_NO_WALL_TIME,
        ..Default::default()
    };
    let unknown_flag = gs_run_options {
        flags: GS_RUN_NO_WALL_TIME << 1,
        ..Default::default()
    };
    let n = TRACES.fetch_add(1, Ordering::Relaxed);
    let path = std::env::temp_dir().join(format!("graphsched-ffi-trace-{}-{n}.json", std::process::id()));
    let cpath = CString::new(path.to_str().unwrap()).unwrap();
    spec! { s;
        "an untraced run": gs_run(g, pool, null(), &mut r) => GS_OK, "";
        "an untraced run has no trace to write":
            gs_result_write_trace(r, c"/tmp/untraced.json".as_ptr()) => GS_ERR_INVALID_ARGUMENT, "not traced";
        "its result is freed": gs_result_free(r) => returns (), "";
        "a traced run": gs_run(g, pool, &traced, &mut r) => GS_OK, "";
        "a trace to a directory that does not exist, named in the message":
            gs_result_write_trace(r, c"/nonexistent-dir/trace.json".as_ptr()) => GS_ERR_IO, "/nonexistent-dir/trace.json";
        "a trace to a writable path": gs_result_write_trace(r, cpath.as_ptr()) => GS_OK, "";
        "the trace names the nodes in Chrome's format": {
            let written = std::fs::read_to_string(&path).unwrap();
            written.contains("\"name\":\"one\"") && written.contains("traceEvents")
        } => is true;
        "a value that is not a graph output":
            gs_result_output(r, ValueRef::new(1, 0), &mut t) => GS_ERR_NOT_AN_OUTPUT, "'two'";
        "the sentence names the C call that marks an output":
            gs_result_output(r, ValueRef::new(1, 0), &mut t) => GS_ERR_NOT_AN_OUTPUT, "gs_graph_mark_output";
        "a value that does not exist": gs_result_output(r, ValueRef::new(5, 0), &mut t) => GS_ERR_UNKNOWN_VALUE, "(5, 0)";
        "a NULL out for the stats":
            gs_result_stats(r as *const gs_run_result, null_mut()) => GS_ERR_NULL_ARGUMENT, "'out'";
        "the result is freed": gs_result_free(r) => returns (), "";
        "a freed result": gs_result_output(r, ValueRef::new(0, 0), &mut t) => GS_ERR_INVALID_HANDLE, "gs_run_result";
        "a run that reads no clock for its wall time": gs_run(g, pool, &untimed, &mut r) => GS_OK, "";
        "its outputs are there": gs_result_output(r, ValueRef::new(0, 0), &mut t) => GS_OK, "";
        "and its wall time reads 0": {
            let mut stats = graphsched::RunStats::default();
            // SAFETY: the result is live; `stats` is writable.
            let status = unsafe { gs_result_stats(r as *const gs_run_result, &mut stats) };
            status == gs_status::GS_OK && stats.wall_ns == 0 && stats.nodes_run == 2
        } => is true;
        "its result is freed too": gs_result_free(r) => returns (), "";
        "a flag bit that does not exist": gs_run(g, pool, &unknown_flag, &mut r) => GS_ERR_INVALID_ARGUMENT, "unknown bits 0x20";
        "freeing a NULL result does nothing": gs_result_free(null_mut()) => returns (), "";
    }
    let _ = std::fs::remove_file(&path);
    finish(s, &[g], pool);
}

pub(super) fn pools(s: &mut Spec) {
    let mut garbage = [0u64; 8];
    let fake = garbage.as_mut_ptr() as *mut gs_pool;
    let (pool, mut other, mut p, mut z) = (new_pool(), null_mut(), null_mut::<c_void>(), null_mut::<c_void>());
    let bad = PoolConfig {
        large_threshold_bytes: 1 << 30,
        ..Default::default()
    };
    spec! { s;
        "a large threshold over 64 KiB": gs_pool_new(&bad, &mut other) => GS_ERR_INVALID_ARGUMENT, "large_threshold_bytes";
        "a failed gs_pool_new leaves *out alone": other.is_null() => is true;
        "acquiring 0 bytes": gs_pool_acquire(pool, 0, &mut p) => GS_ERR_INVALID_ARGUMENT, "0 bytes";
        "acquiring 2^62 bytes": gs_pool_acquire(pool, 1 << 62, &mut p) => GS_ERR_OUT_OF_MEMORY, "refused";
        "acquiring usize::MAX bytes": gs_pool_acquire(pool, usize::MAX, &mut p) => GS_ERR_SIZE_OVERFLOW, "cannot acquire";
        "a NULL out for the buffer": gs_pool_acquire(pool, 100, null_mut()) => GS_ERR_NULL_ARGUMENT, "'out'";
        "acquiring 100 bytes": gs_pool_acquire(pool, 100, &mut p) => GS_OK, "";
        "buffers are 16-byte aligned": p as usize % 16 => is 0;
        "releasing them": gs_pool_release(pool, p) => GS_OK, "";
        "releasing them twice": gs_pool_release(pool, p) => GS_ERR_UNKNOWN_POINTER, "already released";
        "releasing a pointer the pool never handed out":
            gs_pool_release(pool, garbage.as_mut_ptr() as *mut c_void) => GS_ERR_UNKNOWN_POINTER, "not handed out";
        "releasing NULL": gs_pool_release(pool, null_mut()) => GS_ERR_NULL_ARGUMENT, "'ptr'";
        "trimming a pool handle that is garbage": gs_pool_trim(fake) => GS_ERR_INVALID_HANDLE, "gs_pool";
        "resetting the peaks": gs_pool_reset_peaks(pool) => GS_OK, "";
        "resetting the peaks of a garbage pool": gs_pool_reset_peaks(fake) => GS_ERR_INVALID_HANDLE, "gs_pool";
        "a NULL out for the stats": gs_pool_get_stats(pool, null_mut()) => GS_ERR_NULL_ARGUMENT, "'out'";
        "zeroed bytes from a NULL pool": gs_pool_acquire_zeroed(null_mut(), 64, &mut z) => GS_ERR_NULL_ARGUMENT, "'pool'";
        "a failed acquire leaves *out alone": z.is_null() => is true;
    }
    let guarded = PoolConfig {
        red_zones: 1,
        ..Default::default()
    };
    spec! { s;
        "a pool with red zones": gs_pool_new(&guarded, &mut other) => GS_OK, "";
        "acquiring 100 bytes from it": gs_pool_acquire(other, 100, &mut p) => GS_OK, "";
        "writing one byte past them": (p as *mut u8).add(100).write(0xAB) => returns (), "";
        "releasing them reports the overrun":
            gs_pool_release(other, p) => GS_ERR_BUFFER_OVERRUN, "red zone around the 100-byte block";
        "the damaged block went back all the same": gs_pool_release(other, p) => GS_ERR_UNKNOWN_POINTER, "already released";
        "the pool with red zones is freed": gs_pool_free(other) => returns (), "";
    }
    finish(s, &[], pool);
}

pub(super) fn plans(s: &mut Spec) {
    let (pool, g, mut plan, mut r, mut t) = (new_pool(), two_fills_graph(s), null_mut(), null_mut(), Tensor::empty());
    let (mut arena, mut bound) = (0u64, 0u64);
    spec! { s;
        "a plan mode that does not exist": gs_plan_new(g, 7, &mut plan) => GS_ERR_INVALID_ARGUMENT, "mode";
        "a parallel-safe plan": gs_plan_new(g, GS_PLAN_PARALLEL_SAFE, &mut plan) => GS_OK, "";
        "its sizes": gs_plan_bytes(plan, &mut arena, &mut bound) => GS_OK, "";
        "two 8-byte values that may overlap in time, 16-byte aligned": (arena, bound) => is (32, 16);
        "the sizes of a NULL plan": gs_plan_bytes(null(), &mut arena, &mut bound) => GS_ERR_NULL_ARGUMENT, "'plan'";
        "the schedule of a plan made for none": gs_plan_schedule(plan, null_mut(), null_mut(), null_mut(), null_mut())
            => GS_ERR_INVALID_ARGUMENT, "not made for a schedule";
    }
    let (mut scheduled, mut threads, mut constraints, mut makespan, mut free) = (null_mut(), 0u32, 9u64, 0u64, 0u64);
    spec! { s;
        "a schedule of too many threads": gs_plan_new_scheduled(g, 5000, &mut scheduled) => GS_ERR_INVALID_ARGUMENT, "at most 4096";
        "a plan for a schedule on 2 threads": gs_plan_new_scheduled(g, 2, &mut scheduled) => GS_OK, "";
        "what its constraints cost": gs_plan_schedule(scheduled, &mut threads, &mut constraints, &mut makespan, &mut free) => GS_OK, "";
        "two independent nodes on two threads share nothing and wait for nothing": (threads, constraints, makespan == free) => is (2, 0, true);
        "NULLs ask for nothing": gs_plan_schedule(scheduled, null_mut(), null_mut(), null_mut(), null_mut()) => GS_OK, "";
    }
    let limited = gs_run_options {
        plan: scheduled,
        memory_limit_bytes: 1 << 20,
        ..Default::default()
    };
    spec! { s;
        "a memory limit on a scheduled plan": gs_run(g, pool, &limited, &mut r) => GS_ERR_INVALID_ARGUMENT, "without a memory limit";
        "the scheduled plan is freed": gs_plan_free(scheduled) => returns (), "";
        "the default mode plans for one thread per core": gs_plan_new(g, GS_PLAN_SCHEDULED, &mut scheduled) => GS_OK, "";
        "and is freed": gs_plan_free(scheduled) => returns (), "";
    }
    let auto = gs_run_options {
        flags: GS_RUN_AUTO_PLAN,
        ..Default::default()
    };
    spec! { s;
        "a first run that makes the graph's own plan": gs_run(g, pool, &auto, &mut r) => GS_OK, "";
        "the result is freed": gs_result_free(r) => returns (), "";
    }
    let before = super::acquires(pool);
    spec! { s;
        "a second run on that plan": gs_run(g, pool, &auto, &mut r) => GS_OK, "";
        "takes one block from the pool, its arena": super::acquires(pool) - before => is 1;
        "its output": gs_result_output(r, ValueRef::new(0, 0), &mut t) => GS_OK, "";
        "holds what 'one' wrote": std::slice::from_raw_parts(t.data as *const u8, 8) => returns &[1u8; 8][..], "";
        "the result is freed": gs_result_free(r) => returns (), "";
    }
    let planned = gs_run_options {
        plan,
        ..Default::default()
    };
    spec! { s;
        "a run on the plan": gs_run(g, pool, &planned, &mut r) => GS_OK, "";
        "its output": gs_result_output(r, ValueRef::new(0, 0), &mut t) => GS_OK, "";
        "holds what 'one' wrote": std::slice::from_raw_parts(t.data as *const u8, 8) => returns &[1u8; 8][..], "";
        "the result is freed": gs_result_free(r) => returns (), "";
        "the plan is freed": gs_plan_free(plan) => returns (), "";
        "a freed plan in the run options": gs_run(g, pool, &planned, &mut r) => GS_ERR_INVALID_HANDLE, "'options.plan'";
        "freeing a NULL plan does nothing": gs_plan_free(null_mut()) => returns (), "";
    }
    // A plan fixes every size: a graph whose input size each run binds gets none.
    let (dynamic, mut x) = (new_graph(), ValueRef::new(0, 0));
    spec! { s;
        "an input 'x' of dynamic size": gs_graph_add_input(dynamic, c"x".as_ptr(), GS_SIZE_DYNAMIC, &mut x) => GS_OK, "";
        "'ok' reads it": gs_graph_add_node(dynamic, &desc(c"ok", Some(add_kernel), &[x], &[16], 0), null_mut()) => GS_OK, "";
        "'ok' is its output": gs_graph_mark_output(dynamic, ValueRef::new(1, 0)) => GS_OK, "";
        "it finalizes": gs_graph_finalize(dynamic) => GS_OK, "";
        "a plan of a graph with an input of dynamic size": gs_plan_new(dynamic, GS_PLAN_PARALLEL_SAFE, &mut plan)
            => GS_ERR_INVALID_ARGUMENT, "inputs of dynamic size, and a plan fixes every size";
        "a scheduled plan of it": gs_plan_new_scheduled(dynamic, 2, &mut plan) => GS_ERR_INVALID_ARGUMENT, "GS_RUN_AUTO_PLAN";
    }
    finish(s, &[g, dynamic], pool);
}

pub(super) fn executors(s: &mut Spec) {
    let mut garbage = [0u64; 8];
    let (pool, g, mut ex, mut r, mut t) = (new_pool(), two_fills_graph(s), null_mut(), null_mut(), Tensor::empty());
    let garbage_executor = gs_run_options {
        executor: garbage.as_mut_ptr() as *mut gs_executor,
        ..Default::default()
    };
    spec! { s;
        "an executor handle in the run options that is garbage":
            gs_run(g, pool, &garbage_executor, &mut r) => GS_ERR_INVALID_HANDLE, "'options.executor'";
        "a NULL out for the new executor": gs_executor_new(null(), null_mut()) => GS_ERR_NULL_ARGUMENT, "'out'";
        "an executor of two threads": gs_executor_new(&gs_executor_config { threads: 2 }, &mut ex) => GS_OK, "";
        "counts the caller's thread": gs_executor_threads(ex) => returns 2, "";
        "a NULL executor has no threads": gs_executor_threads(null()) => returns 0, "'executor'";
    }
    let shared = gs_run_options {
        executor: ex,
        ..Default::default()
    };
    let urgent = gs_run_options {
        priority: GS_PRIORITY_HIGH,
        ..shared
    };
    let unknown_priority = gs_run_options { priority: 7, ..shared };
    let (mut bytes, mut reserved, mut peak, mut waited) = (0u64, 0u64, 0u64, 1u64);
    spec! { s;
        "a priority that is none": gs_run(g, pool, &unknown_priority, &mut r) => GS_ERR_INVALID_ARGUMENT, "options.priority";
        "a budget too small for the graph's bound": gs_executor_set_memory_budget(ex, 4) => GS_OK, "";
        "refuses its runs at once": gs_run(g, pool, &shared, &mut r) => GS_ERR_MEMORY_LIMIT, "memory budget of 4 bytes";
        "a budget on a NULL executor": gs_executor_set_memory_budget(null(), 4) => GS_ERR_NULL_ARGUMENT, "'executor'";
        "a budget of 1 MiB": gs_executor_set_memory_budget(ex, 1 << 20) => GS_OK, "";
        "a high-priority run under it": gs_run(g, pool, &urgent, &mut r) => GS_OK, "";
        "waited nothing to enter": gs_result_budget_wait_ns(r, &mut waited) => GS_OK, "";
        "a wait read into NULL": gs_result_budget_wait_ns(r, null_mut()) => GS_ERR_NULL_ARGUMENT, "'out'";
        "the budget's books": gs_executor_memory_budget(ex, &mut bytes, &mut reserved, &mut peak) => GS_OK, "";
        "NULLs ask for nothing of the books": gs_executor_memory_budget(ex, null_mut(), null_mut(), null_mut()) => GS_OK, "";
        "the books of a NULL executor": gs_executor_memory_budget(null(), &mut bytes, null_mut(), null_mut())
            => GS_ERR_NULL_ARGUMENT, "'executor'";
        "that result is freed": gs_result_free(r) => returns (), "";
        "no budget again": gs_executor_set_memory_budget(ex, 0) => GS_OK, "";
        "a nice value out of range": gs_executor_set_background_nice(ex, 25) => GS_ERR_INVALID_ARGUMENT, "1 to 19";
        "a nice value for a NULL executor": gs_executor_set_background_nice(null(), 5)
            => GS_ERR_NULL_ARGUMENT, "'executor'";
    }
    assert_eq!((bytes, reserved, waited), (1 << 20, 0, 0));
    assert!(peak > 0 && peak <= 1 << 20, "{peak}");
    spec! { s;
        "a run on the executor": gs_run(g, pool, &shared, &mut r) => GS_OK, "";
        "its output": gs_result_output(r, ValueRef::new(0, 0), &mut t) => GS_OK, "";
        "holds what 'one' wrote": std::slice::from_raw_parts(t.data as *const u8, 8) => returns &[1u8; 8][..], "";
        "the result is freed": gs_result_free(r) => returns (), "";
        "the executor is freed": gs_executor_free(ex) => returns (), "";
        "a freed executor in the run options": gs_run(g, pool, &shared, &mut r) => GS_ERR_INVALID_HANDLE, "'options.executor'";
        "a freed executor has no threads": gs_executor_threads(ex) => returns 0, "freed";
        "freeing a NULL executor does nothing": gs_executor_free(null_mut()) => returns (), "";
    }
    finish(s, &[g], pool);
}

pub(super) fn cancel_tokens(s: &mut Spec) {
    let (pool, g, mut token, mut r) = (new_pool(), two_fills_graph(s), null_mut(), null_mut());
    spec! { s;
        "a NULL out for the new token": gs_cancel_token_new(null_mut()) => GS_ERR_NULL_ARGUMENT, "'out'";
        "a token": gs_cancel_token_new(&mut token) => GS_OK, "";
        "the first cancel cancels": gs_cancel_token_cancel(token) => returns 1, "";
        "later ones report it was done": gs_cancel_token_cancel(token) => returns 0, "";
    }
    let cancelled = gs_run_options {
        cancel: token,
        ..Default::default()
    };
    spec! { s;
        "a run given a cancelled token": gs_run(g, pool, &cancelled, &mut r) => GS_ERR_CANCELLED, "cancelled";
        "a cancelled run gives every buffer back": live_bytes(pool) => is 0;
        "a reset of the cancelled token": gs_cancel_token_reset(token) => returns 1, "";
        "a second reset finds it not cancelled": gs_cancel_token_reset(token) => returns 0, "";
        "a run given the reset token": gs_run(g, pool, &cancelled, &mut r) => GS_OK, "";
        "its result is freed": gs_result_free(r) => returns (), "";
        "the token is freed": gs_cancel_token_free(token) => returns (), "";
        "a freed token is refused": gs_cancel_token_cancel(token) => returns -1, "freed";
        "a freed token cannot be reset": gs_cancel_token_reset(token) => returns -1, "freed";
        "clearing the last error": gs_clear_last_error() => is ();
        "leaves no message until the next failure": super::last_error() => is String::new();
        "a freed token in the run options": gs_run(g, pool, &cancelled, &mut r) => GS_ERR_INVALID_HANDLE, "'options.cancel'";
        "freeing a NULL token does nothing": gs_cancel_token_free(null_mut()) => returns (), "";
    }
    finish(s, &[g], pool);
}

pub(super) fn kernel_context(s: &mut Spec) {
    let garbage = [0u64; 4];
    let fake = garbage.as_ptr() as *mut gs_kernel_ctx;
    let mut completion = null_mut();
    spec! { s;
        "a NULL context has no inputs": gs_ctx_num_inputs(null()) => returns 0, "'ctx'";
        "a NULL context has no input 0": gs_ctx_input(null(), 0).is_null() => returns true, "'ctx' is NULL";
        "a context that is not a running kernel's has no output 0":
            gs_ctx_output(fake, 0).is_null() => returns true, "not the context of a running kernel";
        "a NULL context is refused before a NULL out is looked at":
            gs_ctx_alloc_output(null_mut(), 0, 8, null_mut()) => GS_ERR_NULL_ARGUMENT, "'ctx'";
        "a NULL context has no node name": gs_ctx_node_name(null()).is_null() => returns true, "'ctx'";
        "a context that is not a running kernel's has no outputs":
            gs_ctx_num_outputs(fake as *const gs_kernel_ctx) => returns 0, "not the context of a running kernel";
        "a NULL context has no in-place outputs": gs_ctx_output_in_place(null(), 0) => returns 0, "'ctx'";
        "an error set on a NULL context": gs_ctx_set_error(null_mut(), c"lost".as_ptr()) => returns (), "'ctx'";
        "a NULL context has no run data": gs_ctx_user_data(null()).is_null() => returns true, "'ctx'";
        "a parallel loop needs a context":
            gs_ctx_parallel_for(null_mut(), 0, 10, 1, None, null_mut()) => GS_ERR_NULL_ARGUMENT, "'ctx'";
        "so does a loop whose chunks may nest loops":
            gs_ctx_parallel_for_nested(null_mut(), 0, 10, 1, None, null_mut()) => GS_ERR_NULL_ARGUMENT, "'ctx'";
        "a nested loop needs its chunk's handle": gs_parallel_for(null(), 0, 10, 1, None, null_mut()) => GS_ERR_NULL_ARGUMENT, "'p'";
        "a handle that is not a running loop's is refused":
            gs_parallel_for(garbage.as_ptr() as *const gs_parallel, 0, 10, 1, None, null_mut())
            => GS_ERR_INVALID_HANDLE, "not the handle of a running parallel loop";
        "a NULL context has no pool": gs_ctx_pool(null()).is_null() => returns true, "'ctx'";
        "only a running kernel defers its node":
            gs_ctx_defer(fake, &mut completion) => GS_ERR_INVALID_HANDLE, "not the context of a running kernel";
        "a NULL context defers nothing": gs_ctx_defer(null_mut(), &mut completion) => GS_ERR_NULL_ARGUMENT, "'ctx'";
        "a NULL completion completes nothing":
            gs_complete(null_mut(), 0, null()) => GS_ERR_NULL_ARGUMENT, "'completion'";
        "a completion that is not one":
            gs_complete(fake as *mut gs_completion, 0, c"done".as_ptr()) => GS_ERR_INVALID_HANDLE, "not a live gs_completion";
        "a context that is not a running kernel's has no executor":
            gs_ctx_executor(fake as *const gs_kernel_ctx).is_null() => returns true, "not the context of a running kernel";
    }
}

pub(super) fn simulator(s: &mut Spec) {
    let (g, unfinalized) = (two_fills_graph(s), new_graph());
    let mut sim = graphsched::sim::SimResult::default();
    let two = gs_sim_options {
        threads: 2,
        ..Default::default()
    };
    spec! { s;
        "zero threads": gs_simulate(g, &gs_sim_options::default(), &mut sim) => GS_ERR_INVALID_ARGUMENT, "threads";
        "NULL options": gs_simulate(g, null(), &mut sim) => GS_ERR_NULL_ARGUMENT, "'options'";
        "a graph not finalized": gs_simulate(unfinalized, &two, &mut sim) => GS_ERR_NOT_FINALIZED, "finalize";
        "two threads": gs_simulate(g, &two, &mut sim) => GS_OK, "";
        "the graphs are freed": { gs_graph_free(g); gs_graph_free(unfinalized) } => returns (), "";
    }
}

pub(super) fn partitions(s: &mut Spec) {
    let (g, unfinalized) = (two_fills_graph(s), new_graph());
    let two = gs_partition_options {
        call_cost_ns: 500,
        threads: 2,
        ..Default::default()
    };
    let bad_policy = gs_partition_options { policy: 99, ..two };
    let (mut p, mut count, mut len) = (null_mut(), 0usize, 0usize);
    let mut nodes: *const u32 = null();
    let (mut before, mut after) = (
        graphsched::sim::SimResult::default(),
        graphsched::sim::SimResult::default(),
    );
    let fake = 0x5a5a_5a50usize;
    spec! { s;
        "zero threads": gs_partition_new(g, &gs_partition_options::default(), &mut p) => GS_ERR_INVALID_ARGUMENT, "threads";
        "NULL options": gs_partition_new(g, null(), &mut p) => GS_ERR_NULL_ARGUMENT, "'options'";
        "a policy that is none": gs_partition_new(g, &bad_policy, &mut p) => GS_ERR_INVALID_ARGUMENT, "GS_POLICY_";
        "a graph not finalized": gs_partition_new(unfinalized, &two, &mut p) => GS_ERR_NOT_FINALIZED, "finalize";
        "NULL out": gs_partition_new(g, &two, null_mut()) => GS_ERR_NULL_ARGUMENT, "'out'";
        "two threads": gs_partition_new(g, &two, &mut p) => GS_OK, "";
        "its clusters": gs_partition_cluster_count(p, &mut count) => GS_OK, "";
        "a NULL count": gs_partition_cluster_count(p, null_mut()) => GS_ERR_NULL_ARGUMENT, "'count'";
        "the first cluster": gs_partition_cluster(p, 0, &mut nodes, &mut len) => GS_OK, "";
        "a cluster past the last": gs_partition_cluster(p, count, &mut nodes, &mut len) => GS_ERR_INVALID_ARGUMENT, "clusters";
        "a NULL node list": gs_partition_cluster(p, 0, null_mut(), &mut len) => GS_ERR_NULL_ARGUMENT, "'nodes'";
        "what it simulates to": gs_partition_simulated(p, &mut before, &mut after) => GS_OK, "";
        "NULLs ask for nothing": gs_partition_simulated(p, null_mut(), null_mut()) => GS_OK, "";
        "a partition that is not one": gs_partition_simulated(fake as *const gs_partition, &mut before, null_mut())
            => GS_ERR_INVALID_HANDLE, "not a live gs_partition";
        "a cluster count of a NULL partition": gs_partition_cluster_count(null(), &mut count) => GS_ERR_NULL_ARGUMENT, "'partition'";
        "the partition is freed": gs_partition_free(p) => returns (), "";
        "and is gone": gs_partition_cluster_count(p, &mut count) => GS_ERR_INVALID_HANDLE, "gs_partition";
        "freeing a NULL partition does nothing": gs_partition_free(null_mut()) => returns (), "";
        "the graphs are freed": { gs_graph_free(g); gs_graph_free(unfinalized) } => returns (), "";
    }
    assert!(count >= 1 && len >= 1, "{count} clusters, the first of {len} nodes");
    assert!(after.makespan_ns <= before.makespan_ns);
}
