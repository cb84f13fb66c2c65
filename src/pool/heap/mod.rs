//! One thread's heap (see `heaps.rs` for the model): free blocks in inline bins by size, the
//! blocks it handed out, its counts, and the lock that guards them (`heap_lock.rs`, biased to
//! the owner: its calls take it without a locked instruction). Its owner takes the lock on every
//! call; another thread visits only to release a block the heap handed out, to drain it or to
//! read its counts. Lock order: a heap, then the central mutex.

use std::cell::UnsafeCell;
use std::sync::atomic::{AtomicBool, AtomicU64, AtomicUsize, Ordering};

use super::arena::GRAIN;
use super::central::Locked;
use super::heap_lock::HeapLock;
use super::out_table::{Out, OutTable, Shared};
use super::sanitize;
use super::slab::Classes;
use super::{Pool, PoolStats};

mod fast;

/// A heap keeps at most this many free blocks of one size, and this many free bytes in all;
/// beyond either, a released block goes back to the central pool.
const BIN_BLOCKS: usize = 64;
const HEAP_FREE_BYTES: usize = 16 << 20;
/// Blocks a heap borrows at once when a small size class runs dry (they come from one slab).
const SMALL_REFILL: usize = 8;
const LARGE_BINS: usize = 16;
/// Large blocks below this size, up to `KEEP_BYTES` of them, stay in the heap when it gives its
/// large blocks back at a miss or at a run's start (`give_back_large`): a kernel whose scratch of
/// a dozen sizes of a few KiB comes and goes within each call (ONNX Runtime's sessions, value by
/// value) finds them again instead of carving each from the arena at every run (a 34-node voice
/// model: 6% of its time went there). Larger ones go back, so that the central pool coalesces
/// them and serves any size from the same bytes: a detector's value-by-value scratch held 93 MiB
/// of pool instead of 49 when the heap kept blocks of every size, and 59 with 1 MiB of few-KiB
/// blocks kept (pinned among its large ones, they kept the free space from coalescing); 64 KiB
/// left it at 49.
const KEEP_BELOW: usize = 64 << 10;
const KEEP_BYTES: usize = 64 << 10;

/// One thread's heap. Aligned so that two heaps' locks never share a cache line.
#[repr(align(128))]
pub(super) struct Heap {
    pub(super) lock: HeapLock,
    /// Whether a thread has it as its own.
    pub owned: AtomicBool,
    /// Bytes it has out, as its last call left them: the central pool's peak adds them.
    pub live: AtomicU64,
    /// Bytes of free blocks in its bins, as its last call left them: a settle visits only heaps
    /// that have some (or claims to collect).
    pub free: AtomicUsize,
    /// What other threads reach of its record of blocks out without its lock: a release from
    /// another thread claims its block there (`out_table/`).
    pub shared: Shared,
    state: UnsafeCell<HeapState>,
}

// SAFETY: `state` is only reached through a `HeapGuard`, made only with `lock` held, which
// gives one thread at a time access.
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
    /// Takes a block; None when the bin is empty. Cannot panic (the fast paths rely on it).
    #[inline]
    fn pop(&mut self) -> Option<usize> {
        let len = self.len.checked_sub(1)?;
        let addr = *self.blocks.get(len)?;
        self.len = len;
        Some(addr)
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

/// What a heap's lock guards.
pub(super) struct HeapState {
    /// Free blocks of the slab classes, by class index.
    small: Box<[Bin]>,
    /// Free blocks of the large arena, by block size: at most `LARGE_BINS` sizes, searched in
    /// turn (a miss on a large size empties them all, so few sizes wait at once).
    large: Vec<(usize, Bin)>,
    free_bytes: usize,
    large_free_bytes: usize,
    /// Blocks handed out.
    out: OutTable,
    /// Blocks other threads released, on their way from `out` to the bins (kept for its
    /// memory).
    collected: Vec<(usize, Out)>,
    stats: PoolStats,
}

/// Access to a heap's state while its lock is held: by its owner (`owned`) or by a visitor.
pub(super) struct HeapGuard<'h> {
    heap: &'h Heap,
    owned: bool,
}

impl std::ops::Deref for HeapGuard<'_> {
    type Target = HeapState;

    fn deref(&self) -> &HeapState {
        // SAFETY: the guard holds the heap's lock.
        unsafe { &*self.heap.state.get() }
    }
}

impl std::ops::DerefMut for HeapGuard<'_> {
    fn deref_mut(&mut self) -> &mut HeapState {
        // SAFETY: the guard holds the heap's lock, and `&mut self` makes this the only borrow.
        unsafe { &mut *self.heap.state.get() }
    }
}

impl Drop for HeapGuard<'_> {
    #[inline]
    fn drop(&mut self) {
        self.heap.live.store(self.stats.live_bytes, Ordering::Relaxed);
        self.heap.free.store(self.free_bytes, Ordering::Relaxed);
        match self.owned {
            true => self.heap.lock.leave_owned(),
            false => self.heap.lock.leave_visit(),
        }
    }
}

impl Heap {
    /// A heap for a pool of `classes` slab classes.
    pub(super) fn new(classes: usize) -> Heap {
        let (out, shared) = OutTable::new();
        Heap {
            lock: HeapLock::new(),
            owned: AtomicBool::new(true),
            live: AtomicU64::new(0),
            free: AtomicUsize::new(0),
            shared,
            state: UnsafeCell::new(HeapState {
                small: (0..classes).map(|_| Bin::default()).collect(),
                large: Vec::new(),
                free_bytes: 0,
                large_free_bytes: 0,
                out,
                collected: Vec::new(),
                stats: PoolStats::default(),
            }),
        }
    }

    /// Its state, for its owner: the calling thread owns the heap (`heaps.rs`). `count`: the
    /// call counts towards the lock's windows (`heap_lock.rs`).
    #[inline]
    fn own(&self, count: bool) -> HeapGuard<'_> {
        self.lock.enter_owned(count);
        HeapGuard {
            heap: self,
            owned: true,
        }
    }

    /// Its state, for its owner, if the lock can be had on the fast path
    /// ([`HeapLock::try_enter_owned`]); None, nothing changed, otherwise.
    #[inline]
    fn try_own(&self, count: bool) -> Option<HeapGuard<'_>> {
        // Lazily: a guard made and dropped would leave a lock not taken.
        self.lock.try_enter_owned(count).then(|| HeapGuard {
            heap: self,
            owned: true,
        })
    }

    /// Its state, for a visitor that took its lock (`heap_lock::visit_all`).
    ///
    /// # Safety
    /// The caller holds the heap's lock as a visitor, and hands it to the guard (which leaves
    /// it when dropped).
    pub(super) unsafe fn visited(&self) -> HeapGuard<'_> {
        HeapGuard {
            heap: self,
            owned: false,
        }
    }

    /// A block of `nbytes` (positive, at most `MAX_VALUE_BYTES`), counted as handed out here;
    /// None if the central pool could not lend one. This is the path of every acquire: a
    /// request whose bin has a block is served inline, a refill out of line.
    #[inline]
    pub(super) fn acquire(&self, pool: &Pool, classes: &Classes, nbytes: usize) -> Option<usize> {
        let mut st = self.own(true);
        let (block, class) = block_for(pool, classes, nbytes);
        if let Some(addr) = st.pop_free(block, class) {
            st.hand_out(pool, &self.shared, addr, block, nbytes, class, true);
            return Some(addr);
        }
        acquire_slow(st, pool, nbytes, block, class)
    }

    /// Takes back `addr` for a thread that does not hold the heap's lock, if the heap has it
    /// out: claims it (`out_table/`), hidden from the memory checkers first, for the lock's
    /// next holder to collect. False if it could not be claimed (not out here, or the record
    /// was being rebuilt): the caller takes the exact path.
    #[inline]
    pub(super) fn claim(&self, pool: &Pool, addr: usize) -> bool {
        let ptr = addr as *const u8;
        self.shared.claim(
            addr,
            |out| {
                if sanitize::active() {
                    sanitize::retire(pool.mempool, ptr);
                    sanitize::hide(ptr, out.block);
                }
            },
            // The swap failed: the block is the caller's again, as it was handed out, for the
            // exact path to retire once.
            |out| sanitize::announce(pool.mempool, ptr, out.requested),
        )
    }

    /// Takes back a block it has out, for its owner; false if it has no such block out.
    #[inline]
    pub(super) fn take_back(&self, pool: &Pool, addr: usize) -> bool {
        self.own(false).take_back(pool, addr)
    }

    /// Gives its free blocks back to the central pool, for its owner; if `keep`, but a few
    /// KiB-sized large ones (`give_back_large`).
    pub(super) fn drain_own(&self, pool: &Pool, keep: bool) {
        let mut st = self.own(false);
        match keep {
            false => st.drain(pool),
            true => st.drain_keeping(pool),
        }
    }
}

impl HeapGuard<'_> {
    /// Collects the blocks other threads released (claimed in its record) into its bins.
    pub(super) fn collect(&mut self, pool: &Pool) {
        let shared = &self.heap.shared;
        if !shared.pending() {
            return;
        }
        let st = &mut **self;
        let mut got = std::mem::take(&mut st.collected);
        st.out.collect(shared, |addr, out| got.push((addr, out)));
        // Hidden from the checkers already, by the releasing thread.
        got.drain(..).for_each(|(addr, out)| st.put_back(pool, addr, out));
        st.collected = got;
    }

    /// Takes back a block it has out; false if it has no such block out. A block whose bin has
    /// room goes there inline; one that needs a new bin or goes back to the central pool, out
    /// of line.
    #[inline]
    pub(super) fn take_back(&mut self, pool: &Pool, addr: usize) -> bool {
        let heap = self.heap;
        let st = &mut **self;
        let Some(out) = st.out.remove(&heap.shared, addr) else {
            return false;
        };
        if sanitize::active() {
            // Before the block goes to the bin, from where it may be handed out again.
            sanitize::retire(pool.mempool, addr as *const u8);
            sanitize::hide(addr as *const u8, out.block);
        }
        st.put_back(pool, addr, out);
        true
    }

    /// Gives its free blocks back to the central pool, those other threads released included.
    pub(super) fn drain(&mut self, pool: &Pool) {
        self.collect(pool);
        if self.free_bytes > 0 {
            self.give_back_all(&mut pool.lock());
        }
    }

    /// [`drain`](Self::drain), but a few KiB-sized large blocks stay (`give_back_large`). A heap
    /// that keeps only those takes no lock: most runs' start.
    pub(super) fn drain_keeping(&mut self, pool: &Pool) {
        self.collect(pool);
        if self.free_bytes > 0 && !self.keeps_all() {
            let mut central = pool.lock();
            self.give_back_small(&mut central);
            self.give_back_large(&mut central);
        }
    }

    /// Its counts, the blocks other threads released taken back first.
    pub(super) fn counts(&mut self, pool: &Pool) -> PoolStats {
        self.collect(pool);
        self.stats
    }
}

impl HeapState {
    /// Restarts its peak at `now`.
    pub(super) fn reset_peak(&mut self, now: u64) {
        self.stats.peak_live_bytes = now;
    }
}

impl HeapState {
    /// Records `addr` (a block of `block` bytes, `class` as in [`Out`]) as handed out for
    /// `nbytes`; `hit` if it came from a bin.
    #[inline]
    #[allow(clippy::too_many_arguments)]
    fn hand_out(
        &mut self,
        pool: &Pool,
        shared: &Shared,
        addr: usize,
        block: usize,
        nbytes: usize,
        class: u8,
        hit: bool,
    ) {
        self.out.insert(
            shared,
            addr,
            Out {
                block,
                requested: nbytes,
                class,
            },
        );
        self.count_out(pool, nbytes, hit);
    }

    /// Counts a block handed out for `nbytes`; `hit` if it came from a bin.
    #[inline]
    fn count_out(&mut self, pool: &Pool, nbytes: usize, hit: bool) {
        let s = &mut self.stats;
        s.acquires += 1;
        s.cache_hits += hit as u64;
        s.live_bytes += nbytes as u64;
        s.peak_live_bytes = s.peak_live_bytes.max(s.live_bytes + pool.central_live());
    }

    /// The bin for large blocks of `size` bytes, made if it has none; once there are
    /// `LARGE_BINS`, a bin whose blocks are gone takes the new size; None when that many other
    /// sizes have blocks waiting. A size keeps its bin while its blocks are all out: a kernel
    /// whose scratch of a dozen sizes comes and goes within each call (ONNX Runtime's sessions,
    /// value by value) found its sizes' bins taken by each other, missed nearly every time, and
    /// each miss gave every large block back to the central pool.
    fn large_bin(&mut self, size: usize) -> Option<&mut Bin> {
        let i = match self.large.iter().position(|(s, _)| *s == size) {
            Some(i) => i,
            None if self.large.len() < LARGE_BINS => {
                self.large.push((size, Bin::default()));
                self.large.len() - 1
            }
            None => {
                let i = self.large.iter().position(|(_, bin)| bin.is_empty())?;
                self.large[i].0 = size;
                i
            }
        };
        Some(&mut self.large[i].1)
    }

    /// Gives back to the central pool one free large block of at least `block` bytes, the
    /// smallest the heap keeps, if it keeps one.
    fn give_back_larger(&mut self, central: &mut Locked<'_>, block: usize) {
        let fit = self
            .large
            .iter_mut()
            .filter(|(size, bin)| *size >= block && !bin.is_empty())
            .min_by_key(|(size, _)| *size);
        if let Some((size, bin)) = fit {
            let size = *size;
            if let Some(addr) = bin.pop() {
                self.free_bytes -= size;
                self.large_free_bytes -= size;
                central.reclaim(addr);
            }
        }
    }

    /// Bytes of its free large blocks below `KEEP_BELOW`: what `give_back_large` keeps, if at
    /// most `KEEP_BYTES`.
    fn keepable_bytes(&self) -> usize {
        self.large
            .iter()
            .filter(|(size, _)| *size < KEEP_BELOW)
            .map(|(size, bin)| size * bin.len)
            .sum()
    }

    /// Whether every free block it has is one `give_back_large` keeps: all its free bytes are
    /// in large blocks below `KEEP_BELOW` (no small block, no larger one), at most `KEEP_BYTES`.
    fn keeps_all(&self) -> bool {
        let keepable = self.keepable_bytes();
        self.free_bytes == keepable && keepable <= KEEP_BYTES
    }

    /// Gives its free large blocks back to the central pool but those below `KEEP_BELOW`, as
    /// long as they hold at most `KEEP_BYTES`.
    fn give_back_large(&mut self, central: &mut Locked<'_>) {
        let keep = self.keepable_bytes() <= KEEP_BYTES;
        for (size, bin) in &mut self.large {
            if keep && *size < KEEP_BELOW {
                continue;
            }
            let bytes = *size * bin.len;
            bin.drain().for_each(|a| central.reclaim(a));
            self.free_bytes -= bytes;
            self.large_free_bytes -= bytes;
        }
    }

    /// Gives every free block back to the central pool.
    fn give_back_all(&mut self, central: &mut Locked<'_>) {
        self.give_back_small(central);
        for (_, bin) in &mut self.large {
            bin.drain().for_each(|a| central.reclaim(a));
        }
        self.free_bytes = 0;
        self.large_free_bytes = 0;
    }

    /// Gives its free small (slab) blocks back to the central pool.
    fn give_back_small(&mut self, central: &mut Locked<'_>) {
        for bin in self.small.iter_mut() {
            bin.drain().for_each(|a| central.reclaim(a));
        }
        self.free_bytes = self.large_free_bytes;
    }

    /// The bin of blocks of `block` bytes (slab class `class` - 1, or 0 for a large block), if
    /// the heap has one: a large size's is searched for among at most `LARGE_BINS`, the
    /// newest size first to be tried.
    #[inline]
    fn bin_of(&mut self, block: usize, class: u8) -> Option<&mut Bin> {
        match class {
            0 => self
                .large
                .iter_mut()
                .find(|(size, _)| *size == block)
                .map(|(_, bin)| bin),
            c => self.small.get_mut(usize::from(c - 1)),
        }
    }

    /// Counts `addr` (handed out as `out`, now hidden from the checkers) as released and puts
    /// it in its bin if there is room, else back to the central pool.
    #[inline]
    fn put_back(&mut self, pool: &Pool, addr: usize, out: Out) {
        self.count_back(out);
        if !self.push_free(addr, out) {
            self.put_back_slow(pool, addr, out);
        }
    }

    /// A free block of `block` bytes (`class` as in [`Out`]) from its bin, if it has one.
    /// Cannot panic (the fast paths rely on it).
    #[inline]
    fn pop_free(&mut self, block: usize, class: u8) -> Option<usize> {
        let addr = self.bin_of(block, class)?.pop()?;
        self.free_bytes -= block;
        if class == 0 {
            self.large_free_bytes -= block;
        }
        Some(addr)
    }

    /// Puts `addr`, handed out as `out`, in the bin of its size if the bin exists and has room
    /// and the heap's free bytes stay within `HEAP_FREE_BYTES`; false, nothing changed,
    /// otherwise. Cannot panic.
    #[inline]
    fn push_free(&mut self, addr: usize, out: Out) -> bool {
        let fits = self.free_bytes + out.block <= HEAP_FREE_BYTES;
        if !fits || !self.bin_of(out.block, out.class).is_some_and(|bin| bin.push(addr)) {
            return false;
        }
        self.free_bytes += out.block;
        if out.class == 0 {
            self.large_free_bytes += out.block;
        }
        true
    }

    /// Counts a block handed out as `out` as released.
    #[inline]
    fn count_back(&mut self, out: Out) {
        self.stats.releases += 1;
        self.stats.live_bytes -= out.requested as u64;
    }

    /// The rest of [`HeapGuard::take_back`]: a large block that fits under the heap's
    /// free bytes goes to a new bin if one can be had, any other block back to the central
    /// pool.
    #[cold]
    #[inline(never)]
    fn put_back_slow(&mut self, pool: &Pool, addr: usize, out: Out) {
        let block = out.block;
        let large_fits = out.class == 0 && self.free_bytes + block <= HEAP_FREE_BYTES;
        if large_fits && self.large_bin(block).is_some_and(|bin| bin.push(addr)) {
            self.free_bytes += block;
            self.large_free_bytes += block;
        } else {
            pool.lock().reclaim(addr);
        }
    }
}

/// The block size and class (as in [`Out`]) that serve a request of `nbytes`.
#[inline]
fn block_for(pool: &Pool, classes: &Classes, nbytes: usize) -> (usize, u8) {
    match pool.is_small(nbytes) {
        true => {
            let class = classes.index(nbytes);
            (classes.size(class), class as u8 + 1)
        }
        false => (nbytes.next_multiple_of(GRAIN), 0),
    }
}

/// [`Heap::acquire`] when the bin of the request's `block` size (`class` as in [`Out`]) is
/// empty or missing: a refill.
#[cold]
#[inline(never)]
fn acquire_slow(mut st: HeapGuard<'_>, pool: &Pool, nbytes: usize, block: usize, class: u8) -> Option<usize> {
    // Blocks other threads released may refill the bin.
    st.collect(pool);
    let (addr, hit) = match st.pop_free(block, class) {
        Some(addr) => (addr, true),
        None => refill(&mut st, pool, nbytes, block, class)?,
    };
    let shared = &st.heap.shared;
    st.hand_out(pool, shared, addr, block, nbytes, class, hit);
    Some(addr)
}

/// Borrows blocks of `block` bytes from the central pool for a request of `nbytes` that found
/// its bin empty: `SMALL_REFILL` for a slab class (the extra ones wait in the bin), one for a
/// large size, after giving the heap's large free blocks back (to be coalesced: a request of a
/// new size must be able to reuse their memory). Returns the block to hand out and whether no
/// memory had to be committed; None if the central pool could not lend it.
#[cold]
fn refill(st: &mut HeapState, pool: &Pool, nbytes: usize, block: usize, class: u8) -> Option<(usize, bool)> {
    let mut central = pool.lock();
    if class == 0 && st.large_free_bytes > 0 {
        // The heap's large blocks go back for the central pool to coalesce and serve this size
        // from (a request that other sizes' free blocks could serve takes no new memory), the
        // smallest larger one at least; a few KiB-sized ones stay (`KEEP_BELOW`).
        st.give_back_larger(&mut central, block);
        st.give_back_large(&mut central);
    }
    let threshold = pool.config.large_threshold_bytes;
    let (addr, committed) = central.lend(nbytes, threshold).ok()?;
    if let Some(class) = class.checked_sub(1).map(usize::from) {
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
