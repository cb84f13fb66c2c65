//! The sequential driver's lean stretches (`exec/serial.rs`): a run on its caller takes most of
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

/// Every run hands each output out with its buffer, its declared size and no shape, whatever
/// the producer wrote into the descriptor in the run before (here: a type and two dimensions).
#[test]
fn every_run_hands_out_outputs_with_no_shape() {
    static BAD: AtomicU32 = AtomicU32::new(0);
    let g = chain_of(50, |_| {
        Box::new(|ctx: &mut graphsched::KernelCtx<'_>| {
            let t = ctx.output(0).unwrap();
            let fresh = t.ndim == 0 && t.dtype == 0 && t.nbytes == 64 && !t.data.is_null();
            if !fresh || t.data as usize % graphsched::tensor::ALIGNMENT != 0 {
                BAD.fetch_add(1, Ordering::Relaxed);
            }
            (t.dtype, t.ndim, t.nbytes) = (7, 2, 48);
            t.dims[..2].copy_from_slice(&[4, 3]);
            Ok(())
        })
    });
    let pool = Arc::new(Pool::default());
    for _ in 0..4 {
        let result = graphsched::run(&g, &pool, &RunOptions::default()).unwrap();
        let t = result.output(ValueRef::new(49, 0)).unwrap();
        assert_eq!((t.dtype, t.ndim, t.nbytes, &t.dims[..2]), (7, 2, 48, &[4, 3][..]));
    }
    assert_eq!(BAD.load(Ordering::Relaxed), 0, "outputs handed out with a stale shape");
}

/// A kernel that fails in the middle of a chain of short nodes: the run fails naming it, no
/// later node runs, and every buffer is back in the pool; the next run succeeds.
#[test]
fn a_failure_midway_stops_the_run_there() {
    static FAIL: AtomicBool = AtomicBool::new(true);
    static RAN_AFTER: AtomicU32 = AtomicU32::new(0);
    let g = chain_of(200, |i| match i {
        120 => Box::new(|_: &mut graphsched::KernelCtx<'_>| match FAIL.load(Ordering::Relaxed) {
            true => Err("refused".to_string()),
            false => Ok(()),
        }),
        i if i > 120 => Box::new(|_: &mut graphsched::KernelCtx<'_>| {
            RAN_AFTER.fetch_add(1, Ordering::Relaxed);
            Ok(())
        }),
        _ => Box::new(|_: &mut graphsched::KernelCtx<'_>| Ok(())),
    });
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
    let g = chain_of(100, |i| match i {
        60 => Box::new(|_: &mut graphsched::KernelCtx<'_>| {
            TOKEN.get().unwrap().cancel();
            Ok(())
        }),
        i if i > 60 => Box::new(|_: &mut graphsched::KernelCtx<'_>| {
            RAN_AFTER.fetch_add(1, Ordering::Relaxed);
            Ok(())
        }),
        _ => Box::new(|_: &mut graphsched::KernelCtx<'_>| Ok(())),
    });
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
    let g = chain_of(100, |i| match i {
        40 => Box::new(|ctx: &mut graphsched::KernelCtx<'_>| {
            let done = ctx.defer().expect("a run's kernel may defer");
            std::thread::spawn(move || {
                std::thread::sleep(std::time::Duration::from_millis(2));
                done.complete(Ok(()));
            });
            Ok(())
        }),
        i if i > 40 => Box::new(|_: &mut graphsched::KernelCtx<'_>| {
            RAN_AFTER.fetch_add(1, Ordering::Relaxed);
            Ok(())
        }),
        _ => Box::new(|_: &mut graphsched::KernelCtx<'_>| Ok(())),
    });
    let pool = Arc::new(Pool::default());
    for _ in 0..3 {
        RAN_AFTER.store(0, Ordering::Relaxed);
        let result = graphsched::run(&g, &pool, &RunOptions::default()).unwrap();
        assert_eq!(result.stats().nodes_run, 100);
        assert_eq!(RAN_AFTER.load(Ordering::Relaxed), 59);
    }
}
