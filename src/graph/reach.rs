//! Reachability: for each node, the set of its strict ancestors, one bitset per node (n² / 8
//! bytes). The parallel-safe planner asks "is a before b"; the makespan bound sums each set's work.

use super::Graph;

/// The strict ancestors of every node of a DAG: one bitset row of `n` bits per node. Immutable
/// once built; its users keep it to graphs of thousands of nodes
/// ([`MAX_EXACT_NODES`](crate::sched::MAX_EXACT_NODES),
/// [`MAX_PARALLEL_SAFE_NODES`](crate::plan::MAX_PARALLEL_SAFE_NODES)).
pub struct Ancestors {
    words: usize,
    bits: Vec<u64>,
}

impl Ancestors {
    /// The ancestor sets of `n` nodes, given a topological `order` and each node's consumers
    /// (`succ`, duplicates allowed).
    pub fn new<'a>(n: usize, order: &[u32], succ: impl Fn(u32) -> &'a [u32]) -> Ancestors {
        let words = n.div_ceil(64);
        let mut bits = vec![0u64; n * words];
        let mut row = vec![0u64; words];
        for &v in order {
            // ancestors(s) |= ancestors(v) | {v} for every consumer s: v's set is complete, as
            // every producer of v comes before it in the order.
            let v = v as usize;
            row.copy_from_slice(&bits[v * words..(v + 1) * words]);
            row[v / 64] |= 1 << (v % 64);
            for &s in succ(v as u32) {
                let s = s as usize;
                for (d, r) in bits[s * words..(s + 1) * words].iter_mut().zip(&row) {
                    *d |= r;
                }
            }
        }
        Ancestors { words, bits }
    }

    /// The ancestor sets of a finalized graph's nodes.
    pub fn of_graph(graph: &Graph) -> Ancestors {
        Ancestors::new(graph.node_count(), graph.topological_order(), |v| graph.successors(v))
    }

    /// Whether `a` is a strict ancestor of `b`.
    pub fn before(&self, a: u32, b: u32) -> bool {
        self.bits[b as usize * self.words + a as usize / 64] >> (a % 64) & 1 == 1
    }

    /// The strict ancestors of `v`, in id order.
    pub fn of(&self, v: u32) -> impl Iterator<Item = u32> + '_ {
        let row = &self.bits[v as usize * self.words..(v as usize + 1) * self.words];
        row.iter().enumerate().flat_map(|(w, &word)| {
            let mut word = word;
            std::iter::from_fn(move || {
                (word != 0).then(|| {
                    let bit = word.trailing_zeros();
                    word &= word - 1;
                    (w * 64) as u32 + bit
                })
            })
        })
    }
}
