//! The promises an engine relies on, one case per defect found by trying to break them: a bad
//! call gets a status and a sentence, never a crash, a hang or corrupted memory.

mod common;

use std::ffi::{c_void, CStr};
use std::ptr::{null, null_mut};
use std::sync::Arc;

use common::{random_dag, AlignedBuf, Ledger, Rng};
use graphsched::ffi::*;
use graphsched::plan::{Mode, Order, Plan};
use graphsched::{run, ErrorKind, Executor, Graph, GraphBuilder, InputBinding, NodeDesc, Pool, RunOptions, ValueRef};

fn noop() -> graphsched::Kernel {
    Box::new(|_| Ok(()))
}

/// A chain of `n` nodes with outputs of `bytes`; the last output is the graph output.
fn chain(n: usize, bytes: usize) -> Arc<Graph> {
    let mut b = GraphBuilder::new();
    let mut prev = None;
    for i in 0..n {
        let mut d = NodeDesc::new(format!("c{i}"), "Copy", noop()).output(bytes);
        if let Some(p) = prev {
            d = d.input(ValueRef::new(p, 0));
        }
        prev = Some(b.add_node(d).unwrap());
    }
    b.mark_output(ValueRef::new(prev.unwrap(), 0)).unwrap();
    Arc::new(b.finalize().unwrap())
}

#[test]
fn a_plan_runs_only_the_graph_it_was_made_for() {
    let planned = chain(3, 64);
    let plan = Plan::new(&planned, Mode::Sequential(Order::Topological)).unwrap();
    let pool = Arc::new(Pool::default());
    // Another node count (used to index out of bounds), and the same shape with larger values
    // (used to overlap values and write past the arena).
    for other in [chain(6, 64), chain(3, 1 << 20)] {
        let options = RunOptions {
            plan: Some(&plan),
            ..Default::default()
        };
        let e = run(&other, &pool, &options)
            .err()
            .expect("a foreign plan must be refused");
        assert_eq!(e.kind(), ErrorKind::InvalidArgument, "{e}");
        for g in [&planned, &other] {
            assert!(e.message().contains(&format!("graph #{}", g.id())), "{e}");
        }
        assert_eq!(pool.stats().live_bytes, 0);
    }
    run(
        &planned,
        &pool,
        &RunOptions {
            plan: Some(&plan),
            ..Default::default()
        },
    )
    .unwrap();
}

/// Builds and finalizes a C-API chain of `n` nodes of `bytes`.
fn c_chain(n: usize, bytes: usize) -> *mut gs_graph {
    unsafe extern "C" fn nothing(_: *mut gs_kernel_ctx, _: *mut c_void) -> i32 {
        0
    }
    let mut g = null_mut();
    // SAFETY: `g` is writable.
    assert_eq!(unsafe { gs_graph_new(&mut g) }, gs_status::GS_OK);
    let mut prev: Option<u32> = None;
    for i in 0..n {
        let name = std::ffi::CString::new(format!("c{i}")).unwrap();
        let input = prev.map(|p| ValueRef::new(p, 0));
        let desc = gs_node_desc {
            name: name.as_ptr(),
            op_type: null(),
            kernel: Some(nothing),
            user_data: null_mut(),
            inputs: input.as_ref().map_or(null(), |v| v as *const ValueRef),
            num_inputs: input.is_some() as u32,
            num_outputs: 1,
            output_sizes: &bytes,
            estimated_ns: 0,
            flags: 0,
            in_place_output: 0,
            in_place_input: 0,
            size_fn: None,
        };
        let mut id = 0;
        // SAFETY: the descriptor and what it points to live across the call; the kernel does
        // nothing, from any thread; `g` is this thread's alone.
        assert_eq!(unsafe { gs_graph_add_node(g, &desc, &mut id) }, gs_status::GS_OK);
        prev = Some(id);
    }
    assert_eq!(
        // SAFETY: `g` is this thread's alone.
        unsafe { gs_graph_mark_output(g, ValueRef::new(prev.unwrap(), 0)) },
        gs_status::GS_OK
    );
    // SAFETY: as above.
    assert_eq!(unsafe { gs_graph_finalize(g) }, gs_status::GS_OK);
    g
}

#[test]
fn the_c_api_refuses_a_foreign_plan_with_a_sentence() {
    let (a, b) = (c_chain(3, 64), c_chain(3, 1 << 20));
    let mut plan = null_mut();
    assert_eq!(
        // SAFETY: `a` is this thread's alone; `plan` is writable.
        unsafe { gs_plan_new(a, GS_PLAN_SEQUENTIAL, &mut plan) },
        gs_status::GS_OK
    );
    let mut pool = null_mut();
    // SAFETY: NULL config means defaults; `pool` is writable.
    assert_eq!(unsafe { gs_pool_new(null(), &mut pool) }, gs_status::GS_OK);
    let options = gs_run_options {
        plan,
        ..Default::default()
    };
    let mut result = null_mut();
    // SAFETY: live handles, readable options, writable out.
    let status = unsafe { gs_run(b, pool, &options, &mut result) };
    assert_eq!(status, gs_status::GS_ERR_INVALID_ARGUMENT);
    // SAFETY: the last error is this thread's valid C string.
    let message = unsafe { CStr::from_ptr(gs_last_error_message()) }
        .to_string_lossy()
        .into_owned();
    assert!(message.contains("plan was made for graph #"), "{message}");
    assert!(result.is_null());
    // SAFETY: as above.
    assert_eq!(unsafe { gs_run(a, pool, &options, &mut result) }, gs_status::GS_OK);
    // SAFETY: every handle is this thread's alone, and no call is using it.
    unsafe {
        gs_result_free(result);
        gs_plan_free(plan);
        gs_pool_free(pool);
        gs_graph_free(a);
        gs_graph_free(b);
    }
}

/// A run's buffers belong to the run: `gs_pool_release` on one (a graph output's data, here)
/// used to succeed, hand the bytes to the next acquire, and free them again with the result.
#[test]
fn the_pool_refuses_to_release_a_buffer_of_a_run() {
    let g = c_chain(2, 4096);
    let mut pool = null_mut();
    // SAFETY: NULL config means defaults; `pool` is writable.
    assert_eq!(unsafe { gs_pool_new(null(), &mut pool) }, gs_status::GS_OK);
    let mut result = null_mut();
    // SAFETY: live handles, NULL options, writable out.
    assert_eq!(unsafe { gs_run(g, pool, null(), &mut result) }, gs_status::GS_OK);
    let mut out = graphsched::Tensor::empty();
    // SAFETY: live result, writable out.
    let status = unsafe { gs_result_output(result, ValueRef::new(1, 0), &mut out) };
    assert_eq!(status, gs_status::GS_OK);
    // SAFETY: the pool refuses the pointer before touching it.
    let status = unsafe { gs_pool_release(pool, out.data) };
    assert_eq!(status, gs_status::GS_ERR_UNKNOWN_POINTER);
    // SAFETY: the last error is this thread's valid C string.
    let message = unsafe { CStr::from_ptr(gs_last_error_message()) }
        .to_string_lossy()
        .into_owned();
    assert!(message.contains("graph run"), "{message}");
    let mut stats = graphsched::PoolStats::default();
    // SAFETY: live pool, writable out.
    unsafe { gs_pool_get_stats(pool, &mut stats) };
    assert_eq!(stats.live_bytes, 4096, "the output is still the result's");
    // SAFETY: every handle is this thread's alone, and no call is using it.
    unsafe {
        gs_result_free(result);
        gs_pool_get_stats(pool, &mut stats);
        gs_pool_free(pool);
        gs_graph_free(g);
    }
    assert_eq!(stats.live_bytes, 0);
}

#[test]
fn a_dynamic_output_cannot_pass_the_memory_limit() {
    let mut b = GraphBuilder::new();
    let grow = b
        .add_node(
            NodeDesc::new(
                "grow",
                "Grow",
                Box::new(|ctx| {
                    ctx.alloc_output(0, 4096).map_err(|e| e.message().to_string())?;
                    Ok(())
                }),
            )
            .dynamic_output(),
        )
        .unwrap();
    b.mark_output(ValueRef::new(grow, 0)).unwrap();
    let graph = Arc::new(b.finalize().unwrap());
    let pool = Arc::new(Pool::default());
    let executor = Executor::new(2).unwrap();
    for executor in [None, Some(&executor)] {
        pool.reset_peaks();
        let options = RunOptions {
            executor,
            memory_limit_bytes: 1024,
            ..Default::default()
        };
        let e = run(&graph, &pool, &options)
            .err()
            .expect("4096 bytes do not fit a 1024-byte limit");
        assert_eq!(e.kind(), ErrorKind::MemoryLimit, "{e}");
        assert!(
            e.message().contains("'grow'") && e.message().contains("4096-byte"),
            "{e}"
        );
        assert!(
            pool.stats().peak_live_bytes <= 1024,
            "the pool handed out {}",
            pool.stats().peak_live_bytes
        );
        assert_eq!(pool.stats().live_bytes, 0);
        // Room for it: the same run goes through, and counts the bytes it holds.
        let options = RunOptions {
            memory_limit_bytes: 4096,
            ..options
        };
        let r = run(&graph, &pool, &options).unwrap();
        assert_eq!(r.stats().peak_live_bytes, 4096);
    }
}

#[test]
fn acquires_count_blocks_taken_from_the_pool() {
    // Small values (below 1 KiB) go through the run's per-thread cache.
    let graph = chain(6, 512);
    let pool = Arc::new(Pool::default());
    let dynamic = run(&graph, &pool, &RunOptions::default()).unwrap();
    // Six values, two live at a time: the run's cache recycles the blocks of values gone, so it
    // takes fewer blocks than values from the pool, and at least the two live at once.
    let acquires = dynamic.stats().acquires;
    assert!((2..6).contains(&acquires), "{acquires} blocks for a chain of 6");
    // Large ones each take a block of the pool, where the graph's hints place them: six.
    let large = chain(6, 4096);
    let r = run(&large, &pool, &RunOptions::default()).unwrap();
    assert_eq!(r.stats().acquires, 6, "one block per large value");
    let plan = Plan::new(&graph, Mode::Sequential(Order::Topological)).unwrap();
    let before = pool.stats().acquires;
    let planned = run(
        &graph,
        &pool,
        &RunOptions {
            plan: Some(&plan),
            ..Default::default()
        },
    )
    .unwrap();
    assert_eq!(
        planned.stats().acquires,
        1,
        "a planned run takes its arena, nothing else"
    );
    assert_eq!(pool.stats().acquires - before, 1);
}

#[test]
fn a_missing_output_index_is_an_output_index_error() {
    let graph = chain(2, 64);
    let pool = Arc::new(Pool::default());
    let r = run(&graph, &pool, &RunOptions::default()).unwrap();
    let e = r.output(ValueRef::new(1, 1)).unwrap_err();
    assert_eq!(e.kind(), ErrorKind::OutputIndex, "{e}");
    assert!(e.message().contains("'c1' has 1 output"), "{e}");
    assert_eq!(
        r.output(ValueRef::new(7, 0)).unwrap_err().kind(),
        ErrorKind::UnknownValue
    );
    assert_eq!(
        r.output(ValueRef::new(0, 0)).unwrap_err().kind(),
        ErrorKind::NotAnOutput
    );
}

/// Random DAGs run on 1 to 4 threads under a limit equal to the lowest max-live bound
/// graphsched knows: admission must never give up (the banker's rule), and never pass it.
#[test]
fn admission_completes_at_the_lowest_bound_on_any_thread_count() {
    let executors: Vec<Executor> = (1..=4).map(|t| Executor::new(t).unwrap()).collect();
    for seed in 0..120u64 {
        let mut rng = Rng::new(seed);
        let ledger = Ledger::default();
        let nodes = 10 + rng.below(60) as usize;
        let (mut b, inputs) = random_dag(&mut rng, &ledger, 2, nodes, 3, 4096);
        let graph = Arc::new(b.finalize().unwrap());
        let bufs: Vec<AlignedBuf> = inputs
            .iter()
            .map(|&v| AlignedBuf::new(graph.value_size(graph.value_index(v).unwrap()).bytes().unwrap(), 3))
            .collect();
        for (v, buf) in inputs.iter().zip(&bufs) {
            ledger.record_input(*v, buf.bytes());
        }
        let bindings: Vec<InputBinding> = inputs
            .iter()
            .zip(&bufs)
            .map(|(&v, b)| InputBinding::new(v, b.bytes()))
            .collect();
        let limit = graph.lowest_live_order().peak;
        let executor = &executors[seed as usize % 4];
        let pool = Arc::new(Pool::default());
        for executor in [None, Some(executor)] {
            let options = RunOptions {
                inputs: &bindings,
                executor,
                // A window defers nodes, reserved ones included.
                window: seed as usize % 3,
                memory_limit_bytes: limit,
                ..Default::default()
            };
            let r = run(&graph, &pool, &options)
                .unwrap_or_else(|e| panic!("seed {seed}, {} threads: {e}", executor.map_or(1, Executor::threads)));
            assert!(
                r.stats().peak_live_bytes <= limit,
                "seed {seed}: {} > {limit}",
                r.stats().peak_live_bytes
            );
            assert!(
                pool.stats().peak_live_bytes <= limit,
                "seed {seed}: pool peak over the limit"
            );
            for &v in graph.graph_outputs() {
                let v = graph.value_ref(v);
                let want = ledger.get(v).expect("the kernel recorded it");
                assert_eq!(
                    common::fnv(r.output_bytes(v).unwrap()),
                    want,
                    "seed {seed}: output {v:?}"
                );
            }
        }
        assert_eq!(pool.stats().live_bytes, 0);
    }
}

/// A run without an executor follows the order admission's guarantee is about: a limit that
/// the graph's own order exceeds but a memory-aware order meets is met.
#[test]
fn a_sequential_run_follows_an_order_that_fits() {
    // The file order builds every big value first and consumes them late; consuming each one
    // right away needs a quarter of that.
    let mut b = GraphBuilder::new();
    let bigs: Vec<u32> = (0..4)
        .map(|i| {
            b.add_node(NodeDesc::new(format!("big{i}"), "Make", noop()).output(1000))
                .unwrap()
        })
        .collect();
    let smalls: Vec<u32> = bigs
        .iter()
        .enumerate()
        .map(|(i, &big)| {
            b.add_node(
                NodeDesc::new(format!("small{i}"), "Shrink", noop())
                    .input(ValueRef::new(big, 0))
                    .output(10),
            )
            .unwrap()
        })
        .collect();
    let mut sink = NodeDesc::new("sink", "Sum", noop()).output(10);
    for &s in &smalls {
        sink = sink.input(ValueRef::new(s, 0));
    }
    let sink = b.add_node(sink).unwrap();
    b.mark_output(ValueRef::new(sink, 0)).unwrap();
    let graph = Arc::new(b.finalize().unwrap());
    let file_order = Plan::new(&graph, Mode::Sequential(Order::Topological))
        .unwrap()
        .max_live_bytes();
    let limit = graph.lowest_live_order().peak;
    assert!(
        limit < file_order,
        "the example needs an order below the file order ({limit} vs {file_order})"
    );
    let pool = Arc::new(Pool::default());
    let options = RunOptions {
        memory_limit_bytes: limit,
        ..Default::default()
    };
    let r = run(&graph, &pool, &options).unwrap();
    assert!(r.stats().peak_live_bytes <= limit);
}

/// Under a memory limit, a dynamic allocation the pool refuses (after the limit let it through)
/// holds nothing: a kernel that then asks for less succeeds, and the nodes after it still fit.
#[test]
fn a_refused_dynamic_allocation_keeps_no_reservation() {
    let too_big = graphsched::tensor::MAX_VALUE_BYTES + 1;
    let mut b = GraphBuilder::new();
    let retry = Box::new(move |ctx: &mut graphsched::KernelCtx<'_>| {
        let e = ctx.alloc_output(0, too_big).expect_err("no block is that large");
        assert_eq!(e.kind(), ErrorKind::SizeOverflow, "{e}");
        ctx.alloc_output(0, 16).map_err(|e| e.to_string())?;
        Ok(())
    });
    let d = b
        .add_node(NodeDesc::new("retry", "Op", retry).dynamic_output())
        .unwrap();
    let next = b
        .add_node(
            NodeDesc::new("next", "Op", noop())
                .input(ValueRef::new(d, 0))
                .output(2000),
        )
        .unwrap();
    b.mark_output(ValueRef::new(next, 0)).unwrap();
    let graph = Arc::new(b.finalize().unwrap());
    let pool = Arc::new(Pool::default());
    let options = RunOptions {
        memory_limit_bytes: too_big as u64 + 1000,
        ..Default::default()
    };
    let r = run(&graph, &pool, &options).unwrap_or_else(|e| panic!("{e}"));
    assert_eq!(r.output_bytes(ValueRef::new(next, 0)).unwrap().len(), 2000);
}

#[test]
fn the_default_builder_is_a_new_builder() {
    let mut b = GraphBuilder::default();
    let n = b.add_node(NodeDesc::new("only", "Op", noop()).output(16)).unwrap();
    b.mark_output(ValueRef::new(n, 0)).unwrap();
    let graph = Arc::new(b.finalize().unwrap());
    let pool = Arc::new(Pool::default());
    assert!(run(&graph, &pool, &RunOptions::default()).is_ok());
}

/// A traced run of a graph with no operator still has a (nearly empty) trace to write.
#[test]
fn a_traced_run_without_operators_has_a_trace() {
    let mut b = GraphBuilder::new();
    let x = b.add_input("x", 16).unwrap();
    b.mark_output(x).unwrap_or(());
    let graph = Arc::new(b.finalize().unwrap());
    let input = AlignedBuf::new(16, 1);
    let bindings = [InputBinding::new(x, input.bytes())];
    let pool = Arc::new(Pool::default());
    let options = RunOptions {
        inputs: &bindings,
        trace: true,
        ..Default::default()
    };
    let r = run(&graph, &pool, &options).unwrap();
    assert!(r.chrome_trace().is_some());
    let untraced = run(
        &graph,
        &pool,
        &RunOptions {
            trace: false,
            ..options
        },
    )
    .unwrap();
    assert!(untraced.chrome_trace().is_none());
}

/// A node may read one added after it. The parallel-safe planner's ancestor sets used to assume
/// producers have lower ids, and indexed out of bounds on such a graph.
#[test]
fn a_parallel_safe_plan_takes_a_graph_whose_inputs_name_later_nodes() {
    let mut b = GraphBuilder::new();
    // "late" is node 0 and reads "early", node 1.
    let late = b
        .add_node(
            NodeDesc::new("late", "Op", noop())
                .input(ValueRef::new(1, 0))
                .output(64),
        )
        .unwrap();
    b.add_node(NodeDesc::new("early", "Op", noop()).output(64)).unwrap();
    b.mark_output(ValueRef::new(late, 0)).unwrap();
    let graph = Arc::new(b.finalize().unwrap());
    let plan = Plan::new(&graph, Mode::ParallelSafe).unwrap();
    plan.verify().unwrap();
    assert_eq!(
        graph.priorities().makespan_bound(2).critical_path_ns,
        2 * graphsched::sched::DEFAULT_ESTIMATE_NS
    );
}
