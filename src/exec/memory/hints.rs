//! Placement hints: where a run asks the pool for its large values' blocks.
//!
//! Value-by-value best fit fragments: on generated inference graphs the pool held 1.25x the
//! max-live bound at the median and 1.5x at the 95th percentile, although every value's
//! lifetime is known before the run starts. So each graph gets, once, a placement of its large
//! values (`HINT_MIN_BYTES` and up) as a plan would make it, and each run asks the pool for free
//! space of that size when it starts (`Pool::room_for`), then for each value's block at its
//! offset from there (`Pool::acquire_at`). The pool puts a block there if those bytes are free,
//! else wherever it would anyway: hints never make two live blocks share bytes, they only choose
//! among free ones. Blocks still go back as their values die, and the pool's figures count them
//! as before.
//!
//! - Runs without an executor follow the topological order, and their hints are a sequential
//!   placement along it: every block lands where the placement says.
//! - Runs on an executor follow no fixed order, so their hints follow the parallel-safe rule (two
//!   values share bytes only if the graph orders them): whatever order the threads take, a
//!   hinted block finds its bytes free. Where that rule costs much more than a sequential
//!   placement (graphs with wide unordered branches, and those past the parallel-safe planner's
//!   size limit), they take a placement along the simulated schedule on the executor's threads
//!   instead, as a scheduled plan's (`plan::Mode::Scheduled`), and the run follows the same
//!   ordering constraints (a node whose block reuses another value's bytes starts after that
//!   value's readers), so every hinted block finds its bytes free there too. Runs under a memory
//!   limit keep the graph's priorities (admission does not know the constraints): some blocks
//!   then land elsewhere, by best fit. Graphs past 2,000 nodes take these hints without
//!   constraints. The hints are made once per executor size, from the estimates of that first
//!   run (a graph's first run on a second size borrows the nearest size's); when learned
//!   durations change the graph's priorities, runs follow the new ones with the same
//!   constraints (safe with any priorities).
//!
//! A value with a hint skips the thread's block cache, both ways: a cached block, taken from the
//! arena in batches and kept across values, would sit where the hints need room.

use std::sync::{Arc, Mutex, OnceLock};

use crate::graph::memory::{lifetime, static_values};
use crate::graph::Graph;
use crate::plan::{place_intervals, place_parallel_safe, place_scheduled};
use crate::sched::Priorities;

/// A graph's hints, made at the first run that needs each kind.
#[derive(Default)]
pub(in crate::exec) struct HintCache {
    sequential: OnceLock<Arc<Hints>>,
    /// Whether the graph has a value that takes hints: runs of graphs without one skip the lock.
    any: OnceLock<bool>,
    /// Parallel-safe hints, for runs on any executor; `None` where they cost too much.
    safe: OnceLock<Option<Arc<Hints>>>,
    /// For graphs whose parallel-safe hints cost too much: hints along a schedule per executor
    /// size (the latest `PARALLEL_KINDS`), and the sizes that have run the graph (the second
    /// run on a size makes its hints, unless it was the first size).
    scheduled: Mutex<(Vec<Arc<Hints>>, Vec<usize>)>,
}

/// How many executor sizes a graph keeps hints for.
const PARALLEL_KINDS: usize = 4;

/// Offsets for a graph's large values (see the module docs), counted from where the pool says
/// free space starts when a run starts. Sizes are rounded up to the pool's grain, so offsets
/// stay aligned.
pub(in crate::exec) struct Hints {
    /// Per value: its offset, or `NO_HINT`.
    pub offsets: Box<[u64]>,
    /// The bytes the placement spans.
    pub bytes: u64,
    /// The executor's threads a schedule's hints were made for; 0 for other hints.
    threads: usize,
    /// Hints along a schedule: the ordering constraints that make every hinted block find its
    /// bytes free in any real order (runs without a memory limit follow them); empty for other
    /// hints.
    constraints: Vec<(u32, u32)>,
    /// The graph's priorities last seen with the constraints added: remade only when those
    /// priorities change.
    constrained: Mutex<Option<(Arc<Priorities>, Arc<Priorities>)>>,
}

pub(in crate::exec) const NO_HINT: u64 = u64::MAX;

/// The graph's [`Hints`] for runs without an executor; `None` if it has no large value.
pub(in crate::exec) fn sequential(graph: &Graph) -> Option<&Hints> {
    let hints = crate::exec::state::annex::hint_cache(graph)
        .sequential
        .get_or_init(|| Arc::new(make_hints(graph)));
    (hints.bytes > 0).then_some(hints)
}

/// The graph's [`Hints`] for runs on an executor of `threads` threads whose graph priorities
/// are `prio` (see the module docs); `None` if it has no large value. Parallel-safe hints are
/// made once; hints along a schedule once per executor size (a schedule, and its constraints,
/// hold for one thread count): the first size at once, others at their second run.
pub(in crate::exec) fn parallel(graph: &Graph, threads: usize, prio: &Arc<Priorities>) -> Option<Arc<Hints>> {
    let cache = crate::exec::state::annex::hint_cache(graph);
    if !*cache.any.get_or_init(|| sequential(graph).is_some()) {
        return None;
    }
    if let Some(safe) = cache.safe.get_or_init(|| parallel_safe(graph)) {
        return Some(safe.clone());
    }
    let mut guard = crate::exec::state::lock(&cache.scheduled);
    let (cached, seen) = &mut *guard;
    if let Some(h) = cached.iter().find(|h| h.threads == threads) {
        return Some(h.clone());
    }
    // A schedule's hints cost a simulation and a placement per executor size. The first size
    // makes its own at once (a first run commits the pool's memory); a graph's first run on
    // another size borrows those of the nearest size (their constraints keep it safe, if not
    // as tight), and its second run on that size makes its own.
    if !seen.contains(&threads) {
        seen.push(threads);
        if let Some(near) = cached.iter().min_by_key(|h| h.threads.abs_diff(threads)) {
            return Some(near.clone());
        }
    }
    let h = Arc::new(along_schedule(graph, threads, prio));
    if cached.len() == PARALLEL_KINDS {
        cached.remove(0);
    }
    cached.push(h.clone());
    Some(h)
}

impl Hints {
    /// `prio` with these hints' ordering constraints, or `None` if they have none.
    pub(crate) fn priorities(&self, prio: &Arc<Priorities>) -> Option<Arc<Priorities>> {
        if self.constraints.is_empty() {
            return None;
        }
        let mut last = crate::exec::state::lock(&self.constrained);
        match &*last {
            Some((basis, constrained)) if Arc::ptr_eq(basis, prio) => Some(constrained.clone()),
            _ => {
                let constrained = Arc::new(prio.constrained(&self.constraints));
                *last = Some((prio.clone(), constrained.clone()));
                Some(constrained)
            }
        }
    }
}

/// The graph's large values (`HINT_MIN_BYTES` and up) and their bytes, rounded up to the grain.
fn large_values(graph: &Graph) -> (Vec<u32>, Vec<u64>) {
    let hinted: Vec<u32> = static_values(graph)
        .into_iter()
        .filter(|&v| graph.value_size(v).bytes().is_some_and(|n| n >= HINT_MIN_BYTES))
        .collect();
    let bytes = hinted
        .iter()
        .map(|&v| graph.value_size(v).bytes().unwrap_or(0).next_multiple_of(GRAIN) as u64)
        .collect();
    (hinted, bytes)
}

/// Hints for these values at these offsets, spanning `bytes`.
fn hints_of(graph: &Graph, hinted: &[u32], (placed, bytes): (Vec<u64>, u64)) -> Hints {
    let mut offsets = vec![NO_HINT; graph.value_count()];
    for (&v, &offset) in hinted.iter().zip(&placed) {
        offsets[v as usize] = offset;
    }
    Hints {
        offsets: offsets.into(),
        bytes,
        threads: 0,
        constraints: Vec::new(),
        constrained: Mutex::new(None),
    }
}

/// Places the graph's large values along the topological order.
fn make_hints(graph: &Graph) -> Hints {
    let (hinted, bytes) = large_values(graph);
    let position = graph.topological_positions();
    let spans: Vec<(u32, u32)> = hinted.iter().map(|&v| lifetime(graph, position, v)).collect();
    hints_of(graph, &hinted, place_intervals(bytes, &spans, HINT_SEARCH_WORK))
}

/// Places the graph's large values by the parallel-safe rule, if that costs at most
/// `PARALLEL_SAFE_SLACK` times the sequential placement (and the graph is small enough).
fn parallel_safe(graph: &Graph) -> Option<Arc<Hints>> {
    if graph.node_count() > PARALLEL_SAFE_MAX_NODES {
        return None;
    }
    let (hinted, bytes) = large_values(graph);
    let sequential = sequential(graph).map_or(0, |h| h.bytes);
    let safe = place_parallel_safe(graph, &hinted, bytes, HINT_SEARCH_WORK)?;
    (safe.1 as f64 <= sequential as f64 * PARALLEL_SAFE_SLACK).then(|| Arc::new(hints_of(graph, &hinted, safe)))
}

/// Places the graph's large values along the simulated schedule on `threads` threads, with the
/// constraints that keep the placement safe (up to `PARALLEL_SAFE_MAX_NODES` nodes); the
/// sequential placement if the simulation fails.
fn along_schedule(graph: &Graph, threads: usize, prio: &Priorities) -> Hints {
    let (hinted, bytes) = large_values(graph);
    match place_scheduled(
        graph,
        prio,
        &hinted,
        bytes,
        threads,
        HINT_SEARCH_WORK / 10,
        PARALLEL_SAFE_MAX_NODES,
    ) {
        Some(s) => Hints {
            threads,
            constraints: s.constraints,
            ..hints_of(graph, &hinted, (s.offsets, s.bytes))
        },
        None => make_hints(graph),
    }
}

/// Runs on an executor take parallel-safe hints when those need at most this much more than
/// sequential ones; past it, hints along the simulated schedule, with its ordering constraints.
/// Chosen on seeds 0..200 of the corpus (2 threads, steady peak over the bound): the schedule's
/// hints without constraints beat sequential ones where parallel-safe ones cost more than this
/// (median of those 10 graphs 1.256 -> 1.049), but strayed with the real order (PP-OCRv4 det
/// 1.00-1.32x from run to run); with the constraints they land every time (1.002x, the same
/// wall time). Parallel-safe hints need no constraints, so they stay first where they cost
/// little.
const PARALLEL_SAFE_SLACK: f64 = 1.10;

/// Parallel-safe hints, and the constraints of hints along a schedule, need the graph's
/// reachability and pairs of large values: past this many nodes, a first run would wait too long
/// for them (about 100 ms at 2,000 nodes). Larger graphs on an executor take the schedule's
/// hints without constraints (most blocks land where they say; the rest take the best fit).
const PARALLEL_SAFE_MAX_NODES: usize = 2_000;

/// The search the hints' placement may do: a tenth of a plan's, so a graph's first run waits
/// at most about 10 ms for it.
const HINT_SEARCH_WORK: usize = 1_000_000;

/// Values from this size up get hints: the pool's default `large_threshold_bytes`, from which
/// blocks come from its arena, where placement matters (smaller ones come from size-class
/// slabs). A value with a hint skips the thread's block cache: a cached block, taken from the
/// arena in batches with no lifetime, would sit where the hints need room.
pub(in crate::exec) const HINT_MIN_BYTES: usize = 1024;

/// The pool's block grain (`pool::arena::GRAIN`): hinted offsets are multiples of it.
const GRAIN: usize = 64;
