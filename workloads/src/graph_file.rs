//! The graph file format of `workloads/graphs/README.md`: nodes in topological order, values
//! named by strings, sizes in bytes.

use std::collections::HashMap;
use std::path::Path;
use std::sync::Arc;

use graphsched::{Graph, GraphBuilder, InputBinding, Kernel, NodeDesc, ValueRef};
use serde::Deserialize;

#[derive(Debug, Clone, Deserialize)]
pub struct GraphFile {
    pub name: String,
    #[serde(default)]
    pub source: String,
    pub inputs: Vec<ValueSpec>,
    pub outputs: Vec<String>,
    pub nodes: Vec<NodeSpec>,
}

#[derive(Debug, Clone, Deserialize)]
pub struct ValueSpec {
    pub name: String,
    pub bytes: usize,
}

#[derive(Debug, Clone, Deserialize)]
pub struct NodeSpec {
    pub name: String,
    pub op: String,
    pub inputs: Vec<String>,
    pub outputs: Vec<ValueSpec>,
    /// Expected duration; files from real models have none and get the cost model's.
    #[serde(default)]
    pub estimate_ns: Option<u64>,
    /// `(output, input)` the node may compute in place (see `NodeDesc::in_place`).
    #[serde(default)]
    pub in_place: Option<(u32, u32)>,
}

/// Cost model for graphs that carry no durations: a node costs 1 us plus 1 ns per byte of its
/// inputs and outputs. The measuring kernels read and write every byte at about 2 bytes per ns
/// here and then spin to the estimate, so real durations follow it (at 8 bytes per ns, the
/// first model, real runs took 3 to 4 times their estimates).
pub fn estimate_ns(input_bytes: usize, output_bytes: usize) -> u64 {
    1_000 + (input_bytes + output_bytes) as u64
}

/// What a kernel factory is told about the node it makes a kernel for.
pub struct NodeSite<'a> {
    pub spec: &'a NodeSpec,
    /// The node's inputs as graph values, in slot order.
    pub inputs: &'a [ValueRef],
    pub estimate_ns: u64,
}

/// A finalized graph built from a file, with its inputs to bind.
pub struct LoadedGraph {
    pub graph: Arc<Graph>,
    /// Each graph input and its size.
    pub inputs: Vec<(ValueRef, usize)>,
}

impl GraphFile {
    pub fn load(path: &Path) -> Result<GraphFile, String> {
        let text = std::fs::read_to_string(path).map_err(|e| format!("cannot read {}: {e}", path.display()))?;
        Self::parse(&text).map_err(|e| format!("{}: {e}", path.display()))
    }

    pub fn parse(text: &str) -> Result<GraphFile, String> {
        serde_json::from_str(text).map_err(|e| format!("not a graph file: {e}"))
    }

    /// Outputs per node in the order `build` adds them (each graph input is a one-output node):
    /// what [`Ledger::new`](crate::Ledger::new) needs before the graph exists.
    pub fn value_counts(&self) -> Vec<u32> {
        let inputs = self.inputs.iter().map(|_| 1);
        inputs
            .chain(self.nodes.iter().map(|n| n.outputs.len() as u32))
            .collect()
    }

    /// The file-order lower bound: at each node, the bytes of every value produced and still
    /// awaiting a consumer, plus the node's inputs and outputs. Graph inputs, which live in the
    /// caller's memory, are left out; graph outputs count until the end.
    pub fn max_live_bytes(&self) -> u64 {
        let mut remaining: HashMap<&str, usize> = HashMap::new();
        for n in &self.nodes {
            for i in &n.inputs {
                *remaining.entry(i.as_str()).or_default() += 1;
            }
        }
        for o in &self.outputs {
            *remaining.entry(o.as_str()).or_default() += 1; // held by the result
        }
        let mut size: HashMap<&str, u64> = HashMap::new();
        let (mut live, mut peak) = (0u64, 0u64);
        for n in &self.nodes {
            for o in &n.outputs {
                size.insert(&o.name, o.bytes as u64);
                live += o.bytes as u64;
            }
            peak = peak.max(live);
            for i in &n.inputs {
                let Some(&bytes) = size.get(i.as_str()) else { continue }; // a graph input
                let r = remaining.get_mut(i.as_str()).expect("counted above");
                *r -= 1;
                if *r == 0 {
                    live -= bytes;
                }
            }
            for o in &n.outputs {
                if !remaining.contains_key(o.name.as_str()) {
                    live -= o.bytes as u64;
                }
            }
        }
        peak
    }

    /// Declares every elementwise node (activations, arithmetic, casts: ops that map each
    /// element of their first input to one of their output) in place on that input, when the
    /// two have the same size. Graph files do not say; engines do, for such ops.
    pub fn with_elementwise_in_place(mut self) -> Self {
        const ELEMENTWISE: [&str; 16] = [
            "Relu",
            "Sigmoid",
            "Tanh",
            "Add",
            "Sub",
            "Mul",
            "Div",
            "Clip",
            "HardSigmoid",
            "HardSwish",
            "LeakyRelu",
            "Cast",
            "Exp",
            "Sqrt",
            "Neg",
            "Softmax",
        ];
        let mut sizes: HashMap<String, usize> = self.inputs.iter().map(|i| (i.name.clone(), i.bytes)).collect();
        for n in &mut self.nodes {
            let first = n.inputs.first().and_then(|i| sizes.get(i)).copied();
            if ELEMENTWISE.contains(&n.op.as_str()) && n.outputs.len() == 1 && first == Some(n.outputs[0].bytes) {
                n.in_place = Some((0, 0));
            }
            for o in &n.outputs {
                sizes.insert(o.name.clone(), o.bytes);
            }
        }
        self
    }

    /// Builds and finalizes the graph, in file order, with a kernel per node from `kernel`.
    pub fn build(&self, kernel: &mut dyn FnMut(&NodeSite<'_>) -> Kernel) -> Result<LoadedGraph, String> {
        let mut b = GraphBuilder::new();
        let mut values: HashMap<&str, (ValueRef, usize)> = HashMap::new();
        let mut inputs = Vec::new();
        for i in &self.inputs {
            let v = b.add_input(&i.name, i.bytes).map_err(|e| e.to_string())?;
            values.insert(&i.name, (v, i.bytes));
            inputs.push((v, i.bytes));
        }
        for n in &self.nodes {
            let mut refs = Vec::with_capacity(n.inputs.len());
            let mut in_bytes = 0;
            for i in &n.inputs {
                let &(v, bytes) = values
                    .get(i.as_str())
                    .ok_or_else(|| format!("node '{}' reads '{i}', which no earlier node writes", n.name))?;
                refs.push(v);
                in_bytes += bytes;
            }
            let out_bytes = n.outputs.iter().map(|o| o.bytes).sum();
            let estimate_ns = n.estimate_ns.unwrap_or_else(|| estimate_ns(in_bytes, out_bytes));
            let mut desc = NodeDesc::new(
                &n.name,
                &n.op,
                kernel(&NodeSite {
                    spec: n,
                    inputs: &refs,
                    estimate_ns,
                }),
            )
            .estimate_ns(estimate_ns);
            desc.in_place = n.in_place;
            for &v in &refs {
                desc = desc.input(v);
            }
            for o in &n.outputs {
                desc = desc.output(o.bytes);
            }
            let id = b.add_node(desc).map_err(|e| e.to_string())?;
            for (k, o) in n.outputs.iter().enumerate() {
                values.insert(&o.name, (ValueRef::new(id, k as u32), o.bytes));
            }
        }
        for o in &self.outputs {
            let &(v, _) = values
                .get(o.as_str())
                .ok_or_else(|| format!("graph output '{o}' is not written by any node"))?;
            b.mark_output(v).map_err(|e| e.to_string())?;
        }
        let graph = Arc::new(b.finalize().map_err(|e| e.to_string())?);
        Ok(LoadedGraph { graph, inputs })
    }
}

/// Caller memory for graph inputs: 16-byte aligned, filled with a pattern.
pub struct InputBuffers {
    buffers: Vec<(ValueRef, Vec<u128>, usize)>,
}

impl InputBuffers {
    pub fn new(inputs: &[(ValueRef, usize)], seed: u64) -> Self {
        let buffers = inputs
            .iter()
            .map(|&(v, bytes)| {
                let mut words = vec![0u128; bytes.div_ceil(16)];
                let mut x = seed ^ (v.node as u64).wrapping_mul(0x9E37_79B9_7F4A_7C15) | 1;
                for w in &mut words {
                    x ^= x << 13;
                    x ^= x >> 7;
                    x ^= x << 17;
                    *w = (x as u128) << 64 | x.rotate_left(17) as u128;
                }
                (v, words, bytes)
            })
            .collect();
        InputBuffers { buffers }
    }

    pub fn bindings(&self) -> Vec<InputBinding<'_>> {
        self.bytes().map(|(v, data)| InputBinding::new(v, data)).collect()
    }

    pub fn bytes(&self) -> impl Iterator<Item = (ValueRef, &[u8])> {
        self.buffers.iter().map(|(v, words, bytes)| {
            // SAFETY: the vector holds at least `bytes` bytes.
            (*v, unsafe {
                std::slice::from_raw_parts(words.as_ptr() as *const u8, *bytes)
            })
        })
    }
}
