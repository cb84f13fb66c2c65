//! Memory on graphs nobody tuned for (issue 13): for the real graphs and a range of generated
//! ones (`graphsched_workloads::corpus`), at 1 and 2 threads, the dynamic pool's steady peak
//! reserved bytes, and the sequential, parallel-safe and scheduled (2 and 8 threads) plans'
//! arenas, each over the file-order max-live lower bound, with what a scheduled plan's ordering
//! constraints cost in simulated makespan; medians, 95th percentiles and maxima over the corpus.
//!
//! Choose heuristics on one range of seeds and report on another:
//! `cargo bench -p graphsched-workloads --bench memory -- --seeds 0..200` to look while choosing,
//! `-- --seeds 1000..1200` (the default) to report. `--plans-only` skips the runs; `--all` prints every graph's row;
//! `--graph FILE` (repeatable) adds a real graph to the bundled ones.

use std::time::Instant;

use graphsched::plan::{Mode, Order, Plan, MAX_PARALLEL_SAFE_NODES};
use graphsched::Executor;
use graphsched_workloads::corpus::inference_graph;
use graphsched_workloads::{bundled_graphs, GraphFile, Measured, Pace};

/// One graph's ratios to its file-order bound.
struct Row {
    name: String,
    nodes: usize,
    bound: u64,
    /// Steady peak reserved (the third run) / bound, on 1 and on 2 threads.
    pool: [f64; 2],
    sequential: f64,
    parallel: Option<f64>,
    /// Time to make the sequential and the parallel-safe plan, in ms.
    plan_ms: f64,
    parallel_ms: f64,
    /// The memory-aware order's max-live bound over the file order's.
    aware_order: f64,
    /// Scheduled plans for 2 and 8 threads (`SCHEDULE_THREADS`).
    scheduled: [Option<Scheduled>; 2],
}

/// Threads the scheduled plans are made for.
const SCHEDULE_THREADS: [usize; 2] = [2, 8];

/// A scheduled plan's figures.
#[derive(Clone, Copy)]
struct Scheduled {
    /// Arena / the file-order bound, and arena / the schedule's own max-live bound.
    arena: f64,
    arena_to_schedule: f64,
    /// Simulated makespan with the constraints / without.
    makespan_cost: f64,
    ms: f64,
}

fn measure(file: &GraphFile, executor: &Executor, runs: bool) -> Row {
    let measured = Measured::build(file, Pace::Touch, Some(1)).expect("the graph builds");
    let bound = file.max_live_bytes();
    let ratio = |bytes: u64| bytes as f64 / bound.max(1) as f64;
    let g = &measured.graph;
    let t = Instant::now();
    let sequential = Plan::new(g, Mode::Sequential(Order::Topological)).expect("a sequential plan");
    let plan_ms = t.elapsed().as_secs_f64() * 1e3;
    let aware = Plan::new(g, Mode::Sequential(Order::MemoryAware)).expect("a memory-aware plan");
    let t = Instant::now();
    let parallel = (g.node_count() <= MAX_PARALLEL_SAFE_NODES)
        .then(|| Plan::new(g, Mode::ParallelSafe).expect("a parallel-safe plan"));
    let parallel_ms = t.elapsed().as_secs_f64() * 1e3;
    let scheduled = SCHEDULE_THREADS.map(|threads| {
        (g.node_count() <= MAX_PARALLEL_SAFE_NODES).then(|| {
            let t = Instant::now();
            let plan = Plan::new(g, Mode::Scheduled { threads }).expect("a scheduled plan");
            let ms = t.elapsed().as_secs_f64() * 1e3;
            let s = plan.scheduled().expect("a schedule");
            Scheduled {
                arena: ratio(plan.arena_bytes()),
                arena_to_schedule: plan.arena_bytes() as f64 / plan.max_live_bytes().max(1) as f64,
                makespan_cost: s.makespan_ns as f64 / s.free_makespan_ns.max(1) as f64,
                ms,
            }
        })
    });
    Row {
        scheduled,
        name: file.name.clone(),
        nodes: file.nodes.len(),
        bound,
        pool: match runs {
            true => [
                ratio(measured.steady_peak_reserved(None).expect("the graph runs")),
                ratio(measured.steady_peak_reserved(Some(executor)).expect("the graph runs")),
            ],
            false => [f64::NAN; 2],
        },
        sequential: ratio(sequential.arena_bytes()),
        parallel: parallel.map(|p| ratio(p.arena_bytes())),
        plan_ms,
        parallel_ms,
        aware_order: ratio(aware.max_live_bytes()),
    }
}

fn print_row(r: &Row) {
    let parallel = r.parallel.map_or("-".to_string(), |p| format!("{p:.3}"));
    let scheduled =
        |i: usize| r.scheduled[i].map_or("-".to_string(), |s| format!("{:.3} ({:.3})", s.arena, s.makespan_cost));
    println!(
        "{:>16} {:>6} {:>13} | {:>7.3} {:>7.3} | {:>10.3} {:>9} | {:>15} {:>15}",
        r.name,
        r.nodes,
        r.bound,
        r.pool[0],
        r.pool[1],
        r.sequential,
        parallel,
        scheduled(0),
        scheduled(1)
    );
}

/// Median, 95th percentile and maximum.
fn summary(mut xs: Vec<f64>) -> String {
    xs.sort_by(f64::total_cmp);
    let at = |q: f64| xs[((xs.len() - 1) as f64 * q).round() as usize];
    format!("{:.3} / {:.3} / {:.3}", at(0.5), at(0.95), at(1.0))
}

fn main() {
    let seeds = std::env::args()
        .skip_while(|a| a != "--seeds")
        .nth(1)
        .and_then(|r| {
            let (a, b) = r.split_once("..")?;
            Some(a.parse::<u64>().ok()?..b.parse::<u64>().ok()?)
        })
        .unwrap_or(1000..1200);
    // Plans only (seconds, not minutes): for trying placement rules on the tuning range.
    let runs = !std::env::args().any(|a| a == "--plans-only");
    let executor = Executor::new(2).expect("an executor");
    println!("ratios to the file-order max-live lower bound (pool: steady peak reserved, third run of a fresh pool)");
    println!("scheduled plans: arena (simulated makespan with the constraints / without)");
    println!(
        "{:>16} {:>6} {:>13} | {:>7} {:>7} | {:>10} {:>9} | {:>15} {:>15}",
        "graph", "nodes", "bound bytes", "pool 1t", "pool 2t", "seq plan", "par plan", "sched 2t", "sched 8t"
    );
    // `--graph FILE` (repeatable): more real graphs, after the bundled ones.
    let extra = std::env::args()
        .collect::<Vec<_>>()
        .windows(2)
        .filter(|w| w[0] == "--graph")
        .map(|w| std::path::PathBuf::from(&w[1]))
        .collect::<Vec<_>>();
    for path in bundled_graphs().into_iter().chain(extra) {
        print_row(&measure(
            &GraphFile::load(&path).expect("a graph file"),
            &executor,
            runs,
        ));
    }
    let start = Instant::now();
    let rows: Vec<Row> = seeds
        .clone()
        .map(|s| measure(&inference_graph(s), &executor, runs))
        .collect();
    println!();
    println!(
        "generated corpus, seeds {}..{} ({} graphs, {:.0} s): median / p95 / max",
        seeds.start,
        seeds.end,
        rows.len(),
        start.elapsed().as_secs_f64()
    );
    let column = |f: &dyn Fn(&Row) -> Option<f64>| summary(rows.iter().filter_map(f).collect());
    println!("  pool, 1 thread        {}", column(&|r| Some(r.pool[0])));
    println!("  pool, 2 threads       {}", column(&|r| Some(r.pool[1])));
    println!("  sequential plan       {}", column(&|r| Some(r.sequential)));
    println!("  parallel-safe plan    {}", column(&|r| r.parallel));
    for (i, threads) in SCHEDULE_THREADS.iter().enumerate() {
        println!(
            "  scheduled plan, {threads}t    {}   (over the schedule's own max-live: {}; makespan cost: {})",
            column(&|r| r.scheduled[i].map(|s| s.arena)),
            column(&|r| r.scheduled[i].map(|s| s.arena_to_schedule)),
            column(&|r| r.scheduled[i].map(|s| s.makespan_cost)),
        );
    }
    let below = rows.iter().filter(|r| r.aware_order < 1.0).count();
    let best = rows.iter().map(|r| r.aware_order).fold(f64::INFINITY, f64::min);
    println!(
        "  memory-aware order's max-live bound / the file order's: below 1 on {below} of {} graphs, {best:.3} at best",
        rows.len()
    );
    let at_bound = rows.iter().filter(|r| r.sequential <= 1.0005).count();
    println!(
        "  sequential plan at (or below) the bound on {at_bound} of {} graphs",
        rows.len()
    );
    for (what, which) in [("sequential", 0), ("parallel-safe", 1), ("scheduled (8 threads)", 2)] {
        let ms = |r: &Row| match which {
            0 => r.plan_ms,
            1 => r.parallel_ms,
            _ => r.scheduled[1].map_or(0.0, |s| s.ms),
        };
        let slowest = rows.iter().max_by(|a, b| ms(a).total_cmp(&ms(b))).expect("graphs");
        println!(
            "  slowest {what} plan: {:.1} ms for {} nodes",
            ms(slowest),
            slowest.nodes
        );
    }
    if !runs {
        return;
    }
    if std::env::args().any(|a| a == "--all") {
        println!();
        println!("every generated graph:");
        rows.iter().for_each(print_row);
    }
    let mut worst: Vec<&Row> = rows.iter().collect();
    worst.sort_by(|a, b| b.pool[0].max(b.pool[1]).total_cmp(&a.pool[0].max(a.pool[1])));
    println!();
    println!("the five graphs where the pool is furthest from the bound:");
    for r in worst.into_iter().take(5) {
        print_row(r);
    }
}
