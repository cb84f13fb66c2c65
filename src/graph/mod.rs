//! The graph model: a builder that collects nodes and values, and the immutable [`Graph`] that
//! `finalize` compiles from it.
//!
//! A *node* is one operator invocation with a kernel; a *value* is one output of one node,
//! named by [`ValueRef`] (node id, output index). Graph inputs are nodes without a kernel whose
//! single value the caller binds to its own memory at run time. Node ids are assigned in the
//! order nodes are added, starting at 0, and inputs may name nodes that are added later, so a
//! builder can describe any graph, cycles included; `finalize` rejects what is not a DAG.

mod builder;
mod compile;
mod compiled;
pub mod memory;
mod order;
pub mod reach;

pub use compiled::{Graph, GraphInfo};
pub use builder::{GraphBuilder, NodeDesc};

/// Most inputs, and most outputs, one node may have.
pub const MAX_NODE_PORTS: usize = 65_535;

pub use crate::kernel::Kernel;
pub use crate::tensor::MAX_VALUE_BYTES;

/// One output of one node. (C: `gs_value`).
#[repr(C)]
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub struct ValueRef {
    pub node: u32,
    pub output: u32,
}

impl ValueRef {
    pub fn new(node: u32, output: u32) -> Self {
        ValueRef { node, output }
    }
}

/// Size of a node output: known when the graph is built, or allocated by the kernel as it runs.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum OutputSize {
    Bytes(usize),
    Dynamic,
}

impl OutputSize {
    pub fn bytes(self) -> Option<usize> {
        match self {
            OutputSize::Bytes(n) => Some(n),
            OutputSize::Dynamic => None,
        }
    }
}
