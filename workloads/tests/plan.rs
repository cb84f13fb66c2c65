//! Static plans on the real graphs and the seed pipeline: the verifier accepts them, sequential
//! plans reach the file-order lower bound, parallel-safe plans are never smaller.

use graphsched::plan::{Mode, Order, Plan};
use graphsched_workloads::{bundled_graphs, seed_pipeline, GraphFile};

fn check(file: &GraphFile) -> (f64, f64, f64) {
    let loaded = file.build(&mut |_| Box::new(|_| Ok(()))).unwrap();
    let g = &loaded.graph;
    let lb = file.max_live_bytes();
    let topo = Plan::new(g, Mode::Sequential(Order::Topological)).unwrap();
    topo.verify(g).unwrap();
    assert_eq!(topo.max_live_bytes, lb, "{}: the plan's bound is the file's", file.name);
    let memory = Plan::new(g, Mode::Sequential(Order::MemoryAware)).unwrap();
    memory.verify(g).unwrap();
    let parallel = Plan::new(g, Mode::ParallelSafe).unwrap();
    parallel.verify(g).unwrap();
    assert!(
        parallel.arena_bytes >= topo.arena_bytes.min(memory.arena_bytes)
            || parallel.arena_bytes >= lb.min(memory.max_live_bytes)
    );
    let r = |p: &Plan| p.arena_bytes as f64 / lb as f64;
    eprintln!(
        "{:>40}: topo {:.4}x  memory-order {:.4}x (its bound {:.4}x)  parallel-safe {:.4}x",
        file.name,
        r(&topo),
        r(&memory),
        memory.max_live_bytes as f64 / lb as f64,
        r(&parallel)
    );
    (r(&topo), r(&memory), r(&parallel))
}

#[test]
fn plans_verify_and_sequential_plans_reach_the_bound() {
    for path in bundled_graphs() {
        let file = GraphFile::load(&path).unwrap();
        let (topo, _, _) = check(&file);
        assert!(
            topo <= 1.001,
            "{}: sequential plan at {topo:.4}x of the lower bound",
            file.name
        );
    }
    let (topo, _, _) = check(&seed_pipeline(1, 1.0));
    assert!(topo <= 1.10, "seed pipeline: sequential plan at {topo:.4}x");
}
