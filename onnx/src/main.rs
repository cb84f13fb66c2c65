//! gsched-onnx: a prepared ONNX model (see prepare.py) run by graphsched, one ONNX Runtime
//! session per node, and side by side with ONNX Runtime's own executors.
//!
//! `scripts/onnx.sh` sets up Python, prepares the model and calls this program; run that.

mod call_cost;
mod check;
mod graph;
mod kernel;
mod manifest;
mod measure;
mod ort_api;
mod partition;
mod pool_allocator;
mod report;
mod run;
mod serve;

use clap::Parser;
use manifest::Manifest;
use measure::{Row, Runner};
use run::Memory;
use std::path::{Path, PathBuf};
use std::process::Command;

#[derive(Parser)]
#[command(about = "Run a prepared ONNX model with graphsched and with ONNX Runtime, side by side")]
struct Args {
    /// The directory prepare.py wrote (manifest.json, prepared.onnx, nodes/).
    dir: PathBuf,
    /// ONNX Runtime's shared library (libonnxruntime.so).
    #[arg(long, env = "ORT_DYLIB_PATH")]
    ort_library: PathBuf,
    /// Most threads: rows at 1 thread and at this many.
    #[arg(long, default_value_t = 2)]
    threads: usize,
    /// Timed inferences per configuration and round, after one warm-up.
    #[arg(long, default_value_t = 10)]
    runs: usize,
    /// Rounds: every configuration measured in turn this many times (the machine's load drifts;
    /// taking turns spreads it over all), each row's median taken over all its inferences.
    #[arg(long, default_value_t = 3)]
    rounds: usize,
    /// Print one JSON object instead of tables.
    #[arg(long)]
    json: bool,
    /// Only check that graphsched's outputs are bitwise equal to ONNX Runtime's, in every
    /// memory mode at 1 thread and at --threads; exit 1 if not.
    #[arg(long)]
    check: bool,
    /// Only time each node's session called alone (--runs calls each; default 10) against the
    /// whole model in one session: the fixed cost of a call.
    #[arg(long)]
    call_cost: bool,
    /// Only choose the clusters: measure the per-node graph (durations and the call cost) each
    /// way it can run, partition with graphsched, and write partition-T.json for 1 thread and
    /// --threads (then `prepare.py --clusters` writes the cluster models).
    #[arg(long)]
    partition: bool,
    /// Serve instead: --clients closed-loop clients send requests back to back for --seconds,
    /// to graphsched (its clusters, one executor and pool, a memory budget of one request's
    /// need times the threads) and to ONNX Runtime (one session shared by all clients, one
    /// intra-op thread, and --threads intra-op threads); latencies, throughput, memory.
    #[arg(long)]
    serve: bool,
    /// With --serve: clients sending requests at once.
    #[arg(long, default_value_t = 4)]
    clients: usize,
    /// With --serve: seconds each server is measured for.
    #[arg(long, default_value_t = 5.0)]
    seconds: f64,
    /// With --serve: one more closed-loop client sends requests of this prepared model (a
    /// directory prepare.py wrote, partitioned like DIR) at high priority: to graphsched on the
    /// same executor and pool, to ONNX Runtime as a second session. Its latencies are reported
    /// apart, and the servers run without it too.
    #[arg(long, value_name = "DIR")]
    priority_model: Option<PathBuf>,
    /// With --serve: graphsched's memory budget in bytes (0: none). Default: one request's need
    /// (what it holds in the pool at its peak, its clusters' internal values included, measured
    /// alone; each request reserves it) times the threads, and the priority model's need besides.
    #[arg(long)]
    budget: Option<u64>,
    /// Internal, with --serve-child and --priority-model: ONNX Runtime's second session's
    /// intra-op threads.
    #[arg(long, hide = true, default_value_t = 1)]
    priority_intra: usize,
    /// Internal: serve with one server in this process and print its row as JSON.
    #[arg(long, hide = true)]
    serve_child: Option<String>,
    /// Internal: measure one configuration in this process and print its row as JSON.
    #[arg(long, hide = true)]
    child: Option<String>,
    /// Internal: measure one way to run the clusters and print graphsched's proposal as JSON.
    #[arg(long, hide = true)]
    propose: Option<String>,
    /// Internal, with --propose: the least a call may cost, in nanoseconds.
    #[arg(long, hide = true, default_value_t = 0)]
    call_cost_floor: u64,
}

/// Outputs that differ from ONNX Runtime's: exit status 1 (other failures: 2).
const DIFFERENT: &str = "graphsched's outputs differ from ONNX Runtime's";

fn main() {
    let args = Args::parse();
    if let Err(e) = run(&args) {
        eprintln!("gsched-onnx: {e}");
        std::process::exit(if e == DIFFERENT { 1 } else { 2 });
    }
}

fn run(args: &Args) -> Result<(), String> {
    if args.priority_model.is_some() && !args.serve && args.serve_child.is_none() {
        return Err("--priority-model goes with --serve".into());
    }
    let manifest = Manifest::load(&args.dir)?;
    if args.call_cost {
        return call_cost::call_cost(&manifest, &args.ort_library, args.runs);
    }
    let threads: Vec<usize> = if args.threads > 1 {
        vec![1, args.threads]
    } else {
        vec![1]
    };
    if let Some(way) = &args.propose {
        let way = serde_json::from_value(serde_json::Value::String(way.clone())).map_err(|e| e.to_string())?;
        let proposal = partition::propose(&manifest, &args.ort_library, way, args.threads, args.call_cost_floor)?;
        println!("{}", serde_json::to_string(&proposal).map_err(|e| e.to_string())?);
        return Ok(());
    }
    if args.partition {
        return write_partitions(args, &threads);
    }
    let priority_manifest = args.priority_model.as_deref().map(Manifest::load).transpose()?;
    if let Some(key) = &args.serve_child {
        let server = serve::Server::parse(key).ok_or(format!("no server {key}"))?;
        let priority = priority_manifest.as_ref().map(|m| serve::Priority {
            manifest: m,
            ort_intra_threads: args.priority_intra,
        });
        let load = serve::Load {
            clients: args.clients,
            seconds: args.seconds,
            threads: args.threads,
            budget: args.budget,
        };
        let row = serve::serve(&manifest, &args.ort_library, server, load, priority)?;
        println!("{}", serde_json::to_string(&row).map_err(|e| e.to_string())?);
        return Ok(());
    }
    if args.serve {
        let mut rows = Vec::new();
        for job in serve::jobs(args.priority_model.is_some(), args.threads) {
            let (clients, seconds, intra) = (
                args.clients.to_string(),
                args.seconds.to_string(),
                job.priority_intra.to_string(),
            );
            let mut extra = vec![
                "--serve-child",
                job.server.key(),
                "--clients",
                &clients,
                "--seconds",
                &seconds,
            ];
            let budget = args.budget.map(|b| b.to_string());
            if let Some(b) = &budget {
                extra.extend(["--budget", b]);
            }
            let priority_dir = args.priority_model.as_deref().map(|d| d.to_string_lossy().into_owned());
            if let (true, Some(dir)) = (job.priority, &priority_dir) {
                extra.extend(["--priority-model", dir, "--priority-intra", &intra]);
            }
            let out = run_child(args, args.threads, &extra)?;
            let row: serve::ServeRow =
                serde_json::from_slice(&out).map_err(|e| format!("a child printed no row: {e}"))?;
            rows.push(row);
        }
        report::print_serve(&manifest, priority_manifest.as_ref(), &rows, args.json);
        return Ok(());
    }
    if let Some(key) = &args.child {
        let runner = Runner::parse(key).ok_or(format!("no configuration {key}"))?;
        let out = outputs_file(&args.dir, key, args.threads);
        let row = measure::measure(&manifest, &args.ort_library, runner, args.threads, args.runs, &out)?;
        println!("{}", serde_json::to_string(&row).map_err(|e| e.to_string())?);
        return Ok(());
    }
    let (checks, parallelism) = check::check(&manifest, &args.ort_library, &threads)?;
    let equal = checks.iter().all(|c| c.bitwise_equal);
    if args.check {
        report::print_checks(&manifest, &checks, &parallelism, args.json);
        if !equal {
            return Err(DIFFERENT.into());
        }
        return Ok(());
    }
    let mut configs = Vec::new();
    for &t in &threads {
        if partition::clusters_dir(&args.dir, t).join("manifest.json").exists() {
            configs.push((Runner::GraphschedAuto, t));
        }
        configs.push((Runner::Graphsched(Memory::Pool), t));
        configs.push((
            Runner::Graphsched(if t == 1 {
                Memory::SequentialPlan
            } else {
                Memory::ScheduledPlan
            }),
            t,
        ));
        if t > 1 {
            configs.extend([(Runner::GraphschedIntra, t), (Runner::GraphschedBoth, t)]);
        }
        configs.extend([(Runner::OrtSequential, t), (Runner::OrtParallel, t)]);
    }
    let mut rows: Vec<Row> = Vec::new();
    for round in 0..args.rounds.max(1) {
        for (i, &(runner, t)) in configs.iter().enumerate() {
            let row = child(args, runner, t)?;
            if round == 0 {
                rows.push(row);
            } else {
                // Memory figures are the largest seen; times pool over rounds.
                let r = &mut rows[i];
                r.walls_ns.extend(row.walls_ns);
                r.activation_bytes = r.activation_bytes.max(row.activation_bytes);
                r.rss_growth_bytes = r.rss_growth_bytes.max(row.rss_growth_bytes);
                r.peak_rss_bytes = r.peak_rss_bytes.max(row.peak_rss_bytes);
            }
        }
    }
    for row in &mut rows {
        row.wall_ns = measure::median(&mut row.walls_ns);
    }
    let reference =
        std::fs::read(outputs_file(&args.dir, Runner::OrtSequential.key(), 1)).map_err(|e| e.to_string())?;
    for row in &mut rows {
        row.bitwise_equal =
            std::fs::read(outputs_file(&args.dir, &row.config, row.threads)).is_ok_and(|b| b == reference);
    }
    report::print_rows(&manifest, &checks, &parallelism, &rows, args.json);
    Ok(())
}

/// `--partition`: each way measured in a child of its own (ONNX Runtime allows one environment,
/// with or without a global pool, per process), the fastest kept, for each thread count.
fn write_partitions(args: &Args, threads: &[usize]) -> Result<(), String> {
    for &t in threads {
        let mut considered: Vec<partition::Proposal> = Vec::new();
        // Each way is measured twice, in turns, and keeps its less disturbed measurement (the
        // shorter simulated makespan before merging): on a shared machine a neighbour's burst
        // during one way's 1.5 s once made ONNX Runtime's intra-op pool look 3x slower than it
        // is, and the choice fell on the other way, 1.7x slower in fact.
        for _ in 0..partition::MEASURE_ROUNDS {
            // The executor's way first: its single-threaded sessions measure the cost of a call
            // best, and it is the floor for the other way's, whose whole-model reference on the
            // intra-op pool can hide it.
            for (i, way) in partition::ways(t).into_iter().enumerate() {
                let name = serde_json::to_value(way).map_err(|e| e.to_string())?;
                let floor = considered.first().map_or(0, |p| p.call_cost_ns).to_string();
                let extra = [
                    "--propose",
                    name.as_str().unwrap_or_default(),
                    "--call-cost-floor",
                    &floor,
                ];
                let out = run_child(args, t, &extra)?;
                let proposal: partition::Proposal =
                    serde_json::from_slice(&out).map_err(|e| format!("a child printed no proposal: {e}"))?;
                match considered.get_mut(i) {
                    None => considered.push(proposal),
                    Some(kept) if proposal.before_ns < kept.before_ns => *kept = proposal,
                    Some(_) => {}
                }
            }
        }
        let choice = partition::choose(considered).ok_or("no way to run the clusters")?;
        let c = &choice.chosen;
        eprintln!(
            "partition at {t} thread{}: {} nodes in {} clusters, {:?}, calls of {:.2} us (an empty one {:.2} us); simulated {:.2} -> {:.2} ms; {} (the whole model {:.3} ms and {:.2} MB a run with ONNX Runtime's memory pattern, {:.3} ms and {:.2} MB value by value)",
            if t == 1 { "" } else { "s" },
            c.nodes,
            c.clusters.len(),
            c.way,
            c.call_cost_ns as f64 / 1e3,
            c.empty_call_ns as f64 / 1e3,
            c.before_ns as f64 / 1e6,
            c.after_ns as f64 / 1e6,
            if c.memory_pattern { "memory pattern" } else { "value by value" },
            c.whole.pattern_ns as f64 / 1e6,
            c.whole.pattern_bytes as f64 / 1e6,
            c.whole.by_value_ns as f64 / 1e6,
            c.whole.by_value_bytes as f64 / 1e6,
        );
        let file = partition::choice_file(&args.dir, t);
        let text = serde_json::to_string_pretty(&choice).map_err(|e| e.to_string())?;
        std::fs::write(&file, text).map_err(|e| format!("cannot write {}: {e}", file.display()))?;
    }
    Ok(())
}

/// Runs this program again on `threads` threads with `extra` arguments; its standard output.
fn run_child(args: &Args, threads: usize, extra: &[&str]) -> Result<Vec<u8>, String> {
    let exe = std::env::current_exe().map_err(|e| e.to_string())?;
    let output = Command::new(exe)
        .arg(&args.dir)
        .arg("--ort-library")
        .arg(&args.ort_library)
        .args(["--threads", &threads.to_string(), "--runs", &args.runs.to_string()])
        .args(extra)
        .output()
        .map_err(|e| format!("cannot start a child: {e}"))?;
    if !output.status.success() {
        return Err(format!(
            "{} on {threads} threads failed: {}",
            extra.join(" "),
            String::from_utf8_lossy(&output.stderr).trim()
        ));
    }
    Ok(output.stdout)
}

/// Where a configuration's child writes its outputs' bytes.
fn outputs_file(dir: &Path, key: &str, threads: usize) -> PathBuf {
    dir.join(format!("outputs-{key}-{threads}.bin"))
}

/// Measures one configuration in a child process of its own.
fn child(args: &Args, runner: Runner, threads: usize) -> Result<Row, String> {
    let out =
        run_child(args, threads, &["--child", runner.key()]).map_err(|e| format!("{}: {e}", runner.describe()))?;
    serde_json::from_slice(&out).map_err(|e| format!("a child printed no row: {e}"))
}

#[cfg(test)]
mod tests {
    use super::*;

    fn parse(extra: &[&str]) -> Args {
        let mut argv = vec!["gsched-onnx", "prepared/det", "--ort-library", "libonnxruntime.so"];
        argv.extend(extra);
        Args::try_parse_from(argv).expect("parses")
    }

    #[test]
    fn the_priority_model_is_a_directory_and_its_sessions_threads_default_to_one() {
        let a = parse(&["--serve", "--clients", "8"]);
        assert!(a.serve && a.priority_model.is_none());
        assert_eq!(a.clients, 8);
        let a = parse(&[
            "--serve",
            "--clients",
            "2",
            "--priority-model",
            "prepared/cls",
            "--seconds",
            "4",
        ]);
        assert_eq!(a.priority_model.as_deref(), Some(Path::new("prepared/cls")));
        assert_eq!((a.priority_intra, a.seconds, a.budget), (1, 4.0, None));
        assert_eq!(parse(&["--serve", "--budget", "0"]).budget, Some(0), "0: no budget");
        let a = parse(&[
            "--serve-child",
            "ort-intra",
            "--priority-model",
            "c",
            "--priority-intra",
            "2",
        ]);
        assert_eq!((a.serve_child.as_deref(), a.priority_intra), (Some("ort-intra"), 2));
    }

    #[test]
    fn a_priority_model_without_serve_is_refused_before_anything_runs() {
        // No manifest is read first (there is none here): the sentence names the mistake.
        let e = run(&parse(&["--priority-model", "prepared/cls"])).unwrap_err();
        assert_eq!(e, "--priority-model goes with --serve");
    }
}
