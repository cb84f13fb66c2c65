//! The central pool: the arenas, the slabs and the record of every block out, under one mutex.
//! It serves runs, the threads' heaps (`heap/`) when they run dry, and every caller when heaps
//! are off; it owns all the memory, so coalescing, caps and trimming see every free byte.

use std::collections::HashMap;
use std::hash::BuildHasherDefault;
use std::ptr::NonNull;
use std::sync::atomic::Ordering;
use std::sync::MutexGuard;

use super::addr_hash::AddrHasher;
use super::arena::{Arena, NEVER};
use super::sanitize::{self, Mempool};
use super::slab::Slabs;
use super::{run_owned_message, Pool, PoolStats};
use crate::error::{err, ErrorKind, Result};

/// Who may give a block back. A run's buffers belong to the run (and then its result): the
/// public `release` refuses them, so a kernel or an engine cannot free a value under the run.
#[derive(Clone, Copy, PartialEq, Eq, Debug)]
pub(crate) enum Owner {
    /// Taken with the public `acquire`: the caller releases it.
    Caller,
    /// Taken by a graph run for a value: only the run releases it.
    Run,
    /// Lent to a thread's heap, which hands it out and takes it back itself; the central pool
    /// counts it neither live nor free, and refuses a release of it (a block the heap has out is
    /// released through the heap, so one that reaches here is free already).
    Heap,
}

impl Owner {
    /// Two bits, for the slabs' per-block record.
    pub(super) fn code(self) -> u32 {
        match self {
            Owner::Caller => 0,
            Owner::Run => 1,
            Owner::Heap => 2,
        }
    }

    pub(super) fn from_code(code: u32) -> Owner {
        match code {
            1 => Owner::Run,
            2 => Owner::Heap,
            _ => Owner::Caller,
        }
    }
}

/// A handed-out block of the large arena: its size and when it will be released. (Small blocks
/// are recorded by their slabs.)
#[derive(Clone, Copy)]
pub(super) struct Live {
    /// Bytes of the block, red zones included.
    pub nbytes: usize,
    /// Bytes the caller asked for: what `live_bytes` counts.
    pub requested: usize,
    pub release_tick: u64,
    pub owner: Owner,
}

/// What a block is asked for.
#[derive(Clone, Copy)]
pub(super) struct Request {
    /// Bytes of the block, red zones included.
    pub nbytes: usize,
    /// Bytes the caller asked for: what `live_bytes` counts.
    pub requested: usize,
    /// When it will be released, on the caller's clock ([`NEVER`] if unknown).
    pub release_tick: u64,
    pub owner: Owner,
    /// Where the caller would like a large block (see `Pool::room_for`): there if those bytes
    /// are free, else best fit.
    pub at: Option<usize>,
}

pub(super) struct State {
    /// Slab chunks live in an arena of their own, so that slabs kept for reuse never sit
    /// between large blocks and change where those go; so do runs' small values (`place`),
    /// which runs' block caches keep across values with no lifetime known.
    pub small: Arena,
    pub large: Arena,
    pub slabs: Slabs,
    /// Blocks below it come from the slabs, or from the small arena for runs (`from_slabs`).
    large_threshold: usize,
    pub live: HashMap<usize, Live, BuildHasherDefault<AddrHasher>>,
    /// Counts of the central pool's own acquires and releases (heaps keep theirs).
    pub stats: PoolStats,
}

/// The central state while its lock is held; on unlock it leaves the figures that readers take
/// without the lock (`Pool::reserved_bytes`, `Pool::os_allocs`, the heaps' peaks).
pub(super) struct Locked<'p> {
    pub state: MutexGuard<'p, State>,
    pub pool: &'p Pool,
}

impl std::ops::Deref for Locked<'_> {
    type Target = State;

    fn deref(&self) -> &State {
        &self.state
    }
}

impl std::ops::DerefMut for Locked<'_> {
    fn deref_mut(&mut self) -> &mut State {
        &mut self.state
    }
}

impl Drop for Locked<'_> {
    fn drop(&mut self) {
        let published = &self.pool.published;
        published
            .reserved
            .store(self.state.committed() as u64, Ordering::Relaxed);
        published.os_allocs.store(self.state.os_allocs(), Ordering::Relaxed);
        published.live.store(self.state.stats.live_bytes, Ordering::Relaxed);
        let unsettled = self.state.small.unsettled() || self.state.large.unsettled();
        published.unsettled.store(unsettled, Ordering::Relaxed);
    }
}

impl State {
    pub(super) fn new(region_bytes: usize, large_threshold: usize) -> State {
        State {
            small: Arena::new(region_bytes),
            large: Arena::new(region_bytes),
            slabs: Slabs::new(large_threshold - 1),
            large_threshold,
            live: HashMap::default(),
            stats: PoolStats::default(),
        }
    }

    /// A block for `request`, counted as acquired and live. The caller raises the pool's peak
    /// (`Pool::raise_peak`), which counts more than this state.
    pub(super) fn acquire(&mut self, request: Request, large_threshold: u64) -> Result<usize> {
        let (addr, committed) = self.take(request, large_threshold)?;
        self.stats.acquires += 1;
        self.stats.cache_hits += !committed as u64;
        self.stats.live_bytes += request.requested as u64;
        Ok(addr)
    }

    /// Up to `max` (at least 1) small blocks for `request` (below the large threshold, with no
    /// place asked for), all from one slab, each address given to `take`, counted as `acquire`
    /// counts each; returns how many. A batch costs one look-up of its slab.
    pub(super) fn acquire_small(&mut self, request: Request, max: usize, take: impl FnMut(usize)) -> Result<usize> {
        let commits = self.os_allocs();
        let (_, given) = self
            .slabs
            .alloc_run(&mut self.small, request.nbytes, request.owner, max, take)?;
        // Only a new slab commits memory, for the first block taken from it.
        let committed = self.committed_since(commits);
        self.stats.acquires += given as u64;
        self.stats.cache_hits += (given - committed as usize) as u64;
        self.stats.live_bytes += (request.requested * given) as u64;
        Ok(given)
    }

    /// A block of `nbytes` for a heap (`Owner::Heap`), counted neither as an acquire nor as
    /// live: the heap counts what it hands out. Returns the block and whether memory had to be
    /// committed.
    pub(super) fn lend(&mut self, nbytes: usize, large_threshold: u64) -> Result<(usize, bool)> {
        let request = Request {
            nbytes,
            requested: 0,
            release_tick: NEVER,
            owner: Owner::Heap,
            at: None,
        };
        self.take(request, large_threshold)
    }

    /// Places a block for `request`; with whether memory had to be committed for it.
    fn take(&mut self, request: Request, large_threshold: u64) -> Result<(usize, bool)> {
        let commits = self.os_allocs();
        let addr = self.place(request, large_threshold)?;
        Ok((addr, self.committed_since(commits)))
    }

    /// Whether memory was committed since the system's count was `commits`; if so, the peak of
    /// reserved bytes follows (they grow only by committing).
    fn committed_since(&mut self, commits: u64) -> bool {
        let committed = self.os_allocs() != commits;
        if committed {
            let reserved = self.committed() as u64;
            self.stats.peak_reserved_bytes = self.stats.peak_reserved_bytes.max(reserved);
        }
        committed
    }

    fn place(&mut self, request: Request, large_threshold: u64) -> Result<usize> {
        let Request {
            nbytes,
            requested,
            release_tick,
            owner,
            at,
        } = request;
        if from_slabs(nbytes, owner, large_threshold) {
            return Ok(self.slabs.alloc(&mut self.small, nbytes, owner)?.0);
        }
        // A block of the arena that is not live waits in a recent list: released already.
        let live = &self.live;
        let tick_of = |addr: usize| live.get(&addr).map_or(0, |l| l.release_tick);
        // A run's small values take the small arena (beside the slabs, in 64-byte grains):
        // in the large one, kept in runs' caches with no lifetime, they sat where the large
        // values' placement hints needed room (1.34x the bound on the classifier).
        let arena = match nbytes < self.large_threshold {
            true => &mut self.small,
            false => &mut self.large,
        };
        let addr = match at.and_then(|at| arena.alloc_at(at, nbytes)) {
            Some(addr) => addr,
            None => arena.alloc(nbytes, &tick_of)?,
        };
        let block = Live {
            nbytes,
            requested,
            release_tick,
            owner,
        };
        self.live.insert(addr, block);
        Ok(addr)
    }

    /// Takes back a block a heap held free (lent with `lend`, of `nbytes`).
    pub(super) fn reclaim(&mut self, addr: usize) {
        if let Some(small) = self.slabs.find(addr) {
            debug_assert_eq!(small.owner, Owner::Heap);
            self.slabs.release_found(&mut self.small, &small);
            return;
        }
        let live = self
            .live
            .remove(&addr)
            .expect("heaps give back only blocks lent to them");
        debug_assert_eq!(live.owner, Owner::Heap);
        self.arena_of(live.nbytes).release(addr, live.nbytes);
    }

    /// Takes back the block at `ptr`, whose caller's bytes start `guard` bytes in.
    /// `by` must own it (`Owner`): one look-up both checks and removes.
    pub(super) fn release(&mut self, ptr: NonNull<u8>, mempool: Mempool, guard: usize, by: Owner) -> Result<()> {
        let addr = ptr.as_ptr() as usize;
        let caller_ptr = (addr + guard) as *const u8;
        let small = self.slabs.find(addr);
        let (nbytes, requested, block_size, owner) = match &small {
            Some(small) => (
                small.nbytes,
                small.nbytes - 2 * guard,
                self.slabs.block_size(small.id),
                small.owner,
            ),
            None => match self.live.get(&addr) {
                Some(l) => (
                    l.nbytes,
                    l.requested,
                    Arena::block_size(l.nbytes).expect("checked on acquire"),
                    l.owner,
                ),
                None => return err(ErrorKind::UnknownPointer, not_out_message(caller_ptr)),
            },
        };
        match (owner, by) {
            (Owner::Run, Owner::Caller) => return err(ErrorKind::UnknownPointer, run_owned_message(caller_ptr)),
            // Lent to a heap and not out there (a heap has first look at every release).
            (Owner::Heap, _) => return err(ErrorKind::UnknownPointer, not_out_message(caller_ptr)),
            _ => {}
        }
        if sanitize::active() {
            // Before the block goes back to the free lists: from there another thread may take it.
            sanitize::retire(mempool, caller_ptr);
            sanitize::hide(addr as *const u8, block_size);
        }
        self.stats.releases += 1;
        self.stats.live_bytes -= requested as u64;
        match small {
            Some(small) => self.slabs.release_found(&mut self.small, &small),
            None => {
                self.live.remove(&addr);
                self.arena_of(nbytes).release(addr, nbytes);
            }
        }
        Ok(())
    }

    /// The size (red zones included) and owner of the live block at `addr`, if there is one.
    pub(super) fn find(&self, addr: usize) -> Option<(usize, Owner)> {
        match self.slabs.find(addr) {
            Some(small) => Some((small.nbytes, small.owner)),
            None => self.live.get(&addr).map(|l| (l.nbytes, l.owner)),
        }
    }

    /// The arena of a block of `nbytes` recorded in `live` (not a slab's): the small one below
    /// the large threshold (a run's small value), else the large one.
    fn arena_of(&mut self, nbytes: usize) -> &mut Arena {
        match nbytes < self.large_threshold {
            true => &mut self.small,
            false => &mut self.large,
        }
    }

    pub(super) fn committed(&self) -> usize {
        self.small.committed() + self.large.committed()
    }

    pub(super) fn os_allocs(&self) -> u64 {
        self.small.os.allocs + self.large.os.allocs
    }

    /// Coalesces cached blocks. Empty slabs stay (one per class at most): the next run's small
    /// blocks come from them with no allocation, and `shrink_to` returns them when memory is
    /// short.
    pub(super) fn settle(&mut self) {
        self.small.settle();
        self.large.settle();
    }

    /// Decommits free memory, largest blocks first, until at most `target` bytes stay committed.
    pub(super) fn shrink_to(&mut self, target: usize) {
        let Some(mut excess) = self.committed().checked_sub(target).filter(|&e| e > 0) else {
            return;
        };
        // Empty slabs kept for reuse are free memory too.
        self.slabs.release_empty(&mut self.small);
        self.settle();
        self.small.forget_spare();
        self.large.forget_spare();
        for arena in [&mut self.large, &mut self.small] {
            for (start, size) in arena.free_blocks_largest_first() {
                let before = arena.committed();
                arena.decommit(start, size);
                excess = excess.saturating_sub(before - arena.committed());
                if excess == 0 {
                    return;
                }
            }
        }
    }
}

/// Whether a block of `nbytes` (red zones included) for `owner` comes from the slabs: a small
/// one of unknown lifetime. A run's values, small ones too, go to the arena: a graph's small
/// values are a few of each of many sizes, and a slab per size class (16 KiB at least) held
/// 1.55x the max-live bound on a classifier with 17 sizes under 1 KiB; they take the small
/// arena in 64-byte grains instead (`State::place`).
#[inline]
pub(super) fn from_slabs(nbytes: usize, owner: Owner, large_threshold: u64) -> bool {
    (nbytes as u64) < large_threshold && owner != Owner::Run
}

pub(super) fn not_out_message(ptr: *const u8) -> String {
    format!("pointer {ptr:p} was not handed out by this pool, or was already released")
}
