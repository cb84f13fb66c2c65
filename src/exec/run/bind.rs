//! Binding a run's graph inputs to caller memory, with a sentence for each way it can be wrong.

use std::sync::atomic::AtomicU32;

use crate::error::{err, ErrorKind, Result};
use crate::exec::run::InputBinding;
use crate::exec::state::{RunState, Slot};
use crate::graph::Graph;
use crate::kernel::Buffer;
use crate::tensor::{Tensor, ALIGNMENT, EMPTY_DATA};

/// The sizes `bindings` give the graph's inputs of dynamic size, in the order of
/// `Graph::dynamic_inputs` (the first binding of an input counts; `bind` reports a second).
pub(in crate::exec) fn dynamic_sizes(g: &Graph, bindings: &[InputBinding<'_>]) -> Result<Vec<usize>> {
    g.dynamic_inputs()
        .iter()
        .map(|&node| match bindings.iter().find(|b| b.value().node == node) {
            Some(b) => Ok(b.tensor().nbytes),
            None => err(
                ErrorKind::InputBinding,
                format!(
                    "graph input '{}' (node {node}) is not bound, and its size is the binding's",
                    g.node_name(node)
                ),
            ),
        })
        .collect()
}

impl RunState<'_> {
    /// Binds graph inputs to caller memory. Before any node runs, on the calling thread.
    pub(crate) fn bind(&mut self, bindings: &[InputBinding<'_>]) -> Result<()> {
        let g = self.graph;
        // A slot starts empty (see `exec::state::arrays`) and a binding fills it with a non-NULL pointer:
        // a filled one was bound by an earlier binding.
        let bound = |state: &mut Self, v: u32| !state.slot_mut(v).tensor.data.is_null();
        for (i, b) in bindings.iter().enumerate() {
            let (value, tensor) = (b.value(), *b.tensor());
            let node = value.node;
            if node as usize >= g.node_count() || !g.is_graph_input(node) || value.output != 0 {
                let what = match node as usize >= g.node_count() {
                    true => format!("value ({node}, {}), which does not exist", value.output),
                    false => format!(
                        "output {} of node '{}', which is not a graph input",
                        value.output,
                        g.node_name(node)
                    ),
                };
                return err(ErrorKind::InputBinding, format!("input binding {i} names {what}"));
            }
            let name = g.node_name(node);
            let v = g.node_values(node).start;
            if bound(self, v) {
                let first = bindings.iter().position(|b| b.value() == value).unwrap_or(i);
                return err(
                    ErrorKind::InputBinding,
                    format!("graph input '{name}' is bound twice (bindings {first} and {i})"),
                );
            }
            let declared = g.value_size(v).bytes().expect("graph inputs have a static size");
            if tensor.nbytes != declared {
                return err(
                    ErrorKind::InputBinding,
                    format!(
                        "graph input '{name}' is declared as {declared} bytes but bound to {} bytes",
                        tensor.nbytes
                    ),
                );
            }
            if tensor.nbytes == 0 {
                // An empty tensor: whatever the caller bound, NULL too, kernels see EMPTY_DATA.
                *self.slot_mut(v) = Slot {
                    refs: AtomicU32::new(self.initial_refs[v as usize]),
                    tensor: Tensor {
                        data: EMPTY_DATA,
                        ..tensor
                    },
                    buffer: Buffer::NONE,
                };
                continue;
            }
            if tensor.data.is_null() {
                return err(
                    ErrorKind::InputBinding,
                    format!("graph input '{name}' is bound to a NULL pointer"),
                );
            }
            if tensor.data as usize % ALIGNMENT != 0 {
                return err(
                    ErrorKind::InputBinding,
                    format!(
                        "graph input '{name}' is bound to {:p}, which is not {ALIGNMENT}-byte aligned",
                        tensor.data
                    ),
                );
            }
            // Its readers' count, as a producer sets its outputs' (`RunState::refs`).
            *self.slot_mut(v) = Slot {
                refs: AtomicU32::new(self.initial_refs[v as usize]),
                tensor,
                buffer: Buffer::NONE,
            };
        }
        if let Some(&node) = g.graph_inputs().iter().find(|&&n| !bound(self, g.node_values(n).start)) {
            return err(
                ErrorKind::InputBinding,
                format!("graph input '{}' (node {node}) is not bound", g.node_name(node)),
            );
        }
        Ok(())
    }
}
