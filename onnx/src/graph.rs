//! A prepared ONNX model as a graphsched graph, built through the C ABI an engine links against:
//! one graphsched node per ONNX node, whose kernel is a C callback that runs the node's own
//! ONNX Runtime session on tensors wrapping graphsched's buffers (zero copy both ways).

use crate::kernel::{onnx_kernel, NodeKernel};
use crate::manifest::{Manifest, TensorInfo};
use crate::ort_api::{Runtime, SessionConfig};
use graphsched::ffi::*;
use graphsched::{GraphInfo, SimResult, ValueRef};
use std::collections::HashMap;
use std::ffi::{c_void, CStr, CString};

/// A graph output: where graphsched keeps it, and its shape.
pub struct Output {
    /// The graphsched value.
    pub value: ValueRef,
    /// Shape and element type.
    pub info: TensorInfo,
}

/// The finalized graph and the kernels its nodes call (which must outlive it).
pub struct OnnxGraph<'r> {
    graph: *mut gs_graph,
    /// The graph inputs' values, in the manifest's order.
    pub inputs: Vec<ValueRef>,
    /// The graph outputs, in the model's order.
    pub outputs: Vec<Output>,
    /// Operator nodes.
    pub nodes: usize,
    /// graphsched's node id of each of the manifest's nodes, in its order (the graph inputs
    /// come first, as many as the model has).
    pub node_ids: Vec<u32>,
    // Boxed: each node's `user_data` points at its kernel, which must not move as the Vec grows.
    #[allow(clippy::vec_box)]
    _kernels: Vec<Box<NodeKernel<'r>>>,
}

impl Drop for OnnxGraph<'_> {
    fn drop(&mut self) {
        // SAFETY: made by gs_graph_new, freed once, before the kernels it points at.
        unsafe { gs_graph_free(self.graph) }
    }
}

/// How much inter-op parallelism the model offers, by the simulator.
#[derive(Clone, Debug, serde::Serialize)]
pub struct Parallelism {
    /// Sum of the nodes' learned durations.
    pub work_ns: u64,
    /// Longest path of learned durations.
    pub critical_path_ns: u64,
    /// Simulated makespan at each thread count.
    pub makespans: Vec<(usize, u64)>,
}

/// `Ok` for GS_OK, else the status name and the library's sentence.
pub fn gs_check(status: gs_status, what: &str) -> Result<(), String> {
    if status == gs_status::GS_OK {
        return Ok(());
    }
    // SAFETY: both return static or thread-local NUL-terminated strings.
    let (name, message) = unsafe {
        (
            CStr::from_ptr(gs_status_name(status as i32)),
            CStr::from_ptr(gs_last_error_message()),
        )
    };
    Err(format!(
        "{what}: {} ({})",
        message.to_string_lossy(),
        name.to_string_lossy()
    ))
}

impl<'r> OnnxGraph<'r> {
    /// Builds and finalizes the graph: one session per node, made as `config` says.
    pub fn build(runtime: &'r Runtime, manifest: &Manifest, config: SessionConfig) -> Result<OnnxGraph<'r>, String> {
        let tensors = manifest.tensors();
        let mut graph = std::ptr::null_mut();
        // SAFETY: valid out pointer.
        gs_check(unsafe { gs_graph_new(&mut graph) }, "gs_graph_new")?;
        let mut built = OnnxGraph {
            graph,
            inputs: Vec::new(),
            outputs: Vec::new(),
            nodes: 0,
            node_ids: Vec::new(),
            _kernels: Vec::new(),
        };
        let mut producers: HashMap<&str, ValueRef> = HashMap::new();
        for input in &manifest.inputs {
            let name = CString::new(input.name.as_str()).map_err(|_| "a NUL in a name")?;
            let mut value = ValueRef::new(0, 0);
            // SAFETY: live graph, NUL-terminated name, valid out pointer.
            let status = unsafe { gs_graph_add_input(graph, name.as_ptr(), input.bytes(), &mut value) };
            gs_check(status, "gs_graph_add_input")?;
            producers.insert(input.name.as_str(), value);
            built.inputs.push(value);
        }
        for node in &manifest.nodes {
            let read = distinct_reads(node, &tensors);
            let kernel = Box::new(NodeKernel::new(
                runtime,
                runtime.session(&manifest.dir.join(&node.file), config)?,
                read.iter().map(|n| tensors[n.as_str()].clone()).collect(),
                node.outputs.iter().map(|n| tensors[n.as_str()].clone()).collect(),
            ));
            let inputs: Vec<ValueRef> = read
                .iter()
                .map(|n| {
                    producers
                        .get(n.as_str())
                        .copied()
                        .ok_or(format!("node {} reads {n} before it is made", node.name))
                })
                .collect::<Result<_, _>>()?;
            let sizes: Vec<usize> = kernel.outputs().iter().map(TensorInfo::bytes).collect();
            let name = CString::new(node.name.as_str()).map_err(|_| "a NUL in a name")?;
            // graphsched learns durations per op type: two Convs of one shape may still differ
            // (depthwise or not, kernel size), so each node learns under a type of its own.
            let op = CString::new(node_type(&node.op, &node.name)).map_err(|_| "a NUL in an op type")?;
            let desc = gs_node_desc {
                name: name.as_ptr(),
                op_type: op.as_ptr(),
                kernel: Some(onnx_kernel),
                user_data: &*kernel as *const NodeKernel<'_> as *mut c_void,
                inputs: inputs.as_ptr(),
                num_inputs: inputs.len() as u32,
                num_outputs: sizes.len() as u32,
                output_sizes: sizes.as_ptr(),
                ..Default::default()
            };
            let mut id = 0;
            // SAFETY: live graph; the descriptor's arrays and strings live for the call, and
            // `user_data` (the boxed kernel) for the graph's life.
            gs_check(unsafe { gs_graph_add_node(graph, &desc, &mut id) }, "gs_graph_add_node")?;
            for (i, out) in node.outputs.iter().enumerate() {
                producers.insert(out, ValueRef::new(id, i as u32));
            }
            built._kernels.push(kernel);
            built.nodes += 1;
            built.node_ids.push(id);
        }
        for name in &manifest.outputs {
            let value = *producers
                .get(name.as_str())
                .ok_or(format!("no node makes the output {name}"))?;
            // SAFETY: live graph.
            gs_check(unsafe { gs_graph_mark_output(graph, value) }, "gs_graph_mark_output")?;
            built.outputs.push(Output {
                value,
                info: tensors[name.as_str()].clone(),
            });
        }
        // SAFETY: live graph.
        gs_check(unsafe { gs_graph_finalize(graph) }, "gs_graph_finalize")?;
        Ok(built)
    }

    /// What the simulator predicts from the durations runs have taught the graph: work, critical
    /// path and makespan on each of `threads` (policy and window as runs use them).
    pub fn simulate(&self, threads: &[usize]) -> Result<Parallelism, String> {
        let mut info = GraphInfo::default();
        // SAFETY: a finalized graph and a writable out pointer.
        gs_check(unsafe { gs_graph_get_info(self.graph, &mut info) }, "gs_graph_get_info")?;
        let mut makespans = Vec::new();
        for &t in threads {
            let options = gs_sim_options {
                threads: t as u32,
                policy: GS_POLICY_DEFAULT,
                window: 0,
                memory_limit_bytes: 0,
            };
            let mut result = SimResult::default();
            // SAFETY: as above, and readable options.
            gs_check(unsafe { gs_simulate(self.graph, &options, &mut result) }, "gs_simulate")?;
            makespans.push((t, result.makespan_ns));
        }
        Ok(Parallelism {
            work_ns: info.total_work_ns,
            critical_path_ns: info.critical_path_ns,
            makespans,
        })
    }

    /// The C handle, for runs and plans.
    pub fn handle(&self) -> *const gs_graph {
        self.graph
    }
}

/// `Conv conv2d_3`: the op type a node learns its duration under, its own.
fn node_type(op: &str, name: &str) -> String {
    format!("{op} {name}")
}

/// The values a node reads from other nodes, once each, in the node's order: what its
/// single-node model takes as inputs (weights live inside it; absent optional inputs are "").
pub(crate) fn distinct_reads(node: &crate::manifest::NodeInfo, tensors: &HashMap<&str, &TensorInfo>) -> Vec<String> {
    let mut read: Vec<String> = Vec::new();
    for name in &node.inputs {
        if !name.is_empty() && tensors.contains_key(name.as_str()) && !read.contains(name) {
            read.push(name.clone());
        }
    }
    read
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::manifest::NodeInfo;

    fn tensor(name: &str, shape: &[i64]) -> TensorInfo {
        TensorInfo {
            name: name.into(),
            elem_type: 1,
            elem_bytes: 4,
            shape: shape.to_vec(),
        }
    }

    #[test]
    fn a_node_reads_each_produced_value_once_and_neither_weights_nor_absent_inputs() {
        let (a, b) = (tensor("a", &[2]), tensor("b", &[2]));
        let tensors: HashMap<&str, &TensorInfo> = HashMap::from([("a", &a), ("b", &b)]);
        let node = NodeInfo {
            name: "n".into(),
            op: "Add".into(),
            file: String::new(),
            inputs: vec!["b".into(), "weight".into(), "b".into(), "".into(), "a".into()],
            outputs: vec!["c".into()],
        };
        assert_eq!(distinct_reads(&node, &tensors), ["b", "a"]);
    }

    #[test]
    fn each_node_learns_under_a_type_of_its_own() {
        assert_eq!(node_type("Conv", "conv1"), "Conv conv1");
        assert_ne!(
            node_type("Conv", "conv1"),
            node_type("Conv", "conv2"),
            "same op, same shapes, other weights"
        );
    }
}
