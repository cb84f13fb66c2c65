//! Per-thread heaps: the fast path of the pool's public `acquire` and `release`. This file: the
//! pool's heaps and which thread has which; `heap/`: one heap.
//!
//! **The model.** Each thread that acquires from a pool gets a heap of its own for that pool:
//! free blocks at hand, by size, and a table of the blocks it handed out. The central pool lends
//! blocks to heaps (it records them as lent, neither live nor free) and takes them back when a
//! heap holds too many, when it misses on a large size (the smallest larger free block first,
//! then its large free blocks but up to 64 KiB of few-KiB ones, to be coalesced: `heap/`),
//! when a run starts (the same, its small blocks too), and when the pool settles, trims or is
//! capped (everything). A pair of acquire and release on one thread touches its own heap only:
//! no lock another thread takes in the meantime, no counter that two threads write.
//!
//! **Invariants.**
//! - A heap's state is guarded by the heap's own lock (`heap_lock.rs`), biased to its owner.
//!   The owning thread takes it on each call with plain stores and loads, on a line no one else
//!   writes; other threads visit (a swap, and a process-wide memory barrier once for all the
//!   heaps a call visits) to drain it or read its counts. A release from another thread takes
//!   no lock: it *claims* the block in the owning heap's record of blocks out with one
//!   compare-and-swap (`out_table/`), and the heap's next miss, drain or count collects it
//!   into its bins; only a claim that fails (a block not out of any heap, or a record being
//!   rebuilt) visits the heaps. A heap has at most one owner: a thread's `LAST` names a heap only while the thread
//!   holds it (`Attached`). Lock order: heaps (in the list's order), then the central mutex;
//!   never the other way round.
//! - A block lent to a heap is in exactly one place: that heap's free bins or its table of
//!   blocks out (where a claimed block still counts as out until collected). A release looks
//!   in the caller's heap first, then claims in the others, then visits them; a pointer that
//!   no heap has out goes to the central pool, which refuses it when it is lent (it is free in a
//!   heap's bins, or claimed: released already) or unknown. So double and foreign releases are
//!   still refused exactly, from any thread (two releases of one block *at the same moment* from
//!   two threads are outside the checks: `out_table/`), and a release from another thread
//!   takes no lock.
//! - Heaps live as long as their pool (a lock-free list that only grows). A thread that exits
//!   leaves its heap, bins and blocks out included, to the next thread that needs one.
//!
//! **Statistics.** Each heap counts its own acquires, hits, releases and live bytes, which
//! `Pool::stats` adds to the central counts: exact whenever no call is under way. A peak needs a
//! global order, which only a counter every call writes could give (and that shared line is what
//! stops two threads from scaling): a heap's peak counts its own bytes plus the central pool's
//! as last published, and the central pool's counts every heap's as last published. With one
//! thread at a time the peak is exact; threads acquiring at once may each miss the others'
//! latest blocks.
//!
//! Heaps are off when the pool has red zones (every block checked on release) or a byte cap
//! (every release may give memory back): those pools take the central path.

use std::cell::{Cell, RefCell};
use std::ptr::{self, NonNull};
use std::sync::atomic::{AtomicPtr, AtomicU64, Ordering};
use std::sync::Arc;

use super::heap::{Heap, HeapGuard};
use super::heap_lock::visit_all;
use super::out_table::KEY_MARKS;
use super::slab::Classes;
use super::{Pool, PoolStats};

/// The heaps of one pool.
pub(super) struct Heaps {
    /// Tells this pool's heaps apart in a thread's list (never reused).
    uid: u64,
    enabled: bool,
    classes: Classes,
    /// Every heap made for the pool, newest first; nodes are freed only when the pool drops.
    head: AtomicPtr<Node>,
}

struct Node {
    heap: Arc<Heap>,
    next: *const Node,
}

/// The heaps this thread owns, one per pool, with its pool's `uid`.
struct Attached(Vec<(u64, Arc<Heap>)>);

impl Drop for Attached {
    /// The thread exits: its heaps wait for another thread to adopt them. `LAST` forgets its
    /// heap first: a call from a later thread-exit destructor must not act as the owner of a
    /// heap another thread may adopt meanwhile (it takes the central path instead).
    fn drop(&mut self) {
        let _ = LAST.try_with(|l| l.set((0, ptr::null())));
        for (_, heap) in &self.0 {
            heap.lock.unbias();
            heap.owned.store(false, Ordering::Release);
        }
    }
}

thread_local! {
    static ATTACHED: RefCell<Attached> = const { RefCell::new(Attached(Vec::new())) };
    /// The heap this thread used last, with its pool's uid: saves a search of `ATTACHED`. The
    /// pointer is good whenever the uid matches a pool being called: that pool lives, and its
    /// list holds every heap ever made for it. A null pointer with the uid: the thread has no
    /// heap for that pool (yet).
    static LAST: Cell<(u64, *const Heap)> = const { Cell::new((0, ptr::null())) };
}

impl Heaps {
    /// Heaps for a pool whose slabs serve requests below `large_threshold` bytes.
    pub(super) fn new(enabled: bool, large_threshold: usize) -> Heaps {
        static NEXT_UID: AtomicU64 = AtomicU64::new(1);
        Heaps {
            uid: NEXT_UID.fetch_add(1, Ordering::Relaxed),
            enabled,
            classes: Classes::new(large_threshold - 1),
            head: AtomicPtr::new(ptr::null_mut()),
        }
    }

    fn iter(&self) -> impl Iterator<Item = &Heap> + Clone {
        let mut node = self.head.load(Ordering::Acquire) as *const Node;
        std::iter::from_fn(move || {
            // SAFETY: nodes are published complete (Release in `push`, Acquire above) and freed
            // only when the pool drops, which `&self` rules out.
            let n = unsafe { node.as_ref() }?;
            node = n.next;
            Some(&*n.heap)
        })
    }

    fn push(&self, heap: Arc<Heap>) {
        let node = Box::into_raw(Box::new(Node {
            heap,
            next: ptr::null(),
        }));
        let mut head = self.head.load(Ordering::Acquire);
        loop {
            // SAFETY: `node` is ours until the exchange below publishes it.
            unsafe { (*node).next = head };
            match self
                .head
                .compare_exchange_weak(head, node, Ordering::Release, Ordering::Acquire)
            {
                Ok(_) => return,
                Err(now) => head = now,
            }
        }
    }

    /// This thread's heap for the pool, made or adopted if `create` and it has none. None: heaps
    /// are off, the thread has none (and `create` is false), or the thread is exiting (its
    /// thread-locals are gone). The heap lives as long as the pool: its list holds every heap
    /// ever made for it.
    #[inline]
    fn own(&self, create: bool) -> Option<&Heap> {
        match self.last() {
            Some(Some(heap)) => Some(heap),
            Some(None) if !create => None,
            _ if !self.enabled => None,
            _ => self.own_slow(create),
        }
    }

    /// What `LAST` knows of this thread's heap for the pool, without a search: Some(Some) its
    /// heap, Some(None) that it has none; None if `LAST` names another pool (or heaps are
    /// off).
    #[inline]
    fn last(&self) -> Option<Option<&Heap>> {
        if !self.enabled {
            return None;
        }
        let (uid, last) = LAST.try_with(Cell::get).unwrap_or((0, ptr::null()));
        if uid != self.uid {
            // Then `last` may be a heap of a pool since dropped: not to be touched.
            return None;
        }
        // SAFETY: see `LAST`: this pool is alive (`&self`) and holds the heap.
        Some(unsafe { last.as_ref() })
    }

    /// [`own`](Self::own) when the thread's last pool was another (or none): out of line, so
    /// that the usual path stays short enough to inline.
    #[cold]
    #[inline(never)]
    fn own_slow(&self, create: bool) -> Option<&Heap> {
        let heap: *const Heap = ATTACHED
            .try_with(|cell| {
                if let Some((_, heap)) = cell.borrow().0.iter().find(|(uid, _)| *uid == self.uid) {
                    return Some(Arc::as_ptr(heap));
                }
                if !create {
                    // Remembered: a thread that never acquires from the pool itself (a run's
                    // caller, whose values come from the run's own paths) asks at every run.
                    let _ = LAST.try_with(|l| l.set((self.uid, ptr::null())));
                    return None;
                }
                let heap = self.attach();
                let mut attached = cell.borrow_mut();
                // Heaps of dropped pools are held by this list alone: let them go.
                attached.0.retain(|(_, h)| Arc::strong_count(h) > 1);
                attached.0.push((self.uid, heap.clone()));
                Some(Arc::as_ptr(&heap))
            })
            .ok()
            .flatten()?;
        let _ = LAST.try_with(|l| l.set((self.uid, heap)));
        // SAFETY: the heap is in this pool's list (found in, or just pushed to, the thread's
        // list of its heaps), which keeps it as long as the pool, so as long as `&self`.
        Some(unsafe { &*heap })
    }

    /// A heap for the calling thread: one a finished thread left, or a new one.
    fn attach(&self) -> Arc<Heap> {
        let mut node = self.head.load(Ordering::Acquire) as *const Node;
        // SAFETY: as in `iter`.
        while let Some(n) = unsafe { node.as_ref() } {
            let free = !n.heap.owned.load(Ordering::Relaxed)
                && n.heap
                    .owned
                    .compare_exchange(false, true, Ordering::Acquire, Ordering::Relaxed)
                    .is_ok();
            if free {
                return n.heap.clone();
            }
            node = n.next;
        }
        let heap = Arc::new(Heap::new(self.classes.count()));
        self.push(heap.clone());
        heap
    }

    /// A block of `nbytes` from the calling thread's heap, counted as handed out there. None if
    /// heaps are off, the thread has none to use, or the central pool could not lend one (the
    /// caller then asks the central pool itself, which says why). Small return values only: this
    /// is the path of every acquire.
    #[inline]
    pub(super) fn acquire(&self, pool: &Pool, nbytes: usize) -> Option<usize> {
        self.own(true)?.acquire(pool, &self.classes, nbytes)
    }

    /// [`acquire`](Self::acquire) on the fast path ([`Heap::acquire_hit`]), with no memory
    /// checker watching. None, having changed nothing, when the thread's heap is not at hand
    /// or cannot serve it at once.
    #[inline]
    pub(super) fn acquire_hit(&self, pool: &Pool, nbytes: usize) -> Option<usize> {
        self.last()??.acquire_hit(pool, &self.classes, nbytes)
    }

    /// [`release`](Self::release) on the fast path ([`Heap::release_hit`]) of the thread's
    /// own heap, with no memory checker watching; false, having changed nothing, if it does
    /// not take the block back at once.
    #[inline]
    pub(super) fn release_hit(&self, addr: usize) -> bool {
        recordable(addr) && self.last().flatten().is_some_and(|heap| heap.release_hit(addr))
    }

    /// Takes back `ptr` if a heap has it out; false if none has (the central pool decides).
    #[inline]
    pub(super) fn release(&self, pool: &Pool, ptr: NonNull<u8>) -> bool {
        let addr = ptr.as_ptr() as usize;
        if !self.enabled || !recordable(addr) {
            return false;
        }
        let own = self.own(false);
        own.is_some_and(|heap| heap.take_back(pool, addr)) || self.release_elsewhere(pool, addr, own)
    }

    /// Takes back `addr` if a heap other than `own` has it out: claims it in that heap's
    /// record without its lock (`out_table/`); failing that, visits them all at once, which
    /// is exact.
    #[cold]
    fn release_elsewhere(&self, pool: &Pool, addr: usize, own: Option<&Heap>) -> bool {
        let others = self.iter().filter(|h| !own.is_some_and(|o| ptr::eq(*h, o)));
        for heap in others {
            if heap.claim(pool, addr) {
                return true;
            }
        }
        let mut found = false;
        self.visit(own, |_| true, |st| found = found || st.take_back(pool, addr));
        found
    }

    /// Visits every heap but `except`, all at once (one barrier), if `wanted` holds for one of
    /// them, and calls `f` on each one's state. Allocates nothing: a run's settle comes here.
    fn visit(&self, except: Option<&Heap>, wanted: impl Fn(&Heap) -> bool, mut f: impl FnMut(&mut HeapGuard<'_>)) {
        // The list as it is now, twice: a heap pushed meanwhile (at the head) is not in it, as
        // a heap made after the call would not be.
        let heaps = self.iter().filter(move |h| !except.is_some_and(|e| ptr::eq(*h, e)));
        if !heaps.clone().any(wanted) {
            return;
        }
        visit_all(heaps.clone().map(|h| &h.lock));
        for heap in heaps {
            // SAFETY: `visit_all` took its lock as a visitor, which the guard now holds.
            let mut st = unsafe { heap.visited() };
            f(&mut st);
        }
    }

    /// Gives every heap's free blocks back to the central pool: the calling thread's own as its
    /// owner (no barrier: a run whose kernels took scratch on its caller pays none at its next
    /// start; if `keep`, but a few KiB-sized large blocks, `heap/`), and if `others`, the
    /// others with a visit if one of them has some.
    pub(super) fn drain(&self, pool: &Pool, others: bool, keep: bool) {
        let has_free = |h: &Heap| h.free.load(Ordering::Relaxed) > 0 || h.shared.pending();
        let own = self.own(false);
        if let Some(heap) = own.filter(|h| has_free(h)) {
            heap.drain_own(pool, keep);
        }
        if others {
            self.visit(own, has_free, |st| st.drain(pool));
        }
    }

    /// Bytes the heaps have out, as their last calls left them.
    pub(super) fn live(&self) -> u64 {
        self.iter().map(|h| h.live.load(Ordering::Relaxed)).sum()
    }

    /// Adds every heap's counts to `stats` (the central pool's), the blocks other threads
    /// released collected first.
    pub(super) fn add_counts(&self, pool: &Pool, stats: &mut PoolStats) {
        self.visit(
            None,
            |_| true,
            |st| {
                let s = st.counts(pool);
                stats.acquires += s.acquires;
                stats.cache_hits += s.cache_hits;
                stats.releases += s.releases;
                stats.live_bytes += s.live_bytes;
                stats.peak_live_bytes = stats.peak_live_bytes.max(s.peak_live_bytes);
            },
        );
    }

    /// Restarts every heap's peak from the bytes out now, the central pool's `central` included.
    pub(super) fn reset_peaks(&self, central: u64) {
        let everything = central + self.live();
        self.visit(None, |_| true, |st| st.reset_peak(everything));
    }
}

impl Drop for Heaps {
    fn drop(&mut self) {
        let mut node = *self.head.get_mut();
        while !node.is_null() {
            // SAFETY: every node came from `Box::into_raw` in `push`, and the pool is going:
            // nobody else reaches them.
            let n = unsafe { Box::from_raw(node) };
            node = n.next as *mut Node;
        }
    }
}

#[cfg(test)]
impl Heaps {
    /// How many heaps the pool has made.
    pub(super) fn count(&self) -> usize {
        self.iter().count()
    }

    /// Visits of all its heaps so far.
    pub(super) fn visits(&self) -> u32 {
        self.iter().map(|h| h.lock.visits()).sum()
    }
}

/// How many heaps the calling thread holds, its pools' alive or not.
#[cfg(test)]
pub(super) fn attached_here() -> usize {
    ATTACHED.with(|a| a.borrow().0.len())
}

/// Whether `addr` can be the address of a block a heap handed out: 16-byte aligned. Any other
/// pointer goes to the central pool, which refuses it: the low bits of a record's keys are its
/// marks (`out_table/`), so an unaligned pointer could equal a tombstone or a claimed key.
#[inline]
fn recordable(addr: usize) -> bool {
    addr & KEY_MARKS == 0
}
