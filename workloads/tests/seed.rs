//! The seed pipeline matches its description: 240 nodes, 3 chains of 40, ~5.2 GB of outputs and
//! ~1.9 GB live at once in topological order at scale 1, one 80 ms node on the critical path
//! (at small scales, where compute rather than touching memory dominates).

use graphsched::sim::{simulate, SimOptions};
use graphsched_workloads::seed::{seed_pipeline, HEAVY_NS};

#[test]
fn the_seed_pipeline_has_the_published_shape() {
    let file = seed_pipeline(1, 1.0);
    assert_eq!(file.nodes.len(), 240);
    assert_eq!(
        file.nodes.iter().filter(|n| n.op == "Main" || n.op == "Heavy").count(),
        120
    );
    let total: u64 = file.nodes.iter().flat_map(|n| &n.outputs).map(|o| o.bytes as u64).sum();
    let live = file.max_live_bytes();
    eprintln!("seed pipeline: {total} bytes of outputs, {live} live at once in file order");
    assert!((4.6e9..5.8e9).contains(&(total as f64)), "total outputs {total}");
    assert!((1.6e9..2.2e9).contains(&(live as f64)), "max live {live}");
    // Deterministic, and scaled.
    assert_eq!(seed_pipeline(1, 1.0).max_live_bytes(), live);
    assert!(seed_pipeline(1, 0.001).max_live_bytes() < live / 500);

    // At full scale touching the bytes dominates; at 1% the compute does, and the heavy node
    // decides the critical path.
    let loaded = seed_pipeline(1, 0.01).build(&mut |_| Box::new(|_| Ok(()))).unwrap();
    let g = &loaded.graph;
    let heavy = g.find_node("main0_20").unwrap();
    assert!(g.estimate_ns(heavy).unwrap() >= HEAVY_NS);
    assert!(
        g.critical_path().contains(&heavy),
        "the heavy node is on the critical path"
    );
    let sim = simulate(
        g,
        &SimOptions {
            threads: 2,
            ..Default::default()
        },
    )
    .unwrap();
    assert!(sim.makespan_ns >= sim.makespan_lb_ns && sim.makespan_lb_ns >= HEAVY_NS);
}

/// The seed pipeline at scale 0.05 on 4 threads under a limit equal to its file-order max-live
/// bound used to fail its first run ("node 'main0_31' needs 776512 bytes ..."): admission let
/// nodes run ahead until nothing fit. Admission now keeps a safe completion order (the banker's
/// rule), so every run at that limit completes, on any number of threads.
#[test]
fn the_seed_pipeline_completes_at_its_file_order_bound() {
    use graphsched::{run, Executor, Pool, RunOptions};
    use std::sync::Arc;

    let file = seed_pipeline(1, 0.05);
    let limit = file.max_live_bytes();
    let loaded = file.build(&mut |_| Box::new(|_| Ok(()))).unwrap();
    let graph = loaded.graph.clone();
    assert!(graph.lowest_live_order().peak <= limit);
    let inputs = graphsched_workloads::graph_file::InputBuffers::new(&loaded.inputs, 1);
    let bindings = inputs.bindings();
    for threads in [1, 2, 4, 8] {
        let executor = Executor::new(threads).unwrap();
        let pool = Arc::new(Pool::default());
        for attempt in 0..20 {
            let options = RunOptions {
                inputs: &bindings,
                executor: (threads > 1).then_some(&executor),
                memory_limit_bytes: limit,
                ..Default::default()
            };
            let r = run(&graph, &pool, &options).unwrap_or_else(|e| panic!("{threads} threads, run {attempt}: {e}"));
            assert!(r.stats().peak_live_bytes <= limit);
        }
    }
}
