//! The seed pipeline: the reference workload of the design (240 nodes, 3 parallel main chains of
//! 40 nodes with shared nodes and branches between them, outputs from kilobytes to tens of
//! megabytes, one heavy node on the critical path), generated deterministically from a seed.
//!
//! Shape: 40 stages. In each stage every chain has one main node reading its own previous main
//! output; a *shared* node reads the three main outputs of the stage and feeds the next stage of
//! one chain (rotating); two *branch* nodes fork off two chains and join them again 16 to 40
//! stages later, or the sink when that is past the end (long skip connections: they keep values
//! alive, which is what makes memory matter). A sink reads what is left. 6 nodes a stage (5 in the
//! last) and the sink: 240. Main nodes write 8 to 32 MB, branches 16 to 48 MB, shared nodes 4 to
//! 256 KB, all times `scale`: 5.06 GB of outputs at scale 1, 2.00 GB live at once in file order.
//!
//! Durations: light nodes compute for 100 us, the main node of chain 0 at stage 20 (on the
//! critical path) for 80 ms; each node's estimate adds 1 ns per byte it touches (written or read),
//! since the measuring kernels really do, at about 2 bytes per nanosecond on this machine, then
//! spin to the estimate: real durations then follow the estimates.

use crate::graph_file::{GraphFile, NodeSpec, ValueSpec};

pub const STAGES: usize = 40;
pub const CHAINS: usize = 3;
pub const LIGHT_NS: u64 = 100_000;
pub const HEAVY_NS: u64 = 80_000_000;

struct Rng(u64);

impl Rng {
    fn next(&mut self) -> u64 {
        self.0 ^= self.0 << 13;
        self.0 ^= self.0 >> 7;
        self.0 ^= self.0 << 17;
        self.0
    }
    /// Uniform in [lo, hi].
    fn between(&mut self, lo: u64, hi: u64) -> u64 {
        lo + self.next() % (hi - lo + 1)
    }
}

/// The seed pipeline for `seed` with byte sizes times `scale` (1.0: the full 5 GB workload).
pub fn seed_pipeline(seed: u64, scale: f64) -> GraphFile {
    let mut rng = Rng(seed.wrapping_mul(0x9E37_79B9_7F4A_7C15) | 1);
    let bytes = |rng: &mut Rng, lo: u64, hi: u64| ((rng.between(lo, hi) as f64 * scale) as usize).max(16) / 16 * 16;
    const KB: u64 = 1024;
    const MB: u64 = 1024 * 1024;
    let mut nodes: Vec<NodeSpec> = Vec::new();
    let input_bytes = bytes(&mut rng, 4 * MB, 4 * MB);
    let mut sizes: std::collections::HashMap<String, usize> = std::collections::HashMap::new();
    sizes.insert("x".to_string(), input_bytes);
    let mut node = |name: String, op: &str, inputs: Vec<String>, out: usize, ns: u64| -> String {
        let value = format!("{name}:0");
        let touched: usize = out + inputs.iter().map(|i| sizes[i]).sum::<usize>();
        sizes.insert(value.clone(), out);
        let ns = ns + touched as u64;
        nodes.push(NodeSpec {
            name,
            op: op.to_string(),
            inputs,
            outputs: vec![ValueSpec {
                name: value.clone(),
                bytes: out,
            }],
            estimate_ns: Some(ns),
            in_place: None,
        });
        value
    };
    let input = "x".to_string();
    let mut last: Vec<String> = vec![input.clone(); CHAINS];
    let mut extra: Vec<Vec<String>> = vec![Vec::new(); CHAINS]; // values joining a chain's next main node
                                                                // Branches due to join chain c at stage s: (stage, chain, value).
    let mut pending_joins: Vec<(usize, usize, String)> = Vec::new();
    for stage in 0..STAGES {
        let mut mains = Vec::new();
        for c in 0..CHAINS {
            let mut inputs = vec![last[c].clone()];
            inputs.append(&mut extra[c]);
            pending_joins.retain(|(at, chain, v)| {
                let due = *at == stage && *chain == c;
                if due {
                    inputs.push(v.clone());
                }
                !due
            });
            let heavy = c == 0 && stage == STAGES / 2;
            let ns = if heavy { HEAVY_NS } else { LIGHT_NS };
            let out = bytes(&mut rng, 8 * MB, 32 * MB);
            let v = node(
                format!("main{c}_{stage}"),
                if heavy { "Heavy" } else { "Main" },
                inputs,
                out,
                ns,
            );
            mains.push(v.clone());
            last[c] = v;
        }
        let shared_out = bytes(&mut rng, 4 * KB, 256 * KB);
        let shared = node(format!("shared_{stage}"), "Shared", mains.clone(), shared_out, LIGHT_NS);
        extra[stage % CHAINS].push(shared);
        // The last stage forks one branch only, into the sink: 239 nodes plus the sink.
        let branches = if stage == STAGES - 1 { 1 } else { 2 };
        for b in 0..branches {
            let c = (stage + b) % CHAINS;
            let out = bytes(&mut rng, 16 * MB, 48 * MB);
            let v = node(
                format!("branch{b}_{stage}"),
                "Branch",
                vec![mains[c].clone()],
                out,
                LIGHT_NS,
            );
            // Joins its chain 3 to 8 stages later, or the sink when that is past the end.
            let join = stage + rng.between(16, 40) as usize;
            pending_joins.push((join, c, v));
        }
    }
    // Whatever did not join (branches of the last stages, the last shared node) feeds the sink.
    let mut sink_inputs: Vec<String> = last.clone();
    sink_inputs.extend(pending_joins.into_iter().map(|(_, _, v)| v));
    for e in extra.iter_mut() {
        sink_inputs.append(e);
    }
    // The 240th node, the graph output, reads everything left over.
    let sink = node(
        "sink".to_string(),
        "Sink",
        sink_inputs,
        bytes(&mut rng, 64 * KB, 64 * KB),
        LIGHT_NS,
    );
    GraphFile {
        name: format!("seed-pipeline(seed {seed}, scale {scale})"),
        source: "generated: graphsched_workloads::seed::seed_pipeline".to_string(),
        inputs: vec![ValueSpec {
            name: input,
            bytes: input_bytes,
        }],
        outputs: vec![sink],
        nodes,
    }
}
