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

/// A one-node graph whose kernel runs `parallel_for(begin..end, grain)` with the parameters last
/// stored in `params`, its body only recording the chunks it gets (a huge range is never
/// iterated item by item).
struct Probe {
    params: std::sync::Mutex<(usize, usize, usize)>,
    seen: std::sync::Mutex<Vec<std::ops::Range<usize>>>,
    graph: std::sync::OnceLock<Arc<graphsched::Graph>>,
    executor: Executor,
    pool: Arc<Pool>,
}

impl Probe {
    fn new() -> Arc<Probe> {
        let probe = Arc::new(Probe {
            params: std::sync::Mutex::new((0, 0, 1)),
            seen: std::sync::Mutex::new(Vec::new()),
            graph: std::sync::OnceLock::new(),
            executor: Executor::new(2).unwrap(),
            pool: Arc::new(Pool::default()),
        });
        // The kernel holds the probe weakly: the graph, inside the probe, must not keep it alive.
        let weak = Arc::downgrade(&probe);
        let mut b = GraphBuilder::new();
        let n = b
            .add_node(
                NodeDesc::new(
                    "probe",
                    "Probe",
                    Box::new(move |ctx| {
                        let p = weak.upgrade().ok_or("probe gone")?;
                        let (begin, end, grain) = *p.params.lock().unwrap();
                        ctx.parallel_for(begin..end, grain, &|r: std::ops::Range<usize>| {
                            p.seen.lock().unwrap().push(r)
                        })
                    }),
                )
                .output(8),
            )
            .unwrap();
        b.mark_output(ValueRef::new(n, 0)).unwrap();
        assert!(probe.graph.set(Arc::new(b.finalize().unwrap())).is_ok());
        probe
    }

    /// The chunks one loop over `begin..end` in `grain`s ran, sorted, on or off the executor.
    fn chunks(&self, begin: usize, end: usize, grain: usize, on_executor: bool) -> Vec<std::ops::Range<usize>> {
        *self.params.lock().unwrap() = (begin, end, grain);
        self.seen.lock().unwrap().clear();
        let options = RunOptions {
            executor: on_executor.then_some(&self.executor),
            force_executor: true,
            ..Default::default()
        };
        graphsched::run(self.graph.get().unwrap(), &self.pool, &options)
            .unwrap_or_else(|e| panic!("loop ({begin}, {end}, {grain}), executor {on_executor}: {e}"));
        let mut seen = std::mem::take(&mut *self.seen.lock().unwrap());
        seen.sort_by_key(|r| r.start);
        seen
    }

    /// Checks that the chunks are non-empty, at most a grain long (the grain raised as the docs
    /// say when the range would make over `u32::MAX` chunks), and tile `begin..end` exactly.
    fn check(&self, begin: usize, end: usize, grain: usize) {
        let len = end.saturating_sub(begin);
        let most = grain.max(1).max(len.div_ceil(u32::MAX as usize));
        for on_executor in [false, true] {
            let seen = self.chunks(begin, end, grain, on_executor);
            let what = format!("loop ({begin}, {end}, {grain}), executor {on_executor}: chunks {seen:?}");
            let mut next = begin;
            for r in &seen {
                assert!(r.start == next && r.start < r.end && r.end <= end, "{what}");
                assert!(r.end - r.start <= most, "{what}");
                next = r.end;
            }
            assert_eq!(next, begin.max(end), "{what}");
        }
    }
}

#[test]
fn chunks_whose_end_would_overflow_stop_at_the_range_end() {
    use std::ops::Range;
    let probe = Probe::new();
    let max = usize::MAX;
    for on_executor in [false, true] {
        assert_eq!(probe.chunks(1, 100, max, on_executor), [Range { start: 1, end: 100 }]);
        assert_eq!(
            probe.chunks(50, 100, max - 20, on_executor),
            [Range { start: 50, end: 100 }]
        );
        let tail = probe.chunks(max - 100, max, 7, on_executor);
        assert_eq!((tail.len(), tail.last().cloned()), (15, Some(max - 2..max)));
        let huge = probe.chunks(0, max, 1 << 61, on_executor);
        assert_eq!(huge.len(), 8);
        assert_eq!(huge[7], 7 << 61..max);
    }
}

/// Range ends and grains over the whole of `usize`, edges most often.
fn edgy() -> impl proptest::strategy::Strategy<Value = usize> {
    use proptest::prelude::*;
    prop_oneof![
        0..300usize,
        (0..300usize).prop_map(|d| usize::MAX - d),
        (0..64u32, 0..3usize).prop_map(|(s, d)| (1usize << s).wrapping_add(d).wrapping_sub(1)),
        any::<usize>(),
    ]
}

proptest::proptest! {
    #![proptest_config(proptest::prelude::ProptestConfig { cases: 400, ..Default::default() })]

    /// Every begin, end and grain: the chunks tile the range. Grains that would make more than
    /// 10,000 chunks give way to one making `chunks` of them, so that recording stays cheap.
    #[test]
    fn chunks_tile_every_range_exactly(begin in edgy(), end in edgy(), grain in edgy(), chunks in 1..10_000usize) {
        static PROBE: std::sync::OnceLock<Arc<Probe>> = std::sync::OnceLock::new();
        let probe = PROBE.get_or_init(Probe::new);
        let len = end.saturating_sub(begin);
        let grain = match len.div_ceil(grain.max(1)) > 10_000 {
            true => len.div_ceil(chunks),
            false => grain,
        };
        probe.check(begin, end, grain);
    }
}
