//! Per-thread heaps: the fast path of the pool's public `acquire` and `release`.
//!
//! **The model.** Each thread that acquires from a pool gets a heap of its own for that pool:
//! free blocks at hand, by size, and a table of the blocks it handed out. The central pool lends
//! blocks to heaps (it records them as lent, neither live nor free) and takes them back when a
//! heap holds too many, when it misses on a large size (its large free blocks go back first, to
//! be coalesced), and when the pool settles, trims or is capped. A pair of acquire and release
//! on one thread touches its own heap only: no lock another thread takes in the meantime, no
//! counter that two threads write.
//!
//! **Invariants.**
//! - A heap's state is guarded by the heap's own spin lock. The owning thread takes it on each
//!   call (uncontended: one atomic swap and one store, on a line no one else writes); other
//!   threads take it to release a block the heap handed out, and to drain it or read its counts.
//!   Lock order: a heap, then the central mutex; never the other way round.
//! - A block lent to a heap is in exactly one place: that heap's free bins or its table of
//!   blocks out. A release looks in the caller's heap first, then in the others; a pointer that
//!   no heap has out goes to the central pool, which refuses it when it is lent (it is free in a
//!   heap's bins: released already) or unknown. So double and foreign releases are still refused
//!   exactly, from any thread, and a release from another thread takes only the owning heap's
//!   lock.
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

use std::cell::{Cell, RefCell, UnsafeCell};
use std::ptr::{self, NonNull};
use std::sync::atomic::{AtomicBool, AtomicPtr, AtomicU64, Ordering};
use std::sync::Arc;

use super::arena::Arena;
use super::central::Locked;
use super::out_table::{Out, OutTable};
use super::sanitize;
use super::slab::class_size;
use super::{Pool, PoolStats};

/// A heap keeps at most this many free blocks of one size, and this many free bytes in all;
/// beyond either, a released block goes back to the central pool.
const BIN_BLOCKS: usize = 64;
const HEAP_FREE_BYTES: usize = 16 << 20;
/// Blocks a heap borrows at once when a small size class runs dry (they come from one slab).
const SMALL_REFILL: usize = 8;
const LARGE_BINS: usize = 16;

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

/// The slab classes as tables, so that the path of every acquire and release finds a request's
/// class with two loads.
struct Classes {
    /// Class index by `nbytes.div_ceil(16)`, for requests below the pool's large threshold.
    index_of: Box<[u8]>,
    /// Block bytes by class index.
    size: Box<[usize]>,
}

impl Classes {
    fn new(large_threshold: usize) -> Classes {
        let mut size: Vec<usize> = Vec::new();
        let index_of = (0..=large_threshold.div_ceil(16))
            .map(|i| {
                let c = class_size((i * 16).max(1));
                if size.last() != Some(&c) {
                    size.push(c);
                }
                (size.len() - 1) as u8
            })
            .collect();
        Classes {
            index_of,
            size: size.into(),
        }
    }

    /// The block size and, for a small request, the class index of a request of `nbytes`.
    #[inline]
    fn fit(&self, nbytes: usize, small: bool) -> (usize, Option<usize>) {
        if small {
            let class = self.index_of[nbytes.div_ceil(16)] as usize;
            (self.size[class], Some(class))
        } else {
            (Arena::block_size(nbytes).expect("checked by the pool"), None)
        }
    }
}

/// One thread's heap. Aligned so that two heaps' locks never share a cache line.
#[repr(align(128))]
struct Heap {
    locked: AtomicBool,
    /// Whether a thread has it as its own.
    owned: AtomicBool,
    /// Bytes it has out, as its last call left them: the central pool's peak adds them.
    live: AtomicU64,
    state: UnsafeCell<HeapState>,
}

// SAFETY: `state` is only reached through `Heap::lock`, which gives one thread at a time access.
unsafe impl Sync for Heap {}
// SAFETY: as above; the state holds plain addresses and counts.
unsafe impl Send for Heap {}

/// Free blocks of one size, inline: the path of every acquire and release reads it without
/// following another pointer.
struct Bin {
    len: usize,
    blocks: [usize; BIN_BLOCKS],
}

impl Default for Bin {
    fn default() -> Bin {
        Bin {
            len: 0,
            blocks: [0; BIN_BLOCKS],
        }
    }
}

impl Bin {
    #[inline]
    fn pop(&mut self) -> Option<usize> {
        self.len = self.len.checked_sub(1)?;
        Some(self.blocks[self.len])
    }

    /// Adds a block; false (and nothing changes) when the bin is full.
    #[inline]
    fn push(&mut self, addr: usize) -> bool {
        let Some(slot) = self.blocks.get_mut(self.len) else {
            return false;
        };
        *slot = addr;
        self.len += 1;
        true
    }

    fn is_empty(&self) -> bool {
        self.len == 0
    }

    fn drain(&mut self) -> impl Iterator<Item = usize> + '_ {
        let n = std::mem::take(&mut self.len);
        self.blocks[..n].iter().copied()
    }
}

#[derive(Default)]
struct HeapState {
    /// Free blocks of the slab classes, by class index.
    small: Box<[Bin]>,
    /// Free blocks of the large arena, by block size: at most `LARGE_BINS` sizes, searched in
    /// turn (a miss on a large size empties them all, so few sizes wait at once).
    large: Vec<(usize, Bin)>,
    free_bytes: usize,
    large_free_bytes: usize,
    /// Blocks handed out.
    out: OutTable,
    stats: PoolStats,
}

/// The heaps this thread owns, one per pool, with its pool's `uid`.
struct Attached(Vec<(u64, Arc<Heap>)>);

impl Drop for Attached {
    /// The thread exits: its heaps wait for another thread to adopt them.
    fn drop(&mut self) {
        for (_, heap) in &self.0 {
            heap.owned.store(false, Ordering::Release);
        }
    }
}

thread_local! {
    static ATTACHED: RefCell<Attached> = const { RefCell::new(Attached(Vec::new())) };
    /// The heap this thread used last, with its pool's uid: saves a search of `ATTACHED`. The
    /// pointer is good whenever the uid matches a pool being called: that pool lives, and its
    /// list holds every heap ever made for it.
    static LAST: Cell<(u64, *const Heap)> = const { Cell::new((0, ptr::null())) };
}

struct HeapGuard<'h>(&'h Heap);

impl std::ops::Deref for HeapGuard<'_> {
    type Target = HeapState;

    fn deref(&self) -> &HeapState {
        // SAFETY: the guard holds the heap's lock.
        unsafe { &*self.0.state.get() }
    }
}

impl std::ops::DerefMut for HeapGuard<'_> {
    fn deref_mut(&mut self) -> &mut HeapState {
        // SAFETY: the guard holds the heap's lock, and `&mut self` makes this the only borrow.
        unsafe { &mut *self.0.state.get() }
    }
}

impl Drop for HeapGuard<'_> {
    fn drop(&mut self) {
        self.0.live.store(self.stats.live_bytes, Ordering::Relaxed);
        self.0.locked.store(false, Ordering::Release);
    }
}

impl Heap {
    /// A heap for a pool of `classes` slab classes.
    fn new(classes: usize) -> Heap {
        Heap {
            locked: AtomicBool::new(false),
            owned: AtomicBool::new(true),
            live: AtomicU64::new(0),
            state: UnsafeCell::new(HeapState {
                small: (0..classes).map(|_| Bin::default()).collect(),
                ..HeapState::default()
            }),
        }
    }

    #[inline]
    fn lock(&self) -> HeapGuard<'_> {
        // The holder keeps it for a few table operations (or one central call): spin, then
        // yield, rather than park.
        let mut spins = 0u32;
        while self.locked.swap(true, Ordering::Acquire) {
            while self.locked.load(Ordering::Relaxed) {
                if spins < 100 {
                    spins += 1;
                    std::hint::spin_loop();
                } else {
                    std::thread::yield_now();
                }
            }
        }
        HeapGuard(self)
    }
}

impl HeapState {
    /// The free list of blocks of `size` bytes (of slab class `class`, if given); None for a
    /// large size when `LARGE_BINS` other sizes have blocks waiting.
    #[inline]
    fn bin(&mut self, size: usize, class: Option<usize>) -> Option<&mut Bin> {
        if let Some(class) = class {
            return Some(&mut self.small[class]);
        }
        let i = match self.large.iter().position(|(s, _)| *s == size) {
            Some(i) => i,
            None => match self.large.iter().position(|(_, bin)| bin.is_empty()) {
                Some(i) => {
                    self.large[i].0 = size;
                    i
                }
                None if self.large.len() < LARGE_BINS => {
                    self.large.push((size, Bin::default()));
                    self.large.len() - 1
                }
                None => return None,
            },
        };
        Some(&mut self.large[i].1)
    }

    /// Gives every free block back to the central pool.
    fn give_back_all(&mut self, central: &mut Locked<'_>, large_only: bool) {
        if !large_only {
            for bin in self.small.iter_mut() {
                bin.drain().for_each(|a| central.reclaim(a));
            }
            self.free_bytes = self.large_free_bytes;
        }
        for (_, bin) in &mut self.large {
            bin.drain().for_each(|a| central.reclaim(a));
        }
        self.free_bytes -= self.large_free_bytes;
        self.large_free_bytes = 0;
    }

    /// Takes back a block it has out; false if it has no such block out.
    #[inline]
    fn take_back(&mut self, pool: &Pool, addr: usize) -> bool {
        let Some(Out {
            block,
            requested,
            class,
        }) = self.out.remove(addr)
        else {
            return false;
        };
        if sanitize::active() {
            // Before the block goes to the bin, from where it may be handed out again.
            sanitize::retire(pool.mempool, addr as *const u8);
            sanitize::hide(addr as *const u8, block);
        }
        self.stats.releases += 1;
        self.stats.live_bytes -= requested as u64;
        let over = self.free_bytes + block > HEAP_FREE_BYTES;
        let class = class.checked_sub(1).map(usize::from);
        let kept = !over && self.bin(block, class).is_some_and(|bin| bin.push(addr));
        if kept {
            self.free_bytes += block;
            if class.is_none() {
                self.large_free_bytes += block;
            }
        } else {
            pool.lock().reclaim(addr);
        }
        true
    }
}

impl Heaps {
    /// Heaps for a pool whose slabs serve requests below `large_threshold` bytes.
    pub fn new(enabled: bool, large_threshold: usize) -> Heaps {
        static NEXT_UID: AtomicU64 = AtomicU64::new(1);
        Heaps {
            uid: NEXT_UID.fetch_add(1, Ordering::Relaxed),
            enabled,
            classes: Classes::new(large_threshold),
            head: AtomicPtr::new(ptr::null_mut()),
        }
    }

    fn iter(&self) -> impl Iterator<Item = &Heap> {
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

    /// Runs `f` on this thread's heap for the pool, made or adopted if `create` and it has none.
    /// None: heaps are off, the thread has none (and `create` is false), or the thread is
    /// exiting (its thread-locals are gone).
    #[inline]
    fn with_own<R>(&self, create: bool, f: impl FnOnce(&Heap) -> R) -> Option<R> {
        if !self.enabled {
            return None;
        }
        let (uid, last) = LAST.try_with(Cell::get).unwrap_or((0, ptr::null()));
        if uid == self.uid {
            // SAFETY: see `LAST`: this pool is alive (`&self`) and holds the heap.
            return Some(f(unsafe { &*last }));
        }
        ATTACHED
            .try_with(|cell| {
                if let Some((_, heap)) = cell.borrow().0.iter().find(|(uid, _)| *uid == self.uid) {
                    let _ = LAST.try_with(|l| l.set((self.uid, &**heap)));
                    return Some(f(heap));
                }
                if !create {
                    return None;
                }
                let heap = self.attach();
                let mut attached = cell.borrow_mut();
                // Heaps of dropped pools are held by this list alone: let them go.
                attached.0.retain(|(_, h)| Arc::strong_count(h) > 1);
                attached.0.push((self.uid, heap.clone()));
                drop(attached);
                let _ = LAST.try_with(|l| l.set((self.uid, &*heap)));
                Some(f(&heap))
            })
            .ok()
            .flatten()
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
        let heap = Arc::new(Heap::new(self.classes.size.len()));
        self.push(heap.clone());
        heap
    }

    /// A block of `nbytes` from the calling thread's heap, counted as handed out there. None if
    /// heaps are off, the thread has none to use, or the central pool could not lend one (the
    /// caller then asks the central pool itself, which says why). Small return values only: this
    /// is the path of every acquire.
    #[inline]
    pub fn acquire(&self, pool: &Pool, nbytes: usize) -> Option<usize> {
        self.with_own(true, |heap| {
            let mut st = heap.lock();
            let (block, class) = self.classes.fit(nbytes, pool.is_small(nbytes));
            let (addr, hit) = match st.bin(block, class).and_then(Bin::pop) {
                Some(addr) => {
                    st.free_bytes -= block;
                    if class.is_none() {
                        st.large_free_bytes -= block;
                    }
                    (addr, true)
                }
                None => refill(&mut st, pool, nbytes, block, class)?,
            };
            st.out.insert(
                addr,
                Out {
                    block,
                    requested: nbytes,
                    class: class.map_or(0, |c| c as u8 + 1),
                },
            );
            let s = &mut st.stats;
            s.acquires += 1;
            s.cache_hits += hit as u64;
            s.live_bytes += nbytes as u64;
            let central = pool.published.live.load(Ordering::Relaxed);
            let everywhere = s.live_bytes + central.saturating_sub(pool.published.parked.load(Ordering::Relaxed));
            s.peak_live_bytes = s.peak_live_bytes.max(everywhere);
            Some(addr)
        })
        .flatten()
    }

    /// Takes back `ptr` if a heap has it out; false if none has (the central pool decides).
    #[inline]
    pub fn release(&self, pool: &Pool, ptr: NonNull<u8>) -> bool {
        if !self.enabled {
            return false;
        }
        let addr = ptr.as_ptr() as usize;
        let mut own: *const Heap = ptr::null();
        let mine = self.with_own(false, |heap| {
            own = heap;
            heap.lock().take_back(pool, addr)
        });
        mine == Some(true) || self.release_elsewhere(pool, addr, own)
    }

    /// Takes back `addr` if a heap other than `own` has it out.
    #[cold]
    fn release_elsewhere(&self, pool: &Pool, addr: usize, own: *const Heap) -> bool {
        self.iter()
            .filter(|h| !ptr::eq(*h, own))
            .any(|heap| heap.lock().take_back(pool, addr))
    }

    /// Gives every heap's free blocks back to the central pool.
    pub fn drain(&self, pool: &Pool) {
        for heap in self.iter() {
            let mut st = heap.lock();
            if st.free_bytes > 0 {
                st.give_back_all(&mut pool.lock(), false);
            }
        }
    }

    /// Bytes the heaps have out, as their last calls left them.
    pub fn live(&self) -> u64 {
        self.iter().map(|h| h.live.load(Ordering::Relaxed)).sum()
    }

    /// Adds every heap's counts to `stats` (the central pool's).
    pub fn add_counts(&self, stats: &mut PoolStats) {
        for heap in self.iter() {
            let st = heap.lock();
            let s = &st.stats;
            stats.acquires += s.acquires;
            stats.cache_hits += s.cache_hits;
            stats.releases += s.releases;
            stats.live_bytes += s.live_bytes;
            stats.peak_live_bytes = stats.peak_live_bytes.max(s.peak_live_bytes);
        }
    }

    /// Restarts every heap's peak from the bytes out now, the central pool's `central` included.
    pub fn reset_peaks(&self, central: u64) {
        let everything = central + self.live();
        for heap in self.iter() {
            let mut st = heap.lock();
            st.stats.peak_live_bytes = everything;
        }
    }
}

/// Borrows blocks of `block` bytes from the central pool for a request of `nbytes` that found
/// its bin empty: `SMALL_REFILL` for a slab class (the extra ones wait in the bin), one for a
/// large size, after giving the heap's large free blocks back (to be coalesced: a request of a
/// new size must be able to reuse their memory). Returns the block to hand out and whether no
/// memory had to be committed; None if the central pool could not lend it.
#[cold]
fn refill(st: &mut HeapState, pool: &Pool, nbytes: usize, block: usize, class: Option<usize>) -> Option<(usize, bool)> {
    let mut central = pool.lock();
    if class.is_none() && st.large_free_bytes > 0 {
        st.give_back_all(&mut central, true);
    }
    let threshold = pool.config.large_threshold_bytes;
    let (addr, committed) = central.lend(nbytes, threshold).ok()?;
    if let Some(class) = class {
        for _ in 1..SMALL_REFILL {
            // A spare that does not come is not needed now.
            let Ok((spare, _)) = central.lend(nbytes, threshold) else {
                break;
            };
            if !st.small[class].push(spare) {
                central.reclaim(spare);
                break;
            }
            st.free_bytes += block;
        }
    }
    Some((addr, !committed))
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
    pub fn count(&self) -> usize {
        self.iter().count()
    }
}

/// How many heaps the calling thread holds, its pools' alive or not.
#[cfg(test)]
pub(super) fn attached_here() -> usize {
    ATTACHED.with(|a| a.borrow().0.len())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_class_tables_agree_with_the_slabs() {
        for threshold in [1024, 65_536] {
            let classes = Classes::new(threshold);
            let mut sizes: Vec<usize> = (1..threshold).map(class_size).collect();
            sizes.dedup();
            for n in 1..threshold {
                let (block, class) = classes.fit(n, true);
                assert_eq!(block, class_size(n), "{n}");
                assert_eq!(sizes[class.unwrap()], block, "{n}: dense indices in size order");
            }
        }
    }
}
