//! A run's arrays: the per-value and per-node state of a graph's runs (slots, counts, the
//! threads' block caches), kept with the graph and reused, so that a steady run neither
//! allocates nor page-faults them (a value's slot alone is 192 bytes: 19 MB for a graph of
//! 100,000 values). The graph keeps its spares (`SpareArrays`) in its annex ([`annex`](crate::exec::state::annex)).
//!
//! Invariant: spare arrays have every slot empty — its data and buffer pointers NULL, the
//! rest stale until the binding rewrites it whole or its producer's placement (`Slot::place`)
//! rewrites its head and clears a shape left behind, before anyone reads it (the run that held
//! them freed each value, see `RunState`'s `Drop`; its result emptied the outputs' slots) — so
//! reuse only resets the nodes' pending counts, from the graph's priorities (a value's count of
//! readers, in its slot, is set by its producer: `RunState::refs`). `SpareArrays::keep` checks it
//! in debug builds.

use std::cell::UnsafeCell;
use std::ptr;
use std::sync::atomic::{AtomicPtr, Ordering};
use std::sync::{Arc, Mutex};

use crate::exec::memory::cache::BlockCache;
use crate::exec::memory::reserve::Reserve;
use crate::exec::run::outcome::Outcome;
use crate::exec::state::counters::Counters;
use crate::exec::state::Slot;
use crate::graph::Graph;
use crate::pool::Pool;
use crate::sched::Priorities;
use crate::tensor::Tensor;

/// A run's arrays: value slots (with each value's count of readers), node pending counts, and
/// the threads' block caches.
pub(in crate::exec) struct RunArrays {
    pub slots: Box<[UnsafeCell<Slot>]>,
    /// Per input slot of every node: a pointer to the descriptor in `slots` it reads.
    pub inputs: Box<[*const Tensor]>,
    pub pending: Counters,
    pub caches: Box<[UnsafeCell<BlockCache>]>,
    /// The graph's priorities their last run followed, with the count of learned samples they
    /// were current for: while nothing more is learned, the next run takes them from here,
    /// without the graph's lock.
    pub prio: Option<(Arc<Priorities>, u64)>,
    /// Small blocks kept for the next run ([`reserve`](crate::exec::memory::reserve)).
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
pub(in crate::exec) struct Spares<T>(Mutex<Vec<T>>);

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
pub(in crate::exec) struct SpareArrays {
    /// NULL, or a `Box<RunArrays>` given up with `Box::into_raw`, owned by the slot.
    one: AtomicPtr<RunArrays>,
    more: Spares<Box<RunArrays>>,
}

impl Default for SpareArrays {
    fn default() -> Self {
        SpareArrays {
            one: AtomicPtr::new(ptr::null_mut()),
            more: Spares(Mutex::new(Vec::new())),
        }
    }
}

impl SpareArrays {
    pub(in crate::exec) fn take(&self) -> Option<Box<RunArrays>> {
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

    pub(in crate::exec) fn keep(&self, arrays: Box<RunArrays>) {
        debug_assert!(
            arrays.slots.iter().all(|s| {
                // SAFETY: arrays being kept belong to this caller alone (module docs).
                let s = unsafe { &*s.get() };
                s.tensor.data.is_null() && s.buffer.ptr.is_null()
            }),
            "spare arrays have every slot empty"
        );
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

impl RunArrays {
    /// New arrays for runs of `graph` (without block caches: [`fit_caches`](Self::fit_caches)).
    pub(crate) fn new(graph: &Graph) -> Box<RunArrays> {
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
        Box::new(RunArrays {
            slots,
            inputs,
            pending: Counters::new(graph.node_count()),
            caches: Box::new([]),
            prio: None,
            reserve: Reserve::default(),
            outcome: Outcome::default(),
        })
    }

    /// Gives the arrays `count` block caches, new ones unless they have as many already.
    pub(crate) fn fit_caches(&mut self, count: usize) {
        if self.caches.len() != count {
            self.caches = (0..count).map(|_| UnsafeCell::new(BlockCache::new())).collect();
        }
    }

    /// Hands the blocks the last run kept to the caller's cache of a run on `pool`, and readies
    /// the reserve to keep this run's (`Reserve::open`).
    pub(crate) fn open_reserve(&mut self, pool: &Arc<Pool>, sequential: bool) {
        let cache = self.caches.first_mut().map(UnsafeCell::get_mut);
        self.reserve.open(pool, cache, sequential);
    }

    /// The graph's current priorities, with the count of learned samples they are current for:
    /// the ones these arrays kept, if nothing was learned since, else the graph's.
    pub(crate) fn priorities(&mut self, graph: &Graph) -> (Arc<Priorities>, u64) {
        match self.prio.take() {
            Some((prio, samples)) if samples == graph.learned_samples() => (prio, samples),
            _ => graph.current_priorities(),
        }
    }

    /// Sets the nodes' pending counts to where a run starts (`prio`'s), laid out for a run on two
    /// threads or more (`parallel`) or on one ([`counters`](crate::exec::state::counters)). The
    /// values' counts of readers need no reset: each value's producer sets its own as it ends
    /// (`RunState::refs`).
    pub(crate) fn reset(&mut self, prio: &Priorities, parallel: bool) {
        self.pending.fit(parallel);
        self.pending.reset(&prio.initial_pending);
    }
}
