//! Intra-op parallelism: `KernelCtx::parallel_for` visits every item exactly once, on and off an
//! executor, nested, with every thread inside such a kernel at once; a panicking chunk fails the
//! node and the graph runs again.

use std::sync::atomic::{AtomicU64, AtomicU8, Ordering};
use std::sync::Arc;

use graphsched::{Executor, GraphBuilder, NodeDesc, Pool, RunOptions, ValueRef};

const N: usize = 100_000;

/// A graph of `width` nodes side by side; each visits 0..N with `parallel_for` (chunks of
/// `grain`, each chunk running an inner `parallel_for` of its own when `nested`), marks every
/// item it visits, and outputs the sum of the items.
fn graph(width: usize, grain: usize, nested: bool) -> (Arc<graphsched::Graph>, Vec<u32>) {
    let mut b = GraphBuilder::new();
    let mut nodes = Vec::new();
    for k in 0..width {
        let n = b
            .add_node(
                NodeDesc::new(
                    format!("loop{k}"),
                    "Loop",
                    Box::new(move |ctx| {
                        let marks: Vec<AtomicU8> = (0..N).map(|_| AtomicU8::new(0)).collect();
                        let sum = AtomicU64::new(0);
                        let visit = |r: std::ops::Range<usize>| {
                            for i in r {
                                marks[i].fetch_add(1, Ordering::Relaxed);
                                sum.fetch_add(i as u64, Ordering::Relaxed);
                            }
                        };
                        let par = ctx.parallel();
                        par.for_each(0..N, grain, &|r: std::ops::Range<usize>| {
                            if nested {
                                // A loop inside a chunk, from whichever thread runs it.
                                let inner = r.clone();
                                par.for_each(0..inner.len(), 97, &|s: std::ops::Range<usize>| {
                                    visit(inner.start + s.start..inner.start + s.end)
                                })
                                .unwrap();
                            } else {
                                visit(r)
                            }
                        })?;
                        if let Some(i) = marks.iter().position(|m| m.load(Ordering::Relaxed) != 1) {
                            return Err(format!("item {i} visited {} times", marks[i].load(Ordering::Relaxed)));
                        }
                        ctx.output_bytes(0)
                            .unwrap()
                            .copy_from_slice(&sum.load(Ordering::Relaxed).to_ne_bytes());
                        Ok(())
                    }),
                )
                .output(8),
            )
            .unwrap();
        b.mark_output(ValueRef::new(n, 0)).unwrap();
        nodes.push(n);
    }
    (Arc::new(b.finalize().unwrap()), nodes)
}

fn check(width: usize, grain: usize, nested: bool, threads: Option<usize>) {
    let (g, nodes) = graph(width, grain, nested);
    let pool = Arc::new(Pool::default());
    let executor = threads.map(|t| Executor::new(t).unwrap());
    for _ in 0..5 {
        let r = graphsched::run(
            &g,
            &pool,
            &RunOptions {
                executor: executor.as_ref(),
                ..Default::default()
            },
        )
        .unwrap();
        for &n in &nodes {
            let sum = u64::from_ne_bytes(r.output_bytes(ValueRef::new(n, 0)).unwrap().try_into().unwrap());
            assert_eq!(
                sum,
                (N as u64 - 1) * N as u64 / 2,
                "{threads:?} threads, grain {grain}, nested {nested}"
            );
        }
    }
}

#[test]
fn every_item_is_visited_once_with_or_without_an_executor() {
    for grain in [1_000, 7, 100_000, 1_000_000] {
        check(1, grain, false, None);
        check(1, grain, false, Some(2));
        check(1, grain, false, Some(3));
    }
}

#[test]
fn loops_in_every_thread_at_once_and_loops_inside_loops_finish() {
    for threads in [2, 3] {
        check(6, 500, false, Some(threads));
        check(4, 5_000, true, Some(threads));
    }
    check(2, 5_000, true, None);
}

#[test]
fn a_panicking_chunk_fails_its_node_and_the_graph_runs_again() {
    let fail = Arc::new(AtomicU8::new(1));
    let mut b = GraphBuilder::new();
    let f = fail.clone();
    let n = b
        .add_node(
            NodeDesc::new(
                "loop",
                "Loop",
                Box::new(move |ctx| {
                    let bad = f.load(Ordering::Relaxed) == 1;
                    ctx.parallel_for(0..1000, 10, &|r: std::ops::Range<usize>| {
                        if bad && r.contains(&500) {
                            panic!("chunk bug");
                        }
                    })?;
                    ctx.output_bytes(0).unwrap().fill(1);
                    Ok(())
                }),
            )
            .output(8),
        )
        .unwrap();
    b.mark_output(ValueRef::new(n, 0)).unwrap();
    let g = Arc::new(b.finalize().unwrap());
    let (pool, executor) = (Arc::new(Pool::default()), Executor::new(2).unwrap());
    let options = RunOptions {
        executor: Some(&executor),
        ..Default::default()
    };
    let e = graphsched::run(&g, &pool, &options)
        .err()
        .expect("the panicking chunk fails the node");
    assert!(
        e.message().contains("'loop'") && e.message().contains("panicked"),
        "{e}"
    );
    fail.store(0, Ordering::Relaxed);
    graphsched::run(&g, &pool, &options).unwrap();
}

#[test]
fn a_run_teaches_the_scheduler_which_nodes_split_their_work() {
    let mut b = GraphBuilder::new();
    // Each chunk waits (up to 5 s) until a second thread has run one: the loop goes 2 wide even
    // on a machine too busy to wake the helper within the loop's own time.
    let threads = Arc::new(std::sync::Mutex::new(std::collections::HashSet::new()));
    let spin = move |_: std::ops::Range<usize>| {
        threads.lock().unwrap().insert(std::thread::current().id());
        let until = std::time::Instant::now() + std::time::Duration::from_secs(5);
        while threads.lock().unwrap().len() < 2 && std::time::Instant::now() < until {
            std::thread::yield_now();
        }
    };
    let split = b
        .add_node(NodeDesc::new("split", "Split", Box::new(move |ctx| ctx.parallel_for(0..64, 1, &spin))).output(8))
        .unwrap();
    let alone = b
        .add_node(NodeDesc::new("alone", "Alone", Box::new(|_| Ok(()))).output(8))
        .unwrap();
    let g = Arc::new(b.finalize().unwrap());
    let executor = Executor::new(2).unwrap();
    let options = RunOptions {
        executor: Some(&executor),
        ..RunOptions::default()
    };
    graphsched::run(&g, &Arc::new(Pool::default()), &options).unwrap();
    assert_eq!(g.node_kind(split), graphsched::sched::NodeKind::Parallel);
    assert_eq!(g.node_kind(alone), graphsched::sched::NodeKind::Serial);
    // Its work is its duration times the two threads its loop ran on.
    assert_eq!(g.work_ns(split), g.expected_ns(split) * 2);
}
