//! The baseline without graphsched: a graph file run in file (topological) order on the calling
//! thread, every value in a fresh `malloc` of its own, all freed at the end. Each node does the
//! measuring kernels' work ([`crate::kernels`]: read and check every input byte, write every
//! output byte, spin to the estimate), so that the only difference from a graphsched run is
//! where the memory comes from and when it goes back.

use std::collections::HashMap;
use std::time::{Duration, Instant};

use graphsched::{Graph, ValueRef};

use crate::graph_file::{GraphFile, InputBuffers};
use crate::kernels::{check_input, fill_output, node_seed, spin_until, Ledger};

/// Figures of one naive run.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct NaiveStats {
    /// From the first node's start to the last node's end (the frees at the end excluded, as a
    /// graphsched run's wall time excludes dropping its result).
    pub wall_ns: u64,
    pub nodes_run: u64,
    /// Bytes of values held at the end, before the frees: every value, since none is freed early.
    pub peak_live_bytes: u64,
    /// Growth of what malloc holds from the system over the run (glibc's `mallinfo2`: heap plus
    /// mapped chunks); the live bytes where that is not available.
    pub peak_reserved_bytes: u64,
    /// Allocations malloc served by mapping fresh memory (glibc: mapped chunks); every
    /// allocation where that is not available.
    pub os_allocs: u64,
}

/// Blocks from malloc, freed when dropped (also on an early return).
struct Blocks(Vec<*mut u8>);

impl Drop for Blocks {
    fn drop(&mut self) {
        for &p in &self.0 {
            // SAFETY: every pointer came from libc::malloc and is freed once.
            unsafe { libc::free(p as *mut libc::c_void) };
        }
    }
}

/// What malloc holds from the system (bytes) and how many chunks it mapped.
fn malloc_held() -> (u64, u64) {
    #[cfg(all(target_os = "linux", target_env = "gnu"))]
    {
        // SAFETY: mallinfo2 only reads malloc's counters.
        let m = unsafe { libc::mallinfo2() };
        ((m.arena + m.hblkhd) as u64, m.hblks as u64)
    }
    #[cfg(not(all(target_os = "linux", target_env = "gnu")))]
    {
        (0, 0)
    }
}

/// Runs `file` naively. `graph` is the same file built (it names the node ids and estimates the
/// measuring kernels use), `inputs` its bound inputs, whose checksums `ledger` must hold; the
/// run records every value's checksum in `ledger` and checks every input against it.
pub fn run_naive(
    file: &GraphFile,
    graph: &Graph,
    inputs: &InputBuffers,
    ledger: &Ledger,
) -> Result<NaiveStats, String> {
    run_naive_traced(file, graph, inputs, ledger, &mut Vec::new())
}

/// [`run_naive`], recording after each node (nanoseconds since the first node's start, bytes
/// held) in `timeline`.
pub fn run_naive_traced(
    file: &GraphFile,
    graph: &Graph,
    inputs: &InputBuffers,
    ledger: &Ledger,
    timeline: &mut Vec<(u64, u64)>,
) -> Result<NaiveStats, String> {
    let mut values: HashMap<&str, (*const u8, usize, ValueRef)> = HashMap::new();
    for (spec, (v, bytes)) in file.inputs.iter().zip(inputs.bytes()) {
        values.insert(&spec.name, (bytes.as_ptr(), bytes.len(), v));
    }
    let mut blocks = Blocks(Vec::with_capacity(file.nodes.iter().map(|n| n.outputs.len()).sum()));
    let mut live = 0u64;
    timeline.reserve(file.nodes.len()); // before the snapshot: the figures are the values' alone
    let (held0, mapped0) = malloc_held();
    let start = Instant::now();
    for spec in &file.nodes {
        let node = graph
            .find_node(&spec.name)
            .ok_or_else(|| format!("node '{}' is not in the graph", spec.name))?;
        let node_start = Instant::now();
        let mut seed = node_seed(node);
        for (i, name) in spec.inputs.iter().enumerate() {
            let &(ptr, len, v) = values
                .get(name.as_str())
                .ok_or_else(|| format!("node '{}' reads '{name}', which no earlier node writes", spec.name))?;
            // SAFETY: `ptr` holds `len` bytes (an input buffer or a block below), alive and not
            // written until the end of the run.
            let bytes = unsafe { std::slice::from_raw_parts(ptr, len) };
            seed = check_input(seed, i, bytes, ledger.get(v)).map_err(|e| format!("node '{}': {e}", spec.name))?;
        }
        for (k, out) in spec.outputs.iter().enumerate() {
            // SAFETY: plain malloc of a positive size; checked for failure below.
            let p = unsafe { libc::malloc(out.bytes.max(1)) } as *mut u8;
            if p.is_null() {
                return Err(format!(
                    "malloc of {} bytes for '{}' failed after {live} bytes",
                    out.bytes, out.name
                ));
            }
            blocks.0.push(p);
            live += out.bytes as u64;
            // SAFETY: the block holds `out.bytes` bytes and nothing else refers to it yet.
            let bytes = unsafe { std::slice::from_raw_parts_mut(p, out.bytes) };
            let v = ValueRef::new(node, k as u32);
            ledger.record(v, fill_output(bytes, seed, k));
            values.insert(&out.name, (p as *const u8, out.bytes, v));
        }
        spin_until(node_start, Some(Duration::from_nanos(graph.expected_ns(node))));
        timeline.push((start.elapsed().as_nanos() as u64, live));
    }
    let wall_ns = start.elapsed().as_nanos() as u64;
    let (held1, mapped1) = malloc_held();
    let (reserved, os_allocs) = if cfg!(all(target_os = "linux", target_env = "gnu")) {
        (held1.saturating_sub(held0), mapped1.saturating_sub(mapped0))
    } else {
        (live, blocks.0.len() as u64)
    };
    drop(blocks);
    Ok(NaiveStats {
        wall_ns,
        nodes_run: file.nodes.len() as u64,
        peak_live_bytes: live,
        peak_reserved_bytes: reserved,
        os_allocs,
    })
}
