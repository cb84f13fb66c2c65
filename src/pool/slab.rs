//! Small requests: size classes carved from arena chunks ("slabs"), one class per slab.
//!
//! Classes are multiples of 16 bytes up to 256, then eight per power of two, so a block wastes
//! less than 16 bytes or 12.5% of its size. A slab holds at least 16 blocks. Each class keeps at
//! most one empty slab, so a class used on and off does not build and tear down slabs; the others
//! go back to the arena at once, and the kept ones when the pool trims or holds more than its cap.
//! Each slab records which of its blocks are live, for whom and how large, so that the pool
//! checks a release without a map of every live block. That record (8 bytes a block) outlives a
//! slab that goes back: the class's next slab takes it over, so that runs which empty slabs and
//! fill them again allocate nothing; it is freed when the pool trims or holds more than its cap.

use std::cell::Cell;
use std::collections::HashMap;
use std::hash::BuildHasherDefault;

use super::addr_hash::AddrHasher;
use super::arena::{Arena, NEVER};
use super::Owner;
use crate::error::Result;

const MIN_SLAB_BYTES: usize = 16 * 1024;

/// Pages of the slab map: a slab (at least 16 KiB) lists every page it overlaps, so a page
/// overlaps at most two slabs (one ending in it, one starting).
const PAGE_SHIFT: u32 = 12;
const NO_SLAB: u32 = u32::MAX;

/// The class a request of `nbytes` (> 0) rounds up to.
#[inline]
pub(super) fn class_size(nbytes: usize) -> usize {
    let step = if nbytes <= 256 {
        16
    } else {
        (1usize << (usize::BITS - 1 - nbytes.leading_zeros())) / 8
    };
    nbytes.div_ceil(step) * step
}

/// The classes as tables: a request's class with one load, a class's block size with another
/// (the path of every heap acquire reads them too).
pub(super) struct Classes {
    /// Class index by `nbytes.div_ceil(16)`.
    index_of: Box<[u8]>,
    /// Block bytes by class index, increasing.
    size: Box<[usize]>,
}

impl Classes {
    /// The classes of requests of 1 to `max_bytes` bytes.
    pub(super) fn new(max_bytes: usize) -> Classes {
        let mut size: Vec<usize> = Vec::new();
        let index_of = (0..=max_bytes.div_ceil(16))
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

    /// How many classes there are.
    pub(super) fn count(&self) -> usize {
        self.size.len()
    }

    /// The class of a request of `nbytes` (1 to `max_bytes`).
    #[inline]
    pub(super) fn index(&self, nbytes: usize) -> usize {
        self.index_of[nbytes.div_ceil(16)] as usize
    }

    /// The block size of class `class`.
    #[inline]
    pub(super) fn size(&self, class: usize) -> usize {
        self.size[class]
    }
}

struct Slab {
    base: usize,
    bytes: usize,
    block: usize,
    capacity: u32,
    /// Blocks never handed out start at `fresh`; released ones wait in `free`.
    fresh: u32,
    free: Vec<u32>,
    used: u32,
    class: u16,
    /// Per block: 0 while free, else its bytes (red zones included) << 2 | its owner's code
    /// (`Owner::code`). What the pool knows of a live small block, found from its address without
    /// a map.
    meta: Vec<u32>,
}

/// A live block of a slab, found from its address.
pub(super) struct Found {
    pub id: u32,
    /// Its place in the slab (for `release_found`, which then needs no division).
    pub index: u32,
    /// Bytes of the block as acquired, red zones included.
    pub nbytes: usize,
    pub owner: Owner,
}

pub(super) struct Slabs {
    classes: Classes,
    /// Per class: slabs with a free block.
    partial: Vec<Vec<u32>>,
    slabs: Vec<Option<Slab>>,
    spare_ids: Vec<u32>,
    /// Per class: the one empty slab kept (still listed in `partial`).
    empty: Vec<Option<u32>>,
    /// Per class: the free lists and block maps of freed slabs, for the next slabs of the class:
    /// a run that empties slabs and fills them again allocates nothing.
    retired: Vec<Vec<(Vec<u32>, Vec<u32>)>>,
    /// Slab ids by page (address >> `PAGE_SHIFT`): the slabs overlapping it, `NO_SLAB` for
    /// none. A release finds its slab with one hash lookup instead of an ordered search.
    by_page: HashMap<usize, [u32; 2], BuildHasherDefault<AddrHasher>>,
    /// The slab `find` found last: blocks often go back in runs from one slab (a run's cache
    /// giving back what it took in a batch), each then found without a hash lookup. Checked
    /// against the slab now under that id, so a freed or reused id is only a miss.
    last_found: Cell<u32>,
}

impl Slabs {
    /// Classes for requests up to `max_bytes`.
    pub(super) fn new(max_bytes: usize) -> Self {
        let classes = Classes::new(max_bytes);
        Slabs {
            partial: vec![Vec::new(); classes.count()],
            empty: vec![None; classes.count()],
            retired: vec![Vec::new(); classes.count()],
            classes,
            slabs: Vec::new(),
            spare_ids: Vec::new(),
            by_page: HashMap::default(),
            last_found: Cell::new(NO_SLAB),
        }
    }

    /// A block for `nbytes` (at most the largest class), live for `owner`; returns its address
    /// and slab id.
    pub(super) fn alloc(&mut self, arena: &mut Arena, nbytes: usize, owner: Owner) -> Result<(usize, u32)> {
        let mut addr = 0;
        let id = self.alloc_run(arena, nbytes, owner, 1, |a| addr = a)?.0;
        Ok((addr, id))
    }

    /// Up to `max` (at least 1) blocks for `nbytes`, live for `owner`, all from one slab (the
    /// class's newest partial one, or a new one), each address given to `take`; returns the
    /// slab's id and how many blocks it gave. A batch costs one look-up of its slab.
    pub(super) fn alloc_run(
        &mut self,
        arena: &mut Arena,
        nbytes: usize,
        owner: Owner,
        max: usize,
        mut take: impl FnMut(usize),
    ) -> Result<(u32, usize)> {
        debug_assert!(max >= 1, "a run of at least one block");
        let class = self.classes.index(nbytes);
        let id = match self.partial[class].last() {
            Some(&id) => id,
            None => self.new_slab(arena, class)?,
        };
        if self.empty[class] == Some(id) {
            self.empty[class] = None;
        }
        let slab = self.slabs[id as usize].as_mut().expect("partial slabs are live");
        let code = (nbytes as u32) << 2 | owner.code();
        let mut given = 0;
        while given < max && slab.used < slab.capacity {
            let index = match slab.free.pop() {
                Some(i) => i,
                None => {
                    slab.fresh += 1;
                    slab.fresh - 1
                }
            };
            slab.used += 1;
            slab.meta[index as usize] = code;
            take(slab.base + index as usize * slab.block);
            given += 1;
        }
        if slab.used == slab.capacity {
            self.partial[class].pop();
        }
        Ok((id, given))
    }

    /// The live block that starts at `addr`, if one does.
    pub(super) fn find(&self, addr: usize) -> Option<Found> {
        let holds = |id: u32| {
            let slab = self.slabs.get(id as usize)?.as_ref()?;
            (addr >= slab.base && addr < slab.base + slab.bytes).then_some((id, slab))
        };
        let (id, slab) = match holds(self.last_found.get()) {
            Some(found) => found,
            None => {
                let ids = self.by_page.get(&(addr >> PAGE_SHIFT))?;
                let found = ids.iter().filter(|&&id| id != NO_SLAB).find_map(|&id| holds(id))?;
                self.last_found.set(found.0);
                found
            }
        };
        let offset = addr - slab.base;
        if offset % slab.block != 0 {
            return None;
        }
        let meta = *slab.meta.get(offset / slab.block)?;
        (meta != 0).then_some(Found {
            id,
            index: (offset / slab.block) as u32,
            nbytes: (meta >> 2) as usize,
            owner: Owner::from_code(meta & 3),
        })
    }

    /// The size of the blocks of slab `id`.
    pub(super) fn block_size(&self, id: u32) -> usize {
        self.slabs[id as usize]
            .as_ref()
            .expect("live blocks belong to live slabs")
            .block
    }

    /// Takes back a block; an emptied slab returns to the arena.
    #[cfg(test)]
    pub(super) fn release(&mut self, arena: &mut Arena, id: u32, addr: usize) {
        let found = self.find(addr).expect("a live block");
        assert_eq!(found.id, id);
        self.release_found(arena, &found);
    }

    /// Takes back the block `find` found; an emptied slab returns to the arena.
    pub(super) fn release_found(&mut self, arena: &mut Arena, found: &Found) {
        let (id, index) = (found.id, found.index as usize);
        let slab = self.slabs[id as usize]
            .as_mut()
            .expect("live blocks belong to live slabs");
        let was_full = slab.used == slab.capacity;
        slab.meta[index] = 0;
        slab.free.push(index as u32);
        slab.used -= 1;
        let (class, now_empty) = (slab.class as usize, slab.used == 0);
        if was_full {
            self.partial[class].push(id);
        }
        if now_empty {
            match self.empty[class] {
                None => self.empty[class] = Some(id),
                Some(_) => self.free_slab(arena, id),
            }
        }
    }

    /// Returns the kept empty slabs to the arena, and frees the bookkeeping kept for new slabs.
    pub(super) fn release_empty(&mut self, arena: &mut Arena) {
        for class in 0..self.empty.len() {
            if let Some(id) = self.empty[class].take() {
                self.free_slab(arena, id);
            }
        }
        self.retired.iter_mut().for_each(Vec::clear);
    }

    fn free_slab(&mut self, arena: &mut Arena, id: u32) {
        let slab = self.slabs[id as usize].take().expect("a live slab");
        for page in pages(slab.base, slab.bytes) {
            let ids = self.by_page.get_mut(&page).expect("a live slab's pages are listed");
            let other = if ids[0] == id { ids[1] } else { ids[0] };
            match other {
                NO_SLAB => _ = self.by_page.remove(&page),
                _ => *ids = [other, NO_SLAB],
            }
        }
        self.spare_ids.push(id);
        let partial = &mut self.partial[slab.class as usize];
        if let Some(pos) = partial.iter().position(|&s| s == id) {
            partial.swap_remove(pos);
        }
        arena.release(slab.base, slab.bytes);
        self.retired[slab.class as usize].push((slab.free, slab.meta));
    }

    fn new_slab(&mut self, arena: &mut Arena, class: usize) -> Result<u32> {
        let block = self.classes.size(class);
        let bytes = (block * 16).max(MIN_SLAB_BYTES);
        // Slabs live as long as their blocks do: unknown, so as long-lived.
        let base = arena.alloc(bytes, &|_| NEVER)?;
        let capacity = (bytes / block) as u32;
        // A retired slab of the class has room for as many blocks: nothing to allocate.
        let (mut free, mut meta) = self.retired[class].pop().unwrap_or_default();
        free.clear();
        free.reserve(capacity as usize);
        meta.clear();
        meta.resize(capacity as usize, 0);
        let slab = Slab {
            base,
            bytes,
            block,
            capacity,
            fresh: 0,
            free,
            used: 0,
            class: class as u16,
            meta,
        };
        let id = match self.spare_ids.pop() {
            Some(id) => {
                self.slabs[id as usize] = Some(slab);
                id
            }
            None => {
                self.slabs.push(Some(slab));
                (self.slabs.len() - 1) as u32
            }
        };
        for page in pages(base, bytes) {
            let ids = self.by_page.entry(page).or_insert([NO_SLAB; 2]);
            let free = ids.iter().position(|&i| i == NO_SLAB);
            ids[free.expect("slabs of 16 KiB or more share a page two at most")] = id;
        }
        self.partial[class].push(id);
        Ok(id)
    }
}

/// The pages `bytes` bytes at `base` overlap.
fn pages(base: usize, bytes: usize) -> std::ops::RangeInclusive<usize> {
    base >> PAGE_SHIFT..=(base + bytes - 1) >> PAGE_SHIFT
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn classes_bound_waste() {
        for n in 1..=65_536usize {
            let c = class_size(n);
            assert!(c >= n && c % 16 == 0);
            assert!(c - n < 16 || (c - n) * 8 <= c, "class {c} wastes too much for {n}");
        }
    }

    #[test]
    fn the_class_tables_are_dense_and_in_size_order() {
        for max in [1023, 65_535] {
            let classes = Classes::new(max);
            let mut sizes: Vec<usize> = (1..=max).map(class_size).collect();
            sizes.dedup();
            assert_eq!(classes.count(), sizes.len());
            for n in 1..=max {
                assert_eq!(classes.size(classes.index(n)), class_size(n), "{n}");
                assert_eq!(
                    sizes[classes.index(n)],
                    class_size(n),
                    "{n}: dense indices in size order"
                );
            }
        }
    }

    #[test]
    fn every_block_finds_its_own_slab_across_shared_pages() {
        // Classes whose slabs are not page multiples (48 B x 342 blocks...), so neighbouring
        // slabs share pages: every live block is found with its size and owner, and nothing
        // else is, before and after the slabs around it go.
        let mut arena = Arena::new(1 << 20);
        let mut slabs = Slabs::new(4096);
        let mut live: Vec<(usize, u32, usize)> = Vec::new();
        for round in 0..600usize {
            let n = [48, 1040, 3000, 80][round % 4];
            let (addr, id) = slabs.alloc(&mut arena, n, Owner::Run).unwrap();
            live.push((addr, id, n));
        }
        let check = |slabs: &Slabs, live: &[(usize, u32, usize)]| {
            for &(addr, id, n) in live {
                let found = slabs.find(addr).expect("a live block is found");
                assert_eq!((found.id, found.nbytes, found.owner), (id, n, Owner::Run));
                assert!(slabs.find(addr + 8).is_none(), "an address inside a block is no block");
            }
        };
        check(&slabs, &live);
        // Free every other class's blocks: their slabs go back, their pages are unlisted.
        let (gone, kept): (Vec<_>, Vec<_>) = live.into_iter().partition(|b| b.2 == 1040 || b.2 == 80);
        for &(addr, id, _) in &gone {
            slabs.release(&mut arena, id, addr);
            assert!(slabs.find(addr).is_none(), "a released block is not found");
        }
        slabs.release_empty(&mut arena);
        check(&slabs, &kept);
    }

    #[test]
    fn every_size_up_to_the_limit_has_a_class() {
        let mut arena = Arena::new(1 << 20);
        let mut slabs = Slabs::new(1023);
        for n in 1..=1023 {
            let (addr, id) = slabs.alloc(&mut arena, n, Owner::Caller).unwrap();
            slabs.release(&mut arena, id, addr);
        }
    }

    #[test]
    fn blocks_are_distinct_and_slabs_return_to_the_arena() {
        let mut arena = Arena::new(1 << 20);
        let mut slabs = Slabs::new(1024);
        let blocks: Vec<(usize, u32)> = (0..100)
            .map(|i| slabs.alloc(&mut arena, 1 + (i * 37) % 1024, Owner::Caller).unwrap())
            .collect();
        let mut addrs: Vec<usize> = blocks.iter().map(|b| b.0).collect();
        addrs.sort();
        addrs.dedup();
        assert_eq!(addrs.len(), 100);
        assert!(addrs.iter().all(|a| a % 16 == 0));
        for (addr, id) in blocks {
            slabs.release(&mut arena, id, addr);
        }
        let kept = slabs.slabs.iter().flatten().count();
        assert!(
            kept > 0 && kept <= slabs.classes.count(),
            "at most one empty slab per class is kept"
        );
        slabs.release_empty(&mut arena);
        arena.settle();
        assert!(slabs.slabs.iter().all(Option::is_none), "every slab went back");
    }
}
