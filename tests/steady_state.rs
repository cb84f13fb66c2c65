//! Steady state: once a graph has run, its runs ask the heap for nothing (issue 12). A counting
//! global allocator sees every allocation of this test binary.

use std::alloc::{GlobalAlloc, Layout, System};
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::Arc;

use graphsched::{Executor, Graph, GraphBuilder, NodeDesc, Pool, RunOptions, ValueRef};

struct Counting;
static ALLOCS: AtomicU64 = AtomicU64::new(0);

// SAFETY: forwards to the system allocator; counting changes nothing it returns.
unsafe impl GlobalAlloc for Counting {
    unsafe fn alloc(&self, layout: Layout) -> *mut u8 {
        ALLOCS.fetch_add(1, Ordering::Relaxed);
        // SAFETY: the caller's layout, as given.
        unsafe { System.alloc(layout) }
    }
    unsafe fn dealloc(&self, ptr: *mut u8, layout: Layout) {
        // SAFETY: `ptr` came from `alloc` above with this layout.
        unsafe { System.dealloc(ptr, layout) }
    }
    unsafe fn realloc(&self, ptr: *mut u8, layout: Layout, new_size: usize) -> *mut u8 {
        ALLOCS.fetch_add(1, Ordering::Relaxed);
        // SAFETY: as for `alloc` and `dealloc`.
        unsafe { System.realloc(ptr, layout, new_size) }
    }
}

#[global_allocator]
static GLOBAL: Counting = Counting;

fn empty() -> graphsched::Kernel {
    Box::new(|_| Ok(()))
}

/// A chain of `n` nodes.
fn chain(n: u32) -> Graph {
    let mut b = GraphBuilder::new();
    let mut prev = None;
    for i in 0..n {
        let mut d = NodeDesc::new(format!("n{i}"), "Op", empty()).output(64);
        if let Some(p) = prev {
            d = d.input(ValueRef::new(p, 0));
        }
        prev = Some(b.add_node(d).unwrap());
    }
    b.mark_output(ValueRef::new(prev.unwrap(), 0)).unwrap();
    b.finalize().unwrap()
}

/// One node feeding `width` nodes of mixed output sizes, all read by one join.
fn fan(width: u32) -> Graph {
    let mut b = GraphBuilder::new();
    let root = b.add_node(NodeDesc::new("root", "Op", empty()).output(64)).unwrap();
    let mut join = NodeDesc::new("join", "Join", empty()).output(16);
    for i in 0..width {
        let d = NodeDesc::new(format!("m{i}"), "Mid", empty())
            .input(ValueRef::new(root, 0))
            .output(16 << (i % 4));
        join = join.input(ValueRef::new(b.add_node(d).unwrap(), 0));
    }
    let join = b.add_node(join).unwrap();
    b.mark_output(ValueRef::new(join, 0)).unwrap();
    b.finalize().unwrap()
}

/// The count is process-wide: one test runs at a time.
static MEASURING: std::sync::Mutex<()> = std::sync::Mutex::new(());

/// Heap allocations of one run after `warm` runs of the same graph on the same pool.
fn allocations_of_a_steady_run(graph: &Arc<Graph>, options: &RunOptions<'_>, warm: usize) -> u64 {
    let pool = Arc::new(Pool::default());
    for _ in 0..warm {
        drop(graphsched::run(graph, &pool, options).unwrap());
    }
    let before = ALLOCS.load(Ordering::Relaxed);
    let result = graphsched::run(graph, &pool, options).unwrap();
    drop(result);
    ALLOCS.load(Ordering::Relaxed) - before
}

#[test]
fn a_steady_run_without_an_executor_allocates_nothing() {
    let _alone = MEASURING.lock().unwrap_or_else(|e| e.into_inner());
    for (name, graph) in [("chain", chain(500)), ("fan", fan(300))] {
        let graph = Arc::new(graph);
        let options = RunOptions {
            // Learning may recompute the priorities (an allocation) when estimates move; with
            // them frozen, a run's own work is what is counted.
            freeze_estimates: true,
            ..Default::default()
        };
        assert_eq!(allocations_of_a_steady_run(&graph, &options, 3), 0, "{name}");
    }
}

/// On an executor, the calling thread queues into a deque set of its own, which holds up to 63
/// tasks per band without allocating; past that, tasks go to crossbeam's injector, which takes a
/// block of 63 tasks from the heap as it fills: a fan of 300 that the caller queues costs at most
/// 5 blocks, a chain, which continues on one thread, none. Nothing else of a steady run
/// allocates. The executor here has the caller alone, so that the count is deterministic.
/// (Issue 12: an injector that never allocates is still to come.)
#[test]
fn a_steady_run_on_an_executor_allocates_only_the_injectors_blocks() {
    let _alone = MEASURING.lock().unwrap_or_else(|e| e.into_inner());
    let executor = Executor::new(1).unwrap();
    for (name, graph, blocks) in [("chain", chain(500), 0), ("fan", fan(300), 300u64.div_ceil(63))] {
        let graph = Arc::new(graph);
        let options = RunOptions {
            executor: Some(&executor),
            freeze_estimates: true,
            ..Default::default()
        };
        let n = allocations_of_a_steady_run(&graph, &options, 3);
        assert!(
            n <= blocks,
            "{name}: {n} allocations in a steady run, more than {blocks}"
        );
    }
}
