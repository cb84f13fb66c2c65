//! Values of 0 bytes end to end (issue 39): a detector that finds no box feeds a recognizer a
//! batch of 0. Bound inputs of 0 bytes (NULL or not), static and dynamic outputs of 0 bytes,
//! size functions that answer 0, on the caller and on an executor, with plans, under a memory
//! limit and traced: kernels see `nbytes` 0 and `data` at `EMPTY_DATA` (non-NULL, aligned,
//! never read), the result hands back empty outputs, and nothing is taken from the pool for them.

use std::sync::Arc;

use graphsched::plan::{Mode, Order, Plan};
use graphsched::tensor::{Tensor, ALIGNMENT, EMPTY_DATA};
use graphsched::{Executor, Graph, GraphBuilder, InputBinding, NodeDesc, Pool, RunOptions, ValueRef};

/// Every empty tensor a kernel sees looks the same: 0 bytes at `EMPTY_DATA`.
fn check_empty(t: &Tensor, what: &str) -> Result<(), String> {
    match (t.nbytes, t.data == EMPTY_DATA, t.data as usize % ALIGNMENT) {
        (0, true, 0) => Ok(()),
        _ => Err(format!("{what}: {} bytes at {:p}", t.nbytes, t.data)),
    }
}

/// x (dynamic) -> `count` (8 bytes: how many bytes x has) ; x -> `copy` (x's size, a size
/// function) -> `tail` (static 0 bytes, reads copy) ; `dyn` (a dynamic output the kernel
/// allocates with x's size). Outputs: count, copy, tail, dyn, and x itself.
fn graph() -> (Arc<Graph>, [ValueRef; 5]) {
    let mut b = GraphBuilder::new();
    let x = b.add_dynamic_input("x").unwrap();
    let count = b
        .add_node(
            NodeDesc::new(
                "count",
                "Size",
                Box::new(|ctx| {
                    let n = ctx.input(0).ok_or("no input")?.nbytes as u64;
                    if n == 0 {
                        check_empty(ctx.input(0).unwrap(), "count's input")?;
                    }
                    ctx.output_bytes(0)
                        .ok_or("no output")?
                        .copy_from_slice(&n.to_ne_bytes());
                    Ok(())
                }),
            )
            .input(x)
            .output(8),
        )
        .unwrap();
    let copy = b
        .add_node(
            NodeDesc::new(
                "copy",
                "Identity",
                Box::new(|ctx| {
                    let input = ctx.input_bytes(0).ok_or("no input")?.to_vec();
                    if input.is_empty() {
                        check_empty(ctx.output(0).unwrap(), "copy's output")?;
                    }
                    ctx.output_bytes(0).ok_or("no output")?.copy_from_slice(&input);
                    Ok(())
                }),
            )
            .input(x)
            .output(16)
            .sizes(Box::new(|inputs, outputs| {
                outputs[0] = inputs[0];
                Ok(())
            })),
        )
        .unwrap();
    let tail = b
        .add_node(
            NodeDesc::new(
                "tail",
                "Empty",
                Box::new(|ctx| {
                    check_empty(ctx.output(0).unwrap(), "tail's static output")?;
                    Ok(())
                }),
            )
            .input(ValueRef::new(copy, 0))
            .output(0),
        )
        .unwrap();
    let dynamic = b
        .add_node(
            NodeDesc::new(
                "dyn",
                "NonZero",
                Box::new(|ctx| {
                    let n = ctx.input(0).ok_or("no input")?.nbytes;
                    let t = ctx.alloc_output(0, n).map_err(|e| e.to_string())?;
                    if n == 0 {
                        check_empty(t, "dyn's output")?;
                    }
                    Ok(())
                }),
            )
            .input(x)
            .dynamic_output(),
        )
        .unwrap();
    let outs = [
        ValueRef::new(count, 0),
        ValueRef::new(copy, 0),
        ValueRef::new(tail, 0),
        ValueRef::new(dynamic, 0),
        x,
    ];
    for v in outs {
        b.mark_output(v).unwrap();
    }
    (Arc::new(b.finalize().unwrap()), outs)
}

#[test]
fn an_empty_batch_runs_on_every_kind_of_run() {
    let (g, [count, copy, tail, dynamic, x]) = graph();
    let pool = Arc::new(Pool::default());
    let executor = Executor::new(2).unwrap();
    let kinds = [
        RunOptions::default(),
        RunOptions {
            executor: Some(&executor),
            force_executor: true,
            ..Default::default()
        },
        RunOptions {
            auto_plan: true,
            ..Default::default()
        },
        RunOptions {
            executor: Some(&executor),
            auto_plan: true,
            ..Default::default()
        },
        RunOptions {
            executor: Some(&executor),
            memory_limit_bytes: 128,
            ..Default::default()
        },
        RunOptions {
            trace: true,
            ..Default::default()
        },
    ];
    let words = [7u128; 2];
    // SAFETY: 32 bytes of `words`, alive for the whole test.
    let full = unsafe { std::slice::from_raw_parts(words.as_ptr().cast::<u8>(), 32) };
    for (i, options) in kinds.into_iter().enumerate() {
        // A batch of 0 bound three ways: an empty slice, NULL, an address (never read); then a
        // full batch, so that the graph made for 0 bytes and the one for 32 alternate.
        // SAFETY: 0 bytes are read from these pointers, that is, none.
        let bindings = [
            InputBinding::new(x, &[]),
            unsafe { InputBinding::from_raw(x, Tensor::new(std::ptr::null_mut(), 0)) },
            unsafe { InputBinding::from_raw(x, Tensor::new(words.as_ptr() as *mut _, 0)) },
            InputBinding::new(x, full),
        ];
        for (j, binding) in bindings.iter().enumerate() {
            let inputs = [*binding];
            let r = graphsched::run(
                &g,
                &pool,
                &RunOptions {
                    inputs: &inputs,
                    ..options
                },
            )
            .unwrap_or_else(|e| panic!("run kind {i}, binding {j}: {e}"));
            let n = binding.tensor().nbytes;
            assert_eq!(
                r.output_bytes(count).unwrap(),
                (n as u64).to_ne_bytes(),
                "kind {i}, binding {j}"
            );
            assert_eq!(r.output_bytes(copy).unwrap(), &full[..n], "kind {i}, binding {j}");
            assert_eq!(r.output_bytes(dynamic).unwrap().len(), n);
            check_empty(r.output(tail).unwrap(), "the result's tail").unwrap();
            if n == 0 {
                for v in [copy, dynamic, x] {
                    check_empty(r.output(v).unwrap(), "an empty output in the result").unwrap();
                }
                assert_eq!(r.output_bytes(x).unwrap(), &[] as &[u8]);
            }
            if options.trace {
                assert_eq!(r.events().len(), 4, "every node traced");
            }
            drop(r);
            assert_eq!(
                pool.stats().live_bytes,
                0,
                "kind {i}, binding {j}: everything went back"
            );
        }
    }
}

#[test]
fn static_values_of_0_bytes_plan_and_run() {
    let mut b = GraphBuilder::new();
    let a = b
        .add_node(NodeDesc::new("a", "Empty", Box::new(|_| Ok(()))).output(0))
        .unwrap();
    let c = b
        .add_node(
            NodeDesc::new(
                "c",
                "Fill",
                Box::new(|ctx| {
                    check_empty(ctx.input(0).unwrap(), "c's input")?;
                    ctx.output_bytes(0).ok_or("no output")?.fill(3);
                    Ok(())
                }),
            )
            .input(ValueRef::new(a, 0))
            .output(32)
            .output(0),
        )
        .unwrap();
    b.mark_output(ValueRef::new(c, 0)).unwrap();
    b.mark_output(ValueRef::new(c, 1)).unwrap();
    let g = Arc::new(b.finalize().unwrap());
    assert_eq!(g.value_size(0).bytes(), Some(0));
    let pool = Arc::new(Pool::default());
    let executor = Executor::new(2).unwrap();
    for mode in [
        Mode::Sequential(Order::Topological),
        Mode::ParallelSafe,
        Mode::Scheduled { threads: 2 },
    ] {
        let plan = Plan::new(&g, mode).unwrap_or_else(|e| panic!("{mode:?}: {e}"));
        assert!(plan.arena_bytes() >= 32, "{mode:?}");
        let on = match mode {
            Mode::Sequential(_) => None,
            _ => Some(&executor),
        };
        let options = RunOptions {
            plan: Some(&plan),
            executor: on,
            force_executor: on.is_some(),
            ..Default::default()
        };
        let r = graphsched::run(&g, &pool, &options).unwrap();
        assert_eq!(r.output_bytes(ValueRef::new(c, 0)).unwrap(), [3; 32]);
        check_empty(r.output(ValueRef::new(c, 1)).unwrap(), "an empty planned output").unwrap();
        assert_eq!(r.stats().peak_live_bytes, 32, "{mode:?}: the empty values hold nothing");
    }
    let r = graphsched::run(&g, &pool, &RunOptions::default()).unwrap();
    assert_eq!(r.stats().peak_live_bytes, 32);
    assert_eq!(r.stats().acquires, 1, "one block, for the 32 bytes");
}
