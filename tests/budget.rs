//! A memory budget shared by the runs of one executor, and priorities across runs: the budget is
//! never exceeded, everything completes at the smallest feasible budget, a run that can never fit
//! is refused at once, and a high-priority run's nodes go ahead of a normal run's.

use std::sync::atomic::{AtomicBool, AtomicUsize, Ordering};
use std::sync::{Arc, Mutex};
use std::time::Duration;

use graphsched::sched::RunPriority;
use graphsched::{ErrorKind, Executor, Graph, GraphBuilder, NodeDesc, Pool, RunOptions, ValueRef};

/// A layered graph: `layers` of `width` nodes, each reading two nodes of the layer before, each
/// writing `bytes` and spinning a little. Deferred nodes (every `defer_every`th) complete from a
/// thread of their own; one node allocates a dynamic output of `bytes`.
fn layered(name: &str, layers: usize, width: usize, bytes: usize, defer_every: usize) -> Arc<Graph> {
    let mut b = GraphBuilder::new();
    let mut prev: Vec<ValueRef> = Vec::new();
    let mut k = 0;
    for l in 0..layers {
        let mut layer = Vec::new();
        for w in 0..width {
            k += 1;
            let defer = defer_every > 0 && k % defer_every == 0;
            let kernel: graphsched::Kernel = Box::new(move |ctx| {
                ctx.output_bytes(0).unwrap().fill(w as u8);
                std::hint::black_box((0..2000).sum::<u64>());
                if defer {
                    let c = ctx.defer().map_err(|e| e.to_string())?;
                    std::thread::spawn(move || {
                        std::thread::sleep(Duration::from_micros(50));
                        c.complete(Ok(()));
                    });
                }
                Ok(())
            });
            let mut d = NodeDesc::new(format!("{name}_{l}_{w}"), format!("{name}Op"), kernel).output(bytes);
            if !prev.is_empty() {
                d = d.input(prev[w % prev.len()]).input(prev[(w + 1) % prev.len()]);
            }
            layer.push(ValueRef::new(b.add_node(d).unwrap(), 0));
        }
        prev = layer;
    }
    let sink = b
        .add_node(
            NodeDesc::new(
                format!("{name}_sink"),
                "Sink",
                Box::new(move |ctx| {
                    ctx.alloc_output(0, bytes).map_err(|e| e.to_string())?;
                    Ok(())
                }),
            )
            .input(prev[0])
            .dynamic_output(),
        )
        .unwrap();
    b.mark_output(ValueRef::new(sink, 0)).unwrap();
    Arc::new(b.finalize().unwrap())
}

#[test]
fn many_runs_of_several_graphs_stay_within_one_budget_and_all_complete_at_the_smallest() {
    let graphs = [
        layered("a", 6, 4, 4096, 0),
        layered("b", 4, 8, 2048, 5),
        layered("c", 8, 2, 16384, 7),
    ];
    // Each run reserves its bound plus room for the sink's dynamic output (its own limit).
    let need = |g: &Graph| g.lowest_live_order().peak + 16384;
    let budget = graphs.iter().map(|g| need(g)).max().unwrap();
    let executor = Arc::new(Executor::new(3).unwrap());
    executor.set_memory_budget(budget).unwrap();
    let pool = Arc::new(Pool::default());
    let waited = Arc::new(AtomicUsize::new(0));
    std::thread::scope(|s| {
        for t in 0..6 {
            let (graphs, executor, pool, waited) = (&graphs, &executor, &pool, &waited);
            s.spawn(move || {
                for i in 0..8 {
                    let g = &graphs[(t + i) % graphs.len()];
                    let options = RunOptions {
                        executor: Some(executor),
                        memory_limit_bytes: need(g),
                        ..Default::default()
                    };
                    let r = graphsched::run(g, pool, &options).unwrap();
                    assert!(
                        r.stats().peak_live_bytes <= need(g),
                        "a run keeps within its reservation"
                    );
                    if r.budget_wait_ns() > 0 {
                        waited.fetch_add(1, Ordering::Relaxed);
                    }
                }
            });
        }
    });
    let stats = executor.memory_budget();
    assert_eq!(
        (stats.bytes, stats.reserved),
        (budget, 0),
        "every reservation went back"
    );
    assert!(stats.peak_reserved <= budget && stats.peak_reserved > 0, "{stats:?}");
    assert!(
        waited.load(Ordering::Relaxed) > 0,
        "48 runs on 6 threads under one run's budget waited"
    );
}

#[test]
fn without_a_limit_a_run_reserves_its_bound_and_completes() {
    // A layered graph whose sink's dynamic output is larger than everything else together:
    // refused at the run's limit whatever order the threads take (with a sink as small as a
    // value, a run whose sink came last found room under a loaded machine, and passed).
    let g = {
        let mut b = GraphBuilder::new();
        let mut prev: Option<ValueRef> = None;
        for l in 0..4 {
            let mut d = NodeDesc::new(format!("s_{l}"), "Op", Box::new(|_| Ok(()))).output(1024);
            if let Some(p) = prev {
                d = d.input(p);
            }
            prev = Some(ValueRef::new(b.add_node(d).unwrap(), 0));
        }
        let sink = NodeDesc::new(
            "s_sink",
            "Sink",
            Box::new(|ctx| {
                ctx.alloc_output(0, 64 << 10).map_err(|e| e.to_string())?;
                Ok(())
            }),
        )
        .input(prev.unwrap())
        .dynamic_output();
        let sink = b.add_node(sink).unwrap();
        b.mark_output(ValueRef::new(sink, 0)).unwrap();
        Arc::new(b.finalize().unwrap())
    };
    let mut b = GraphBuilder::new();
    let only = b
        .add_node(NodeDesc::new("n", "Op", Box::new(|_| Ok(()))).output(512))
        .unwrap();
    b.mark_output(ValueRef::new(only, 0)).unwrap();
    let executor = Executor::new(2).unwrap();
    let pool = Arc::new(Pool::default());
    // Room for the static values only: the dynamic sink output is refused at its limit.
    executor.set_memory_budget(g.lowest_live_order().peak).unwrap();
    let options = RunOptions {
        executor: Some(&executor),
        ..Default::default()
    };
    let e = graphsched::run(&g, &pool, &options)
        .err()
        .expect("no room for the dynamic output");
    assert_eq!(e.kind(), ErrorKind::MemoryLimit, "{e}");
    let single = Arc::new(b.finalize().unwrap());
    let r = graphsched::run(&single, &pool, &options).unwrap();
    assert_eq!(r.stats().peak_live_bytes, 512);
    assert_eq!(executor.memory_budget().reserved, 0);
}

#[test]
fn a_run_larger_than_the_whole_budget_is_refused_at_once() {
    let g = layered("big", 3, 3, 8192, 0);
    let executor = Executor::new(2).unwrap();
    executor.set_memory_budget(1000).unwrap();
    let pool = Arc::new(Pool::default());
    let started = std::time::Instant::now();
    let e = graphsched::run(
        &g,
        &pool,
        &RunOptions {
            executor: Some(&executor),
            ..Default::default()
        },
    )
    .err()
    .expect("refused");
    assert!(started.elapsed() < Duration::from_secs(2), "at once, not after a wait");
    assert_eq!(e.kind(), ErrorKind::MemoryLimit);
    let bound = g.lowest_live_order().peak;
    assert!(
        e.message().contains(&g.describe()) && e.message().contains(&bound.to_string()) && e.message().contains("1000"),
        "{e}"
    );
}

/// A one-node graph whose kernel notes the thread it runs on, tells `inside` it started, and
/// holds its output for `hold`.
fn held(
    name: &str,
    hold: Duration,
    ran_on: Arc<Mutex<Vec<String>>>,
    inside: std::sync::mpsc::SyncSender<()>,
) -> Arc<Graph> {
    let inside = Mutex::new(inside);
    let mut b = GraphBuilder::new();
    let kernel: graphsched::Kernel = Box::new(move |ctx| {
        let me = std::thread::current();
        ran_on.lock().unwrap().push(me.name().unwrap_or("").to_string());
        let _ = inside.lock().unwrap().try_send(());
        std::thread::sleep(hold);
        ctx.output_bytes(0).unwrap().fill(7);
        Ok(())
    });
    let n = b.add_node(NodeDesc::new(name, "Held", kernel).output(4096)).unwrap();
    b.mark_output(ValueRef::new(n, 0)).unwrap();
    Arc::new(b.finalize().unwrap())
}

/// A run of `g` on `executor`, from `pool`, at `priority`.
fn run_at(g: &Arc<Graph>, executor: &Executor, pool: &Arc<Pool>, priority: RunPriority) -> graphsched::Result<()> {
    let options = RunOptions {
        executor: Some(executor),
        priority,
        ..Default::default()
    };
    graphsched::run(g, pool, &options).map(|_| ())
}

/// Runs that wait in the budget are started by the run that makes room, on the executor's
/// threads, and their callers only wait. An executor of one thread has no worker at all: the
/// thread the first budget starts in the callers' place runs them (without it they would never
/// start).
#[test]
fn a_run_that_waits_is_run_on_the_executors_threads_while_its_caller_waits() {
    let ran_on = Arc::new(Mutex::new(Vec::new()));
    let (inside, started) = std::sync::mpsc::sync_channel(16);
    let g = held("h", Duration::from_millis(30), ran_on.clone(), inside);
    let executor = Executor::new(1).unwrap();
    executor.set_memory_budget(g.lowest_live_order().peak).unwrap();
    let pool = Arc::new(Pool::default());
    let run = || {
        let options = RunOptions {
            executor: Some(&executor),
            ..Default::default()
        };
        graphsched::run(&g, &pool, &options)
    };
    let waits = std::thread::scope(|s| {
        let first = s.spawn(|| run().unwrap().budget_wait_ns());
        // The first run holds the whole budget for its kernel's 30 ms: the next three queue.
        started.recv().unwrap();
        let rest: Vec<_> = (0..3)
            .map(|i| {
                std::thread::Builder::new()
                    .name(format!("client-{i}"))
                    .spawn_scoped(s, || run().unwrap().budget_wait_ns())
                    .unwrap()
            })
            .collect();
        let mut waits = vec![first.join().unwrap()];
        waits.extend(rest.into_iter().map(|t| t.join().unwrap()));
        waits
    });
    assert_eq!(waits[0], 0, "the first run entered at once");
    assert!(waits[1..].iter().all(|&w| w > 0), "the others waited: {waits:?}");
    let ran_on = ran_on.lock().unwrap();
    assert_eq!(ran_on.len(), 4);
    // The first ran on its caller (an executor of one thread has no worker); the queued ones on
    // the executor's thread, never on a client.
    assert!(
        ran_on[1..].iter().all(|t| t.starts_with("graphsched-")),
        "queued runs ran on {ran_on:?}"
    );
    assert_eq!(executor.memory_budget().reserved, 0);
}

/// An urgent run that finds runs queued for the budget goes ahead of them: a run holds the whole
/// budget, a normal run queues behind it, then an urgent one; the urgent one runs next. Fails if
/// entry ignores priority (first come, first served alone runs the normal one first).
#[test]
fn an_urgent_run_enters_the_budget_ahead_of_older_normal_runs() {
    let log = Arc::new(Mutex::new(Vec::new()));
    let (inside, started) = std::sync::mpsc::sync_channel(16);
    let g = held("order", Duration::from_millis(40), log.clone(), inside);
    let executor = Executor::new(2).unwrap();
    executor.set_memory_budget(g.lowest_live_order().peak).unwrap();
    let pool = Arc::new(Pool::default());
    let run = |priority, name: &'static str| run_at(&g, &executor, &pool, priority).map(|_| name);
    let finished = Mutex::new(Vec::new());
    std::thread::scope(|s| {
        let first = s.spawn(|| run(RunPriority::Normal, "first"));
        started.recv().unwrap();
        // Each queues behind the first's 40 ms, the normal one first.
        let normal = s.spawn(|| {
            let r = run(RunPriority::Normal, "normal").unwrap();
            finished.lock().unwrap().push(r);
        });
        std::thread::sleep(Duration::from_millis(10));
        let urgent = s.spawn(|| {
            let r = run(RunPriority::High, "urgent").unwrap();
            finished.lock().unwrap().push(r);
        });
        first.join().unwrap().unwrap();
        normal.join().unwrap();
        urgent.join().unwrap();
    });
    assert_eq!(*finished.lock().unwrap(), ["urgent", "normal"]);
    assert_eq!(executor.memory_budget().reserved, 0);
}

/// A run queued when the budget is lowered below its need is refused when its turn comes, with
/// a sentence naming the graph and the budget; the run inside finishes, nothing is left
/// reserved.
#[test]
fn a_queued_run_whose_budget_is_lowered_below_it_is_refused_when_its_turn_comes() {
    let ran_on = Arc::new(Mutex::new(Vec::new()));
    let (inside, started) = std::sync::mpsc::sync_channel(16);
    let g = held("low", Duration::from_millis(60), ran_on.clone(), inside);
    let need = g.lowest_live_order().peak;
    let executor = Executor::new(2).unwrap();
    executor.set_memory_budget(need).unwrap();
    let pool = Arc::new(Pool::default());
    let run = || run_at(&g, &executor, &pool, RunPriority::Normal);
    let (first, second) = std::thread::scope(|s| {
        let first = s.spawn(run);
        started.recv().unwrap();
        let second = s.spawn(run);
        // The second queues behind the first's 60 ms; then the budget drops below both.
        std::thread::sleep(Duration::from_millis(20));
        executor.set_memory_budget(need - 1).unwrap();
        (first.join().unwrap(), second.join().unwrap())
    });
    assert!(first.is_ok(), "the run inside keeps its reservation");
    let e = second.expect_err("refused");
    assert_eq!(e.kind(), ErrorKind::MemoryLimit, "{e}");
    assert!(
        e.message().contains(&g.describe()) && e.message().contains(&format!("lowered to {}", need - 1)),
        "{e}"
    );
    assert_eq!(ran_on.lock().unwrap().len(), 1, "the refused run ran no kernel");
    assert_eq!(executor.memory_budget().reserved, 0);
}

/// Nodes that, once `go` is set, note the order they start in.
fn fan(
    name: &str,
    width: usize,
    go: &Arc<AtomicBool>,
    order: &Arc<Mutex<Vec<String>>>,
    started: &Arc<AtomicUsize>,
) -> Arc<Graph> {
    let mut b = GraphBuilder::new();
    for i in 0..width {
        let (go, order, started) = (go.clone(), order.clone(), started.clone());
        let who = format!("{name}{i}");
        let kernel: graphsched::Kernel = Box::new(move |_| {
            order.lock().unwrap().push(who.clone());
            started.fetch_add(1, Ordering::SeqCst);
            while !go.load(Ordering::Acquire) {
                std::thread::yield_now();
            }
            std::thread::sleep(Duration::from_micros(200));
            Ok(())
        });
        let id = b
            .add_node(
                NodeDesc::new(format!("{name}{i}"), "Wait", kernel)
                    .output(8)
                    .estimate_ns(200_000),
            )
            .unwrap();
        b.mark_output(ValueRef::new(id, 0)).unwrap();
    }
    Arc::new(b.finalize().unwrap())
}

/// A normal run of 40 nodes holds both threads; a run of 24 comes in; then everything goes. How
/// many of the normal run's nodes start before the last node of the newcomer.
fn normal_nodes_ahead_of_the_last(priority: RunPriority) -> usize {
    let go = Arc::new(AtomicBool::new(false));
    let order = Arc::new(Mutex::new(Vec::new()));
    let started = Arc::new(AtomicUsize::new(0));
    let low = fan("low", 40, &go, &order, &started);
    let high = fan("high", 24, &go, &order, &started);
    let executor = Executor::new(2).unwrap();
    let pool = Arc::new(Pool::default());
    std::thread::scope(|s| {
        s.spawn(|| {
            let options = RunOptions {
                executor: Some(&executor),
                force_executor: true,
                ..Default::default()
            };
            graphsched::run(&low, &pool, &options).unwrap();
        });
        // Both threads inside a normal node: the rest of it is queued.
        while started.load(Ordering::SeqCst) < 2 {
            std::thread::yield_now();
        }
        s.spawn(|| {
            let options = RunOptions {
                executor: Some(&executor),
                force_executor: true,
                priority,
                ..Default::default()
            };
            graphsched::run(&high, &pool, &options).unwrap();
        });
        // The newcomer's caller is inside its first node, the other 23 queued.
        while started.load(Ordering::SeqCst) < 3 {
            std::thread::yield_now();
        }
        std::thread::sleep(Duration::from_millis(20));
        go.store(true, Ordering::Release);
    });
    let order = order.lock().unwrap();
    let last_high = order.iter().rposition(|n| n.starts_with("high")).unwrap();
    order[..last_high].iter().filter(|n| n.starts_with("low")).count()
}

#[test]
fn a_high_priority_run_is_taken_before_a_normal_one_on_every_thread() {
    let urgent = normal_nodes_ahead_of_the_last(RunPriority::High);
    // The two normal nodes already running, and at most one a thread took as it freed itself
    // before seeing the urgent queue.
    assert!(
        urgent <= 4,
        "{urgent} normal nodes started before the urgent run's last"
    );
    // Without priority the normal run's caller keeps taking its own run's nodes while the
    // newcomer's 24 go at most two at a time: at least about a dozen normal nodes start first,
    // however the threads are scheduled.
    let equal = normal_nodes_ahead_of_the_last(RunPriority::Normal);
    assert!(
        equal > urgent + 6,
        "without priority the normal run's queued nodes go first: {equal} vs {urgent}"
    );
}

#[test]
fn the_simulator_replays_runs_arriving_with_their_priorities() {
    use graphsched::sim::{replay, ReplayRun};
    let wide = |name: &str, n: usize, ns: u64| {
        let mut b = GraphBuilder::new();
        for i in 0..n {
            b.add_node(
                NodeDesc::new(format!("{name}{i}"), "Op", Box::new(|_| Ok(())))
                    .output(8)
                    .estimate_ns(ns),
            )
            .unwrap();
        }
        b.finalize().unwrap()
    };
    let (batch, request) = (wide("b", 60, 1000), wide("r", 6, 1000));
    let at = |priority| {
        let runs = [
            ReplayRun {
                graph: &batch,
                arrival_ns: 0,
                priority: RunPriority::Normal,
            },
            ReplayRun {
                graph: &request,
                arrival_ns: 10_500,
                priority,
            },
        ];
        replay(&runs, 3, Default::default()).unwrap()
    };
    let (urgent, equal) = (at(RunPriority::High), at(RunPriority::Normal));
    // Three threads: the request's 6 nodes take two waves once the running nodes end at 11 us.
    assert_eq!(urgent[1].end_ns, 13_000);
    assert_eq!(equal[1].end_ns, 22_000, "behind the batch's 27 queued nodes");
    let last = |t: &[graphsched::sim::RunTimes]| t.iter().map(|t| t.end_ns).max();
    assert_eq!(last(&urgent), last(&equal), "the same work, done as soon");
    assert!(
        urgent[0].end_ns > equal[0].end_ns,
        "the batch gives the request its turn"
    );
    assert!(replay(&[], 0, Default::default()).is_err());
}
