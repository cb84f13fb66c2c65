//! Helpers shared by the integration tests: a seeded generator of random DAGs and kernels that
//! check a checksum chain, so a buffer reused while still being read fails loudly.
#![allow(dead_code)]

use std::collections::HashMap;
use std::sync::{Arc, Mutex};

use graphsched::{GraphBuilder, Kernel, KernelCtx, NodeDesc, ValueRef};

/// xorshift64*: small, seeded, good enough to shape test graphs.
pub struct Rng(u64);

impl Rng {
    pub fn new(seed: u64) -> Self {
        Rng(seed.wrapping_mul(0x9E37_79B9_7F4A_7C15) | 1)
    }
    pub fn next(&mut self) -> u64 {
        self.0 ^= self.0 >> 12;
        self.0 ^= self.0 << 25;
        self.0 ^= self.0 >> 27;
        self.0.wrapping_mul(0x2545_F491_4F6C_DD1D)
    }
    pub fn below(&mut self, n: u64) -> u64 {
        self.next() % n.max(1)
    }
}

pub fn fnv(bytes: &[u8]) -> u64 {
    bytes.iter().fold(0xcbf2_9ce4_8422_2325u64, |h, &b| {
        (h ^ b as u64).wrapping_mul(0x100_0000_01b3)
    })
}

/// Checksums of a run's graph outputs, in the graph's output order.
pub fn output_sums(graph: &graphsched::Graph, result: &graphsched::RunResult) -> Vec<u64> {
    graph
        .graph_outputs()
        .iter()
        .map(|&v| fnv(result.output_bytes(graph.value_ref(v)).unwrap()))
        .collect()
}

/// Checksums each value's producer wrote, by (node, output); consumers compare against them.
#[derive(Clone, Default)]
pub struct Ledger(Arc<Mutex<HashMap<(u32, u32), u64>>>);

impl Ledger {
    /// A kernel that verifies every input against the ledger, then fills each output with a
    /// pattern derived from its node, output index and inputs, and records its checksum.
    pub fn kernel(&self, inputs: Vec<ValueRef>) -> Kernel {
        let ledger = self.clone();
        Box::new(move |ctx: &mut KernelCtx<'_>| {
            let mut seed = ctx.node() as u64;
            for (i, v) in inputs.iter().enumerate() {
                let got = fnv(ctx.input_bytes(i).unwrap());
                let want = ledger.0.lock().unwrap().get(&(v.node, v.output)).copied();
                if want.is_some() && want != Some(got) {
                    return Err(format!(
                        "input {i} of '{}' was overwritten (checksum {got:#x}, want {want:?})",
                        ctx.node_name()
                    ));
                }
                seed = seed.wrapping_mul(31).wrapping_add(got);
            }
            for k in 0..ctx.num_outputs() {
                let node = ctx.node();
                let out = ctx.output_bytes(k).unwrap();
                let mut x = seed.wrapping_add(k as u64) | 1;
                for b in out.iter_mut() {
                    x ^= x << 13;
                    x ^= x >> 7;
                    x ^= x << 17;
                    *b = x as u8;
                }
                let sum = fnv(out);
                ledger.0.lock().unwrap().insert((node, k as u32), sum);
            }
            Ok(())
        })
    }

    /// Records the checksum of caller memory bound to graph input `v`.
    pub fn record_input(&self, v: ValueRef, bytes: &[u8]) {
        self.0.lock().unwrap().insert((v.node, v.output), fnv(bytes));
    }

    pub fn get(&self, v: ValueRef) -> Option<u64> {
        self.0.lock().unwrap().get(&(v.node, v.output)).copied()
    }
}

/// A random DAG: `inputs` graph inputs, then `nodes` operator nodes, each reading 0..=max_fan_in
/// earlier values (wide fan-out arises naturally) with 1..=3 outputs of random sizes; every
/// value nobody reads becomes a graph output. Returns the builder and the graph inputs.
pub fn random_dag(
    rng: &mut Rng,
    ledger: &Ledger,
    inputs: usize,
    nodes: usize,
    max_fan_in: u64,
    max_bytes: u64,
) -> (GraphBuilder, Vec<ValueRef>) {
    let mut b = GraphBuilder::new();
    let mut values: Vec<ValueRef> = Vec::new();
    let mut read = HashMap::new();
    let mut graph_inputs = Vec::new();
    for i in 0..inputs {
        let v = b
            .add_input(&format!("in{i}"), 16 * (1 + rng.below(64) as usize))
            .unwrap();
        values.push(v);
        graph_inputs.push(v);
    }
    for n in 0..nodes {
        let fan_in = if values.is_empty() {
            0
        } else {
            rng.below(max_fan_in + 1)
        };
        let ins: Vec<ValueRef> = (0..fan_in)
            .map(|_| values[rng.below(values.len() as u64) as usize])
            .collect();
        let outs = 1 + rng.below(3) as usize;
        let mut desc = NodeDesc::new(format!("n{n}"), format!("op{}", n % 5), ledger.kernel(ins.clone()));
        for &v in &ins {
            desc = desc.input(v);
            read.insert(v, true);
        }
        for _ in 0..outs {
            desc = desc.output(1 + rng.below(max_bytes) as usize);
        }
        desc = desc.estimate_ns(1 + rng.below(1000));
        let id = b.add_node(desc).unwrap();
        values.extend((0..outs as u32).map(|k| ValueRef::new(id, k)));
    }
    for v in values {
        if !read.contains_key(&v) && !graph_inputs.contains(&v) {
            b.mark_output(v).unwrap();
        }
    }
    (b, graph_inputs)
}

/// 16-byte-aligned caller memory for graph inputs.
pub struct AlignedBuf(Vec<u128>, usize);

impl AlignedBuf {
    pub fn new(nbytes: usize, fill: u8) -> Self {
        let mut v = vec![0u128; nbytes.div_ceil(16)];
        // SAFETY: the vector holds at least nbytes bytes.
        unsafe { std::ptr::write_bytes(v.as_mut_ptr() as *mut u8, fill, nbytes) };
        AlignedBuf(v, nbytes)
    }
    pub fn bytes(&self) -> &[u8] {
        // SAFETY: as above.
        unsafe { std::slice::from_raw_parts(self.0.as_ptr() as *const u8, self.1) }
    }
    pub fn tensor(&self) -> graphsched::Tensor {
        graphsched::Tensor::new(self.0.as_ptr() as *mut _, self.1)
    }
}

/// A kernel that does nothing.
pub fn empty() -> Kernel {
    Box::new(|_| Ok(()))
}

/// A chain of `n` nodes with outputs of `bytes`, its last value the graph's output.
pub fn chain(n: u32, bytes: usize) -> graphsched::Graph {
    let mut b = GraphBuilder::new();
    let mut prev = None;
    for i in 0..n {
        let mut d = NodeDesc::new(format!("n{i}"), "Op", empty()).output(bytes);
        if let Some(p) = prev {
            d = d.input(ValueRef::new(p, 0));
        }
        prev = Some(b.add_node(d).unwrap());
    }
    b.mark_output(ValueRef::new(prev.unwrap(), 0)).unwrap();
    b.finalize().unwrap()
}

/// A root of 64 bytes feeding `width` nodes, middle node `i` with an output of `bytes(i)`, all
/// read by one join of 16 bytes, the graph's output.
pub fn fan(width: u32, bytes: impl Fn(u32) -> usize) -> graphsched::Graph {
    let mut b = GraphBuilder::new();
    let root = b.add_node(NodeDesc::new("root", "Op", empty()).output(64)).unwrap();
    let mut join = NodeDesc::new("join", "Join", empty()).output(16);
    for i in 0..width {
        let d = NodeDesc::new(format!("m{i}"), "Mid", empty())
            .input(ValueRef::new(root, 0))
            .output(bytes(i));
        join = join.input(ValueRef::new(b.add_node(d).unwrap(), 0));
    }
    let join = b.add_node(join).unwrap();
    b.mark_output(ValueRef::new(join, 0)).unwrap();
    b.finalize().unwrap()
}
