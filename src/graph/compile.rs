//! `finalize`: resolve references, order the nodes, and compute the tables and figures runs,
//! plans and the scheduler read. Every pass is linear in nodes + edges.

use std::sync::atomic::Ordering;
use std::sync::OnceLock;

use super::builder::GraphBuilder;
use super::compiled::{Graph, GraphInfo, NEXT_GRAPH_ID};
use super::nodes::NodeTable;
use super::order::{shorten, topological_order};
use super::{OutputSize, ValueRef};
use crate::error::{err, ErrorKind, Result};

pub(super) fn compile(b: &mut GraphBuilder) -> Result<Graph> {
    let n = b.nodes.names.len();
    let name = |i: u32| b.nodes.names[i as usize].to_string_lossy().into_owned();
    let values_of = |node: u32| b.nodes.value_start[node as usize]..b.nodes.value_start[node as usize + 1];

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
        let slots = b.nodes.input_start[node as usize] as usize..b.nodes.input_start[node as usize + 1] as usize;
        for (k, &v) in b.inputs[slots].iter().enumerate() {
            input_values.push(resolve(v, &|| format!("input {k} of node '{}'", name(node)))?);
        }
    }
    let num_values = b.nodes.value_sizes.len();
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
    let topo = topological_order(n, &b.nodes.input_start, &producer).map_err(|cycle| {
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
        for slot in b.nodes.input_start[node] as usize..b.nodes.input_start[node + 1] as usize {
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
    let inputs_of =
        |node: usize| &input_values[b.nodes.input_start[node] as usize..b.nodes.input_start[node + 1] as usize];
    let mut release_tick: Vec<u32> = value_node.iter().map(|&p| position[p as usize]).collect();
    for (node, &at) in position.iter().enumerate() {
        for &v in inputs_of(node) {
            release_tick[v as usize] = release_tick[v as usize].max(at);
        }
    }
    for (v, tick) in release_tick.iter_mut().enumerate() {
        if is_output[v] {
            *tick = u32::MAX;
        }
    }

    let (static_bytes, node_lower_bound_bytes) = size_figures(&b.nodes, &input_values);

    let graph_inputs: Vec<u32> = (0..n as u32)
        .filter(|&i| b.nodes.kernels[i as usize].is_none())
        .collect();
    let dynamic_inputs: Vec<u32> = graph_inputs
        .iter()
        .copied()
        .filter(|&i| b.nodes.value_sizes[b.nodes.value_start[i as usize] as usize] == OutputSize::Dynamic)
        .collect();
    let info = GraphInfo {
        num_nodes: n as u64,
        num_inputs: graph_inputs.len() as u64,
        num_outputs: graph_outputs.len() as u64,
        num_values: num_values as u64,
        num_edges: input_values.len() as u64,
        critical_path_nodes: 0,
        critical_path_ns: 0,
        total_work_ns: 0,
        static_bytes,
        node_lower_bound_bytes,
    };

    // Validation is over: take the builder's storage without copying it.
    Ok(Graph {
        id: NEXT_GRAPH_ID.fetch_add(1, Ordering::Relaxed),
        nodes: std::mem::take(&mut b.nodes),
        input_values,
        value_node,
        consumers,
        is_output,
        graph_outputs,
        graph_inputs,
        succ_start,
        succ,
        topo,
        topo_position: position,
        release_tick,
        structure: info,
        annexes: [OnceLock::new(), OnceLock::new()],
        lowest_live_order: OnceLock::new(),
        specializations: Default::default(),
        dynamic_inputs,
    })
}

/// The memory figures of [`GraphInfo`]: the static total, and the largest single node (its
/// distinct inputs plus its outputs).
pub(super) fn size_figures(nodes: &NodeTable, input_values: &[u32]) -> (u64, u64) {
    let n = nodes.names.len();
    let num_values = nodes.value_sizes.len();
    let size = |v: u32| nodes.value_sizes[v as usize].bytes().unwrap_or(0) as u64;
    let static_bytes = (0..num_values as u32).map(size).fold(0u64, u64::saturating_add);
    let mut seen_by = vec![u32::MAX; num_values];
    let mut node_lower_bound_bytes = 0u64;
    for node in 0..n {
        let values = nodes.value_start[node]..nodes.value_start[node + 1];
        let mut bytes = values.map(size).fold(0u64, u64::saturating_add);
        let slots = nodes.input_start[node] as usize..nodes.input_start[node + 1] as usize;
        for &v in &input_values[slots] {
            if seen_by[v as usize] != node as u32 {
                seen_by[v as usize] = node as u32;
                bytes = bytes.saturating_add(size(v));
            }
        }
        node_lower_bound_bytes = node_lower_bound_bytes.max(bytes);
    }
    (static_bytes, node_lower_bound_bytes)
}
