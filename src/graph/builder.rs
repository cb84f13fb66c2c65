//! Collects nodes. Checks what can be checked at once (names, sizes, counts); references between
//! nodes are resolved by `finalize`, since an input may name a node added later.

use std::collections::HashMap;
use std::ffi::{CStr, CString};

use super::compile::compile;
use super::compiled::Graph;
use super::nodes::NodeTable;
use super::{Kernel, OutputSize, ValueRef, MAX_NODE_PORTS, MAX_VALUE_BYTES};
use crate::error::{err, ErrorKind, Result};
use crate::kernel::SizeFn;

/// Everything that describes one node to [`GraphBuilder::add_node`]. Built with [`NodeDesc::new`]
/// and the chained setters; the builder checks it whole.
pub struct NodeDesc {
    /// Unique among the graph's nodes, non-empty, without NUL bytes; messages name the node by it.
    pub name: String,
    /// Operator type, e.g. "Conv", without NUL bytes: nodes of one type share learned durations.
    pub op_type: String,
    /// Called once per run of the node, on whichever thread runs it; the graph owns it and runs
    /// share it, hence `Send + Sync`.
    pub kernel: Kernel,
    /// The values the node reads, one per input slot (a value may fill two slots); they may name
    /// nodes added later.
    pub inputs: Vec<ValueRef>,
    /// One size per output; at least one output.
    pub outputs: Vec<OutputSize>,
    /// Expected duration in nanoseconds; `None` uses the learned or default estimate.
    pub estimate_ns: Option<u64>,
    /// Clear every output buffer before the kernel runs.
    pub zero_output: bool,
    /// `(output, input)`: the output may take over the input's buffer when this node is the
    /// input's last reader and the buffer is large enough (the kernel can tell, see
    /// `KernelCtx::output_in_place`). Graph inputs are never taken over.
    pub in_place: Option<(u32, u32)>,
    /// How the output sizes follow the input sizes (see [`SizeFn`]): for graphs whose inputs
    /// change size from run to run ([`GraphBuilder::add_dynamic_input`]). `None`: the outputs
    /// keep their declared sizes whatever the inputs.
    pub sizes: Option<SizeFn>,
}

impl NodeDesc {
    /// A node with no inputs, no outputs yet (add at least one), no estimate and no flags.
    pub fn new(name: impl Into<String>, op_type: impl Into<String>, kernel: Kernel) -> Self {
        NodeDesc {
            name: name.into(),
            op_type: op_type.into(),
            kernel,
            inputs: Vec::new(),
            outputs: Vec::new(),
            estimate_ns: None,
            zero_output: false,
            in_place: None,
            sizes: None,
        }
    }

    /// Sets the size function: output sizes from input sizes, for each new set of input sizes.
    pub fn sizes(mut self, f: SizeFn) -> Self {
        self.sizes = Some(f);
        self
    }

    /// Lets output `output` take over input `input`'s buffer (see [`NodeDesc::in_place`]).
    pub fn in_place(mut self, output: u32, input: u32) -> Self {
        self.in_place = Some((output, input));
        self
    }

    /// Appends an input slot reading `value`.
    pub fn input(mut self, value: ValueRef) -> Self {
        self.inputs.push(value);
        self
    }

    /// Appends an output of `nbytes` bytes (at least 1).
    pub fn output(mut self, nbytes: usize) -> Self {
        self.outputs.push(OutputSize::Bytes(nbytes));
        self
    }

    /// Appends an output the kernel allocates with its real size ([`OutputSize::Dynamic`]).
    pub fn dynamic_output(mut self) -> Self {
        self.outputs.push(OutputSize::Dynamic);
        self
    }

    /// Sets the expected duration, in nanoseconds; it overrides what runs learn for the op type.
    pub fn estimate_ns(mut self, ns: u64) -> Self {
        self.estimate_ns = Some(ns);
        self
    }

    /// Asks for every output buffer to be cleared before the kernel runs.
    pub fn zero_output(mut self) -> Self {
        self.zero_output = true;
        self
    }
}

/// The mutable graph. Storage is flat (one array per field, CSR offsets for the variable-length
/// ones) so that a million nodes cost a handful of allocations and `finalize` walks arrays.
pub struct GraphBuilder {
    pub(super) nodes: NodeTable,
    pub(super) op_by_name: HashMap<String, u32>,
    /// Inputs of node `i` are `inputs[input_start[i]..input_start[i + 1]]` (of `nodes`).
    pub(super) inputs: Vec<ValueRef>,
    pub(super) graph_outputs: Vec<ValueRef>,
    finalized: bool,
}

impl Default for GraphBuilder {
    /// The same as [`GraphBuilder::new`]: the CSR offset arrays start with their sentinel 0.
    fn default() -> Self {
        GraphBuilder::new()
    }
}

impl GraphBuilder {
    /// An empty builder. Not thread-safe to share while adding (`&mut self`); the [`Graph`] it
    /// finalizes is.
    pub fn new() -> Self {
        GraphBuilder {
            nodes: NodeTable::default(),
            op_by_name: HashMap::new(),
            inputs: Vec::new(),
            graph_outputs: Vec::new(),
            finalized: false,
        }
    }

    /// Records that the kernel of `node` calls the C function `c` and nothing more, so that a
    /// run may call `c` without the kernel's closure (the C API's nodes).
    pub(crate) fn set_c_kernel(&mut self, node: u32, c: crate::kernel::CKernel) {
        self.nodes.c_kernels[node as usize] = Some(c);
    }

    /// Number of nodes added so far, graph inputs included; also the id the next node gets.
    pub fn node_count(&self) -> u32 {
        self.nodes.names.len() as u32
    }

    /// The id of the node named `name`, if one was added.
    pub fn find_node(&self, name: &str) -> Option<u32> {
        self.nodes.by_name.get(name).copied()
    }

    /// The name of node `node` as a C string, borrowed from the builder.
    pub fn node_name_c(&self, node: u32) -> Option<&CStr> {
        self.nodes.names.get(node as usize).map(CString::as_c_str)
    }

    /// Whether [`finalize`](Self::finalize) has succeeded: the builder then refuses changes.
    pub fn is_finalized(&self) -> bool {
        self.finalized
    }

    /// Adds a graph input of `nbytes` bytes, bound to caller memory at run time; its value is output 0.
    pub fn add_input(&mut self, name: &str, nbytes: usize) -> Result<ValueRef> {
        self.check_open()?;
        let name = self.check_name(name, "graph input")?;
        check_size(nbytes, &format!("graph input '{}'", name.to_string_lossy()))?;
        let id = self.push_node(name, u32::MAX, None, None, false, &[], &[OutputSize::Bytes(nbytes)])?;
        Ok(ValueRef::new(id, 0))
    }

    /// Adds a graph input whose size each run's binding gives. Nodes whose output sizes follow
    /// it say how with a size function ([`NodeDesc::sizes`]); a run with input sizes not seen
    /// before computes every size before any kernel runs, and runs with sizes seen before reuse
    /// that work (`Graph::specialize`).
    pub fn add_dynamic_input(&mut self, name: &str) -> Result<ValueRef> {
        self.check_open()?;
        let name = self.check_name(name, "graph input")?;
        let id = self.push_node(name, u32::MAX, None, None, false, &[], &[OutputSize::Dynamic])?;
        Ok(ValueRef::new(id, 0))
    }

    /// Adds a node and returns its id.
    pub fn add_node(&mut self, desc: NodeDesc) -> Result<u32> {
        self.check_open()?;
        let name = self.check_name(&desc.name, "node")?;
        let shown = desc.name.as_str();
        if desc.outputs.is_empty() {
            return err(
                ErrorKind::InvalidArgument,
                format!("node '{shown}' has no outputs; every node needs at least one"),
            );
        }
        if desc.outputs.len() > MAX_NODE_PORTS || desc.inputs.len() > MAX_NODE_PORTS {
            return err(
                ErrorKind::InvalidArgument,
                format!(
                    "node '{shown}' has {} inputs and {} outputs; at most {MAX_NODE_PORTS} of each are allowed",
                    desc.inputs.len(),
                    desc.outputs.len()
                ),
            );
        }
        let mut total: usize = 0;
        for (k, size) in desc.outputs.iter().enumerate() {
            if let OutputSize::Bytes(n) = *size {
                check_size(n, &format!("output {k} of node '{shown}'"))?;
                total = total.saturating_add(n);
            }
        }
        if total > MAX_VALUE_BYTES {
            return err(
                ErrorKind::SizeOverflow,
                format!("the outputs of node '{shown}' add up to more than {MAX_VALUE_BYTES} bytes"),
            );
        }
        if desc.op_type.contains('\0') {
            return err(
                ErrorKind::InvalidArgument,
                format!("op type of node '{shown}' contains a NUL byte"),
            );
        }
        if let Some((out, input)) = desc.in_place {
            let fits = (out as usize) < desc.outputs.len() && (input as usize) < desc.inputs.len();
            if !fits || desc.outputs[out as usize] == OutputSize::Dynamic {
                return err(
                    ErrorKind::InvalidArgument,
                    format!(
                        "node '{shown}' lets output {out} take over input {input}, but it has {} inputs and {} outputs \
                         (and the output must have a static size)",
                        desc.inputs.len(),
                        desc.outputs.len()
                    ),
                );
            }
        }
        let op = self.intern_op(&desc.op_type);
        let in_place = desc.in_place.map_or(u32::MAX, |(o, i)| o << 16 | i);
        let id = self.push_node(
            name,
            op,
            Some(desc.kernel),
            desc.estimate_ns,
            desc.zero_output,
            &desc.inputs,
            &desc.outputs,
        )?;
        *self.nodes.in_place.last_mut().expect("just pushed") = in_place;
        *self.nodes.size_fns.last_mut().expect("just pushed") = desc.sizes.map(std::sync::Arc::from);
        Ok(id)
    }

    /// Marks a value as a graph output: it survives the run and is handed to the caller.
    /// Checked by `finalize`, so it may name a node not added yet. Marking twice is harmless.
    pub fn mark_output(&mut self, value: ValueRef) -> Result<()> {
        self.check_open()?;
        self.graph_outputs.push(value);
        Ok(())
    }

    /// Validates and analyses the graph. On success the builder is spent: further changes return
    /// [`ErrorKind::Finalized`]. On failure nothing changes, so the caller may add what was missing.
    pub fn finalize(&mut self) -> Result<Graph> {
        self.check_open()?;
        let graph = compile(self)?;
        self.finalized = true;
        Ok(graph)
    }

    fn check_open(&self) -> Result<()> {
        if self.finalized {
            return err(ErrorKind::Finalized, "the graph is finalized and can no longer change");
        }
        Ok(())
    }

    fn check_name(&self, name: &str, what: &str) -> Result<CString> {
        if name.is_empty() {
            return err(
                ErrorKind::EmptyName,
                format!("a {what} was given an empty name (node id {})", self.node_count()),
            );
        }
        if let Some(&other) = self.nodes.by_name.get(name) {
            return err(
                ErrorKind::DuplicateName,
                format!("{what} name '{name}' is already used by node {other}"),
            );
        }
        if self.nodes.names.len() >= u32::MAX as usize - 1 {
            return err(
                ErrorKind::SizeOverflow,
                format!("cannot add {what} '{name}': the graph already has the most nodes allowed"),
            );
        }
        CString::new(name).or_else(|_| {
            err(
                ErrorKind::InvalidArgument,
                format!("{what} name '{}' contains a NUL byte", name.escape_default()),
            )
        })
    }

    fn intern_op(&mut self, op_type: &str) -> u32 {
        if let Some(&id) = self.op_by_name.get(op_type) {
            return id;
        }
        let id = self.nodes.op_types.len() as u32;
        self.nodes
            .op_types
            .push(CString::new(op_type).expect("checked for NUL by the caller"));
        self.op_by_name.insert(op_type.to_owned(), id);
        id
    }

    #[allow(clippy::too_many_arguments)]
    fn push_node(
        &mut self,
        name: CString,
        op: u32,
        kernel: Option<Kernel>,
        estimate_ns: Option<u64>,
        zero_output: bool,
        inputs: &[ValueRef],
        outputs: &[OutputSize],
    ) -> Result<u32> {
        let id = self.node_count();
        let values = self.nodes.value_sizes.len() + outputs.len();
        let edges = self.inputs.len() + inputs.len();
        if values > u32::MAX as usize || edges > u32::MAX as usize {
            return err(
                ErrorKind::SizeOverflow,
                format!(
                    "cannot add node '{}': the graph would exceed 2^32 values or edges",
                    name.to_string_lossy()
                ),
            );
        }
        self.nodes
            .by_name
            .insert(name.to_str().expect("names come from &str").to_owned(), id);
        self.nodes.names.push(name);
        self.nodes.op_of.push(op);
        self.nodes.kernels.push(kernel.map(std::sync::Arc::from));
        self.nodes.c_kernels.push(None);
        self.nodes.size_fns.push(None);
        self.nodes.estimate_ns.push(estimate_ns);
        self.nodes.zero_output.push(zero_output);
        self.nodes.in_place.push(u32::MAX);
        self.inputs.extend_from_slice(inputs);
        self.nodes.input_start.push(edges as u32);
        self.nodes.value_sizes.extend_from_slice(outputs);
        self.nodes.value_start.push(values as u32);
        Ok(id)
    }
}

fn check_size(nbytes: usize, what: &str) -> Result<()> {
    if nbytes > MAX_VALUE_BYTES {
        return err(
            ErrorKind::SizeOverflow,
            format!("{what} has size {nbytes}, more than the {MAX_VALUE_BYTES} bytes one buffer can have"),
        );
    }
    Ok(())
}
