//! The buffer pool: 16-byte-aligned blocks that go back to the pool for reuse, not to the system.
//!
//! Two tiers share the same memory:
//! - requests below `large_threshold_bytes` (default 1 KiB) come from size-class *slabs*
//!   (less than 16 bytes or 12.5% of slack per block), each slab a 16 KiB-or-larger chunk of the
//!   arena; a run's small values, whose sizes are many and whose blocks are few, take 64-byte
//!   grains of the slabs' arena instead (`central::from_slabs`);
//! - larger requests take the best-fitting free block of the *arena*: anonymous mmap regions
//!   (1 GiB of address space each by default, committed only as pages are touched), split on
//!   acquire and coalesced on release, in 64-byte grains (64-byte aligned).
//!
//! Invariants: a block has one holder from `acquire` until it is given back; a run's buffers go
//! back only through the run (or its result), never [`Pool::release`]; a pointer that is not out
//! (never handed out, or given back already) is refused and changes nothing. Nothing is cleared
//! unless asked. Committed pages stay committed, so a workload that repeats itself asks the
//! system for nothing after its first round and takes no page faults: `max_pool_bytes` caps what
//! stays committed (past it, released memory goes back with `MADV_DONTNEED`), [`Pool::trim`]
//! gives back all free memory and unmaps empty regions.
//!
//! Two levels of ownership (mimalloc's shape): the *central* pool (`central.rs`) owns all the
//! memory under one mutex, whose work is a few tree or list operations, no system calls except
//! when memory is committed or given back; it serves runs. The public `acquire` and `release`
//! go through the calling thread's *heap* (`heap/`), which borrows blocks from the central
//! pool and keeps a few free ones at hand: a pair of them on one thread takes no lock that
//! another thread takes (and, most often, a fast path with no call: `heap/fast.rs`), and a
//! release from another thread claims its block in the owning heap's record, with no lock.
//! Every release is still checked exactly (foreign and double releases are refused).
//! AddressSanitizer and valgrind memcheck,
//! when the process has them, are told which bytes a program may touch (module `sanitize`), so
//! they catch a read of a released block or a write past one; red zones
//! ([`PoolConfig::red_zones`]) catch such writes without a tool.
//!
//! ```
//! let pool = graphsched::Pool::default();
//! let p = pool.acquire(100, true).unwrap();
//! assert_eq!(p.as_ptr() as usize % 16, 0);
//! // SAFETY: `p` came from this pool's `acquire` and is not used after.
//! unsafe { pool.release(p) }.unwrap();
//! let q = pool.acquire(100, false).unwrap(); // the cached block: no new memory
//! let s = pool.stats();
//! assert_eq!((s.acquires, s.cache_hits, s.live_bytes, s.os_allocs), (2, 1, 100, 1));
//! # unsafe { pool.release(q) }.unwrap();
//! ```

mod addr_hash;
mod arena;
mod batch;
mod central;
mod heap;
mod heap_lock;
mod heaps;
mod out_table;
mod region;
pub(crate) mod sanitize;
mod settings;
mod slab;

use std::ptr::NonNull;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::{Mutex, MutexGuard, TryLockError};

use arena::Arena;
pub(crate) use arena::NEVER;
pub(crate) use central::Owner;
use central::{not_out_message, Locked, Request, State};
use heaps::Heaps;
use sanitize::Mempool;
pub use settings::{PoolConfig, PoolStats};

use crate::error::{err, ErrorKind, Result};
use crate::tensor::MAX_VALUE_BYTES;

const DEFAULT_LARGE_THRESHOLD: u64 = 1024;
const MAX_LARGE_THRESHOLD: u64 = 64 * 1024;
const DEFAULT_REGION_BYTES: u64 = 1 << 30;
/// Red zone size (keeps 64-byte blocks 64-byte aligned), and the patterns: guards, and released
/// memory.
const RED_ZONE: usize = 64;
const GUARD: u8 = 0xFD;
const POISON: u8 = 0xDD;

/// A thread-safe pool. Dropping it unmaps everything, including blocks still handed out.
pub struct Pool {
    config: PoolConfig,
    /// This pool for memcheck, when it runs.
    mempool: Mempool,
    state: Mutex<State>,
    heaps: Heaps,
    published: Published,
}

/// Figures of the central pool as the last holder of its lock left them, for readers that must
/// not take the lock (a traced run after every node, every run twice, the heaps' peaks).
/// Relaxed: figures, publishing nothing.
#[derive(Default)]
struct Published {
    reserved: AtomicU64,
    os_allocs: AtomicU64,
    /// Bytes out of the central pool (runs' buffers, and callers' when heaps are off), parked
    /// ones included.
    live: AtomicU64,
    /// Of `live`, the bytes of blocks parked in sequential runs' caches: out of the central pool
    /// but held by no value, so not live. Changed without the lock (`park`, `unpark`).
    parked: AtomicU64,
    /// Whether released blocks wait to be coalesced (`Pool::settle` has work to do).
    unsettled: AtomicBool,
    /// How many times the central lock was taken (tests of the paths that must not).
    #[cfg(test)]
    locks: AtomicU64,
    /// The highest live bytes seen: `live - parked` plus the heaps' bytes out. Raised (fetch_max)
    /// by the central pool under its lock and by `unpark` without it.
    peak_live: AtomicU64,
}

impl Default for Pool {
    fn default() -> Self {
        Pool::new(PoolConfig::default()).expect("the default configuration is valid")
    }
}

impl Pool {
    /// A pool with `config`, zero fields defaulted; maps nothing until the first acquire.
    /// `InvalidArgument` if `large_threshold_bytes` or `region_bytes` is out of range.
    pub fn new(config: PoolConfig) -> Result<Self> {
        let mut config = config;
        if config.large_threshold_bytes == 0 {
            config.large_threshold_bytes = DEFAULT_LARGE_THRESHOLD;
        }
        if config.region_bytes == 0 {
            config.region_bytes = DEFAULT_REGION_BYTES;
        }
        if config.large_threshold_bytes > MAX_LARGE_THRESHOLD {
            return err(
                ErrorKind::InvalidArgument,
                format!(
                    "large_threshold_bytes is {}, more than the {MAX_LARGE_THRESHOLD} allowed",
                    config.large_threshold_bytes
                ),
            );
        }
        if config.region_bytes > MAX_VALUE_BYTES as u64 {
            return err(
                ErrorKind::InvalidArgument,
                format!("region_bytes is {}, larger than the address space", config.region_bytes),
            );
        }
        Ok(Pool {
            config,
            mempool: sanitize::new_mempool(),
            state: Mutex::new(State::new(
                config.region_bytes as usize,
                config.large_threshold_bytes as usize,
            )),
            heaps: Heaps::new(
                config.red_zones == 0 && config.max_pool_bytes == 0,
                config.large_threshold_bytes as usize,
            ),
            published: Published::default(),
        })
    }

    /// The configuration in force, defaults filled in.
    pub fn config(&self) -> PoolConfig {
        self.config
    }

    /// A block of at least `nbytes`, 16-byte aligned; cleared only when `zero` is set.
    #[inline]
    pub fn acquire(&self, nbytes: usize, zero: bool) -> Result<NonNull<u8>> {
        // The fast path: a block from the thread's heap at once, with nothing to clear, guard
        // or tell a memory checker. It makes no call: everything else is out of line. (The
        // size checks are what `check_request` accepts and a heap records.)
        let fast =
            !zero && nbytes != 0 && nbytes < out_table::MAX_REQUEST && self.guard_bytes() == 0 && !sanitize::active();
        if fast {
            if let Some(ptr) = self
                .heaps
                .acquire_hit(self, nbytes)
                .and_then(|a| NonNull::new(a as *mut u8))
            {
                return Ok(ptr);
            }
        }
        self.acquire_any(nbytes, zero)
    }

    /// [`acquire`](Self::acquire) off its fast path: from the thread's heap if it can serve
    /// it, else from the central pool (which also says what is wrong with a bad request).
    #[inline(never)]
    fn acquire_any(&self, nbytes: usize, zero: bool) -> Result<NonNull<u8>> {
        // What `check_request` accepts, and what a heap records (1 TiB: past it, the central
        // pool).
        if nbytes != 0 && nbytes < out_table::MAX_REQUEST {
            if let Some(addr) = self.heaps.acquire(self, nbytes) {
                return Ok(self.hand_out(addr, nbytes, zero));
            }
        }
        self.acquire_until(nbytes, zero, NEVER, Owner::Caller)
    }

    /// Whether a request of `nbytes` (red zones included) comes from the slabs.
    #[inline]
    fn is_small(&self, nbytes: usize) -> bool {
        (nbytes as u64) < self.config.large_threshold_bytes
    }

    /// Like [`acquire`](Self::acquire), for `owner`, told when the block will be released:
    /// `release_tick` on any clock of the caller's that grows over time (runs use the position
    /// of the value's last consumer in the topological order). Blocks released together are
    /// placed together.
    pub(crate) fn acquire_until(
        &self,
        nbytes: usize,
        zero: bool,
        release_tick: u64,
        owner: Owner,
    ) -> Result<NonNull<u8>> {
        self.acquire_at(nbytes, zero, release_tick, owner, None)
    }

    /// Like [`acquire_until`](Self::acquire_until), at address `at` if the block is large and
    /// those bytes are free (see [`room_for`](Self::room_for)), else wherever `acquire_until`
    /// would place it.
    pub(crate) fn acquire_at(
        &self,
        nbytes: usize,
        zero: bool,
        release_tick: u64,
        owner: Owner,
        at: Option<usize>,
    ) -> Result<NonNull<u8>> {
        Self::check_request(nbytes)?;
        let inner = nbytes + self.guard_bytes() * 2;
        let threshold = self.config.large_threshold_bytes;
        let elsewhere = self.heaps.live();
        let addr = {
            let mut st = self.lock();
            let request = Request {
                nbytes: inner,
                requested: nbytes,
                release_tick,
                owner,
                at,
            };
            let addr = st.acquire(request, threshold)?;
            self.raise_peak(st.stats.live_bytes, elsewhere);
            addr
        };
        Ok(self.hand_out(addr, nbytes, zero))
    }

    /// Of `central` bytes out of the central pool, the live ones: parked blocks are not.
    #[inline]
    fn unparked(&self, central: u64) -> u64 {
        central.saturating_sub(self.published.parked.load(Ordering::Relaxed))
    }

    /// The central pool's live bytes as its lock's last holder left them.
    #[inline]
    fn central_live(&self) -> u64 {
        self.unparked(self.published.live.load(Ordering::Relaxed))
    }

    /// Raises the live peak to what is live now: `central` bytes out of the central pool, less
    /// the parked ones, plus `elsewhere` (the heaps'). A plain load first: the peak rarely moves.
    fn raise_peak(&self, central: u64, elsewhere: u64) {
        let now = self.unparked(central) + elsewhere;
        if now > self.published.peak_live.load(Ordering::Relaxed) {
            self.published.peak_live.fetch_max(now, Ordering::Relaxed);
        }
    }

    /// Where `nbytes` of free large-block space start now, as a large acquire would choose them,
    /// without taking them: a caller that knows how its blocks' lifetimes fit together (a run
    /// with a plan of its graph's values) asks for each block at its offset from there
    /// ([`acquire_at`](Self::acquire_at)). `None` with red zones (blocks then carry guards) or
    /// if no space can be had.
    pub(crate) fn room_for(&self, nbytes: usize) -> Option<usize> {
        if self.config.red_zones != 0 || nbytes == 0 {
            return None;
        }
        Self::check_request(nbytes).ok()?;
        self.lock().large.room_for(nbytes).ok()
    }

    /// Bytes of each red zone (0 when they are off).
    #[inline]
    fn guard_bytes(&self) -> usize {
        if self.config.red_zones != 0 {
            RED_ZONE
        } else {
            0
        }
    }

    /// The caller's pointer into a block at `addr` that the pool just took for it: red zones laid
    /// around it if they are on, the memory checkers told, cleared if `zero`.
    #[inline]
    fn hand_out(&self, addr: usize, nbytes: usize, zero: bool) -> NonNull<u8> {
        let g = self.guard_bytes();
        let ptr = (addr + g) as *mut u8;
        if g > 0 {
            // The block is hidden from the checkers (carved or released): reveal it while the
            // guards are written, and hide it again.
            sanitize::reveal(addr as *const u8, g + nbytes + g);
            // SAFETY: the block holds `g + nbytes + g` bytes and is the caller's alone.
            unsafe {
                (addr as *mut u8).write_bytes(GUARD, g);
                ((addr + g + nbytes) as *mut u8).write_bytes(GUARD, g);
            }
            sanitize::hide(addr as *const u8, g + nbytes + g);
        }
        // Exactly `nbytes`: the slack past them and the red zones stay hidden.
        sanitize::announce(self.mempool, ptr, nbytes);
        if zero {
            // SAFETY: the block holds at least `nbytes` bytes and is now the caller's alone.
            unsafe { ptr.write_bytes(0, nbytes) };
        }
        NonNull::new(ptr).expect("blocks lie inside mapped regions")
    }

    /// Whether the red zones around a live block of `nbytes` at `ptr` are intact (always true
    /// when they are off). Runs call it after each kernel to name a node that wrote out of bounds.
    ///
    /// # Safety
    /// `ptr` is a live block of `nbytes` from this pool.
    pub(crate) unsafe fn guards_intact(&self, ptr: NonNull<u8>, nbytes: usize) -> bool {
        let g = self.guard_bytes();
        if g == 0 {
            return true;
        }
        let p = ptr.as_ptr() as usize;
        let intact = |zone: usize| {
            // Red zones stay hidden from the memory checkers: read them quietly.
            sanitize::quietly(|| {
                // SAFETY: a live block handed out with red zones has `g` guard bytes on each side.
                let bytes = unsafe { std::slice::from_raw_parts(zone as *const u8, g) };
                bytes.iter().all(|&b| b == GUARD)
            })
        };
        intact(p - g) && intact(p + nbytes)
    }

    /// The block's address, after checking that `by` may give it back and, with red zones on,
    /// checking its guards and poisoning it.
    /// (Without red zones there is nothing to check here: `State::release` checks the owner.)
    fn unguard(&self, ptr: NonNull<u8>, st: &State, by: Owner) -> Result<NonNull<u8>> {
        let g = self.guard_bytes();
        if g == 0 {
            return Ok(ptr);
        }
        let addr = (ptr.as_ptr() as usize).wrapping_sub(g);
        let Some((block_bytes, owner)) = st.find(addr) else {
            return err(ErrorKind::UnknownPointer, not_out_message(ptr.as_ptr()));
        };
        // Before the poison fill below: a block the caller may not release stays untouched.
        if owner == Owner::Run && by == Owner::Caller {
            return err(ErrorKind::UnknownPointer, run_owned_message(ptr.as_ptr()));
        }
        let nbytes = block_bytes - 2 * g;
        // SAFETY: the block is live (just looked up) and `nbytes` long.
        let intact = unsafe { self.guards_intact(ptr, nbytes) };
        // SAFETY: the block is live and being given back: nobody may use it any more.
        unsafe { ptr.as_ptr().write_bytes(POISON, nbytes) };
        if !intact {
            return err(
                ErrorKind::BufferOverrun,
                format!("the red zone around the {nbytes}-byte block at {ptr:p} was overwritten: something wrote out of its bounds"),
            );
        }
        Ok(NonNull::new(addr as *mut u8).expect("inside a region"))
    }

    #[inline]
    fn check_request(nbytes: usize) -> Result<()> {
        if nbytes == 0 {
            return err(
                ErrorKind::InvalidArgument,
                "cannot acquire 0 bytes: nbytes must be positive",
            );
        }
        if nbytes > MAX_VALUE_BYTES || Arena::block_size(nbytes).is_none() {
            return err(
                ErrorKind::SizeOverflow,
                format!("cannot acquire {nbytes} bytes: more than the {MAX_VALUE_BYTES} bytes one block can have"),
            );
        }
        Ok(())
    }

    /// Takes back a block from `acquire`. A pointer the pool did not hand out, or one already
    /// released, is an error and changes nothing.
    ///
    /// # Safety
    /// If `ptr` is a live block of this pool, the caller owns it (it came from this pool's
    /// `acquire`, not from a run, whose buffers belong to the run or its result) and nobody uses
    /// it after this call: the pool may hand its bytes to someone else at once.
    #[inline]
    pub unsafe fn release(&self, ptr: NonNull<u8>) -> Result<()> {
        // The fast path, as in `acquire`: the block the thread's heap handed out last, back
        // to its bin.
        if !sanitize::active() && self.heaps.release_hit(ptr.as_ptr() as usize) {
            return Ok(());
        }
        // SAFETY: the caller's promise.
        unsafe { self.release_any(ptr) }
    }

    /// [`release`](Self::release) off its fast path.
    ///
    /// # Safety
    /// As for [`release`](Self::release).
    #[inline(never)]
    unsafe fn release_any(&self, ptr: NonNull<u8>) -> Result<()> {
        if self.heaps.release(self, ptr) {
            return Ok(());
        }
        // SAFETY: the caller's promise.
        unsafe { self.release_by(ptr, Owner::Caller) }
    }

    /// [`release`](Self::release) for `by`: a run gives back its own blocks, which `Caller`
    /// may not.
    ///
    /// # Safety
    /// As for [`release`](Self::release).
    pub(crate) unsafe fn release_by(&self, ptr: NonNull<u8>, by: Owner) -> Result<()> {
        let mut st = self.lock();
        let result = self.take_back(&mut st, ptr, by);
        if self.config.max_pool_bytes != 0 {
            st.shrink_to(self.config.max_pool_bytes as usize);
        }
        result
    }

    /// One release under the lock. An overwritten red zone is reported, and the block still goes
    /// back (nothing leaks); any other error changes nothing.
    fn take_back(&self, st: &mut State, ptr: NonNull<u8>, by: Owner) -> Result<()> {
        let (block, damage) = match self.unguard(ptr, st, by) {
            Ok(block) => (block, None),
            Err(e) if e.kind() == ErrorKind::BufferOverrun => (
                NonNull::new((ptr.as_ptr() as usize - self.guard_bytes()) as *mut u8).expect("inside a region"),
                Some(e),
            ),
            Err(e) => return Err(e),
        };
        st.release(block, self.mempool, self.guard_bytes(), by)?;
        damage.map_or(Ok(()), Err)
    }

    /// Coalesces every cached block, every thread heap's included, so that what comes next
    /// finds the pool as if each block had gone back to it at once. Runs start with the same
    /// but for what a thread heap keeps at hand: repeated runs of a graph find the pool as the
    /// first run left it, make the same choices, and so need no new memory.
    pub fn settle(&self) {
        self.heaps.drain(self, true, false);
        self.coalesce();
    }

    /// [`settle`](Self::settle), the other threads' heaps left as they are unless `others`: a
    /// run among concurrent ones would take their free blocks from under their runs, with a
    /// process-wide barrier each time, for a repeatability runs that interleave do not have.
    ///
    /// The calling thread's heap keeps a few KiB-sized large blocks (`heap/`, `KEEP_BELOW`): a
    /// kernel that takes scratch from the pool inside its call finds them again at every run.
    #[inline]
    pub(crate) fn settle_from(&self, others: bool) {
        self.heaps.drain(self, others, true);
        self.coalesce();
    }

    /// Coalesces what waits to be (nothing: no lock, as at most runs' start).
    #[inline]
    fn coalesce(&self) {
        if self.published.unsettled.load(Ordering::Relaxed) {
            self.lock().settle();
        }
    }

    /// Gives every free byte back to the system and unmaps regions that hold no block.
    pub fn trim(&self) {
        self.heaps.drain(self, true, false);
        let mut st = self.lock();
        st.shrink_to(0);
        st.small.unmap_empty_regions();
        st.large.unmap_empty_regions();
    }

    /// A snapshot of the counters: the central pool's under its lock, so they agree with each
    /// other, plus each thread heap's under its own (see module `heap` for what peaks mean when
    /// threads acquire at once).
    pub fn stats(&self) -> PoolStats {
        let mut stats = {
            let st = self.lock();
            let (a, b) = (st.small.os, st.large.os);
            PoolStats {
                reserved_bytes: st.committed() as u64,
                os_allocs: a.allocs + b.allocs,
                os_alloc_bytes: a.alloc_bytes + b.alloc_bytes,
                os_frees: a.frees + b.frees,
                os_free_bytes: a.free_bytes + b.free_bytes,
                live_bytes: self.unparked(st.stats.live_bytes),
                peak_live_bytes: self.published.peak_live.load(Ordering::Relaxed),
                ..st.stats
            }
        };
        self.heaps.add_counts(self, &mut stats);
        stats
    }

    /// Restarts peak tracking from the current levels, to measure one run.
    pub fn reset_peaks(&self) {
        let elsewhere = self.heaps.live();
        let central = {
            let mut st = self.lock();
            let live = self.unparked(st.stats.live_bytes);
            self.published.peak_live.store(live + elsewhere, Ordering::Relaxed);
            st.stats.peak_reserved_bytes = st.committed() as u64;
            live
        };
        self.heaps.reset_peaks(central);
    }

    fn lock(&self) -> Locked<'_> {
        #[cfg(test)]
        self.published.locks.fetch_add(1, Ordering::Relaxed);
        // Every update under the lock completes before anything can panic, so a poisoned lock
        // (a panic elsewhere in the holder's thread) leaves consistent state.
        let state = self.try_state().unwrap_or_else(|| self.wait_for_state());
        Locked { state, pool: self }
    }

    /// The central lock is held. Its holders keep it for a batch of blocks, a few microseconds,
    /// less than a futex sleep and wake-up cost the waiter (two threads refilling their caches
    /// at once spent more time switching than working): spin a while, backing off, then block.
    #[cold]
    #[inline(never)]
    fn wait_for_state(&self) -> MutexGuard<'_, State> {
        // About 1,000 pauses in all before blocking: some tens of microseconds.
        for round in 0..24u32 {
            for _ in 0..1u32 << round.min(6) {
                std::hint::spin_loop();
            }
            if let Some(state) = self.try_state() {
                return state;
            }
        }
        self.state.lock().unwrap_or_else(|e| e.into_inner())
    }

    /// The central lock if it is free (a poisoned one is usable, see `lock`).
    #[inline]
    fn try_state(&self) -> Option<MutexGuard<'_, State>> {
        match self.state.try_lock() {
            Ok(state) => Some(state),
            Err(TryLockError::Poisoned(p)) => Some(p.into_inner()),
            Err(TryLockError::WouldBlock) => None,
        }
    }

    /// `stats().reserved_bytes` without taking the pool's lock: the figure the last operation
    /// left, for callers that read it often (a traced run, after every node).
    pub fn reserved_bytes(&self) -> u64 {
        self.published.reserved.load(Ordering::Relaxed)
    }

    /// `stats().os_allocs` without taking the pool's lock, as the last operation left it.
    pub fn os_allocs(&self) -> u64 {
        self.published.os_allocs.load(Ordering::Relaxed)
    }
}

impl Drop for Pool {
    /// Memcheck forgets the pool's blocks (live ones too) before the regions go.
    fn drop(&mut self) {
        sanitize::destroy_mempool(self.mempool);
    }
}

fn run_owned_message(ptr: *const u8) -> String {
    format!(
        "pointer {ptr:p} is the buffer of a value of a graph run, not a block acquired from the pool: the run (or \
         its result, when freed) gives it back"
    )
}

#[cfg(test)]
mod tests;

#[cfg(test)]
impl Pool {
    /// Visits of its thread heaps so far: tests of the paths that must not visit.
    pub(crate) fn heap_visits(&self) -> u32 {
        self.heaps.visits()
    }
}
