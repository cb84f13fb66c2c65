//! A region: one anonymous mapping reserved up front and committed page by page as blocks use
//! it. Pages are backed by memory only once touched (`MAP_NORESERVE`); a free range can be given
//! back with `MADV_DONTNEED` and is zero-filled if touched again.

use std::sync::OnceLock;

use memmap2::{MmapMut, MmapOptions, UncheckedAdvice};

use super::sanitize;

pub(super) fn page_size() -> usize {
    static PAGE: OnceLock<usize> = OnceLock::new();
    // SAFETY: sysconf has no preconditions.
    *PAGE.get_or_init(|| match unsafe { libc::sysconf(libc::_SC_PAGESIZE) } {
        n if n > 0 => n as usize,
        _ => 4096,
    })
}

pub(super) fn page_down(x: usize) -> usize {
    x & !(page_size() - 1)
}

pub(super) fn page_up(x: usize) -> usize {
    page_down(x + page_size() - 1)
}

pub(super) struct Region {
    map: MmapMut,
    /// The end of the highest block ever carved: how far the memory checkers were told about.
    carved_end: usize,
}

impl Region {
    /// Reserves `len` bytes of address space (a multiple of the page size); nothing is committed.
    pub(super) fn reserve(len: usize) -> std::io::Result<Region> {
        let map = MmapOptions::new().len(len).no_reserve_swap().map_anon()?;
        let carved_end = map.as_ptr() as usize;
        Ok(Region { map, carved_end })
    }

    pub(super) fn start(&self) -> usize {
        self.map.as_ptr() as usize
    }

    pub(super) fn end(&self) -> usize {
        self.start() + self.map.len()
    }

    pub(super) fn len(&self) -> usize {
        self.map.len()
    }

    /// A new block `[start, end)` is carved out of the region: nobody may touch it until the pool
    /// hands it out.
    pub(super) fn carve(&mut self, start: usize, end: usize) {
        self.carved_end = self.carved_end.max(end);
        sanitize::hide(start as *const u8, end - start);
    }

    /// Returns the pages of `[start, end)` (page aligned, inside the region) to the system.
    pub(super) fn decommit(&self, start: usize, end: usize) {
        debug_assert!(start >= self.start() && end <= self.end() && start % page_size() == 0);
        // SAFETY: the range lies inside this mapping and holds only free blocks: no buffer handed
        // out overlaps it, so nothing observes the pages being dropped (they read back as zeros).
        let _ = unsafe {
            self.map
                .unchecked_advise_range(UncheckedAdvice::DontNeed, start - self.start(), end - start)
        };
    }
}

impl Drop for Region {
    fn drop(&mut self) {
        sanitize::forget(self.start() as *const u8, self.carved_end - self.start());
    }
}
