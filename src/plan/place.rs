//! Offsets for a plan's groups (values that share one block: an in-place chain, or one value).
//!
//! A placement takes the groups in some order and puts each in the tightest gap left between the
//! groups already placed that it conflicts with, or above them all (best fit). The order decides
//! the arena. Greedy by size (largest first, as TFLite) is the usual choice and often reaches the
//! lower bound, the most bytes live at any step; where it does not, a better order usually
//! exists. So:
//! 1. four greedy orders (largest first, longest-lived first, largest bytes × lifetime first,
//!    earliest first); the first wins ties, so a plan is never larger than greedy by size;
//! 2. if the best is above the lower bound, a search over orders: take the group whose block
//!    reaches the arena's top and move it earlier in the order (it was placed too late to find a
//!    low gap), place again, keep the best. Randomized with a fixed seed, so a graph always gets
//!    the same plan; it stops at the bound, after a run of placements that find nothing better,
//!    or after a number of placements that keeps planning about 100 ms for 1,000 nodes at most.
//!
//! Conflicts are computed once, as lists per group, so a placement costs the sum of the lists,
//! not the square of the group count.

/// Work the search may do, in groups and conflict-list entries visited (a placement visits every
/// group and every list): so the number of placements shrinks as the graph grows.
pub(super) const SEARCH_WORK: usize = 10_000_000;

/// The search also stops after this many placements in a row without a better arena: most of
/// what it finds, it finds early, and a bound out of reach (parallel-safe plans rarely reach the
/// sequential one) would otherwise cost the whole budget every time.
const PATIENCE: usize = 300;

/// What a placement works on: per group its bytes (aligned) and the groups it conflicts with.
pub(super) struct Groups {
    pub bytes: Vec<u64>,
    pub conflicts: Vec<Vec<usize>>,
}

impl Groups {
    /// Groups of these `bytes`; `conflict(a, b)` says whether two may be live at once, and
    /// `maybe(a, b)` is a cheap test that is false only where `conflict` is (spans that do not
    /// overlap, for a sequential plan).
    pub(super) fn new(
        bytes: Vec<u64>,
        maybe: &dyn Fn(usize, usize) -> bool,
        conflict: &dyn Fn(usize, usize) -> bool,
    ) -> Groups {
        let n = bytes.len();
        let mut conflicts = vec![Vec::new(); n];
        for a in 0..n {
            for b in a + 1..n {
                if maybe(a, b) && conflict(a, b) {
                    conflicts[a].push(b);
                    conflicts[b].push(a);
                }
            }
        }
        Groups { bytes, conflicts }
    }

    /// Groups of these `bytes` live over `spans` (inclusive steps of one order): two conflict
    /// when their spans overlap. A sweep over the spans finds the pairs, so a long graph costs
    /// its conflicts, not the square of its values.
    pub(super) fn of_intervals(bytes: Vec<u64>, spans: &[(u32, u32)]) -> Groups {
        let n = bytes.len();
        let mut by_start: Vec<usize> = (0..n).collect();
        by_start.sort_unstable_by_key(|&g| spans[g].0);
        let mut conflicts = vec![Vec::new(); n];
        let mut active: Vec<usize> = Vec::new();
        for g in by_start {
            active.retain(|&a| spans[a].1 >= spans[g].0);
            for &a in &active {
                conflicts[a].push(g);
                conflicts[g].push(a);
            }
            active.push(g);
        }
        Groups { bytes, conflicts }
    }

    /// Each group's offset, and the arena they need, placing groups in `order`.
    fn place_in_order(&self, order: &[usize], offset: &mut [u64], placed: &mut [bool]) -> u64 {
        placed.iter_mut().for_each(|p| *p = false);
        let mut taken: Vec<(u64, u64)> = Vec::new();
        let mut arena = 0;
        for &i in order {
            let need = self.bytes[i];
            taken.clear();
            taken.extend(
                self.conflicts[i]
                    .iter()
                    .filter(|&&j| placed[j])
                    .map(|&j| (offset[j], offset[j] + self.bytes[j])),
            );
            taken.sort_unstable();
            let (mut best, mut best_waste) = (None, u64::MAX);
            let mut cursor = 0u64;
            for &(s, e) in &taken {
                if s >= cursor + need && s - cursor - need < best_waste {
                    best = Some(cursor);
                    best_waste = s - cursor - need;
                }
                cursor = cursor.max(e);
            }
            offset[i] = best.unwrap_or(cursor);
            placed[i] = true;
            arena = arena.max(offset[i] + need);
        }
        arena
    }
}

/// Offsets for `groups`, their lifetimes along the plan's order being `spans` (for the greedy
/// orders), no arena below `bound` being possible: the best of the greedy orders, then of the
/// search, with up to `search_work` of work (see [`SEARCH_WORK`]), if they are above `bound`.
pub(super) fn place(groups: &Groups, spans: &[(u32, u32)], bound: u64, search_work: usize) -> Vec<u64> {
    let n = groups.bytes.len();
    let bytes = &groups.bytes;
    let life = |g: usize| u64::from(spans[g].1.saturating_sub(spans[g].0)) + 1;
    let by = |key: &dyn Fn(usize) -> (u64, u64)| {
        let mut order: Vec<usize> = (0..n).collect();
        order.sort_by_key(|&g| (key(g), g));
        order
    };
    let orders = [
        by(&|g| (u64::MAX - bytes[g], 0)),
        by(&|g| (u64::MAX - life(g), u64::MAX - bytes[g])),
        by(&|g| (u64::MAX - bytes[g].saturating_mul(life(g)), 0)),
        by(&|g| (u64::from(spans[g].0), u64::MAX - bytes[g])),
    ];
    let (mut offset, mut placed) = (vec![0u64; n], vec![false; n]);
    let mut best: Option<(u64, Vec<u64>, Vec<usize>)> = None;
    for order in orders {
        let arena = groups.place_in_order(&order, &mut offset, &mut placed);
        match &best {
            Some((b, _, _)) if *b <= arena => {}
            _ => best = Some((arena, offset.clone(), order)),
        }
    }
    let Some((mut best_arena, mut best_offsets, best_order)) = best else {
        return Vec::new();
    };
    // The search: from the best greedy order, move a group that reaches the top earlier.
    let mut order = best_order;
    let mut rng = Rng(0x9E37_79B9_7F4A_7C15 ^ n as u64);
    let mut arena = best_arena;
    offset.copy_from_slice(&best_offsets);
    let mut position = vec![0usize; n];
    let work = n + groups.conflicts.iter().map(Vec::len).sum::<usize>();
    let mut since_better = 0;
    for _ in 0..search_work / work.max(1) {
        if best_arena <= bound || since_better == PATIENCE {
            break;
        }
        since_better += 1;
        // The groups whose blocks end at the top: one of them moves.
        for (p, &g) in order.iter().enumerate() {
            position[g] = p;
        }
        let tops: Vec<usize> = (0..n).filter(|&g| offset[g] + bytes[g] == arena).collect();
        let g = tops[rng.below(tops.len())];
        let from = position[g];
        if from == 0 {
            // Already first: shake the order instead, swapping two random groups.
            let (a, b) = (rng.below(n), rng.below(n));
            order.swap(a, b);
        } else {
            let to = rng.below(from);
            order[to..=from].rotate_right(1);
        }
        arena = groups.place_in_order(&order, &mut offset, &mut placed);
        if arena < best_arena {
            best_arena = arena;
            best_offsets.copy_from_slice(&offset);
            since_better = 0;
        }
    }
    best_offsets
}

/// The most bytes live at once along the plan's order: no placement does better. Groups are
/// live over their `spans` (inclusive).
pub(super) fn lower_bound(bytes: &[u64], spans: &[(u32, u32)]) -> u64 {
    // Steps as u64: a graph output lives to the end, `u32::MAX`.
    let mut events: Vec<(u64, bool, u64)> = Vec::with_capacity(2 * bytes.len());
    for (g, &(start, end)) in spans.iter().enumerate() {
        events.push((u64::from(start), false, bytes[g]));
        events.push((u64::from(end) + 1, true, bytes[g]));
    }
    // A group live over [s, e] leaves at e + 1, before any group that arrives at e + 1.
    events.sort_unstable_by_key(|&(at, ends, _)| (at, !ends));
    let (mut live, mut most) = (0u64, 0u64);
    for (_, ends, b) in events {
        match ends {
            true => live -= b,
            false => {
                live += b;
                most = most.max(live);
            }
        }
    }
    most
}

/// A small deterministic generator (xorshift64*): the search must make the same plan every time.
struct Rng(u64);

impl Rng {
    fn below(&mut self, n: usize) -> usize {
        self.0 ^= self.0 >> 12;
        self.0 ^= self.0 << 25;
        self.0 ^= self.0 >> 27;
        (self.0.wrapping_mul(0x2545_F491_4F6C_DD1D) >> 32) as usize % n.max(1)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_bound_counts_what_is_live_at_one_step() {
        // [0,1] 10 bytes, [1,2] 20, [3,3] 5: steps 1 holds 30.
        assert_eq!(lower_bound(&[10, 20, 5], &[(0, 1), (1, 2), (3, 3)]), 30);
        // Back to back, never together: the largest.
        assert_eq!(lower_bound(&[10, 20], &[(0, 0), (1, 1)]), 20);
        // A graph output lives to the end of the order.
        assert_eq!(lower_bound(&[10, 20, 5], &[(0, u32::MAX), (1, 2), (3, u32::MAX)]), 30);
    }

    #[test]
    fn the_sweep_finds_the_same_conflicts_as_every_pair() {
        let spans: Vec<(u32, u32)> = (0..60u32).map(|i| (i * 7 % 23, i * 7 % 23 + i % 5)).collect();
        let overlap = |a: usize, b: usize| spans[a].0 <= spans[b].1 && spans[b].0 <= spans[a].1;
        let mut swept = Groups::of_intervals(vec![1; 60], &spans).conflicts;
        let mut paired = Groups::new(vec![1; 60], &|_, _| true, &overlap).conflicts;
        for list in swept.iter_mut().chain(paired.iter_mut()) {
            list.sort_unstable();
        }
        assert_eq!(swept, paired);
    }

    #[test]
    fn the_search_reaches_the_bound_where_greedy_orders_do_not() {
        // Intervals where largest-first leaves a hole: A [0,1] 2, B [1,2] 1, C [2,3] 2,
        // D [0,0] 1, E [3,3] 1. Bound: 3 (steps 0, 1, 2 and 3 each hold 3).
        let spans = [(0, 1), (1, 2), (2, 3), (0, 0), (3, 3)];
        let bytes = vec![2, 1, 2, 1, 1];
        let overlap = |a: usize, b: usize| spans[a].0 <= spans[b].1 && spans[b].0 <= spans[a].1;
        let groups = Groups::new(bytes.clone(), &|_, _| true, &overlap);
        let bound = lower_bound(&bytes, &spans);
        assert_eq!(bound, 3);
        let offsets = place(&groups, &spans, bound, SEARCH_WORK);
        let arena = (0..5).map(|g| offsets[g] + bytes[g]).max().unwrap();
        assert_eq!(arena, bound, "offsets {offsets:?}");
        for a in 0..5 {
            for b in a + 1..5 {
                let apart = offsets[a] + bytes[a] <= offsets[b] || offsets[b] + bytes[b] <= offsets[a];
                assert!(!overlap(a, b) || apart, "{a} and {b} are live together and share bytes");
            }
        }
    }
}
