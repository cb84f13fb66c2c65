//! `gsched simulate`: the policy on a virtual clock.

use graphsched::sim::{simulate, SimOptions};
use serde_json::json;

use crate::args::SimulateArgs;
use crate::format::{mb, ms, plural, ratio, to_json, Table};
use crate::workload::{bound_term, Workload};
use crate::FULL_SCALE;

pub(crate) fn simulate_command(args: SimulateArgs) -> Result<String, String> {
    let workload = Workload::load(&args.workload, FULL_SCALE)?;
    let built = workload.build(false)?;
    let threads = args.threads as usize;
    let sim = simulate(
        &built.graph,
        &SimOptions {
            threads,
            policy: args.policy.policy(),
            memory_limit_bytes: args.memory_limit,
            ..Default::default()
        },
    )
    .map_err(|e| format!("the simulation failed: {e}"))?;
    let built_graph = built.graph.clone();
    let bound = built_graph.priorities().makespan_bound(threads);
    let max_live = workload.file.max_live_bytes();
    if args.json {
        return to_json(&json!({
            "workload": workload.json(),
            "threads": threads,
            "policy": args.policy.name(),
            "memory_limit_bytes": args.memory_limit,
            "makespan_ns": sim.makespan_ns,
            "makespan_lb_ns": sim.makespan_lb_ns,
            "makespan_bound_term": bound_term(&built_graph, bound.binding, threads as u64),
            "critical_path_ns": sim.critical_path_ns,
            "work_ns": sim.work_ns,
            "peak_live_bytes": sim.peak_live_bytes,
            "max_live_lb_bytes": max_live,
            "nodes_run": sim.nodes_run,
            "utilization": sim.utilization,
        }));
    }
    let mut out = format!(
        "gsched simulate: {}, {threads} thread{}, {}{}\n",
        workload.name(),
        plural(threads),
        args.policy.describe(),
        match args.memory_limit {
            0 => String::new(),
            limit => format!(", memory limit {} MB", mb(limit)),
        }
    );
    out += &format!("workload: {}\n\n", workload.figures());
    let mut t = Table::new(&["", "", ""]);
    t.left_align(2);
    t.push(vec![
        "makespan".into(),
        format!("{} ms", ms(sim.makespan_ns)),
        format!("{} the bound", ratio(sim.makespan_ns, sim.makespan_lb_ns)),
    ]);
    t.push(vec![
        "bound".into(),
        format!("{} ms", ms(sim.makespan_lb_ns)),
        bound_term(&built_graph, bound.binding, threads as u64),
    ]);
    t.push(vec![
        "critical path".into(),
        format!("{} ms", ms(sim.critical_path_ns)),
        String::new(),
    ]);
    t.push(vec!["work".into(), format!("{} ms", ms(sim.work_ns)), String::new()]);
    t.push(vec![
        "peak live".into(),
        format!("{} MB", mb(sim.peak_live_bytes)),
        format!(
            "{} the max live in file order ({} MB)",
            ratio(sim.peak_live_bytes, max_live),
            mb(max_live)
        ),
    ]);
    t.push(vec![
        "utilization".into(),
        format!("{:.1}%", sim.utilization * 100.0),
        "work / (makespan x threads)".into(),
    ]);
    out += &t.render();
    out += "\nVirtual time: each node takes its estimated duration.\n";
    Ok(out)
}
