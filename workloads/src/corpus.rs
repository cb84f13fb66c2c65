//! A corpus of inference-like graphs to measure on, not to tune on (issue 13): every seed gives
//! one graph, deterministically, in the file format of `workloads/graphs/`.
//!
//! A graph is a convolutional backbone or a transformer encoder, sometimes both (a recognizer: a
//! backbone, then attention over its columns), with the shapes that make memory planning hard:
//! - residual blocks (the block input waits for the add at the block's end: a skip connection);
//! - inception-like splits into 2-4 branches joined by a concat;
//! - an FPN-like head: each backbone stage's output waits, then merges top-down into outputs at
//!   several scales (long-lived values of very different sizes);
//! - attention blocks: one normalized input read by Q, K and V, score tensors of tokens² × heads.
//!
//! - squeeze-excitation in some residual blocks: per-channel vectors of a few hundred bytes
//!   beside activations of megabytes.
//!
//! Sizes follow from the chosen resolution, widths and token counts: across the corpus from tens
//! of bytes to tens of megabytes, within one graph over two orders of magnitude at least; graphs
//! have 50 to 2,000 nodes. Float32 activations, batch 1. Durations follow the cost model of
//! [`estimate_ns`].

use std::collections::HashMap;

use crate::graph_file::{estimate_ns, GraphFile, NodeSpec, ValueSpec};

/// Nodes a generated graph has at least and at most.
pub const NODES: std::ops::RangeInclusive<usize> = 50..=2000;

/// A generated graph's largest value is at least this many times its smallest.
pub const MIN_SPREAD: usize = 100;

/// The generated graph for `seed`.
pub fn inference_graph(seed: u64) -> GraphFile {
    let mut rng = seed.wrapping_mul(0x9E37_79B9_7F4A_7C15) | 1;
    // Draws again, from where the random stream stands, until the size and the spread of value
    // sizes fit: still one graph per seed.
    loop {
        let (file, next) = attempt(rng);
        let sizes = file.nodes.iter().flat_map(|n| n.outputs.iter().map(|o| o.bytes));
        let (lo, hi) = sizes.fold((usize::MAX, 0), |(lo, hi), b| (lo.min(b), hi.max(b)));
        if NODES.contains(&file.nodes.len()) && hi >= lo.saturating_mul(MIN_SPREAD) {
            return GraphFile {
                name: format!("corpus-{seed}"),
                ..file
            };
        }
        rng = next;
    }
}

/// One draw from the random stream at `rng`, and where the stream stands after it.
fn attempt(rng: u64) -> (GraphFile, u64) {
    let mut g = Gen {
        rng,
        nodes: Vec::new(),
        sizes: HashMap::new(),
    };
    let family = g.below(3);
    // How deep: a few blocks a stage (or layers) up to dozens, as small and large variants of one
    // model differ.
    let depth = [1, 2, 4, 8, 16][g.below(5)];
    let mut outputs = Vec::new();
    let input = "input".to_string();
    let input_bytes;
    match family {
        // A convolutional backbone, with an FPN head half the time.
        0 => {
            let side = 32 * (2 + g.below(19)); // 64..=640
            input_bytes = 3 * side * side * 4;
            g.sizes.insert(input.clone(), input_bytes);
            let (blocks, depth) = (3 * depth, 2 + g.below(4));
            let stages = g.backbone(&input, side, depth, blocks);
            if g.below(2) == 0 {
                outputs.extend(g.fpn(&stages));
            } else {
                let last = stages.last().expect("at least two stages").clone();
                outputs.push(g.head(&last));
            }
        }
        // A transformer encoder over tokens.
        1 => {
            let tokens = 32 * (1 + g.below(16)); // 32..=512
            let hidden = 64 * (2 + g.below(15)); // 128..=1024
            input_bytes = tokens * hidden * 4;
            g.sizes.insert(input.clone(), input_bytes);
            let layers = 2 + g.below(6 * depth);
            let x = g.encoder(&input, tokens, hidden, layers);
            outputs.push(g.head(&x));
        }
        // A recognizer: a shallow backbone, then attention over its columns.
        _ => {
            let (h, w) = (32 + 16 * g.below(3), 160 + 32 * g.below(6));
            input_bytes = 3 * h * w * 4;
            g.sizes.insert(input.clone(), input_bytes);
            let (blocks, depth) = (2 * depth, 2 + g.below(2));
            let stages = g.backbone_rect(&input, h, w, depth, blocks);
            let last = stages.last().expect("at least two stages").clone();
            let tokens = (w >> stages.len()).max(8);
            let hidden = g.sizes[&last] / tokens / 4;
            let layers = 1 + g.below(2 * depth);
            let x = g.encoder(&last, tokens, hidden.clamp(64, 1024), layers);
            outputs.push(g.head(&x));
        }
    }
    let file = GraphFile {
        name: String::new(),
        source: "generated: graphsched_workloads::corpus::inference_graph".to_string(),
        inputs: vec![ValueSpec {
            name: input,
            bytes: input_bytes,
        }],
        outputs,
        nodes: g.nodes,
    };
    (file, g.rng)
}

struct Gen {
    rng: u64,
    nodes: Vec<NodeSpec>,
    sizes: HashMap<String, usize>,
}

impl Gen {
    fn next(&mut self) -> u64 {
        self.rng ^= self.rng << 13;
        self.rng ^= self.rng >> 7;
        self.rng ^= self.rng << 17;
        self.rng
    }

    /// Uniform in `0..n`.
    fn below(&mut self, n: usize) -> usize {
        (self.next() % n as u64) as usize
    }

    /// Adds a node of `op` reading `inputs` with one output of `bytes`; returns the output.
    fn node(&mut self, op: &str, inputs: &[&String], bytes: usize) -> String {
        let name = format!("{}_{}", op.to_lowercase(), self.nodes.len());
        let value = format!("{name}:0");
        let bytes = bytes.max(16).next_multiple_of(16);
        let read: usize = inputs.iter().map(|i| self.sizes[*i]).sum();
        self.sizes.insert(value.clone(), bytes);
        self.nodes.push(NodeSpec {
            name,
            op: op.to_string(),
            inputs: inputs.iter().map(|i| (*i).clone()).collect(),
            outputs: vec![ValueSpec {
                name: value.clone(),
                bytes,
            }],
            estimate_ns: Some(estimate_ns(read, bytes)),
            in_place: None,
        });
        value
    }

    /// A square backbone: `stages` stages from `side` pixels, each of 1 to `blocks` blocks;
    /// returns each stage's output.
    fn backbone(&mut self, input: &String, side: usize, stages: usize, blocks: usize) -> Vec<String> {
        self.backbone_rect(input, side, side, stages, blocks)
    }

    fn backbone_rect(&mut self, input: &String, h: usize, w: usize, stages: usize, blocks: usize) -> Vec<String> {
        let mut channels = 16 << self.below(3);
        let (mut h, mut w) = (h / 2, w / 2);
        let mut x = self.node("Conv", &[input], channels * h * w * 4);
        let mut outs = Vec::new();
        for _ in 0..stages {
            // Down: half the side, twice the channels.
            channels *= 2;
            (h, w) = ((h / 2).max(1), (w / 2).max(1));
            x = self.node("Conv", &[&x], channels * h * w * 4);
            for _ in 0..1 + self.below(blocks) {
                x = match self.below(4) {
                    0 => self.inception(&x),
                    _ => self.residual(&x, channels),
                };
            }
            outs.push(x.clone());
        }
        outs
    }

    /// conv, activation, conv (sometimes rescaled by a squeeze-excitation), add with the block's
    /// input (which waits: a skip connection).
    fn residual(&mut self, x: &String, channels: usize) -> String {
        let bytes = self.sizes[x];
        let expand = 1 + self.below(4); // a bottleneck's wider middle, sometimes
        let a = self.node("Conv", &[x], bytes * expand);
        let a = self.node("Relu", &[&a], bytes * expand);
        let mut b = self.node("Conv", &[&a], bytes);
        if self.below(3) == 0 {
            // Squeeze-excitation: a vector per channel, a few hundred bytes to a few KiB.
            let s = self.node("GlobalPool", &[&b], channels * 4);
            let s = self.node("Gemm", &[&s], channels);
            let s = self.node("Gemm", &[&s], channels * 4);
            let s = self.node("Sigmoid", &[&s], channels * 4);
            b = self.node("Mul", &[&b, &s], bytes);
        }
        self.node("Add", &[x, &b], bytes)
    }

    /// 2-4 branches of different depths and widths, joined by a concat.
    fn inception(&mut self, x: &String) -> String {
        let bytes = self.sizes[x];
        let branches = 2 + self.below(3);
        let mut ends = Vec::new();
        for _ in 0..branches {
            let mut y = x.clone();
            for _ in 0..1 + self.below(3) {
                y = self.node("Conv", &[&y], bytes / branches);
            }
            ends.push(y);
        }
        let refs: Vec<&String> = ends.iter().collect();
        let total: usize = ends.iter().map(|e| self.sizes[e]).sum();
        self.node("Concat", &refs, total)
    }

    /// Top-down merges of the stage outputs, one output per scale.
    fn fpn(&mut self, stages: &[String]) -> Vec<String> {
        let width = 64 << self.below(3);
        // Laterals first, as detectors compute them: every stage's projection waits.
        let laterals: Vec<String> = stages
            .iter()
            .map(|s| {
                let pixels = self.sizes[s] / 4 / 16; // channels are at least 16
                self.node("Conv", &[s], width * pixels.max(1) * 4 / 8)
            })
            .collect();
        let mut top = laterals.last().expect("at least two stages").clone();
        let mut outs = vec![self.node("Conv", &[&top], self.sizes[&top])];
        for lateral in laterals.iter().rev().skip(1) {
            let up = self.node("Resize", &[&top], self.sizes[lateral]);
            top = self.node("Add", &[&up, lateral], self.sizes[lateral]);
            outs.push(self.node("Conv", &[&top], self.sizes[&top]));
        }
        outs
    }

    /// `layers` encoder layers over `tokens` × `hidden`.
    fn encoder(&mut self, input: &String, tokens: usize, hidden: usize, layers: usize) -> String {
        let heads = [2, 4, 8, 12][self.below(4)];
        let act = tokens * hidden * 4;
        let mut x = self.node("Reshape", &[input], act);
        for _ in 0..layers {
            let n = self.node("LayerNorm", &[&x], act);
            let (q, k, v) = (
                self.node("MatMul", &[&n], act),
                self.node("MatMul", &[&n], act),
                self.node("MatMul", &[&n], act),
            );
            let scores = self.node("MatMul", &[&q, &k], tokens * tokens * heads * 4);
            let p = self.node("Softmax", &[&scores], tokens * tokens * heads * 4);
            let ctx = self.node("MatMul", &[&p, &v], act);
            let o = self.node("MatMul", &[&ctx], act);
            x = self.node("Add", &[&x, &o], act);
            let n = self.node("LayerNorm", &[&x], act);
            let up = self.node("MatMul", &[&n], act * 4);
            let up = self.node("Gelu", &[&up], act * 4);
            let down = self.node("MatMul", &[&up], act);
            x = self.node("Add", &[&x, &down], act);
        }
        x
    }

    /// A small classification or regression head.
    fn head(&mut self, x: &String) -> String {
        let pooled = self.node("GlobalPool", &[x], (self.sizes[x] / 64).max(64));
        let classes = 10 + self.below(1000);
        self.node("Gemm", &[&pooled], 4 * classes)
    }
}
