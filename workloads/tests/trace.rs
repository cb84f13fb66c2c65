//! A traced run's Chrome trace parses, shows every node exactly once, and never overlaps two
//! slices on one thread's track.

use std::collections::HashMap;
use std::sync::Arc;

use graphsched::{run, trace, Executor, Pool, RunOptions};
use graphsched_workloads::{seed_pipeline, Measured, Pace};

#[test]
fn chrome_trace_has_every_node_once_and_no_overlaps() {
    let file = seed_pipeline(3, 0.0005);
    let loaded = Measured::build(&file, Pace::Touch, Some(1)).unwrap();
    let bindings = loaded.bindings();
    let executor = Executor::new(2).unwrap();
    let pool = Arc::new(Pool::default());
    let options = RunOptions {
        inputs: &bindings,
        executor: Some(&executor),
        trace: true,
        ..Default::default()
    };
    let result = run(&loaded.graph, &pool, &options).unwrap();
    let stats = result.stats();
    assert!(
        stats.busy_ns > 0 && stats.busy_ns <= stats.wall_ns * stats.threads,
        "{stats:?}"
    );

    let json: serde_json::Value =
        serde_json::from_str(&trace::chrome_trace(&loaded.graph, result.events())).expect("valid JSON");
    let events = json["traceEvents"].as_array().unwrap();
    let mut seen: HashMap<String, usize> = HashMap::new();
    let mut tracks: HashMap<u64, Vec<(f64, f64)>> = HashMap::new();
    let mut counters = 0;
    for e in events {
        match e["ph"].as_str().unwrap() {
            "X" => {
                *seen.entry(e["name"].as_str().unwrap().to_string()).or_default() += 1;
                tracks
                    .entry(e["tid"].as_u64().unwrap())
                    .or_default()
                    .push((e["ts"].as_f64().unwrap(), e["dur"].as_f64().unwrap()));
                assert!(e["args"]["op"].is_string() && e["args"]["output_bytes"].is_u64());
            }
            "C" => {
                counters += 1;
                assert!(e["args"]["live_bytes"].is_u64() && e["args"]["reserved_bytes"].is_u64());
            }
            "M" => {}
            other => panic!("unexpected phase {other}"),
        }
    }
    assert_eq!(seen.len(), file.nodes.len(), "every node appears");
    assert!(seen.values().all(|&n| n == 1), "and only once");
    assert_eq!(counters, file.nodes.len());
    for (tid, mut slices) in tracks {
        slices.sort_by(|a, b| a.0.partial_cmp(&b.0).unwrap());
        for w in slices.windows(2) {
            // Timestamps are printed in microseconds with 3 decimals: allow the rounding.
            assert!(
                w[0].0 + w[0].1 <= w[1].0 + 0.002,
                "track {tid}: {:?} overlaps {:?}",
                w[0],
                w[1]
            );
        }
    }
}

#[test]
fn dot_marks_the_critical_path() {
    let file = seed_pipeline(1, 0.001);
    let loaded = file.build(&mut |_| Box::new(|_| Ok(()))).unwrap();
    let dot = trace::dot(&loaded.graph);
    assert!(dot.starts_with("digraph"));
    assert_eq!(dot.matches(" -> ").count(), {
        let g = &loaded.graph;
        (0..g.node_count() as u32)
            .map(|v| {
                let mut s = g.successors(v).to_vec();
                s.dedup();
                s.len()
            })
            .sum::<usize>()
    });
    let heavy = loaded.graph.find_node("main0_20").unwrap();
    assert!(dot.contains(&format!("n{heavy} [label=\"main0_20")));
    assert!(
        dot.lines()
            .any(|l| l.contains(&format!("n{heavy} [")) && l.contains("color=red")),
        "the heavy node is marked"
    );
}
