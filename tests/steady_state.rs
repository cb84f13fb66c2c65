//! Steady state: once a graph has run, its runs ask the heap for nothing (issue 12). A counting
//! global allocator sees every allocation of this test binary.

use std::alloc::{GlobalAlloc, Layout, System};
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::Arc;

mod common;

use common::chain;
use graphsched::{Executor, Graph, Pool, RunOptions, ValueRef};

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

/// One node feeding `width` nodes of mixed output sizes, all read by one join.
fn fan(width: u32) -> Graph {
    common::fan(width, |i| 16 << (i % 4))
}

/// The count is process-wide: one test runs at a time.
static MEASURING: std::sync::Mutex<()> = std::sync::Mutex::new(());

/// Heap allocations of one run after `warm` runs of the same graph on the same pool.
fn allocations_of_a_steady_run(graph: &Arc<Graph>, options: &RunOptions<'_>, warm: usize) -> u64 {
    let pool = Arc::new(Pool::default());
    for _ in 0..warm {
        drop(graphsched::run(graph, &pool, options).unwrap());
    }
    fewest_allocations(|| drop(graphsched::run(graph, &pool, options).unwrap()))
}

/// The fewest heap allocations `f` made in up to 20 calls, a millisecond apart. The count is
/// process-wide, and the test harness's own thread allocates when a test ends (it starts the
/// next test's thread), which may fall inside this test's measurements: on a loaded machine, all
/// of three back-to-back calls of a one-node graph once caught some. An allocation of the run
/// itself shows in every call.
fn fewest_allocations(mut f: impl FnMut()) -> u64 {
    let mut fewest = u64::MAX;
    for _ in 0..20 {
        let before = ALLOCS.load(Ordering::Relaxed);
        f();
        fewest = fewest.min(ALLOCS.load(Ordering::Relaxed) - before);
        if fewest == 0 {
            break;
        }
        std::thread::sleep(std::time::Duration::from_millis(1));
    }
    fewest
}

/// The graphs both tests run. The wide fan's values fill 75 slabs, which empty when the run ends
/// and go back to the arena, to be carved again by the next run; the large chain's values are
/// blocks of their own, placed by the arena.
fn graphs() -> [(&'static str, Arc<Graph>); 4] {
    [
        ("chain", Arc::new(chain(500, 64))),
        ("large chain", Arc::new(chain(50, 256 << 10))),
        ("fan", Arc::new(fan(300))),
        ("wide fan", Arc::new(fan(20_000))),
    ]
}

#[test]
fn a_steady_run_without_an_executor_allocates_nothing() {
    let _alone = MEASURING.lock().unwrap_or_else(|e| e.into_inner());
    for (name, graph) in graphs() {
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
/// tasks per band without allocating; past that, tasks go to the band's shared queue, which keeps
/// its buffer from run to run (`exec/workers/overflow.rs`): a steady fan of 300, which overflows the
/// caller's deque, allocates nothing, nor does a chain, which continues on one thread. With a
/// worker too, it takes its work from the shared queue into its own deque, which has room. The
/// wide fan's values also go through the central pool, past the threads' caches.
#[test]
fn a_steady_run_on_an_executor_allocates_nothing() {
    let _alone = MEASURING.lock().unwrap_or_else(|e| e.into_inner());
    for threads in [1, 2] {
        let executor = Executor::new(threads).unwrap();
        for (name, graph) in graphs() {
            // Forced: empty kernels, and a chain, would otherwise run on the caller alone.
            let options = RunOptions {
                executor: Some(&executor),
                force_executor: true,
                freeze_estimates: true,
                ..Default::default()
            };
            let n = allocations_of_a_steady_run(&graph, &options, 3);
            assert_eq!(n, 0, "{name} on {threads} threads: {n} allocations in a steady run");
        }
    }
}

/// Through the C API, as an engine calls it: after warm-up, a loop of `gs_run` and
/// `gs_result_free` on a 1-node graph and on a chain allocates nothing, sequentially and on an
/// executor of one thread (the result's handle reuses the allocation the last free left).
#[test]
fn a_steady_run_through_the_c_api_allocates_nothing() {
    use graphsched::ffi::gs_status::GS_OK;
    use graphsched::ffi::*;
    use std::ffi::c_void;
    use std::ptr::{null, null_mut};

    unsafe extern "C" fn empty_kernel(_: *mut gs_kernel_ctx, _: *mut c_void) -> i32 {
        0
    }
    let _alone = MEASURING.lock().unwrap_or_else(|e| e.into_inner());
    // SAFETY: every pointer passed below is either NULL where allowed or points to a live local
    // of the right type; handles are used only between their creation and their free.
    unsafe {
        let mut pool = null_mut();
        assert_eq!(gs_pool_new(null(), &mut pool), GS_OK);
        let mut executor = null_mut();
        let config = gs_executor_config { threads: 1 };
        assert_eq!(gs_executor_new(&config, &mut executor), GS_OK);
        for nodes in [1u32, 200] {
            let mut graph = null_mut();
            assert_eq!(gs_graph_new(&mut graph), GS_OK);
            let sizes = [64usize];
            for i in 0..nodes {
                let name = std::ffi::CString::new(format!("n{i}")).unwrap();
                let input = ValueRef::new(i.saturating_sub(1), 0);
                let mut d: gs_node_desc = std::mem::zeroed();
                d.name = name.as_ptr();
                d.kernel = Some(empty_kernel);
                d.inputs = &input;
                d.num_inputs = (i > 0) as u32;
                d.num_outputs = 1;
                d.output_sizes = sizes.as_ptr();
                let mut id = 0;
                assert_eq!(gs_graph_add_node(graph, &d, &mut id), GS_OK);
            }
            assert_eq!(gs_graph_mark_output(graph, ValueRef::new(nodes - 1, 0)), GS_OK);
            assert_eq!(gs_graph_finalize(graph), GS_OK);
            for with_executor in [false, true] {
                let mut options: gs_run_options = std::mem::zeroed();
                options.flags = GS_RUN_FREEZE_ESTIMATES;
                if with_executor {
                    options.executor = executor;
                }
                let run_once = || {
                    let mut result = null_mut();
                    assert_eq!(gs_run(graph, pool, &options, &mut result), GS_OK);
                    gs_result_free(result);
                };
                for _ in 0..3 {
                    run_once();
                }
                let n = fewest_allocations(|| {
                    for _ in 0..5 {
                        run_once();
                    }
                });
                assert_eq!(
                    n, 0,
                    "{nodes} nodes, executor {with_executor}: {n} allocations in 5 steady runs"
                );
            }
            gs_graph_free(graph);
        }
        gs_executor_free(executor);
        gs_pool_free(pool);
    }
}

/// A steady sequential run takes blocks from its cache, not the pool: the pool's lock is taken
/// for a few refills per run, not twice per node, and the pool's figures stay exact (the
/// blocks parked in the cache do not count as live).
#[test]
fn a_steady_sequential_run_takes_the_pool_lock_for_a_few_refills_not_per_node() {
    let _alone = MEASURING.lock().unwrap_or_else(|e| e.into_inner());
    let graph = Arc::new(chain(500, 64));
    let pool = Arc::new(Pool::default());
    let options = RunOptions::default();
    drop(graphsched::run(&graph, &pool, &options).unwrap());
    pool.reset_peaks();
    let result = graphsched::run(&graph, &pool, &options).unwrap();
    let acquires = result.stats().acquires;
    assert!(acquires <= 8, "{acquires} blocks taken from the pool for 500 nodes");
    let stats = pool.stats();
    assert_eq!(
        stats.peak_live_bytes,
        2 * 64,
        "a chain holds two 64-byte values at a time"
    );
    assert_eq!(stats.live_bytes, 64, "the graph output, and no parked block");
    drop(result);
    assert_eq!(pool.stats().live_bytes, 0);
}
