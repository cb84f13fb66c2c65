//! The pool on real inference graphs, run in file order on one thread: checksums hold, repeat
//! runs ask the system for nothing, and the pool's peak stays near the file-order lower bound.

use std::sync::Arc;

use graphsched::{run, Pool, RunOptions};
use graphsched_workloads::{bundled_graphs, checksum, GraphFile, Measured, Pace};

/// The lower bounds published with the graphs (workloads/graphs/README.md).
const PUBLISHED_MAX_LIVE: [(&str, u64); 4] = [
    ("yolov8n-320", 4_915_200),
    ("ppocrv4-det-640", 39_321_600),
    ("mobilenetv2-224", 6_021_120),
    ("resnet50-224", 9_633_792),
];

#[test]
fn lower_bounds_match_the_published_figures() {
    for (path, (name, want)) in bundled_graphs().iter().zip(PUBLISHED_MAX_LIVE) {
        let file = GraphFile::load(path).unwrap();
        assert_eq!(file.name, name);
        assert_eq!(file.max_live_bytes(), want, "{name}");
    }
}

#[test]
fn repeat_runs_reuse_everything_and_stay_near_the_lower_bound() {
    for path in bundled_graphs() {
        let file = GraphFile::load(&path).unwrap();
        let loaded = Measured::build(&file, Pace::Touch, Some(7)).unwrap();
        let graph = &loaded.graph;
        let order: Vec<u32> = (0..graph.node_count() as u32).collect();
        assert_eq!(
            graph.topological_order(),
            &order[..],
            "{}: runs follow the file order",
            file.name
        );

        let bindings = loaded.bindings();
        let pool = Arc::new(Pool::default());
        let mut first_outputs = Vec::new();
        for round in 0..3 {
            let before = pool.stats();
            let result = run(
                graph,
                &pool,
                &RunOptions {
                    inputs: &bindings,
                    ..Default::default()
                },
            )
            .unwrap_or_else(|e| panic!("{}: {e}", file.name));
            let outputs: Vec<u64> = graph
                .graph_outputs()
                .iter()
                .map(|&v| checksum(result.output_bytes(graph.value_ref(v)).unwrap()))
                .collect();
            drop(result);
            let after = pool.stats();
            assert_eq!(after.live_bytes, 0);
            if round == 0 {
                first_outputs = outputs;
                let ratio = after.peak_reserved_bytes as f64 / file.max_live_bytes() as f64;
                assert!(
                    ratio <= 1.25,
                    "{}: peak reserved is {ratio:.3}x the lower bound",
                    file.name
                );
            } else {
                assert_eq!(outputs, first_outputs, "{}: same inputs, same outputs", file.name);
                assert_eq!(
                    after.os_allocs, before.os_allocs,
                    "{}: run {round} asked the system for memory",
                    file.name
                );
                assert_eq!(after.cache_hits - before.cache_hits, after.acquires - before.acquires);
                assert_eq!(after.reserved_bytes, before.reserved_bytes);
            }
        }
    }
}

/// The issue-13 goal for the dynamic pool on the real graphs: at most 1.20x the file-order
/// bound in steady state, on the calling thread and on executors of 1 and 2 threads. PP-OCRv4
/// det was the hard one on 2 threads (1.28x): its parallel-safe placement costs 1.4x, and hints
/// along the sequential order miss where its branches run side by side; hints along the
/// schedule, with the constraints that keep their blocks free, land every time. Three fresh
/// pools each, since parallel runs vary.
#[test]
fn the_pool_holds_the_real_graphs_within_a_fifth_of_the_bound_on_any_thread_count() {
    let executors = [
        graphsched::Executor::new(1).unwrap(),
        graphsched::Executor::new(2).unwrap(),
    ];
    // The classifier too: its 52 values under 1 KiB, in 17 sizes, held a 16 KiB slab per
    // size, 1.55x the bound, until runs' small values took the small arena.
    let classifier = std::path::Path::new(env!("CARGO_MANIFEST_DIR")).join("graphs/ppocr-cls-48x192.json");
    for path in bundled_graphs().into_iter().chain([classifier]) {
        let file = GraphFile::load(&path).unwrap();
        let loaded = Measured::build(&file, Pace::Touch, Some(3)).unwrap();
        for executor in [None, Some(&executors[0]), Some(&executors[1])] {
            for _ in 0..3 {
                let peak = loaded.steady_peak_reserved(executor).unwrap();
                let ratio = peak as f64 / file.max_live_bytes() as f64;
                let threads = executor.map(graphsched::Executor::threads);
                assert!(
                    ratio <= 1.20,
                    "{} on {threads:?} threads: {ratio:.3}x the bound",
                    file.name
                );
            }
        }
    }
}
