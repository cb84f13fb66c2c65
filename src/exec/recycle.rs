//! Run state that outlives its run: the per-value and per-node arrays of a graph's runs, kept
//! with the graph and reused, so that a steady run neither allocates nor page-faults them
//! (a value's slot alone is 192 bytes: 19 MB for a graph of 100,000 values).
//!
//! Invariant: arrays in the bin have every slot empty — its data and buffer pointers NULL, the
//! rest stale until the binding rewrites it whole or its producer's placement (`Slot::place`)
//! rewrites its head and clears a shape left behind, before anyone reads it (the run that held
//! them freed each value, see `RunState`'s `Drop`; its result emptied the outputs' slots) — so
//! reuse only resets the counters, from the graph's templates.

use std::cell::UnsafeCell;
use std::ops::Range;
use std::ptr;
use std::sync::atomic::{AtomicPtr, AtomicU32, Ordering};
use std::sync::{Arc, Mutex};

use super::auto_plan::AutoPlans;
use super::cache::{BlockCache, CACHE_MAX_BYTES};
use super::hints::{HintCache, HINT_MIN_BYTES};
use super::outcome::Outcome;
use super::reserve::Reserve;
use super::state::Slot;
use crate::graph::{Annex, Graph};
use crate::kernel::CKernel;
use crate::pool::Pool;
use crate::sched::Priorities;
use crate::tensor::Tensor;

/// A run's arrays: value slots, value reference counts, node pending counts, and the threads'
/// block caches.
pub(super) struct RunArrays {
    pub slots: Box<[UnsafeCell<Slot>]>,
    /// Per input slot of every node: a pointer to the descriptor in `slots` it reads.
    pub inputs: Box<[*const Tensor]>,
    pub refs: Box<[AtomicU32]>,
    pub pending: Box<[AtomicU32]>,
    pub caches: Box<[UnsafeCell<BlockCache>]>,
    /// The graph's priorities their last run followed, with the count of learned samples they
    /// were current for: while nothing more is learned, the next run takes them from here,
    /// without the graph's lock.
    pub prio: Option<(Arc<Priorities>, u64)>,
    /// Small blocks kept for the next run (`reserve.rs`).
    pub reserve: Reserve,
    /// What the last run reported, for its result (`RunResult`) while it holds the arrays.
    pub outcome: Outcome,
}

// SAFETY: in the bin the arrays belong to nobody: every slot and cache is empty (no pointer to
// anything). A run that takes them owns them alone, and so does the result it hands them to
// (whose output slots and outcome's arena point at blocks it owns), until they are given back.
unsafe impl Send for RunArrays {}

/// Spare things of one kind: as many as the graph's runs and results that lived at once, up
/// to `SPARE`; more would only hold memory.
struct Spares<T>(Mutex<Vec<T>>);

const SPARE: usize = 8;

impl<T> Spares<T> {
    fn take(&self) -> Option<T> {
        self.0.lock().unwrap_or_else(|e| e.into_inner()).pop()
    }

    fn keep(&self, spare: T) {
        let mut spares = self.0.lock().unwrap_or_else(|e| e.into_inner());
        if spares.len() < SPARE {
            spares.push(spare);
        }
    }
}

/// Spare run arrays: one in a slot that a run takes or fills with a single atomic swap (a graph
/// run by one thread at a time never takes the lock), the others in `Spares`. A run's result
/// holds its arrays (its outputs are in their slots) and gives them back when it is dropped: a
/// run while it lives takes others, or makes new ones (kept as spares after it, so this
/// happens again only when more runs and results overlap than ever before).
struct SpareArrays {
    /// NULL, or a `Box<RunArrays>` given up with `Box::into_raw`, owned by the slot.
    one: AtomicPtr<RunArrays>,
    more: Spares<Box<RunArrays>>,
}

impl SpareArrays {
    fn take(&self) -> Option<Box<RunArrays>> {
        self.take_one().or_else(|| self.more.take())
    }

    /// The arrays in the slot, if any (no lock).
    fn take_one(&self) -> Option<Box<RunArrays>> {
        // Acquire: the arrays' contents, written by the run that kept them, are seen whole.
        let one = self.one.swap(ptr::null_mut(), Ordering::Acquire);
        // SAFETY: a non-null pointer in the slot came from `Box::into_raw` in `keep`, and the
        // swap gave it to this caller alone.
        (!one.is_null()).then(|| unsafe { Box::from_raw(one) })
    }

    fn keep(&self, arrays: Box<RunArrays>) {
        let raw = Box::into_raw(arrays);
        // Release: publishes the arrays' contents to the run that takes them.
        let filled = self
            .one
            .compare_exchange(ptr::null_mut(), raw, Ordering::Release, Ordering::Relaxed);
        if filled.is_err() {
            // SAFETY: `raw` came from `Box::into_raw` just above and was not published.
            self.more.keep(unsafe { Box::from_raw(raw) });
        }
    }
}

impl Drop for SpareArrays {
    fn drop(&mut self) {
        let one = *self.one.get_mut();
        if !one.is_null() {
            // SAFETY: the slot owns it (see `one`), and the graph is going: nobody takes it now.
            drop(unsafe { Box::from_raw(one) });
        }
    }
}

/// The graph's spare arrays, and what every run starts from.
struct Bin {
    /// Per value: readers, plus one for a graph output.
    initial_refs: Box<[u32]>,
    /// Per node: what executing it needs, in one record.
    steps: Box<[Step]>,
    /// Where runs ask the pool for their large blocks (made at the first run that needs them).
    hints: HintCache,
    /// The graph's own plans (`RunOptions::auto_plan`).
    plans: AutoPlans,
    /// No two of its operator nodes can ever be ready at once (see [`is_serial`]).
    serial: bool,
    arrays: SpareArrays,
}

/// What executing one node needs of its graph, in one record: read once per node instead of
/// from a handful of the graph's arrays.
#[derive(Clone, Copy, Default)]
pub(super) struct Step {
    /// Its outputs are values `first..first + outputs`.
    pub first: u32,
    pub outputs: u32,
    /// Its inputs are entries `input_start..input_end` of the graph's list of every node's
    /// inputs (and of `RunArrays::inputs`).
    pub input_start: u32,
    pub input_end: u32,
    /// Its outputs can take the short path (`RunState::place_plain`): each statically sized and
    /// small enough for the threads' caches, none in place, none cleared.
    pub plain: bool,
    /// One of its outputs has no reader and is no graph output: it goes as the node ends.
    pub unread: bool,
    /// One of its outputs is large enough for a hint (`Hints`): the short path, which takes
    /// every block from the thread's cache, is not for it in a run with hints.
    pub hinted: bool,
    /// The size of its first output if the node is plain, else 0 (what the short path hands
    /// out, read here rather than from the graph's sizes).
    pub first_bytes: u32,
    /// Its kernel's C function, if it is one (as `Graph::c_kernel`): the short path calls it
    /// from this record.
    pub c_kernel: Option<CKernel>,
    /// Its op type (`Graph::op_index`), which decides whether a call is timed.
    pub op: u32,
}

impl Step {
    pub fn values(&self) -> Range<u32> {
        self.first..self.first + self.outputs
    }

    pub fn inputs(&self) -> Range<usize> {
        self.input_start as usize..self.input_end as usize
    }
}

/// What every run of `graph` starts from: per node, what executing it needs (see [`Step`]);
/// per value, its readers plus one for a graph output (its reference count's start).
pub(super) fn templates(graph: &Graph) -> (&[Step], &[u32]) {
    let bin = bin(graph);
    (&bin.steps, &bin.initial_refs)
}

/// The graph's cache of [`Hints`](super::hints::Hints).
pub(super) fn hint_cache(graph: &Graph) -> &HintCache {
    &bin(graph).hints
}

/// Whether no two operator nodes of `graph` can ever be ready at once: each one in the
/// topological order reads an output of the one before it (so nothing can start before its
/// predecessor in the order ends). Such a graph, a chain or a single node, gains nothing from
/// an executor's threads.
pub(super) fn is_serial(graph: &Graph) -> bool {
    bin(graph).serial
}

/// The graph's own plans (see `auto_plan.rs`).
pub(super) fn auto_plans(graph: &Graph) -> &AutoPlans {
    &bin(graph).plans
}

fn bin(graph: &Graph) -> &Bin {
    let step = |node: u32| {
        let values = graph.node_values(node);
        let inputs = graph.node_input_range(node);
        let plain = !graph.is_graph_input(node)
            && graph.in_place(node).is_none()
            && !graph.zero_output(node)
            && values
                .clone()
                .all(|v| graph.value_size(v).bytes().is_some_and(|n| n <= CACHE_MAX_BYTES));
        Step {
            first: values.start,
            outputs: values.len() as u32,
            input_start: inputs.start as u32,
            input_end: inputs.end as u32,
            plain,
            unread: values
                .clone()
                .any(|v| graph.consumers(v) == 0 && !graph.is_graph_output(v)),
            hinted: values
                .clone()
                .any(|v| graph.value_size(v).bytes().is_some_and(|n| n >= HINT_MIN_BYTES)),
            // Plain outputs are at most `CACHE_MAX_BYTES`: a u32.
            first_bytes: match values.start < values.end && plain {
                true => graph.value_size(values.start).bytes().unwrap_or(0) as u32,
                false => 0,
            },
            c_kernel: graph.c_kernel(node).copied(),
            op: graph.op_index(node),
        }
    };
    graph.annex(Annex::Runs, || Bin {
        initial_refs: (0..graph.value_count() as u32)
            .map(|v| graph.consumers(v) + graph.is_graph_output(v) as u32)
            .collect(),
        steps: (0..graph.node_count() as u32).map(step).collect(),
        hints: HintCache::default(),
        plans: AutoPlans::default(),
        arrays: SpareArrays {
            one: AtomicPtr::new(ptr::null_mut()),
            more: Spares(Mutex::new(Vec::new())),
        },
        serial: serial(graph),
    })
}

/// See [`is_serial`].
fn serial(graph: &Graph) -> bool {
    let mut operators = graph
        .topological_order()
        .iter()
        .filter(|&&node| !graph.is_graph_input(node));
    let Some(&first) = operators.next() else {
        return true;
    };
    let mut before = first;
    operators.all(|&node| {
        let follows = graph
            .node_inputs(node)
            .iter()
            .any(|&v| graph.value_producer(v) == before);
        before = node;
        follows
    })
}

impl RunArrays {
    /// Arrays for a new run of `graph`: spare ones if a run left some, else new (without block
    /// caches: [`fit_caches`](Self::fit_caches)). Their counters start over in
    /// [`reset`](Self::reset).
    pub fn take(graph: &Graph) -> Box<RunArrays> {
        let bin = bin(graph);
        let Some(arrays) = bin.arrays.take() else {
            let slots: Box<[UnsafeCell<Slot>]> = (0..graph.value_count())
                .map(|_| UnsafeCell::new(Slot::default()))
                .collect();
            // The slots never move (a boxed slice): pointers into them hold for the arrays' life.
            let inputs = (0..graph.node_count() as u32)
                .flat_map(|node| graph.node_inputs(node))
                .map(|&v| {
                    // SAFETY: a place in a live slot, borrowed raw: nothing is read here.
                    unsafe { std::ptr::addr_of!((*slots[v as usize].get()).tensor) }
                })
                .collect();
            return Box::new(RunArrays {
                slots,
                inputs,
                refs: (0..graph.value_count()).map(|_| AtomicU32::new(0)).collect(),
                pending: (0..graph.node_count()).map(|_| AtomicU32::new(0)).collect(),
                caches: Box::new([]),
                prio: None,
                reserve: Reserve::default(),
                outcome: Outcome::default(),
            });
        };
        arrays
    }

    /// Gives the arrays `count` block caches, new ones unless they have as many already.
    pub fn fit_caches(&mut self, count: usize) {
        if self.caches.len() != count {
            self.caches = (0..count).map(|_| UnsafeCell::new(BlockCache::new())).collect();
        }
    }

    /// Hands the blocks the last run kept to the caller's cache of a run on `pool`, and readies
    /// the reserve to keep this run's (`Reserve::open`).
    pub fn open_reserve(&mut self, pool: &Arc<Pool>, sequential: bool) {
        let cache = self.caches.first_mut().map(UnsafeCell::get_mut);
        self.reserve.open(pool, cache, sequential);
    }

    /// The graph's current priorities, with the count of learned samples they are current for:
    /// the ones these arrays kept, if nothing was learned since, else the graph's.
    pub fn priorities(&mut self, graph: &Graph) -> (Arc<Priorities>, u64) {
        match self.prio.take() {
            Some((prio, samples)) if samples == graph.learned_samples() => (prio, samples),
            _ => graph.current_priorities(),
        }
    }

    /// Sets the counters to where a run starts: `initial_refs` as [`templates`] gives them,
    /// `prio` the pending counts.
    pub fn reset(&mut self, initial_refs: &[u32], prio: &Priorities) {
        for (r, &start) in self.refs.iter_mut().zip(initial_refs) {
            *r.get_mut() = start;
        }
        for (p, &start) in self.pending.iter_mut().zip(&prio.initial_pending) {
            *p.get_mut() = start;
        }
    }

    /// Keeps the arrays for the next run of `graph`. Every slot must be empty.
    pub fn give_back(self: Box<Self>, graph: &Graph) {
        if self.slots.len() != graph.value_count() {
            return; // not arrays of this graph's runs (none yet: the run took none)
        }
        bin(graph).arrays.keep(self);
    }
}

/// Arrays lent to a run of `graph` (`RunArrays::take`): the run's state borrows them while it
/// lives (`RunState::new`), and then they go to the run's result (`keep`) or, the run having
/// failed, back to the graph when this drops (the state's drop emptied every slot first).
pub(super) struct Lent<'g> {
    arrays: Option<Box<RunArrays>>,
    graph: &'g Graph,
}

impl<'g> Lent<'g> {
    pub fn take(graph: &'g Graph) -> Self {
        Lent {
            arrays: Some(RunArrays::take(graph)),
            graph,
        }
    }

    /// The arrays, to be held by the run's result.
    pub fn keep(mut self) -> Box<RunArrays> {
        self.arrays.take().expect("lent arrays are kept once")
    }
}

impl std::ops::Deref for Lent<'_> {
    type Target = RunArrays;
    fn deref(&self) -> &RunArrays {
        self.arrays.as_deref().expect("lent arrays are there until kept")
    }
}

impl std::ops::DerefMut for Lent<'_> {
    fn deref_mut(&mut self) -> &mut RunArrays {
        self.arrays.as_deref_mut().expect("lent arrays are there until kept")
    }
}

impl Drop for Lent<'_> {
    fn drop(&mut self) {
        if let Some(arrays) = self.arrays.take() {
            arrays.give_back(self.graph);
        }
    }
}
