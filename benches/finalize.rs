//! How long `finalize` takes on a graph of 1,000,000 nodes and 2,000,000 edges (the foundation
//! issue's goal: about a second on a 2-core machine). Building is timed separately.
//!
//! Run: `cargo bench --bench finalize` (options: `-- --nodes N --reps R`).

use std::time::Instant;

use graphsched::{GraphBuilder, NodeDesc, ValueRef};

fn arg(name: &str, default: usize) -> usize {
    let args: Vec<String> = std::env::args().collect();
    args.iter()
        .position(|a| a == name)
        .and_then(|i| args.get(i + 1))
        .and_then(|v| v.parse().ok())
        .unwrap_or(default)
}

fn median(mut xs: Vec<f64>) -> f64 {
    xs.sort_by(|a, b| a.partial_cmp(b).unwrap());
    xs[xs.len() / 2]
}

fn main() {
    let nodes = arg("--nodes", 1_000_000);
    let reps = arg("--reps", 5);
    let (mut build, mut finalize) = (Vec::new(), Vec::new());
    let mut edges = 0;
    for _ in 0..reps {
        let t = Instant::now();
        let mut b = GraphBuilder::new();
        let mut x = 0x2545_F491_4F6C_DD1Du64;
        for i in 0..nodes as u32 {
            let mut d = NodeDesc::new(format!("n{i}"), "Op", Box::new(|_| Ok(())))
                .output(64)
                .estimate_ns(1 + (i as u64 % 7));
            // Two inputs per node: its predecessor and one random earlier node.
            if i >= 2 {
                x ^= x << 13;
                x ^= x >> 7;
                x ^= x << 17;
                d = d
                    .input(ValueRef::new(i - 1, 0))
                    .input(ValueRef::new((x % (i as u64 - 1)) as u32, 0));
            }
            b.add_node(d).unwrap();
        }
        build.push(t.elapsed().as_secs_f64());
        let t = Instant::now();
        let g = b.finalize().unwrap();
        finalize.push(t.elapsed().as_secs_f64());
        edges = g.info().num_edges;
        std::hint::black_box(&g);
    }
    println!("finalize benchmark: {nodes} nodes, {edges} edges, {reps} repetitions");
    println!("  build     median {:.3} s   (add_node x {nodes})", median(build));
    println!(
        "  finalize  median {:.3} s   (validate, order, levels, critical path)",
        median(finalize)
    );
}
