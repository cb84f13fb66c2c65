//! The cluster graph of a partition: one node per cluster, so that the simulator, unchanged,
//! can say what running the clusters as calls would do.
//!
//! A cluster's node reads every value its members read from outside it (graph inputs included,
//! one input slot per slot of a member), writes the values its members make that are read
//! outside it or are graph outputs, and costs one call plus its members' work
//! ([`Costs::cluster_ns`]). Its other values are internal: they count as one more output that
//! nobody reads (the cluster's scratch), so the simulator holds their bytes, all together, from
//! the cluster's start to its end, and admission counts them against a memory limit.
//!
//! Node ids follow the original graph's: walking its ids in order, a graph input gets the next
//! id, and so does a cluster at its first member. A partition of singletons is then the graph
//! itself, node for node, slot for slot (a node's unread values become its scratch, which the
//! simulator also frees at its end), so with a call cost of zero it simulates exactly as the
//! graph does.

use crate::error::{err, ErrorKind, Result};
use crate::graph::{Graph, GraphBuilder, NodeDesc, OutputSize, ValueRef};
use crate::sim::{simulate_with, SimOptions, SimResult};

/// What nodes and calls cost.
pub(super) struct Costs {
    /// Per node: its duration less one call (its own work); 0 for graph inputs.
    pub(super) work: Vec<u64>,
    /// The fixed cost of one call.
    pub(super) call_ns: u64,
}

impl Costs {
    /// From the graph's current estimates: a node's duration is one call, its fixed cost
    /// included (what a run measures of a kernel that is one engine call).
    pub(super) fn of(graph: &Graph, call_ns: u64) -> Costs {
        let prio = graph.priorities();
        Costs {
            work: prio.weight.iter().map(|&w| w.saturating_sub(call_ns)).collect(),
            call_ns,
        }
    }

    /// One call plus the work of every member.
    pub(super) fn cluster_ns(&self, members: &[u32]) -> u64 {
        members
            .iter()
            .fold(self.call_ns, |sum, &m| sum.saturating_add(self.work[m as usize]))
    }
}

/// A partition's cluster graph, finalized, with the map from clusters to its nodes.
pub(super) struct Quotient {
    /// The cluster graph (kernels do nothing; estimates are the clusters' costs).
    pub(super) graph: Graph,
    /// Cluster id -> its node in [`graph`](Self::graph).
    pub(super) node_of: Vec<u32>,
}

/// Members of each cluster, in node id order. `cluster_of` holds a cluster id per node
/// (`u32::MAX` for graph inputs), ids dense from 0.
pub(super) fn members(cluster_of: &[u32], clusters: usize) -> Vec<Vec<u32>> {
    let mut members = vec![Vec::new(); clusters];
    for (node, &c) in cluster_of.iter().enumerate() {
        if c != u32::MAX {
            members[c as usize].push(node as u32);
        }
    }
    members
}

/// Builds and finalizes the cluster graph of `cluster_of` (see [`members`]). Fails with
/// [`ErrorKind::Cycle`] when the clusters are not convex (some path leaves a cluster and comes
/// back), which makes the cluster graph cyclic.
pub(super) fn quotient(graph: &Graph, cluster_of: &[u32], clusters: usize, costs: &Costs) -> Result<Quotient> {
    let n = graph.node_count();
    let members = members(cluster_of, clusters);
    // Ids in the cluster graph, walking the original ids.
    let mut node_of = vec![u32::MAX; clusters];
    let mut id_of = vec![u32::MAX; n];
    let mut next = 0u32;
    for node in 0..n as u32 {
        let c = cluster_of[node as usize];
        id_of[node as usize] = if c == u32::MAX {
            next += 1;
            next - 1
        } else {
            if node_of[c as usize] == u32::MAX {
                node_of[c as usize] = next;
                next += 1;
            }
            node_of[c as usize]
        };
    }
    // Which values are read outside their producer's cluster.
    let mut read_outside = vec![false; graph.value_count()];
    for node in 0..n as u32 {
        let c = cluster_of[node as usize];
        for &v in graph.node_inputs(node) {
            let producer = graph.value_producer(v);
            if cluster_of[producer as usize] != c {
                read_outside[v as usize] = true;
            }
        }
    }
    // Each cluster's outputs: its external values, then its scratch.
    let mut output_index = vec![u32::MAX; graph.value_count()];
    let mut outputs: Vec<Vec<OutputSize>> = Vec::with_capacity(clusters);
    for list in &members {
        let mut sizes = Vec::new();
        let mut scratch = 0usize;
        for &m in list {
            for v in graph.node_values(m) {
                if read_outside[v as usize] || graph.is_graph_output(v) {
                    output_index[v as usize] = sizes.len() as u32;
                    sizes.push(graph.value_size(v));
                } else if let OutputSize::Bytes(b) = graph.value_size(v) {
                    scratch = scratch.saturating_add(b);
                }
            }
        }
        if scratch > 0 {
            sizes.push(OutputSize::Bytes(scratch.min(crate::tensor::MAX_VALUE_BYTES)));
        }
        if sizes.is_empty() {
            sizes.push(OutputSize::Dynamic);
        }
        outputs.push(sizes);
    }
    let map = |v: u32| {
        let producer = graph.value_producer(v);
        let output = if graph.is_graph_input(producer) {
            0
        } else {
            output_index[v as usize]
        };
        ValueRef::new(id_of[producer as usize], output)
    };
    let mut b = GraphBuilder::new();
    let mut added = vec![false; clusters];
    for node in 0..n as u32 {
        let c = cluster_of[node as usize];
        if c == u32::MAX {
            b.add_input(
                &format!("i{node}"),
                graph.value_size(node_value(graph, node)).bytes().unwrap_or(1),
            )?;
            continue;
        }
        if std::mem::replace(&mut added[c as usize], true) {
            continue;
        }
        let list = &members[c as usize];
        let mut desc =
            NodeDesc::new(format!("c{c}"), "cluster", Box::new(|_| Ok(()))).estimate_ns(costs.cluster_ns(list));
        for &m in list {
            for &v in graph.node_inputs(m) {
                if cluster_of[graph.value_producer(v) as usize] != c {
                    desc = desc.input(map(v));
                }
            }
        }
        desc.outputs = std::mem::take(&mut outputs[c as usize]);
        b.add_node(desc)?;
    }
    for &v in graph.graph_outputs() {
        b.mark_output(map(v))?;
    }
    let q = b.finalize()?;
    Ok(Quotient { graph: q, node_of })
}

/// The value of graph input `node`.
fn node_value(graph: &Graph, node: u32) -> u32 {
    graph.node_values(node).start
}

/// Simulates the cluster graph on `options`, recording each cluster node's start and finish in
/// `events` (see [`simulate_with`]).
pub(super) fn simulate_quotient(
    q: &Quotient,
    options: &SimOptions,
    events: Option<&mut Vec<[u32; 2]>>,
) -> Result<SimResult> {
    simulate_with(&q.graph, &q.graph.priorities(), options, events)
}

/// Checks that `clusters` partition the operator nodes of `graph`: every operator node in exactly
/// one, no graph input, no empty cluster. Returns the cluster of each node (`u32::MAX` for
/// graph inputs).
pub(super) fn cluster_map(graph: &Graph, clusters: &[Vec<u32>]) -> Result<Vec<u32>> {
    let n = graph.node_count();
    let mut cluster_of = vec![u32::MAX; n];
    for (c, list) in clusters.iter().enumerate() {
        if list.is_empty() {
            return err(ErrorKind::InvalidArgument, format!("cluster {c} is empty"));
        }
        for &node in list {
            if node as usize >= n {
                return err(
                    ErrorKind::InvalidArgument,
                    format!("cluster {c} names node {node}, but the graph has {n} nodes"),
                );
            }
            if graph.is_graph_input(node) {
                return err(
                    ErrorKind::InvalidArgument,
                    format!(
                        "cluster {c} names graph input {}: clusters hold operator nodes",
                        graph.node_label(node)
                    ),
                );
            }
            let slot = &mut cluster_of[node as usize];
            if *slot != u32::MAX {
                return err(
                    ErrorKind::InvalidArgument,
                    format!(
                        "node {} is in cluster {} and in cluster {c}",
                        graph.node_label(node),
                        *slot
                    ),
                );
            }
            *slot = c as u32;
        }
    }
    if let Some(node) = (0..n as u32).find(|&v| !graph.is_graph_input(v) && cluster_of[v as usize] == u32::MAX) {
        return err(
            ErrorKind::InvalidArgument,
            format!("node {} is in no cluster", graph.node_label(node)),
        );
    }
    Ok(cluster_of)
}
