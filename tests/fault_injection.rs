//! What a run does when its own code fails (not a kernel): a panic injected into the run's
//! bookkeeping after a named node, as an internal bug would raise. The hook exists only with the
//! `fault-injection` feature (scripts/test.sh turns it on; a build without it has no hook and
//! pays nothing for it).

use std::sync::Arc;

use graphsched::exec::fault::panic_after_node;
use graphsched::{run, ErrorKind, Executor, GraphBuilder, NodeDesc, Pool, RunOptions, ValueRef};

/// The hook is one per process: tests that arm it take turns.
static HOOK: std::sync::Mutex<()> = std::sync::Mutex::new(());

fn noop() -> graphsched::Kernel {
    Box::new(|_| Ok(()))
}

/// A bug in the run's own bookkeeping (injected) fails the run with `KernelPanicked` instead of
/// killing a worker and leaving the run waiting for ever; the executor stays usable.
#[test]
fn an_internal_panic_fails_the_run_and_the_executor_lives_on() {
    let _turn = HOOK.lock().unwrap_or_else(|e| e.into_inner());
    let mut b = GraphBuilder::new();
    let a = b
        .add_node(NodeDesc::new("fault-injection-a", "Op", noop()).output(64))
        .unwrap();
    let mut fan = Vec::new();
    for i in 0..8 {
        fan.push(
            b.add_node(
                NodeDesc::new(format!("fault-injection-{i}"), "Op", noop())
                    .input(ValueRef::new(a, 0))
                    .output(64),
            )
            .unwrap(),
        );
    }
    let mut sink = NodeDesc::new("fault-injection-sink", "Op", noop()).output(64);
    for &f in &fan {
        sink = sink.input(ValueRef::new(f, 0));
    }
    let sink = b.add_node(sink).unwrap();
    b.mark_output(ValueRef::new(sink, 0)).unwrap();
    let graph = Arc::new(b.finalize().unwrap());
    let executor = Executor::new(2).unwrap();
    let pool = Arc::new(Pool::default());
    for (window, limit) in [(0, 0), (1, 0), (0, 100_000)] {
        for executor in [None, Some(&executor)] {
            let options = RunOptions {
                executor,
                window,
                memory_limit_bytes: limit,
                ..Default::default()
            };
            panic_after_node(Some("fault-injection-3"));
            let e = run(&graph, &pool, &options)
                .err()
                .expect("the injected fault fails the run");
            panic_after_node(None);
            assert_eq!(e.kind(), ErrorKind::KernelPanicked, "{e}");
            assert!(
                e.message().contains("internal error") && e.message().contains("fault-injection-3"),
                "{e}"
            );
            assert_eq!(pool.stats().live_bytes, 0, "every buffer went back");
            run(&graph, &pool, &options).expect("the executor and the graph still work");
        }
    }
}

/// A fault right after a node that computed in place (its output took its input's block): the
/// run fails with one error and gives that block back once (it was given back twice, and the
/// second release panicked in the run's cleanup).
#[test]
fn a_fault_after_an_in_place_node_gives_its_block_back_once() {
    let _turn = HOOK.lock().unwrap_or_else(|e| e.into_inner());
    let mut b = GraphBuilder::new();
    let a = b.add_node(NodeDesc::new("A", "Make", noop()).output(64)).unwrap();
    let x = NodeDesc::new("fault-in-place", "Relu", noop())
        .input(ValueRef::new(a, 0))
        .output(64)
        .in_place(0, 0);
    let x = b.add_node(x).unwrap();
    b.mark_output(ValueRef::new(x, 0)).unwrap();
    let graph = Arc::new(b.finalize().unwrap());
    let pool = Arc::new(Pool::default());
    panic_after_node(Some("fault-in-place"));
    let outcome = std::panic::catch_unwind(std::panic::AssertUnwindSafe(|| {
        run(&graph, &pool, &RunOptions::default()).err()
    }));
    panic_after_node(None);
    let e = outcome
        .expect("the run's cleanup does not panic")
        .expect("the injected fault fails the run");
    assert_eq!(e.kind(), ErrorKind::KernelPanicked, "{e}");
    assert_eq!(pool.stats().live_bytes, 0, "every buffer went back");
    let r = run(&graph, &pool, &RunOptions::default()).expect("the graph runs again");
    drop(r);
    assert_eq!(pool.stats().live_bytes, 0);
}
