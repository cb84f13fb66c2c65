//! A result holds its run's arrays (`exec/run/`): its outputs are read where the run left
//! them, later runs of the graph take other arrays while it lives, and dropping it, on any
//! thread, in any order, gives its blocks and the arrays back. It owns all it shows: a binding
//! marked as a graph output is copied.

use std::sync::atomic::{AtomicBool, AtomicU32, Ordering};
use std::sync::Arc;

use graphsched::{Executor, Graph, GraphBuilder, InputBinding, NodeDesc, Pool, RunOptions, ValueRef};

/// Bound memory is 16-byte aligned.
#[repr(C, align(16))]
struct Aligned([u8; 8]);

/// Graph input `x` (8 bytes), marked as a graph output too; `stamp` writes the run's number
/// (counted in `runs`) into its 64-byte output, marked, or fails while `fail` is set (each test
/// its own: tests run at once); `sum`
/// writes a byte: `x`'s first plus the stamp's bytes.
fn stamped(runs: &'static AtomicU32, fail: &'static AtomicBool) -> (Arc<Graph>, ValueRef, ValueRef) {
    let mut b = GraphBuilder::new();
    let x = b.add_input("x", 8).unwrap();
    let stamp = b
        .add_node(
            NodeDesc::new(
                "stamp",
                "Stamp",
                Box::new(move |ctx: &mut graphsched::KernelCtx<'_>| {
                    if fail.load(Ordering::Relaxed) {
                        return Err("refused".to_string());
                    }
                    let n = runs.fetch_add(1, Ordering::Relaxed);
                    ctx.output_bytes(0).unwrap().fill(n as u8);
                    Ok(())
                }),
            )
            .input(x)
            .output(64),
        )
        .unwrap();
    let sum = b
        .add_node(
            NodeDesc::new(
                "sum",
                "Sum",
                Box::new(|ctx: &mut graphsched::KernelCtx<'_>| {
                    let first = ctx.input_bytes(0).unwrap()[0] as u32;
                    let total: u32 = first + ctx.input_bytes(1).unwrap().iter().map(|&b| b as u32).sum::<u32>();
                    ctx.output_bytes(0).unwrap()[0] = total as u8;
                    Ok(())
                }),
            )
            .input(x)
            .input(ValueRef::new(stamp, 0))
            .output(1),
        )
        .unwrap();
    let stamp = ValueRef::new(stamp, 0);
    b.mark_output(x).unwrap();
    b.mark_output(stamp).unwrap();
    b.mark_output(ValueRef::new(sum, 0)).unwrap();
    (Arc::new(b.finalize().unwrap()), x, stamp)
}

/// One run of `g` on the caller with `bindings`, traced if `trace`.
fn run_bound(g: &Arc<Graph>, pool: &Arc<Pool>, bindings: &[InputBinding<'_>], trace: bool) -> graphsched::RunResult {
    let options = RunOptions {
        inputs: bindings,
        trace,
        ..RunOptions::default()
    };
    graphsched::run(g, pool, &options).unwrap()
}

/// Results held at once keep their own outputs while later runs go on (on the caller, on an
/// executor, on the graph's own plan, and one that fails); a graph input marked as an output is
/// the result's own copy. Dropped out of order, and on other threads, they leave the pool
/// holding nothing, and later runs still work.
#[test]
fn results_held_at_once_keep_their_outputs_and_give_everything_back() {
    static RUNS: AtomicU32 = AtomicU32::new(0);
    static FAIL: AtomicBool = AtomicBool::new(false);
    let (g, x, stamp) = stamped(&RUNS, &FAIL);
    let pool = Arc::new(Pool::default());
    let executor = Executor::new(2).unwrap();
    let mut input = Box::new(Aligned([7u8; 8]));
    let bindings = [InputBinding::new(x, &input.0)];
    let mut held = Vec::new();
    for i in 0..15u32 {
        let options = RunOptions {
            inputs: &bindings,
            executor: (i % 3 == 1).then_some(&executor),
            force_executor: true,
            auto_plan: i % 3 == 2,
            ..RunOptions::default()
        };
        if i == 7 {
            FAIL.store(true, Ordering::Relaxed);
            assert!(graphsched::run(&g, &pool, &options).is_err());
            FAIL.store(false, Ordering::Relaxed);
        }
        let result = graphsched::run(&g, &pool, &options).unwrap();
        let n = RUNS.load(Ordering::Relaxed) - 1;
        assert_eq!(result.output_bytes(stamp).unwrap(), &[n as u8; 64][..]);
        held.push((n, result));
        if i % 4 == 3 {
            // Drop one from the middle: the others keep theirs.
            held.remove(held.len() / 2);
        }
    }
    // The caller's memory may change once the runs are over (the bindings' borrow has ended):
    // the results do not see it.
    input.0 = [9; 8];
    for (n, result) in &held {
        assert_eq!(
            result.output_bytes(stamp).unwrap(),
            &[*n as u8; 64][..],
            "run {n}'s output changed"
        );
        let t = result.output(x).unwrap();
        assert_ne!(
            t.data as *const u8,
            input.0.as_ptr(),
            "a bound output is the result's copy"
        );
        assert_eq!(result.output_bytes(x).unwrap(), &[7u8; 8][..]);
        let sum = result.output_bytes(ValueRef::new(2, 0)).unwrap()[0];
        assert_eq!(sum, (*n as u8 as u32 * 64 + 7) as u8);
    }
    assert!(pool.stats().live_bytes > 0, "the held results' outputs are live");
    // Half dropped on other threads, the rest here, in reverse.
    let others: Vec<_> = held.drain(..held.len() / 2).collect();
    std::thread::scope(|s| {
        for result in others {
            s.spawn(move || drop(result));
        }
    });
    while let Some(result) = held.pop() {
        drop(result);
    }
    assert_eq!(pool.stats().live_bytes, 0, "a dropped result gives every block back");
    let bindings = [InputBinding::new(x, &input.0)];
    let again = run_bound(&g, &pool, &bindings, false);
    let n = RUNS.load(Ordering::Relaxed) - 1;
    assert_eq!(again.output_bytes(stamp).unwrap(), &[n as u8; 64][..]);
    assert_eq!(again.output_bytes(x).unwrap(), &[9u8; 8][..]);
}

/// A result's figures and trace are its own run's, whatever ran after it.
#[test]
fn a_result_keeps_its_own_figures_and_trace() {
    static RUNS: AtomicU32 = AtomicU32::new(0);
    static NEVER: AtomicBool = AtomicBool::new(false);
    let (g, x, _) = stamped(&RUNS, &NEVER);
    let pool = Arc::new(Pool::default());
    let input = Aligned([1u8; 8]);
    let bindings = [InputBinding::new(x, &input.0)];
    let traced = run_bound(&g, &pool, &bindings, true);
    let plain = run_bound(&g, &pool, &bindings, false);
    assert_eq!(traced.events().len(), 2);
    assert!(traced.chrome_trace().is_some());
    assert!(plain.events().is_empty() && plain.chrome_trace().is_none());
    assert_eq!((traced.stats().nodes_run, plain.stats().nodes_run), (2, 2));
    drop(traced);
    // The arrays the traced result held serve the next run, which has no trace of its own.
    let next = run_bound(&g, &pool, &bindings, false);
    assert!(next.events().is_empty() && next.chrome_trace().is_none());
}

/// A result's wall time is measured unless its run is asked to read no clock for it: then it reads
/// 0, on the caller alone and on an executor, and the run is otherwise the same.
#[test]
fn a_run_measures_its_wall_time_unless_asked_not_to() {
    let mut b = GraphBuilder::new();
    let nap = || {
        Box::new(|_: &mut graphsched::KernelCtx<'_>| {
            std::thread::sleep(std::time::Duration::from_millis(2));
            Ok(())
        }) as graphsched::Kernel
    };
    let first = b.add_node(NodeDesc::new("first", "Nap", nap()).output(64)).unwrap();
    let second = b
        .add_node(
            NodeDesc::new("second", "Nap", nap())
                .input(ValueRef::new(first, 0))
                .output(64),
        )
        .unwrap();
    b.mark_output(ValueRef::new(second, 0)).unwrap();
    let graph = Arc::new(b.finalize().unwrap());
    let (pool, executor) = (Arc::new(Pool::default()), Executor::new(2).unwrap());
    for on in [None, Some(&executor)] {
        for no_wall_time in [false, true] {
            let options = RunOptions {
                executor: on,
                force_executor: on.is_some(),
                no_wall_time,
                ..Default::default()
            };
            let stats = graphsched::run(&graph, &pool, &options).unwrap().stats();
            assert_eq!(stats.nodes_run, 2);
            match no_wall_time {
                true => assert_eq!(stats.wall_ns, 0, "executor: {}", on.is_some()),
                // Two kernels of 2 ms, one after the other.
                false => assert!(stats.wall_ns >= 4_000_000, "{} ns", stats.wall_ns),
            }
        }
    }
    assert_eq!(pool.stats().live_bytes, 0);
}
