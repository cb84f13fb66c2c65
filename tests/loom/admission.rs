//! `sched::Admission` (`src/sched/admission.rs`), its segment tree a plain array, and the
//! model-only check of the banker's invariant. Under the gate mutex, like the real one.

use super::Mutation;
use crate::Spec;

/// `sched::Admission`.
#[derive(Clone)]
pub struct Admission {
    limit: u64,
    mutation: Mutation,
    /// `None` below σ's peak: only the plain fit applies.
    safe: Option<SafeOrder>,
}

#[derive(Clone)]
struct SafeOrder {
    /// Per position of σ: started.
    started: Vec<bool>,
    /// Per position: started ahead of the frontier, its outputs counted in `X`.
    ahead: Vec<bool>,
    /// The first position not started.
    frontier: usize,
    /// Per position k: `L - live_σ(k) - X(k)`, X(k) the static bytes, not released yet, of the
    /// values of nodes started ahead and placed past k. Taking and giving back both cover every
    /// step before the producer, so this holds below the frontier too (where nothing reads it).
    slack: Vec<i64>,
}

impl Admission {
    pub fn new(spec: &Spec, mutation: Mutation) -> Admission {
        let n = spec.bytes.len();
        let safe = (spec.guaranteed() && mutation != Mutation::NoSlackCheck).then(|| SafeOrder {
            started: vec![false; n],
            ahead: vec![false; n],
            frontier: 0,
            slack: spec.live_sigma.iter().map(|&l| (spec.limit - l) as i64).collect(),
        });
        Admission {
            limit: spec.limit,
            mutation,
            safe,
        }
    }

    /// `Admission::try_admit`: whether `node` may start while the run holds `live` bytes; if so
    /// it counts as started.
    pub fn try_admit(&mut self, spec: &Spec, node: usize, need: u64, live: u64) -> bool {
        if live + need > self.limit {
            return false;
        }
        let Some(safe) = &mut self.safe else { return true };
        let p = spec.position[node];
        assert!(!safe.started[p], "node {node} admitted twice");
        if p > safe.frontier {
            // Broken on purpose by `SlackCheckShort`: the check misses the step before `p`.
            let to = if self.mutation == Mutation::SlackCheckShort {
                p - 1
            } else {
                p
            };
            // The tree's `min` of an empty range is `i64::MAX`.
            let min = safe.slack[safe.frontier..to].iter().copied().min().unwrap_or(i64::MAX);
            if min < need as i64 {
                return false;
            }
            // Over [0, p): positions below the frontier are never asked about again.
            safe.slack[..p].iter_mut().for_each(|s| *s -= need as i64);
            safe.ahead[p] = true;
        }
        safe.started[p] = true;
        while safe.frontier < safe.started.len() && safe.started[safe.frontier] {
            safe.frontier += 1;
        }
        true
    }

    /// `Admission::release`: a value of `producer` (`bytes`: its static size) was freed; if the
    /// producer started ahead of the frontier, the slack it took for that value comes back.
    pub fn release(&mut self, spec: &Spec, producer: usize, bytes: u64) {
        let Some(safe) = &mut self.safe else { return };
        let p = spec.position[producer];
        if safe.ahead[p] && bytes > 0 {
            safe.slack[..p].iter_mut().for_each(|s| *s += bytes as i64);
        }
    }

    /// Model-only: whether a value of `producer` gives slack back when freed (ghost counts).
    pub fn gives_back(&self, spec: &Spec, producer: usize) -> bool {
        self.safe
            .as_ref()
            .is_some_and(|safe| safe.ahead[spec.position[producer]])
    }

    /// Model-only check, after every change to the slack: the state stays safe, no step at or
    /// past the frontier has negative slack. This is what guarantees completion: at the frontier
    /// node's turn, the continuation in σ's order fits.
    pub fn assert_safe(&self) {
        let Some(safe) = &self.safe else { return };
        let f = safe.frontier;
        if let Some(k) = (f..safe.slack.len()).find(|&k| safe.slack[k] < 0) {
            panic!(
                "unsafe admission state: slack {} at step {k}, at or past the frontier {f}",
                safe.slack[k]
            );
        }
    }
}
