//! Static plans on the real graphs and the seed pipeline: the verifier accepts them, sequential
//! plans reach the file-order lower bound, parallel-safe plans are never smaller.

use graphsched::plan::{Mode, Order, Plan};
use graphsched_workloads::{bundled_graphs, seed_pipeline, GraphFile};

fn check(file: &GraphFile) -> (f64, f64, f64) {
    let loaded = file.build(&mut |_| Box::new(|_| Ok(()))).unwrap();
    let g = &loaded.graph;
    let lb = file.max_live_bytes();
    let topo = Plan::new(g, Mode::Sequential(Order::Topological)).unwrap();
    topo.verify().unwrap();
    assert_eq!(
        topo.max_live_bytes(),
        lb,
        "{}: the plan's bound is the file's",
        file.name
    );
    let memory = Plan::new(g, Mode::Sequential(Order::MemoryAware)).unwrap();
    memory.verify().unwrap();
    let parallel = Plan::new(g, Mode::ParallelSafe).unwrap();
    parallel.verify().unwrap();
    assert!(
        parallel.arena_bytes() >= topo.arena_bytes().min(memory.arena_bytes())
            || parallel.arena_bytes() >= lb.min(memory.max_live_bytes())
    );
    let r = |p: &Plan| p.arena_bytes() as f64 / lb as f64;
    eprintln!(
        "{:>40}: topo {:.4}x  memory-order {:.4}x (its bound {:.4}x)  parallel-safe {:.4}x",
        file.name,
        r(&topo),
        r(&memory),
        memory.max_live_bytes() as f64 / lb as f64,
        r(&parallel)
    );
    (r(&topo), r(&memory), r(&parallel))
}

#[test]
fn plans_verify_and_sequential_plans_reach_the_bound() {
    for path in bundled_graphs() {
        let file = GraphFile::load(&path).unwrap();
        let (topo, _, _) = check(&file);
        assert!(
            topo <= 1.001,
            "{}: sequential plan at {topo:.4}x of the lower bound",
            file.name
        );
    }
    let (topo, _, _) = check(&seed_pipeline(1, 1.0));
    assert!(topo <= 1.10, "seed pipeline: sequential plan at {topo:.4}x");
}

/// Runs on plans: checksums hold sequentially and in parallel on parallel-safe plans, and from
/// the second run on the pool is asked for nothing but the arena (and the system for nothing).
#[test]
fn runs_on_plans_hold_checksums_and_allocate_only_the_arena() {
    use graphsched::{run, Executor, Pool, RunOptions};
    use graphsched_workloads::{checksum, Measured, Pace};
    use std::sync::Arc;

    let executor = Executor::new(2).unwrap();
    let mut files: Vec<GraphFile> = bundled_graphs().iter().map(|p| GraphFile::load(p).unwrap()).collect();
    files.push(seed_pipeline(2, 0.002));
    for file in files {
        let loaded = Measured::build(&file, Pace::Touch, Some(5)).unwrap();
        let g = &loaded.graph;
        let bindings = loaded.bindings();
        let sequential = Plan::new(g, Mode::Sequential(Order::MemoryAware)).unwrap();
        let parallel = Plan::new(g, Mode::ParallelSafe).unwrap();
        let scheduled = Plan::new(g, Mode::Scheduled { threads: 2 }).unwrap();
        let cases = [
            (Some(&sequential), None),
            (Some(&parallel), Some(&executor)),
            (Some(&parallel), None),
            (Some(&scheduled), Some(&executor)),
            (Some(&scheduled), None),
            // The graph's own plans, sequential and scheduled: made at the first run.
            (None, None),
            (None, Some(&executor)),
        ];
        for (plan, executor) in cases {
            let pool = Arc::new(Pool::default());
            // On the threads wherever an executor is given (the real graphs' kernels are short
            // and would keep some runs on their caller).
            let options = RunOptions {
                inputs: &bindings,
                executor,
                force_executor: executor.is_some(),
                plan,
                auto_plan: plan.is_none(),
                ..Default::default()
            };
            // The plan the graph makes for itself is the one a caller would make.
            let own = match executor {
                Some(_) => Plan::new(g, Mode::Scheduled { threads: 2 }).unwrap(),
                None => Plan::new(g, Mode::Sequential(Order::Topological)).unwrap(),
            };
            let plan = plan.unwrap_or(&own);
            for round in 0..3 {
                let before = pool.stats();
                let result = run(g, &pool, &options).unwrap_or_else(|e| panic!("{} {:?}: {e}", file.name, plan.mode()));
                let after = pool.stats();
                assert_eq!(
                    after.acquires - before.acquires,
                    1,
                    "{}: only the arena comes from the pool",
                    file.name
                );
                assert!(after.peak_live_bytes <= before.live_bytes + plan.arena_bytes());
                if round > 0 {
                    assert_eq!(
                        after.os_allocs, before.os_allocs,
                        "{}: a repeat run on a plan allocated",
                        file.name
                    );
                }
                for &out in g.graph_outputs() {
                    let v = g.value_ref(out);
                    assert_eq!(Some(checksum(result.output_bytes(v).unwrap())), loaded.ledger.get(v));
                }
            }
            assert_eq!(pool.stats().live_bytes, 0);
        }
        // A sequential plan refuses an executor: its order is the only one it is safe for.
        let options = RunOptions {
            inputs: &bindings,
            executor: Some(&executor),
            plan: Some(&sequential),
            ..Default::default()
        };
        assert!(run(g, &Arc::new(Pool::default()), &options).is_err());
    }
}

/// Elementwise nodes declared in place: plans shrink (never grow), still verify, and runs on
/// them and on the dynamic pool keep every checksum.
#[test]
fn in_place_plans_verify_shrink_and_keep_checksums() {
    use graphsched::{run, Executor, Pool, RunOptions};
    use graphsched_workloads::{checksum, Measured, Pace};
    use std::sync::Arc;

    let executor = Executor::new(2).unwrap();
    for path in bundled_graphs() {
        let plain = GraphFile::load(&path).unwrap();
        let file = plain.clone().with_elementwise_in_place();
        assert!(
            file.nodes.iter().any(|n| n.in_place.is_some()),
            "{}: some node is elementwise",
            file.name
        );
        let loaded = Measured::build(&file, Pace::Touch, Some(9)).unwrap();
        let g = &loaded.graph;
        let before = Plan::new(
            &plain.build(&mut |_| Box::new(|_| Ok(()))).unwrap().graph,
            Mode::ParallelSafe,
        )
        .unwrap();
        let bindings = loaded.bindings();
        for mode in [Mode::Sequential(Order::Topological), Mode::ParallelSafe] {
            let plan = Plan::new(g, mode).unwrap();
            plan.verify().unwrap();
            assert!((plan.aliases() > 0), "{}: some output takes its input over", file.name);
            if mode == Mode::ParallelSafe {
                assert!(
                    plan.arena_bytes() <= before.arena_bytes(),
                    "{}: in place never costs memory",
                    file.name
                );
            }
            let executor = (mode == Mode::ParallelSafe).then_some(&executor);
            let pool = Arc::new(Pool::default());
            let options = RunOptions {
                inputs: &bindings,
                executor,
                force_executor: executor.is_some(),
                plan: Some(&plan),
                ..Default::default()
            };
            let result = run(g, &pool, &options).unwrap_or_else(|e| panic!("{} {mode:?}: {e}", file.name));
            for &out in g.graph_outputs() {
                let v = g.value_ref(out);
                assert_eq!(
                    Some(checksum(result.output_bytes(v).unwrap())),
                    loaded.ledger.get(v),
                    "{}",
                    file.name
                );
            }
        }
        // The dynamic pool takes inputs over at run time.
        let pool = Arc::new(Pool::default());
        let options = RunOptions {
            inputs: &bindings,
            executor: Some(&executor),
            ..Default::default()
        };
        let result = run(g, &pool, &options).unwrap();
        for &out in g.graph_outputs() {
            let v = g.value_ref(out);
            assert_eq!(
                Some(checksum(result.output_bytes(v).unwrap())),
                loaded.ledger.get(v),
                "{}",
                file.name
            );
        }
    }
}
