//! A graph's small blocks, kept by its runs: between runs, and behind the threads' caches while
//! a run goes on.
//!
//! Without it every block a thread's cache cannot hold goes back to the shared pool, and every
//! refill comes from there: under the pool's lock, with its bookkeeping, a few hundred
//! instructions a block. A fan-out whose 100,000 values all live until its join paid that for
//! every value twice a run, a third of its work; a one-node graph paid it for its output, a
//! third of its run. So a run's arrays keep the run's small blocks (below `HINT_MIN_BYTES`; at
//! most `RESERVE_BYTES` of them): a cache's surplus goes here, a refill comes from here first,
//! what the caches hold when the run ends and a freed result's outputs come here too, and the
//! next run starts with them. Only a run whose working set grows takes the pool's lock.
//!
//! **In the pool** the blocks are parked (`Pool::count_parked`): held, but not live, as a
//! sequential run's cached blocks are. So the pool's live bytes fall to what results hold once
//! runs end, as they did when the blocks went back. They are not free either: nobody else gets
//! them, and `trim` cannot give their memory back, until the graph is freed or runs on another
//! pool. A pool with a byte cap gets every block back at once, and runs without block caches
//! (under a memory limit, with red zones) keep none. The reserve holds its pool weakly: a pool
//! freed before the graph takes its memory with it, kept blocks included, and the reserve then
//! forgets them.
//!
//! **Steady state**: the reserve's lists grow only in the first run of its arrays on a pool (and
//! as its result is freed); later a block that finds no room goes back to the pool, so a steady
//! run allocates nothing.
//! Threads reach the reserve under its mutex, a batch of blocks at a time (a refill, a cache's
//! surplus), never per node.

use std::sync::{Arc, Mutex, MutexGuard, Weak};

use crate::exec::memory::cache::{release_many, BlockCache};
use crate::exec::memory::hints::HINT_MIN_BYTES;
use crate::kernel::Buffer;
use crate::pool::{sanitize, Pool};

/// Most bytes of blocks a graph's run arrays keep.
const RESERVE_BYTES: usize = 4 << 20;
/// Most blocks a run's calling thread starts with, of each size and in all (the rest wait for
/// refills): a cache that starts below half full neither spills nor outgrows its room.
const LEND: usize = 16;
const LEND_ALL: usize = 32;

/// Small blocks kept by a graph's runs, with the pool they are parked in.
#[derive(Default)]
pub(in crate::exec) struct Reserve {
    /// The pool the blocks are parked in, the pool of the run that has the arrays. None: the
    /// reserve keeps nothing.
    pool: Option<Weak<Pool>>,
    bins: Mutex<Bins>,
}

#[derive(Default)]
struct Bins {
    /// Per block size: the blocks' addresses.
    sizes: Vec<(usize, Vec<usize>)>,
    /// Bytes of all of them.
    bytes: usize,
    /// The lists may grow: from the arrays' first run on the pool until the next starts.
    growing: bool,
}

impl Bins {
    /// Keeps `block` if there is room (`RESERVE_BYTES`, and a list's length unless growing).
    fn keep(&mut self, block: Buffer) -> bool {
        let size = block.block;
        if size == 0 || size >= HINT_MIN_BYTES || block.ptr.is_null() || self.bytes + size > RESERVE_BYTES {
            return false;
        }
        let list = match self.sizes.iter().position(|(s, _)| *s == size) {
            Some(i) => &mut self.sizes[i].1,
            None if self.growing => {
                self.sizes.push((size, Vec::new()));
                &mut self.sizes.last_mut().expect("just pushed").1
            }
            None => return false,
        };
        if !self.growing && list.len() == list.capacity() {
            return false;
        }
        // Hidden as a cache's blocks are (they may come from a result): a touch before a node
        // is handed one is reported.
        sanitize::hide(block.ptr.cast(), size);
        list.push(block.ptr as usize);
        self.bytes += size;
        true
    }

    /// Up to `count` blocks of `size` bytes, appended to `out`; how many.
    fn take(&mut self, size: usize, count: usize, out: &mut Vec<Buffer>) -> usize {
        let Some((_, list)) = self.sizes.iter_mut().find(|(s, _)| *s == size) else {
            return 0;
        };
        let n = count.min(list.len());
        for _ in 0..n {
            let addr = list.pop().expect("counted above");
            out.push(Buffer::new(addr as *mut _, size));
        }
        self.bytes -= n * size;
        n
    }
}

impl Reserve {
    /// Readies the reserve for a run on `pool` with `cache` as its calling thread's block cache
    /// (None: the run has no caches, and keeps nothing): blocks parked in another pool go back
    /// to it, and the cache starts with up to `LEND` blocks of each size. In a `sequential` run
    /// a cache's blocks stay parked (it counts what it hands out, `BlockCache::unparked`); in a
    /// parallel one they count as live.
    pub(crate) fn open(&mut self, pool: &Arc<Pool>, cache: Option<&mut BlockCache>, sequential: bool) {
        let keeps = cache.is_some() && pool.config().max_pool_bytes == 0;
        // The lists grow in the first run on a pool and as its result is freed: a later run
        // finds room for as many blocks as that one left.
        let growing = !(keeps && self.is_of(pool));
        if growing {
            self.clear();
            self.pool = keeps.then(|| Arc::downgrade(pool));
        }
        let bins = self.bins.get_mut().unwrap_or_else(|p| p.into_inner());
        bins.growing = growing && keeps;
        let Some(cache) = cache else { return };
        if bins.bytes == 0 {
            return;
        }
        let before = bins.bytes;
        let mut blocks = 0;
        for i in 0..bins.sizes.len() {
            let size = bins.sizes[i].0;
            blocks += bins.take(size, LEND.min(LEND_ALL - blocks), &mut cache.blocks);
        }
        let lent = before - bins.bytes;
        if !sequential && lent > 0 {
            pool.count_parked(lent as i64, lent as i64);
        }
    }

    /// Whether the run on `pool` keeps blocks here.
    pub(crate) fn is_of(&self, pool: &Pool) -> bool {
        self.pool.as_ref().is_some_and(|p| std::ptr::eq(p.as_ptr(), pool))
    }

    fn lock(&self) -> MutexGuard<'_, Bins> {
        self.bins.lock().unwrap_or_else(|p| p.into_inner())
    }

    /// Up to `count` blocks of `size` bytes for a cache of a run on `pool`, appended to `out`;
    /// how many. `parked`: the cache's blocks are parked (a sequential run's), else they become
    /// live.
    pub(crate) fn take(&self, pool: &Pool, size: usize, count: usize, out: &mut Vec<Buffer>, parked: bool) -> usize {
        let mut bins = self.lock();
        let n = bins.take(size, count, out);
        if !parked && n > 0 {
            // Under the lock: a thread that keeps these blocks again parks them after this.
            pool.count_parked((n * size) as i64, (n * size) as i64);
        }
        n
    }

    /// Keeps what it has room for of `blocks`, from a cache of a run on `pool` (parked ones if
    /// `parked`; live ones are parked now); the others go to `refused`, for the pool.
    pub(crate) fn keep(
        &self,
        pool: &Pool,
        blocks: impl Iterator<Item = Buffer>,
        parked: bool,
        refused: &mut Vec<Buffer>,
    ) {
        let mut kept = 0;
        let mut bins = self.lock();
        for block in blocks {
            match bins.keep(block) {
                true => kept += block.block,
                false => refused.push(block),
            }
        }
        if !parked && kept > 0 {
            // Under the lock: no thread takes them (and unparks them) before they are parked.
            pool.count_parked(-(kept as i64), 0);
        }
    }

    /// Keeps `block`, a freed result's output, live until now, if it is of `pool` and there is
    /// room: true if it did (it is parked now).
    pub(crate) fn keep_live(&mut self, pool: &Pool, block: Buffer) -> bool {
        if !self.is_of(pool) {
            return false;
        }
        let block = Buffer::new(block.ptr, block.block);
        let kept = self.bins.get_mut().unwrap_or_else(|p| p.into_inner()).keep(block);
        if kept {
            pool.count_parked(-(block.block as i64), 0);
        }
        kept
    }

    /// Gives every block back to its pool; forgets them if the pool is gone (their memory went
    /// with it).
    fn clear(&mut self) {
        let bins = self.bins.get_mut().unwrap_or_else(|p| p.into_inner());
        let pool = self.pool.as_ref().and_then(Weak::upgrade);
        for (size, list) in &mut bins.sizes {
            let blocks = list.drain(..).map(|a| Buffer::new(a as *mut _, *size));
            match &pool {
                Some(pool) => release_many(pool, blocks, true),
                None => blocks.for_each(drop),
            }
        }
        bins.bytes = 0;
    }
}

impl Drop for Reserve {
    /// The graph goes (or its arrays do): the blocks go back to their pool.
    fn drop(&mut self) {
        self.clear();
    }
}
