//! `gsched plan`: a static memory plan of a graph.

use std::sync::Arc;

use graphsched::plan::{Mode, Order, Plan};
use graphsched::{run, Executor, Pool, RunOptions};
use graphsched_workloads::graph_file::InputBuffers;
use serde_json::json;

use crate::args::{PlanArgs, PlanModeArg, PlanOrderArg};
use crate::format::to_json;
use crate::workload::Workload;
use crate::FULL_SCALE;

pub(crate) fn plan_command(args: PlanArgs) -> Result<String, String> {
    let mut workload = Workload::load(&args.workload, FULL_SCALE)?;
    if args.in_place {
        workload.file = workload.file.clone().with_elementwise_in_place();
    }
    // Placement only depends on sizes and order: kernels that do nothing are enough, and the
    // dynamic pool's peak for the same graph comes from one such run in file order.
    let loaded = workload
        .file
        .build(&mut |_| Box::new(|_| Ok(())))
        .map_err(|e| format!("{}: {e}", workload.label))?;
    let graph = &loaded.graph;
    let mode = match (args.mode, args.order) {
        (PlanModeArg::ParallelSafe, _) => Mode::ParallelSafe,
        (PlanModeArg::Scheduled, _) => Mode::Scheduled {
            threads: args.threads as usize,
        },
        (PlanModeArg::Sequential, PlanOrderArg::Topo) => Mode::Sequential(Order::Topological),
        (PlanModeArg::Sequential, PlanOrderArg::Memory) => Mode::Sequential(Order::MemoryAware),
    };
    let plan = Plan::new(graph, mode).map_err(|e| format!("{}: {e}", workload.label))?;
    plan.verify()
        .map_err(|e| format!("{}: the plan does not verify: {e}", workload.label))?;
    let max_live = workload.file.max_live_bytes();
    let node_lb = graph.info().node_lower_bound_bytes;
    let inputs = InputBuffers::new(&loaded.inputs, 1);
    let bindings = inputs.bindings();
    let pool = Arc::new(Pool::default());
    run(
        graph,
        &pool,
        &RunOptions {
            inputs: &bindings,
            freeze_estimates: true,
            ..Default::default()
        },
    )
    .map_err(|e| format!("{}: the pool run failed: {e}", workload.label))?;
    let pool_peak = pool.stats().peak_reserved_bytes;
    let ratio = plan.arena_bytes() as f64 / max_live.max(1) as f64;
    // A run on the plan itself, on the threads it was made for, as a user's would be.
    if let Mode::Scheduled { threads } = mode {
        let executor = Executor::new(threads).map_err(|e| e.to_string())?;
        run(
            graph,
            &pool,
            &RunOptions {
                inputs: &bindings,
                executor: Some(&executor),
                plan: Some(&plan),
                freeze_estimates: true,
                ..Default::default()
            },
        )
        .map_err(|e| format!("{}: the run on the plan failed: {e}", workload.label))?;
    }
    let mode_name = match mode {
        Mode::ParallelSafe => "parallel-safe",
        Mode::Scheduled { .. } => "scheduled",
        Mode::Sequential(Order::Topological) => "sequential, file order",
        Mode::Sequential(Order::MemoryAware) => "sequential, memory-aware order",
    };
    let aliases = plan.aliases();
    if args.json {
        return to_json(&json!({
            "workload": workload.json(),
            "mode": mode_name,
            "in_place_outputs": aliases,
            "arena_bytes": plan.arena_bytes(),
            "max_live_lb_bytes": max_live,
            "order_max_live_bytes": plan.max_live_bytes(),
            "node_lb_bytes": node_lb,
            "ratio": ratio,
            "pool_peak_reserved_bytes": pool_peak,
            "threads": plan.scheduled().map(|s| s.threads),
            "constraints": plan.scheduled().map(|s| s.constraints.len()),
            "makespan_ns": plan.scheduled().map(|s| s.makespan_ns),
            "free_makespan_ns": plan.scheduled().map(|s| s.free_makespan_ns),
        }));
    }
    let mut out = format!(
        "gsched plan: {} ({mode_name}{})\n",
        workload.name(),
        if args.in_place { ", elementwise in place" } else { "" }
    );
    out += &format!(
        "  arena                      {:>12} bytes  {:>7.3}x the max-live bound\n",
        plan.arena_bytes(),
        ratio
    );
    out += &format!("  max-live bound, file order {:>12} bytes\n", max_live);
    if let Some(s) = plan.scheduled() {
        out += &format!(
            "  max-live, schedule         {:>12} bytes  ({} threads: what the plan's lifetimes need at least)\n",
            plan.max_live_bytes(),
            s.threads
        );
        out += &format!(
            "  ordering constraints       {:>12}\n  simulated makespan         {:>12} ns  {:>7.3}x without the constraints ({} ns)\n",
            s.constraints.len(),
            s.makespan_ns,
            s.makespan_ns as f64 / s.free_makespan_ns.max(1) as f64,
            s.free_makespan_ns
        );
    } else if plan.max_live_bytes() != max_live {
        out += &format!("  max-live bound, plan order {:>12} bytes\n", plan.max_live_bytes());
    }
    out += &format!("  single-node bound          {:>12} bytes\n", node_lb);
    out += &format!(
        "  dynamic pool, peak         {:>12} bytes  {:>7.3}x (file order, one thread)\n",
        pool_peak,
        pool_peak as f64 / max_live.max(1) as f64
    );
    if args.in_place {
        out += &format!("  outputs placed in place    {aliases:>12}\n");
    }
    Ok(out)
}
