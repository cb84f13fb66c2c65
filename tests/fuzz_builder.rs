//! Property test of the builder through the C ABI: random graphs with misuse mixed in (unknown
//! and out-of-range references, cycles, duplicate and empty names, zero and huge sizes, NULL
//! arguments, changes after finalize). Every call returns a status; finalize either succeeds with
//! a valid topological order or fails with a status and a message; nothing panics or hangs.

use std::ffi::{c_void, CStr, CString};
use std::ptr::{null, null_mut};

use graphsched::ffi::*;
use graphsched::ValueRef;
use proptest::prelude::*;

#[derive(Clone, Debug)]
enum Op {
    Input {
        name: u8,
        size: usize,
    },
    Node {
        name: u8,
        inputs: Vec<(u32, u32)>,
        outputs: Vec<usize>,
    },
    NullDesc,
    MarkOutput {
        node: u32,
        output: u32,
    },
    Finalize,
}

unsafe extern "C" fn noop(_: *mut gs_kernel_ctx, _: *mut c_void) -> i32 {
    0
}

fn op() -> impl Strategy<Value = Op> {
    let size = prop_oneof![1usize..4096, Just(0usize), Just(GS_SIZE_DYNAMIC), Just(usize::MAX - 7)];
    prop_oneof![
        (any::<u8>(), 0usize..256).prop_map(|(name, size)| Op::Input { name, size }),
        (
            any::<u8>(),
            prop::collection::vec((0u32..40, 0u32..3), 0..4),
            prop::collection::vec(size, 0..3)
        )
            .prop_map(|(name, inputs, outputs)| Op::Node { name, inputs, outputs }),
        Just(Op::NullDesc),
        (0u32..40, 0u32..3).prop_map(|(node, output)| Op::MarkOutput { node, output }),
        Just(Op::Finalize),
    ]
}

fn message() -> String {
    // SAFETY: a valid C string owned by this thread.
    unsafe { CStr::from_ptr(gs_last_error_message()) }
        .to_string_lossy()
        .into_owned()
}

proptest! {
    #![proptest_config(ProptestConfig { cases: 512, ..ProptestConfig::default() })]

    #[test]
    fn finalize_succeeds_with_a_valid_order_or_fails_with_a_status(ops in prop::collection::vec(op(), 1..60)) {
        let mut g = null_mut();
        // SAFETY: `g` is writable.
        prop_assert_eq!(unsafe { gs_graph_new(&mut g) }, gs_status::GS_OK);
        // What was accepted: per node id, the nodes it reads.
        let mut reads: Vec<Vec<u32>> = Vec::new();
        let mut finalized = false;
        for op in ops {
            // SAFETY: (block) arguments are NULL, live locals, or the live graph handle, which is
            // this thread's alone; the kernel does nothing, from any thread.
            let status = unsafe {
                match &op {
                    Op::Input { name, size } => {
                        let name = CString::new(format!("v{}", name % 32)).unwrap();
                        gs_graph_add_input(g, if *size == 0 { c"".as_ptr() } else { name.as_ptr() }, *size, null_mut())
                    }
                    Op::Node { name, inputs, outputs } => {
                        let name = CString::new(if *name == 0 { String::new() } else { format!("v{}", name % 32) }).unwrap();
                        let ins: Vec<ValueRef> = inputs.iter().map(|&(n, o)| ValueRef::new(n, o)).collect();
                        let desc = gs_node_desc {
                            name: name.as_ptr(),
                            op_type: c"Op".as_ptr(),
                            kernel: Some(noop),
                            user_data: null_mut(),
                            inputs: ins.as_ptr(),
                            num_inputs: ins.len() as u32,
                            num_outputs: outputs.len() as u32,
                            output_sizes: outputs.as_ptr(),
                            estimated_ns: 0,
                            flags: 0,
                            in_place_output: 0,
                            in_place_input: 0,
                            size_fn: None,
                        };
                        let mut id = u32::MAX;
                        let s = gs_graph_add_node(g, &desc, &mut id);
                        if s == gs_status::GS_OK {
                            prop_assert_eq!(id as usize, reads.len());
                            reads.push(inputs.iter().map(|&(n, _)| n).collect());
                        }
                        s
                    }
                    Op::NullDesc => gs_graph_add_node(g, null(), null_mut()),
                    Op::MarkOutput { node, output } => gs_graph_mark_output(g, ValueRef::new(*node, *output)),
                    Op::Finalize => gs_graph_finalize(g),
                }
            };
            if let Op::Input { .. } = op {
                if status == gs_status::GS_OK {
                    reads.push(Vec::new());
                }
            }
            if status != gs_status::GS_OK {
                prop_assert!(!message().is_empty(), "a failure without a message: {:?}", op);
            }
            if finalized {
                let changes = !matches!(op, Op::Finalize);
                prop_assert!(status != gs_status::GS_OK || !changes, "changed after finalize: {:?}", op);
            }
            if matches!(op, Op::Finalize) && status == gs_status::GS_OK {
                finalized = true;
                // A valid order: every node once, after everything it reads.
                let mut len = 0usize;
                // SAFETY: capacity 0 with NULL, then a buffer of `len`.
                unsafe {
                    prop_assert_eq!(gs_graph_topological_order(g, null_mut(), 0, &mut len), gs_status::GS_OK);
                    let mut order = vec![0u32; len];
                    prop_assert_eq!(gs_graph_topological_order(g, order.as_mut_ptr(), len, &mut len), gs_status::GS_OK);
                    prop_assert_eq!(len, reads.len());
                    let mut position = vec![usize::MAX; len];
                    for (i, &v) in order.iter().enumerate() {
                        prop_assert_eq!(position[v as usize], usize::MAX);
                        position[v as usize] = i;
                    }
                    for (v, ins) in reads.iter().enumerate() {
                        for &p in ins {
                            prop_assert!(position[p as usize] < position[v]);
                        }
                    }
                }
            }
        }
        // SAFETY: no call is using `g`, which is this thread's alone.
        unsafe { gs_graph_free(g) };
    }
}
