//! What a kernel reaches of its run (the caller's per-run data, the pool and the executor, for
//! nested runs) and what an observer hears.

use std::collections::HashMap;
use std::sync::{Arc, Mutex};

use graphsched::{Executor, GraphBuilder, NodeDesc, NodeObservation, Observer, Pool, RunOptions, ValueRef};

fn u64_of(bytes: &[u8]) -> u64 {
    u64::from_ne_bytes(bytes[..8].try_into().unwrap())
}

/// Four callers run one graph at once on one executor, each with its own data: every kernel,
/// on whichever thread runs it, sees its own run's. The graph is four independent nodes, forced
/// onto the threads, so that the executor's threads run nodes of every run.
#[test]
fn each_run_shows_its_kernels_its_own_data() {
    let mut b = GraphBuilder::new();
    let echo = || -> graphsched::Kernel {
        Box::new(|ctx| {
            let data = ctx
                .run_data()
                .and_then(|d| d.downcast_ref::<u64>())
                .ok_or("no run data")?;
            let v = *data;
            ctx.output_bytes(0).unwrap().copy_from_slice(&v.to_ne_bytes());
            Ok(())
        })
    };
    let nodes: Vec<u32> = (0..4)
        .map(|i| {
            b.add_node(NodeDesc::new(format!("echo{i}"), "Echo", echo()).output(8))
                .unwrap()
        })
        .collect();
    for &n in &nodes {
        b.mark_output(ValueRef::new(n, 0)).unwrap();
    }
    let g = Arc::new(b.finalize().unwrap());
    let pool = Arc::new(Pool::default());
    let executor = Executor::new(2).unwrap();
    std::thread::scope(|s| {
        for k in 0..4u64 {
            let (g, pool, executor, nodes) = (&g, &pool, &executor, &nodes);
            s.spawn(move || {
                for i in 0..50u64 {
                    let data = k * 1000 + i;
                    let options = RunOptions {
                        executor: Some(executor),
                        force_executor: true,
                        data: Some(&data),
                        ..Default::default()
                    };
                    let r = graphsched::run(g, pool, &options).unwrap();
                    for &n in nodes {
                        assert_eq!(u64_of(r.output_bytes(ValueRef::new(n, 0)).unwrap()), data);
                    }
                }
            });
        }
    });
    let e = graphsched::run(&g, &pool, &RunOptions::default())
        .err()
        .expect("no data, the kernel fails");
    assert!(e.message().contains("no run data"), "{e}");
}

/// Runs `graph` (one node, one u64 output) nested, from a kernel, on the kernel's pool and
/// executor with `seed` as its data, and returns its output. Forced onto the threads: its short
/// kernels would keep it on this thread, and the nesting on the executor would go untested;
/// checked there.
fn run_nested(ctx: &graphsched::KernelCtx<'_>, graph: &Arc<graphsched::Graph>, seed: u64) -> Result<u64, String> {
    let pool = ctx.pool().ok_or("no pool")?.clone();
    let options = RunOptions {
        executor: ctx.executor(),
        force_executor: true,
        data: Some(&seed),
        ..Default::default()
    };
    let r = graphsched::run(graph, &pool, &options).map_err(|e| e.to_string())?;
    let threads = ctx.executor().map_or(1, |e| e.threads());
    if r.stats().threads as usize != threads {
        return Err(format!("a nested run on {} of {threads} threads", r.stats().threads));
    }
    Ok(u64_of(r.output_bytes(ValueRef::new(0, 0)).map_err(|e| e.to_string())?))
}

/// A graph of one node computing `seed * 3 + 1` from the u64 the run's data gives; with
/// `inner`, the node runs `inner` nested, on the run's pool and executor, and adds its result.
fn layer(name: &str, inner: Option<Arc<graphsched::Graph>>) -> Arc<graphsched::Graph> {
    let mut b = GraphBuilder::new();
    let n = b
        .add_node(
            NodeDesc::new(
                name,
                "Layer",
                Box::new(move |ctx| {
                    let seed = *ctx.run_data().and_then(|d| d.downcast_ref::<u64>()).ok_or("no seed")?;
                    let mut v = seed * 3 + 1;
                    if let Some(inner) = &inner {
                        v += run_nested(ctx, inner, seed)?;
                    }
                    ctx.output_bytes(0).unwrap().copy_from_slice(&v.to_ne_bytes());
                    Ok(())
                }),
            )
            .output(8),
        )
        .unwrap();
    b.mark_output(ValueRef::new(n, 0)).unwrap();
    Arc::new(b.finalize().unwrap())
}

#[test]
fn nested_runs_on_the_same_executor_finish_with_every_worker_inside_one() {
    // Three levels: each node of the outer graph runs `middle`, whose node runs `inner`.
    let inner = layer("inner", None);
    let middle = layer("middle", Some(inner));
    let mut b = GraphBuilder::new();
    let width = 12u64; // several times the threads: every thread ends up inside a nested run
    let mut outs = Vec::new();
    for k in 0..width {
        let middle = middle.clone();
        let n = b
            .add_node(
                NodeDesc::new(
                    format!("outer{k}"),
                    "Outer",
                    Box::new(move |ctx| {
                        let v = run_nested(ctx, &middle, k)?;
                        ctx.output_bytes(0).unwrap().copy_from_slice(&v.to_ne_bytes());
                        Ok(())
                    }),
                )
                .output(8),
            )
            .unwrap();
        b.mark_output(ValueRef::new(n, 0)).unwrap();
        outs.push(n);
    }
    let g = Arc::new(b.finalize().unwrap());
    let pool = Arc::new(Pool::default());
    for threads in [1, 2, 3] {
        let executor = Executor::new(threads).unwrap();
        for _ in 0..20 {
            let r = graphsched::run(
                &g,
                &pool,
                &RunOptions {
                    executor: Some(&executor),
                    force_executor: true,
                    ..Default::default()
                },
            )
            .unwrap();
            for (k, &n) in outs.iter().enumerate() {
                let k = k as u64;
                assert_eq!(
                    u64_of(r.output_bytes(ValueRef::new(n, 0)).unwrap()),
                    2 * (k * 3 + 1),
                    "{threads} threads"
                );
            }
        }
    }
}

#[derive(Default)]
struct Recorder {
    seen: Mutex<Vec<(bool, NodeObservation)>>,
}

impl Observer for Recorder {
    fn node_started(&self, at: &NodeObservation) {
        self.seen.lock().unwrap().push((true, *at));
    }
    fn node_finished(&self, at: &NodeObservation) {
        self.seen.lock().unwrap().push((false, *at));
    }
}

#[test]
fn an_observer_hears_every_node_start_and_end_once_in_order() {
    let mut b = GraphBuilder::new();
    let spin = |ctx: &mut graphsched::KernelCtx<'_>| {
        std::thread::sleep(std::time::Duration::from_micros(200));
        ctx.output_bytes(0).unwrap().fill(1);
        Ok(())
    };
    let roots: Vec<u32> = (0..6)
        .map(|i| {
            b.add_node(NodeDesc::new(format!("r{i}"), "R", Box::new(spin)).output(8))
                .unwrap()
        })
        .collect();
    let mut join = NodeDesc::new("join", "J", Box::new(spin)).output(8);
    for &r in &roots {
        join = join.input(ValueRef::new(r, 0));
    }
    let j = b.add_node(join).unwrap();
    let bad = b
        .add_node(
            NodeDesc::new("bad", "B", Box::new(|_| Err("no".into())))
                .input(ValueRef::new(j, 0))
                .output(8),
        )
        .unwrap();
    b.mark_output(ValueRef::new(bad, 0)).unwrap();
    let g = Arc::new(b.finalize().unwrap());
    let executor = Executor::new(3).unwrap();
    let recorder = Recorder::default();
    let options = RunOptions {
        executor: Some(&executor),
        observer: Some(&recorder),
        ..Default::default()
    };
    let e = graphsched::run(&g, &Arc::new(Pool::default()), &options)
        .err()
        .expect("'bad' fails");
    assert!(e.message().contains("'bad'"), "{e}");
    let seen = recorder.seen.into_inner().unwrap();
    let mut per_node: HashMap<u32, Vec<(bool, NodeObservation)>> = HashMap::new();
    for (started, at) in seen {
        per_node.entry(at.node).or_default().push((started, at));
    }
    assert_eq!(per_node.len(), 8, "every operator node ran once");
    for (node, events) in &per_node {
        let [(true, s), (false, f)] = events[..] else {
            panic!("node {node}: {events:?}")
        };
        // Heard at start just before the kernel; the end reports the kernel's own start and end,
        // timed after the first call returned.
        assert_eq!((s.end_ns, s.thread), (0, f.thread), "node {node}");
        assert!(
            s.start_ns <= f.start_ns && f.start_ns <= f.end_ns,
            "node {node}: {s:?} {f:?}"
        );
        if *node != bad {
            assert!(f.end_ns >= f.start_ns + 150_000, "node {node} slept 200 us: {f:?}");
        }
        assert!(f.thread < 3);
        assert_eq!(f.ok, *node != bad, "node {node}");
    }
    let join_start = per_node[&j][0].1.start_ns;
    for r in &roots {
        assert!(
            per_node[r][1].1.end_ns <= join_start,
            "the join starts after its inputs end"
        );
    }
}
