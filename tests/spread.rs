//! A run given an executor goes on its threads only where they are expected to save more kernel
//! time than they cost (`sched/spread.rs`): a graph of kernels of a few nanoseconds runs on its
//! caller once its op types are measured, one of long kernels stays on the threads, and a graph
//! with a deferring kernel, or one whose estimates are still guesses, always spreads.

mod common;

use std::sync::Arc;
use std::time::{Duration, Instant};

use graphsched::{Executor, Graph, GraphBuilder, NodeDesc, Pool, RunOptions, ValueRef};

/// A root feeding `width` nodes of op type "Mid" with `kernel`, all read by one join. Given
/// `estimate_ns`, the middle nodes are estimated at it and the root and the join at 1 ns.
fn fan_of(width: u32, kernel: impl Fn() -> graphsched::Kernel, estimate_ns: Option<u64>) -> Arc<Graph> {
    let mut b = GraphBuilder::new();
    let estimated = |d: NodeDesc| match estimate_ns {
        Some(_) => d.estimate_ns(1),
        None => d,
    };
    let root = b
        .add_node(estimated(NodeDesc::new("root", "Root", common::empty()).output(64)))
        .unwrap();
    let mut join = estimated(NodeDesc::new("join", "Join", common::empty()).output(16));
    for i in 0..width {
        let mut d = NodeDesc::new(format!("m{i}"), "Mid", kernel())
            .input(ValueRef::new(root, 0))
            .output(64);
        if let Some(ns) = estimate_ns {
            d = d.estimate_ns(ns);
        }
        join = join.input(ValueRef::new(b.add_node(d).unwrap(), 0));
    }
    let join = b.add_node(join).unwrap();
    b.mark_output(ValueRef::new(join, 0)).unwrap();
    Arc::new(b.finalize().unwrap())
}

/// A kernel that keeps its thread busy for `us` microseconds.
fn spin(us: u64) -> graphsched::Kernel {
    Box::new(move |_| {
        let start = Instant::now();
        while start.elapsed() < Duration::from_micros(us) {
            std::hint::spin_loop();
        }
        Ok(())
    })
}

/// The threads each of `runs` runs of `g` on `executor` could use.
fn threads(g: &Arc<Graph>, executor: &Executor, force_executor: bool, runs: usize) -> Vec<u64> {
    let pool = Arc::new(Pool::default());
    let options = RunOptions {
        executor: Some(executor),
        force_executor,
        ..Default::default()
    };
    (0..runs)
        .map(|_| graphsched::run(g, &pool, &options).unwrap().stats().threads)
        .collect()
}

#[test]
fn empty_kernels_run_on_the_caller_once_they_are_measured() {
    let executor = Executor::new(2).unwrap();
    let g = fan_of(200, common::empty, None);
    let seen = threads(&g, &executor, false, 3);
    assert_eq!(seen[0], 2, "the first run knows nothing of its kernels: it spreads");
    let p = g.priorities();
    assert!(!p.unmeasured() && !p.defers());
    // Runs that learn nothing more follow these priorities. The decision is the model's: the
    // kernels' measured time (a moving average: one preempted call can lift it for a while)
    // against 150 ns a node.
    let frozen = RunOptions {
        executor: Some(&executor),
        freeze_estimates: true,
        ..Default::default()
    };
    let pool = Arc::new(Pool::default());
    let expected = if p.spreading_pays(2) { 2 } else { 1 };
    for _ in 0..5 {
        assert_eq!(graphsched::run(&g, &pool, &frozen).unwrap().stats().threads, expected);
    }
    // Two threads save half the work at most: they pay for themselves (30 us here) only above
    // about 300 ns a kernel. Empty kernels, unoptimized, measure about 100 ns.
    let mid_ns = g.learned_op_ns(g.op_index(1));
    if mid_ns < 250 {
        assert_eq!(expected, 1, "kernels of {mid_ns} ns cannot pay for the threads");
    }
}

#[test]
fn the_caller_can_keep_the_executor() {
    let executor = Executor::new(2).unwrap();
    let g = fan_of(200, common::empty, Some(10));
    let seen = threads(&g, &executor, true, 4);
    assert!(seen.iter().all(|&t| t == 2), "forced onto the executor: {seen:?}");
    assert_eq!(threads(&g, &executor, false, 1), [1], "without the flag: on the caller");
}

#[test]
fn long_kernels_keep_the_threads() {
    let executor = Executor::new(2).unwrap();
    // 8 kernels of 50 us: 400 us of work, of which two threads save about 200.
    let g = fan_of(8, || spin(50), None);
    let seen = threads(&g, &executor, false, 6);
    assert!(seen.iter().all(|&t| t == 2), "{seen:?}");
    assert!(g.priorities().spreading_pays(2));
}

#[test]
fn given_estimates_decide_once_every_op_type_is_measured() {
    let executor = Executor::new(2).unwrap();
    // 100 kernels estimated at 50 ns (the join and the root at 1 ns): two threads would save
    // 2.5 us and cost 15. The same fan estimated at 10 us a kernel: they would save 500 us.
    for (estimate, then) in [(50, 1), (10_000, 2)] {
        let g = fan_of(100, common::empty, Some(estimate));
        assert_eq!(threads(&g, &executor, false, 1), [2], "measured by no run yet: spread");
        assert_eq!(
            threads(&g, &executor, false, 3),
            [then; 3],
            "estimated at {estimate} ns"
        );
        assert_eq!(threads(&g, &executor, true, 1), [2]);
    }
}

#[test]
fn one_thread_overlaps_nothing_but_deferred_nodes() {
    let one = Executor::new(1).unwrap();
    let g = fan_of(50, common::empty, Some(1_000_000));
    assert!(
        g.priorities().spreading_pays(1),
        "unmeasured: on the executor, as runs always went"
    );
    assert_eq!(threads(&g, &one, false, 1), [1]);
    let p = g.priorities();
    assert!(!p.spreading_pays(1), "measured: one thread saves no kernel time");
    assert!(p.spreading_pays(2), "two save 25 ms of kernel time");
}

#[test]
fn a_deferring_kernel_always_spreads() {
    let executor = Executor::new(2).unwrap();
    // Each middle kernel defers its end and completes it at once, from its own thread: short,
    // and so estimated, but a graph whose kernels have deferred keeps the threads (alone, the
    // caller would wait out each deferral).
    let deferring = || -> graphsched::Kernel {
        Box::new(|ctx| {
            let c = ctx.defer().map_err(|e| e.to_string())?;
            c.complete(Ok(()));
            Ok(())
        })
    };
    let g = fan_of(200, deferring, Some(1));
    let seen = threads(&g, &executor, false, 6);
    assert!(seen.iter().all(|&t| t == 2), "{seen:?}");
    assert!(g.priorities().defers());
}

#[test]
fn a_first_deferral_sends_later_runs_back_to_the_threads() {
    use std::sync::atomic::{AtomicBool, Ordering};
    static DEFER: AtomicBool = AtomicBool::new(false);
    let executor = Executor::new(2).unwrap();
    // Estimated short: once measured, runs go to the caller. Then the kernels start to defer
    // (completing at once, from their own thread), in a run that times no call at all.
    let kernel = || -> graphsched::Kernel {
        Box::new(|ctx| {
            if DEFER.load(Ordering::Relaxed) {
                ctx.defer().map_err(|e| e.to_string())?.complete(Ok(()));
            }
            Ok(())
        })
    };
    let g = fan_of(100, kernel, Some(10));
    assert_eq!(threads(&g, &executor, false, 3), [2, 1, 1]);
    DEFER.store(true, Ordering::Relaxed);
    let pool = Arc::new(Pool::default());
    let untimed = RunOptions {
        executor: Some(&executor),
        freeze_estimates: true,
        ..Default::default()
    };
    let run = graphsched::run(&g, &pool, &untimed).unwrap();
    assert_eq!(run.stats().threads, 1, "decided before the deferrals");
    drop(run);
    assert!(g.priorities().defers(), "every deferral counts, timed or not");
    assert_eq!(graphsched::run(&g, &pool, &untimed).unwrap().stats().threads, 2);
}
