//! Running graphs: refcounted release, checksums across reuse, dynamic outputs, failures.

mod common;

use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;

use common::{AlignedBuf, Ledger, Rng};
use graphsched::{run, ErrorKind, Executor, GraphBuilder, InputBinding, NodeDesc, Pool, RunOptions, ValueRef};

fn pool() -> Arc<Pool> {
    Arc::new(Pool::default())
}

/// Random DAGs with wide fan-out, run repeatedly on one pool: every consumer sees exactly what
/// its producer wrote, every buffer comes back, and runs after the first ask the system for nothing.
#[test]
fn checksums_hold_and_buffers_come_back_on_random_dags() {
    for seed in 0..150 {
        let mut rng = Rng::new(seed);
        let ledger = Ledger::default();
        let nodes = 1 + rng.below(80) as usize;
        let (mut b, inputs) = common::random_dag(&mut rng, &ledger, 2, nodes, 6, 4096);
        let graph = Arc::new(b.finalize().unwrap());
        let bufs: Vec<AlignedBuf> = inputs
            .iter()
            .map(|&v| {
                AlignedBuf::new(
                    graph.value_size(graph.value_index(v).unwrap()).bytes().unwrap(),
                    seed as u8,
                )
            })
            .collect();
        let bindings: Vec<InputBinding> = inputs
            .iter()
            .zip(&bufs)
            .map(|(&value, buf)| InputBinding::new(value, buf.bytes()))
            .collect();
        for (v, buf) in inputs.iter().zip(&bufs) {
            ledger.record_input(*v, buf.bytes());
        }
        let pool = pool();
        for round in 0..3 {
            let before = pool.stats();
            let result = run(
                &graph,
                &pool,
                &RunOptions {
                    inputs: &bindings,
                    ..Default::default()
                },
            )
            .unwrap_or_else(|e| panic!("seed {seed}: {e}"));
            for &out in graph.graph_outputs() {
                let v = graph.value_ref(out);
                assert_eq!(
                    Some(common::fnv(result.output_bytes(v).unwrap())),
                    ledger.get(v),
                    "seed {seed}: output {v:?}"
                );
            }
            let stats = result.stats();
            assert_eq!(stats.nodes_run as usize, nodes);
            drop(result);
            let after = pool.stats();
            assert_eq!(after.live_bytes, 0, "seed {seed}: buffers left live");
            if round > 0 {
                assert_eq!(
                    after.os_allocs, before.os_allocs,
                    "seed {seed} round {round}: a repeat run allocated"
                );
            }
        }
    }
}

#[test]
fn a_value_is_released_when_its_last_consumer_finishes() {
    // A chain of 10 nodes of 1000 bytes each needs two values at once, never more.
    let mut b = GraphBuilder::new();
    let ledger = Ledger::default();
    let mut prev: Option<ValueRef> = None;
    for i in 0..10 {
        let ins: Vec<ValueRef> = prev.into_iter().collect();
        let mut d = NodeDesc::new(format!("c{i}"), "Op", ledger.kernel(ins.clone())).output(1000);
        if let Some(p) = prev {
            d = d.input(p);
        }
        prev = Some(ValueRef::new(b.add_node(d).unwrap(), 0));
    }
    b.mark_output(prev.unwrap()).unwrap();
    let graph = Arc::new(b.finalize().unwrap());
    let pool = pool();
    let result = run(&graph, &pool, &RunOptions::default()).unwrap();
    assert_eq!(result.stats().peak_live_bytes, 2000);
    assert_eq!(pool.stats().peak_live_bytes, 2000);
    assert_eq!(pool.stats().live_bytes, 1000, "only the graph output is held");
    assert!(pool.stats().os_allocs <= 2, "two blocks serve the whole chain");
    drop(result);
    assert_eq!(pool.stats().live_bytes, 0);
}

#[test]
fn dynamic_outputs_carry_size_and_shape_to_consumers() {
    let mut b = GraphBuilder::new();
    let x = b.add_input("x", 64).unwrap();
    let filter = b
        .add_node(
            NodeDesc::new(
                "filter",
                "NonZero",
                Box::new(|ctx| {
                    let kept: Vec<u8> = ctx
                        .input_bytes(0)
                        .unwrap()
                        .iter()
                        .copied()
                        .filter(|&b| b != 0)
                        .collect();
                    let t = ctx.alloc_output(0, kept.len()).map_err(|e| e.to_string())?;
                    t.ndim = 1;
                    t.dims[0] = kept.len() as i64;
                    ctx.output_bytes(0).unwrap().copy_from_slice(&kept);
                    Ok(())
                }),
            )
            .input(x)
            .dynamic_output(),
        )
        .unwrap();
    let count = b
        .add_node(
            NodeDesc::new(
                "count",
                "Len",
                Box::new(|ctx| {
                    let t = *ctx.input(0).unwrap();
                    if t.ndim != 1 || t.dims[0] as usize != t.nbytes {
                        return Err(format!("consumer saw ndim {} dims[0] {}", t.ndim, t.dims[0]));
                    }
                    ctx.output_bytes(0).unwrap()[..8].copy_from_slice(&(t.nbytes as u64).to_le_bytes());
                    Ok(())
                }),
            )
            .input(ValueRef::new(filter, 0))
            .output(16),
        )
        .unwrap();
    b.mark_output(ValueRef::new(filter, 0)).unwrap();
    b.mark_output(ValueRef::new(count, 0)).unwrap();
    let graph = Arc::new(b.finalize().unwrap());
    let input = AlignedBuf::new(64, 0);
    // SAFETY: 64 bytes, exclusively ours.
    let bytes = unsafe { std::slice::from_raw_parts_mut(input.tensor().data as *mut u8, 64) };
    for i in (0..64).step_by(3) {
        bytes[i] = i as u8 + 1;
    }
    let binding = [InputBinding::new(x, input.bytes())];
    let pool = pool();
    let result = run(
        &graph,
        &pool,
        &RunOptions {
            inputs: &binding,
            ..Default::default()
        },
    )
    .unwrap();
    let kept = result.output_bytes(ValueRef::new(filter, 0)).unwrap();
    assert_eq!(kept.len(), 22);
    assert!(kept.iter().all(|&b| b != 0));
    assert_eq!(result.output(ValueRef::new(filter, 0)).unwrap().dims[0], 22);
    assert_eq!(
        &result.output_bytes(ValueRef::new(count, 0)).unwrap()[..8],
        &22u64.to_le_bytes()
    );
    drop(result);
    assert_eq!(pool.stats().live_bytes, 0);
}

#[test]
fn a_failing_kernel_stops_the_run_returns_every_buffer_and_the_graph_runs_again() {
    let fail = Arc::new(AtomicBool::new(true));
    let mut b = GraphBuilder::new();
    let ledger = Ledger::default();
    let src = b
        .add_node(
            NodeDesc::new("src", "Op", ledger.kernel(vec![]))
                .output(4096)
                .output(100),
        )
        .unwrap();
    let f = fail.clone();
    let mid = b
        .add_node(
            NodeDesc::new(
                "flaky",
                "Conv",
                Box::new(move |ctx| {
                    if f.load(Ordering::SeqCst) {
                        ctx.set_error("bad shape");
                        return Err("returned 7".into());
                    }
                    ctx.output_bytes(0).unwrap().fill(1);
                    Ok(())
                }),
            )
            .input(ValueRef::new(src, 0))
            .output(512),
        )
        .unwrap();
    b.add_node(
        NodeDesc::new("after", "Op", ledger.kernel(vec![ValueRef::new(mid, 0)]))
            .input(ValueRef::new(mid, 0))
            .output(8),
    )
    .unwrap();
    b.mark_output(ValueRef::new(src, 1)).unwrap();
    let graph = Arc::new(b.finalize().unwrap());
    let pool = pool();
    let e = run(&graph, &pool, &RunOptions::default()).err().unwrap();
    assert_eq!(e.kind(), ErrorKind::KernelFailed);
    assert!(
        e.message().contains("'flaky'") && e.message().contains("bad shape"),
        "{e}"
    );
    assert_eq!(pool.stats().live_bytes, 0, "a failed run keeps nothing");
    fail.store(false, Ordering::SeqCst);
    let result = run(&graph, &pool, &RunOptions::default()).unwrap();
    assert_eq!(result.stats().nodes_run, 3);
}

#[test]
fn kernel_contract_violations_are_reported() {
    let cases: Vec<(&str, graphsched::Kernel, bool, &str)> = vec![
        ("panics", Box::new(|_| panic!("kaboom")), false, "kaboom"),
        ("lazy", Box::new(|_| Ok(())), true, "did not allocate"),
        (
            "liar",
            Box::new(|ctx| {
                ctx.output(0).unwrap().nbytes = 1 << 20;
                Ok(())
            }),
            false,
            "claims 1048576 bytes",
        ),
        (
            "mover",
            Box::new(|ctx| {
                ctx.output(0).unwrap().data = std::ptr::null_mut();
                Ok(())
            }),
            false,
            "data pointer changed",
        ),
    ];
    for (name, kernel, dynamic, needle) in cases {
        let mut b = GraphBuilder::new();
        let d = NodeDesc::new(name, "Op", kernel);
        let d = if dynamic { d.dynamic_output() } else { d.output(64) };
        b.add_node(d).unwrap();
        let graph = Arc::new(b.finalize().unwrap());
        let pool = pool();
        let e = run(&graph, &pool, &RunOptions::default()).err().unwrap();
        let want = if name == "panics" {
            ErrorKind::KernelPanicked
        } else {
            ErrorKind::KernelFailed
        };
        assert_eq!(e.kind(), want, "{name}: {e}");
        assert!(
            e.message().contains(name) && e.message().contains(needle),
            "{name}: {e}"
        );
        assert_eq!(pool.stats().live_bytes, 0);
    }
}

#[test]
fn zero_output_clears_reused_memory() {
    const BYTES: usize = 128 << 10;
    let pool = pool();
    // Leave a dirty block where the run's output will go: an arena block (a run's small values
    // take their own grains, never a slab block `acquire` handed out), of 128 KiB (a thread's
    // heap keeps blocks of a few KiB for its own `acquire`s across a run's start).
    let p = pool.acquire(BYTES, false).unwrap();
    // SAFETY: BYTES bytes just acquired.
    unsafe { p.as_ptr().write_bytes(0xAB, BYTES) };
    // SAFETY: acquired above, not used after.
    unsafe { pool.release(p) }.unwrap();
    let mut b = GraphBuilder::new();
    b.add_node(
        NodeDesc::new(
            "zeroed",
            "Op",
            Box::new(|ctx| match ctx.output_bytes(0).unwrap().iter().all(|&x| x == 0) {
                true => Ok(()),
                false => Err("output was not cleared".into()),
            }),
        )
        .output(BYTES)
        .zero_output(),
    )
    .unwrap();
    let graph = Arc::new(b.finalize().unwrap());
    run(&graph, &pool, &RunOptions::default()).unwrap();
    assert_eq!(pool.stats().cache_hits, 1, "the dirty block was reused");
}

#[test]
fn input_binding_errors() {
    let mut b = GraphBuilder::new();
    let x = b.add_input("x", 32).unwrap();
    let n = b
        .add_node(NodeDesc::new("n", "Op", Box::new(|_| Ok(()))).input(x).output(8))
        .unwrap();
    let graph = Arc::new(b.finalize().unwrap());
    let pool = pool();
    let buf = AlignedBuf::new(32, 1);
    let small = AlignedBuf::new(16, 1);
    let wide = AlignedBuf::new(48, 1);
    // SAFETY: never read: the run refuses a NULL binding before any node runs.
    let null = unsafe { InputBinding::from_raw(x, graphsched::Tensor::new(std::ptr::null_mut(), 32)) };
    let cases: Vec<(Vec<InputBinding>, &str)> = vec![
        (vec![], "'x' (node 0) is not bound"),
        (
            vec![InputBinding::new(x, small.bytes())],
            "declared as 32 bytes but bound to 16",
        ),
        (vec![InputBinding::new(x, buf.bytes()); 2], "bound twice"),
        (
            vec![InputBinding::new(ValueRef::new(n, 0), buf.bytes())],
            "not a graph input",
        ),
        (vec![InputBinding::new(x, &wide.bytes()[1..33])], "not 16-byte aligned"),
        (vec![null], "NULL"),
    ];
    for (bindings, needle) in cases {
        let e = run(
            &graph,
            &pool,
            &RunOptions {
                inputs: &bindings,
                ..Default::default()
            },
        )
        .err()
        .unwrap();
        assert_eq!(e.kind(), ErrorKind::InputBinding);
        assert!(e.message().contains(needle), "{e}");
    }
    let ok = [InputBinding::new(x, buf.bytes())];
    let result = run(
        &graph,
        &pool,
        &RunOptions {
            inputs: &ok,
            ..Default::default()
        },
    )
    .unwrap();
    let e = result.output(ValueRef::new(n, 0)).unwrap_err();
    assert_eq!(e.kind(), ErrorKind::NotAnOutput);
    assert!(
        e.message().contains("GraphBuilder::mark_output"),
        "the core names its own API: {e}"
    );
    assert_eq!(
        result.output(ValueRef::new(9, 0)).unwrap_err().kind(),
        ErrorKind::UnknownValue
    );
}

/// One finalized graph, one pool, several threads running it at once with checksums.
#[test]
fn concurrent_runs_share_graph_and_pool() {
    let mut rng = Rng::new(42);
    let ledger = Ledger::default();
    let (mut b, _) = common::random_dag(&mut rng, &ledger, 0, 120, 5, 8192);
    let graph = Arc::new(b.finalize().unwrap());
    let pool = pool();
    let reference: Vec<u64> = {
        let r = run(&graph, &pool, &RunOptions::default()).unwrap();
        common::output_sums(&graph, &r)
    };
    std::thread::scope(|s| {
        for _ in 0..4 {
            s.spawn(|| {
                for _ in 0..25 {
                    let r = run(&graph, &pool, &RunOptions::default()).unwrap();
                    let got: Vec<u64> = common::output_sums(&graph, &r);
                    assert_eq!(got, reference);
                }
            });
        }
    });
    assert_eq!(pool.stats().live_bytes, 0);
}

#[test]
fn an_empty_dynamic_output_and_a_shape_set_before_allocating() {
    let mut b = GraphBuilder::new();
    let n = b
        .add_node(
            NodeDesc::new(
                "nothing",
                "",
                Box::new(|ctx| {
                    let t = ctx.output(0).unwrap();
                    t.dtype = 1;
                    t.ndim = 1;
                    ctx.alloc_output(0, 0).map_err(|e| e.to_string())?;
                    Ok(())
                }),
            )
            .dynamic_output(),
        )
        .unwrap();
    b.mark_output(ValueRef::new(n, 0)).unwrap();
    let graph = Arc::new(b.finalize().unwrap());
    let pool = pool();
    let result = run(&graph, &pool, &RunOptions::default()).unwrap();
    let t = result.output(ValueRef::new(n, 0)).unwrap();
    assert_eq!((t.nbytes, t.dtype, t.ndim), (0, 1, 1));
    assert!(!t.data.is_null() && t.data as usize % 16 == 0);
    assert!(result.output_bytes(ValueRef::new(n, 0)).unwrap().is_empty());
    assert_eq!(pool.stats().acquires, 0, "an empty output takes nothing from the pool");
}

#[test]
fn messages_omit_an_empty_op_type() {
    let mut b = GraphBuilder::new();
    b.add_node(NodeDesc::new("quiet", "", Box::new(|_| Err("no".into()))).output(8))
        .unwrap();
    let graph = Arc::new(b.finalize().unwrap());
    let e = run(&graph, &pool(), &RunOptions::default()).err().unwrap();
    assert_eq!(e.message(), "node 'quiet' failed: no");
}

/// An elementwise chain declared in place: each output takes over its input's buffer when the
/// node is the last reader, never when another reader remains, never a graph input's memory.
#[test]
fn in_place_outputs_take_over_dying_inputs_only() {
    use std::sync::Mutex;
    let seen: Arc<Mutex<Vec<(String, bool)>>> = Arc::default();
    let add_one = |seen: Arc<Mutex<Vec<(String, bool)>>>| -> graphsched::Kernel {
        Box::new(move |ctx| {
            let input: Vec<u8> = ctx.input_bytes(0).unwrap().to_vec();
            let in_place = ctx.output_in_place(0);
            let same = ctx.input(0).unwrap().data == ctx.output(0).unwrap().data;
            if in_place != same {
                return Err("output_in_place disagrees with the pointers".into());
            }
            seen.lock().unwrap().push((ctx.node_name().to_string(), in_place));
            for (o, i) in ctx.output_bytes(0).unwrap().iter_mut().zip(input) {
                *o = i.wrapping_add(1);
            }
            Ok(())
        })
    };
    let mut b = GraphBuilder::new();
    let x = b.add_input("x", 64).unwrap();
    // a reads the graph input: never in place. b is a's only reader: in place. c and d both read
    // b: whichever runs first must not take b over. e reads c alone: in place.
    let mut inc = |name: &str, input: ValueRef| {
        let desc = NodeDesc::new(name, "Inc", add_one(seen.clone()))
            .input(input)
            .output(64)
            .in_place(0, 0);
        b.add_node(desc).unwrap()
    };
    let a = inc("a", x);
    let bb = inc("b", ValueRef::new(a, 0));
    let c = inc("c", ValueRef::new(bb, 0));
    let d = inc("d", ValueRef::new(bb, 0));
    let e = inc("e", ValueRef::new(c, 0));
    b.mark_output(ValueRef::new(d, 0)).unwrap();
    b.mark_output(ValueRef::new(e, 0)).unwrap();
    let graph = Arc::new(b.finalize().unwrap());
    let input = AlignedBuf::new(64, 10);
    let bindings = [InputBinding::new(x, input.bytes())];
    let pool = pool();
    let result = run(
        &graph,
        &pool,
        &RunOptions {
            inputs: &bindings,
            ..Default::default()
        },
    )
    .unwrap();
    assert!(input.bytes().iter().all(|&v| v == 10), "the graph input was written");
    assert_eq!(result.output_bytes(ValueRef::new(d, 0)).unwrap(), &[13u8; 64][..]);
    assert_eq!(result.output_bytes(ValueRef::new(e, 0)).unwrap(), &[14u8; 64][..]);
    let seen = seen.lock().unwrap().clone();
    let took = |name: &str| seen.iter().find(|(n, _)| n == name).unwrap().1;
    assert!(
        !took("a") && took("b") && !took("c") && took("d") && took("e"),
        "{seen:?}"
    );
    // a and c take buffers; b, d and e reuse their inputs': two 64-byte blocks at most are live
    // at once (without in-place outputs, d would run with b, c and d live). Exact although the
    // run keeps spare blocks at hand: parked blocks do not count as live.
    assert_eq!(pool.stats().peak_live_bytes, 128, "{seen:?}");
    drop(result);
    assert_eq!(pool.stats().live_bytes, 0);
    let e = GraphBuilder::new()
        .add_node(
            NodeDesc::new("bad", "Op", Box::new(|_| Ok(())))
                .output(8)
                .in_place(0, 0),
        )
        .unwrap_err();
    assert_eq!(e.kind(), ErrorKind::InvalidArgument);
}

/// Debug red zones: a kernel that writes one byte past its output is named when it finishes;
/// released blocks are poisoned; the pool keeps nothing after the failed run.
#[test]
fn red_zones_catch_an_overrunning_kernel() {
    let pool = Arc::new(
        Pool::new(graphsched::PoolConfig {
            red_zones: 1,
            ..Default::default()
        })
        .unwrap(),
    );
    let mut b = GraphBuilder::new();
    let good = b
        .add_node(
            NodeDesc::new(
                "good",
                "Fill",
                Box::new(|ctx| {
                    ctx.output_bytes(0).unwrap().fill(1);
                    Ok(())
                }),
            )
            .output(100),
        )
        .unwrap();
    b.add_node(
        NodeDesc::new(
            "sloppy",
            "Copy",
            Box::new(|ctx| {
                let out = ctx.output(0).unwrap();
                // SAFETY: deliberately out of bounds: one byte past the 100-byte output, inside the pool's
                // red zone, which is mapped memory of the pool.
                unsafe { (out.data as *mut u8).add(out.nbytes).write(0x42) };
                Ok(())
            }),
        )
        .input(ValueRef::new(good, 0))
        .output(100),
    )
    .unwrap();
    let graph = Arc::new(b.finalize().unwrap());
    for executor in [None, Some(&Executor::new(2).unwrap())] {
        let e = run(
            &graph,
            &pool,
            &RunOptions {
                executor,
                ..Default::default()
            },
        )
        .err()
        .expect("the overrun is caught");
        assert_eq!(e.kind(), ErrorKind::KernelFailed);
        assert!(
            e.message().contains("'sloppy'") && e.message().contains("out of the bounds of output 0"),
            "{e}"
        );
        assert_eq!(pool.stats().live_bytes, 0);
    }
    // Released memory is poisoned.
    let p = pool.acquire(64, false).unwrap();
    // SAFETY: 64 bytes, ours.
    unsafe { p.as_ptr().write_bytes(7, 64) };
    // SAFETY: acquired above; only read below to see the poison, through the pool's mapping.
    unsafe { pool.release(p) }.unwrap();
    // SAFETY: the block is released but its pages stay mapped by the pool; reading shows the poison.
    assert!(unsafe { std::slice::from_raw_parts(p.as_ptr(), 64) }
        .iter()
        .all(|&x| x == 0xDD));
}
