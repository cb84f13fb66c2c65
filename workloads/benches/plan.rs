//! Static plans on the real graphs and the seed pipeline: arena bytes against the file-order
//! max-live lower bound in each mode, and steady-state run time on a plan against the dynamic
//! pool, side by side.
//!
//! Run: `cargo bench -p graphsched-workloads --bench plan`

use std::sync::Arc;

use graphsched::plan::{Mode, Order, Plan};
use graphsched::{run, Pool, RunOptions};
use graphsched_workloads::{bundled_graphs, seed_pipeline, GraphFile, Measured, Pace};

fn median(mut xs: Vec<u64>) -> u64 {
    xs.sort_unstable();
    xs[xs.len() / 2]
}

fn main() {
    let mut files: Vec<GraphFile> = bundled_graphs().iter().map(|p| GraphFile::load(p).unwrap()).collect();
    files.push(seed_pipeline(1, 1.0));
    println!("arena bytes / file-order max-live lower bound");
    println!(
        "{:>38} | {:>12} | {:>9} {:>14} {:>14} | {:>13} | {:>16} {:>16}",
        "graph",
        "lower bound",
        "topo",
        "memory order",
        "(its bound)",
        "parallel-safe",
        "topo, in place",
        "parallel, in pl."
    );
    for file in &files {
        let loaded = file.build(&mut |_| Box::new(|_| Ok(()))).unwrap();
        let g = &loaded.graph;
        let lb = file.max_live_bytes() as f64;
        let topo = Plan::new(g, Mode::Sequential(Order::Topological)).unwrap();
        let memory = Plan::new(g, Mode::Sequential(Order::MemoryAware)).unwrap();
        let parallel = Plan::new(g, Mode::ParallelSafe).unwrap();
        let in_place = file
            .clone()
            .with_elementwise_in_place()
            .build(&mut |_| Box::new(|_| Ok(())))
            .unwrap();
        let topo_in_place = Plan::new(&in_place.graph, Mode::Sequential(Order::Topological)).unwrap();
        let parallel_in_place = Plan::new(&in_place.graph, Mode::ParallelSafe).unwrap();
        println!(
            "{:>38} | {:>12} | {:>8.4}x {:>13.4}x {:>13.4}x | {:>12.4}x | {:>15.4}x {:>15.4}x",
            file.name,
            lb as u64,
            topo.arena_bytes() as f64 / lb,
            memory.arena_bytes() as f64 / lb,
            memory.max_live_bytes() as f64 / lb,
            parallel.arena_bytes() as f64 / lb,
            topo_in_place.arena_bytes() as f64 / lb,
            parallel_in_place.arena_bytes() as f64 / lb
        );
    }
    println!();
    println!("steady-state run, one thread, topological order, measuring kernels: median of 20 runs after 3");
    println!(
        "{:>18} | {:>10} {:>10} {:>7} | {:>12} {:>12}",
        "graph", "pool us", "plan us", "ratio", "pool acq/run", "plan acq/run"
    );
    for file in files.iter().take(4) {
        let loaded = Measured::build(file, Pace::Touch, Some(1)).unwrap();
        let g = &loaded.graph;
        let bindings = loaded.bindings();
        let plan = Plan::new(g, Mode::Sequential(Order::Topological)).unwrap();
        let measure = |plan: Option<&Plan>| {
            let pool = Arc::new(Pool::default());
            let options = RunOptions {
                inputs: &bindings,
                plan,
                freeze_estimates: true,
                ..Default::default()
            };
            let mut walls = Vec::new();
            let mut acquires = 0;
            for i in 0..23 {
                let before = pool.stats().acquires;
                let r = run(g, &pool, &options).unwrap();
                if i >= 3 {
                    walls.push(r.stats().wall_ns);
                    acquires = pool.stats().acquires - before;
                }
            }
            (median(walls), acquires)
        };
        let (pool_ns, pool_acq) = measure(None);
        let (plan_ns, plan_acq) = measure(Some(&plan));
        println!(
            "{:>18} | {:>10.1} {:>10.1} {:>7.3} | {:>12} {:>12}",
            file.name,
            pool_ns as f64 / 1e3,
            plan_ns as f64 / 1e3,
            plan_ns as f64 / pool_ns as f64,
            pool_acq,
            plan_acq
        );
    }
}
