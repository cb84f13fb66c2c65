//! Memory admission that cannot give up on a limit some order meets: the banker's algorithm over
//! one safe completion order.
//!
//! The model. Running the graph alone in an order σ (the graph's [lowest live order]) holds
//! `live_σ(k)` bytes while its k-th node runs; its peak is the max-live bound of σ. A run with a
//! limit `L` at or above that peak could always finish by following σ. With several threads,
//! nodes start out of σ's order, and their outputs may then sit in memory while σ's own peak
//! comes around. Call the nodes started so far `S`, the first position of σ not started the
//! *frontier* `f`, and the nodes of `S` past the frontier `O` (started out of order). If the
//! run stopped starting nodes now, let its running nodes finish and went on in σ's order, each
//! later step `k` would hold at most
//!
//! ```text
//! live_σ(k) + X(k),   X(k) = the output bytes of the nodes of O that σ places after k
//! ```
//!
//! (it holds the same values σ holds, plus outputs made early and not freed yet; values freed
//! early only help).
//! The state is *safe* when `live_σ(k) + X(k) <= L` for every `k` ≥ `f`: then that continuation
//! fits. The rule keeps every state safe:
//! - the frontier node σ\[f\] may start whenever its outputs fit now (`live + need <= L`): it
//!   moves the frontier and leaves `X` as it was;
//! - any other node v, at position `p > f`, may start only if, besides fitting now, `need`
//!   fits in the slack `L - live_σ(k) - X(k)` of every step `f <= k < p`; starting it adds
//!   `need` to `X` over those steps, and freeing one of its values takes that value's bytes
//!   back out (its readers have all run, so no continuation holds it any more).
//!
//! So progress is guaranteed: when nothing runs, σ\[f\]'s producers have all finished, it is ready,
//! and the safe continuation says its outputs fit. At any `L >= peak(σ)`, on any number of
//! threads, the run completes. Below that bound nothing is guaranteed and only the first rule's
//! fit applies (the run may still fail with a clear `MemoryLimit` error, never hang).
//!
//! The slack is kept in a segment tree with range add and range minimum, so each decision is
//! O(log n). Outputs of dynamic size are unknown in advance and outside the model: they are
//! granted while they fit the limit (see `exec`), and can take away the guarantee.
//!
//! [lowest live order]: crate::graph::memory::LiveOrder::lowest

use crate::graph::memory::LiveOrder;
use crate::graph::Graph;

/// One run's admission decisions under a memory limit. Not thread-safe: the run keeps it under
/// the same lock as its list of waiting nodes.
pub struct Admission<'g> {
    limit: u64,
    /// `None` when the limit is below the safe order's peak: only the plain fit applies.
    safe: Option<SafeOrder<'g>>,
}

struct SafeOrder<'g> {
    order: &'g LiveOrder,
    /// Per position of the order: started (or a graph input, which never runs).
    started: Vec<bool>,
    /// Per position: started ahead of the frontier, its outputs counted in `X`.
    ahead: Vec<bool>,
    /// The first position not started.
    frontier: usize,
    /// Per position k: `L - live_σ(k) - X(k)`.
    slack: MinAddTree,
}

impl<'g> Admission<'g> {
    /// Admission for one run of `graph` under `limit` bytes (> 0). `concurrent`: nodes may
    /// start out of order (an executor runs them); a run that starts them one at a time in a
    /// fixed order needs only the plain fit, and its order decides whether it completes.
    pub fn new(graph: &'g Graph, limit: u64, concurrent: bool) -> Admission<'g> {
        let order = graph.lowest_live_order();
        let safe = (concurrent && limit >= order.peak).then(|| {
            let started: Vec<bool> = order.order.iter().map(|&v| graph.is_graph_input(v)).collect();
            let frontier = started.iter().position(|&s| !s).unwrap_or(started.len());
            let slack = order.live.iter().map(|&live| clamp(limit - live)).collect::<Vec<_>>();
            SafeOrder {
                order,
                ahead: vec![false; started.len()],
                started,
                frontier,
                slack: MinAddTree::new(&slack),
            }
        });
        Admission { limit, safe }
    }

    /// Whether the run is sure to complete under this limit (outputs of dynamic size aside).
    pub fn guaranteed(&self) -> bool {
        self.safe.is_some()
    }

    /// The limit, in bytes.
    pub fn limit(&self) -> u64 {
        self.limit
    }

    /// Whether `node`, whose outputs need `need` bytes, may start while the run holds `live`
    /// bytes. If so, it counts as started from now on (the caller reserves the bytes).
    pub fn try_admit(&mut self, node: u32, need: u64, live: u64) -> bool {
        if live.saturating_add(need) > self.limit {
            return false;
        }
        let Some(safe) = &mut self.safe else { return true };
        let p = safe.order.position[node as usize] as usize;
        debug_assert!(!safe.started[p], "node {node} admitted twice");
        if p > safe.frontier {
            if safe.slack.min(safe.frontier, p) < clamp(need) {
                return false;
            }
            // Over [0, p): positions below the frontier are never asked about again.
            safe.slack.add(0, p, -clamp(need));
            safe.ahead[p] = true;
        }
        safe.started[p] = true;
        while safe.frontier < safe.started.len() && safe.started[safe.frontier] {
            safe.frontier += 1;
        }
        true
    }
}

impl Admission<'_> {
    /// A value of `producer` (`bytes`: its static size) was freed: if the producer started ahead
    /// of the frontier, the slack it took for that value comes back.
    pub fn release(&mut self, producer: u32, bytes: u64) {
        let Some(safe) = &mut self.safe else { return };
        let p = safe.order.position[producer as usize] as usize;
        if safe.ahead[p] && bytes > 0 {
            safe.slack.add(0, p, clamp(bytes));
        }
    }
}

/// Bytes as a signed tree value; no graph gets near the cap (a quarter of i64's range, so
/// sums of a few cannot overflow).
fn clamp(bytes: u64) -> i64 {
    bytes.min(i64::MAX as u64 / 4) as i64
}

/// Range add and range minimum over a fixed array, each O(log n). A node's `add` applies to its
/// whole range and is not pushed down; `min` of a node includes its own `add`.
struct MinAddTree {
    len: usize,
    min: Vec<i64>,
    add: Vec<i64>,
}

impl MinAddTree {
    fn new(values: &[i64]) -> MinAddTree {
        let len = values.len().max(1);
        let mut t = MinAddTree {
            len,
            min: vec![i64::MAX; 4 * len],
            add: vec![0; 4 * len],
        };
        t.build(1, 0, len, values);
        t
    }

    fn build(&mut self, at: usize, lo: usize, hi: usize, values: &[i64]) {
        if hi - lo == 1 {
            self.min[at] = values.get(lo).copied().unwrap_or(i64::MAX);
            return;
        }
        let mid = (lo + hi) / 2;
        self.build(2 * at, lo, mid, values);
        self.build(2 * at + 1, mid, hi, values);
        self.min[at] = self.min[2 * at].min(self.min[2 * at + 1]);
    }

    /// Adds `delta` to every position in `[from, to)`.
    fn add(&mut self, from: usize, to: usize, delta: i64) {
        self.add_in(1, 0, self.len, from, to, delta);
    }

    fn add_in(&mut self, at: usize, lo: usize, hi: usize, from: usize, to: usize, delta: i64) {
        if to <= lo || hi <= from {
            return;
        }
        if from <= lo && hi <= to {
            self.add[at] += delta;
            self.min[at] = self.min[at].saturating_add(delta);
            return;
        }
        let mid = (lo + hi) / 2;
        self.add_in(2 * at, lo, mid, from, to, delta);
        self.add_in(2 * at + 1, mid, hi, from, to, delta);
        self.min[at] = self.add[at].saturating_add(self.min[2 * at].min(self.min[2 * at + 1]));
    }

    /// The smallest value in `[from, to)` (`i64::MAX` for an empty range).
    fn min(&self, from: usize, to: usize) -> i64 {
        self.min_in(1, 0, self.len, from, to)
    }

    fn min_in(&self, at: usize, lo: usize, hi: usize, from: usize, to: usize) -> i64 {
        if to <= lo || hi <= from {
            return i64::MAX;
        }
        if from <= lo && hi <= to {
            return self.min[at];
        }
        let mid = (lo + hi) / 2;
        let below = self
            .min_in(2 * at, lo, mid, from, to)
            .min(self.min_in(2 * at + 1, mid, hi, from, to));
        if below == i64::MAX {
            below
        } else {
            below.saturating_add(self.add[at])
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_tree_matches_a_plain_array() {
        let mut x: u64 = 0x2545_F491_4F6C_DD1D;
        let mut next = || {
            x ^= x << 13;
            x ^= x >> 7;
            x ^= x << 17;
            x
        };
        for len in [1usize, 2, 3, 7, 64, 100] {
            let mut plain: Vec<i64> = (0..len).map(|_| (next() % 1000) as i64).collect();
            let mut tree = MinAddTree::new(&plain);
            for _ in 0..500 {
                let (a, b) = ((next() % len as u64) as usize, (next() % (len as u64 + 1)) as usize);
                let (from, to) = (a.min(b), a.max(b));
                if next() % 2 == 0 {
                    let delta = (next() % 200) as i64 - 100;
                    tree.add(from, to, delta);
                    plain[from..to].iter_mut().for_each(|v| *v += delta);
                } else {
                    let want = plain[from..to].iter().copied().min().unwrap_or(i64::MAX);
                    assert_eq!(tree.min(from, to), want, "len {len}, [{from}, {to})");
                }
            }
        }
    }
}
