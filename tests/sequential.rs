//! The sequential driver's lean stretches (`exec/sequential.rs`): a run on its caller takes most of
//! its nodes in one loop that checks the run's conditions once. What a node does there must be
//! what it does anywhere: a fresh descriptor for every output, a failure or a cancellation that
//! stops the run at that node with nothing left allocated, a deferred node waited for, and the
//! estimates still learning from the calls they time.

use std::sync::atomic::{AtomicBool, AtomicU32, Ordering};
use std::sync::Arc;

use graphsched::{CancelToken, ErrorKind, Graph, GraphBuilder, NodeDesc, Pool, RunOptions, ValueRef};

/// A chain of `n` nodes of 64-byte outputs whose kernels are `kernel(i)`, its last output
/// marked.
fn chain_of(n: u32, kernel: impl Fn(u32) -> graphsched::Kernel) -> Arc<Graph> {
    let mut b = GraphBuilder::new();
    for i in 0..n {
        let mut d = NodeDesc::new(format!("s{i}"), "Step", kernel(i)).output(64);
        if i > 0 {
            d = d.input(ValueRef::new(i - 1, 0));
        }
        b.add_node(d).unwrap();
    }
    b.mark_output(ValueRef::new(n - 1, 0)).unwrap();
    Arc::new(b.finalize().unwrap())
}

/// A chain of `n` whose node `k` runs the kernel `special` makes, whose nodes after `k` count
/// their calls in `after`, and whose others do nothing.
fn chain_around(n: u32, k: u32, special: fn() -> graphsched::Kernel, after: &'static AtomicU32) -> Arc<Graph> {
    chain_of(n, |i| match i {
        i if i == k => special(),
        i if i > k => Box::new(|_: &mut graphsched::KernelCtx<'_>| {
            after.fetch_add(1, Ordering::Relaxed);
            Ok(())
        }),
        _ => Box::new(|_: &mut graphsched::KernelCtx<'_>| Ok(())),
    })
}

/// A kernel that defers its end and completes it from another thread `ms` milliseconds later.
fn deferring(ms: u64) -> graphsched::Kernel {
    Box::new(move |ctx: &mut graphsched::KernelCtx<'_>| {
        let done = ctx.defer().expect("a run's kernel may defer");
        std::thread::spawn(move || {
            std::thread::sleep(std::time::Duration::from_millis(ms));
            done.complete(Ok(()));
        });
        Ok(())
    })
}

/// Every run hands each output out with its buffer, its declared size and no shape: a type,
/// dimensions and strides a producer wrote in the run before are gone (cleared where a shape was
/// left), and one that writes none leaves none.
#[test]
fn every_run_hands_out_outputs_with_no_shape() {
    static BAD: AtomicU32 = AtomicU32::new(0);
    static SHAPED: AtomicBool = AtomicBool::new(true);
    let g = chain_of(50, |_| {
        Box::new(|ctx: &mut graphsched::KernelCtx<'_>| {
            let t = ctx.output(0).unwrap();
            let fresh = t.ndim == 0 && t.dtype == 0 && t.nbytes == 64 && !t.data.is_null();
            let clear = t.dims.iter().chain(&t.strides).all(|&x| x == 0);
            if !fresh || !clear || t.data as usize % graphsched::tensor::ALIGNMENT != 0 {
                BAD.fetch_add(1, Ordering::Relaxed);
            }
            if SHAPED.load(Ordering::Relaxed) {
                (t.dtype, t.ndim, t.nbytes) = (7, 2, 48);
                t.dims[..2].copy_from_slice(&[4, 3]);
                t.strides[..2].copy_from_slice(&[3, 1]);
            }
            Ok(())
        })
    });
    let pool = Arc::new(Pool::default());
    for run in 0..6 {
        let shaped = run % 3 != 2;
        SHAPED.store(shaped, Ordering::Relaxed);
        let result = graphsched::run(&g, &pool, &RunOptions::default()).unwrap();
        let t = result.output(ValueRef::new(49, 0)).unwrap();
        match shaped {
            true => assert_eq!((t.dtype, t.ndim, t.nbytes, &t.strides[..2]), (7, 2, 48, &[3, 1][..])),
            false => assert_eq!((t.dtype, t.ndim, t.nbytes, t.strides), (0, 0, 64, [0; 8])),
        }
    }
    assert_eq!(BAD.load(Ordering::Relaxed), 0, "outputs handed out with a stale shape");
}

/// A kernel that fails in the middle of a chain of short nodes: the run fails naming it, no
/// later node runs, and every buffer is back in the pool; the next run succeeds.
#[test]
fn a_failure_midway_stops_the_run_there() {
    static FAIL: AtomicBool = AtomicBool::new(true);
    static RAN_AFTER: AtomicU32 = AtomicU32::new(0);
    let refusing: fn() -> graphsched::Kernel = || {
        Box::new(|_: &mut graphsched::KernelCtx<'_>| match FAIL.load(Ordering::Relaxed) {
            true => Err("refused".to_string()),
            false => Ok(()),
        })
    };
    let g = chain_around(200, 120, refusing, &RAN_AFTER);
    let pool = Arc::new(Pool::default());
    // Measured first, so that the failing run takes its nodes in stretches.
    FAIL.store(false, Ordering::Relaxed);
    graphsched::run(&g, &pool, &RunOptions::default()).unwrap();
    RAN_AFTER.store(0, Ordering::Relaxed);
    FAIL.store(true, Ordering::Relaxed);
    let Err(e) = graphsched::run(&g, &pool, &RunOptions::default()) else {
        panic!("the run succeeded")
    };
    assert_eq!(e.kind(), ErrorKind::KernelFailed, "{e}");
    assert!(e.message().contains("'s120'") && e.message().contains("refused"), "{e}");
    assert_eq!(RAN_AFTER.load(Ordering::Relaxed), 0, "nodes after the failure ran");
    assert_eq!(pool.stats().live_bytes, 0, "the failed run left buffers behind");
    FAIL.store(false, Ordering::Relaxed);
    let result = graphsched::run(&g, &pool, &RunOptions::default()).unwrap();
    assert_eq!(result.stats().nodes_run, 200);
}

/// A kernel that cancels its own run: the node after it does not start, the run reports
/// `Cancelled`, and nothing stays allocated.
#[test]
fn a_cancellation_stops_the_next_node() {
    static RAN_AFTER: AtomicU32 = AtomicU32::new(0);
    static TOKEN: std::sync::OnceLock<CancelToken> = std::sync::OnceLock::new();
    let token = TOKEN.get_or_init(CancelToken::new);
    let cancelling: fn() -> graphsched::Kernel = || {
        Box::new(|_: &mut graphsched::KernelCtx<'_>| {
            TOKEN.get().unwrap().cancel();
            Ok(())
        })
    };
    let g = chain_around(100, 60, cancelling, &RAN_AFTER);
    let pool = Arc::new(Pool::default());
    let options = RunOptions {
        cancel: Some(token),
        ..Default::default()
    };
    let Err(e) = graphsched::run(&g, &pool, &options) else {
        panic!("the run succeeded")
    };
    assert_eq!(e.kind(), ErrorKind::Cancelled, "{e}");
    assert_eq!(RAN_AFTER.load(Ordering::Relaxed), 0, "nodes after the cancellation ran");
    assert_eq!(pool.stats().live_bytes, 0, "the cancelled run left buffers behind");
}

/// A kernel of a chain of short nodes that defers its end, and completes it from another thread
/// while the run waits: the run ends that node, then goes on with the rest.
#[test]
fn a_deferred_node_midway_is_waited_for_then_the_run_goes_on() {
    static RAN_AFTER: AtomicU32 = AtomicU32::new(0);
    let g = chain_around(100, 40, || deferring(2), &RAN_AFTER);
    let pool = Arc::new(Pool::default());
    for _ in 0..3 {
        RAN_AFTER.store(0, Ordering::Relaxed);
        let result = graphsched::run(&g, &pool, &RunOptions::default()).unwrap();
        assert_eq!(result.stats().nodes_run, 100);
        assert_eq!(RAN_AFTER.load(Ordering::Relaxed), 59);
    }
}

/// A kernel that panics, and one that leaves a broken descriptor, in the middle of a chain of
/// short nodes: the run fails there with the right kind, naming the node; nothing after runs;
/// nothing stays allocated.
#[test]
fn a_panic_or_a_broken_descriptor_midway_fails_the_run_there() {
    static MODE: AtomicU32 = AtomicU32::new(0);
    static RAN_AFTER: AtomicU32 = AtomicU32::new(0);
    let breaking: fn() -> graphsched::Kernel = || {
        Box::new(|ctx: &mut graphsched::KernelCtx<'_>| {
            match MODE.load(Ordering::Relaxed) {
                1 => panic!("midway"),
                2 => ctx.output(0).unwrap().nbytes = 1 << 20,
                _ => {}
            }
            Ok(())
        })
    };
    let g = chain_around(80, 30, breaking, &RAN_AFTER);
    let pool = Arc::new(Pool::default());
    graphsched::run(&g, &pool, &RunOptions::default()).unwrap();
    for (mode, kind, words) in [
        (1, ErrorKind::KernelPanicked, "midway"),
        (2, ErrorKind::KernelFailed, "buffer holds"),
    ] {
        MODE.store(mode, Ordering::Relaxed);
        RAN_AFTER.store(0, Ordering::Relaxed);
        let Err(e) = graphsched::run(&g, &pool, &RunOptions::default()) else {
            panic!("the run succeeded")
        };
        assert_eq!(e.kind(), kind, "{e}");
        assert!(e.message().contains("'s30'") && e.message().contains(words), "{e}");
        assert_eq!(RAN_AFTER.load(Ordering::Relaxed), 0, "nodes after the failure ran");
        assert_eq!(pool.stats().live_bytes, 0, "the failed run left buffers behind");
    }
}

/// A graph mixing what a stretch takes with what it does not: a graph input, a node of two
/// outputs of different sizes, a node whose output is too large for the caches (off the short
/// path), an output nobody reads. Every value arrives whole, run after run.
#[test]
fn stretches_and_the_general_path_take_turns() {
    fn fill(t: &mut graphsched::Tensor, seed: u8) {
        // SAFETY: the run hands the kernel `nbytes` bytes at `data`.
        let out = unsafe { std::slice::from_raw_parts_mut(t.data as *mut u8, t.nbytes) };
        for (i, b) in out.iter_mut().enumerate() {
            *b = seed.wrapping_add(i as u8);
        }
    }
    let mut b = GraphBuilder::new();
    let x = b.add_input("x", 16).unwrap();
    let two = b
        .add_node(
            NodeDesc::new(
                "two",
                "Split",
                Box::new(|ctx: &mut graphsched::KernelCtx<'_>| {
                    let seed = ctx.input_bytes(0).unwrap()[0];
                    fill(ctx.output(0).unwrap(), seed);
                    fill(ctx.output(1).unwrap(), seed + 1);
                    Ok(())
                }),
            )
            .input(x)
            .output(32)
            .output(48),
        )
        .unwrap();
    let big = b
        .add_node(
            NodeDesc::new(
                "big",
                "Large",
                Box::new(|ctx: &mut graphsched::KernelCtx<'_>| {
                    let seed = ctx.input_bytes(0).unwrap()[5];
                    fill(ctx.output(0).unwrap(), seed);
                    fill(ctx.output(1).unwrap(), 0);
                    Ok(())
                }),
            )
            .input(ValueRef::new(two, 1))
            .output(64 * 1024)
            .output(8),
        )
        .unwrap();
    let last = b
        .add_node(
            NodeDesc::new(
                "last",
                "Join",
                Box::new(|ctx: &mut graphsched::KernelCtx<'_>| {
                    let seed = ctx.input_bytes(0).unwrap()[31] ^ ctx.input_bytes(1).unwrap()[65_535];
                    fill(ctx.output(0).unwrap(), seed);
                    Ok(())
                }),
            )
            .input(ValueRef::new(two, 0))
            .input(ValueRef::new(big, 0))
            .output(24),
        )
        .unwrap();
    b.mark_output(ValueRef::new(last, 0)).unwrap();
    let g = Arc::new(b.finalize().unwrap());
    let pool = Arc::new(Pool::default());
    for seed in 0..20u8 {
        let data = [seed; 16];
        let inputs = [graphsched::InputBinding::new(x, &data)];
        let options = RunOptions {
            inputs: &inputs,
            ..Default::default()
        };
        let result = graphsched::run(&g, &pool, &options).unwrap();
        // two: out0[i] = seed + i, out1[i] = seed + 1 + i; big: out0[i] = out1[5] + i.
        let expect = seed.wrapping_add(31) ^ seed.wrapping_add(6).wrapping_add(255);
        let t = result.output(ValueRef::new(last, 0)).unwrap();
        // SAFETY: the result holds `nbytes` bytes at `data` until it is dropped.
        let got = unsafe { std::slice::from_raw_parts(t.data as *const u8, t.nbytes) };
        let want: Vec<u8> = (0..24u8).map(|i| expect.wrapping_add(i)).collect();
        assert_eq!(got, &want[..], "run {seed}");
    }
    assert_eq!(pool.stats().live_bytes, 0);
}

/// An op type whose kernels always defer their end, in runs on the caller: the estimates learn
/// it from the calls they time, as they do for any other (before, it stayed unmeasured and every
/// call was timed).
#[test]
fn a_deferring_op_type_is_learned_on_the_caller() {
    // Node 3 has an op type of its own, which defers.
    let mut b = GraphBuilder::new();
    for i in 0..6u32 {
        let kernel = match i {
            3 => deferring(1),
            _ => Box::new(|_: &mut graphsched::KernelCtx<'_>| Ok(())),
        };
        let op = if i == 3 { "Later" } else { "Step" };
        let mut d = NodeDesc::new(format!("d{i}"), op, kernel).output(64);
        if i > 0 {
            d = d.input(ValueRef::new(i - 1, 0));
        }
        b.add_node(d).unwrap();
    }
    b.mark_output(ValueRef::new(5, 0)).unwrap();
    let g = Arc::new(b.finalize().unwrap());
    let pool = Arc::new(Pool::default());
    for _ in 0..4 {
        graphsched::run(&g, &pool, &RunOptions::default()).unwrap();
    }
    let learned = g.learned_op_ns(g.op_index(3));
    assert!(learned >= 500_000, "the deferring op type learned {learned} ns");
}

/// A run whose token was cancelled before it started runs no node; a kernel that starts a run
/// of another graph on its own thread (whose scratch the outer run holds) gets it done.
#[test]
fn a_cancelled_start_runs_nothing_and_nested_runs_work() {
    static INNER_OK: AtomicU32 = AtomicU32::new(0);
    let inner = chain_of(20, |_| Box::new(|_: &mut graphsched::KernelCtx<'_>| Ok(())));
    let pool = Arc::new(Pool::default());
    let token = CancelToken::new();
    token.cancel();
    let options = RunOptions {
        cancel: Some(&token),
        ..Default::default()
    };
    let Err(e) = graphsched::run(&inner, &pool, &options) else {
        panic!("the run succeeded")
    };
    assert_eq!(e.kind(), ErrorKind::Cancelled, "{e}");
    assert_eq!(pool.stats().live_bytes, 0);
    let (inner2, pool2) = (inner.clone(), pool.clone());
    let outer = chain_of(10, move |i| {
        let (inner, pool) = (inner2.clone(), pool2.clone());
        match i {
            4 => Box::new(move |_: &mut graphsched::KernelCtx<'_>| {
                let r = graphsched::run(&inner, &pool, &RunOptions::default()).map_err(|e| e.to_string())?;
                if r.stats().nodes_run == 20 {
                    INNER_OK.fetch_add(1, Ordering::Relaxed);
                }
                Ok(())
            }),
            _ => Box::new(|_: &mut graphsched::KernelCtx<'_>| Ok(())),
        }
    });
    for _ in 0..3 {
        let r = graphsched::run(&outer, &pool, &RunOptions::default()).unwrap();
        assert_eq!(r.stats().nodes_run, 10);
    }
    assert_eq!(INNER_OK.load(Ordering::Relaxed), 3);
}
