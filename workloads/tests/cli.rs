//! The `gsched` binary, run as a user would: small inputs (the seed pipeline at scale 0.001, the
//! MobileNetV2 graph), checking what each subcommand promises.

use std::path::PathBuf;
use std::process::{Command, Output};

use serde_json::Value;

fn gsched(args: &[&str]) -> Output {
    Command::new(env!("CARGO_BIN_EXE_gsched"))
        .args(args)
        .output()
        .expect("gsched starts")
}

fn stdout(out: &Output) -> String {
    String::from_utf8_lossy(&out.stdout).into_owned()
}

fn stderr(out: &Output) -> String {
    String::from_utf8_lossy(&out.stderr).into_owned()
}

/// Runs gsched, expects success, and parses stdout as exactly one JSON object.
fn json(args: &[&str]) -> Value {
    let out = gsched(args);
    assert!(out.status.success(), "gsched {args:?} failed: {}", stderr(&out));
    let mut values = serde_json::Deserializer::from_slice(&out.stdout).into_iter::<Value>();
    let first = values
        .next()
        .expect("some output")
        .unwrap_or_else(|e| panic!("gsched {args:?} printed no JSON ({e}): {}", stdout(&out)));
    assert!(values.next().is_none(), "exactly one JSON value on stdout");
    assert!(first.is_object(), "a JSON object");
    assert!(
        out.stderr.is_empty(),
        "no progress line when stderr is not a terminal: {}",
        stderr(&out)
    );
    first
}

fn mobilenet() -> String {
    PathBuf::from(env!("CARGO_MANIFEST_DIR"))
        .join("graphs/mobilenetv2-224.json")
        .to_string_lossy()
        .into_owned()
}

fn graph(file: &str) -> String {
    PathBuf::from(env!("CARGO_MANIFEST_DIR"))
        .join("graphs")
        .join(file)
        .to_str()
        .unwrap()
        .to_string()
}

fn tmp(name: &str) -> PathBuf {
    let path = PathBuf::from(env!("CARGO_TARGET_TMPDIR")).join(format!("gsched-{}-{name}", std::process::id()));
    let _ = std::fs::remove_file(&path);
    path
}

fn u(v: &Value) -> u64 {
    v.as_u64().unwrap_or_else(|| panic!("an integer, not {v}"))
}

/// A Chrome trace file: valid JSON whose traceEvents hold one slice per node.
fn check_trace(path: &PathBuf, nodes: usize) {
    let text = std::fs::read_to_string(path).expect("trace written");
    let trace: Value = serde_json::from_str(&text).expect("the trace is valid JSON");
    let events = trace["traceEvents"].as_array().expect("traceEvents");
    let slices = events.iter().filter(|e| e["ph"] == "X").count();
    assert_eq!(slices, nodes, "one slice per node");
}

#[test]
fn demo_json_has_the_six_strategies_in_order_and_keeps_the_bounds() {
    let trace = tmp("demo-trace.json");
    let demo = json(&["demo", "--scale", "0.001", "--json", "--trace", trace.to_str().unwrap()]);
    assert_eq!(demo["threads"], 2);
    let rows = demo["rows"].as_array().expect("rows");
    let names: Vec<&str> = rows.iter().map(|r| r["strategy"].as_str().unwrap()).collect();
    assert_eq!(
        names,
        ["naive", "pool", "fifo", "critical", "critical_limited", "planned"]
    );
    for r in rows {
        assert!(u(&r["wall_ns"]) > 0, "{r}");
        assert!(u(&r["peak_live_bytes"]) > 0, "{r}");
        assert!(u(&r["peak_reserved_bytes"]) >= u(&r["peak_live_bytes"]) || r["strategy"] == "naive");
        let reuse = r["reuse_rate"].as_f64().expect("a float");
        assert!((0.0..=1.0).contains(&reuse), "{r}");
        u(&r["os_allocs"]);
        u(&r["minor_faults"]);
    }
    let workload = &demo["workload"];
    assert_eq!(workload["nodes"], 240);
    let bounds = &demo["bounds"];
    let (cp, work, lb, max_live) = (
        u(&bounds["critical_path_ns"]),
        u(&bounds["work_ns"]),
        u(&bounds["makespan_lb_ns"]),
        u(&bounds["max_live_lb_bytes"]),
    );
    // The bound is at least the plain one; on the seed pipeline a node's term binds, above it (a
    // long node waits for its ancestors' work, or its descendants' work follows it).
    assert!(lb > cp.max(work.div_ceil(2)), "{bounds}");
    let term = bounds["makespan_bound_term"].as_str().unwrap();
    assert!(
        term.contains("ancestors' work") || term.contains("descendants' work"),
        "{bounds}"
    );
    assert_eq!(max_live, u(&workload["max_live_bytes"]));

    let naive = &rows[0];
    assert_eq!(naive["reuse_rate"].as_f64(), Some(0.0));
    assert_eq!(
        u(&naive["peak_live_bytes"]),
        u(&workload["output_bytes"]),
        "naive holds every value"
    );
    for r in &rows[1..5] {
        assert!(
            u(&r["peak_live_bytes"]) <= u(&naive["peak_live_bytes"]),
            "{} holds no more than naive",
            r["strategy"]
        );
        assert!(r["reuse_rate"].as_f64().unwrap() > 0.0, "{r}");
    }
    // planned: one arena from a fresh pool, and nothing else but the graph output.
    assert!(u(&rows[5]["os_allocs"]) >= 1, "{}", rows[5]);
    // A scheduled plan's arena: the schedule's own max live, which may be below the file
    // order's, and at most 1.10x the file order's (issue 13).
    assert!(
        u(&rows[5]["peak_reserved_bytes"]) >= u(&rows[5]["peak_live_bytes"]),
        "{}",
        rows[5]
    );
    assert!(u(&rows[5]["peak_reserved_bytes"]) * 10 <= max_live * 11, "{}", rows[5]);
    assert_eq!(
        u(&rows[1]["peak_live_bytes"]),
        max_live,
        "file order holds exactly the bound"
    );
    // At the file-order bound admission is guaranteed to complete: one run, no retry.
    assert!(rows[4].get("attempts").is_none(), "{}", rows[4]);
    assert!(
        u(&rows[4]["peak_live_bytes"]) <= max_live,
        "critical_limited stays within the file-order max live: {}",
        rows[4]
    );
    check_trace(&trace, 240);
}

#[test]
fn demo_table_names_every_strategy_and_the_bounds() {
    let out = gsched(&["demo", "--scale", "0.001"]);
    assert!(out.status.success(), "{}", stderr(&out));
    let text = stdout(&out);
    assert!(text.contains("240 nodes"), "{text}");
    assert!(text.contains("makespan >="), "{text}");
    let mut at = 0;
    for name in ["naive", "pool", "fifo", "critical", "critical_limited", "planned"] {
        let line = text[at..]
            .lines()
            .find(|l| l.split_whitespace().next() == Some(name))
            .unwrap_or_else(|| panic!("a row for {name}: {text}"));
        at = text.find(line).unwrap() + line.len();
    }
    assert!(text.contains("first run"), "the footer says the runs are cold: {text}");
}

#[test]
fn repeated_runs_reach_a_steady_state_without_system_allocations() {
    let graph = mobilenet();
    let r = json(&["run", &graph, "--sequential", "--runs", "3", "--json"]);
    assert_eq!(r["policy"], "topological");
    assert_eq!(r["threads"], 1);
    assert_eq!(r["workload"]["max_live_bytes"], 6_021_120);
    assert!(
        u(&r["first"]["os_allocs"]) > 0,
        "a fresh pool takes memory: {}",
        r["first"]
    );
    assert_eq!(u(&r["steady"]["os_allocs"]), 0, "{}", r["steady"]);
    assert_eq!(r["steady"]["reuse_rate"].as_f64(), Some(1.0));
    assert!(u(&r["steady"]["wall_ns"]) > 0);
    assert_eq!(
        u(&r["first"]["peak_live_bytes"]),
        6_021_120,
        "file order holds the bound of graphs/README.md"
    );

    // In parallel, with a trace of the last run; one run has no steady state.
    let trace = tmp("run-trace.json");
    let r = json(&[
        "run",
        "seed",
        "--scale",
        "0.001",
        "--threads",
        "2",
        "--policy",
        "fifo",
        "--trace",
        trace.to_str().unwrap(),
        "--json",
    ]);
    assert_eq!(r["policy"], "fifo");
    assert_eq!(r["threads"], 2);
    assert!(r.get("steady").is_none(), "{r}");
    assert!(u(&r["first"]["wall_ns"]) > 0);
    check_trace(&trace, 240);
}

#[test]
fn memory_limited_run_stays_under_its_limit() {
    let limit = 2 * 6_021_120u64;
    let r = json(&[
        "run",
        &mobilenet(),
        "--threads",
        "2",
        "--memory-limit",
        &limit.to_string(),
        "--json",
    ]);
    assert_eq!(u(&r["memory_limit_bytes"]), limit);
    assert!(u(&r["first"]["peak_live_bytes"]) <= limit, "{}", r["first"]);
}

#[test]
fn simulate_on_one_thread_takes_the_whole_work() {
    let s = json(&["simulate", &mobilenet(), "--threads", "1", "--json"]);
    assert!(u(&s["work_ns"]) > 0);
    assert_eq!(u(&s["makespan_ns"]), u(&s["work_ns"]));
    assert_eq!(u(&s["makespan_lb_ns"]), u(&s["work_ns"]));
    assert!((s["utilization"].as_f64().unwrap() - 1.0).abs() < 1e-9);
    assert!(u(&s["peak_live_bytes"]) > 0);

    let s = json(&["simulate", "seed", "--threads", "8", "--policy", "fifo", "--json"]);
    assert_eq!(s["threads"], 8);
    assert_eq!(s["policy"], "fifo");
    assert_eq!(
        s["workload"]["scale"].as_f64(),
        Some(1.0),
        "simulate defaults to the full size"
    );
    let (makespan, lb) = (u(&s["makespan_ns"]), u(&s["makespan_lb_ns"]));
    assert!(lb > 0 && makespan >= lb, "{s}");
    assert_eq!(lb, u(&s["critical_path_ns"]).max(u(&s["work_ns"]).div_ceil(8)));
}

#[test]
fn info_prints_the_critical_path_and_writes_dot() {
    let graph = mobilenet();
    let info = json(&["info", &graph, "--json"]);
    assert_eq!(info["nodes"], 66);
    assert_eq!(u(&info["max_live_lb_bytes"]), 6_021_120);
    assert!(u(&info["node_lower_bound_bytes"]) <= 6_021_120);
    let path: Vec<&str> = info["critical_path"]
        .as_array()
        .unwrap()
        .iter()
        .map(|n| n.as_str().unwrap())
        .collect();
    assert!(path.len() > 1);

    let dot = tmp("graph.dot");
    let out = gsched(&["info", &graph, "--dot", dot.to_str().unwrap()]);
    assert!(out.status.success(), "{}", stderr(&out));
    let text = stdout(&out);
    // The names, in order, as " -> "-separated words after the "critical path:" heading.
    let listed = &text[text.find("critical path:\n").expect("a critical path section")..];
    let words: Vec<&str> = listed
        .split_whitespace()
        .filter(|w| *w != "->")
        .skip(2)
        .take(path.len())
        .collect();
    assert_eq!(words, path, "{text}");
    let written = std::fs::read_to_string(&dot).expect("DOT written");
    assert!(written.starts_with("digraph"), "{}", &written[..40.min(written.len())]);
}

#[test]
fn bad_input_fails_with_one_clear_message() {
    let missing = "/nonexistent/no-such-graph.json";
    for args in [
        vec!["run", missing],
        vec!["info", missing, "--json"],
        vec!["simulate", missing],
    ] {
        let out = gsched(&args);
        assert!(!out.status.success(), "{args:?}");
        let err = stderr(&out);
        assert!(err.contains(missing), "the message names the file: {err}");
        assert!(!err.contains("panicked"), "{err}");
        assert!(out.stdout.is_empty(), "nothing on stdout: {}", stdout(&out));
        assert_eq!(err.trim_end().lines().count(), 1, "one line: {err}");
    }

    let bad = tmp("bad.json");
    std::fs::write(&bad, "{\"name\": \"x\", \"nodes\": [").unwrap();
    let out = gsched(&["info", bad.to_str().unwrap()]);
    assert!(!out.status.success());
    assert!(stderr(&out).contains("not a graph file"), "{}", stderr(&out));

    let graph = mobilenet();
    let out = gsched(&["run", &graph, "--policy", "lifo"]);
    assert!(!out.status.success());
    assert!(stderr(&out).contains("lifo"), "{}", stderr(&out));

    // A limit below what one node needs: the run fails with the library's message.
    let out = gsched(&["run", &graph, "--memory-limit", "1000"]);
    assert!(!out.status.success());
    let err = stderr(&out);
    assert!(err.contains("memory limit") && !err.contains("panicked"), "{err}");

    let out = gsched(&["run", &graph, "--scale", "0.5"]);
    assert!(!out.status.success());
    assert!(stderr(&out).contains("seed pipeline only"), "{}", stderr(&out));

    let out = gsched(&["demo", "--scale", "-1"]);
    assert!(!out.status.success());
    assert!(stderr(&out).contains("--scale"), "{}", stderr(&out));
}

/// The naive strategy replays exactly the measuring kernels' work: every value it writes has
/// the checksum the graphsched run's kernel gives it.
#[test]
fn naive_writes_the_same_bytes_as_the_measuring_kernels() {
    use graphsched::{run, Pool, RunOptions, ValueRef};
    use graphsched_workloads::{naive::run_naive, seed_pipeline, Measured, Pace};
    use std::sync::Arc;

    let file = seed_pipeline(5, 0.001);
    let Measured { ledger, graph, inputs } = Measured::build(&file, Pace::Touch, Some(1)).unwrap();
    let graph = &graph;
    let values: Vec<ValueRef> = (0..graph.node_count() as u32)
        .filter(|&n| !graph.is_graph_input(n))
        .flat_map(|n| (0..graph.node_values(n).len() as u32).map(move |k| ValueRef::new(n, k)))
        .collect();
    let stats = run_naive(&file, graph, &inputs, &ledger).unwrap();
    assert_eq!(stats.nodes_run, 240);
    let naive: Vec<Option<u64>> = values.iter().map(|&v| ledger.get(v)).collect();
    assert!(naive.iter().all(Option::is_some));
    for &v in &values {
        ledger.record(v, 0); // forget, so the run below records afresh
    }
    let bindings = inputs.bindings();
    let result = run(
        graph,
        &Arc::new(Pool::default()),
        &RunOptions {
            inputs: &bindings,
            ..Default::default()
        },
    )
    .unwrap();
    drop(result);
    let kernels: Vec<Option<u64>> = values.iter().map(|&v| ledger.get(v)).collect();
    assert_eq!(naive, kernels);
}

#[test]
fn plan_reaches_the_bound_on_resnet_and_reports_the_pool() {
    let plan = json(&["plan", &graph("resnet50-224.json"), "--json"]);
    assert_eq!(u(&plan["arena_bytes"]), u(&plan["max_live_lb_bytes"]));
    assert_eq!(plan["ratio"].as_f64(), Some(1.0));
    assert!(u(&plan["pool_peak_reserved_bytes"]) >= u(&plan["max_live_lb_bytes"]));
    assert!(u(&plan["node_lb_bytes"]) <= u(&plan["max_live_lb_bytes"]));
    let in_place = json(&[
        "plan",
        &graph("resnet50-224.json"),
        "--mode",
        "parallel-safe",
        "--in-place",
        "--json",
    ]);
    assert!(u(&in_place["in_place_outputs"]) > 0);
    assert!(u(&in_place["arena_bytes"]) < u(&plan["arena_bytes"]));
}

/// A scheduled plan of PP-OCRv4 det, whose wide branches cost a parallel-safe plan 1.4x the
/// bound: near the bound, with the ordering constraints it needs costing under 5% of simulated
/// makespan, and a real run on it on the planned threads.
#[test]
fn a_scheduled_plan_reaches_near_the_bound_where_parallel_safe_cannot() {
    let det = graph("ppocrv4-det-640.json");
    let safe = json(&["plan", &det, "--mode", "parallel-safe", "--json"]);
    for threads in ["2", "8"] {
        let plan = json(&["plan", &det, "--mode", "scheduled", "--threads", threads, "--json"]);
        let (arena, bound) = (u(&plan["arena_bytes"]), u(&plan["max_live_lb_bytes"]));
        assert!(
            arena * 100 <= bound * 110,
            "{threads} threads: {arena} bytes, bound {bound}"
        );
        assert!(arena < u(&safe["arena_bytes"]));
        let (with, without) = (u(&plan["makespan_ns"]), u(&plan["free_makespan_ns"]));
        assert!(
            with * 100 <= without * 105,
            "{threads} threads: {with} ns against {without}"
        );
        assert!(
            u(&plan["constraints"]) > 0,
            "the branches share bytes: constraints order them"
        );
        assert_eq!(plan["threads"].as_u64(), Some(threads.parse().unwrap()));
    }
}

#[test]
fn partition_covers_every_node_once_and_never_simulates_slower() {
    let file = graph("yolov8n-320.json");
    let args = ["partition", &file, "--call-cost-ns", "20000", "--threads", "2"];
    let v = json(&[&args[..], &["--json"]].concat());
    let (before, after) = (&v["before"], &v["after"]);
    assert!(u(&after["makespan_ns"]) <= u(&before["makespan_ns"]), "{v}");
    let clusters = v["clusters"].as_array().unwrap();
    assert_eq!(u(&after["calls"]), clusters.len() as u64);
    assert!(
        clusters.len() < u(&before["calls"]) as usize,
        "calls of 20 us merge something"
    );
    let mut seen: Vec<u64> = clusters
        .iter()
        .flat_map(|c| c["nodes"].as_array().unwrap().iter().map(u))
        .collect();
    seen.sort_unstable();
    let before_calls = u(&before["calls"]) as usize;
    assert_eq!(seen.len(), before_calls, "every operator node once");
    seen.dedup();
    assert_eq!(seen.len(), before_calls);
    let table = stdout(&gsched(&args));
    assert!(
        table.contains("one call a cluster") && table.contains("clusters"),
        "{table}"
    );
    let refused = gsched(&["partition", &file, "--call-cost-ns", "1", "--memory-limit", "10"]);
    assert!(!refused.status.success());
    assert!(stderr(&refused).contains("memory limit"), "{}", stderr(&refused));
}
