//! Blocks in batches: the central pool's side of runs' per-thread block caches
//! (`exec/cache.rs`). A cache takes a few blocks of a size under one lock, gives its surplus back
//! under one lock, and in a sequential run keeps its blocks parked (out of the central pool, in
//! no live count) while settling what it handed out with the pool now and then.

use std::ptr::NonNull;
use std::sync::atomic::Ordering;

use super::central::{from_slabs, Request};
use super::{Owner, Pool, NEVER};
use crate::error::Result;

impl Pool {
    /// A sequential run's cache reporting its parked blocks to the pool (no lock): since it last did, it handed
    /// `unparked` bytes of parked blocks to nodes (net of those it took back: negative if it took
    /// back more), and the most that net reached was `peak`. The live peak rises by what the
    /// pool's count missed meanwhile, exact when the run is the pool's only user.
    pub(crate) fn count_parked(&self, unparked: i64, peak: i64) {
        if peak > 0 {
            self.raise_peak(
                self.published.live.load(Ordering::Relaxed),
                self.heaps.live() + peak as u64,
            );
        }
        match unparked >= 0 {
            true => self.published.parked.fetch_sub(unparked as u64, Ordering::Relaxed),
            false => self
                .published
                .parked
                .fetch_add(unparked.unsigned_abs(), Ordering::Relaxed),
        };
    }

    /// `count` blocks of `nbytes` for `owner` under one lock (not cleared), appended to `out`:
    /// for callers that keep a few blocks of a size at hand. With `parked`, they start parked
    /// (see [`count_parked`](Self::count_parked)): the caller counts each as live when it hands it out.
    pub(crate) fn acquire_many(
        &self,
        nbytes: usize,
        count: usize,
        owner: Owner,
        parked: bool,
        out: &mut Vec<NonNull<u8>>,
    ) -> Result<()> {
        Self::check_request(nbytes)?;
        let inner = nbytes + self.guard_bytes() * 2;
        let elsewhere = self.heaps.live();
        let mut st = self.lock();
        if parked {
            // Before the blocks count in `live`: they never show as live until handed out.
            self.published
                .parked
                .fetch_add((nbytes * count) as u64, Ordering::Relaxed);
        }
        let request = Request {
            nbytes: inner,
            requested: nbytes,
            release_tick: NEVER,
            owner,
            at: None,
        };
        let large_threshold = self.config.large_threshold_bytes;
        let small = from_slabs(inner, owner, large_threshold);
        let mut result = Ok(());
        let mut taken = 0;
        while taken < count {
            let mut hand_out = |addr| out.push(self.hand_out(addr, nbytes, false));
            // Small blocks come a slab's run at a time.
            let got = match small {
                true => st.acquire_small(request, count - taken, hand_out),
                false => st.acquire(request, large_threshold).map(|addr| {
                    hand_out(addr);
                    1
                }),
            };
            match got {
                Ok(n) => taken += n,
                Err(e) => {
                    if parked {
                        let missing = (nbytes * (count - taken)) as u64;
                        self.published.parked.fetch_sub(missing, Ordering::Relaxed);
                    }
                    result = Err(e);
                    break;
                }
            }
        }
        // Live bytes only rose in the loop: its last figure is its highest.
        self.raise_peak(st.stats.live_bytes, elsewhere);
        result
    }

    /// Takes back many blocks of `by` under one lock (none: no lock). Every pointer is tried, as
    /// by [`release_by`](Self::release_by); the first error is returned.
    ///
    /// # Safety
    /// As for [`release`](Self::release), for every pointer.
    /// With `parked`, the blocks are parked ones (see [`count_parked`](Self::count_parked)), no longer live.
    pub(crate) unsafe fn release_many(
        &self,
        ptrs: impl IntoIterator<Item = NonNull<u8>>,
        by: Owner,
        parked: bool,
    ) -> Result<()> {
        let mut ptrs = ptrs.into_iter();
        let Some(first) = ptrs.next() else {
            return Ok(());
        };
        let mut st = self.lock();
        let mut first_error = Ok(());
        let before = st.stats.live_bytes;
        for p in std::iter::once(first).chain(ptrs) {
            let result = self.take_back(&mut st, p, by);
            if first_error.is_ok() {
                first_error = result;
            }
        }
        if parked {
            // Once for the batch, still under the lock: `stats` reads both under it, and
            // the new `live` is published only when it goes.
            self.published
                .parked
                .fetch_sub(before - st.stats.live_bytes, Ordering::Relaxed);
        }
        if self.config.max_pool_bytes != 0 {
            st.shrink_to(self.config.max_pool_bytes as usize);
        }
        first_error
    }
}
