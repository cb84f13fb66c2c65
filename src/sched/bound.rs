//! Lower bounds on the makespan: what no schedule on `P` threads can beat, so that "wall time
//! over the bound" measures what a scheduler leaves on the table and nothing else.
//!
//! Three kinds of terms, each a valid bound on its own; the bound is their maximum:
//! - the critical path: the longest chain of estimates;
//! - work / P: all the work, spread perfectly;
//! - for every node `v`, **before v**: `v` cannot start before every ancestor has finished,
//!   which takes at least `work(ancestors of v) / P`; then the longest path from `v` (itself
//!   included) still has to run: `ceil(A(v) / P) + bottom_level(v)`. And its mirror, **after v**:
//!   `v` ends at `top_level(v) + w(v)` at the earliest, and all its descendants' work follows:
//!   `top_level(v) + w(v) + ceil(D(v) / P)`.
//!
//! The node terms matter where one long node (a pipeline's sink, a final reduction) must wait
//! for most of the work: there `max(critical path, work / P)` leaves one thread idle on paper.
//!
//! `A(v)` and `D(v)` are sums over exact ancestor sets, kept as bitsets: O(n² / 64) time and
//! memory, so only for graphs of at most [`MAX_EXACT_NODES`] nodes. Larger graphs get no node
//! terms: the bound is then the plain one, weaker but still valid.

use crate::graph::reach::Ancestors;

/// Graphs up to this many nodes get the ancestor and descendant terms (bitsets of 8 MiB at most).
pub const MAX_EXACT_NODES: usize = 8192;

/// Which term of the bound binds.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum BoundTerm {
    /// The longest chain of estimates.
    CriticalPath,
    /// All the work spread over the threads.
    Work,
    /// Node `v` waits for its ancestors' work, then its longest path runs.
    Before(u32),
    /// Node `v`'s earliest end, then its descendants' work.
    After(u32),
}

/// A lower bound on the makespan for one thread count, in estimated nanoseconds.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct MakespanBound {
    /// The bound: the largest term.
    pub makespan_lb_ns: u64,
    /// The term that gave it (the first found on ties, critical path first).
    pub binding: BoundTerm,
    /// The critical-path term.
    pub critical_path_ns: u64,
    /// All the work, not divided by the threads.
    pub work_ns: u64,
}

/// Per node: the work of its strict ancestors and of its strict descendants, exact for graphs of
/// at most [`MAX_EXACT_NODES`] nodes (empty otherwise). `succ(v)` lists `v`'s consumers (any
/// order, duplicates allowed).
pub(super) fn ancestor_and_descendant_work<'a>(
    weight: &[u64],
    succ: impl Fn(u32) -> &'a [u32],
) -> (Vec<u64>, Vec<u64>) {
    let n = weight.len();
    if n > MAX_EXACT_NODES || n == 0 {
        return (Vec::new(), Vec::new());
    }
    // A topological order, then ancestors(s) |= ancestors(v) | {v} along every edge.
    let order = topological_order(n, &succ);
    let reach = Ancestors::new(n, &order, succ);
    let (mut before, mut after) = (vec![0u64; n], vec![0u64; n]);
    for v in 0..n {
        for a in reach.of(v as u32) {
            let a = a as usize;
            before[v] = before[v].saturating_add(weight[a]);
            after[a] = after[a].saturating_add(weight[v]);
        }
    }
    (before, after)
}

/// The `n` nodes in an order where every node comes after its producers (Kahn's), from their
/// consumer lists (any order, duplicates allowed).
pub(super) fn topological_order<'a>(n: usize, succ: &impl Fn(u32) -> &'a [u32]) -> Vec<u32> {
    let mut indegree = vec![0u32; n];
    for v in 0..n as u32 {
        for &s in succ(v) {
            indegree[s as usize] += 1;
        }
    }
    let mut order: Vec<u32> = (0..n as u32).filter(|&v| indegree[v as usize] == 0).collect();
    let mut next = 0;
    while next < order.len() {
        let v = order[next];
        next += 1;
        for &s in succ(v) {
            indegree[s as usize] -= 1;
            if indegree[s as usize] == 0 {
                order.push(s);
            }
        }
    }
    order
}

/// The bound for `threads` threads from per-node figures (see the module docs). `before` and
/// `after` may be empty (no node terms).
pub(super) fn makespan_bound(
    threads: usize,
    weight: &[u64],
    work: &[u64],
    top_level: &[u64],
    bottom_level: &[u64],
    before: &[u64],
    after: &[u64],
) -> MakespanBound {
    let p = threads.max(1) as u64;
    let critical_path_ns = bottom_level.iter().copied().max().unwrap_or(0);
    let work_ns = work.iter().copied().fold(0u64, u64::saturating_add);
    let mut best = (critical_path_ns, BoundTerm::CriticalPath);
    if work_ns.div_ceil(p) > best.0 {
        best = (work_ns.div_ceil(p), BoundTerm::Work);
    }
    for v in 0..before.len().min(after.len()) {
        let ahead = before[v].div_ceil(p).saturating_add(bottom_level[v]);
        if ahead > best.0 {
            best = (ahead, BoundTerm::Before(v as u32));
        }
        let behind = top_level[v]
            .saturating_add(weight[v])
            .saturating_add(after[v].div_ceil(p));
        if behind > best.0 {
            best = (behind, BoundTerm::After(v as u32));
        }
    }
    MakespanBound {
        makespan_lb_ns: best.0,
        binding: best.1,
        critical_path_ns,
        work_ns,
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// A pipeline whose sink waits for everything: the sink's "before" term binds, above both
    /// the critical path and work / P.
    #[test]
    fn a_sink_after_all_the_work_binds() {
        // a, b, c (10 each, independent) -> sink (30).
        let weight = [10, 10, 10, 30];
        let succ = |v: u32| -> &'static [u32] {
            if v < 3 {
                &[3]
            } else {
                &[]
            }
        };
        let (before, after) = ancestor_and_descendant_work(&weight, succ);
        assert_eq!(
            (before.as_slice(), after.as_slice()),
            (&[0, 0, 0, 30][..], &[30, 30, 30, 0][..])
        );
        let (top, bottom) = ([0, 0, 0, 10], [40, 40, 40, 30]);
        let b = makespan_bound(2, &weight, &weight, &top, &bottom, &before, &after);
        // Critical path 40, work / 2 = 30; the sink cannot start before 15: 15 + 30 = 45.
        assert_eq!((b.makespan_lb_ns, b.binding), (45, BoundTerm::Before(3)));
        let plain = makespan_bound(2, &weight, &weight, &top, &bottom, &[], &[]);
        assert_eq!((plain.makespan_lb_ns, plain.binding), (40, BoundTerm::CriticalPath));
    }
}
