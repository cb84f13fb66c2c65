//! Building and finalizing graphs: validation errors and analysis figures.

mod common;

use common::{Ledger, Rng};
use graphsched::{ErrorKind, GraphBuilder, Kernel, NodeDesc, ValueRef};

fn noop() -> Kernel {
    Box::new(|_| Ok(()))
}

fn node(name: &str, inputs: &[ValueRef], est: u64) -> NodeDesc {
    let mut d = NodeDesc::new(name, "Op", noop()).output(64).estimate_ns(est);
    for &v in inputs {
        d = d.input(v);
    }
    d
}

fn v(node: u32) -> ValueRef {
    ValueRef::new(node, 0)
}

#[test]
fn diamond_levels_and_critical_path() {
    let mut b = GraphBuilder::new();
    let a = b.add_node(node("a", &[], 10)).unwrap();
    let bb = b.add_node(node("b", &[v(a)], 20)).unwrap();
    let c = b.add_node(node("c", &[v(a)], 5)).unwrap();
    let d = b.add_node(node("d", &[v(bb), v(c)], 1)).unwrap();
    b.mark_output(v(d)).unwrap();
    let g = b.finalize().unwrap();
    assert_eq!(g.topological_order(), &[a, bb, c, d]);
    let p = g.priorities();
    assert_eq!([a, bb, c, d].map(|n| p.bottom_level()[n as usize]), [31, 21, 6, 1]);
    assert_eq!([a, bb, c, d].map(|n| p.top_level()[n as usize]), [0, 10, 10, 30]);
    assert_eq!(g.critical_path(), &[a, bb, d]);
    let info = g.info();
    assert_eq!(
        (info.critical_path_ns, info.total_work_ns, info.critical_path_nodes),
        (31, 36, 3)
    );
    assert_eq!(
        (info.num_nodes, info.num_edges, info.num_outputs, info.num_values),
        (4, 4, 1, 4)
    );
    assert_eq!(info.static_bytes, 256);
    assert_eq!(info.node_lower_bound_bytes, 3 * 64, "d reads two values and writes one");
    assert_eq!(g.successors(a), &[bb, c]);
}

#[test]
fn forward_references_resolve_and_producers_come_first() {
    let mut b = GraphBuilder::new();
    // "late" reads node 1, added after it.
    let late = b.add_node(node("late", &[v(1)], 1)).unwrap();
    let early = b.add_node(node("early", &[], 1)).unwrap();
    let g = b.finalize().unwrap();
    assert_eq!(g.topological_order(), &[early, late]);
}

#[test]
fn cycles_are_reported_with_their_nodes() {
    let mut b = GraphBuilder::new();
    b.add_node(node("a", &[v(2)], 1)).unwrap();
    b.add_node(node("b", &[v(0)], 1)).unwrap();
    b.add_node(node("c", &[v(1)], 1)).unwrap();
    let e = b.finalize().unwrap_err();
    assert_eq!(e.kind(), ErrorKind::Cycle);
    let m = e.message();
    assert!(
        [
            "'a' -> 'b' -> 'c' -> 'a'",
            "'b' -> 'c' -> 'a' -> 'b'",
            "'c' -> 'a' -> 'b' -> 'c'"
        ]
        .iter()
        .any(|c| m.contains(c)),
        "{m}"
    );

    let mut b = GraphBuilder::new();
    b.add_node(node("ok", &[], 1)).unwrap();
    b.add_node(node("selfish", &[v(1)], 1)).unwrap();
    let e = b.finalize().unwrap_err();
    assert_eq!(e.kind(), ErrorKind::Cycle);
    assert!(e.message().contains("'selfish' -> 'selfish'"), "{}", e.message());
}

#[test]
fn a_long_cycle_is_found_without_recursion_and_shortened() {
    let n = 200_000u32;
    let mut b = GraphBuilder::new();
    for i in 0..n {
        let prev = if i == 0 { n - 1 } else { i - 1 };
        b.add_node(node(&format!("n{i}"), &[v(prev)], 1)).unwrap();
    }
    let e = b.finalize().unwrap_err();
    assert_eq!(e.kind(), ErrorKind::Cycle);
    assert!(
        e.message().contains("more"),
        "long cycles are elided: {}",
        &e.message()[..200.min(e.message().len())]
    );
    assert!(e.message().len() < 1000);
}

#[test]
fn a_long_chain_finalizes_without_recursion() {
    let n = 300_000u32;
    let mut b = GraphBuilder::new();
    for i in 0..n {
        let ins: &[ValueRef] = if i == 0 { &[] } else { &[v(i - 1)] };
        b.add_node(node(&format!("n{i}"), ins, 2)).unwrap();
    }
    let g = b.finalize().unwrap();
    assert_eq!(g.info().critical_path_ns, 2 * n as u64);
    assert_eq!(g.critical_path().len(), n as usize);
}

#[test]
fn reference_errors_name_the_culprit_and_leave_the_builder_usable() {
    let mut b = GraphBuilder::new();
    b.add_node(node("reader", &[v(1)], 1)).unwrap();
    let e = b.finalize().unwrap_err();
    assert_eq!(e.kind(), ErrorKind::UnknownValue);
    assert!(
        e.message().contains("'reader'") && e.message().contains("node 1"),
        "{}",
        e.message()
    );
    // Add what was missing, then it finalizes.
    b.add_node(node("writer", &[], 1)).unwrap();
    b.finalize().unwrap();

    let mut b = GraphBuilder::new();
    b.add_node(node("two", &[], 1)).unwrap();
    b.add_node(node("reader", &[ValueRef::new(0, 3)], 1)).unwrap();
    let e = b.finalize().unwrap_err();
    assert_eq!(e.kind(), ErrorKind::OutputIndex);
    assert!(
        e.message().contains("output 3 of node 'two'") && e.message().contains("'reader'"),
        "{}",
        e.message()
    );

    let mut b = GraphBuilder::new();
    b.add_node(node("x", &[], 1)).unwrap();
    b.mark_output(ValueRef::new(7, 0)).unwrap();
    assert_eq!(b.finalize().unwrap_err().kind(), ErrorKind::UnknownValue);
}

#[test]
fn add_time_errors() {
    let mut b = GraphBuilder::new();
    b.add_node(node("x", &[], 1)).unwrap();
    let e = b.add_node(node("x", &[], 1)).unwrap_err();
    assert_eq!(e.kind(), ErrorKind::DuplicateName);
    assert!(e.message().contains("'x'"));
    assert_eq!(b.add_input("x", 16).unwrap_err().kind(), ErrorKind::DuplicateName);
    assert_eq!(b.add_node(node("", &[], 1)).unwrap_err().kind(), ErrorKind::EmptyName);
    assert_eq!(b.add_input("", 16).unwrap_err().kind(), ErrorKind::EmptyName);
    // An output of 0 bytes is an empty tensor (tests/empty_tensors.rs), not a mistake.
    b.add_node(NodeDesc::new("zero", "Op", noop()).output(0)).unwrap();
    assert_eq!(
        b.add_node(NodeDesc::new("none", "Op", noop())).unwrap_err().kind(),
        ErrorKind::InvalidArgument
    );
    assert_eq!(
        b.add_node(NodeDesc::new("nul\0", "Op", noop()).output(1))
            .unwrap_err()
            .kind(),
        ErrorKind::InvalidArgument
    );
    let e = b
        .add_node(NodeDesc::new("huge", "Op", noop()).output(usize::MAX - 1))
        .unwrap_err();
    assert_eq!(e.kind(), ErrorKind::SizeOverflow);
    let half = graphsched::graph::MAX_VALUE_BYTES / 2 + 1;
    let e = b
        .add_node(NodeDesc::new("sum", "Op", noop()).output(half).output(half))
        .unwrap_err();
    assert_eq!(e.kind(), ErrorKind::SizeOverflow);
    assert!(e.message().contains("'sum'"));
    b.add_input("in", 0).expect("an input of 0 bytes is an empty tensor");
    // None of the failures added anything: x, zero and in are the nodes.
    assert_eq!(b.node_count(), 3);
    b.finalize().unwrap();
    assert_eq!(
        b.add_node(node("late", &[], 1)).unwrap_err().kind(),
        ErrorKind::Finalized
    );
    assert_eq!(b.mark_output(v(0)).unwrap_err().kind(), ErrorKind::Finalized);
    assert_eq!(b.finalize().unwrap_err().kind(), ErrorKind::Finalized);
}

/// On random DAGs: the order respects every edge, levels satisfy their recurrences, and the
/// critical path is a real path whose weights add up to the reported length.
#[test]
fn analysis_invariants_on_random_dags() {
    let ledger = Ledger::default();
    for seed in 0..300 {
        let mut rng = Rng::new(seed);
        let nodes = 1 + rng.below(60) as usize;
        let inputs = rng.below(3) as usize;
        let (mut b, _) = common::random_dag(&mut rng, &ledger, inputs, nodes, 4, 64);
        let g = b.finalize().unwrap();
        let n = g.node_count();
        let mut pos = vec![usize::MAX; n];
        for (i, &node) in g.topological_order().iter().enumerate() {
            assert_eq!(pos[node as usize], usize::MAX, "node {node} ordered twice");
            pos[node as usize] = i;
            assert_eq!(g.topological_positions()[node as usize], i as u32);
        }
        let p = g.priorities();
        let w = |node: u32| {
            if g.is_graph_input(node) {
                0
            } else {
                g.estimate_ns(node).unwrap()
            }
        };
        for node in 0..n as u32 {
            for &val in g.node_inputs(node) {
                assert!(pos[g.value_producer(val) as usize] < pos[node as usize], "seed {seed}");
            }
            let best_succ = g
                .successors(node)
                .iter()
                .map(|&s| p.bottom_level()[s as usize])
                .max()
                .unwrap_or(0);
            assert_eq!(
                p.bottom_level()[node as usize],
                w(node) + best_succ,
                "seed {seed} node {node}"
            );
        }
        let cp = g.critical_path();
        let sum: u64 = cp.iter().map(|&node| w(node)).sum();
        assert_eq!(sum, g.info().critical_path_ns, "seed {seed}");
        for pair in cp.windows(2) {
            assert!(
                g.successors(pair[0]).contains(&pair[1]),
                "seed {seed}: {pair:?} is not an edge"
            );
        }
    }
}

/// The critical path the C API and `info` report is the one the scheduler follows: after runs
/// have learned that an op type is slow, the path goes through it.
#[test]
fn the_reported_critical_path_follows_learned_estimates() {
    use graphsched::{Pool, RunOptions};
    use std::sync::Arc;
    let mut b = GraphBuilder::new();
    let slow = Box::new(|_: &mut graphsched::KernelCtx<'_>| {
        // Long enough that a preempted sample of the quick op (a no-op) stays far below it.
        std::thread::sleep(std::time::Duration::from_millis(30));
        Ok(())
    });
    let s = b.add_node(NodeDesc::new("slow", "Sleep", slow).output(8)).unwrap();
    let q1 = b.add_node(NodeDesc::new("q1", "Quick", noop()).output(8)).unwrap();
    let q2 = b
        .add_node(NodeDesc::new("q2", "Quick", noop()).output(8).input(v(q1)))
        .unwrap();
    let join = b
        .add_node(
            NodeDesc::new("join", "Quick", noop())
                .output(8)
                .input(v(s))
                .input(v(q2)),
        )
        .unwrap();
    b.mark_output(v(join)).unwrap();
    let g = Arc::new(b.finalize().unwrap());
    // Nothing measured: every node weighs the default, and the longer chain is critical.
    assert_eq!(g.critical_path(), vec![q1, q2, join]);
    assert_eq!(g.info().critical_path_nodes, 3);
    let pool = Arc::new(Pool::default());
    graphsched::run(&g, &pool, &RunOptions::default()).unwrap();
    assert!(g.learned_op_ns(g.op_index(s)) >= 30_000_000);
    assert_eq!(g.critical_path(), vec![s, join]);
    let info = g.info();
    assert_eq!(info.critical_path_nodes, 2);
    assert_eq!(info.critical_path_ns, g.expected_ns(s) + g.expected_ns(join));
}

/// Sampling counts a thread's nodes across its runs: a graph smaller than the sampling period,
/// run over and over by one thread, still learns that its op became slow.
#[test]
fn a_small_graph_run_again_and_again_keeps_learning() {
    use graphsched::{Executor, Pool, RunOptions};
    use std::sync::atomic::{AtomicBool, Ordering};
    use std::sync::Arc;
    static SLOW: AtomicBool = AtomicBool::new(false);
    let mut b = GraphBuilder::new();
    let k = Box::new(|_: &mut graphsched::KernelCtx<'_>| {
        if SLOW.load(Ordering::Relaxed) {
            std::thread::sleep(std::time::Duration::from_millis(1));
        }
        Ok(())
    });
    let n = b.add_node(NodeDesc::new("only", "Sometimes", k).output(8)).unwrap();
    b.mark_output(v(n)).unwrap();
    let g = Arc::new(b.finalize().unwrap());
    let pool = Arc::new(Pool::default());
    let executor = Executor::new(2).unwrap();
    for options in [
        RunOptions::default(),
        RunOptions {
            executor: Some(&executor),
            ..RunOptions::default()
        },
    ] {
        SLOW.store(false, Ordering::Relaxed);
        graphsched::run(&g, &pool, &options).unwrap();
        let fast = g.learned_samples();
        SLOW.store(true, Ordering::Relaxed);
        // More runs than the period of the cheapest op types (one call in 64 is timed).
        for _ in 0..128 {
            graphsched::run(&g, &pool, &options).unwrap();
        }
        assert!(g.learned_samples() > fast, "no run timed the kernel again");
    }
    assert!(g.learned_op_ns(g.op_index(n)) >= 100_000);
}

/// Every node of a small graph run again and again by one thread is timed now and then, not only
/// the ones at the same few positions of each run: in a chain of 8, the fourth node's op type
/// learns that it became slow.
#[test]
fn every_node_of_a_small_graph_is_timed_again() {
    use graphsched::{Pool, RunOptions};
    use std::sync::atomic::{AtomicBool, Ordering};
    use std::sync::Arc;
    static SLOW: AtomicBool = AtomicBool::new(false);
    let mut b = GraphBuilder::new();
    let mut prev = None;
    let mut fourth = 0;
    for i in 0..8u32 {
        let desc = match i {
            3 => NodeDesc::new(
                "fourth",
                "Sometimes",
                Box::new(|_: &mut graphsched::KernelCtx<'_>| {
                    if SLOW.load(Ordering::Relaxed) {
                        std::thread::sleep(std::time::Duration::from_millis(1));
                    }
                    Ok(())
                }),
            ),
            _ => NodeDesc::new(format!("n{i}"), "Quick", noop()),
        };
        let desc = match prev {
            Some(p) => desc.input(v(p)),
            None => desc,
        };
        let id = b.add_node(desc.output(8)).unwrap();
        if i == 3 {
            fourth = id;
        }
        prev = Some(id);
    }
    b.mark_output(v(prev.unwrap())).unwrap();
    let g = Arc::new(b.finalize().unwrap());
    let pool = Arc::new(Pool::default());
    graphsched::run(&g, &pool, &RunOptions::default()).unwrap();
    let fast = g.learned_op_ns(g.op_index(fourth));
    SLOW.store(true, Ordering::Relaxed);
    // Two periods of the cheapest op types (one call in 64 is timed).
    for _ in 0..128 {
        graphsched::run(&g, &pool, &RunOptions::default()).unwrap();
    }
    // One sample of 1 ms moves the average (weight 1/8) above 125 us.
    let now = g.learned_op_ns(g.op_index(fourth));
    assert!(
        now >= 100_000,
        "the fourth node's op type still averages {now} ns (it was {fast})"
    );
}

/// Graph inputs live in the caller's memory: the memory-aware order gains nothing by being the
/// last reader of one, and starts the node that allocates less.
#[test]
fn the_memory_aware_order_ignores_graph_inputs() {
    let mut b = GraphBuilder::new();
    let x = b.add_input("x", 1000).unwrap();
    let r = b.add_node(NodeDesc::new("r", "Op", noop()).output(2000)).unwrap();
    let q = b
        .add_node(NodeDesc::new("q", "Op", noop()).input(x).input(v(r)).output(300))
        .unwrap();
    let p = b
        .add_node(NodeDesc::new("p", "Op", noop()).input(v(r)).output(100))
        .unwrap();
    let join = b.add_node(node("join", &[v(p), v(q)], 1)).unwrap();
    b.mark_output(v(join)).unwrap();
    let g = b.finalize().unwrap();
    let order = graphsched::graph::memory::memory_aware_order(&g);
    let at = |n: u32| order.iter().position(|&o| o == n).unwrap();
    assert!(at(p) < at(q), "order {order:?}: p allocates 100 bytes, q 300");
    assert_eq!(g.value_index(ValueRef::new(99, 0)), None, "a node that does not exist");
    assert_eq!(g.value_index(ValueRef::new(q, 1)), None, "an output q does not have");
    assert!(g.value_index(ValueRef::new(q, 0)).is_some());
}
