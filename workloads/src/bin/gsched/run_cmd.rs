//! `gsched run`: one graph, several runs on one pool.

use std::sync::Arc;

use graphsched::{Executor, Pool};
use serde_json::json;

use crate::args::RunArgs;
use crate::demo::{row_cells, row_table};
use crate::format::{mb, plural, to_json, wrap};
use crate::measure::{measured_run, write_trace, Knobs, Progress, Row};
use crate::workload::{Bounds, Workload};
use crate::DEMO_SCALE;

pub(crate) fn run_command(args: RunArgs) -> Result<String, String> {
    let workload = Workload::load(&args.workload, DEMO_SCALE)?;
    let progress = Progress::new(args.json);
    progress.show("run: building the graph...");
    let built = workload.build(true)?;
    let threads = if args.sequential { 1 } else { args.threads as usize };
    let executor = match args.sequential {
        true => None,
        false => Some(Executor::new(threads).map_err(|e| format!("cannot start the executor: {e}"))?),
    };
    let (strategy, policy_name) = match args.sequential {
        true => ("sequential", "topological"),
        false => (args.policy.name(), args.policy.name()),
    };
    let bounds = Bounds::new(&workload, &built.graph, threads as u64);
    let pool = Arc::new(Pool::default());
    let runs = args.runs as usize;
    let mut first = None;
    let mut last = None;
    let mut walls = Vec::new();
    for i in 0..runs {
        progress.show(&format!("run: run {}/{runs}...", i + 1));
        let traced = args.trace.is_some() && i + 1 == runs;
        let knobs = Knobs {
            executor: executor.as_ref(),
            policy: args.policy.policy(),
            memory_limit_bytes: args.memory_limit,
            trace: traced,
            ..Default::default()
        };
        let (row, result) = measured_run(strategy, &built, &pool, knobs).map_err(|e| match runs {
            1 => format!("the run failed: {e}"),
            _ => format!("run {} of {runs} failed: {e}", i + 1),
        })?;
        if let (true, Some(path)) = (traced, &args.trace) {
            write_trace(path, &result)?;
        }
        drop(result); // outputs back to the pool before the next run
        if i == 0 {
            first = Some(row);
        } else {
            walls.push(row.wall_ns);
            last = Some(row);
        }
    }
    drop(progress);
    let first = first.expect("at least one run");
    let steady = last.map(|last| Row {
        wall_ns: median(walls),
        ..last
    });

    if args.json {
        let mut out = json!({
            "workload": workload.json(),
            "threads": threads,
            "policy": policy_name,
            "memory_limit_bytes": args.memory_limit,
            "runs": runs,
            "bounds": bounds,
            "first": first,
        });
        if let Some(steady) = &steady {
            out["steady"] = json!(steady);
        }
        return to_json(&out);
    }
    let mut out = format!(
        "gsched run: {}, {}{}, {runs} run{} on one pool\n",
        workload.name(),
        if args.sequential {
            "calling thread alone, file order".to_string()
        } else {
            format!("{threads} thread{}, {}", plural(threads), args.policy.describe())
        },
        match args.memory_limit {
            0 => String::new(),
            limit => format!(", memory limit {} MB", mb(limit)),
        },
        plural(runs)
    );
    out += &format!("workload: {}\n", workload.figures());
    out += &bounds.lines(threads as u64);
    out += "\n";
    let mut table = row_table("run");
    table.push(row_cells("first", &first, &bounds));
    if let Some(steady) = &steady {
        table.push(row_cells("steady", steady, &bounds));
    }
    out += &table.render();
    out += "\n";
    out += &wrap(
        &format!(
            "first: the first run, on a fresh pool (cold: its system allocations and page faults are \
             counted).{} / bound: wall over the makespan bound; / max live: reserved over the \
             max-live bound.{}",
            if steady.is_some() {
                format!(
                    " steady: median wall time of runs 2..{runs}; memory, allocations, reuse and faults \
                     of the last run."
                )
            } else {
                String::new()
            },
            match &args.trace {
                Some(path) => format!(" Trace of the last run: {}.", path.display()),
                None => String::new(),
            }
        ),
        100,
    );
    Ok(out)
}

pub(crate) fn median(mut xs: Vec<u64>) -> u64 {
    xs.sort_unstable();
    match xs.len() {
        0 => 0,
        n if n % 2 == 1 => xs[n / 2],
        n => (xs[n / 2 - 1] + xs[n / 2]) / 2,
    }
}
