//! The simulator's ready set: ready nodes in policy order, with "the most critical one that fits
//! a budget" in one descent of a min-tree.

use crate::graph::Graph;
use crate::sched::{Policy, Priorities};

/// Tree entry of a slot with no ready node: fits no budget.
const EMPTY: u64 = u64::MAX;
/// A budget every ready node fits (node outputs are at most `isize::MAX` bytes).
pub(super) const FITS_ANY: u64 = u64::MAX - 1;

/// Ready nodes in policy order. Each node gets a slot when it becomes ready (its rank, or the
/// next readiness sequence number under FIFO, ties in topological order); a min-tree over the
/// slots holds the bytes each node's outputs need, [`EMPTY`] for free slots.
pub(super) struct ReadySet<'g> {
    /// Implicit binary tree: leaves at `leaves..2 * leaves`, each inner entry the min of its two.
    tree: Vec<u64>,
    leaves: usize,
    node_at: Vec<u32>,
    /// FIFO only: topological position per node; `None` orders by rank.
    position: Option<&'g [u32]>,
    next_seq: u32,
}

impl<'g> ReadySet<'g> {
    pub(super) fn new(graph: &'g Graph, prio: &Priorities, policy: Policy) -> Self {
        let n = graph.node_count();
        let leaves = n.next_power_of_two().max(1);
        let position = (policy == Policy::Fifo).then(|| graph.topological_positions());
        debug_assert_eq!(prio.rank.len(), n);
        ReadySet {
            tree: vec![EMPTY; 2 * leaves],
            leaves,
            node_at: vec![0; n],
            position,
            next_seq: 0,
        }
    }

    /// Makes the nodes of `batch`, which became ready at the same instant, ready; empties it.
    pub(super) fn add(&mut self, batch: &mut Vec<u32>, rank: &[u32], need: impl Fn(u32) -> u64) {
        if let Some(position) = self.position {
            batch.sort_unstable_by_key(|&v| position[v as usize]);
        }
        for &node in batch.iter() {
            let slot = match self.position {
                Some(_) => {
                    self.next_seq += 1;
                    self.next_seq - 1
                }
                None => rank[node as usize],
            } as usize;
            self.node_at[slot] = node;
            self.set(slot, need(node));
        }
        batch.clear();
    }

    /// The first slot in policy order whose node needs at most `budget` bytes.
    pub(super) fn first_fitting(&self, budget: u64) -> Option<usize> {
        if self.tree[1] > budget {
            return None;
        }
        let mut i = 1;
        while i < self.leaves {
            i *= 2;
            if self.tree[i] > budget {
                i += 1;
            }
        }
        Some(i - self.leaves)
    }

    /// Returns a node [`take`](Self::take) took to its slot.
    pub(super) fn put_back(&mut self, slot: usize, node: u32, bytes: u64) {
        self.node_at[slot] = node;
        self.set(slot, bytes);
    }

    /// Removes the node in `slot`: (node, bytes its outputs need).
    pub(super) fn take(&mut self, slot: usize) -> (u32, u64) {
        let bytes = self.tree[self.leaves + slot];
        self.set(slot, EMPTY);
        (self.node_at[slot], bytes)
    }

    fn set(&mut self, slot: usize, value: u64) {
        let mut i = self.leaves + slot;
        self.tree[i] = value;
        while i > 1 {
            i /= 2;
            let min = self.tree[2 * i].min(self.tree[2 * i + 1]);
            if self.tree[i] == min {
                break; // ancestors already agree
            }
            self.tree[i] = min;
        }
    }
}
