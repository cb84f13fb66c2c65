//! The buffer pool: hands out 16-byte-aligned blocks and takes them back for reuse.
//!
//! This is the first, minimal pool: one system allocation per block, rounded up to a size class
//! (four classes per power of two above 256 bytes, so at most 25% of a block is slack), and one
//! free list per class. A released block is reused by the next request of its class. It knows
//! nothing about graphs; runs and C callers use it the same way.

use std::alloc::{self, Layout};
use std::collections::HashMap;
use std::ptr::NonNull;
use std::sync::{Mutex, MutexGuard};

use crate::error::{err, ErrorKind, Result};
use crate::graph::MAX_VALUE_BYTES;

/// Alignment of every block. Larger than the 16 bytes promised, to keep blocks on cache lines.
const BLOCK_ALIGN: usize = 64;

/// Pool settings. (C: `gs_pool_config`).
#[repr(C)]
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct PoolConfig {
    /// Most bytes the pool keeps reserved (live plus cached); a release past it goes back to the
    /// system. 0 means no cap.
    pub max_pool_bytes: u64,
}

/// Counters since the pool was made; peaks since the last reset (C: `gs_pool_stats`).
#[repr(C)]
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct PoolStats {
    /// Bytes callers asked for and still hold.
    pub live_bytes: u64,
    pub peak_live_bytes: u64,
    /// Bytes taken from the system and not yet returned: live blocks plus the cache.
    pub reserved_bytes: u64,
    pub peak_reserved_bytes: u64,
    pub os_allocs: u64,
    pub os_alloc_bytes: u64,
    pub os_frees: u64,
    pub os_free_bytes: u64,
    pub acquires: u64,
    /// Acquires served from the cache, without asking the system.
    pub cache_hits: u64,
    pub releases: u64,
}

/// A thread-safe pool of aligned blocks. Dropping the pool returns every block to the system,
/// including blocks still handed out.
pub struct Pool {
    config: PoolConfig,
    state: Mutex<State>,
}

#[derive(Default)]
struct State {
    /// Cached blocks by class size.
    free: HashMap<usize, Vec<NonNull<u8>>>,
    /// Handed-out blocks: address -> (class size, requested size).
    live: HashMap<usize, (usize, usize)>,
    stats: PoolStats,
}

// SAFETY: the raw block pointers in `State` are owned by the pool and only touched under the mutex.
unsafe impl Send for State {}

impl Pool {
    pub fn new(config: PoolConfig) -> Self {
        Pool {
            config,
            state: Mutex::new(State::default()),
        }
    }

    pub fn config(&self) -> PoolConfig {
        self.config
    }

    /// A block of at least `nbytes`, 16-byte aligned; cleared only when `zero` is set.
    pub fn acquire(&self, nbytes: usize, zero: bool) -> Result<NonNull<u8>> {
        if nbytes == 0 {
            return err(
                ErrorKind::InvalidArgument,
                "cannot acquire 0 bytes: nbytes must be positive",
            );
        }
        let Some(layout) = block_layout(nbytes) else {
            return err(
                ErrorKind::SizeOverflow,
                format!("cannot acquire {nbytes} bytes: more than the {MAX_VALUE_BYTES} bytes one block can have"),
            );
        };
        let class = layout.size();
        let mut st = self.lock();
        st.stats.acquires += 1;
        let ptr = match st.free.get_mut(&class).and_then(Vec::pop) {
            Some(p) => {
                st.stats.cache_hits += 1;
                p
            }
            None => {
                // SAFETY: layout has a non-zero size.
                let p = unsafe { alloc::alloc(layout) };
                let Some(p) = NonNull::new(p) else {
                    return err(
                        ErrorKind::OutOfMemory,
                        format!("the system refused {class} bytes (asked for {nbytes})"),
                    );
                };
                st.stats.os_allocs += 1;
                st.stats.os_alloc_bytes += class as u64;
                st.stats.reserved_bytes += class as u64;
                st.stats.peak_reserved_bytes = st.stats.peak_reserved_bytes.max(st.stats.reserved_bytes);
                p
            }
        };
        st.live.insert(ptr.as_ptr() as usize, (class, nbytes));
        st.stats.live_bytes += nbytes as u64;
        st.stats.peak_live_bytes = st.stats.peak_live_bytes.max(st.stats.live_bytes);
        drop(st);
        if zero {
            // SAFETY: the block is at least `nbytes` long and now exclusively the caller's.
            unsafe { ptr.as_ptr().write_bytes(0, nbytes) };
        }
        Ok(ptr)
    }

    /// Takes back a block from `acquire`. A pointer the pool did not hand out, or one already
    /// released, is an error and changes nothing.
    pub fn release(&self, ptr: NonNull<u8>) -> Result<()> {
        let mut st = self.lock();
        let Some((class, nbytes)) = st.live.remove(&(ptr.as_ptr() as usize)) else {
            return err(
                ErrorKind::UnknownPointer,
                format!("pointer {ptr:p} was not handed out by this pool, or was already released"),
            );
        };
        st.stats.releases += 1;
        st.stats.live_bytes -= nbytes as u64;
        let cap = self.config.max_pool_bytes;
        if cap != 0 && st.stats.reserved_bytes > cap {
            st.free_to_os(ptr, class);
        } else {
            st.free.entry(class).or_default().push(ptr);
        }
        Ok(())
    }

    /// Returns every cached block to the system.
    pub fn trim(&self) {
        let mut st = self.lock();
        let free = std::mem::take(&mut st.free);
        for (class, blocks) in free {
            for p in blocks {
                st.free_to_os(p, class);
            }
        }
    }

    pub fn stats(&self) -> PoolStats {
        self.lock().stats
    }

    /// Restarts peak tracking from the current levels, to measure one run.
    pub fn reset_peaks(&self) {
        let mut st = self.lock();
        st.stats.peak_live_bytes = st.stats.live_bytes;
        st.stats.peak_reserved_bytes = st.stats.reserved_bytes;
    }

    /// Usable size of a live block, if `ptr` is one.
    pub fn block_size(&self, ptr: NonNull<u8>) -> Option<usize> {
        self.lock().live.get(&(ptr.as_ptr() as usize)).map(|&(class, _)| class)
    }

    fn lock(&self) -> MutexGuard<'_, State> {
        // A panic while holding the lock cannot leave `State` inconsistent halfway through an
        // update that matters for memory safety, so a poisoned lock is still usable.
        self.state.lock().unwrap_or_else(|e| e.into_inner())
    }
}

impl State {
    fn free_to_os(&mut self, p: NonNull<u8>, class: usize) {
        // SAFETY: `p` came from `alloc::alloc` with this very layout and is no longer referenced.
        unsafe { alloc::dealloc(p.as_ptr(), Layout::from_size_align_unchecked(class, BLOCK_ALIGN)) };
        self.stats.os_frees += 1;
        self.stats.os_free_bytes += class as u64;
        self.stats.reserved_bytes -= class as u64;
    }
}

impl Drop for Pool {
    fn drop(&mut self) {
        self.trim();
        let st = self.state.get_mut().unwrap_or_else(|e| e.into_inner());
        for (addr, (class, _)) in std::mem::take(&mut st.live) {
            st.free_to_os(NonNull::new(addr as *mut u8).expect("live blocks are non-null"), class);
        }
    }
}

/// Rounds a request up to its class: multiples of 16 up to 256 bytes, then four classes per
/// power of two, so the slack is under 16 bytes or 25% of the block. `None` past the largest block.
pub(crate) fn size_class(nbytes: usize) -> Option<usize> {
    if nbytes > MAX_VALUE_BYTES {
        return None;
    }
    let step = match nbytes {
        0..=256 => 16,
        _ => (1usize << (usize::BITS - 1 - nbytes.leading_zeros())) / 4,
    };
    nbytes
        .div_ceil(step)
        .checked_mul(step)
        .filter(|&c| c <= MAX_VALUE_BYTES)
}

fn block_layout(nbytes: usize) -> Option<Layout> {
    Layout::from_size_align(size_class(nbytes)?, BLOCK_ALIGN).ok()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn size_classes_bound_waste() {
        for n in [
            1usize,
            15,
            16,
            17,
            255,
            256,
            257,
            1000,
            4096,
            5000,
            1 << 20,
            (1 << 20) + 1,
            123_456_789,
        ] {
            let c = size_class(n).unwrap();
            assert!(c >= n && c % 16 == 0, "class {c} for {n}");
            assert!(
                c - n < 16 || (c - n) * 4 <= c,
                "class {c} wastes more than 16 bytes and 25% for {n}"
            );
        }
    }

    #[test]
    fn the_largest_requests_are_refused_not_rounded_past_the_limit() {
        assert_eq!(size_class(MAX_VALUE_BYTES + 1), None);
        assert_eq!(size_class((7 << 60) + 1), None, "rounds up to 2^63");
        let pool = Pool::new(PoolConfig::default());
        let e = pool.acquire((7 << 60) + 1, false).unwrap_err();
        assert_eq!(e.kind(), ErrorKind::SizeOverflow);
        assert_eq!(pool.acquire(1 << 62, false).unwrap_err().kind(), ErrorKind::OutOfMemory);
        assert_eq!(pool.stats().live_bytes, 0);
    }

    #[test]
    fn reuses_released_blocks_and_counts() {
        let pool = Pool::new(PoolConfig::default());
        let a = pool.acquire(1000, false).unwrap();
        assert_eq!(a.as_ptr() as usize % 16, 0);
        pool.release(a).unwrap();
        let b = pool.acquire(990, true).unwrap();
        assert_eq!(a, b, "same class should reuse the cached block");
        let s = pool.stats();
        assert_eq!((s.os_allocs, s.cache_hits, s.live_bytes), (1, 1, 990));
        assert_eq!(
            pool.release(NonNull::dangling()).unwrap_err().kind(),
            ErrorKind::UnknownPointer
        );
        pool.release(b).unwrap();
        assert_eq!(pool.release(b).unwrap_err().kind(), ErrorKind::UnknownPointer);
        pool.trim();
        assert_eq!(pool.stats().reserved_bytes, 0);
    }

    #[test]
    fn cap_sends_releases_back_to_the_system() {
        let pool = Pool::new(PoolConfig { max_pool_bytes: 4096 });
        let blocks: Vec<_> = (0..4).map(|_| pool.acquire(4096, false).unwrap()).collect();
        for b in blocks {
            pool.release(b).unwrap();
        }
        let s = pool.stats();
        assert!(s.reserved_bytes <= 4096, "reserved {} over the cap", s.reserved_bytes);
        assert_eq!(s.os_frees, 3);
    }
}
