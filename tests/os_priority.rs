//! An executor whose threads run at a lower OS priority (`Executor::set_background_nice`):
//! normal runs under its budget go to those threads while their callers wait, urgent runs stay
//! on their callers at the callers' priority, and the value only goes up. Values near the top
//! (15-19), so that the tests pass under `nice` too (a thread may raise its nice value, never
//! lower it).

use std::sync::{Arc, Mutex};

use graphsched::sched::RunPriority;
use graphsched::{ErrorKind, Executor, Graph, GraphBuilder, NodeDesc, Pool, RunOptions, ValueRef};

/// The calling thread's OS id and nice value.
fn this_thread() -> (i32, i32) {
    // SAFETY: plain system calls on the calling thread.
    unsafe {
        let id = libc::syscall(libc::SYS_gettid) as i32;
        (id, libc::getpriority(libc::PRIO_PROCESS, id as libc::id_t))
    }
}

/// A one-node graph whose kernel records the thread it ran on and that thread's nice value.
fn recording(seen: &Arc<Mutex<Vec<(i32, i32)>>>) -> Arc<Graph> {
    let seen = seen.clone();
    let mut b = GraphBuilder::new();
    let kernel: graphsched::Kernel = Box::new(move |ctx| {
        seen.lock().unwrap().push(this_thread());
        ctx.output_bytes(0).unwrap().fill(1);
        Ok(())
    });
    let node = b
        .add_node(NodeDesc::new("record", "Record", kernel).output(64))
        .unwrap();
    b.mark_output(ValueRef::new(node, 0)).unwrap();
    Arc::new(b.finalize().unwrap())
}

fn run_at(graph: &Arc<Graph>, pool: &Arc<Pool>, executor: &Executor, priority: RunPriority) {
    let options = RunOptions {
        executor: Some(executor),
        priority,
        ..Default::default()
    };
    graphsched::run(graph, pool, &options).unwrap();
}

#[test]
fn normal_runs_go_to_the_lowered_threads_and_urgent_ones_stay_on_their_callers() {
    let seen = Arc::new(Mutex::new(Vec::new()));
    let graph = recording(&seen);
    let pool = Arc::new(Pool::default());
    let executor = Executor::new(2).unwrap();
    executor.set_memory_budget(1 << 20).unwrap();
    executor.set_background_nice(18).unwrap();
    let caller = this_thread();
    for _ in 0..20 {
        run_at(&graph, &pool, &executor, RunPriority::Normal);
        let (thread, nice) = seen.lock().unwrap().pop().unwrap();
        assert_ne!(thread, caller.0, "a normal run ran on its caller");
        assert_eq!(nice, 18, "a normal run ran on a thread of nice {nice}");
        run_at(&graph, &pool, &executor, RunPriority::High);
        let (thread, nice) = seen.lock().unwrap().pop().unwrap();
        assert_eq!(
            (thread, nice),
            caller,
            "an urgent run left its caller, or its caller's priority changed"
        );
    }
    // Without a budget, runs go as before: this one-node graph on its caller.
    let unbudgeted = Executor::new(2).unwrap();
    unbudgeted.set_background_nice(18).unwrap();
    run_at(&graph, &pool, &unbudgeted, RunPriority::Normal);
    assert_eq!(seen.lock().unwrap().pop().unwrap(), caller);
}

#[test]
fn the_nice_value_is_checked_and_only_goes_up() {
    let executor = Executor::new(3).unwrap();
    for wrong in [0, -1, 20] {
        let e = executor.set_background_nice(wrong).unwrap_err();
        assert_eq!(e.kind(), ErrorKind::InvalidArgument);
        assert!(e.message().contains("1 to 19"), "{}", e.message());
    }
    assert_eq!(executor.background_nice(), 0);
    executor.set_background_nice(17).unwrap();
    let e = executor.set_background_nice(16).unwrap_err();
    assert_eq!(e.kind(), ErrorKind::InvalidArgument);
    assert!(e.message().contains("before (17)"), "{}", e.message());
    executor.set_background_nice(19).unwrap();
    assert_eq!(executor.background_nice(), 19);
    // Every thread took the last value, the stand-in started after it included.
    executor.set_memory_budget(1 << 20).unwrap();
    let seen = Arc::new(Mutex::new(Vec::new()));
    let graph = recording(&seen);
    let pool = Arc::new(Pool::default());
    std::thread::scope(|s| {
        for _ in 0..4 {
            s.spawn(|| {
                for _ in 0..25 {
                    run_at(&graph, &pool, &executor, RunPriority::Normal);
                }
            });
        }
    });
    let seen = seen.lock().unwrap();
    assert_eq!(seen.len(), 100);
    assert!(seen.iter().all(|&(_, nice)| nice == 19), "{seen:?}");
}
