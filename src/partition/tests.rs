use super::*;
use crate::graph::{GraphBuilder, NodeDesc, ValueRef};

fn op(name: &str, ns: u64, bytes: usize) -> NodeDesc {
    NodeDesc::new(name, "Op", Box::new(|_| Ok(())))
        .output(bytes)
        .estimate_ns(ns)
}

/// x -> a -> {b, c} -> d: two branches of `branch_ns` between cheap nodes.
fn diamond(branch_ns: u64) -> Graph {
    let mut g = GraphBuilder::new();
    let x = g.add_input("x", 64).unwrap();
    let a = g.add_node(op("a", 1000, 64).input(x)).unwrap();
    let b = g.add_node(op("b", branch_ns, 64).input(ValueRef::new(a, 0))).unwrap();
    let c = g.add_node(op("c", branch_ns, 64).input(ValueRef::new(a, 0))).unwrap();
    let d = g
        .add_node(op("d", 1000, 64).input(ValueRef::new(b, 0)).input(ValueRef::new(c, 0)))
        .unwrap();
    g.mark_output(ValueRef::new(d, 0)).unwrap();
    g.finalize().unwrap()
}

fn options(call: u64, threads: usize) -> PartitionOptions {
    PartitionOptions {
        call_cost_ns: call,
        threads,
        ..Default::default()
    }
}

#[test]
fn long_branches_stay_apart_on_two_threads_and_merge_on_one() {
    let g = diamond(100_000);
    let two = partition(&g, &options(500, 2)).unwrap();
    let (b, c) = (2, 3);
    assert_ne!(
        two.cluster_of(b),
        two.cluster_of(c),
        "the schedule needs them apart: {:?}",
        two.clusters()
    );
    assert!(two.after().makespan_ns <= two.before().makespan_ns);
    let one = partition(&g, &options(500, 1)).unwrap();
    assert_eq!(one.clusters().len(), 1, "one thread: every call saved is time saved");
    assert_eq!(one.after().makespan_ns, 200_000 + 500, "the work less three calls");
}

#[test]
fn short_branches_merge_when_calls_cost_more_than_the_overlap() {
    let g = diamond(300);
    let p = partition(&g, &options(800, 2)).unwrap();
    assert_eq!(p.clusters().len(), 1, "{:?}", p.clusters());
    assert!(p.after().makespan_ns < p.before().makespan_ns);
}

#[test]
fn internal_values_count_against_the_limit() {
    // A chain whose middle value is large: merged, it lives for the whole cluster.
    let mut g = GraphBuilder::new();
    let x = g.add_input("x", 64).unwrap();
    let a = g.add_node(op("a", 1000, 64).input(x)).unwrap();
    let b = g.add_node(op("b", 1000, 4096).input(ValueRef::new(a, 0))).unwrap();
    let c = g.add_node(op("c", 1000, 64).input(ValueRef::new(b, 0))).unwrap();
    let d = g.add_node(op("d", 1000, 64).input(ValueRef::new(c, 0))).unwrap();
    g.mark_output(ValueRef::new(d, 0)).unwrap();
    let g = g.finalize().unwrap();
    let free = partition(&g, &options(500, 1)).unwrap();
    assert_eq!(free.clusters().len(), 1);
    let limit = 4096 + 64 + 64;
    let tight = partition(
        &g,
        &PartitionOptions {
            memory_limit_bytes: limit,
            ..options(500, 1)
        },
    )
    .unwrap();
    assert!(tight.clusters().len() > 1, "{:?}", tight.clusters());
    assert!(tight.after().peak_live_bytes <= limit);
    assert!(
        tight.after().makespan_ns < tight.before().makespan_ns,
        "it still merges what fits"
    );
}

#[test]
fn given_partitions_are_checked() {
    let g = diamond(1000);
    let sim = |clusters: &[Vec<u32>]| simulate_partition(&g, clusters, &options(0, 2));
    assert_eq!(
        sim(&[]).unwrap().makespan_ns,
        crate::sim::simulate(&g, &options(0, 2).sim()).unwrap().makespan_ns
    );
    let not_convex = sim(&[vec![1, 4], vec![2], vec![3]]).unwrap_err();
    assert!(not_convex.message().contains("not convex"), "{not_convex}");
    let missing = sim(&[vec![1, 2, 3]]).unwrap_err();
    assert!(
        missing.message().contains("node 'd'") && missing.message().contains("no cluster"),
        "{missing}"
    );
    let twice = sim(&[vec![1, 2], vec![2, 3, 4]]).unwrap_err();
    assert!(twice.message().contains("cluster 0 and in cluster 1"), "{twice}");
    let input = sim(&[vec![0, 1, 2, 3, 4]]).unwrap_err();
    assert!(input.message().contains("graph input"), "{input}");
    assert_eq!(sim(&[vec![1, 2, 3, 4]]).unwrap().makespan_ns, 1000 * 4);
}

#[test]
fn clusters_come_in_an_order_that_runs_them() {
    // x -> a -> c <- b <- x: {a, c} is convex and its first node comes before b, yet it reads
    // b's output, so {b} must come first.
    let mut g = GraphBuilder::new();
    let x = g.add_input("x", 64).unwrap();
    let a = g.add_node(op("a", 1000, 64).input(x)).unwrap();
    let b = g.add_node(op("b", 1000, 64).input(x)).unwrap();
    let c = g
        .add_node(op("c", 1000, 64).input(ValueRef::new(a, 0)).input(ValueRef::new(b, 0)))
        .unwrap();
    g.mark_output(ValueRef::new(c, 0)).unwrap();
    let g = g.finalize().unwrap();
    let pos = g.topological_positions();
    assert!(pos[a as usize] < pos[b as usize], "the graph's order puts a first");
    let mut cluster_of = vec![u32::MAX; g.node_count()];
    cluster_of[a as usize] = 0;
    cluster_of[c as usize] = 0;
    cluster_of[b as usize] = 1;
    let p = finish(&g, cluster_of, 2, SimResult::default(), SimResult::default(), 0);
    assert_eq!(p.clusters(), &[vec![b], vec![a, c]]);
    assert_eq!(
        (p.cluster_of(b), p.cluster_of(a), p.cluster_of(c)),
        (Some(0), Some(1), Some(1))
    );
}
