//! A run's start among other runs under one budget.

use std::sync::mpsc::{sync_channel, Receiver, SyncSender};
use std::sync::{Arc, Mutex};

use crate::{run, Executor, Graph, GraphBuilder, NodeDesc, Pool, RunOptions, ValueRef};

/// A one-node graph whose kernel says it started on `inside`, then waits for a word on `go`.
fn held(inside: SyncSender<()>, go: Receiver<()>) -> Arc<Graph> {
    let (inside, go) = (Mutex::new(inside), Mutex::new(go));
    let mut b = GraphBuilder::new();
    let kernel: crate::Kernel = Box::new(move |ctx| {
        inside.lock().unwrap().send(()).unwrap();
        go.lock().unwrap().recv().unwrap();
        ctx.output_bytes(0).unwrap().fill(1);
        Ok(())
    });
    let n = b.add_node(NodeDesc::new("held", "Held", kernel).output(64)).unwrap();
    b.mark_output(ValueRef::new(n, 0)).unwrap();
    Arc::new(b.finalize().unwrap())
}

/// Leaves a free block in the heap of a thread that is not the caller's: what a settle visits.
fn leave_a_free_block(pool: &Pool) {
    std::thread::scope(|s| {
        s.spawn(|| {
            let p = pool.acquire(4096, false).unwrap();
            // SAFETY: acquired above, not used after.
            unsafe { pool.release(p) }.unwrap();
        });
    });
}

fn quick() -> Arc<Graph> {
    let mut b = GraphBuilder::new();
    let kernel: crate::Kernel = Box::new(|ctx| {
        ctx.output_bytes(0).unwrap().fill(2);
        Ok(())
    });
    let n = b.add_node(NodeDesc::new("quick", "Quick", kernel).output(64)).unwrap();
    b.mark_output(ValueRef::new(n, 0)).unwrap();
    Arc::new(b.finalize().unwrap())
}

/// A run that starts while another is inside the executor's budget leaves the other threads'
/// heaps alone (settling them would take blocks from under the other run's kernels, holding
/// their locks); alone, it settles them, so that repeated runs find the pool alike. Fails if a
/// run's start visits the heaps whenever no run waits in the queue.
#[test]
fn a_run_among_others_in_the_budget_leaves_the_other_threads_heaps_alone() {
    let pool = Arc::new(Pool::default());
    let executor = Executor::new(2).unwrap();
    executor.set_memory_budget(1 << 20).unwrap();
    let options = || RunOptions {
        executor: Some(&executor),
        ..Default::default()
    };
    let (inside, started) = sync_channel(1);
    let (go, wait) = sync_channel(1);
    let long = held(inside, wait);
    let short = quick();
    let visits_among_others = std::thread::scope(|s| {
        let other = s.spawn(|| run(&long, &pool, &options()).map(|_| ()));
        started.recv().unwrap();
        leave_a_free_block(&pool);
        let before = pool.heap_visits();
        run(&short, &pool, &options()).unwrap();
        let visits = pool.heap_visits() - before;
        go.send(()).unwrap();
        other.join().unwrap().unwrap();
        visits
    });
    assert_eq!(
        visits_among_others, 0,
        "a run's start visited the heaps while another run was inside"
    );
    leave_a_free_block(&pool);
    let before = pool.heap_visits();
    run(&short, &pool, &options()).unwrap();
    assert!(pool.heap_visits() > before, "alone, a run's start settles every heap");
}
