//! `finalize`: resolve references, order the nodes, and compute the figures the scheduler and
//! the memory planner read. Every pass is linear in nodes + edges.

use std::collections::HashMap;
use std::ffi::{CStr, CString};
use std::ops::Range;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex, OnceLock};

use super::builder::GraphBuilder;
use super::order::{shorten, topological_order};
use super::{Kernel, OutputSize, ValueRef, DEFAULT_ESTIMATE_NS};
use crate::error::{err, ErrorKind, Result};

/// Figures about a finalized graph. (C: `gs_graph_info`).
#[repr(C)]
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct GraphInfo {
    /// Nodes, graph inputs included.
    pub num_nodes: u64,
    pub num_inputs: u64,
    pub num_outputs: u64,
    pub num_values: u64,
    /// Input slots over all nodes (a node that reads a value twice counts two edges).
    pub num_edges: u64,
    /// Operator nodes on the critical path.
    pub critical_path_nodes: u64,
    /// Longest estimated path through the graph.
    pub critical_path_ns: u64,
    /// Sum of all nodes' estimated durations.
    pub total_work_ns: u64,
    /// Sum of all statically sized values.
    pub static_bytes: u64,
    /// Largest inputs + outputs of one node: no order or placement can need less memory.
    pub node_lower_bound_bytes: u64,
}

/// Numbers graphs in the order they are finalized, for messages that must tell two apart.
/// Relaxed: the read-modify-write alone makes every number unique.
static NEXT_GRAPH_ID: AtomicU64 = AtomicU64::new(1);

/// A validated, analysed, immutable graph. Runs share it; it is `Send + Sync`.
pub struct Graph {
    /// Unique in the process: graph #1 is the first one finalized.
    id: u64,
    names: Vec<CString>,
    by_name: HashMap<String, u32>,
    op_types: Vec<CString>,
    op_of: Vec<u32>,
    kernels: Vec<Option<Kernel>>,
    estimate_ns: Vec<Option<u64>>,
    zero_output: Vec<bool>,
    in_place: Vec<u32>,
    input_start: Vec<u32>,
    /// Value index read by each input slot.
    input_values: Vec<u32>,
    value_start: Vec<u32>,
    value_sizes: Vec<OutputSize>,
    value_node: Vec<u32>,
    /// Input slots that read each value: its refcount at the start of a run, before outputs.
    consumers: Vec<u32>,
    is_output: Vec<bool>,
    graph_outputs: Vec<u32>,
    graph_inputs: Vec<u32>,
    /// Consumers of node `i`, one entry per input slot: `succ[succ_start[i]..succ_start[i + 1]]`.
    succ_start: Vec<u32>,
    succ: Vec<u32>,
    topo: Vec<u32>,
    /// Per value: position in `topo` of the node after which it is released; `u32::MAX` for
    /// graph outputs, which the caller releases.
    release_tick: Vec<u32>,
    bottom_level: Vec<u64>,
    top_level: Vec<u64>,
    critical_path: Vec<u32>,
    info: GraphInfo,
    /// Learned duration per op type: an exponential moving average of real runs, 0 until the
    /// first. Updated by every run; a lost update between racing runs only delays learning.
    /// Relaxed: each is a self-contained number; no other memory is published through it.
    learned_ns: Vec<AtomicU64>,
    /// Scheduling priorities, computed on first use and again when estimates move.
    priorities: Mutex<Option<Arc<crate::sched::Priorities>>>,
    /// The topological order with the lowest max-live bound found, computed on first use.
    lowest_live_order: OnceLock<super::memory::LiveOrder>,
}

pub(super) fn compile(b: &mut GraphBuilder) -> Result<Graph> {
    let n = b.names.len();
    let name = |i: u32| b.names[i as usize].to_string_lossy().into_owned();
    let values_of = |node: u32| b.value_start[node as usize]..b.value_start[node as usize + 1];

    // Resolve every input slot to a value index.
    let resolve = |v: ValueRef, who: &dyn Fn() -> String| -> Result<u32> {
        if v.node as usize >= n {
            return err(
                ErrorKind::UnknownValue,
                format!(
                    "{} names node {}, but the graph has only {n} nodes (ids 0..{})",
                    who(),
                    v.node,
                    n.saturating_sub(1)
                ),
            );
        }
        let range = values_of(v.node);
        let outputs = range.end - range.start;
        if v.output >= outputs {
            return err(
                ErrorKind::OutputIndex,
                format!(
                    "{} names output {} of node '{}', which has {outputs} output(s)",
                    who(),
                    v.output,
                    name(v.node)
                ),
            );
        }
        Ok(range.start + v.output)
    };
    let mut input_values = Vec::with_capacity(b.inputs.len());
    for node in 0..n as u32 {
        let slots = b.input_start[node as usize] as usize..b.input_start[node as usize + 1] as usize;
        for (k, &v) in b.inputs[slots].iter().enumerate() {
            input_values.push(resolve(v, &|| format!("input {k} of node '{}'", name(node)))?);
        }
    }
    let num_values = b.value_sizes.len();
    let mut value_node = vec![0u32; num_values];
    for node in 0..n as u32 {
        for v in values_of(node) {
            value_node[v as usize] = node;
        }
    }
    let mut is_output = vec![false; num_values];
    let mut graph_outputs = Vec::new();
    for &v in &b.graph_outputs {
        let idx = resolve(v, &|| format!("graph output ({}, {})", v.node, v.output))?;
        if !is_output[idx as usize] {
            is_output[idx as usize] = true;
            graph_outputs.push(idx);
        }
    }

    let producer = |slot: usize| value_node[input_values[slot] as usize];
    let topo = topological_order(n, &b.input_start, &producer).map_err(|cycle| {
        let path: Vec<String> = cycle.iter().map(|&i| format!("'{}'", name(i))).collect();
        crate::error::Error::new(ErrorKind::Cycle, format!("the graph has a cycle: {}", shorten(&path)))
    })?;

    // Consumers per node (CSR) and per value.
    let mut succ_start = vec![0u32; n + 1];
    let mut consumers = vec![0u32; num_values];
    for slot in 0..input_values.len() {
        succ_start[producer(slot) as usize + 1] += 1;
        consumers[input_values[slot] as usize] += 1;
    }
    for i in 0..n {
        succ_start[i + 1] += succ_start[i];
    }
    let mut fill = succ_start.clone();
    let mut succ = vec![0u32; input_values.len()];
    for node in 0..n {
        for slot in b.input_start[node] as usize..b.input_start[node + 1] as usize {
            let p = producer(slot) as usize;
            succ[fill[p] as usize] = node as u32;
            fill[p] += 1;
        }
    }

    // When each value is released, in topological positions: after its last consumer, or right
    // after its producer if nobody reads it.
    let mut position = vec![0u32; n];
    for (i, &v) in topo.iter().enumerate() {
        position[v as usize] = i as u32;
    }
    let mut release_tick: Vec<u32> = value_node.iter().map(|&p| position[p as usize]).collect();
    for node in 0..n {
        for slot in b.input_start[node] as usize..b.input_start[node + 1] as usize {
            let v = input_values[slot] as usize;
            release_tick[v] = release_tick[v].max(position[node]);
        }
    }
    for (v, tick) in release_tick.iter_mut().enumerate() {
        if is_output[v] {
            *tick = u32::MAX;
        }
    }

    // Levels: bottom = longest path from a node to a sink, itself included; top = longest path
    // from a source to the node, itself excluded. Graph inputs weigh nothing.
    let weight: Vec<u64> = (0..n)
        .map(|i| match b.kernels[i] {
            None => 0,
            Some(_) => b.estimate_ns[i].unwrap_or(DEFAULT_ESTIMATE_NS),
        })
        .collect();
    let mut bottom_level = vec![0u64; n];
    for &v in topo.iter().rev() {
        let v = v as usize;
        bottom_level[v] = bottom_level[v].saturating_add(weight[v]);
        for slot in b.input_start[v] as usize..b.input_start[v + 1] as usize {
            let p = producer(slot) as usize;
            bottom_level[p] = bottom_level[p].max(bottom_level[v]);
        }
    }
    let mut top_level = vec![0u64; n];
    for &v in &topo {
        let v = v as usize;
        for slot in b.input_start[v] as usize..b.input_start[v + 1] as usize {
            let p = producer(slot) as usize;
            top_level[v] = top_level[v].max(top_level[p].saturating_add(weight[p]));
        }
    }
    let critical_path_ns = bottom_level.iter().copied().max().unwrap_or(0);
    let mut critical_path = Vec::new();
    if let Some(mut v) = (0..n).find(|&i| top_level[i] == 0 && bottom_level[i] == critical_path_ns) {
        loop {
            critical_path.push(v as u32);
            let want = top_level[v].saturating_add(weight[v]);
            let next = succ[succ_start[v] as usize..succ_start[v + 1] as usize]
                .iter()
                .map(|&s| s as usize)
                .find(|&s| top_level[s] == want && want.saturating_add(bottom_level[s]) == critical_path_ns);
            match next {
                Some(s) => v = s,
                None => break,
            }
        }
    }
    critical_path.retain(|&i| b.kernels[i as usize].is_some());

    // Memory figures: the static total, and the largest single node (distinct inputs + outputs).
    let size = |v: u32| b.value_sizes[v as usize].bytes().unwrap_or(0) as u64;
    let static_bytes = (0..num_values as u32).map(size).fold(0u64, u64::saturating_add);
    let mut seen_by = vec![u32::MAX; num_values];
    let mut node_lower_bound_bytes = 0u64;
    for node in 0..n {
        let mut bytes = values_of(node as u32).map(size).fold(0u64, u64::saturating_add);
        for slot in b.input_start[node] as usize..b.input_start[node + 1] as usize {
            let v = input_values[slot];
            if seen_by[v as usize] != node as u32 {
                seen_by[v as usize] = node as u32;
                bytes = bytes.saturating_add(size(v));
            }
        }
        node_lower_bound_bytes = node_lower_bound_bytes.max(bytes);
    }

    let graph_inputs: Vec<u32> = (0..n as u32).filter(|&i| b.kernels[i as usize].is_none()).collect();
    let info = GraphInfo {
        num_nodes: n as u64,
        num_inputs: graph_inputs.len() as u64,
        num_outputs: graph_outputs.len() as u64,
        num_values: num_values as u64,
        num_edges: input_values.len() as u64,
        critical_path_nodes: critical_path.len() as u64,
        critical_path_ns,
        total_work_ns: weight.iter().copied().fold(0u64, u64::saturating_add),
        static_bytes,
        node_lower_bound_bytes,
    };

    let learned_ns = (0..b.op_types.len()).map(|_| AtomicU64::new(0)).collect();
    // Validation is over: take the builder's storage without copying it.
    Ok(Graph {
        id: NEXT_GRAPH_ID.fetch_add(1, Ordering::Relaxed),
        names: std::mem::take(&mut b.names),
        by_name: std::mem::take(&mut b.by_name),
        op_types: std::mem::take(&mut b.op_types),
        op_of: std::mem::take(&mut b.op_of),
        kernels: std::mem::take(&mut b.kernels),
        estimate_ns: std::mem::take(&mut b.estimate_ns),
        zero_output: std::mem::take(&mut b.zero_output),
        in_place: std::mem::take(&mut b.in_place),
        input_start: std::mem::take(&mut b.input_start),
        input_values,
        value_start: std::mem::take(&mut b.value_start),
        value_sizes: std::mem::take(&mut b.value_sizes),
        value_node,
        consumers,
        is_output,
        graph_outputs,
        graph_inputs,
        succ_start,
        succ,
        topo,
        release_tick,
        bottom_level,
        top_level,
        critical_path,
        info,
        learned_ns,
        priorities: Mutex::new(None),
        lowest_live_order: OnceLock::new(),
    })
}

impl std::fmt::Debug for Graph {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Graph")
            .field("info", &self.info)
            .finish_non_exhaustive()
    }
}

impl Graph {
    /// The graph's number, unique in the process (1 for the first graph finalized).
    pub fn id(&self) -> u64 {
        self.id
    }

    /// "graph #3 (12 nodes, first 'conv1')": enough to tell two graphs apart in a message.
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

    pub fn info(&self) -> GraphInfo {
        self.info
    }

    pub fn node_count(&self) -> usize {
        self.names.len()
    }

    pub fn value_count(&self) -> usize {
        self.value_sizes.len()
    }

    pub fn node_name(&self, node: u32) -> &str {
        self.names[node as usize].to_str().expect("names are UTF-8")
    }

    pub fn node_name_c(&self, node: u32) -> &CStr {
        &self.names[node as usize]
    }

    /// Op type of a node; empty for graph inputs.
    pub fn op_type(&self, node: u32) -> &str {
        match self.op_of[node as usize] {
            u32::MAX => "",
            op => self.op_types[op as usize].to_str().expect("op types are UTF-8"),
        }
    }

    /// `'name' (op Conv)` for messages; just `'name'` when the op type is empty.
    pub fn node_label(&self, node: u32) -> String {
        match self.op_type(node) {
            "" => format!("'{}'", self.node_name(node)),
            op => format!("'{}' (op {op})", self.node_name(node)),
        }
    }

    pub fn find_node(&self, name: &str) -> Option<u32> {
        self.by_name.get(name).copied()
    }

    pub fn is_graph_input(&self, node: u32) -> bool {
        self.kernels[node as usize].is_none()
    }

    pub(crate) fn kernel(&self, node: u32) -> Option<&Kernel> {
        self.kernels[node as usize].as_ref()
    }

    pub fn zero_output(&self, node: u32) -> bool {
        self.zero_output[node as usize]
    }

    /// The node's in-place pair `(output index, input slot)`, if it declared one.
    pub fn in_place(&self, node: u32) -> Option<(u32, u32)> {
        match self.in_place[node as usize] {
            u32::MAX => None,
            packed => Some((packed >> 16, packed & 0xffff)),
        }
    }

    /// The estimate the caller gave, if any.
    pub fn estimate_ns(&self, node: u32) -> Option<u64> {
        self.estimate_ns[node as usize]
    }

    /// The duration the scheduler assumes for a node: the caller's estimate, else what runs have
    /// learned for its op type, else [`DEFAULT_ESTIMATE_NS`]; 0 for graph inputs.
    pub fn expected_ns(&self, node: u32) -> u64 {
        if self.is_graph_input(node) {
            return 0;
        }
        self.estimate_ns[node as usize].unwrap_or_else(|| match self.learned_op_ns(self.op_of[node as usize]) {
            0 => DEFAULT_ESTIMATE_NS,
            learned => learned,
        })
    }

    /// Number of distinct op types.
    pub fn op_type_count(&self) -> usize {
        self.op_types.len()
    }

    /// Index of a node's op type (`u32::MAX` for graph inputs).
    pub fn op_index(&self, node: u32) -> u32 {
        self.op_of[node as usize]
    }

    /// What runs have learned an op type takes (0: nothing yet).
    pub fn learned_op_ns(&self, op: u32) -> u64 {
        self.learned_ns
            .get(op as usize)
            .map_or(0, |a| a.load(Ordering::Relaxed))
    }

    /// Folds one measured duration of `node` into its op type's moving average (weight 1/8).
    pub fn learn(&self, node: u32, ns: u64) {
        let Some(slot) = self.learned_ns.get(self.op_of[node as usize] as usize) else {
            return;
        };
        let old = slot.load(Ordering::Relaxed);
        let new = if old == 0 {
            ns.max(1)
        } else {
            (old - old / 8 + ns / 8).max(1)
        };
        slot.store(new, Ordering::Relaxed);
    }

    /// The scheduling priorities for the current estimates, recomputed when they have moved.
    pub fn priorities(&self) -> Arc<crate::sched::Priorities> {
        let mut cached = self.priorities.lock().unwrap_or_else(|e| e.into_inner());
        match &*cached {
            Some(p) if !p.is_stale(self) => p.clone(),
            _ => {
                let p = Arc::new(crate::sched::Priorities::compute(self));
                *cached = Some(p.clone());
                p
            }
        }
    }

    /// Value indices a node reads, one per input slot.
    pub fn node_inputs(&self, node: u32) -> &[u32] {
        &self.input_values[self.input_start[node as usize] as usize..self.input_start[node as usize + 1] as usize]
    }

    /// Value indices a node produces.
    pub fn node_values(&self, node: u32) -> Range<u32> {
        self.value_start[node as usize]..self.value_start[node as usize + 1]
    }

    /// Nodes that read a node's outputs, one entry per input slot.
    pub fn successors(&self, node: u32) -> &[u32] {
        &self.succ[self.succ_start[node as usize] as usize..self.succ_start[node as usize + 1] as usize]
    }

    pub fn value_size(&self, value: u32) -> OutputSize {
        self.value_sizes[value as usize]
    }

    pub fn value_producer(&self, value: u32) -> u32 {
        self.value_node[value as usize]
    }

    pub fn value_ref(&self, value: u32) -> ValueRef {
        let node = self.value_node[value as usize];
        ValueRef::new(node, value - self.value_start[node as usize])
    }

    /// Index of a value, if it exists.
    pub fn value_index(&self, v: ValueRef) -> Option<u32> {
        let range = self.node_values(v.node).clone();
        (v.output < range.end - range.start).then_some(range.start + v.output)
    }

    /// Input slots reading a value (its refcount before any graph-output hold).
    pub fn consumers(&self, value: u32) -> u32 {
        self.consumers[value as usize]
    }

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

    /// Longest estimated path from the node to any sink, the node included.
    pub fn bottom_level(&self, node: u32) -> u64 {
        self.bottom_level[node as usize]
    }

    /// Longest estimated path from any source to the node, the node excluded.
    pub fn top_level(&self, node: u32) -> u64 {
        self.top_level[node as usize]
    }

    /// Operator nodes of one longest path, in execution order.
    pub fn critical_path(&self) -> &[u32] {
        &self.critical_path
    }
}
