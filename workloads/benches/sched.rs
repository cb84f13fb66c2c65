//! The executor on the seed pipeline: wall time and peak memory at 2 threads, FIFO against
//! critical path first, next to the makespan bound (`graphsched::sched::MakespanBound`); and the
//! simulator at 2, 8 and 16 threads with the same policies.
//!
//! Run: `cargo bench -p graphsched-workloads --bench sched [-- --scale S --runs K]`
//! (default scale 1: 5 GB of outputs per run, kernels that touch every byte and spin to their
//! estimates).

use std::sync::Arc;

use graphsched::sim::{simulate, SimOptions};
use graphsched::{run, Executor, Policy, Pool, RunOptions};
use graphsched_workloads::{seed_pipeline, Measured, Pace};

fn arg(name: &str, default: f64) -> f64 {
    let args: Vec<String> = std::env::args().collect();
    args.iter()
        .position(|a| a == name)
        .and_then(|i| args.get(i + 1))
        .and_then(|v| v.parse().ok())
        .unwrap_or(default)
}

fn median(mut xs: Vec<u64>) -> u64 {
    xs.sort_unstable();
    xs[xs.len() / 2]
}

fn ms(ns: u64) -> f64 {
    ns as f64 / 1e6
}

fn main() {
    let scale = arg("--scale", 1.0);
    let runs = arg("--runs", 3.0) as usize;
    let file = seed_pipeline(1, scale);
    let measured = Measured::build(&file, Pace::Estimate, Some(1)).unwrap();
    let graph = &measured.graph;
    let bindings = measured.bindings();
    let info = graph.info();
    let threads = 2;
    // The tight bound (graphsched::sched::MakespanBound), not max(critical path, work / threads).
    let bound = graph.priorities().makespan_bound(threads).makespan_lb_ns;
    println!(
        "seed pipeline, scale {scale}: {} nodes, critical path {:.1} ms, work {:.1} ms, bound at {threads} threads {:.1} ms",
        info.num_nodes - 1,
        ms(info.critical_path_ns),
        ms(info.total_work_ns),
        ms(bound)
    );
    println!();
    println!("real runs, {threads} threads, median of {runs} (estimates frozen to the given ones)");
    println!(
        "{:>16} | {:>10} {:>8} | {:>12} | {:>10} {:>8}",
        "strategy", "wall ms", "/ bound", "peak live MB", "sim ms", "real/sim"
    );
    let pool = Arc::new(Pool::default());
    let executor = Executor::new(threads).unwrap();
    let sequential = |_: ()| {
        run(
            graph,
            &pool,
            &RunOptions {
                inputs: &bindings,
                freeze_estimates: true,
                ..Default::default()
            },
        )
    };
    let mut rows: Vec<(&str, Option<Policy>)> = vec![("topo, 1 thread", None)];
    rows.push(("fifo", Some(Policy::Fifo)));
    rows.push(("critical", Some(Policy::CriticalPath)));
    rows.push(("level", Some(Policy::BottomLevel)));
    for (name, policy) in rows {
        let mut walls = Vec::new();
        let mut peak = 0;
        for _ in 0..runs {
            let result = match policy {
                None => sequential(()),
                Some(policy) => run(
                    graph,
                    &pool,
                    &RunOptions {
                        inputs: &bindings,
                        executor: Some(&executor),
                        policy,
                        freeze_estimates: true,
                        ..Default::default()
                    },
                ),
            }
            .unwrap();
            walls.push(result.stats().wall_ns);
            peak = result.stats().peak_live_bytes;
        }
        let wall = median(walls);
        let sim_threads = if policy.is_some() { threads } else { 1 };
        let sim = simulate(
            graph,
            &SimOptions {
                threads: sim_threads,
                policy: policy.unwrap_or_default(),
                ..Default::default()
            },
        )
        .unwrap();
        println!(
            "{:>16} | {:>10.1} {:>8.3} | {:>12.1} | {:>10.1} {:>8.3}",
            name,
            ms(wall),
            wall as f64 / bound as f64,
            peak as f64 / 1e6,
            ms(sim.makespan_ns),
            wall as f64 / sim.makespan_ns as f64
        );
    }
    println!();
    println!("simulated makespan against the makespan bound (critical path, work / threads, node terms)");
    println!(
        "{:>8} | {:>10} {:>10} {:>8} | {:>10} {:>8} | {:>12}",
        "threads", "bound ms", "fifo ms", "/ bound", "critical", "/ bound", "util (crit)"
    );
    for t in [2usize, 8, 16] {
        let lb = graph.priorities().makespan_bound(t).makespan_lb_ns;
        let f = simulate(
            graph,
            &SimOptions {
                threads: t,
                policy: Policy::Fifo,
                ..Default::default()
            },
        )
        .unwrap();
        let c = simulate(
            graph,
            &SimOptions {
                threads: t,
                policy: Policy::CriticalPath,
                ..Default::default()
            },
        )
        .unwrap();
        println!(
            "{:>8} | {:>10.1} {:>10.1} {:>8.3} | {:>10.1} {:>8.3} | {:>12.3}",
            t,
            ms(lb),
            ms(f.makespan_ns),
            f.makespan_ns as f64 / lb as f64,
            ms(c.makespan_ns),
            c.makespan_ns as f64 / lb as f64,
            c.utilization
        );
    }
}
