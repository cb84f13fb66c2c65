//! The small blocks a graph keeps between its runs (`exec/memory/reserve.rs`): the next run takes
//! them instead of the pool's, they never show as live, and they go back to their pool when
//! the graph goes, runs on another pool, or runs on a pool with a byte cap; a pool freed first
//! takes them with it.

use std::sync::Arc;

mod common;

use graphsched::{Executor, Graph, Pool, PoolConfig, RunOptions, ValueRef};

fn chain(n: u32, bytes: usize) -> Arc<Graph> {
    Arc::new(common::chain(n, bytes))
}

/// One node feeding `width` nodes of 16-byte outputs, all read by one join: every middle value
/// lives until the join, far more than a thread's cache holds.
fn fan(width: u32) -> Arc<Graph> {
    Arc::new(common::fan(width, |_| 16))
}

/// Whether every block of the pool is back: a trim then leaves no memory reserved.
fn all_back(pool: &Pool) -> bool {
    pool.trim();
    pool.stats().reserved_bytes == 0
}

/// Runs `graph` on `pool` `times` times, each result freed before the next run; the stats of
/// the last run.
fn runs(graph: &Arc<Graph>, pool: &Arc<Pool>, options: &RunOptions<'_>, times: usize) -> graphsched::RunStats {
    let mut last = None;
    for _ in 0..times {
        let result = graphsched::run(graph, pool, options).unwrap();
        last = Some(result.stats());
    }
    last.unwrap()
}

#[test]
fn a_graph_run_again_and_again_takes_its_blocks_from_its_reserve_not_the_pool() {
    let executor = Executor::new(2).unwrap();
    // On an executor, unforced, a chain runs on its caller (`tests/chains_on_caller.rs`); forced,
    // on the threads.
    for (parallel, forced) in [(false, false), (true, false), (true, true)] {
        let options = RunOptions {
            executor: parallel.then_some(&executor),
            force_executor: forced,
            ..Default::default()
        };
        for graph in [chain(1, 64), chain(20, 256)] {
            let pool = Arc::new(Pool::default());
            runs(&graph, &pool, &options, 2);
            let before = pool.stats();
            let mut most = 0;
            for _ in 0..5 {
                most = most.max(runs(&graph, &pool, &options, 1).acquires);
            }
            let after = pool.stats();
            assert_eq!(
                most, 0,
                "a steady run took {most} blocks from the pool (parallel: {parallel}, forced: {forced})"
            );
            assert_eq!(after.acquires, before.acquires, "the pool handed out blocks");
            assert_eq!(after.releases, before.releases, "blocks went back to the pool");
            // Kept blocks are not live, and no more memory was needed.
            assert_eq!(after.live_bytes, 0);
            assert_eq!(after.reserved_bytes, before.reserved_bytes);
            assert!(!all_back(&pool), "the graph keeps blocks of the pool between runs");
            drop(graph);
            assert!(all_back(&pool), "a freed graph gives its kept blocks back");
        }
    }
}

#[test]
fn values_that_outgrow_the_caches_come_from_the_reserve_once_steady() {
    let executor = Executor::new(2).unwrap();
    let graph = fan(2000);
    for parallel in [false, true] {
        // Forced: the fan's kernels are short, and would keep the run on its caller.
        let options = RunOptions {
            executor: parallel.then_some(&executor),
            force_executor: parallel,
            ..Default::default()
        };
        let pool = Arc::new(Pool::default());
        let first = runs(&graph, &pool, &options, 1);
        assert!(first.acquires >= 2000, "the first run takes every block from the pool");
        let before = pool.stats();
        let mut most = 0;
        for _ in 0..5 {
            most = most.max(runs(&graph, &pool, &options, 1).acquires);
        }
        // The caches hold 64 blocks at most: without the reserve, the 2,000 middle values would
        // go back to the pool and come again every run. On an executor a thread's cache may end
        // a run with other blocks than the last time, a few refills more.
        let allowed = if parallel { 200 } else { 0 };
        assert!(
            most <= allowed,
            "a steady run took {most} blocks from the pool (parallel: {parallel})"
        );
        let after = pool.stats();
        assert_eq!(
            after.os_allocs, before.os_allocs,
            "steady runs asked the system for memory"
        );
        assert_eq!(after.live_bytes, 0);
        // Exact while a result is held: its 16-byte output alone is live (a block parked twice,
        // or not at all, would show here).
        let held = graphsched::run(&graph, &pool, &options).unwrap();
        assert_eq!(pool.stats().live_bytes, 16, "parallel: {parallel}");
        drop(held);
        assert_eq!(pool.stats().live_bytes, 0);
    }
}

#[test]
fn a_result_held_while_the_graph_runs_again_keeps_its_own_output() {
    let graph = chain(3, 64);
    let pool = Arc::new(Pool::default());
    let options = RunOptions::default();
    runs(&graph, &pool, &options, 2);
    let first = graphsched::run(&graph, &pool, &options).unwrap();
    let second = graphsched::run(&graph, &pool, &options).unwrap();
    let out = ValueRef::new(2, 0);
    let (a, b) = (first.output(out).unwrap().data, second.output(out).unwrap().data);
    assert_ne!(a, b, "two live results share a block");
    assert_eq!(pool.stats().live_bytes, 128, "two results, one 64-byte output each");
    drop((first, second));
    assert_eq!(pool.stats().live_bytes, 0);
}

#[test]
fn a_graph_run_on_another_pool_gives_the_first_its_blocks_back() {
    let graph = chain(4, 128);
    let (first, second) = (Arc::new(Pool::default()), Arc::new(Pool::default()));
    let options = RunOptions::default();
    runs(&graph, &first, &options, 2);
    assert!(!all_back(&first));
    runs(&graph, &second, &options, 2);
    assert!(all_back(&first), "the blocks kept from the first pool went back to it");
    assert!(!all_back(&second), "the graph keeps the second pool's now");
    assert_eq!(second.stats().live_bytes, 0);
}

#[test]
fn a_pool_with_a_byte_cap_gets_every_block_back_at_once() {
    let graph = chain(4, 128);
    let pool = Arc::new(
        Pool::new(PoolConfig {
            max_pool_bytes: 1 << 20,
            ..Default::default()
        })
        .unwrap(),
    );
    runs(&graph, &pool, &RunOptions::default(), 3);
    assert!(all_back(&pool), "a capped pool's blocks are not kept from it");
}

#[test]
fn a_pool_freed_before_the_graph_takes_the_kept_blocks_with_it() {
    let graph = chain(2, 64);
    let pool = Arc::new(Pool::default());
    runs(&graph, &pool, &RunOptions::default(), 2);
    let weak = Arc::downgrade(&pool);
    drop(pool);
    assert!(
        weak.upgrade().is_none(),
        "the graph's kept blocks do not hold their pool"
    );
    // The graph forgets them, and runs on another pool as before.
    let other = Arc::new(Pool::default());
    let stats = runs(&graph, &other, &RunOptions::default(), 3);
    assert_eq!(stats.acquires, 0, "it keeps the new pool's blocks");
    drop(graph);
    assert!(all_back(&other));
}
