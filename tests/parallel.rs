//! The executor: random DAGs on 1 to 8 threads, priorities, window, memory admission, failures
//! and concurrent runs. Each kernel checks that every producer of its inputs has finished and
//! that its inputs still hold what their producers wrote. The kernels are short, so the runs
//! are forced onto the executor (`force_executor`): unforced, graphsched sends a graph of short
//! kernels to its caller alone, and these tests would check the sequential path instead.

mod common;

use std::sync::atomic::{AtomicBool, AtomicU32, AtomicUsize, Ordering};
use std::sync::Arc;

use common::{Ledger, Rng};
use graphsched::{
    run, ErrorKind, Executor, GraphBuilder, Kernel, KernelCtx, NodeDesc, Policy, Pool, RunOptions, ValueRef,
};

/// Per node: whether it ran, and how many times.
struct Witness {
    done: Vec<AtomicBool>,
    count: Vec<AtomicU32>,
    running: AtomicUsize,
    most_running: AtomicUsize,
}

impl Witness {
    fn new(n: usize) -> Arc<Self> {
        Arc::new(Witness {
            done: (0..n).map(|_| AtomicBool::new(false)).collect(),
            count: (0..n).map(|_| AtomicU32::new(0)).collect(),
            running: AtomicUsize::new(0),
            most_running: AtomicUsize::new(0),
        })
    }

    fn reset(&self) {
        self.done.iter().for_each(|d| d.store(false, Ordering::SeqCst));
        self.count.iter().for_each(|c| c.store(0, Ordering::SeqCst));
        self.most_running.store(0, Ordering::SeqCst);
    }

    /// Wraps a kernel: checks the producers of `inputs` finished first, counts the execution.
    fn wrap(self: &Arc<Self>, node: u32, inputs: Vec<ValueRef>, inner: Kernel) -> Kernel {
        let w = self.clone();
        Box::new(move |ctx: &mut KernelCtx<'_>| {
            let now = w.running.fetch_add(1, Ordering::SeqCst) + 1;
            w.most_running.fetch_max(now, Ordering::SeqCst);
            for v in &inputs {
                if !w.done[v.node as usize].load(Ordering::SeqCst) {
                    w.running.fetch_sub(1, Ordering::SeqCst);
                    return Err(format!("ran before its input producer {}", v.node));
                }
            }
            let r = inner(ctx);
            w.count[node as usize].fetch_add(1, Ordering::SeqCst);
            w.done[node as usize].store(true, Ordering::SeqCst);
            w.running.fetch_sub(1, Ordering::SeqCst);
            r
        })
    }
}

/// A random DAG whose kernels are witnessed checksum kernels; graph inputs: none.
fn witnessed_dag(rng: &mut Rng, nodes: usize, fail_at: Option<usize>) -> (graphsched::Graph, Arc<Witness>, Ledger) {
    let ledger = Ledger::default();
    let witness = Witness::new(nodes);
    let mut b = GraphBuilder::new();
    let mut values: Vec<ValueRef> = Vec::new();
    let mut read = std::collections::HashSet::new();
    for n in 0..nodes {
        let fan_in = if values.is_empty() { 0 } else { rng.below(4) };
        let ins: Vec<ValueRef> = (0..fan_in)
            .map(|_| values[rng.below(values.len() as u64) as usize])
            .collect();
        let outs = 1 + rng.below(2) as usize;
        let inner: Kernel = if fail_at == Some(n) {
            Box::new(|_| Err("planned failure".into()))
        } else {
            ledger.kernel(ins.clone())
        };
        let mut d = NodeDesc::new(
            format!("n{n}"),
            format!("op{}", n % 3),
            witness.wrap(n as u32, ins.clone(), inner),
        )
        .estimate_ns(1 + rng.below(100));
        for &v in &ins {
            d = d.input(v);
            read.insert(v);
        }
        for _ in 0..outs {
            d = d.output(16 + rng.below(2048) as usize);
        }
        let id = b.add_node(d).unwrap();
        values.extend((0..outs as u32).map(|k| ValueRef::new(id, k)));
    }
    for v in values {
        if !read.contains(&v) {
            b.mark_output(v).unwrap();
        }
    }
    (b.finalize().unwrap(), witness, ledger)
}

#[test]
fn every_node_runs_once_after_its_inputs_on_1_to_8_threads() {
    let executors: Vec<Executor> = (1..=8).map(|t| Executor::new(t).unwrap()).collect();
    let pool = Arc::new(Pool::default());
    let mut graphs = 0;
    for seed in 0..400u64 {
        let mut rng = Rng::new(seed);
        let nodes = 1 + rng.below(60) as usize;
        let (graph, witness, _) = witnessed_dag(&mut rng, nodes, None);
        let graph = Arc::new(graph);
        for (i, executor) in executors.iter().enumerate() {
            let policy = [Policy::Fifo, Policy::CriticalPath, Policy::BottomLevel][(seed + i as u64) as usize % 3];
            witness.reset();
            let options = RunOptions {
                executor: Some(executor),
                force_executor: true,
                policy,
                ..Default::default()
            };
            let result = run(&graph, &pool, &options).unwrap_or_else(|e| panic!("seed {seed}, {} threads: {e}", i + 1));
            assert_eq!(result.stats().nodes_run as usize, nodes);
            assert_eq!(
                result.stats().threads as usize,
                i + 1,
                "seed {seed}: on the executor's threads"
            );
            for (n, c) in witness.count.iter().enumerate() {
                assert_eq!(
                    c.load(Ordering::SeqCst),
                    1,
                    "seed {seed}, {} threads: node {n} ran a wrong number of times",
                    i + 1
                );
            }
            graphs += 1;
        }
    }
    assert_eq!(graphs, 3200);
    assert_eq!(pool.stats().live_bytes, 0);
}

#[test]
fn the_window_caps_concurrent_nodes() {
    let executor = Executor::new(4).unwrap();
    let pool = Arc::new(Pool::default());
    let mut rng = Rng::new(7);
    let (graph, witness, _) = witnessed_dag(&mut rng, 200, None);
    let graph = Arc::new(graph);
    for window in [1usize, 2] {
        // Many runs: a task deferred by the window must still hand over its counts.
        for _ in 0..100 {
            witness.reset();
            let options = RunOptions {
                executor: Some(&executor),
                force_executor: true,
                window,
                ..Default::default()
            };
            let result = run(&graph, &pool, &options).unwrap();
            assert_eq!(result.stats().nodes_run, 200);
            let most = witness.most_running.load(Ordering::SeqCst);
            assert!(most <= window, "window {window}, but {most} nodes ran at once");
        }
    }
    assert_eq!(pool.stats().live_bytes, 0);
}

#[test]
fn a_failure_stops_the_run_returns_every_buffer_and_the_graph_runs_again() {
    let executor = Executor::new(4).unwrap();
    let pool = Arc::new(Pool::default());
    for seed in 0..200u64 {
        let mut rng = Rng::new(seed);
        let nodes = 2 + rng.below(80) as usize;
        let fail_at = rng.below(nodes as u64) as usize;
        let (graph, witness, _) = witnessed_dag(&mut rng, nodes, Some(fail_at));
        let graph = Arc::new(graph);
        let options = RunOptions {
            executor: Some(&executor),
            force_executor: true,
            ..Default::default()
        };
        let e = run(&graph, &pool, &options)
            .err()
            .expect("the planned failure stops the run");
        assert_eq!(e.kind(), ErrorKind::KernelFailed, "seed {seed}: {e}");
        assert!(e.message().contains(&format!("'n{fail_at}'")), "seed {seed}: {e}");
        assert_eq!(pool.stats().live_bytes, 0, "seed {seed}: a failed run left buffers");
        assert_eq!(witness.count[fail_at].load(Ordering::SeqCst), 1);
    }
    // The same kind of graph without the failure runs fine on the same executor and pool.
    let (graph, _, _) = witnessed_dag(&mut Rng::new(1), 50, None);
    run(
        &Arc::new(graph),
        &pool,
        &RunOptions {
            executor: Some(&executor),
            ..Default::default()
        },
    )
    .unwrap();
}

#[test]
fn concurrent_runs_share_graph_executor_and_pool() {
    let executor = Executor::new(3).unwrap();
    let pool = Arc::new(Pool::default());
    let (graph, _, ledger) = witnessed_dag(&mut Rng::new(99), 150, None);
    let graph = Arc::new(graph);
    let options = RunOptions {
        executor: Some(&executor),
        force_executor: true,
        ..Default::default()
    };
    let reference: Vec<u64> = {
        let r = run(&graph, &pool, &options).unwrap();
        common::output_sums(&graph, &r)
    };
    let _ = ledger;
    std::thread::scope(|s| {
        for _ in 0..4 {
            s.spawn(|| {
                let options = RunOptions {
                    executor: Some(&executor),
                    force_executor: true,
                    ..Default::default()
                };
                for _ in 0..30 {
                    let r = run(&graph, &pool, &options).unwrap();
                    let got: Vec<u64> = common::output_sums(&graph, &r);
                    assert_eq!(got, reference);
                }
            });
        }
    });
    assert_eq!(pool.stats().live_bytes, 0);
}

#[test]
fn the_memory_limit_holds_at_every_instant() {
    let executor = Executor::new(4).unwrap();
    let (mut succeeded, mut guaranteed_runs) = (0, 0);
    for seed in 0..150u64 {
        let mut rng = Rng::new(seed);
        let nodes = 40 + rng.below(40) as usize;
        let (graph, _, _) = witnessed_dag(&mut rng, nodes, None);
        let graph = Arc::new(graph);
        let info = graph.info();
        // Graph outputs stay live to the end: room for them and the largest node, plus a third
        // of everything else.
        let outputs: u64 = graph
            .graph_outputs()
            .iter()
            .map(|&v| graph.value_size(v).bytes().unwrap() as u64)
            .sum();
        let floor = outputs + info.node_lower_bound_bytes;
        let limit = floor + info.static_bytes.saturating_sub(floor) / 3;
        let pool = Arc::new(Pool::default());
        let options = RunOptions {
            executor: Some(&executor),
            memory_limit_bytes: limit,
            ..Default::default()
        };
        // At or above the lowest max-live bound graphsched knows, admission guarantees the run
        // completes; below it, a clean memory-limit error is allowed.
        let guaranteed = limit >= graph.lowest_live_order().peak;
        match run(&graph, &pool, &options) {
            Ok(result) => {
                succeeded += 1;
                assert!(
                    result.stats().peak_live_bytes <= limit,
                    "seed {seed}: run peak {} over {limit}",
                    result.stats().peak_live_bytes
                );
                assert!(
                    pool.stats().peak_live_bytes <= limit,
                    "seed {seed}: pool peak {} over {limit}",
                    pool.stats().peak_live_bytes
                );
            }
            Err(e) => {
                assert!(
                    !guaranteed,
                    "seed {seed}: a limit at or above the bound must be met: {e}"
                );
                assert_eq!(e.kind(), ErrorKind::MemoryLimit, "seed {seed}: {e}");
                assert!(e.message().contains("bytes") && e.message().contains("node '"), "{e}");
            }
        }
        guaranteed_runs += guaranteed as u32;
        assert_eq!(pool.stats().live_bytes, 0);
    }
    assert!(succeeded >= guaranteed_runs, "{succeeded} runs met their limits");
    assert!(
        guaranteed_runs > 50,
        "only {guaranteed_runs} of 150 limits were at or above the bound"
    );
}

#[test]
fn an_impossible_limit_fails_naming_the_node_instead_of_hanging() {
    let mut b = GraphBuilder::new();
    let a = b
        .add_node(NodeDesc::new("small", "Op", Box::new(|_| Ok(()))).output(100))
        .unwrap();
    b.add_node(
        NodeDesc::new("big", "Op", Box::new(|_| Ok(())))
            .input(ValueRef::new(a, 0))
            .output(10_000),
    )
    .unwrap();
    let graph = Arc::new(b.finalize().unwrap());
    let pool = Arc::new(Pool::default());
    let executor = Executor::new(2).unwrap();
    for executor in [None, Some(&executor)] {
        let options = RunOptions {
            executor,
            memory_limit_bytes: 5_000,
            ..Default::default()
        };
        let e = run(&graph, &pool, &options)
            .err()
            .unwrap_or_else(|| panic!("executor {}: the run succeeded", executor.is_some()));
        assert_eq!(e.kind(), ErrorKind::MemoryLimit);
        assert!(
            e.message().contains("'big'") && e.message().contains("10000 bytes") && e.message().contains("5000"),
            "{e}"
        );
        assert_eq!(pool.stats().live_bytes, 0);
    }
}

#[test]
fn estimates_are_learned_and_priorities_follow_them() {
    // Two op types with no given estimates; "Slow" really is slower.
    let mut b = GraphBuilder::new();
    let spin = |us: u64| -> Kernel {
        Box::new(move |_| {
            let t = std::time::Instant::now();
            while t.elapsed() < std::time::Duration::from_micros(us) {
                std::hint::spin_loop();
            }
            Ok(())
        })
    };
    let slow = b
        .add_node(NodeDesc::new("slow", "Slow", spin(20_000)).output(16))
        .unwrap();
    // The fast kernels take 1 us and the slow one 20 ms: far apart even when a preemption of a
    // few milliseconds inflates a fast sample (the tests of this file share two cores, and an
    // op type's first sample sets its average).
    let fast = b.add_node(NodeDesc::new("fast", "Fast", spin(1)).output(16)).unwrap();
    b.add_node(
        NodeDesc::new("sink", "Fast", spin(1))
            .input(ValueRef::new(slow, 0))
            .input(ValueRef::new(fast, 0))
            .output(16),
    )
    .unwrap();
    let graph = Arc::new(b.finalize().unwrap());
    let before = graph.priorities();
    assert_eq!(
        before.slack()[slow as usize],
        before.slack()[fast as usize],
        "equal defaults: no preference yet"
    );
    let pool = Arc::new(Pool::default());
    let executor = Executor::new(2).unwrap();
    for _ in 0..5 {
        run(
            &graph,
            &pool,
            &RunOptions {
                executor: Some(&executor),
                ..Default::default()
            },
        )
        .unwrap();
    }
    let learned_slow = graph.learned_op_ns(graph.op_index(slow));
    let learned_fast = graph.learned_op_ns(graph.op_index(fast));
    assert!(
        learned_slow >= 15_000_000,
        "learned {learned_slow} ns for a 20 ms kernel"
    );
    assert!(
        learned_fast < learned_slow / 4,
        "fast {learned_fast} vs slow {learned_slow}"
    );
    let after = graph.priorities();
    assert!(!Arc::ptr_eq(&before, &after), "priorities were recomputed");
    assert_eq!(
        after.slack()[slow as usize],
        0,
        "the slow node is now on the critical path"
    );
    assert!(after.slack()[fast as usize] > 0);
    // Frozen estimates are left alone.
    run(
        &graph,
        &pool,
        &RunOptions {
            executor: Some(&executor),
            freeze_estimates: true,
            ..Default::default()
        },
    )
    .unwrap();
    assert_eq!(graph.learned_op_ns(graph.op_index(slow)), learned_slow);
}

/// Cancel runs at random moments from another thread, many times: each run either finishes or
/// reports `Cancelled`; nothing stays allocated; the graph runs again.
#[test]
fn cancelling_at_random_moments_never_loses_a_buffer() {
    use graphsched::CancelToken;
    let executor = Executor::new(2).unwrap();
    let pool = Arc::new(Pool::default());
    let (graph, _, _) = witnessed_dag(&mut Rng::new(5), 80, None);
    let graph = Arc::new(graph);
    let mut rng = Rng::new(11);
    let (mut cancelled, mut finished) = (0, 0);
    for i in 0..2000u64 {
        let token = CancelToken::new();
        // Mostly within a run's time; one in eight well after it, so that some runs finish
        // however slow a loaded machine makes them.
        let delay = match rng.below(8) {
            0 => std::time::Duration::from_millis(5),
            _ => std::time::Duration::from_micros(rng.below(300)),
        };
        let executor = if i % 2 == 0 { Some(&executor) } else { None };
        std::thread::scope(|s| {
            s.spawn(|| {
                std::thread::sleep(delay);
                assert!(token.cancel(), "the first cancel reports that it cancelled");
                assert!(!token.cancel(), "later ones do not");
            });
            let options = RunOptions {
                executor,
                force_executor: executor.is_some(),
                cancel: Some(&token),
                ..Default::default()
            };
            match run(&graph, &pool, &options) {
                Ok(result) => {
                    finished += 1;
                    assert_eq!(result.stats().nodes_run, 80);
                }
                Err(e) => {
                    cancelled += 1;
                    assert_eq!(e.kind(), ErrorKind::Cancelled, "{e}");
                    assert!(e.message().contains("cancelled"), "{e}");
                }
            }
        });
        assert_eq!(pool.stats().live_bytes, 0, "run {i} left buffers behind");
    }
    assert!(
        cancelled > 0 && finished > 0,
        "{cancelled} cancelled, {finished} finished"
    );
    run(
        &graph,
        &pool,
        &RunOptions {
            executor: Some(&executor),
            ..Default::default()
        },
    )
    .unwrap();
}

#[test]
fn a_deadline_stops_a_run() {
    let executor = Executor::new(2).unwrap();
    let pool = Arc::new(Pool::default());
    let mut b = GraphBuilder::new();
    let mut prev = None;
    for i in 0..50 {
        let mut d = NodeDesc::new(
            format!("slow{i}"),
            "Spin",
            Box::new(|_| {
                std::thread::sleep(std::time::Duration::from_millis(2));
                Ok(())
            }),
        )
        .output(64);
        if let Some(p) = prev {
            d = d.input(p);
        }
        prev = Some(ValueRef::new(b.add_node(d).unwrap(), 0));
    }
    let graph = Arc::new(b.finalize().unwrap());
    let deadline = std::time::Instant::now() + std::time::Duration::from_millis(20);
    let options = RunOptions {
        executor: Some(&executor),
        deadline: Some(deadline),
        ..Default::default()
    };
    let e = run(&graph, &pool, &options)
        .err()
        .expect("100 ms of work cannot finish in 20 ms");
    assert_eq!(e.kind(), ErrorKind::DeadlineExceeded, "{e}");
    assert!(
        std::time::Instant::now() < deadline + std::time::Duration::from_millis(500),
        "it stopped soon after"
    );
    assert_eq!(pool.stats().live_bytes, 0);
    let generous = std::time::Instant::now() + std::time::Duration::from_secs(60);
    run(
        &graph,
        &pool,
        &RunOptions {
            deadline: Some(generous),
            ..Default::default()
        },
    )
    .unwrap();
}

/// The run's peak is exact on an executor: one node feeding `width` nodes of 64 bytes, all read
/// by a join. The root's value goes only after every middle node has placed its output, so the
/// peak is the root's and all the middles' bytes, however the threads interleave.
#[test]
fn the_peak_of_a_run_on_an_executor_is_exact() {
    let width = 2000u64;
    let mut b = GraphBuilder::new();
    let nothing = || -> Kernel { Box::new(|_| Ok(())) };
    let root = b.add_node(NodeDesc::new("root", "Op", nothing()).output(64)).unwrap();
    let mut join = NodeDesc::new("join", "Join", nothing()).output(16);
    for i in 0..width {
        let mid = NodeDesc::new(format!("m{i}"), "Mid", nothing())
            .input(ValueRef::new(root, 0))
            .output(64);
        join = join.input(ValueRef::new(b.add_node(mid).unwrap(), 0));
    }
    let join = b.add_node(join).unwrap();
    b.mark_output(ValueRef::new(join, 0)).unwrap();
    let graph = Arc::new(b.finalize().unwrap());
    let pool = Arc::new(Pool::default());
    // More threads than cores too: a thread preempted between its steps is the interleaving
    // that once lost a middle's output from the peak.
    for threads in [1, 2, 4, 8] {
        let executor = Executor::new(threads).unwrap();
        for _ in 0..40 {
            // Forced: its kernels are empty, and a graph of short kernels goes to the caller.
            let options = RunOptions {
                executor: Some(&executor),
                force_executor: true,
                ..Default::default()
            };
            let r = run(&graph, &pool, &options).unwrap();
            assert_eq!(r.stats().peak_live_bytes, 64 * (width + 1), "{threads} threads");
        }
    }
}
