//! `--call-cost`: what one ONNX Runtime `Run` of a single-node session costs, node by node, on
//! buffers allocated once (as graphsched's kernels call it), against the whole model in one
//! session. Explains the gap between the two on models of many small nodes.

use std::ffi::{c_char, CString};
use std::time::Instant;

use crate::graph::distinct_reads;
use crate::manifest::Manifest;
use crate::measure::median;
use crate::ort_api::{Arena, Runtime, SessionConfig};
use crate::run::{Aligned, WholeModel};

/// Times `calls` runs of every node's session alone, and of the whole model; prints the
/// per-call figures.
pub fn call_cost(manifest: &Manifest, library: &std::path::Path, calls: usize) -> Result<(), String> {
    let runtime = Runtime::load(library, None)?;
    let config = SessionConfig {
        intra_threads: 1,
        arena: Arena::Shared,
        ..Default::default()
    };
    let tensors = manifest.tensors();
    let mut per_node = Vec::new();
    for node in &manifest.nodes {
        let session = runtime.session(&manifest.dir.join(&node.file), config)?;
        let ins: Vec<_> = distinct_reads(node, &tensors)
            .iter()
            .map(|n| tensors[n.as_str()].clone())
            .collect();
        let outs: Vec<_> = node.outputs.iter().map(|n| tensors[n.as_str()].clone()).collect();
        let mut buffers: Vec<Aligned> = ins.iter().chain(&outs).map(|t| Aligned::zeroed(t.bytes())).collect();
        let mut values = Vec::new();
        for (t, b) in ins.iter().chain(&outs).zip(&mut buffers) {
            // SAFETY: the buffer holds the tensor's bytes and outlives every run below.
            values.push(unsafe { runtime.tensor(b.ptr(), t.bytes(), &t.shape, t.elem_type) }?);
        }
        let mut outputs = values.split_off(ins.len());
        let names = |ts: &[crate::manifest::TensorInfo]| -> Vec<CString> {
            ts.iter()
                .map(|t| CString::new(t.name.as_str()).unwrap_or_default())
                .collect()
        };
        let (in_names, out_names) = (names(&ins), names(&outs));
        let in_ptrs: Vec<*const c_char> = in_names.iter().map(|n| n.as_ptr()).collect();
        let out_ptrs: Vec<*const c_char> = out_names.iter().map(|n| n.as_ptr()).collect();
        let mut times = Vec::with_capacity(calls);
        for _ in 0..calls + 1 {
            let start = Instant::now();
            // SAFETY: the names are the CStrings above; the tensors wrap the buffers above.
            unsafe { session.run(&in_ptrs, &values, &out_ptrs, &mut outputs) }?;
            times.push(start.elapsed().as_nanos() as u64);
        }
        times.remove(0); // the first call prepares the kernel
        per_node.push((
            median(&mut times),
            node.op.clone(),
            outs.iter().map(|t| t.bytes()).sum::<usize>(),
        ));
    }
    let whole_session = runtime.session(
        &manifest.dir.join(&manifest.prepared),
        SessionConfig {
            intra_threads: 1,
            ..Default::default()
        },
    )?;
    let mut whole = WholeModel::new(&runtime, whole_session, manifest);
    whole.run(false)?;
    let mut times: Vec<u64> = (0..calls.max(3))
        .map(|_| {
            let start = Instant::now();
            whole.run(false).map(|_| start.elapsed().as_nanos() as u64)
        })
        .collect::<Result<_, _>>()?;
    let whole_ns = median(&mut times);
    let sum: u64 = per_node.iter().map(|p| p.0).sum();
    per_node.sort_by_key(|p| p.0);
    let (fastest, op, bytes) = &per_node[0];
    println!(
        "{}: {} single-node sessions, {calls} calls each, medians on one thread",
        manifest.model,
        per_node.len()
    );
    println!(
        "  cheapest node call: {:.2} us ({op}, {bytes} output bytes): about the fixed cost of a Run",
        *fastest as f64 / 1e3
    );
    println!(
        "  median node call:   {:.2} us",
        per_node[per_node.len() / 2].0 as f64 / 1e3
    );
    let (slowest, slow_op, _) = &per_node[per_node.len() - 1];
    println!(
        "  longest node call:  {:.2} us ({slow_op}): what a request behind it may wait for a thread",
        *slowest as f64 / 1e3
    );
    println!(
        "  sum of node calls:  {:.3} ms; whole model in one session: {:.3} ms",
        sum as f64 / 1e6,
        whole_ns as f64 / 1e6
    );
    Ok(())
}
