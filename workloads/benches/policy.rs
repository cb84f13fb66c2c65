//! Which list order schedules best, measured against the tight makespan bound
//! (`graphsched::sched::MakespanBound`) in the simulator: critical path first (least slack)
//! against plain highest-bottom-level first, at 2, 4 and 8 threads.
//!
//! The corpus: the four real graphs, the seed pipeline (seeds 1 to 10, scale 0.3), and random
//! layered DAGs. The random DAGs come in two ranges of seeds: a choice between the policies would
//! be made on the first (1..=50) and reported on the second (1001..=1200), never looked at
//! while choosing.
//!
//! Run: `cargo bench -p graphsched-workloads --bench policy`

use graphsched::sim::{simulate, SimOptions};
use graphsched::{Graph, GraphBuilder, NodeDesc, Policy, ValueRef};
use graphsched_workloads::{bundled_graphs, seed_pipeline, GraphFile};

const THREADS: [usize; 3] = [2, 4, 8];
const POLICIES: [(Policy, &str); 2] = [(Policy::CriticalPath, "critical"), (Policy::BottomLevel, "level")];

/// A layered random DAG: 4 to 40 layers of 1 to 12 nodes, each reading 1 to 3 nodes of the
/// layers above, estimates spread over three orders of magnitude (a few long nodes).
fn random_dag(seed: u64) -> Graph {
    let mut x = seed.wrapping_mul(0x9E37_79B9_7F4A_7C15) | 1;
    let mut next = |n: u64| {
        x ^= x << 13;
        x ^= x >> 7;
        x ^= x << 17;
        x % n.max(1)
    };
    let mut b = GraphBuilder::new();
    let mut layers: Vec<Vec<u32>> = Vec::new();
    for l in 0..4 + next(37) {
        let mut layer = Vec::new();
        for i in 0..1 + next(12) {
            let ns = match next(10) {
                0 => 100_000 + next(900_000),
                1..=3 => 10_000 + next(90_000),
                _ => 1_000 + next(9_000),
            };
            let mut d = NodeDesc::new(format!("l{l}n{i}"), "Op", Box::new(|_| Ok(())))
                .output(64)
                .estimate_ns(ns);
            if !layers.is_empty() {
                for _ in 0..1 + next(3) {
                    let from = &layers[layers.len() - 1 - next(layers.len().min(3) as u64) as usize];
                    d = d.input(ValueRef::new(from[next(from.len() as u64) as usize], 0));
                }
            }
            layer.push(b.add_node(d).unwrap());
        }
        layers.push(layer);
    }
    b.finalize().unwrap()
}

fn build(file: &GraphFile) -> Graph {
    let loaded = file.build(&mut |_| Box::new(|_| Ok(()))).unwrap();
    std::sync::Arc::try_unwrap(loaded.graph).unwrap_or_else(|_| panic!("the graph is shared"))
}

/// makespan / bound for each (threads, policy).
fn ratios(g: &Graph) -> Vec<[f64; 2]> {
    THREADS
        .iter()
        .map(|&threads| {
            POLICIES.map(|(policy, _)| {
                let options = SimOptions {
                    threads,
                    policy,
                    window: 0,
                    memory_limit_bytes: 0,
                };
                let r = simulate(g, &options).unwrap();
                r.makespan_ns as f64 / r.makespan_lb_ns.max(1) as f64
            })
        })
        .collect()
}

fn summary(label: &str, all: &[Vec<[f64; 2]>]) {
    for (t, threads) in THREADS.iter().enumerate() {
        let mut line = format!("{label:<28} {threads} threads:");
        for (p, (_, name)) in POLICIES.iter().enumerate() {
            let mut xs: Vec<f64> = all.iter().map(|r| r[t][p]).collect();
            xs.sort_by(|a, b| a.partial_cmp(b).unwrap());
            let geo = (xs.iter().map(|x| x.ln()).sum::<f64>() / xs.len() as f64).exp();
            line += &format!(
                "  {name} geomean {geo:.4} p95 {:.4} max {:.4}",
                xs[(xs.len() * 95 / 100).min(xs.len() - 1)],
                xs[xs.len() - 1]
            );
        }
        let (wins, losses) = all.iter().fold((0, 0), |(w, l), r| {
            let (c, b) = (r[t][0], r[t][1]);
            (w + (b < c * 0.9999) as u32, l + (b > c * 1.0001) as u32)
        });
        line += &format!("  level better on {wins}, worse on {losses} of {}", all.len());
        println!("{line}");
    }
}

fn main() {
    println!("makespan / bound in the simulator (bound: critical path, work / threads, and every node's ancestors'");
    println!("work / threads plus its longest path, and the mirror)\n");
    println!("{:<28} {:>7}  {:>9} {:>9}", "graph", "threads", "critical", "level");
    let mut named = Vec::new();
    for path in bundled_graphs() {
        let file = GraphFile::load(&path).unwrap();
        named.push((file.name.clone(), build(&file)));
    }
    named.push(("seed pipeline (seed 1)".into(), build(&seed_pipeline(1, 0.3))));
    for (name, g) in &named {
        for (t, r) in ratios(g).iter().enumerate() {
            println!("{name:<28} {:>7}  {:>9.4} {:>9.4}", THREADS[t], r[0], r[1]);
        }
    }
    println!();
    let seeds: Vec<Vec<[f64; 2]>> = (1..=10).map(|s| ratios(&build(&seed_pipeline(s, 0.3)))).collect();
    summary("seed pipeline, seeds 1-10", &seeds);
    let tune: Vec<Vec<[f64; 2]>> = (1..=50).map(|s| ratios(&random_dag(s))).collect();
    summary("random DAGs 1-50 (choose)", &tune);
    let report: Vec<Vec<[f64; 2]>> = (1001..=1200).map(|s| ratios(&random_dag(s))).collect();
    summary("random DAGs 1001-1200 (report)", &report);
}
