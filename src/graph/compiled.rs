//! The compiled graph: what `finalize` produces and every run, plan and simulation reads. Node
//! and value tables in CSR form (inputs, outputs and successors of node `i` are slices of flat
//! arrays), the topological order, and when each value goes back to the pool along it.
//! Immutable once built, except for the slots the layers above keep state in ([`Graph::annex`]).

use std::any::{Any, TypeId};
use std::ffi::{CStr, CString};
use std::ops::Range;
use std::sync::atomic::AtomicU64;
use std::sync::OnceLock;

use super::nodes::NodeTable;
use super::{OutputSize, ValueRef};
use crate::kernel::{CKernel, KernelFn};

/// Figures about a finalized graph. (C: `gs_graph_info`).
#[repr(C)]
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct GraphInfo {
    /// Nodes, graph inputs included.
    pub num_nodes: u64,
    /// Graph inputs: nodes without a kernel, bound to caller memory.
    pub num_inputs: u64,
    /// Distinct values marked as graph outputs.
    pub num_outputs: u64,
    /// Outputs of all nodes, graph inputs' values included.
    pub num_values: u64,
    /// Input slots over all nodes (a node that reads a value twice counts two edges).
    pub num_edges: u64,
    /// Operator nodes on the critical path.
    pub critical_path_nodes: u64,
    /// Longest estimated path through the graph, in nanoseconds.
    pub critical_path_ns: u64,
    /// Sum of all nodes' estimated durations, in nanoseconds.
    pub total_work_ns: u64,
    /// Bytes of all statically sized values, graph inputs included.
    pub static_bytes: u64,
    /// Largest inputs + outputs of one node, in bytes: no order or placement can need less memory.
    pub node_lower_bound_bytes: u64,
}

/// Numbers graphs in the order they are finalized, for messages that must tell two apart.
/// Relaxed: the read-modify-write alone makes every number unique.
pub(super) static NEXT_GRAPH_ID: AtomicU64 = AtomicU64::new(1);

/// The layers that keep state with a graph (see [`Graph::annex`]).
#[derive(Clone, Copy)]
pub(crate) enum Annex {
    /// `sched`: learned durations, cached priorities.
    Scheduling = 0,
    /// `exec`: run state to recycle.
    Runs = 1,
}

/// A validated, analysed, immutable graph. Runs share it; it is `Send + Sync`.
pub struct Graph {
    /// Unique in the process: graph #1 is the first one finalized.
    pub(super) id: u64,
    /// The builder's tables, taken over as they were.
    pub(super) nodes: NodeTable,
    /// Value index read by each input slot.
    pub(super) input_values: Vec<u32>,
    pub(super) value_node: Vec<u32>,
    /// Input slots that read each value: its refcount at the start of a run, before outputs.
    pub(super) consumers: Vec<u32>,
    pub(super) is_output: Vec<bool>,
    pub(super) graph_outputs: Vec<u32>,
    pub(super) graph_inputs: Vec<u32>,
    /// Consumers of node `i`, one entry per input slot: `succ[succ_start[i]..succ_start[i + 1]]`.
    pub(super) succ_start: Vec<u32>,
    pub(super) succ: Vec<u32>,
    pub(super) topo: Vec<u32>,
    /// Per value: position in `topo` of the node after which it is released; `u32::MAX` for
    /// graph outputs, which the caller releases.
    pub(super) release_tick: Vec<u32>,
    /// Position of each node in `topo`.
    pub(super) topo_position: Vec<u32>,
    /// The structural figures of [`GraphInfo`]; the scheduler adds the timing ones.
    pub(super) structure: GraphInfo,
    /// What the layers above keep per graph, one slot each (see [`annex`](Graph::annex)).
    /// Per layer (`Annex`): its value, with its type's id, compared in place of a virtual
    /// `type_id` call (runs read the annexes a handful of times each).
    pub(super) annexes: [OnceLock<(TypeId, Box<dyn Any + Send + Sync>)>; 2],
    /// The topological order with the lowest max-live bound found, computed on first use.
    pub(super) lowest_live_order: OnceLock<super::memory::LiveOrder>,
    /// For a graph with inputs of dynamic size: the graphs made for input sizes seen so far.
    pub(super) specializations: super::specialize::Specializations,
    /// Graph inputs of dynamic size, in node-id order.
    pub(super) dynamic_inputs: Vec<u32>,
}

impl std::fmt::Debug for Graph {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Graph")
            .field("info", &self.structure)
            .finish_non_exhaustive()
    }
}

impl Graph {
    /// The graph's number, unique in the process (1 for the first graph finalized).
    pub fn id(&self) -> u64 {
        self.id
    }

    /// "graph #3 (12 nodes, first operator 'conv1')": enough to tell two graphs apart in a message.
    pub fn describe(&self) -> String {
        let first = (0..self.node_count() as u32)
            .find(|&n| !self.is_graph_input(n))
            .or(Some(0));
        match first.filter(|_| self.node_count() > 0) {
            Some(n) => format!(
                "graph #{} ({} nodes, first operator '{}')",
                self.id,
                self.node_count(),
                self.node_name(n)
            ),
            None => format!("graph #{} (empty)", self.id),
        }
    }

    /// The topological order with the lowest max-live bound found (the graph's own order or a
    /// memory-aware one, see [`LiveOrder::lowest`](super::memory::LiveOrder::lowest)), with its
    /// live bytes per step. Computed on first use.
    pub fn lowest_live_order(&self) -> &super::memory::LiveOrder {
        self.lowest_live_order
            .get_or_init(|| super::memory::LiveOrder::lowest(self))
    }

    /// The structural figures of [`GraphInfo`] (counts and bytes); the timing ones are zero.
    /// [`Graph::info`] fills them from the scheduler's current estimates.
    pub fn structure(&self) -> GraphInfo {
        self.structure
    }

    /// What `layer` keeps per graph, created by `init` on first use: the scheduler's learned
    /// durations and priorities, the runs' recycled state. Stored as `dyn Any` with its type's
    /// id, so that `graph` depends on nothing above it.
    ///
    /// # Panics
    /// If a different type was stored first: each layer stores one type, always the same.
    pub(crate) fn annex<T: Any + Send + Sync>(&self, layer: Annex, init: impl FnOnce() -> T) -> &T {
        let (id, value) = self.annexes[layer as usize].get_or_init(|| (TypeId::of::<T>(), Box::new(init())));
        assert!(*id == TypeId::of::<T>(), "one type per annex");
        // SAFETY: the value was stored as a `T` (its id is `T`'s), so the data pointer of the
        // trait object points at a `T`, living as long as the graph.
        unsafe { &*(&**value as *const (dyn Any + Send + Sync)).cast::<T>() }
    }

    /// Nodes, graph inputs included: node ids are `0..node_count()`.
    pub fn node_count(&self) -> usize {
        self.nodes.names.len()
    }

    /// Values of all nodes: value indices are `0..value_count()`.
    pub fn value_count(&self) -> usize {
        self.nodes.value_sizes.len()
    }

    /// The name the node was added with. Panics for a node id out of range, as every
    /// per-node and per-value accessor here does.
    pub fn node_name(&self, node: u32) -> &str {
        self.nodes.names[node as usize].to_str().expect("names are UTF-8")
    }

    /// The name as a C string, living as long as the graph (the C API hands it out).
    pub fn node_name_c(&self, node: u32) -> &CStr {
        &self.nodes.names[node as usize]
    }

    /// Every node's name, by node id.
    pub(crate) fn node_names_c(&self) -> &[CString] {
        &self.nodes.names
    }

    /// Op type of a node; empty for graph inputs.
    pub fn op_type(&self, node: u32) -> &str {
        match self.nodes.op_of[node as usize] {
            u32::MAX => "",
            op => self.nodes.op_types[op as usize].to_str().expect("op types are UTF-8"),
        }
    }

    /// `'name' (op Conv)` for messages; just `'name'` when the op type is empty.
    pub fn node_label(&self, node: u32) -> String {
        match self.op_type(node) {
            "" => format!("'{}'", self.node_name(node)),
            op => format!("'{}' (op {op})", self.node_name(node)),
        }
    }

    /// The id of the node named `name`.
    pub fn find_node(&self, name: &str) -> Option<u32> {
        self.nodes.by_name.get(name).copied()
    }

    /// Whether `node` is a graph input: no kernel, its value bound to caller memory per run.
    pub fn is_graph_input(&self, node: u32) -> bool {
        self.nodes.kernels[node as usize].is_none()
    }

    pub(crate) fn kernel(&self, node: u32) -> Option<&KernelFn> {
        self.nodes.kernels[node as usize].as_deref()
    }

    /// The C function the kernel of `node` calls, if it is one: the same call as `kernel`'s,
    /// without the closure around it.
    #[inline(always)]
    pub(crate) fn c_kernel(&self, node: u32) -> Option<&CKernel> {
        self.nodes.c_kernels[node as usize].as_ref()
    }

    /// Whether the node's output buffers are cleared before its kernel runs.
    pub fn zero_output(&self, node: u32) -> bool {
        self.nodes.zero_output[node as usize]
    }

    /// The node's in-place pair `(output index, input slot)`, if it declared one.
    pub fn in_place(&self, node: u32) -> Option<(u32, u32)> {
        match self.nodes.in_place[node as usize] {
            u32::MAX => None,
            packed => Some((packed >> 16, packed & 0xffff)),
        }
    }

    /// The estimate the caller gave, if any.
    pub fn estimate_ns(&self, node: u32) -> Option<u64> {
        self.nodes.estimate_ns[node as usize]
    }

    /// Number of distinct op types.
    pub fn op_type_count(&self) -> usize {
        self.nodes.op_types.len()
    }

    /// Index of a node's op type (`u32::MAX` for graph inputs).
    pub fn op_index(&self, node: u32) -> u32 {
        self.nodes.op_of[node as usize]
    }

    /// Value indices a node reads, one per input slot.
    pub fn node_inputs(&self, node: u32) -> &[u32] {
        &self.input_values[self.node_input_range(node)]
    }

    /// Every node's inputs (value indices), node after node: [`node_inputs`](Self::node_inputs)
    /// is a slice of it.
    pub fn input_values(&self) -> &[u32] {
        &self.input_values
    }

    /// Where a node's inputs sit in the list of every node's inputs, in node order (the list
    /// [`node_inputs`](Self::node_inputs) slices).
    pub fn node_input_range(&self, node: u32) -> Range<usize> {
        self.nodes.input_start[node as usize] as usize..self.nodes.input_start[node as usize + 1] as usize
    }

    /// Value indices a node produces.
    pub fn node_values(&self, node: u32) -> Range<u32> {
        self.nodes.value_start[node as usize]..self.nodes.value_start[node as usize + 1]
    }

    /// Nodes that read a node's outputs, one entry per input slot.
    pub fn successors(&self, node: u32) -> &[u32] {
        &self.succ[self.succ_start[node as usize] as usize..self.succ_start[node as usize + 1] as usize]
    }

    /// The value's size: static bytes or dynamic.
    pub fn value_size(&self, value: u32) -> OutputSize {
        self.nodes.value_sizes[value as usize]
    }

    /// The node whose output the value is.
    pub fn value_producer(&self, value: u32) -> u32 {
        self.value_node[value as usize]
    }

    /// The caller's name of value index `value`: (producer, output index).
    pub fn value_ref(&self, value: u32) -> ValueRef {
        let node = self.value_node[value as usize];
        ValueRef::new(node, value - self.nodes.value_start[node as usize])
    }

    /// Index of a value, if it exists (its node does, and has that output).
    pub fn value_index(&self, v: ValueRef) -> Option<u32> {
        if v.node as usize >= self.node_count() {
            return None;
        }
        let range = self.node_values(v.node);
        (v.output < range.end - range.start).then_some(range.start + v.output)
    }

    /// Input slots reading a value (its refcount before any graph-output hold).
    pub fn consumers(&self, value: u32) -> u32 {
        self.consumers[value as usize]
    }

    /// Whether the value was marked as a graph output: it outlives the run, in its result.
    pub fn is_graph_output(&self, value: u32) -> bool {
        self.is_output[value as usize]
    }

    /// Graph output value indices, in the order they were first marked.
    pub fn graph_outputs(&self) -> &[u32] {
        &self.graph_outputs
    }

    /// Node ids of the graph inputs, in id order.
    pub fn graph_inputs(&self) -> &[u32] {
        &self.graph_inputs
    }

    /// Every node once, each after the producers of all its inputs.
    pub fn topological_order(&self) -> &[u32] {
        &self.topo
    }

    /// When a run releases a value: the position, in the topological order, of the node after
    /// which it goes back to the pool; `None` for graph outputs, which outlive the run.
    pub fn release_tick(&self, value: u32) -> Option<u32> {
        Some(self.release_tick[value as usize]).filter(|&t| t != u32::MAX)
    }

    /// Position of each node in [`topological_order`](Self::topological_order), by node id.
    pub fn topological_positions(&self) -> &[u32] {
        &self.topo_position
    }
}
