//! Per-thread caches of small blocks in a run: small outputs rarely take a lock. And how a run
//! gives blocks back (a freed value's block to the thread's cache, the rest to the pool). Behind
//! the caches is the graph's reserve ([`reserve`](crate::exec::memory::reserve)): a cache's surplus goes there and a refill
//! comes from there first; the pool, which every thread contends for, is the last resort.

use std::ptr::NonNull;

use crate::error::{ErrorKind, Result};
use crate::exec::memory::reserve::Reserve;
use crate::exec::node::scratch::Counts;
use crate::exec::state::{RunState, Slot};
use crate::kernel::Buffer;
use crate::pool::{sanitize, Owner, Pool};

/// A thread's small blocks at hand in one run, and the size that last missed with how many
/// blocks its refill took.
#[derive(Default)]
pub(in crate::exec) struct BlockCache {
    pub(in crate::exec) blocks: Vec<Buffer>,
    streak: (usize, usize),
    /// A refill's blocks on their way in (kept to reuse its memory).
    fresh: Vec<NonNull<u8>>,
    /// A sequential run's cached blocks are parked in the pool (not live there). Handing one to
    /// a node makes it live again, and taking it back parks it: rather than two atomics on the
    /// pool's shared counts for every node, the cache keeps the bytes it unparked since it last
    /// reported to the pool, and the most they reached ([`report_parked`](Self::report_parked)).
    /// It reports before the run
    /// takes or gives back any other block (so that the pool's peak is exact when the run is its
    /// only user) and when the run ends; in between, the pool counts those blocks as parked.
    unparked: i64,
    unparked_peak: i64,
    /// The counts of the thread's tasks in the run (`RunState::flush`): the cache is its own
    /// place there.
    pub(in crate::exec) counts: Counts,
    /// Blocks the graph's reserve had no room for, on their way to the pool (kept for its
    /// memory: room for a whole cache, so that a steady run allocates nothing here).
    refused: Vec<Buffer>,
}

impl BlockCache {
    pub(in crate::exec) fn new() -> BlockCache {
        BlockCache {
            refused: Vec::with_capacity(CACHE_BLOCKS + 1),
            ..BlockCache::default()
        }
    }

    /// Counts a parked block of `bytes` as handed to a node.
    fn unpark(&mut self, bytes: usize) {
        self.unparked += bytes as i64;
        self.unparked_peak = self.unparked_peak.max(self.unparked);
    }

    /// Tells the pool what this cache unparked and parked since it last did (see `unparked`).
    pub(in crate::exec) fn report_parked(&mut self, pool: &Pool) {
        if self.unparked != 0 || self.unparked_peak != 0 {
            pool.count_parked(self.unparked, self.unparked_peak);
            (self.unparked, self.unparked_peak) = (0, 0);
        }
    }
}

/// Blocks up to this size go through the per-thread caches (larger ones straight to the pool,
/// which coalesces them); a cache refills `REFILL` blocks at a time and holds at most
/// `CACHE_BLOCKS`, giving half back when full.
pub(in crate::exec) const CACHE_MAX_BYTES: usize = 16 * 1024;
pub(in crate::exec) const CACHE_BLOCKS: usize = 64;
const REFILL: usize = 16;

/// How many block caches a run has: one per thread that may execute its nodes, or none. Under
/// a memory limit admission needs the pool's own count exact at every moment, and red zones
/// are checked block by block: no caches. A sequential run has one, whose parked blocks the pool
/// counts as not live (`Pool::park`), so its figures stay exact.
pub(in crate::exec) fn cache_count(pool: &Pool, memory_limit: u64, threads: usize) -> usize {
    match memory_limit > 0 || pool.config().red_zones != 0 {
        true => 0,
        false => threads,
    }
}

impl RunState<'_> {
    /// The graph's reserve of small blocks, if this run keeps blocks there ([`reserve`](crate::exec::memory::reserve)).
    fn reserve(&self) -> Option<&Reserve> {
        let reserve = &self.arrays.reserve;
        reserve.is_of(self.pool).then_some(reserve)
    }

    /// Gives the oldest `count` of `cache`'s blocks to the graph's reserve, or to the pool
    /// where it has no room.
    fn spill(&self, cache: &mut BlockCache, count: usize) {
        let blocks = cache.blocks.drain(..count);
        match self.reserve() {
            Some(reserve) => {
                reserve.keep(self.pool, blocks, self.sequential, &mut cache.refused);
                release_many(self.pool, cache.refused.drain(..), self.sequential);
            }
            None => release_many(self.pool, blocks, self.sequential),
        }
    }

    /// The block cache of the thread in `slot`, if any.
    #[allow(clippy::mut_from_ref)]
    pub(in crate::exec) fn cache(&self, slot: Option<usize>) -> Option<&mut BlockCache> {
        let cell = self.caches.get(slot?)?;
        // SAFETY: a slot belongs to one thread while the run goes on (see `caches`), and this
        // borrow ends before that thread borrows it again: a caller holding one across calls
        // that may look the cache up (a node's end on the general path) holds it as a local,
        // used no more after them, and passes it down where it is needed (`end_node_ok`).
        Some(unsafe { &mut *cell.get() })
    }

    /// Puts blocks of `n` bytes in `cache`, which has none, taking them from the graph's
    /// reserve if it has some, else from the pool: one at first, twice as many each time the
    /// same size misses again in a row, up to `REFILL` (a fan-out of equal outputs takes a lock
    /// once per `REFILL` nodes; sizes seen once cost no extra blocks).
    /// Returns how many blocks it took from the pool.
    fn refill(&self, cache: &mut BlockCache, n: usize) -> Result<u64> {
        let count = match cache.streak {
            (size, count) if size == n => (count * 2).min(REFILL),
            _ => 1,
        };
        cache.streak = (n, count);
        if let Some(reserve) = self.reserve() {
            if reserve.take(self.pool, n, count, &mut cache.blocks, self.sequential) > 0 {
                return Ok(0);
            }
        }
        let fresh = &mut cache.fresh;
        fresh.clear();
        if let Err(e) = self.pool.acquire_many(n, count, Owner::Run, self.sequential, fresh) {
            let taken = fresh.drain(..).map(|p| Buffer::new(p.as_ptr().cast(), n));
            release_many(self.pool, taken, self.sequential);
            return Err(e);
        }
        // Parked: a checker (ASan, valgrind) reports any touch until a node is handed one.
        cache.blocks.extend(fresh.drain(..).map(|p| {
            sanitize::hide(p.as_ptr(), n);
            Buffer::new(p.as_ptr().cast(), n)
        }));
        Ok(count as u64)
    }

    /// A block of `n` bytes from `cache` (the newest of that size: still warm), refilled from
    /// the graph's reserve or the pool if it has none; with how many blocks the refill took.
    /// Inline when the newest block fits, as it does in a graph of equal sizes.
    #[inline(always)]
    pub(in crate::exec) fn take_cached(&self, cache: &mut BlockCache, n: usize) -> Result<(Buffer, u64)> {
        let (buffer, refills) = match cache.blocks.last() {
            Some(&b) if b.capacity == n => {
                cache.blocks.pop();
                (b, 0)
            }
            _ => self.take_cached_slow(cache, n)?,
        };
        if self.sequential {
            cache.unpark(buffer.block);
        }
        Ok((buffer, refills))
    }

    /// `take_cached` when the newest block is not of size `n`: the newest one of that size, or
    /// a refill's.
    #[inline(never)]
    fn take_cached_slow(&self, cache: &mut BlockCache, n: usize) -> Result<(Buffer, u64)> {
        if let Some(i) = cache.blocks.iter().rposition(|b| b.capacity == n) {
            return Ok((cache.blocks.swap_remove(i), 0));
        }
        let refills = self.refill(cache, n)?;
        Ok((cache.blocks.pop().expect("a refill adds blocks"), refills))
    }

    /// Returns a value's buffer to the pool, or to the thread's cache if it is small and the run
    /// has no memory limit (under a limit the pool's own count must stay exact); the bytes it
    /// held of pool memory (0: none). `LEAN`: in a run without a plan ([`lean`](crate::exec::node::lean)), whose values never
    /// live in an arena. `SETTLE`: the caller takes the bytes off the run's live count
    /// (`RunState::settle_live`), where otherwise this does.
    #[inline(always)]
    pub(in crate::exec) fn drop_value<const LEAN: bool, const SETTLE: bool>(
        &self,
        v: u32,
        cache: Option<&mut BlockCache>,
    ) -> u64 {
        // SAFETY: the last reference is gone (refs reached 0 with AcqRel): nobody reads it again.
        let buffer = unsafe { empty_slot(&mut *self.slots[v as usize].get()) };
        let bytes = buffer.capacity;
        if bytes == 0 {
            return 0;
        }
        if !LEAN && self.in_arena(buffer) {
            self.sub_live(bytes as u64);
            return bytes as u64;
        }
        match cache {
            // A value with a hint goes back to the pool: its bytes are where the hints of later
            // values need room (see `exec::memory::hints`).
            Some(cache) if bytes <= CACHE_MAX_BYTES && self.hint(v).is_none() => {
                // Parked until a node of this thread takes it: a kernel that kept a pointer to
                // the value and reads it now is reported by the checkers.
                sanitize::hide(buffer.ptr.cast(), bytes);
                if self.sequential {
                    cache.unparked -= buffer.block as i64;
                }
                cache.blocks.push(buffer);
                if cache.blocks.len() > CACHE_BLOCKS {
                    self.spill(cache, CACHE_BLOCKS / 2);
                }
            }
            cache => {
                if let Some(cache) = cache {
                    cache.report_parked(self.pool);
                }
                release(self.pool, buffer)
            }
        }
        // Only now may admission count these bytes as free: the pool has them back, so the
        // pool's live bytes never exceed what the run accounts for.
        if !SETTLE {
            self.sub_live(bytes as u64);
        }
        bytes as u64
    }

    /// Empties the caches into the graph's reserve ([`reserve`](crate::exec::memory::reserve)), or the pool where it has no
    /// room (the caches keep their memory), and adds the counts the threads left with their
    /// caches to the run's. By the caller, once no task is under way.
    pub(crate) fn flush_caches(&mut self) {
        let mut gathered = Counts::default();
        for i in 0..self.caches.len() {
            // No task of the run is under way: every cache is the caller's now.
            let Some(cache) = self.cache(Some(i)) else { continue };
            gathered.add(std::mem::take(&mut cache.counts));
            cache.report_parked(self.pool);
            // An empty cache takes no lock (a one-node graph's run ends with one).
            if !cache.blocks.is_empty() {
                self.spill(cache, cache.blocks.len());
            }
            cache.streak = (0, 0);
        }
        self.tally.gather(gathered);
    }
}

/// Gives blocks back to the pool under one lock (a cache's surplus, a refill's leftovers, a
/// result's outputs), parked ones if `parked` (`Pool::park`). Caller memory (NULL) and empty
/// dynamic outputs (capacity 0, never from the pool) are skipped; nothing left takes no lock.
pub(in crate::exec) fn release_many(pool: &Pool, buffers: impl IntoIterator<Item = Buffer>, parked: bool) {
    let blocks = buffers
        .into_iter()
        .filter(|b| b.capacity > 0)
        .filter_map(|b| NonNull::new(b.ptr.cast::<u8>()));
    // SAFETY: a run releases only blocks it acquired, once, when their last reader is done.
    match unsafe { pool.release_many(blocks, Owner::Run, parked) } {
        // A red zone overwritten: every block is back in the pool, and the run has already
        // named the node that did it (see `check_red_zones`).
        Err(e) if e.kind() == ErrorKind::BufferOverrun => {}
        other => other.expect("a run releases only blocks it acquired, once"),
    }
}

/// Gives one buffer back to the pool, as [`release_many`] does.
#[inline]
pub(in crate::exec) fn release(pool: &Pool, buffer: Buffer) {
    if buffer.capacity > 0 && !buffer.ptr.is_null() {
        release_many(pool, std::iter::once(buffer), false);
    }
}

/// Empties a slot whose value is gone and returns the buffer it held. Only the two pointers are
/// reset, which is what marks a slot empty (see `bind` and `Drop`): the rest of the 192-byte
/// slot is rewritten by the binding or the producer's placement before anyone reads it again.
pub(in crate::exec) fn empty_slot(slot: &mut Slot) -> Buffer {
    slot.tensor.data = std::ptr::null_mut();
    std::mem::replace(&mut slot.buffer, Buffer::NONE)
}
