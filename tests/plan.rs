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
    let mut aliased = 0;
    for seed in 0..150u64 {
        let mut rng = Rng::new(seed);
        let ledger = Ledger::default();
        let nodes = 1 + rng.below(50) as usize;
        let graph = Arc::new(dag(&mut rng, &ledger, nodes));
        for mode in [
            Mode::Sequential(Order::Topological),
            Mode::Sequential(Order::MemoryAware),
            Mode::ParallelSafe,
        ] {
            let plan = Plan::new(&graph, mode).unwrap();
            plan.verify().unwrap_or_else(|e| panic!("seed {seed} {mode:?}: {e}"));
            aliased += plan.aliases();
            let executor = match mode {
                Mode::ParallelSafe => Some(&executors[seed as usize % 4]),
                _ => None,
            };
            let pool = Arc::new(Pool::default());
            let options = RunOptions {
                executor,
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
}
