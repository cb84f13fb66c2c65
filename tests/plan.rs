//! Static plans on random DAGs: every plan verifies, sequential plans never need more than their
//! order's max-live bound allows by much, and runs on plans keep every checksum (parallel-safe
//! plans on 1 to 4 threads), with and without in-place nodes.

mod common;

use std::sync::Arc;

use common::{Ledger, Rng};
use graphsched::plan::{Mode, Order, Plan};
use graphsched::{run, Executor, GraphBuilder, NodeDesc, Pool, RunOptions, ValueRef};

/// A random DAG with checksum kernels; some nodes declared in place on their first input.
fn dag(rng: &mut Rng, ledger: &Ledger, nodes: usize) -> graphsched::Graph {
    let mut b = GraphBuilder::new();
    let mut values: Vec<(ValueRef, usize)> = Vec::new();
    let mut read = std::collections::HashSet::new();
    for n in 0..nodes {
        let fan_in = if values.is_empty() { 0 } else { 1 + rng.below(3) };
        let ins: Vec<(ValueRef, usize)> = (0..fan_in)
            .map(|_| values[rng.below(values.len() as u64) as usize])
            .collect();
        let out = 16 * (1 + rng.below(64) as usize);
        let refs: Vec<ValueRef> = ins.iter().map(|&(v, _)| v).collect();
        let mut d = NodeDesc::new(format!("n{n}"), "Op", ledger.kernel(refs.clone())).output(out);
        for &v in &refs {
            d = d.input(v);
            read.insert(v);
        }
        if let Some(&(_, first)) = ins.first() {
            if out <= first && rng.below(2) == 0 {
                d = d.in_place(0, 0);
            }
        }
        let id = b.add_node(d).unwrap();
        values.push((ValueRef::new(id, 0), out));
    }
    for (v, _) in values {
        if !read.contains(&v) {
            b.mark_output(v).unwrap();
        }
    }
    b.finalize().unwrap()
}

#[test]
fn plans_on_random_dags_verify_and_keep_checksums() {
    let executors: Vec<Executor> = (1..=4).map(|t| Executor::new(t).unwrap()).collect();
    let (mut aliased, mut constraints) = (0, 0);
    for seed in 0..150u64 {
        let mut rng = Rng::new(seed);
        let ledger = Ledger::default();
        let nodes = 1 + rng.below(50) as usize;
        let graph = Arc::new(dag(&mut rng, &ledger, nodes));
        for mode in [
            Mode::Sequential(Order::Topological),
            Mode::Sequential(Order::MemoryAware),
            Mode::ParallelSafe,
            // Planned for one thread count, run on another: the constraints keep it safe.
            Mode::Scheduled {
                threads: 1 + seed as usize % 4,
            },
        ] {
            let plan = Plan::new(&graph, mode).unwrap();
            plan.verify().unwrap_or_else(|e| panic!("seed {seed} {mode:?}: {e}"));
            aliased += plan.aliases();
            constraints += plan.scheduled().map_or(0, |s| s.constraints.len());
            let executor = match mode {
                Mode::ParallelSafe => Some(&executors[seed as usize % 4]),
                Mode::Scheduled { .. } => Some(&executors[(seed as usize + 1) % 4]),
                _ => None,
            };
            let pool = Arc::new(Pool::default());
            // Forced where an executor is given: short kernels would keep the run on its caller,
            // and a plan for the threads would go unchecked on them.
            let options = RunOptions {
                executor,
                force_executor: executor.is_some(),
                plan: Some(&plan),
                ..Default::default()
            };
            for _ in 0..2 {
                let result = run(&graph, &pool, &options).unwrap_or_else(|e| panic!("seed {seed} {mode:?}: {e}"));
                for &out in graph.graph_outputs() {
                    let v = graph.value_ref(out);
                    assert_eq!(
                        Some(common::fnv(result.output_bytes(v).unwrap())),
                        ledger.get(v),
                        "seed {seed} {mode:?}"
                    );
                }
            }
            assert_eq!(pool.stats().live_bytes, 0);
        }
    }
    assert!(aliased > 100, "in-place pairs were exercised ({aliased})");
    assert!(
        constraints > 100,
        "scheduled plans ordered nodes ({constraints} constraints)"
    );
}

/// Two chains, a1 -> a2 estimated long and b1 -> b2 estimated short. Planned for one thread,
/// a1's block goes to b1 once a2 is done; run on two threads, b1 would start beside a1 and
/// overwrite the block a2 reads, unless the run follows the plan's constraint (a2 before b1).
#[test]
fn a_scheduled_plan_holds_when_the_real_durations_differ_from_the_schedule() {
    let mut g = GraphBuilder::new();
    let fill = |byte: u8| -> graphsched::Kernel {
        Box::new(move |ctx| {
            ctx.output_bytes(0).unwrap().fill(byte);
            Ok(())
        })
    };
    let a1 = g
        .add_node(
            NodeDesc::new("a1", "Op", fill(0xA1))
                .output(4096)
                .estimate_ns(1_000_000),
        )
        .unwrap();
    let a2 = NodeDesc::new(
        "a2",
        "Op",
        Box::new(|ctx| {
            // Slower than b1 for real: b1 runs meanwhile on the other thread.
            std::thread::sleep(std::time::Duration::from_millis(5));
            match ctx.input_bytes(0).unwrap().iter().all(|&b| b == 0xA1) {
                true => Ok(()),
                false => Err("a1's output was overwritten while a2 read it".to_string()),
            }
        }),
    );
    let a2 = g
        .add_node(a2.input(ValueRef::new(a1, 0)).output(16).estimate_ns(1_000_000))
        .unwrap();
    let b1 = g
        .add_node(NodeDesc::new("b1", "Op", fill(0xB1)).output(4096).estimate_ns(10))
        .unwrap();
    let b2 = g
        .add_node(
            NodeDesc::new("b2", "Op", fill(0))
                .input(ValueRef::new(b1, 0))
                .output(16)
                .estimate_ns(10),
        )
        .unwrap();
    g.mark_output(ValueRef::new(a2, 0)).unwrap();
    g.mark_output(ValueRef::new(b2, 0)).unwrap();
    let graph = Arc::new(g.finalize().unwrap());
    let plan = Plan::new(&graph, Mode::Scheduled { threads: 1 }).unwrap();
    plan.verify().unwrap();
    let value = |n| graph.value_index(ValueRef::new(n, 0)).unwrap();
    assert_eq!(plan.offset(value(a1)), plan.offset(value(b1)), "b1 takes a1's block");
    let s = plan.scheduled().unwrap();
    assert_eq!(s.constraints, [(a2, b1)]);
    assert_eq!(
        s.makespan_ns, s.free_makespan_ns,
        "the one-thread schedule already had a2 first"
    );
    let parallel_safe = Plan::new(&graph, Mode::ParallelSafe).unwrap();
    assert!(plan.arena_bytes() < parallel_safe.arena_bytes());
    let executor = Executor::new(2).unwrap();
    let pool = Arc::new(Pool::default());
    for _ in 0..5 {
        let options = RunOptions {
            executor: Some(&executor),
            force_executor: true,
            plan: Some(&plan),
            ..Default::default()
        };
        run(&graph, &pool, &options).unwrap();
    }
    let limited = RunOptions {
        plan: Some(&plan),
        memory_limit_bytes: 1 << 20,
        ..Default::default()
    };
    let e = run(&graph, &pool, &limited).err().unwrap();
    assert!(e.message().contains("without a memory limit"), "{e}");
}
