//! Graphs whose inputs change size from run to run (batch size, sequence length).
//!
//! A graph with inputs of dynamic size ([`GraphBuilder::add_dynamic_input`]) is never run as it
//! is: a run binds its inputs, and the graph is *specialized* to those sizes. Each node's size
//! function ([`NodeDesc::sizes`]) runs once, in topological order, from its inputs' sizes to its
//! outputs'; the result is an ordinary graph with every static size known, sharing the original's
//! kernels, so admission, bounds, plans and the pool's hints all work as for any graph. The
//! specialized graphs are kept per set of input sizes (up to [`MAX_SPECIALIZATIONS`], oldest
//! dropped first): runs with sizes seen before reuse the graph, its learned durations and its
//! automatic plan.
//!
//! [`GraphBuilder::add_dynamic_input`]: super::GraphBuilder::add_dynamic_input
//! [`NodeDesc::sizes`]: super::NodeDesc::sizes

use std::collections::VecDeque;
use std::panic::{catch_unwind, AssertUnwindSafe};
use std::sync::atomic::Ordering;
use std::sync::{Arc, Mutex, OnceLock};

use super::compile::size_figures;
use super::compiled::{Graph, NEXT_GRAPH_ID};
use super::{OutputSize, MAX_VALUE_BYTES};
use crate::error::{err, Error, ErrorKind, Result};

/// Most sets of input sizes a graph keeps its specialized graph for.
pub const MAX_SPECIALIZATIONS: usize = 32;

/// One set of input sizes and the graph made for it.
type Specialized = (Box<[usize]>, Arc<Graph>);

/// The specialized graphs of one graph, oldest first.
#[derive(Default)]
pub(super) struct Specializations(Mutex<VecDeque<Specialized>>);

impl Graph {
    /// The graph inputs whose size each run's binding gives, in node-id order (found once, by
    /// `finalize`).
    pub fn dynamic_inputs(&self) -> &[u32] {
        &self.dynamic_inputs
    }

    /// Whether some graph input has a dynamic size: runs then use [`Graph::specialize`].
    pub fn has_dynamic_inputs(&self) -> bool {
        !self.dynamic_inputs.is_empty()
    }

    /// The graph for these input sizes, one per [`dynamic input`](Graph::dynamic_inputs) in
    /// order: every size function applied, made once per set of sizes and kept. Fails with
    /// [`ErrorKind::InputBinding`] for a size too large (0 is an empty tensor), and with
    /// [`ErrorKind::KernelFailed`] when a size function fails,
    /// [`ErrorKind::KernelPanicked`] when it panics and [`ErrorKind::SizeOverflow`] when it gives
    /// too many bytes, naming the node.
    pub fn specialize(&self, sizes: &[usize]) -> Result<Arc<Graph>> {
        let inputs = self.dynamic_inputs();
        if sizes.len() != inputs.len() {
            return err(
                ErrorKind::InputBinding,
                format!(
                    "{} has {} inputs of dynamic size, given {} sizes",
                    self.describe(),
                    inputs.len(),
                    sizes.len()
                ),
            );
        }
        for (&node, &bytes) in inputs.iter().zip(sizes) {
            if bytes > MAX_VALUE_BYTES {
                return err(
                    ErrorKind::InputBinding,
                    format!(
                        "graph input '{}' is bound to {bytes} bytes; a buffer has at most {MAX_VALUE_BYTES} bytes",
                        self.node_name(node)
                    ),
                );
            }
        }
        let lock = || self.specializations.0.lock().unwrap_or_else(|e| e.into_inner());
        // A hit moves to the back: the sizes used least recently go first.
        let hit = |cache: &mut VecDeque<Specialized>| {
            let at = cache.iter().position(|(key, _)| **key == *sizes)?;
            let entry = cache.remove(at)?;
            cache.push_back(entry.clone());
            Some(entry.1)
        };
        if let Some(g) = hit(&mut lock()) {
            return Ok(g);
        }
        // Size functions are the caller's code: they run without the lock, so that runs with
        // other sizes go on meanwhile (and a size function may run this graph).
        let graph = Arc::new(self.with_sizes(self.propagate(inputs, sizes)?));
        let mut cache = lock();
        if let Some(g) = hit(&mut cache) {
            return Ok(g); // another run made it meanwhile
        }
        if cache.len() == MAX_SPECIALIZATIONS {
            cache.pop_front();
        }
        cache.push_back((sizes.into(), graph.clone()));
        Ok(graph)
    }

    /// Every value's size for these input sizes: the size functions in topological order.
    fn propagate(&self, inputs: &[u32], sizes: &[usize]) -> Result<Vec<OutputSize>> {
        let mut value_sizes = self.nodes.value_sizes.clone();
        for (&node, &bytes) in inputs.iter().zip(sizes) {
            value_sizes[self.node_values(node).start as usize] = OutputSize::Bytes(bytes);
        }
        let as_usize = |s: OutputSize| s.bytes().unwrap_or(usize::MAX);
        for &node in &self.topo {
            let Some(f) = &self.nodes.size_fns[node as usize] else {
                continue;
            };
            let name = self.node_name(node);
            let ins: Vec<usize> = self
                .node_inputs(node)
                .iter()
                .map(|&v| as_usize(value_sizes[v as usize]))
                .collect();
            let values = self.node_values(node);
            let mut outs: Vec<usize> = values.clone().map(|v| as_usize(value_sizes[v as usize])).collect();
            let failed = |why: String| {
                Error::new(
                    ErrorKind::KernelFailed,
                    format!("the size function of node '{name}' {why}"),
                )
            };
            let overflow = |why: String| {
                Error::new(
                    ErrorKind::SizeOverflow,
                    format!("the size function of node '{name}' {why}"),
                )
            };
            match catch_unwind(AssertUnwindSafe(|| f(&ins, &mut outs))) {
                Ok(Ok(())) => {}
                Ok(Err(e)) => return Err(failed(format!("failed: {e}"))),
                Err(_) => {
                    return err(
                        ErrorKind::KernelPanicked,
                        format!("the size function of node '{name}' panicked"),
                    )
                }
            }
            let mut total = 0usize;
            for (k, (v, &bytes)) in values.zip(&outs).enumerate() {
                value_sizes[v as usize] = match bytes {
                    usize::MAX => {
                        if self.in_place(node).is_some_and(|(out, _)| out as usize == k) {
                            return Err(failed(format!(
                                "left output {k} to the kernel, but it may take over an input's buffer"
                            )));
                        }
                        OutputSize::Dynamic
                    }
                    b if b > MAX_VALUE_BYTES => {
                        return Err(overflow(format!(
                            "gave output {k} {b} bytes, more than one buffer can have"
                        )))
                    }
                    b => {
                        total = total.saturating_add(b);
                        OutputSize::Bytes(b)
                    }
                };
            }
            if total > MAX_VALUE_BYTES {
                return Err(overflow(format!(
                    "gave outputs adding up to more than {MAX_VALUE_BYTES} bytes"
                )));
            }
        }
        Ok(value_sizes)
    }

    /// This graph with other value sizes: the same structure and kernels, a new identity, and
    /// nothing learned or cached yet.
    fn with_sizes(&self, value_sizes: Vec<OutputSize>) -> Graph {
        let mut nodes = self.nodes.clone();
        nodes.value_sizes = value_sizes;
        let (static_bytes, node_lower_bound_bytes) = size_figures(&nodes, &self.input_values);
        let mut structure = self.structure;
        structure.static_bytes = static_bytes;
        structure.node_lower_bound_bytes = node_lower_bound_bytes;
        Graph {
            id: NEXT_GRAPH_ID.fetch_add(1, Ordering::Relaxed),
            nodes,
            input_values: self.input_values.clone(),
            value_node: self.value_node.clone(),
            consumers: self.consumers.clone(),
            is_output: self.is_output.clone(),
            graph_outputs: self.graph_outputs.clone(),
            graph_inputs: self.graph_inputs.clone(),
            succ_start: self.succ_start.clone(),
            succ: self.succ.clone(),
            topo: self.topo.clone(),
            release_tick: self.release_tick.clone(),
            topo_position: self.topo_position.clone(),
            structure,
            annexes: [OnceLock::new(), OnceLock::new()],
            lowest_live_order: OnceLock::new(),
            specializations: Specializations::default(),
            dynamic_inputs: Vec::new(),
        }
    }
}
