//! Small blocks a graph keeps between its runs, parked in their pool.
//!
//! Without it every run of a graph of small values ends by giving its threads' cached blocks
//! back to the pool, and its result's outputs go back as it is freed; the next run takes the
//! same number again. Each trip takes the pool's lock and its bookkeeping, a few hundred
//! instructions: in a run of a one-node graph, a third of the run's work. So a run's arrays
//! keep a few of those blocks (at most `RESERVE_BLOCKS`, all below `HINT_MIN_BYTES`) for the
//! next run, which starts with them in its caller's cache.
//!
//! In their pool they are parked (`Pool::settle_parked`): held, but not live. So the pool's
//! live bytes fall to what results still hold when runs end, as they did when the blocks went
//! back. They are not free either: the pool cannot hand them to anyone else, nor give their
//! memory back (`trim`) until the graph is freed or runs on another pool. A pool with a byte
//! cap gets them back at once, and runs without block caches (under a memory limit, with red
//! zones) keep none.
//!
//! The reserve does not keep its pool alive (a weak reference): a pool freed before the graph
//! takes its memory with it, kept blocks included, and the reserve then forgets them.

use std::sync::{Arc, Weak};

use super::cache::{release_many, BlockCache};
use super::hints::HINT_MIN_BYTES;
use crate::kernel::Buffer;
use crate::pool::{sanitize, Pool};

/// Most blocks a graph's run arrays keep between runs.
const RESERVE_BLOCKS: usize = 64;

/// Blocks kept for a graph's next run, with the pool they are parked in.
#[derive(Default)]
pub(super) struct Reserve {
    /// The pool the blocks are parked in; also the pool of the run that has the arrays, whose
    /// blocks it may keep. None: it keeps nothing.
    pool: Option<Weak<Pool>>,
    blocks: Vec<Buffer>,
}

impl Reserve {
    /// Readies the reserve for a run on `pool` with `cache` as its caller's block cache (None:
    /// the run has no caches): moves its blocks into the cache, and keeps the run's at its end.
    /// Blocks parked in another pool go back to it first. In a `sequential` run the cache's
    /// blocks stay parked (it counts what it hands out, `BlockCache::unparked`); in a parallel
    /// run they count as live until the run ends.
    pub fn open(&mut self, pool: &Arc<Pool>, cache: Option<&mut BlockCache>, sequential: bool) {
        let keeps = cache.is_some() && pool.config().max_pool_bytes == 0;
        if !(keeps && self.is_of(pool)) {
            self.clear();
            self.pool = keeps.then(|| Arc::downgrade(pool));
        }
        let Some(cache) = cache else { return };
        if self.blocks.is_empty() {
            return;
        }
        if !sequential {
            pool.settle_parked(self.bytes() as i64, self.bytes() as i64);
        }
        cache.blocks.append(&mut self.blocks);
    }

    /// Keeps `block` from `pool`, live until now, for the next run: true if it did (it is
    /// parked), false if it has no room, belongs to another pool or is not small.
    pub fn keep_live(&mut self, pool: &Pool, block: Buffer) -> bool {
        if !self.takes(pool, block) {
            return false;
        }
        // Hidden as a cache's blocks are: a touch before a node is handed it is reported.
        sanitize::hide(block.ptr.cast(), block.block);
        pool.settle_parked(-(block.block as i64), 0);
        self.blocks.push(Buffer::new(block.ptr, block.block));
        true
    }

    /// Keeps what room allows of `cache`'s blocks from the run's `pool` for the next run; the
    /// rest stay in the cache. Parked ones (a sequential run's) stay parked; others are parked
    /// now.
    pub fn keep_cached(&mut self, pool: &Pool, cache: &mut BlockCache, parked: bool) {
        let before = self.bytes();
        while let Some(&block) = cache.blocks.last() {
            if !self.takes(pool, block) {
                break;
            }
            self.blocks.push(block);
            cache.blocks.pop();
        }
        if !parked && self.bytes() > before {
            pool.settle_parked(-((self.bytes() - before) as i64), 0);
        }
    }

    /// Whether it may keep `block` of `pool`.
    fn takes(&self, pool: &Pool, block: Buffer) -> bool {
        self.blocks.len() < RESERVE_BLOCKS
            && self.is_of(pool)
            && block.block > 0
            && block.block < HINT_MIN_BYTES
            && !block.ptr.is_null()
    }

    /// Whether its pool is `pool`. (A pool that dropped cannot be confused with a new one at
    /// the same address: the weak reference keeps the old one's allocation.)
    fn is_of(&self, pool: &Pool) -> bool {
        self.pool.as_ref().is_some_and(|p| std::ptr::eq(p.as_ptr(), pool))
    }

    fn bytes(&self) -> usize {
        self.blocks.iter().map(|b| b.block).sum()
    }

    /// Gives every block back to its pool; forgets them if the pool is gone (and their memory
    /// with it).
    fn clear(&mut self) {
        match self.pool.as_ref().and_then(Weak::upgrade) {
            Some(pool) => release_many(&pool, self.blocks.drain(..), true),
            None => self.blocks.clear(),
        }
    }
}

impl Drop for Reserve {
    /// The graph goes (or its arrays do): the blocks go back to their pool.
    fn drop(&mut self) {
        self.clear();
    }
}
