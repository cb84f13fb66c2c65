//! A graph that can never have two nodes ready at once (a chain, a single node) runs on its
//! calling thread even when given an executor: its threads could add nothing but the cost of
//! their queues. Any graph with two nodes that could run at once still goes to the executor.

use std::sync::Arc;

use graphsched::{Executor, Graph, GraphBuilder, NodeDesc, Pool, RunOptions, ValueRef};

fn empty() -> graphsched::Kernel {
    Box::new(|_| Ok(()))
}

/// A graph of `n` nodes with `edges` (producer, consumer) and its last node's output marked.
fn graph(n: u32, edges: &[(u32, u32)]) -> Arc<Graph> {
    let mut b = GraphBuilder::new();
    for i in 0..n {
        let mut d = NodeDesc::new(format!("n{i}"), "Op", empty()).output(64);
        for &(from, _) in edges.iter().filter(|&&(_, to)| to == i) {
            d = d.input(ValueRef::new(from, 0));
        }
        b.add_node(d).unwrap();
    }
    b.mark_output(ValueRef::new(n - 1, 0)).unwrap();
    Arc::new(b.finalize().unwrap())
}

/// The threads a traced run of `g` on a 2-thread executor could use, and the tracks its nodes
/// ran on.
fn threads_and_tracks(g: &Arc<Graph>, memory_limit_bytes: u64) -> (u64, Vec<u32>) {
    let executor = Executor::new(2).unwrap();
    let pool = Arc::new(Pool::default());
    let result = graphsched::run(
        g,
        &pool,
        &RunOptions {
            executor: Some(&executor),
            trace: true,
            memory_limit_bytes,
            ..Default::default()
        },
    )
    .unwrap();
    let tracks = result.events().iter().map(|e| e.thread).collect();
    (result.stats().threads, tracks)
}

#[test]
fn a_chain_runs_on_its_caller_even_on_an_executor() {
    // A chain, and a chain with a shortcut edge (0 -> 2 as well as 0 -> 1 -> 2): both serial.
    for g in [
        graph(50, &(0..49).map(|i| (i, i + 1)).collect::<Vec<_>>()),
        graph(3, &[(0, 1), (0, 2), (1, 2)]),
    ] {
        for _ in 0..20 {
            let (threads, tracks) = threads_and_tracks(&g, 0);
            assert_eq!(threads, 1, "a serial graph's run uses its caller only");
            assert!(tracks.iter().all(|&t| t == 0), "a node ran on a worker: {tracks:?}");
            assert_eq!(tracks.len(), g.node_count());
        }
    }
}

#[test]
fn a_graph_with_two_nodes_that_may_run_at_once_goes_to_the_executor() {
    // A diamond: 1 and 2 may run at once. Two roots: 0 and 1 may.
    for g in [graph(4, &[(0, 1), (0, 2), (1, 3), (2, 3)]), graph(3, &[(0, 2), (1, 2)])] {
        let (threads, _) = threads_and_tracks(&g, 0);
        assert_eq!(threads, 2);
    }
}

#[test]
fn a_chain_under_a_memory_limit_keeps_the_executor() {
    let g = graph(10, &(0..9).map(|i| (i, i + 1)).collect::<Vec<_>>());
    let (threads, tracks) = threads_and_tracks(&g, 1 << 20);
    assert_eq!(threads, 2, "admission on an executor is what the caller asked for");
    assert_eq!(tracks.len(), 10);
}

/// Forced onto the executor, a chain still stays on one thread: each node's successor is the
/// only ready node, so however much less urgent its band is (under the bottom-level policy the
/// successors of a chain fall band after band), nothing queued comes before it, and its
/// producer's thread runs it at once instead of queueing it and waking another thread.
#[test]
fn a_chain_forced_onto_the_executor_keeps_each_successor_on_its_thread() {
    let g = graph(20, &(0..19).map(|i| (i, i + 1)).collect::<Vec<_>>());
    let executor = Executor::new(2).unwrap();
    let pool = Arc::new(Pool::default());
    for _ in 0..50 {
        let result = graphsched::run(
            &g,
            &pool,
            &RunOptions {
                executor: Some(&executor),
                trace: true,
                force_executor: true,
                ..Default::default()
            },
        )
        .unwrap();
        let tracks: Vec<u32> = result.events().iter().map(|e| e.thread).collect();
        assert_eq!(tracks.len(), 20);
        assert!(
            tracks.iter().all(|&t| t == tracks[0]),
            "a successor went to another thread: {tracks:?}"
        );
    }
}
