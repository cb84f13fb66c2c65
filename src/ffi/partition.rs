//! `gs_partition_*`: which nodes to run together as one call (see `crate::partition`).

use super::gs_status::*;
use super::handle::{free_handle, handle_ref, into_handle, out_arg, Handle};
use super::run::policy_from_c;
use super::status::{guard, FfiError};
use super::{gs_graph, gs_status};
use crate::partition::{partition, Partition, PartitionOptions};
use crate::sim::SimResult;

/// What a partition is chosen for. Zero-initialize, then fill in.
#[repr(C)]
#[derive(Clone, Copy, Debug, Default)]
pub struct gs_partition_options {
    /// The fixed cost of one call of the engine's, in nanoseconds; each node's duration (given
    /// or learned) includes one.
    pub call_cost_ns: u64,
    /// Threads the clusters will run on; at least 1.
    pub threads: u32,
    /// `GS_POLICY_*` the runs will use.
    pub policy: u32,
    /// Most live bytes, clusters' internal values included; 0: no limit.
    pub memory_limit_bytes: u64,
}

/// A partition of a graph's operator nodes into clusters, each to be run as one call: convex (no
/// path leaves a cluster and comes back), so the clusters form a DAG. Owns its node lists; the
/// graph may be freed before it.
pub struct gs_partition {
    partition: Partition,
}

impl Handle for gs_partition {
    const NAME: &'static str = "gs_partition";
    const TAG: u8 = 8;
}

/// Proposes a partition of a finalized graph's operator nodes into clusters, each to be run as
/// one call, for an engine whose calls cost `options.call_cost_ns` each: merging nodes saves
/// calls and gives up overlap, and the simulator (the runs' policy, on `options.threads`
/// threads, from the graph's current estimates) decides. A cluster costs one call plus its
/// nodes' durations less one call each; its internal values (read by no node outside it, not
/// graph outputs) live for its whole time and count against `options.memory_limit_bytes`. The
/// partition's simulated makespan is never longer than the graph's own with one call a node.
///
/// `GS_ERR_INVALID_ARGUMENT` for 0 threads, an unknown policy, or a graph with inputs of dynamic
/// size; `GS_ERR_MEMORY_LIMIT` when the graph itself cannot run under the limit.
/// Thread-safe: any thread, concurrently with any call but a free of the same handle.
///
/// # Safety
/// `options` is readable; `out` is writable; no other thread frees `graph` during this call.
#[no_mangle]
pub unsafe extern "C" fn gs_partition_new(
    graph: *const gs_graph,
    options: *const gs_partition_options,
    out: *mut *mut gs_partition,
) -> gs_status {
    guard(|| {
        // SAFETY: the handle is not freed concurrently (C contract).
        let g = unsafe { handle_ref(graph, "graph") }?;
        // SAFETY: readable by contract.
        let o = unsafe { options.as_ref() }
            .ok_or_else(|| FfiError::new(GS_ERR_NULL_ARGUMENT, "argument 'options' is NULL"))?;
        // SAFETY: writable by contract.
        let out = unsafe { out_arg(out, "out") }?;
        let options = PartitionOptions {
            call_cost_ns: o.call_cost_ns,
            threads: o.threads as usize,
            policy: policy_from_c(o.policy)?,
            memory_limit_bytes: o.memory_limit_bytes,
        };
        *out = into_handle(gs_partition {
            partition: partition(g.compiled()?, &options)?,
        })?;
        Ok(())
    })
}

/// Number of clusters (each `gs_partition_cluster` index below it names one).
///
/// Thread-safe: any thread, concurrently with any call but a free of the same handle.
///
/// # Safety
/// `count` is writable; no other thread frees `partition` during this call.
#[no_mangle]
pub unsafe extern "C" fn gs_partition_cluster_count(partition: *const gs_partition, count: *mut usize) -> gs_status {
    guard(|| {
        // SAFETY: the handle is not freed concurrently (C contract).
        let p = &unsafe { handle_ref(partition, "partition") }?.partition;
        // SAFETY: writable by contract.
        *unsafe { out_arg(count, "count") }? = p.clusters().len();
        Ok(())
    })
}

/// Cluster `index`: `*count` node ids (as `gs_graph_add_node` returned them) at `*nodes`, in a
/// topological order. Clusters are numbered in a topological order of the cluster graph. The ids
/// live as long as the partition. `GS_ERR_INVALID_ARGUMENT` for an index out of range.
///
/// Thread-safe: any thread, concurrently with any call but a free of the same handle.
///
/// # Safety
/// `nodes` and `count` are writable; no other thread frees `partition` during this call.
#[no_mangle]
pub unsafe extern "C" fn gs_partition_cluster(
    partition: *const gs_partition,
    index: usize,
    nodes: *mut *const u32,
    count: *mut usize,
) -> gs_status {
    guard(|| {
        // SAFETY: the handle is not freed concurrently (C contract).
        let p = &unsafe { handle_ref(partition, "partition") }?.partition;
        // SAFETY: writable by contract.
        let (nodes, count) = unsafe { (out_arg(nodes, "nodes")?, out_arg(count, "count")?) };
        let list = p.clusters().get(index).ok_or_else(|| {
            FfiError::new(
                GS_ERR_INVALID_ARGUMENT,
                format!("index is {index}; the partition has {} clusters", p.clusters().len()),
            )
        })?;
        *nodes = list.as_ptr();
        *count = list.len();
        Ok(())
    })
}

/// The simulated run of the graph unpartitioned (one call a node) and of the clusters (one call
/// a cluster), with the options the partition was made for. Either pointer may be NULL.
///
/// Thread-safe: any thread, concurrently with any call but a free of the same handle.
///
/// # Safety
/// `before` and `after` are NULL or writable; no other thread frees `partition` during this call.
#[no_mangle]
pub unsafe extern "C" fn gs_partition_simulated(
    partition: *const gs_partition,
    before: *mut SimResult,
    after: *mut SimResult,
) -> gs_status {
    guard(|| {
        // SAFETY: the handle is not freed concurrently (C contract).
        let p = &unsafe { handle_ref(partition, "partition") }?.partition;
        // SAFETY: NULL or writable by contract.
        if let Some(b) = unsafe { before.as_mut() } {
            *b = p.before();
        }
        // SAFETY: as above.
        if let Some(a) = unsafe { after.as_mut() } {
            *a = p.after();
        }
        Ok(())
    })
}

/// Frees a partition. NULL does nothing.
///
/// Thread-safe with respect to other handles; no other call may be using this handle, on any
/// thread.
///
/// # Safety
/// No other thread is inside a call on `partition` during this call.
#[no_mangle]
pub unsafe extern "C" fn gs_partition_free(partition: *mut gs_partition) {
    let _ = guard(|| {
        // SAFETY: no other thread uses the handle while it is freed (C contract).
        unsafe { free_handle(partition, "partition") };
        Ok(())
    });
}
