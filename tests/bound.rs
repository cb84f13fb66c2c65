//! The makespan bound is a bound: no schedule is ever below it. Checked against the simulator's
//! schedules (every policy and window) on random DAGs, and against the true optimum, found by
//! exhaustive search, on small ones.

mod common;

use common::Rng;
use graphsched::sim::{simulate, SimOptions};
use graphsched::{Graph, GraphBuilder, NodeDesc, Policy, ValueRef};

/// A random DAG of `n` operator nodes with estimates in 1..=max_ns, each reading up to 3 earlier
/// nodes.
fn dag(rng: &mut Rng, n: usize, max_ns: u64) -> Graph {
    let mut b = GraphBuilder::new();
    for i in 0..n {
        let mut d = NodeDesc::new(format!("n{i}"), "Op", Box::new(|_| Ok(())))
            .output(16)
            .estimate_ns(1 + rng.below(max_ns));
        if i > 0 {
            for _ in 0..rng.below(4) {
                d = d.input(ValueRef::new(rng.below(i as u64) as u32, 0));
            }
        }
        b.add_node(d).unwrap();
    }
    b.finalize().unwrap()
}

/// The shortest makespan of any non-preemptive schedule on `p` threads: at each moment a node
/// finishes (and at 0), start any subset of the ready nodes that fits the free threads (waiting
/// on purpose included). Starting a node between two such moments is never better than at the
/// earlier one, so this covers every schedule.
fn optimum(g: &Graph, p: usize) -> u64 {
    let n = g.node_count();
    let w: Vec<u64> = (0..n as u32).map(|v| g.expected_ns(v)).collect();
    let preds: Vec<u64> = (0..n as u32)
        .map(|v| {
            g.node_inputs(v)
                .iter()
                .fold(0, |m, &val| m | 1 << g.value_producer(val))
        })
        .collect();
    let mut best = u64::MAX;
    search(&w, &preds, p, 0, 0, 0, &[], &mut best);
    best
}

#[allow(clippy::too_many_arguments)]
fn search(
    w: &[u64],
    preds: &[u64],
    p: usize,
    now: u64,
    done: u64,
    started: u64,
    running: &[(u64, usize)],
    best: &mut u64,
) {
    let n = w.len();
    if done.count_ones() as usize == n {
        *best = (*best).min(now);
        return;
    }
    // Even finishing everything that remains back to back on every thread cannot beat `best`.
    let ready: Vec<usize> = (0..n)
        .filter(|&v| started >> v & 1 == 0 && preds[v] & !done == 0)
        .collect();
    let free = p - running.len();
    // Every subset of the ready nodes of at most `free` nodes.
    for mask in 0u32..1 << ready.len() {
        if mask.count_ones() as usize > free || (mask == 0 && running.is_empty()) {
            continue;
        }
        let mut run = running.to_vec();
        let mut now_started = started;
        for (i, &v) in ready.iter().enumerate() {
            if mask >> i & 1 == 1 {
                run.push((now + w[v], v));
                now_started |= 1 << v;
            }
        }
        // Advance to the next finish.
        let next = run.iter().map(|&(t, _)| t).min().expect("something runs");
        if next >= *best {
            continue;
        }
        let mut now_done = done;
        run.retain(|&(t, v)| {
            if t == next {
                now_done |= 1 << v;
            }
            t != next
        });
        search(w, preds, p, next, now_done, now_started, &run, best);
    }
}

#[test]
fn no_schedule_beats_the_bound_not_even_the_optimum() {
    let mut tight = 0;
    for seed in 0..150u64 {
        let mut rng = Rng::new(seed);
        let n = 2 + rng.below(6) as usize;
        let g = dag(&mut rng, n, 20);
        for p in 1..=3usize {
            let bound = g.priorities().makespan_bound(p);
            let opt = optimum(&g, p);
            assert!(
                opt >= bound.makespan_lb_ns,
                "seed {seed}, {p} threads: optimum {opt} < bound {bound:?}"
            );
            // One thread: the bound is the work, and so is every schedule.
            tight += (p > 1 && opt == bound.makespan_lb_ns) as u32;
        }
    }
    // Not a vacuous bound: it meets the optimum on most of these small graphs (292 of 300 when
    // this was written).
    assert!(
        tight > 250,
        "the bound met the optimum {tight} times in 300 (2 and 3 threads)"
    );
}

#[test]
fn the_simulator_never_beats_the_bound() {
    for seed in 0..200u64 {
        let mut rng = Rng::new(seed);
        let n = 5 + rng.below(80) as usize;
        let g = dag(&mut rng, n, 1000);
        for threads in [1, 2, 3, 4, 8] {
            for policy in [Policy::CriticalPath, Policy::Fifo, Policy::BottomLevel] {
                for window in [0, 1, 2] {
                    let options = SimOptions {
                        threads,
                        policy,
                        window,
                        memory_limit_bytes: 0,
                    };
                    let r = simulate(&g, &options).unwrap();
                    let bound = g.priorities().makespan_bound(threads);
                    assert_eq!(r.makespan_lb_ns, bound.makespan_lb_ns);
                    assert!(
                        r.makespan_ns >= bound.makespan_lb_ns,
                        "seed {seed}, {threads} threads, {policy:?}, window {window}: {r:?} {bound:?}"
                    );
                }
            }
        }
    }
}

/// The bound is at least the old max(critical path, work / threads), and strictly above it
/// where a long node waits for most of the work.
#[test]
fn the_bound_tightens_the_plain_one() {
    let mut b = GraphBuilder::new();
    let parts: Vec<u32> = (0..3)
        .map(|i| {
            b.add_node(
                NodeDesc::new(format!("part{i}"), "Op", Box::new(|_| Ok(())))
                    .output(16)
                    .estimate_ns(10),
            )
            .unwrap()
        })
        .collect();
    let mut sink = NodeDesc::new("sink", "Op", Box::new(|_| Ok(())))
        .output(16)
        .estimate_ns(30);
    for &p in &parts {
        sink = sink.input(ValueRef::new(p, 0));
    }
    b.add_node(sink).unwrap();
    let g = b.finalize().unwrap();
    let bound = g.priorities().makespan_bound(2);
    assert_eq!(bound.makespan_lb_ns, 45, "{bound:?}");
    assert_eq!(bound.binding, graphsched::sched::BoundTerm::Before(3));
    assert_eq!(optimum(&g, 2), 50);
    for seed in 0..100u64 {
        let g = dag(&mut Rng::new(seed), 40, 1000);
        for threads in 1..=8 {
            let b = g.priorities().makespan_bound(threads);
            assert!(b.makespan_lb_ns >= b.critical_path_ns.max(b.work_ns.div_ceil(threads as u64)));
        }
    }
}
