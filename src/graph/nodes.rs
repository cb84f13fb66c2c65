//! The per-node tables a builder fills and the compiled graph keeps as they are: one array per
//! field, CSR offsets for the variable-length ones, so that a million nodes cost a handful of
//! allocations and `finalize` walks arrays.

use std::collections::HashMap;
use std::ffi::CString;
use std::sync::Arc;

use super::OutputSize;
use crate::kernel::{CKernel, KernelFn, SizeFnDyn};

/// Nodes and their values, by node id (and value index for `value_sizes`). Cloning shares the
/// kernels and size functions.
#[derive(Clone)]
pub(super) struct NodeTable {
    pub(super) names: Vec<CString>,
    pub(super) by_name: HashMap<String, u32>,
    pub(super) op_types: Vec<CString>,
    /// Per node: index into `op_types`; graph inputs use `u32::MAX`.
    pub(super) op_of: Vec<u32>,
    /// `None` marks a graph input.
    pub(super) kernels: Vec<Option<Arc<KernelFn>>>,
    /// Per node: the C function its kernel calls, if it is one (the C API's nodes), which a run
    /// may call without the kernel's closure (`exec/lean.rs`).
    pub(super) c_kernels: Vec<Option<CKernel>>,
    /// Per node: how its output sizes follow its input sizes, if they do.
    pub(super) size_fns: Vec<Option<Arc<SizeFnDyn>>>,
    pub(super) estimate_ns: Vec<Option<u64>>,
    pub(super) zero_output: Vec<bool>,
    /// Per node: `output << 16 | input` of an in-place pair, or `u32::MAX`.
    pub(super) in_place: Vec<u32>,
    /// Input slots of node `i` are `input_start[i]..input_start[i + 1]`.
    pub(super) input_start: Vec<u32>,
    /// Values of node `i` are value indices `value_start[i]..value_start[i + 1]`.
    pub(super) value_start: Vec<u32>,
    pub(super) value_sizes: Vec<OutputSize>,
}

impl Default for NodeTable {
    /// No node: the CSR offset arrays hold their sentinel 0.
    fn default() -> Self {
        NodeTable {
            names: Vec::new(),
            by_name: HashMap::new(),
            op_types: Vec::new(),
            op_of: Vec::new(),
            kernels: Vec::new(),
            c_kernels: Vec::new(),
            size_fns: Vec::new(),
            estimate_ns: Vec::new(),
            zero_output: Vec::new(),
            in_place: Vec::new(),
            input_start: vec![0],
            value_start: vec![0],
            value_sizes: Vec::new(),
        }
    }
}
