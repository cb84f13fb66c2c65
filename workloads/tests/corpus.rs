//! The generated corpus (issue 13): graphs that build, in the promised ranges, with the shapes
//! that make memory planning hard, the same for the same seed.

use graphsched_workloads::corpus::{inference_graph, NODES};
use graphsched_workloads::{Measured, Pace};

#[test]
fn every_generated_graph_builds_and_has_the_promised_shape() {
    let (mut attention, mut fpn, mut concat, mut residual) = (0, 0, 0, 0);
    let mut nodes_seen = Vec::new();
    let (mut smallest, mut largest) = (usize::MAX, 0);
    for seed in 0..300 {
        let file = inference_graph(seed);
        let n = file.nodes.len();
        nodes_seen.push(n);
        assert!(
            NODES.contains(&n) && *NODES.start() == 50 && *NODES.end() == 2000,
            "seed {seed}: {n} nodes"
        );
        Measured::build(&file, Pace::Touch, None).unwrap_or_else(|e| panic!("seed {seed}: {e}"));
        let sizes: Vec<usize> = file
            .nodes
            .iter()
            .flat_map(|n| n.outputs.iter().map(|o| o.bytes))
            .collect();
        let (lo, hi) = (*sizes.iter().min().unwrap(), *sizes.iter().max().unwrap());
        assert!(hi / lo >= 100, "seed {seed}: sizes only from {lo} to {hi}");
        (smallest, largest) = (smallest.min(lo), largest.max(hi));
        let readers = |v: &str| file.nodes.iter().filter(|n| n.inputs.iter().any(|i| i == v)).count();
        let ops = |op: &str| file.nodes.iter().filter(|n| n.op == op).count();
        attention += (ops("Softmax") > 0
            && file
                .nodes
                .iter()
                .any(|n| n.op == "LayerNorm" && readers(&n.outputs[0].name) >= 3)) as u32;
        fpn += (file.outputs.len() >= 2) as u32;
        concat += (file.nodes.iter().any(|n| n.op == "Concat" && n.inputs.len() >= 2)) as u32;
        residual += (ops("Add") > 0) as u32;
    }
    // Every kind of shape is common in the corpus.
    for (what, count) in [
        ("attention", attention),
        ("multi-scale outputs", fpn),
        ("concats", concat),
        ("residuals", residual),
    ] {
        assert!(count >= 30, "only {count} of 300 graphs have {what}");
    }
    assert!(
        largest / smallest >= 10_000,
        "the corpus spans {smallest} to {largest} bytes"
    );
    nodes_seen.sort();
    assert!(
        nodes_seen[0] < 200 && nodes_seen[299] > 800,
        "sizes cover the range: {} to {} nodes",
        nodes_seen[0],
        nodes_seen[299]
    );
}

#[test]
fn a_seed_gives_the_same_graph() {
    let (a, b) = (inference_graph(42), inference_graph(42));
    assert_eq!(a.nodes.len(), b.nodes.len());
    assert!(a.nodes.iter().zip(&b.nodes).all(|(x, y)| x.name == y.name
        && x.inputs == y.inputs
        && x.outputs.iter().map(|o| o.bytes).eq(y.outputs.iter().map(|o| o.bytes))));
    assert_ne!(
        inference_graph(43).nodes.len() * 1000 + inference_graph(43).nodes[0].outputs[0].bytes % 1000,
        a.nodes.len() * 1000 + a.nodes[0].outputs[0].bytes % 1000
    );
}

/// The pool's steady peak reserved bytes over the file-order max-live bound, in the third run
/// on a fresh pool of corpus graph `seed`, without an executor or on `executor`.
fn pool_ratio(seed: u64, executor: Option<&graphsched::Executor>) -> f64 {
    let file = inference_graph(seed);
    let measured = Measured::build(&file, Pace::Touch, Some(1)).unwrap();
    measured.steady_peak_reserved(executor).unwrap() as f64 / file.max_live_bytes() as f64
}

#[test]
fn runs_hold_about_the_max_live_bound_where_best_fit_alone_fragments() {
    // Value-by-value best fit held 1.25x the bound at the corpus's median (1.28x on 2 threads)
    // and 1.5x at its 95th percentile; with placement hints a run puts its large values where
    // a placement of their lifetimes does, and its small values take the small arena in
    // 64-byte grains (a slab per size class held up to 1.28x on small graphs). Seeds of the
    // tuning range.
    let executor = graphsched::Executor::new(2).unwrap();
    for executor in [None, Some(&executor)] {
        let mut ratios: Vec<f64> = (0..24).map(|seed| pool_ratio(seed, executor)).collect();
        ratios.sort_by(f64::total_cmp);
        let (median, worst) = (ratios[ratios.len() / 2], ratios[ratios.len() - 1]);
        let threads = if executor.is_some() { 2 } else { 1 };
        assert!(median <= 1.05, "{threads} thread(s): median {median:.3}: {ratios:?}");
        assert!(worst <= 1.5, "{threads} thread(s): worst {worst:.3}: {ratios:?}");
    }
}
