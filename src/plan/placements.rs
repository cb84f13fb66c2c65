//! Placements for callers that place blocks of their own (the pool's hints, `exec/hints.rs`):
//! the placement of each plan mode, as offsets for a list of values, without a `Plan` around it.

use super::scheduled::{self, Schedule};
use super::{disjoint, place, MAX_PARALLEL_SAFE_NODES};
use crate::graph::memory::lifetime;
use crate::graph::reach::Ancestors;
use crate::graph::Graph;
use crate::sched::Priorities;

/// Offsets for blocks of `bytes` live over `spans` (inclusive steps of one order), no two that
/// are live at once sharing a byte, and the bytes they need: the placement of sequential plans
/// (greedy orders, then up to `search_work` of search; see [`place`]), for callers that place
/// blocks of their own.
pub(crate) fn place_intervals(bytes: Vec<u64>, spans: &[(u32, u32)], search_work: usize) -> (Vec<u64>, u64) {
    let bound = place::lower_bound(&bytes, spans);
    let groups = place::Groups::of_intervals(bytes, spans);
    let offsets = place::place(&groups, spans, bound, search_work);
    let arena = (0..offsets.len())
        .map(|g| offsets[g] + groups.bytes[g])
        .max()
        .unwrap_or(0);
    (offsets, arena)
}

/// Offsets for `values` (statically sized, of `bytes` each), no two that may be live at once in
/// any order an executor picks sharing a byte (the parallel-safe rule), and the bytes they need;
/// `None` past [`MAX_PARALLEL_SAFE_NODES`] nodes. For callers that place blocks of their own.
pub(crate) fn place_parallel_safe(
    graph: &Graph,
    values: &[u32],
    bytes: Vec<u64>,
    search_work: usize,
) -> Option<(Vec<u64>, u64)> {
    if graph.node_count() > MAX_PARALLEL_SAFE_NODES {
        return None;
    }
    let reach = Ancestors::of_graph(graph);
    let position = graph.topological_positions();
    let spans: Vec<(u32, u32)> = values.iter().map(|&v| lifetime(graph, position, v)).collect();
    let clash = |a: usize, b: usize| !disjoint(&reach, graph, values[a], values[b]);
    let bound = place::lower_bound(&bytes, &spans);
    let groups = place::Groups::new(bytes, &|_, _| true, &clash);
    let offsets = place::place(&groups, &spans, bound, search_work);
    let arena = (0..offsets.len())
        .map(|g| offsets[g] + groups.bytes[g])
        .max()
        .unwrap_or(0);
    Some((offsets, arena))
}

/// A placement along a simulated schedule, for callers that place blocks of their own.
pub(crate) struct ScheduledPlacement {
    /// Per value given: its offset.
    pub offsets: Vec<u64>,
    /// The bytes the placement spans.
    pub bytes: u64,
    /// The ordering constraints that make the placement's sharing safe in any real order (as a
    /// scheduled plan's); none when the graph is past `constrain_up_to` nodes (reachability and
    /// pairs of values sharing bytes grow with its square).
    pub constraints: Vec<(u32, u32)>,
}

/// Offsets for `values` (statically sized, of `bytes` each) along their lifetimes in the
/// simulated schedule on `threads` threads under `prio` (a scheduled plan's placement), the
/// bytes they need, and the constraints that make it safe. `None` if the simulation fails.
pub(crate) fn place_scheduled(
    graph: &Graph,
    prio: &Priorities,
    values: &[u32],
    bytes: Vec<u64>,
    threads: usize,
    search_work: usize,
    constrain_up_to: usize,
) -> Option<ScheduledPlacement> {
    let schedule = Schedule::simulate(graph, prio, threads).ok()?;
    let spans: Vec<(u32, u32)> = values.iter().map(|&v| schedule.lifetime(graph, v)).collect();
    let (placed, total) = place_intervals(bytes.clone(), &spans, search_work);
    let constraints = if graph.node_count() <= constrain_up_to.min(MAX_PARALLEL_SAFE_NODES) {
        let mut offsets = vec![None; graph.value_count()];
        let mut lifetimes = vec![(0, 0); graph.value_count()];
        let mut size = vec![0; graph.value_count()];
        for (i, &v) in values.iter().enumerate() {
            (offsets[v as usize], lifetimes[v as usize], size[v as usize]) = (Some(placed[i]), spans[i], bytes[i]);
        }
        let reach = Ancestors::of_graph(graph);
        scheduled::constraints(graph, &reach, &lifetimes, &offsets, |v| size[v as usize], |_, _| false)
    } else {
        Vec::new()
    };
    Some(ScheduledPlacement {
        offsets: placed,
        bytes: total,
        constraints,
    })
}
