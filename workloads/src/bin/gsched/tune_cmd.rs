//! `gsched tune`: the window and the memory limit, swept on the simulator, the Pareto front
//! confirmed by real runs, a recommendation at the knee.

use std::sync::Arc;

use graphsched::{Executor, Pool};
use graphsched_workloads::svg::{front_svg, point_label, FrontBounds};
use graphsched_workloads::tune::{sweep, Sweep, KNEE_TOLERANCE};
use serde_json::json;

use crate::args::{PolicyArg, TuneArgs};
use crate::format::{mb, ms, plural, to_json, wrap, Table};
use crate::measure::{measured_run, Knobs, Progress};
use crate::run_cmd::median;
use crate::workload::{Bounds, Workload};
use crate::DEMO_SCALE;

pub(crate) fn tune_command(args: TuneArgs) -> Result<String, String> {
    let threads = args.threads as usize;
    let workload = Workload::load(&args.workload, DEMO_SCALE)?;
    let progress = Progress::new(args.json);
    progress.show("tune: building the graph...");
    let built = workload.build(true)?;
    let bounds = Bounds::new(&workload, &built.graph, threads as u64);
    progress.show("tune: simulating...");
    let mut sweep =
        sweep(&built.graph, threads, bounds.max_live_lb_bytes).map_err(|e| format!("the simulation failed: {e}"))?;
    confirm(&mut sweep, &built, threads, args.runs as usize, &progress)?;
    drop(progress);

    let front_bounds = FrontBounds {
        max_live_bytes: bounds.max_live_lb_bytes,
        critical_path_ns: bounds.critical_path_ns,
        work_per_thread_ns: bounds.work_ns / threads as u64,
    };
    if let Some(path) = &args.svg {
        let title = format!(
            "{}: window and memory limit, {threads} thread{}",
            workload.name(),
            plural(threads)
        );
        let svg = front_svg(&sweep, &front_bounds, &title)?;
        std::fs::write(path, svg).map_err(|e| format!("cannot write {}: {e}", path.display()))?;
    }
    let knee = &sweep.points[sweep.knee];
    if args.json {
        return to_json(&json!({
            "workload": workload.json(),
            "threads": threads,
            "bounds": bounds,
            "points": sweep.points,
            "front": sweep.front,
            "knee": sweep.knee,
            "infeasible": sweep.infeasible.iter().map(|&(w, l)| json!({"window": w, "memory_limit_bytes": l})).collect::<Vec<_>>(),
            "recommended": {"window": knee.window, "memory_limit_bytes": knee.memory_limit_bytes},
        }));
    }
    let mut out = format!(
        "gsched tune: {}, {threads} thread{}, {}\n",
        workload.name(),
        plural(threads),
        PolicyArg::Level.describe()
    );
    out += &format!("workload: {}\n", workload.figures());
    out += &bounds.lines(threads as u64);
    out += &format!(
        "\n{} points simulated (windows 1-{}, memory limits {} and none){}; the {} on the Pareto front, each run for real:\n\n",
        sweep.points.len(),
        2 * threads,
        limits_text(&sweep, bounds.max_live_lb_bytes),
        match sweep.infeasible.len() {
            0 => String::new(),
            n => format!(", {n} infeasible"),
        },
        sweep.front.len()
    );
    let mut table = Table::new(&[
        "",
        "window",
        "limit",
        "sim ms",
        "sim peak MB",
        "real ms",
        "real peak MB",
        "real/sim time",
        "real/sim peak",
    ]);
    for &i in &sweep.front {
        let p = &sweep.points[i];
        let (wall, peak) = (p.real_wall_ns.unwrap_or(0), p.real_peak_bytes.unwrap_or(0));
        table.push(vec![
            if i == sweep.knee { "knee".into() } else { String::new() },
            p.window.to_string(),
            limit_text(p.memory_limit_bytes, bounds.max_live_lb_bytes),
            ms(p.sim_makespan_ns),
            mb(p.sim_peak_bytes),
            ms(wall),
            mb(peak),
            format!("{:.3}", wall as f64 / p.sim_makespan_ns.max(1) as f64),
            format!("{:.3}", peak as f64 / p.sim_peak_bytes.max(1) as f64),
        ]);
    }
    out += &table.render();
    out += &format!(
        "\nrecommended: window {}, {} ({})\n\n",
        knee.window,
        match knee.memory_limit_bytes {
            0 => "no memory limit".to_string(),
            l => format!("memory limit {l} bytes"),
        },
        point_label(knee.window, knee.memory_limit_bytes, bounds.max_live_lb_bytes)
    );
    out += &wrap(
        &format!(
            "The knee: the point with the least peak memory among those within {:.0}% of the fastest \
             simulated makespan. Windows at or above the threads cap nothing, so they repeat the \
             window-{threads} points. Real runs: the measuring kernels spinning to their estimates, \
             on one warmed pool; wall time the median of {} run{}, peak the highest.{}",
            KNEE_TOLERANCE * 100.0,
            args.runs,
            plural(args.runs as usize),
            match &args.svg {
                Some(path) => format!(" Picture: {}.", path.display()),
                None => String::new(),
            }
        ),
        100,
    );
    Ok(out)
}

/// Runs every front point for real, on one executor and one pool warmed by a first run.
fn confirm(
    sweep: &mut Sweep,
    built: &graphsched_workloads::Measured,
    threads: usize,
    runs: usize,
    progress: &Progress,
) -> Result<(), String> {
    let executor = Executor::new(threads).map_err(|e| format!("cannot start the executor: {e}"))?;
    let pool = Arc::new(Pool::default());
    let knobs = Knobs {
        executor: Some(&executor),
        ..Default::default()
    };
    progress.show("tune: warming the pool...");
    measured_run("warm-up", built, &pool, knobs).map_err(|e| format!("the warm-up run failed: {e}"))?;
    let front = sweep.front.clone();
    for (k, &i) in front.iter().enumerate() {
        let p = &mut sweep.points[i];
        let knobs = Knobs {
            window: p.window,
            memory_limit_bytes: p.memory_limit_bytes,
            ..knobs
        };
        let mut walls = Vec::new();
        let mut peak = 0;
        for r in 0..runs {
            progress.show(&format!(
                "tune: real run {}/{} of point {}/{}...",
                r + 1,
                runs,
                k + 1,
                front.len()
            ));
            let (row, _) = measured_run("tune", built, &pool, knobs).map_err(|e| {
                format!(
                    "the run at window {}, limit {} failed: {e}",
                    p.window, p.memory_limit_bytes
                )
            })?;
            walls.push(row.wall_ns);
            peak = peak.max(row.peak_live_bytes);
        }
        p.real_wall_ns = Some(median(walls));
        p.real_peak_bytes = Some(peak);
    }
    Ok(())
}

fn limit_text(limit: u64, max_live: u64) -> String {
    match limit {
        0 => "none".into(),
        l => format!("{} MB ({:.2}x)", mb(l), l as f64 / max_live.max(1) as f64),
    }
}

fn limits_text(sweep: &Sweep, max_live: u64) -> String {
    let mut steps: Vec<u64> = sweep
        .points
        .iter()
        .map(|p| p.memory_limit_bytes)
        .filter(|&l| l > 0)
        .collect();
    steps.sort_unstable();
    steps.dedup();
    steps
        .iter()
        .map(|&l| format!("{:.2}x", l as f64 / max_live.max(1) as f64))
        .collect::<Vec<_>>()
        .join(", ")
}
