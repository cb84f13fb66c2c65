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
//!   then land elsewhere, by best fit. These hints are made again when the graph's priorities
//!   change (learned durations), since they follow the schedule of the old ones.
//!
//! A value with a hint skips the thread's block cache, both ways: a cached block, taken from the
//! arena in batches and kept across values, would sit where the hints need room.

use std::sync::{Arc, Mutex, OnceLock};

use crate::graph::memory::{lifetime, static_values};
use crate::graph::Graph;
use crate::plan::{place_intervals, place_parallel_safe, place_scheduled};
use crate::sched::Priorities;

/// A graph's hints, made at the first run that needs each kind; executor runs' hints are made
/// again when the graph's priorities change, if they came from a schedule of the old ones.
#[derive(Default)]
pub(super) struct HintCache {
    sequential: OnceLock<Hints>,
    /// Whether the graph has a value that takes hints: runs of graphs without one skip the lock.
    any: OnceLock<bool>,
    /// Per executor size seen (the latest `PARALLEL_KINDS`).
    parallel: Mutex<Vec<Arc<Hints>>>,
}

/// How many executor sizes a graph keeps hints for.
const PARALLEL_KINDS: usize = 4;

/// Offsets for a graph's large values (see the module docs), counted from where the pool says
/// free space starts when a run starts. Sizes are rounded up to the pool's grain, so offsets
/// stay aligned.
pub(super) struct Hints {
    /// Per value: its offset, or `NO_HINT`.
    pub offsets: Box<[u64]>,
    /// The bytes the placement spans.
    pub bytes: u64,
    /// The executor's threads they were made for (0 for runs without one).
    pub threads: usize,
    /// Hints along a schedule: the priorities the schedule was simulated with, and those with
    /// the ordering constraints that make every hinted block find its bytes free in any real
    /// order (runs without a memory limit follow them). `None` for other hints.
    pub basis: Option<Arc<Priorities>>,
    pub priorities: Option<Arc<Priorities>>,
}

pub(super) const NO_HINT: u64 = u64::MAX;

/// The graph's [`Hints`] for runs without an executor; `None` if it has no large value.
pub(super) fn sequential(graph: &Graph) -> Option<&Hints> {
    let hints = super::recycle::hint_cache(graph)
        .sequential
        .get_or_init(|| make_hints(graph, None));
    (hints.bytes > 0).then_some(hints)
}

/// The graph's [`Hints`] for runs on an executor of `threads` threads whose graph priorities
/// are `prio` (see the module docs); `None` if it has no large value. Made once per executor
/// size (a schedule, and its constraints, hold for one thread count), and again when hints
/// along a schedule of older priorities meet new ones.
pub(super) fn parallel(graph: &Graph, threads: usize, prio: &Arc<Priorities>) -> Option<Arc<Hints>> {
    let cache = super::recycle::hint_cache(graph);
    if !*cache.any.get_or_init(|| sequential(graph).is_some()) {
        return None;
    }
    let mut cached = super::state::lock(&cache.parallel);
    let current = |h: &&Arc<Hints>| h.threads == threads && h.basis.as_ref().map_or(true, |b| Arc::ptr_eq(b, prio));
    let hints = match cached.iter().find(current) {
        Some(h) => h.clone(),
        None => {
            let h = Arc::new(make_hints(graph, Some((threads, prio))));
            cached.retain(|old| old.threads != threads);
            if cached.len() == PARALLEL_KINDS {
                cached.remove(0);
            }
            cached.push(h.clone());
            h
        }
    };
    (hints.bytes > 0).then_some(hints)
}

/// Places the graph's large values: along the topological order, or for runs on an executor of
/// `threads` threads by the parallel-safe rule where that costs little more
/// (`PARALLEL_SAFE_SLACK`), else along the simulated schedule on those threads.
fn make_hints(graph: &Graph, executor: Option<(usize, &Arc<Priorities>)>) -> Hints {
    let hinted: Vec<u32> = static_values(graph)
        .into_iter()
        .filter(|&v| graph.value_size(v).bytes().is_some_and(|n| n >= HINT_MIN_BYTES))
        .collect();
    let bytes: Vec<u64> = hinted
        .iter()
        .map(|&v| graph.value_size(v).bytes().unwrap_or(0).next_multiple_of(GRAIN) as u64)
        .collect();
    let position = graph.topological_positions();
    let spans: Vec<(u32, u32)> = hinted.iter().map(|&v| lifetime(graph, position, v)).collect();
    let sequential = place_intervals(bytes.clone(), &spans, HINT_SEARCH_WORK);
    let (mut basis, mut priorities) = (None, None);
    let (placed, total) = match executor {
        None => sequential,
        Some((threads, prio)) => {
            let safe = (graph.node_count() <= PARALLEL_SAFE_MAX_NODES)
                .then(|| place_parallel_safe(graph, &hinted, bytes.clone(), HINT_SEARCH_WORK))
                .flatten();
            match safe {
                Some(safe) if safe.1 as f64 <= sequential.1 as f64 * PARALLEL_SAFE_SLACK => safe,
                _ => match place_scheduled(
                    graph,
                    prio,
                    &hinted,
                    bytes,
                    threads,
                    HINT_SEARCH_WORK,
                    PARALLEL_SAFE_MAX_NODES,
                ) {
                    Some(s) => {
                        (basis, priorities) = (Some(prio.clone()), s.priorities);
                        (s.offsets, s.bytes)
                    }
                    None => sequential,
                },
            }
        }
    };
    let mut offsets = vec![NO_HINT; graph.value_count()];
    for (&v, &offset) in hinted.iter().zip(&placed) {
        offsets[v as usize] = offset;
    }
    Hints {
        offsets: offsets.into(),
        bytes: total,
        threads: executor.map_or(0, |e| e.0),
        basis,
        priorities,
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
pub(super) const HINT_MIN_BYTES: usize = 1024;

/// The pool's block grain (`pool::arena::GRAIN`): hinted offsets are multiples of it.
const GRAIN: usize = 64;
