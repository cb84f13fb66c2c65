//! A heap's record of the blocks it handed out, which other threads can search without the
//! heap's lock: a release from another thread claims its block here with one compare-and-swap
//! and leaves it for the owner to collect (mimalloc's remote frees), instead of visiting the
//! heap under its lock (a swap per heap and, with the lock biased, a process-wide barrier).
//!
//! **The table.** Open addressing with linear probing, 16-byte slots of atomics. A slot's key is
//! `EMPTY`, `TOMB` (its block went back: probes go on past it), a block's address (out, not
//! released), or that address with `CLAIMED` set (released by another thread, waiting for the
//! holder of the heap's lock to collect it). Addresses are 16-byte aligned, so the low four bits
//! are free for these marks.
//!
//! **Who writes what.**
//! - The holder of the heap's lock (its owner, or a visitor: `heap_lock.rs`) inserts and removes
//!   entries, rebuilds the table and collects claims. It writes a slot's fields before its key
//!   (Release), so a thread that reads the key (Acquire) reads the fields that go with it.
//! - Any other thread may only *claim*: compare-and-swap a slot's key from an address to the
//!   address with `CLAIMED`, then set the slot's bit in the table's claim bitmap and the
//!   `pending` flag. A claim succeeds only if the slot holds exactly that address at that
//!   instant, which proves the block is out of this heap and not released: so a successful claim
//!   is an exact check, and a claimed key cannot be claimed or removed again (a second release
//!   is refused). A claim that finds nothing (or loses its swap) proves nothing: the caller then
//!   takes the exact path under the heap's lock.
//! - The lock holder's own removal reads the key and stores `TOMB` without a locked
//!   instruction (the pair of one thread stays free of them). It can lose a claim made between
//!   its read and its store only if two threads release the same block at once, which no
//!   caller may do (the releaser owns the block): that race is outside the checks, as with any
//!   allocator; a release that comes after another is always refused.
//! - A rebuild (clearing tombstones, or moving to a table twice as large) swaps each live key
//!   out of its old slot, so it takes either the plain address or a claimed one, and a racing
//!   claim fails; claimed keys keep their mark (and get their bit) in their new slot. A claim
//!   that meets a slot mid-rebuild finds nothing and takes the locked path, which waits for the
//!   rebuild (the rebuilder holds the lock).
//! - **The front slot.** One slot outside the table, beside it in [`Shared`], is tried first by
//!   every insert, removal and claim, with the same rules for its key: a block handed out while
//!   it is free goes there, so one thread's acquire and release of a block (a kernel's scratch,
//!   the pair of a benchmark) reach its entry without a hash (a 64-byte pair: 10.4 ns through
//!   the table, 8.8 through the front slot, glibc's 6.6). A claim there has no bit to set: `collect` looks at it whenever
//!   claims are pending, and a rebuild leaves it alone.
//! - Tables never shrink, and one replaced by a larger one is kept until the heap goes: a
//!   claiming thread may still be reading it (it finds only empty slots there).

use std::sync::atomic::{AtomicBool, AtomicPtr, AtomicU64, AtomicUsize, Ordering};

const EMPTY: usize = 0;
const TOMB: usize = 1;
const CLAIMED: usize = 8;
/// The low bits of a key that are marks, not address: every key the record is asked about must
/// have them clear (`Heaps` sends other pointers to the central pool).
pub(super) const KEY_MARKS: usize = 15;
const MIN_SLOTS: usize = 64;
/// After this many inserts find the front slot taken (with no insert between that found it
/// free; the fast paths' fills do not count, to keep them a store shorter), its entry moves to
/// the table: a
/// block held long (the first one a thread took, kept for good: a session's weights) would
/// otherwise keep every later pair off the front slot and the pool's fast path. Not at once: a
/// thread with two blocks out at a time would move one at every pair, with a locked swap.
const FRONT_PATIENCE: u32 = 64;

/// What a heap knows of a block it has out.
#[derive(Clone, Copy, Default, Debug, PartialEq, Eq)]
pub(super) struct Out {
    /// Bytes of the block (its class or grain size).
    pub block: usize,
    /// Bytes the caller asked for.
    pub requested: usize,
    /// Its slab class index + 1; 0 for a block of the large arena.
    pub class: u8,
}

#[derive(Default)]
struct Slot {
    key: AtomicUsize,
    /// `requested << 24 | (block - requested) << 8 | class` (see [`MAX_REQUEST`]).
    info: AtomicU64,
}

/// Requests a heap records must be below this (1 TiB), so that a slot packs its block in two
/// words; a block wastes less than 2 ^ 16 bytes (a slab class less than 12.5% of at most
/// 64 KiB, an arena block less than its 64-byte grain). Larger ones take the central path.
pub(super) const MAX_REQUEST: usize = if usize::BITS > 40 {
    1 << (40 % usize::BITS)
} else {
    usize::MAX
};

impl Slot {
    /// Writes an entry into this free slot (`EMPTY` or `TOMB`: no other thread writes it).
    #[inline]
    fn fill(&self, key: usize, out: Out) {
        let slack = out.block - out.requested;
        debug_assert!(out.requested < MAX_REQUEST && slack < 1 << 16);
        let info = (out.requested as u64) << 24 | (slack as u64) << 8 | u64::from(out.class);
        self.info.store(info, Ordering::Relaxed);
        // Release: a claiming thread that reads the key reads the fields above.
        self.key.store(key, Ordering::Release);
    }

    /// Its fields: the caller read its key with Acquire (or wrote them).
    #[inline]
    fn out(&self) -> Out {
        let info = self.info.load(Ordering::Relaxed);
        let requested = (info >> 24) as usize;
        Out {
            block: requested + (info >> 8 & 0xFFFF) as usize,
            requested,
            class: info as u8,
        }
    }
}

pub(super) struct Table {
    /// `64 - log2(slots)`: a key's home slot is the top bits of its hash.
    shift: u32,
    slots: Box<[Slot]>,
    /// One bit per slot: set by a claim there (a hint for `collect`, which checks the key).
    claims: Box<[AtomicU64]>,
}

impl Table {
    fn new(slots: usize) -> Box<Table> {
        debug_assert!(slots.is_power_of_two() && slots >= MIN_SLOTS);
        Box::new(Table {
            shift: 64 - slots.trailing_zeros(),
            slots: (0..slots).map(|_| Slot::default()).collect(),
            claims: (0..slots / 64).map(|_| AtomicU64::new(0)).collect(),
        })
    }

    #[inline]
    fn home(&self, addr: usize) -> usize {
        home(addr, self.shift)
    }

    #[inline]
    fn next(&self, i: usize) -> usize {
        (i + 1) & (self.slots.len() - 1)
    }

    /// Writes an entry into the first free slot of its probe (the caller knows the key is not
    /// in the table); returns the slot and whether it was `EMPTY` (not a tombstone).
    #[inline]
    fn put(&self, key: usize, out: Out) -> (usize, bool) {
        let mut i = self.home(key);
        loop {
            let slot = &self.slots[i];
            let k = slot.key.load(Ordering::Relaxed);
            if k == EMPTY || k == TOMB {
                slot.fill(key, out);
                return (i, k == EMPTY);
            }
            i = self.next(i);
        }
    }

    fn mark_claimed(&self, i: usize) {
        self.claims[i / 64].fetch_or(1 << (i % 64), Ordering::AcqRel);
    }
}

/// What other threads reach without the heap's lock: the current table, and whether claims
/// wait to be collected. Lives in the heap beside its lock.
pub(super) struct Shared {
    front: Slot,
    current: AtomicPtr<Table>,
    pending: AtomicBool,
}

impl Shared {
    /// Whether claims may wait to be collected (a hint: `collect` finds the exact ones).
    #[inline]
    pub(super) fn pending(&self) -> bool {
        self.pending.load(Ordering::Acquire)
    }

    /// Claims `addr` for a release from a thread that does not hold the heap's lock; true if
    /// the heap had it out, unreleased (see the module docs): then `before` has been called with
    /// what the heap knows of it, just before the block became the heap's again, and the
    /// holder of the lock collects it later. False proves nothing: the caller takes the exact
    /// path. `undo` is called instead of returning true when the swap fails after `before`
    /// (a rebuild moved the key meanwhile): the block is still out, as `before` found it.
    pub(super) fn claim(&self, addr: usize, before: impl FnOnce(Out), undo: impl FnOnce(Out)) -> bool {
        if self.front.key.load(Ordering::Acquire) == addr {
            // As in the table below; nothing moves the front slot's key but its owner's removal
            // and this swap.
            let out = self.front.out();
            before(out);
            let claimed = self
                .front
                .key
                .compare_exchange(addr, addr | CLAIMED, Ordering::AcqRel, Ordering::Relaxed)
                .is_ok();
            match claimed {
                true => self.pending.store(true, Ordering::Release),
                false => undo(out),
            }
            return claimed;
        }
        // SAFETY: tables are freed only when the heap goes (`OutTable` keeps every one ever
        // published: `table` and `retired`), and the heap outlives this call (the pool holds it).
        let table = unsafe { &*self.current.load(Ordering::Acquire) };
        let mut i = table.home(addr);
        // At most one lap: a table is never full, but a rebuild may move keys around the probe.
        for _ in 0..table.slots.len() {
            let slot = &table.slots[i];
            let k = slot.key.load(Ordering::Acquire);
            if k == addr {
                // The block is out of this heap and the caller owns it: nobody else touches it
                // until the swap below makes it the heap's again, so `before` (which hides it
                // from the memory checkers) runs first and cannot be late.
                let out = slot.out();
                before(out);
                let claimed = slot
                    .key
                    .compare_exchange(addr, addr | CLAIMED, Ordering::AcqRel, Ordering::Relaxed)
                    .is_ok();
                match claimed {
                    true => {
                        table.mark_claimed(i);
                        self.pending.store(true, Ordering::Release);
                    }
                    false => undo(out),
                }
                return claimed;
            }
            if k == EMPTY {
                return false;
            }
            i = table.next(i);
        }
        false
    }
}

/// The holder of the heap's lock's side of the record.
pub(super) struct OutTable {
    /// The table in use: its slots and the shift of its hash, copied here so that the path of
    /// every acquire and release reaches a slot with one load less.
    slots: *const Slot,
    shift: u32,
    table: Box<Table>,
    /// The tables it replaced, kept until the heap goes (see the module docs). Boxed: other
    /// threads may hold a table's address, which must not move when the list grows.
    #[allow(clippy::vec_box)]
    retired: Vec<Box<Table>>,
    /// Slots not `EMPTY` in the current table, and how many it may have before a rebuild.
    used: usize,
    limit: usize,
    /// Inserts since the last that found the front slot free, all finding it taken (see
    /// [`FRONT_PATIENCE`]).
    front_missed: u32,
}

impl OutTable {
    /// A record, and what other threads see of it.
    pub(super) fn new() -> (OutTable, Shared) {
        let mut table = Table::new(MIN_SLOTS);
        let shared = Shared {
            front: Slot::default(),
            current: AtomicPtr::new(&mut *table),
            pending: AtomicBool::new(false),
        };
        let out = OutTable {
            slots: table.slots.as_ptr(),
            shift: table.shift,
            table,
            retired: Vec::new(),
            used: 0,
            limit: limit(MIN_SLOTS),
            front_missed: 0,
        };
        (out, shared)
    }

    /// Records `addr` (not in the record) as out: in the front slot or its home slot if one is
    /// free (a block given back and taken again finds its own tombstone there), inline; a probe,
    /// out of line.
    #[inline]
    pub(super) fn insert(&mut self, shared: &Shared, addr: usize, out: Out) {
        if self.front_free(shared) {
            self.fill_front(shared, addr, out);
            self.front_missed = 0;
            return;
        }
        self.front_missed += 1;
        if self.front_missed >= FRONT_PATIENCE {
            self.move_front(shared);
            self.fill_front(shared, addr, out);
            return;
        }
        let slot = self.slot(home(addr, self.shift));
        let k = slot.key.load(Ordering::Relaxed);
        if k == TOMB || (k == EMPTY && self.used < self.limit) {
            slot.fill(addr, out);
            self.used += (k == EMPTY) as usize;
            return;
        }
        self.insert_slow(shared, addr, out);
    }

    /// Whether the front slot is free: an insert now goes there.
    #[inline]
    pub(super) fn front_free(&self, shared: &Shared) -> bool {
        matches!(shared.front.key.load(Ordering::Relaxed), EMPTY | TOMB)
    }

    /// Records `addr` (not in the record) as out in the front slot, which is free. Makes no
    /// call (the pool's fast paths rely on it).
    #[inline]
    pub(super) fn fill_front(&mut self, shared: &Shared, addr: usize, out: Out) {
        debug_assert!(self.front_free(shared));
        shared.front.fill(addr, out);
    }

    /// Moves the front slot's entry, claimed or not, into the table (`FRONT_PATIENCE`), as a
    /// rebuild moves the table's: swapped out, so that a racing claim either came first (and
    /// keeps its mark, with its bit) or fails and takes the locked path.
    #[cold]
    #[inline(never)]
    fn move_front(&mut self, shared: &Shared) {
        let front = &shared.front;
        let out = front.out();
        let k = front.key.swap(EMPTY, Ordering::AcqRel);
        if matches!(k, EMPTY | TOMB) {
            return;
        }
        if self.used >= self.limit {
            self.rebuild(shared);
        }
        let (i, was_empty) = self.table.put(k, out);
        self.used += was_empty as usize;
        if k & CLAIMED != 0 {
            self.table.mark_claimed(i);
            shared.pending.store(true, Ordering::Release);
        }
    }

    /// What the front slot records of `addr`, if it holds it, out and not claimed. `addr` must
    /// be 16-byte aligned (`KEY_MARKS`): an unaligned pointer could equal a tombstone or a
    /// claimed key.
    #[inline]
    pub(super) fn in_front(&self, shared: &Shared, addr: usize) -> Option<Out> {
        debug_assert_eq!(addr & KEY_MARKS, 0);
        let front = &shared.front;
        (front.key.load(Ordering::Relaxed) == addr).then(|| front.out())
    }

    /// Removes the entry in the front slot, which [`in_front`](Self::in_front) just found.
    #[inline]
    pub(super) fn clear_front(&mut self, shared: &Shared) {
        // A plain store: see `remove_slow`.
        shared.front.key.store(TOMB, Ordering::Relaxed);
    }

    /// Slot `i` of the current table (below its length).
    #[inline]
    fn slot(&self, i: usize) -> &Slot {
        debug_assert!(i < self.table.slots.len());
        // SAFETY: `slots` is the current table's (`rebuild` keeps it so), whose slots this
        // record owns; the callers' `i` come from `home` with the current `shift`, below the
        // table's length, 2 ^ (64 - shift).
        unsafe { &*self.slots.add(i) }
    }

    #[cold]
    #[inline(never)]
    fn insert_slow(&mut self, shared: &Shared, addr: usize, out: Out) {
        if self.used >= self.limit {
            self.rebuild(shared);
        }
        let (_, was_empty) = self.table.put(addr, out);
        self.used += was_empty as usize;
    }

    /// Removes the entry of `addr` (16-byte aligned), if it is out and not claimed: found in
    /// the front slot or its home slot inline, further on out of line.
    #[inline]
    pub(super) fn remove(&mut self, shared: &Shared, addr: usize) -> Option<Out> {
        if let Some(out) = self.in_front(shared, addr) {
            self.clear_front(shared);
            return Some(out);
        }
        let slot = self.slot(home(addr, self.shift));
        if slot.key.load(Ordering::Relaxed) == addr {
            // A plain store: see `remove_slow`.
            slot.key.store(TOMB, Ordering::Relaxed);
            return Some(slot.out());
        }
        self.remove_slow(addr)
    }

    #[cold]
    #[inline(never)]
    fn remove_slow(&mut self, addr: usize) -> Option<Out> {
        let table = &self.table;
        let mut i = table.home(addr);
        loop {
            let slot = &table.slots[i];
            let k = slot.key.load(Ordering::Relaxed);
            if k == addr {
                let out = slot.out();
                // A plain store: only a second release of the block at the same moment could
                // claim it meanwhile (module docs).
                slot.key.store(TOMB, Ordering::Relaxed);
                return Some(out);
            }
            if k == EMPTY {
                return None;
            }
            i = table.next(i);
        }
    }

    /// Takes every claimed entry out of the record, each given to `f` with its address.
    pub(super) fn collect(&mut self, shared: &Shared, mut f: impl FnMut(usize, Out)) {
        if !shared.pending() {
            return;
        }
        // Cleared before the keys and bits are read, with a swap: a claim whose flag comes
        // after it in the flag's order sets it again and is seen next time; the claim whose
        // flag it reads synchronizes with it (AcqRel), so its key and bit are seen below. A
        // plain store here could sit in this core's store buffer past the reads below and land
        // after a racing claim's own flag: that claim would wait, uncollected, for another.
        // (In the language's model, two claims whose flags both come before the swap are
        // ordered with it only through the last one; x86-64's and ARMv8's stores, seen by all
        // cores in one order, order the first one's key too. A claim's flag stays a plain
        // store: a swap there made a release from another thread 1.7x -> 2.0-2.7x glibc's.)
        shared.pending.swap(false, Ordering::AcqRel);
        let front = &shared.front;
        let k = front.key.load(Ordering::Acquire);
        if k & CLAIMED != 0 {
            let out = front.out();
            front.key.store(TOMB, Ordering::Relaxed);
            f(k & !CLAIMED, out);
        }
        let table = &self.table;
        for (w, word) in table.claims.iter().enumerate() {
            // AcqRel: the claims whose bits these are happened before, and the store above
            // before any later claim's bit.
            let mut bits = match word.load(Ordering::Relaxed) {
                0 => continue,
                _ => word.swap(0, Ordering::AcqRel),
            };
            while bits != 0 {
                let i = w * 64 + bits.trailing_zeros() as usize;
                bits &= bits - 1;
                let slot = &table.slots[i];
                let k = slot.key.load(Ordering::Acquire);
                // A stale bit (the key was collected by a rebuild, or the slot reused) is
                // skipped: only a claimed key is collected, once.
                if k & CLAIMED != 0 {
                    let out = slot.out();
                    slot.key.store(TOMB, Ordering::Relaxed);
                    f(k & !CLAIMED, out);
                }
            }
        }
    }

    /// Makes room: the same slots without tombstones, or twice as many when over half would
    /// be taken. Each live key is swapped out of its slot (see the module docs).
    #[cold]
    #[inline(never)]
    fn rebuild(&mut self, shared: &Shared) {
        let old = &self.table;
        let mut entries = Vec::with_capacity(self.used);
        for slot in old.slots.iter() {
            match slot.key.load(Ordering::Relaxed) {
                EMPTY => {}
                TOMB => slot.key.store(EMPTY, Ordering::Relaxed),
                _ => {
                    let out = slot.out();
                    // A swap, so that a claim either came first (and shows in `k`) or fails.
                    let k = slot.key.swap(EMPTY, Ordering::AcqRel);
                    entries.push((k, out));
                }
            }
        }
        let slots = old.slots.len();
        if (entries.len() + 1) * 2 > slots {
            let mut table = Table::new(slots * 2);
            // Release: the table's empty slots are seen by whoever loads the pointer.
            shared.current.store(&mut *table, Ordering::Release);
            let old = std::mem::replace(&mut self.table, table);
            self.retired.push(old);
            (self.slots, self.shift) = (self.table.slots.as_ptr(), self.table.shift);
        }
        let table = &self.table;
        for &(k, out) in &entries {
            let (i, _) = table.put(k, out);
            if k & CLAIMED != 0 {
                table.mark_claimed(i);
                shared.pending.store(true, Ordering::Release);
            }
        }
        self.used = entries.len();
        self.limit = limit(table.slots.len());
    }

    /// Entries out, claimed ones included (for tests: a scan).
    #[cfg(test)]
    fn live(&self, shared: &Shared) -> usize {
        let taken = |s: &Slot| !matches!(s.key.load(Ordering::Relaxed), EMPTY | TOMB);
        self.table.slots.iter().filter(|s| taken(s)).count() + usize::from(taken(&shared.front))
    }
}

/// The home slot of `addr` in a table of 2 ^ (64 - `shift`) slots: the top bits of a
/// multiplicative hash (addresses share their low bits).
#[inline]
fn home(addr: usize, shift: u32) -> usize {
    ((addr as u64 >> 4).wrapping_mul(0x9E37_79B9_7F4A_7C15) >> shift) as usize
}

/// Slots a table of `slots` may have taken (entries and tombstones) before a rebuild: three
/// quarters, so that probes stay short and always end.
fn limit(slots: usize) -> usize {
    slots / 4 * 3
}

#[cfg(test)]
mod tests;
