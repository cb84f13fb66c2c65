//! Memory along an order: when each value is live, how many bytes are live at each step, and a
//! topological order chosen to keep that low. The static planner (`plan`) places values by these
//! lifetimes; memory admission (`sched::admission`) keeps a run within its limit by them.
//!
//! A run holds a value from the start of its producer (its bytes are reserved then) until its
//! last reader has finished; a value nobody reads goes as soon as its producer finishes; graph
//! outputs stay until the caller frees the result; graph inputs live in caller memory and values
//! of dynamic size are allocated by their kernels, so neither counts.

use super::{Graph, OutputSize};

/// Graphs up to this many nodes get a memory-aware order; larger ones keep the topological
/// order (the greedy search below is quadratic in the worst case).
pub const MAX_MEMORY_AWARE_NODES: usize = 20_000;

/// Bytes of a value: its static size, 0 if dynamic.
pub fn value_bytes(graph: &Graph, v: u32) -> u64 {
    graph.value_size(v).bytes().unwrap_or(0) as u64
}

/// The values a run takes memory for in advance: statically sized outputs of operator nodes.
pub fn static_values(graph: &Graph) -> Vec<u32> {
    (0..graph.value_count() as u32)
        .filter(|&v| {
            !graph.is_graph_input(graph.value_producer(v)) && matches!(graph.value_size(v), OutputSize::Bytes(_))
        })
        .collect()
}

/// First and last position (in the order) at which a value is live: from its producer to its
/// last consumer, to the end (`u32::MAX`) for graph outputs.
pub fn lifetime(graph: &Graph, position: &[u32], v: u32) -> (u32, u32) {
    let start = position[graph.value_producer(v) as usize];
    let end = if graph.is_graph_output(v) {
        u32::MAX
    } else {
        readers(graph, v)
            .iter()
            .map(|&c| position[c as usize])
            .max()
            .unwrap_or(start)
    };
    (start, end.max(start))
}

/// The nodes that read a value.
pub fn readers(graph: &Graph, v: u32) -> Vec<u32> {
    let mut out: Vec<u32> = graph
        .successors(graph.value_producer(v))
        .iter()
        .copied()
        .filter(|&s| graph.node_inputs(s).contains(&v))
        .collect();
    out.dedup();
    out
}

/// Live bytes at each of `len` positions, for `values` with these lifetimes.
pub fn live_profile(graph: &Graph, values: &[u32], lifetimes: &[(u32, u32)], len: usize) -> Vec<u64> {
    let mut delta = vec![0i64; len + 1];
    for (i, &v) in values.iter().enumerate() {
        let (s, e) = lifetimes[i];
        delta[s as usize] += value_bytes(graph, v) as i64;
        let end = (e as usize).saturating_add(1).min(len);
        delta[end] -= value_bytes(graph, v) as i64;
    }
    let mut live = 0i64;
    delta[..len]
        .iter()
        .map(|d| {
            live += d;
            live as u64
        })
        .collect()
}

/// One topological order with what it costs in memory.
#[derive(Clone, Debug)]
pub struct LiveOrder {
    /// Every node, graph inputs included.
    pub order: Vec<u32>,
    /// Per node: its index in `order`.
    pub position: Vec<u32>,
    /// Per position: bytes live while that node runs (its outputs included), following the order
    /// on one thread.
    pub live: Vec<u64>,
    /// The largest of `live`: the max-live lower bound of the order.
    pub peak: u64,
}

impl LiveOrder {
    /// Measures `order`, a topological order of `graph`.
    pub fn of(graph: &Graph, order: Vec<u32>) -> LiveOrder {
        let mut position = vec![0u32; graph.node_count()];
        for (i, &v) in order.iter().enumerate() {
            position[v as usize] = i as u32;
        }
        let values = static_values(graph);
        let lifetimes: Vec<(u32, u32)> = values.iter().map(|&v| lifetime(graph, &position, v)).collect();
        let live = live_profile(graph, &values, &lifetimes, order.len());
        let peak = live.iter().copied().max().unwrap_or(0);
        LiveOrder {
            order,
            position,
            live,
            peak,
        }
    }

    /// The lower-peak of the graph's topological order and its memory-aware order (the latter
    /// for graphs of at most [`MAX_MEMORY_AWARE_NODES`] nodes); the topological one on ties.
    pub fn lowest(graph: &Graph) -> LiveOrder {
        let topological = LiveOrder::of(graph, graph.topological_order().to_vec());
        if graph.node_count() > MAX_MEMORY_AWARE_NODES {
            return topological;
        }
        let greedy = LiveOrder::of(graph, memory_aware_order(graph));
        if greedy.peak < topological.peak {
            greedy
        } else {
            topological
        }
    }
}

/// A topological order that keeps live bytes low: repeatedly run the ready node whose execution
/// frees the most bytes (values whose last consumer it is) net of the bytes it allocates; ties
/// go to the earliest in the graph's own order. Quadratic in the worst case; fine for the
/// thousands of nodes of inference graphs.
pub fn memory_aware_order(graph: &Graph) -> Vec<u32> {
    let n = graph.node_count();
    let mut pending: Vec<u32> = (0..n as u32).map(|v| graph.node_inputs(v).len() as u32).collect();
    let mut readers_left: Vec<u32> = (0..graph.value_count() as u32).map(|v| graph.consumers(v)).collect();
    let mut ready: Vec<u32> = (0..n as u32).filter(|&v| pending[v as usize] == 0).collect();
    let mut order = Vec::with_capacity(n);
    let topo_pos = graph.topological_positions();
    // Graph inputs live in the caller's memory: neither binding nor dropping one moves the count.
    let held = |val: u32| match graph.is_graph_input(graph.value_producer(val)) {
        true => 0,
        false => value_bytes(graph, val) as i64,
    };
    while !ready.is_empty() {
        let score = |v: u32| -> (i64, u32) {
            let allocates: i64 = graph.node_values(v).map(held).sum();
            let mut frees = 0i64;
            let mut seen: Vec<u32> = Vec::new();
            for &val in graph.node_inputs(v) {
                if seen.contains(&val) {
                    continue;
                }
                seen.push(val);
                let uses = graph.node_inputs(v).iter().filter(|&&x| x == val).count() as u32;
                if readers_left[val as usize] == uses && !graph.is_graph_output(val) {
                    frees += held(val);
                }
            }
            (allocates - frees, topo_pos[v as usize])
        };
        let (at, _) = ready
            .iter()
            .enumerate()
            .min_by_key(|&(_, &v)| score(v))
            .expect("non-empty");
        let v = ready.swap_remove(at);
        order.push(v);
        for &val in graph.node_inputs(v) {
            readers_left[val as usize] -= 1;
        }
        for &s in graph.successors(v) {
            pending[s as usize] -= 1;
            if pending[s as usize] == 0 {
                ready.push(s);
            }
        }
    }
    order
}
