//! Inputs whose size each run binds: a small MLP (x: batch x 4 floats -> dense 4x3 -> doubled ->
//! sum) run at batch 1, 4 and 16, on the calling thread and on an executor, with automatic plans
//! and under a memory limit; the graph made per set of sizes is reused; every way the sizes can
//! be wrong is reported, naming what is wrong.

use std::sync::Arc;

use graphsched::{ErrorKind, Executor, Graph, GraphBuilder, InputBinding, NodeDesc, Pool, RunOptions, ValueRef};

const IN: usize = 4;
const OUT: usize = 3;
const W: [[f32; OUT]; IN] = [[1.0, 0.5, -1.0], [2.0, 0.0, 1.0], [0.0, -0.5, 3.0], [1.0, 1.0, 1.0]];

fn floats(bytes: &[u8]) -> Vec<f32> {
    bytes
        .chunks_exact(4)
        .map(|c| f32::from_ne_bytes([c[0], c[1], c[2], c[3]]))
        .collect()
}

fn write(out: &mut [u8], xs: &[f32]) {
    for (dst, x) in out.chunks_exact_mut(4).zip(xs) {
        dst.copy_from_slice(&x.to_ne_bytes());
    }
}

/// The MLP; `dense` and `double` say how their sizes follow the batch, `sum` is one float.
fn mlp() -> (Arc<Graph>, ValueRef, ValueRef, ValueRef) {
    let mut b = GraphBuilder::new();
    let x = b.add_dynamic_input("x").unwrap();
    let dense = b
        .add_node(
            NodeDesc::new(
                "dense",
                "Dense",
                Box::new(|ctx| {
                    let x = floats(ctx.input_bytes(0).ok_or("no input")?);
                    let y: Vec<f32> = x
                        .chunks_exact(IN)
                        .flat_map(|row| (0..OUT).map(move |j| (0..IN).map(|i| row[i] * W[i][j]).sum::<f32>()))
                        .collect();
                    write(ctx.output_bytes(0).ok_or("no output")?, &y);
                    Ok(())
                }),
            )
            .input(x)
            .output(OUT * 4) // batch 1, until the size function says otherwise
            .sizes(Box::new(|inputs, outputs| match inputs[0] % (IN * 4) {
                0 => {
                    outputs[0] = inputs[0] / IN * OUT;
                    Ok(())
                }
                _ => Err(format!("{} bytes are not whole rows of {IN} floats", inputs[0])),
            })),
        )
        .unwrap();
    let double = b
        .add_node(
            NodeDesc::new(
                "double",
                "Scale",
                Box::new(|ctx| {
                    let y: Vec<f32> = floats(ctx.input_bytes(0).ok_or("no input")?)
                        .iter()
                        .map(|v| 2.0 * v)
                        .collect();
                    write(ctx.output_bytes(0).ok_or("no output")?, &y);
                    Ok(())
                }),
            )
            .input(ValueRef::new(dense, 0))
            .output(OUT * 4)
            .sizes(Box::new(|inputs, outputs| {
                outputs[0] = inputs[0];
                Ok(())
            })),
        )
        .unwrap();
    let sum = b
        .add_node(
            NodeDesc::new(
                "sum",
                "Sum",
                Box::new(|ctx| {
                    let s: f32 = floats(ctx.input_bytes(0).ok_or("no input")?).iter().sum();
                    write(ctx.output_bytes(0).ok_or("no output")?, &[s]);
                    Ok(())
                }),
            )
            .input(ValueRef::new(double, 0))
            .output(4),
        )
        .unwrap();
    b.mark_output(ValueRef::new(double, 0)).unwrap();
    b.mark_output(ValueRef::new(sum, 0)).unwrap();
    (
        Arc::new(b.finalize().unwrap()),
        x,
        ValueRef::new(double, 0),
        ValueRef::new(sum, 0),
    )
}

/// 16-byte-aligned storage for `batch` rows: row r holds r+1, r+2, r+3, r+4.
fn batch_input(batch: usize) -> Vec<u128> {
    let xs: Vec<f32> = (0..batch)
        .flat_map(|r| (0..IN).map(move |i| (r + i + 1) as f32))
        .collect();
    let mut words = vec![0u128; (xs.len() * 4).div_ceil(16)];
    // SAFETY: `words` holds at least `xs.len() * 4` bytes, and u8 has no alignment needs.
    let bytes = unsafe { std::slice::from_raw_parts_mut(words.as_mut_ptr().cast::<u8>(), xs.len() * 4) };
    write(bytes, &xs);
    words
}

fn as_bytes(words: &[u128], len: usize) -> &[u8] {
    // SAFETY: `words` holds at least `len` initialized bytes.
    unsafe { std::slice::from_raw_parts(words.as_ptr().cast::<u8>(), len) }
}

fn expected(batch: usize) -> Vec<f32> {
    (0..batch)
        .flat_map(|r| (0..OUT).map(move |j| 2.0 * (0..IN).map(|i| (r + i + 1) as f32 * W[i][j]).sum::<f32>()))
        .collect()
}

fn check_run(g: &Arc<Graph>, pool: &Arc<Pool>, options: RunOptions<'_>, batch: usize) {
    let (x, double, sum) = (ValueRef::new(0, 0), ValueRef::new(2, 0), ValueRef::new(3, 0));
    let words = batch_input(batch);
    let bindings = [InputBinding::new(x, as_bytes(&words, batch * IN * 4))];
    let r = graphsched::run(
        g,
        pool,
        &RunOptions {
            inputs: &bindings,
            ..options
        },
    )
    .unwrap();
    let doubled = floats(r.output_bytes(double).unwrap());
    assert_eq!(doubled, expected(batch), "batch {batch}");
    let total = floats(r.output_bytes(sum).unwrap())[0];
    assert_eq!(total, expected(batch).iter().sum::<f32>(), "batch {batch}");
}

#[test]
fn one_graph_runs_at_batch_0_1_4_and_16_on_every_kind_of_run() {
    let (g, ..) = mlp();
    assert!(g.has_dynamic_inputs());
    let pool = Arc::new(Pool::default());
    let executor = Executor::new(2).unwrap();
    let on = Some(&executor);
    // The limit fits batch 16's values (16 x 3 floats, twice, and the sum) and no more.
    let limit = (16 * OUT * 4 * 2 + 4) as u64;
    let kinds = [
        RunOptions::default(),
        // Forced: the MLP's kernels are short, and would keep these runs on their caller.
        RunOptions {
            executor: on,
            force_executor: true,
            ..Default::default()
        },
        RunOptions {
            auto_plan: true,
            ..Default::default()
        },
        RunOptions {
            executor: on,
            force_executor: true,
            auto_plan: true,
            ..Default::default()
        },
        RunOptions {
            executor: on,
            memory_limit_bytes: limit,
            ..Default::default()
        },
    ];
    // Batch 0 is an empty tensor: every value of the MLP but the sum has 0 bytes.
    for batch in [1, 4, 0, 16, 4, 0, 1, 16] {
        for options in kinds {
            check_run(&g, &pool, options, batch);
        }
    }
}

#[test]
fn sizes_seen_before_reuse_their_graph_and_the_oldest_is_dropped_past_the_limit() {
    let (g, ..) = mlp();
    let a = g.specialize(&[4 * IN * 4]).unwrap();
    assert!(
        Arc::ptr_eq(&a, &g.specialize(&[4 * IN * 4]).unwrap()),
        "the same sizes, the same graph"
    );
    let b = g.specialize(&[16 * IN * 4]).unwrap();
    assert!(!Arc::ptr_eq(&a, &b));
    assert_eq!(a.value_size(1).bytes(), Some(4 * OUT * 4), "dense at batch 4");
    assert_eq!(b.value_size(2).bytes(), Some(16 * OUT * 4), "double at batch 16");
    assert_eq!(b.value_size(3).bytes(), Some(4), "sum keeps its declared size");
    assert!(!a.has_dynamic_inputs() && a.info().static_bytes > 0);
    for batch in 100..100 + graphsched::graph::MAX_SPECIALIZATIONS {
        g.specialize(&[batch * IN * 4]).unwrap();
    }
    assert!(
        !Arc::ptr_eq(&a, &g.specialize(&[4 * IN * 4]).unwrap()),
        "batch 4 was the oldest, dropped"
    );
}

#[test]
fn wrong_sizes_are_named_and_the_graph_runs_again() {
    let (g, x, ..) = mlp();
    let pool = Arc::new(Pool::default());
    let words = batch_input(4);
    let run_with = |len: usize| {
        let bindings = [InputBinding::new(x, as_bytes(&words, len))];
        graphsched::run(
            &g,
            &pool,
            &RunOptions {
                inputs: &bindings,
                ..Default::default()
            },
        )
    };
    let e = run_with(20).err().expect("the run fails");
    assert_eq!(e.kind(), ErrorKind::KernelFailed);
    assert!(
        e.message().contains("size function of node 'dense'") && e.message().contains("20 bytes"),
        "{e}"
    );
    let e = graphsched::run(&g, &pool, &RunOptions::default())
        .err()
        .expect("the run fails");
    assert_eq!(e.kind(), ErrorKind::InputBinding);
    assert!(e.message().contains("'x'") && e.message().contains("not bound"), "{e}");
    check_run(&g, &pool, RunOptions::default(), 4);
}

#[test]
fn a_size_function_that_fails_or_panics_fails_the_run_naming_the_node() {
    for (name, f) in [
        (
            "fails",
            Box::new(|_: &[usize], _: &mut [usize]| Err("no size for this input".to_string()))
                as graphsched::kernel::SizeFn,
        ),
        (
            "panics",
            Box::new(|_: &[usize], _: &mut [usize]| panic!("size function bug")),
        ),
    ] {
        let mut b = GraphBuilder::new();
        let x = b.add_dynamic_input("x").unwrap();
        let n = b
            .add_node(
                NodeDesc::new(name, "Op", Box::new(|_| Ok(())))
                    .input(x)
                    .output(16)
                    .sizes(f),
            )
            .unwrap();
        b.mark_output(ValueRef::new(n, 0)).unwrap();
        let g = Arc::new(b.finalize().unwrap());
        let words = [0u128; 2];
        let bindings = [InputBinding::new(x, as_bytes(&words, 32))];
        let e = graphsched::run(
            &g,
            &Arc::new(Pool::default()),
            &RunOptions {
                inputs: &bindings,
                ..Default::default()
            },
        )
        .err()
        .expect("the run fails");
        let want = if name == "panics" {
            ErrorKind::KernelPanicked
        } else {
            ErrorKind::KernelFailed
        };
        assert_eq!(e.kind(), want, "{name}");
        assert!(e.message().contains(&format!("node '{name}'")), "{e}");
    }
}

#[test]
fn a_plan_of_a_graph_with_dynamic_inputs_is_refused_when_made() {
    use graphsched::plan::{Mode, Order, Plan};
    let (g, ..) = mlp();
    // The sentence runs gave for such a plan, when plans were made and every run failed.
    let want = format!(
        "{} has inputs of dynamic size, and a plan fixes every size: ask for automatic plans instead \
         (GS_RUN_AUTO_PLAN, RunOptions::auto_plan), made once per set of input sizes",
        g.describe()
    );
    for mode in [
        Mode::Sequential(Order::Topological),
        Mode::Sequential(Order::MemoryAware),
        Mode::ParallelSafe,
        Mode::Scheduled { threads: 2 },
    ] {
        let e = Plan::new(&g, mode).expect_err("no plan of a graph of dynamic sizes");
        assert_eq!(
            (e.kind(), e.message()),
            (ErrorKind::InvalidArgument, want.as_str()),
            "{mode:?}"
        );
    }
    // Automatic plans, made per set of sizes, still serve its runs.
    let pool = Arc::new(Pool::default());
    check_run(
        &g,
        &pool,
        RunOptions {
            auto_plan: true,
            ..Default::default()
        },
        4,
    );
}
