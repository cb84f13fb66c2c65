//! `gsched demo`: the seed pipeline six ways against the bounds.

use std::sync::Arc;

use graphsched::plan::{Mode, Plan};
use graphsched::{Executor, NodeEvent, Policy, Pool};
use graphsched_workloads::naive::run_naive_traced;
use graphsched_workloads::svg::{demo_svg, Curve};
use serde_json::json;

use crate::args::DemoArgs;
use crate::format::{mb, ms, plural, ratio, to_json, wrap, Table};
use crate::measure::{measured_run, minor_faults, write_trace, Knobs, Progress, Row};
use crate::workload::{physical_memory, Bounds, Workload};
use crate::DEMO_SCALE;

pub(crate) fn demo(args: DemoArgs) -> Result<String, String> {
    let threads = args.threads as usize;
    let workload = Workload::seed(args.scale.unwrap_or(DEMO_SCALE), args.seed)?;
    let (naive_bytes, memory) = (workload.output_bytes(), physical_memory());
    if naive_bytes > memory / 2 {
        return Err(format!(
            "at scale {} the naive strategy would hold {} MB at once, more than half of this machine's {} MB of memory; use a smaller --scale",
            workload.scale.unwrap_or(1.0),
            mb(naive_bytes),
            mb(memory)
        ));
    }
    let progress = Progress::new(args.json);
    progress.show("demo: building the seed pipeline...");
    let built = workload.build(true)?;
    let bounds = Bounds::new(&workload, &built.graph, threads as u64);
    let executor = Executor::new(threads).map_err(|e| format!("cannot start the executor: {e}"))?;
    let strategies = ["naive", "pool", "fifo", "critical", "critical_limited", "planned"];
    let mut rows: Vec<Row> = Vec::new();
    // For --svg: live bytes over time of naive, pool and critical, and the critical run's nodes.
    let mut curves: Vec<Curve> = Vec::new();
    let mut timeline: Vec<NodeEvent> = Vec::new();
    for (i, &strategy) in strategies.iter().enumerate() {
        progress.show(&format!("demo: running {strategy} ({}/{})...", i + 1, strategies.len()));
        let row = match strategy {
            "naive" => {
                let faults = minor_faults();
                let mut points = Vec::new();
                let stats = run_naive_traced(&workload.file, &built.graph, &built.inputs, &built.ledger, &mut points)
                    .map_err(|e| format!("the naive run failed: {e}"))?;
                curves.push(Curve {
                    name: strategy.to_string(),
                    points,
                });
                Row {
                    strategy: strategy.to_string(),
                    wall_ns: stats.wall_ns,
                    peak_live_bytes: stats.peak_live_bytes,
                    peak_reserved_bytes: stats.peak_reserved_bytes,
                    os_allocs: stats.os_allocs,
                    reuse_rate: 0.0,
                    minor_faults: minor_faults().saturating_sub(faults),
                }
            }
            _ => {
                let (executor, policy, limit) = match strategy {
                    "pool" => (None, Policy::default(), 0),
                    "fifo" => (Some(&executor), Policy::Fifo, 0),
                    "critical" => (Some(&executor), Policy::CriticalPath, 0),
                    // The policy the scheduled plan's schedule follows.
                    "planned" => (Some(&executor), Policy::default(), 0),
                    _ => (Some(&executor), Policy::CriticalPath, bounds.max_live_lb_bytes),
                };
                let drawn = args.svg.is_some() && (strategy == "pool" || strategy == "critical");
                let traced = (strategy == "critical" && args.trace.is_some()) || drawn;
                // planned: a static plan for the schedule on the executor's threads (one arena
                // per run; the plan's ordering constraints keep it safe in any real order).
                let threads = executor.map_or(1, Executor::threads);
                let plan = (strategy == "planned")
                    .then(|| Plan::new(&built.graph, Mode::Scheduled { threads }))
                    .transpose()
                    .map_err(|e| format!("cannot plan the graph: {e}"))?;
                // A fresh pool per strategy: each row shows a cold first run.
                let pool = Arc::new(Pool::default());
                let knobs = Knobs {
                    executor,
                    policy,
                    memory_limit_bytes: limit,
                    trace: traced,
                    plan: plan.as_ref(),
                    ..Default::default()
                };
                let (row, result) = measured_run(strategy, &built, &pool, knobs)
                    .map_err(|e| format!("the {strategy} run failed: {e}"))?;
                if let (true, Some(path)) = (strategy == "critical", &args.trace) {
                    write_trace(path, &result)?;
                }
                if drawn {
                    let mut events = result.events().to_vec();
                    events.sort_by_key(|e| e.end_ns);
                    let points = events.iter().map(|e| (e.end_ns, e.live_bytes)).collect();
                    curves.push(Curve {
                        name: strategy.to_string(),
                        points,
                    });
                    if strategy == "critical" {
                        timeline = events;
                    }
                }
                row
            }
        };
        rows.push(row);
    }
    drop(progress);
    if let Some(path) = &args.svg {
        let priorities = built.graph.priorities();
        let svg = demo_svg(&curves, &timeline, priorities.slack(), priorities.critical_path_ns())?;
        std::fs::write(path, svg).map_err(|e| format!("cannot write {}: {e}", path.display()))?;
    }

    if args.json {
        return to_json(&json!({
            "workload": workload.json(),
            "threads": threads,
            "bounds": bounds,
            "rows": rows,
        }));
    }
    let mut out = format!(
        "gsched demo: the seed pipeline (seed {}, scale {}), {threads} thread{} for fifo and critical\n",
        args.seed,
        workload.scale.unwrap_or(1.0),
        plural(threads)
    );
    out += &format!("workload: {}\n", workload.figures());
    out += &bounds.lines(threads as u64);
    out += "\n";
    let mut table = row_table("strategy");
    for row in &rows {
        table.push(row_cells(&row.strategy, row, &bounds));
    }
    out += &table.render();
    out += "\n";
    out += &wrap(
        &format!(
            "Each strategy's first run, on a fresh pool (cold: its system allocations and page faults \
             are counted). naive: file order, one thread, a malloc per value, all freed at the end \
             (reserved and OS allocs: what glibc's malloc took from the system). pool: graphsched, \
             file order on the calling thread, buffers reused as soon as their last reader is done. \
             fifo, critical: {threads} thread{}, ready nodes in FIFO or critical-path order. \
             critical_limited: critical path under a memory limit of the file-order max live, {} MB. \
             planned: every static value at its offset in one arena, planned for the schedule on \
             {threads} thread{0} (its ordering constraints keep any real order safe). / bound: wall over the {threads}-thread makespan bound; / max live: reserved over the \
             max-live bound.{}",
            plural(threads),
            mb(bounds.max_live_lb_bytes),
            match &args.trace {
                Some(path) => format!(" Trace of the critical run: {}.", path.display()),
                None => String::new(),
            } + &match &args.svg {
                Some(path) => format!(" Picture: {}.", path.display()),
                None => String::new(),
            }
        ),
        100,
    );
    Ok(out)
}

pub(crate) fn row_table(first: &str) -> Table {
    Table::new(&[
        first,
        "wall ms",
        "/ bound",
        "peak live MB",
        "reserved MB",
        "/ max live",
        "OS allocs",
        "reuse",
        "minor faults",
    ])
}

pub(crate) fn row_cells(label: &str, row: &Row, bounds: &Bounds) -> Vec<String> {
    vec![
        label.to_string(),
        ms(row.wall_ns),
        ratio(row.wall_ns, bounds.makespan_lb_ns),
        mb(row.peak_live_bytes),
        mb(row.peak_reserved_bytes),
        ratio(row.peak_reserved_bytes, bounds.max_live_lb_bytes),
        row.os_allocs.to_string(),
        format!("{:.1}%", row.reuse_rate * 100.0),
        row.minor_faults.to_string(),
    ]
}
