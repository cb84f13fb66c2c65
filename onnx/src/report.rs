//! Tables for people and one JSON object for programs.

use crate::check::Check;
use crate::graph::Parallelism;
use crate::manifest::Manifest;
use crate::measure::Row;
use serde_json::json;

fn mib(bytes: u64) -> String {
    format!("{:.1}", bytes as f64 / (1u64 << 20) as f64)
}

/// The checks alone (`--check`).
pub fn print_checks(manifest: &Manifest, checks: &[Check], parallelism: &Parallelism, as_json: bool) {
    if as_json {
        println!("{}", summary(manifest, checks, parallelism, &[]));
        return;
    }
    println!(
        "{}: {} nodes after ONNX Runtime's optimization (level {}); outputs against one session over the whole prepared model",
        manifest.model,
        manifest.nodes.len(),
        manifest.optimization
    );
    println!(
        "{:>7}  {:<26} {:>13} {:>12}",
        "threads", "memory", "bitwise equal", "max abs diff"
    );
    for c in checks {
        println!(
            "{:>7}  {:<26} {:>13} {:>12.3e}",
            c.threads,
            c.memory,
            if c.bitwise_equal { "yes" } else { "NO" },
            c.max_abs_diff
        );
    }
    let ms = |ns: u64| ns as f64 / 1e6;
    let p = parallelism;
    print!(
        "learned durations: work {:.1} ms, critical path {:.1} ms (inter-op parallelism at most {:.2}x); simulated makespan:",
        ms(p.work_ns),
        ms(p.critical_path_ns),
        p.work_ns as f64 / p.critical_path_ns.max(1) as f64
    );
    for (t, makespan) in &p.makespans {
        print!(
            " {:.1} ms at {t} thread{}",
            ms(*makespan),
            if *t == 1 { "" } else { "s" }
        );
    }
    println!();
}

/// The checks and the measured rows.
pub fn print_rows(manifest: &Manifest, checks: &[Check], parallelism: &Parallelism, rows: &[Row], as_json: bool) {
    if as_json {
        println!("{}", summary(manifest, checks, parallelism, rows));
        return;
    }
    print_checks(manifest, checks, parallelism, false);
    println!();
    println!(
        "each row in a process of its own; wall: median of warm runs; activation: graphsched's pool peak reserved, ONNX Runtime's RSS growth"
    );
    println!(
        "{:<54} {:>7} {:>9} {:>11} {:>11} {:>9} {:>6}",
        "runtime", "threads", "wall ms", "activ. MiB", "RSS+ MiB", "peak MiB", "equal"
    );
    for r in rows {
        println!(
            "{:<54} {:>7} {:>9.2} {:>11} {:>11} {:>9} {:>6}",
            r.runtime,
            r.threads,
            r.wall_ns as f64 / 1e6,
            mib(r.activation_bytes),
            mib(r.rss_growth_bytes),
            mib(r.peak_rss_bytes),
            if r.bitwise_equal { "yes" } else { "NO" }
        );
    }
    if rows.iter().any(|r| !r.peak_reset) {
        println!("note: the kernel refused to reset the peak RSS (/proc/self/clear_refs) in some rows: their RSS+ and ONNX Runtime's activation count from an earlier peak");
    }
}

fn summary(manifest: &Manifest, checks: &[Check], parallelism: &Parallelism, rows: &[Row]) -> serde_json::Value {
    json!({
        "model": manifest.model,
        "nodes": manifest.nodes.len(),
        "weights_bytes": manifest.weights_bytes,
        "bitwise_equal": checks.iter().all(|c| c.bitwise_equal) && rows.iter().all(|r| r.bitwise_equal),
        "max_abs_diff": checks.iter().map(|c| c.max_abs_diff).fold(0.0, f64::max),
        "checks": checks,
        "parallelism": parallelism,
        "rows": rows,
    })
}

/// The `--serve` rows (with the priority client's figures where one ran).
pub fn print_serve(manifest: &Manifest, priority: Option<&Manifest>, rows: &[crate::serve::ServeRow], as_json: bool) {
    if as_json {
        let mut out = json!({"model": manifest.model, "nodes": manifest.nodes.len(), "serve": rows});
        if let Some(p) = priority {
            out["priority_model"] = json!(p.model);
            out["priority_nodes"] = json!(p.nodes.len());
        }
        println!("{out}");
        return;
    }
    println!(
        "{}: closed-loop clients, each server in a process of its own; latencies per request",
        manifest.model
    );
    if let Some(p) = priority {
        println!(
            "with a priority client: one more closed-loop client sending {} requests",
            p.model
        );
    }
    println!(
        "{:<52} {:>7} {:>8} {:>9} {:>9} {:>9} {:>9} {:>10} {:>6} {:>10} {:>9}",
        "runtime",
        "clients",
        "requests",
        "req/s",
        "p50 ms",
        "p99 ms",
        "peak MiB",
        "budget MiB",
        "equal",
        "CPU us/req",
        "ctxsw/req"
    );
    for r in rows {
        println!(
            "{:<52} {:>7} {:>8} {:>9.1} {:>9.2} {:>9.2} {:>9} {:>10} {:>6} {:>10} {:>9}",
            r.runtime,
            r.clients,
            r.requests,
            r.throughput_per_s,
            r.p50_ns as f64 / 1e6,
            r.p99_ns as f64 / 1e6,
            mib(r.peak_rss_bytes),
            r.budget_bytes.map_or("-".to_string(), mib),
            if r.bitwise_equal { "yes" } else { "NO" },
            r.cpu_ns_per_request
                .map_or("-".to_string(), |ns| format!("{:.1}", ns / 1e3)),
            match (r.voluntary_switches_per_request, r.involuntary_switches_per_request) {
                (Some(v), Some(i)) => format!("{:.2}", v + i),
                _ => "-".to_string(),
            }
        );
        if let (Some(how), Some(n), Some(per_s), Some(p50), Some(p99)) = (
            &r.priority_runtime,
            r.priority_requests,
            r.priority_throughput_per_s,
            r.priority_p50_ns,
            r.priority_p99_ns,
        ) {
            println!(
                "  + priority client: {:<33} {:>7} {:>8} {:>9.1} {:>9.2} {:>9.2} {:>9} {:>10} {:>6}",
                how,
                1,
                n,
                per_s,
                p50 as f64 / 1e6,
                p99 as f64 / 1e6,
                "",
                "",
                if r.priority_bitwise_equal == Some(true) {
                    "yes"
                } else {
                    "NO"
                }
            );
        }
    }
}
