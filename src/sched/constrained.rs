//! Priorities with ordering constraints: edges between nodes that the graph leaves unordered,
//! which a scheduled plan (`plan::Mode::Scheduled`) adds so that values it lets share bytes are
//! never live at once. A run on such a plan follows these priorities: a constrained node becomes
//! ready only when its producers *and* the nodes it was ordered after have finished.

use super::Priorities;

impl Priorities {
    /// These priorities with `edges` (from, to) added to the successor lists and pending
    /// counts; ranks and bands stay as they are, so a simulation on the result starts every
    /// node in the order the unconstrained one did whenever the edges agree with that order.
    /// Duplicate edges count once. The caller guarantees the edges keep the graph acyclic.
    pub fn constrained(&self, edges: &[(u32, u32)]) -> Priorities {
        let n = self.weight.len();
        let mut edges = edges.to_vec();
        edges.sort_unstable();
        edges.dedup();
        let mut initial_pending = self.initial_pending.clone();
        let mut extra_start = vec![0u32; n + 1];
        for &(from, to) in &edges {
            extra_start[from as usize + 1] += 1;
            initial_pending[to as usize] += 1;
        }
        for v in 0..n {
            extra_start[v + 1] += extra_start[v];
        }
        // `edges` is sorted by `from`: each node's extra successors are one run of it.
        let extra = |v: usize| {
            edges[extra_start[v] as usize..extra_start[v + 1] as usize]
                .iter()
                .map(|e| e.1)
        };
        let mut succ_start = Vec::with_capacity(n + 1);
        let (mut succ, mut succ_by_level) = (Vec::new(), Vec::new());
        succ_start.push(0);
        for v in 0..n {
            let from = succ.len();
            let own = self.succ_start[v] as usize..self.succ_start[v + 1] as usize;
            succ.extend_from_slice(&self.succ[own.clone()]);
            succ.extend(extra(v));
            succ_by_level.extend_from_slice(&self.succ_by_level[own]);
            succ_by_level.extend(extra(v));
            // The graph's lists are in order already: only those that grew need a sort.
            if extra_start[v] != extra_start[v + 1] {
                succ[from..].sort_by_key(|&s| self.rank[s as usize]);
                succ_by_level[from..].sort_by_key(|&s| self.rank_by_level[s as usize]);
            }
            succ_start.push(succ.len() as u32);
        }
        let roots = self
            .roots
            .iter()
            .copied()
            .filter(|&r| initial_pending[r as usize] == 0)
            .collect();
        Priorities {
            weight: self.weight.clone(),
            work: self.work.clone(),
            kind: self.kind.clone(),
            bottom_level: self.bottom_level.clone(),
            top_level: self.top_level.clone(),
            slack: self.slack.clone(),
            critical_path_ns: self.critical_path_ns,
            critical_path: self.critical_path.clone(),
            total_work_ns: self.total_work_ns,
            operators: self.operators,
            defers: self.defers,
            unmeasured: self.unmeasured,
            rank: self.rank.clone(),
            band: self.band.clone(),
            rank_by_level: self.rank_by_level.clone(),
            band_by_level: self.band_by_level.clone(),
            initial_pending,
            roots,
            output_bytes: self.output_bytes.clone(),
            work_around: std::sync::OnceLock::new(),
            succ_start,
            succ,
            succ_by_level,
            basis: self.basis.clone(),
            kinds_basis: self.kinds_basis.clone(),
        }
    }
}

#[cfg(test)]
mod tests {
    use crate::graph::GraphBuilder;
    use crate::NodeDesc;

    #[test]
    fn an_edge_holds_its_node_back_until_the_other_finishes() {
        let mut b = GraphBuilder::new();
        let op = |name: &str| {
            NodeDesc::new(name, "Op", Box::new(|_| Ok(())))
                .output(8)
                .estimate_ns(10)
        };
        let a = b.add_node(op("a")).unwrap();
        let c = b.add_node(op("c")).unwrap();
        let g = b.finalize().unwrap();
        let p = g.priorities();
        assert_eq!(p.roots.len(), 2);
        let q = p.constrained(&[(a, c), (a, c)]);
        assert_eq!(q.roots, [a], "c waits for a");
        assert_eq!(
            (q.initial_pending[c as usize], q.successors(a)),
            (1, &[c][..]),
            "one edge, once"
        );
        assert_eq!(
            q.ranks(super::super::Policy::BottomLevel),
            p.ranks(super::super::Policy::BottomLevel)
        );
    }
}
