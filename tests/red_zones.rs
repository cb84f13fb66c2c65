//! Red zones: debug guards around every pool block, checked when it comes back and after each
//! kernel, so that a kernel writing out of bounds is named (issues 10 and 11).

use std::sync::Arc;

use graphsched::{run, ErrorKind, GraphBuilder, NodeDesc, Pool, RunOptions, ValueRef};

fn noop() -> graphsched::Kernel {
    Box::new(|_| Ok(()))
}

/// A pool with red zones (debug guards around every block).
fn guarded_pool() -> Arc<Pool> {
    let config = graphsched::PoolConfig {
        red_zones: 1,
        ..Default::default()
    };
    Arc::new(Pool::new(config).unwrap())
}

/// With red zones on, `live_bytes` still counts the bytes callers asked for, not the guards.
#[test]
fn red_zones_are_not_counted_as_live_bytes() {
    let pool = guarded_pool();
    let p = pool.acquire(100, false).unwrap();
    assert_eq!(pool.stats().live_bytes, 100);
    // SAFETY: acquired above, not used after.
    unsafe { pool.release(p) }.unwrap();
    assert_eq!(pool.stats().live_bytes, 0);
}

/// An in-place output smaller than the input it takes over lives in the input's larger block:
/// the red-zone check must look for the guards where that block ends, not blame the reader.
#[test]
fn red_zones_follow_an_in_place_output_into_its_larger_block() {
    let mut b = GraphBuilder::new();
    let a = b.add_node(NodeDesc::new("A", "Make", noop()).output(48)).unwrap();
    let shrink = NodeDesc::new("B", "Shrink", noop())
        .input(ValueRef::new(a, 0))
        .output(16)
        .in_place(0, 0);
    let bn = b.add_node(shrink).unwrap();
    let c = b
        .add_node(
            NodeDesc::new("C", "Read", noop())
                .input(ValueRef::new(bn, 0))
                .output(16),
        )
        .unwrap();
    b.mark_output(ValueRef::new(c, 0)).unwrap();
    let graph = Arc::new(b.finalize().unwrap());
    let pool = guarded_pool();
    let r = run(&graph, &pool, &RunOptions::default()).unwrap_or_else(|e| panic!("{e}"));
    drop(r);
    assert_eq!(pool.stats().live_bytes, 0);
}

/// A kernel computing in place that writes past its output is named, whoever reads the output
/// next (a graph output has no reader to blame; an in-place reader used to skip its checks).
#[test]
fn red_zones_catch_an_in_place_kernel_that_overruns() {
    let sloppy = || -> graphsched::Kernel {
        Box::new(|ctx| {
            let out = ctx.output(0).unwrap();
            // SAFETY: deliberately out of bounds: one byte past the 32-byte output, which fills
            // its block, inside the pool's red zone (mapped memory of the pool).
            unsafe { (out.data as *mut u8).add(out.nbytes).write(0x42) };
            Ok(())
        })
    };
    for then_in_place in [false, true] {
        let mut b = GraphBuilder::new();
        let a = b.add_node(NodeDesc::new("A", "Make", noop()).output(32)).unwrap();
        let x = NodeDesc::new("X", "Relu", sloppy())
            .input(ValueRef::new(a, 0))
            .output(32)
            .in_place(0, 0);
        let x = b.add_node(x).unwrap();
        let last = match then_in_place {
            false => x,
            true => {
                let y = NodeDesc::new("Y", "Relu", noop())
                    .input(ValueRef::new(x, 0))
                    .output(32)
                    .in_place(0, 0);
                b.add_node(y).unwrap()
            }
        };
        b.mark_output(ValueRef::new(last, 0)).unwrap();
        let graph = Arc::new(b.finalize().unwrap());
        let pool = guarded_pool();
        let Err(e) = run(&graph, &pool, &RunOptions::default()) else {
            panic!("an overrun went unnoticed (then in place: {then_in_place})")
        };
        assert_eq!(e.kind(), ErrorKind::KernelFailed, "{e}");
        assert!(e.message().contains("node 'X'"), "{e}");
        assert_eq!(pool.stats().live_bytes, 0, "every block went back");
    }
}
