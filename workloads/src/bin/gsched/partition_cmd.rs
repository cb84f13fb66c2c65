//! `gsched partition`: which nodes an engine with a fixed cost per call should run together.

use graphsched::partition::{partition, PartitionOptions};
use graphsched::SimResult;
use serde_json::json;

use crate::args::PartitionArgs;
use crate::format::{mb, ms, plural, to_json, Table};
use crate::workload::Workload;
use crate::FULL_SCALE;

/// Clusters listed by name in the table; the rest are counted.
const LISTED: usize = 12;

pub(crate) fn partition_command(args: PartitionArgs) -> Result<String, String> {
    let workload = Workload::load(&args.workload, FULL_SCALE)?;
    let built = workload.build(false)?;
    let g = &built.graph;
    let threads = args.threads as usize;
    let options = PartitionOptions {
        call_cost_ns: args.call_cost_ns,
        threads,
        policy: args.policy.policy(),
        memory_limit_bytes: args.memory_limit,
    };
    let started = std::time::Instant::now();
    let p = partition(g, &options).map_err(|e| format!("cannot partition: {e}"))?;
    let took = started.elapsed();
    let names = |list: &[u32]| list.iter().map(|&v| g.node_name(v).to_string()).collect::<Vec<_>>();
    let figures = |s: SimResult| {
        json!({
            "makespan_ns": s.makespan_ns,
            "makespan_lb_ns": s.makespan_lb_ns,
            "work_ns": s.work_ns,
            "peak_live_bytes": s.peak_live_bytes,
            "calls": s.nodes_run,
        })
    };
    if args.json {
        return to_json(&json!({
            "workload": workload.json(),
            "threads": threads,
            "call_cost_ns": args.call_cost_ns,
            "memory_limit_bytes": args.memory_limit,
            "policy": args.policy.name(),
            "before": figures(p.before()),
            "after": figures(p.after()),
            "evaluations": p.evaluations(),
            "search_ms": took.as_secs_f64() * 1e3,
            "clusters": p.clusters().iter().map(|c| json!({"nodes": c, "names": names(c)})).collect::<Vec<_>>(),
        }));
    }
    let (before, after) = (p.before(), p.after());
    let mut out = format!(
        "gsched partition: {}, {threads} thread{}, calls of {} us{}\n",
        workload.name(),
        plural(threads),
        args.call_cost_ns as f64 / 1e3,
        match args.memory_limit {
            0 => String::new(),
            limit => format!(", memory limit {} MB", mb(limit)),
        }
    );
    out += &format!("workload: {}\n\n", workload.figures());
    let mut t = Table::new(&["", "calls", "makespan ms", "work ms", "peak live MB"]);
    for (label, s) in [("one call a node", before), ("one call a cluster", after)] {
        t.push(vec![
            label.into(),
            s.nodes_run.to_string(),
            ms(s.makespan_ns),
            ms(s.work_ns),
            mb(s.peak_live_bytes),
        ]);
    }
    t.left_align(0);
    out += &t.render();
    out += &format!(
        "\n{} clusters ({:.2}x the makespan, {} partitions simulated in {:.0} ms); largest first:\n",
        p.clusters().len(),
        after.makespan_ns as f64 / before.makespan_ns.max(1) as f64,
        p.evaluations(),
        took.as_secs_f64() * 1e3
    );
    let mut order: Vec<&Vec<u32>> = p.clusters().iter().collect();
    order.sort_by_key(|c| std::cmp::Reverse(c.len()));
    for c in order.iter().take(LISTED) {
        let shown = names(c);
        let text = if shown.len() > 6 {
            format!("{} ... {}", shown[..3].join(" "), shown[shown.len() - 2..].join(" "))
        } else {
            shown.join(" ")
        };
        out += &format!("  {:>4} node{}: {text}\n", c.len(), plural(c.len()));
    }
    if order.len() > LISTED {
        out += &format!("  ... and {} more\n", order.len() - LISTED);
    }
    out += "\nA node's estimate is one call; a cluster costs one call plus its nodes' estimates less one call each, \
            and holds its internal values for its whole time.\n";
    Ok(out)
}
