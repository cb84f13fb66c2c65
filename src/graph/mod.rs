//! The graph model: a builder that collects nodes and values, and the immutable [`Graph`] that
//! `finalize` compiles from it.
//!
//! A *node* is one operator invocation with a kernel; a *value* is one output of one node,
//! named by [`ValueRef`] (node id, output index). Graph inputs are nodes without a kernel whose
//! single value the caller binds to its own memory at run time. Node ids are assigned in the
//! order nodes are added, starting at 0, and inputs may name nodes that are added later, so a
//! builder can describe any graph, cycles included; `finalize` rejects what is not a DAG.
//!
//! What a [`Graph`] guarantees: it is a DAG; names are unique; every node has at least one
//! output, and at most [`MAX_NODE_PORTS`] outputs and inputs; a static size is at least 1 byte
//! and at most [`MAX_VALUE_BYTES`].
//! Values are also numbered densely (`0..value_count`, a node's outputs contiguous); the tables
//! use these indices, [`Graph::value_index`] and [`Graph::value_ref`] convert. A graph never
//! changes once finalized, so runs share it through an `Arc` on any number of threads; only the
//! scheduler's estimates move inside it (`sched`).
//!
//! API: [`GraphBuilder`] takes [`NodeDesc`]s, inputs and outputs, then [`GraphBuilder::finalize`];
//! [`Graph`] answers structure (inputs, successors, the topological order, release points);
//! [`memory`] measures live bytes along an order; [`reach`] holds ancestor sets.
//!
//! ```
//! use graphsched::{ErrorKind, GraphBuilder, NodeDesc, ValueRef};
//!
//! let op = |name: &str| NodeDesc::new(name, "Op", Box::new(|_| Ok(()))).output(16);
//! let mut b = GraphBuilder::new();
//! let x = b.add_input("x", 16).unwrap();
//! // `add` reads node 2, `mul`, which is added after it.
//! let add = b.add_node(op("add").input(x).input(ValueRef::new(2, 0))).unwrap();
//! let mul = b.add_node(op("mul").input(x)).unwrap();
//! let g = b.finalize().unwrap();
//! assert_eq!(g.topological_order(), [x.node, mul, add]);
//! assert_eq!(g.successors(x.node), [add, mul]); // one entry per input slot reading x
//!
//! let mut loop_ = GraphBuilder::new();
//! loop_.add_node(op("self").input(ValueRef::new(0, 0))).unwrap();
//! assert_eq!(loop_.finalize().unwrap_err().kind(), ErrorKind::Cycle);
//! ```

mod builder;
mod compile;
mod compiled;
pub mod memory;
mod nodes;
mod order;
pub mod reach;
mod specialize;
pub use specialize::MAX_SPECIALIZATIONS;

pub use builder::{GraphBuilder, NodeDesc};
pub(crate) use compiled::Annex;
pub use compiled::{Graph, GraphInfo};

/// Most inputs, and most outputs, one node may have.
pub const MAX_NODE_PORTS: usize = 65_535;

pub use crate::kernel::Kernel;
pub use crate::tensor::MAX_VALUE_BYTES;

/// One output of one node: how the caller names a value. (C: `gs_value`).
#[repr(C)]
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub struct ValueRef {
    /// Id of the producing node, as adding it returned.
    pub node: u32,
    /// Index among that node's outputs, from 0 (a graph input's value is output 0).
    pub output: u32,
}

impl ValueRef {
    /// Output `output` of node `node`; checked by `finalize` or the call that takes it.
    pub fn new(node: u32, output: u32) -> Self {
        ValueRef { node, output }
    }
}

/// Size of a node output: known when the graph is built, or allocated by the kernel as it runs.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum OutputSize {
    /// This many bytes (at least 1), reserved and allocated before the kernel runs.
    Bytes(usize),
    /// The kernel allocates it with its real size (`KernelCtx::alloc_output`); plans and memory
    /// admission cannot count it in advance.
    Dynamic,
}

impl OutputSize {
    /// The static size in bytes; `None` if dynamic.
    pub fn bytes(self) -> Option<usize> {
        match self {
            OutputSize::Bytes(n) => Some(n),
            OutputSize::Dynamic => None,
        }
    }
}
