//! Measuring kernels: each reads every input byte and checks it against the checksum its
//! producer recorded, writes every output byte with a pattern derived from its inputs, and
//! optionally spins to its estimated duration. A buffer handed to a new owner while a reader
//! still needs it changes under the reader, and the run fails naming the node.

use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::Arc;
use std::time::{Duration, Instant};

use graphsched::{Kernel, KernelCtx, ValueRef};

/// A fast checksum over words; never 0, so 0 can mean "not recorded".
pub fn checksum(bytes: &[u8]) -> u64 {
    let mut h = 0x243F_6A88_85A3_08D3u64;
    let mut words = bytes.chunks_exact(8);
    for w in &mut words {
        h = (h ^ u64::from_le_bytes(w.try_into().unwrap()))
            .wrapping_mul(0x100_0000_01b3)
            .rotate_left(29);
    }
    for &b in words.remainder() {
        h = (h ^ b as u64).wrapping_mul(0x100_0000_01b3);
    }
    h | 1
}

/// Fills `out` with a pattern seeded by `seed`, a word at a time.
pub fn fill(out: &mut [u8], seed: u64) {
    let mut x = seed | 1;
    let mut words = out.chunks_exact_mut(8);
    for w in &mut words {
        x ^= x << 13;
        x ^= x >> 7;
        x ^= x << 17;
        w.copy_from_slice(&x.to_le_bytes());
    }
    for b in words.into_remainder() {
        *b = x as u8;
    }
}

/// The checksum of every value, recorded by its producer (0: none yet), indexed by
/// `(node, output)` through the graph's value index.
pub struct Ledger {
    sums: Vec<AtomicU64>,
    /// Node id of the first value of each node: value index = base[node] + output.
    base: Vec<u32>,
}

impl Ledger {
    /// A ledger for a graph with `value_counts[node]` outputs per node.
    pub fn new(value_counts: &[u32]) -> Arc<Self> {
        let mut base = Vec::with_capacity(value_counts.len());
        let mut total = 0u32;
        for &c in value_counts {
            base.push(total);
            total += c;
        }
        Arc::new(Ledger {
            sums: (0..total).map(|_| AtomicU64::new(0)).collect(),
            base,
        })
    }

    fn slot(&self, v: ValueRef) -> &AtomicU64 {
        &self.sums[(self.base[v.node as usize] + v.output) as usize]
    }

    pub fn record(&self, v: ValueRef, sum: u64) {
        self.slot(v).store(sum, Ordering::Relaxed);
    }

    pub fn get(&self, v: ValueRef) -> Option<u64> {
        Some(self.slot(v).load(Ordering::Relaxed)).filter(|&s| s != 0)
    }

    /// A measuring kernel for a node reading `inputs`; spins to `spin` if given.
    pub fn kernel(self: &Arc<Self>, inputs: Vec<ValueRef>, spin: Option<Duration>) -> Kernel {
        let ledger = self.clone();
        Box::new(move |ctx: &mut KernelCtx<'_>| {
            let start = Instant::now();
            let node = ctx.node();
            let mut seed = node_seed(node);
            for (i, &v) in inputs.iter().enumerate() {
                seed = check_input(seed, i, ctx.input_bytes(i).expect("slot exists"), ledger.get(v))?;
            }
            for k in 0..ctx.num_outputs() {
                let sum = fill_output(ctx.output_bytes(k).expect("slot exists"), seed, k);
                ledger.record(ValueRef::new(node, k as u32), sum);
            }
            spin_until(start, spin);
            Ok(())
        })
    }
}

// One node's work, step by step, shared by the measuring kernels and by callers that replay the
// same work on memory of their own (the command line's `naive` strategy): the same bytes read,
// checked and written, so the two cost the same.

/// The seed a node's output pattern starts from, before its inputs are folded in.
pub fn node_seed(node: u32) -> u64 {
    (node as u64).wrapping_mul(0x9E37_79B9_7F4A_7C15)
}

/// Reads input `i` whole, checks it against the checksum its producer recorded (`want`, if any)
/// and folds its checksum into `seed`.
pub fn check_input(seed: u64, i: usize, bytes: &[u8], want: Option<u64>) -> Result<u64, String> {
    let got = checksum(bytes);
    if let Some(want) = want {
        if got != want {
            return Err(format!("input {i} changed after its producer wrote it (checksum {got:#x}, expected {want:#x}): its buffer was reused too early"));
        }
    }
    Ok(seed.rotate_left(7) ^ got)
}

/// Writes output `k` whole with the pattern of `seed` (the node's, inputs folded in) and returns
/// its checksum, for the ledger.
pub fn fill_output(out: &mut [u8], seed: u64, k: usize) -> u64 {
    fill(out, seed.wrapping_add(k as u64));
    checksum(out)
}

/// Spins until `spin` has passed since `start`, if given.
pub fn spin_until(start: Instant, spin: Option<Duration>) {
    if let Some(d) = spin {
        while start.elapsed() < d {
            std::hint::spin_loop();
        }
    }
}
