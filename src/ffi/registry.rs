//! The handle registry: which handles are live, checked without a lock.
//!
//! A handle given to C is not an address: it names a slot of a table and the slot's generation,
//! dressed as a 16-byte-aligned pointer. Each slot holds one object's address and a state word
//! (generation, type tag, live bit). Looking a handle up reads the slot's state and compares it
//! with the handle: no lock, no hashing, one or two cache lines, so calls from inside kernels
//! (`gs_pool_acquire`) and every `gs_run` cost no shared write. A freed slot's generation moves
//! on, so a freed handle stays invalid even after its slot serves a new one; NULL, garbage and
//! other-type handles are refused the same way (the table is graphsched's own memory, so a
//! garbage handle is never dereferenced, even under valgrind). The one misuse this cannot catch
//! is freeing a handle while another thread is still inside a call on it.
//!
//! Creating and freeing take the free list's lock, except that each thread keeps the last slot
//! it freed for its next handle (a result created and freed per run takes no lock). Segments of
//! the table are allocated as needed and kept for the life of the process (still reachable,
//! never leaked).

use std::sync::atomic::{AtomicPtr, AtomicU64, AtomicUsize, Ordering};
use std::sync::Mutex;

/// Slots per segment, and segments: at most 4,194,304 handles live at once.
const SEGMENT_SLOTS: usize = 1 << 10;
const SEGMENTS: usize = 1 << 12;
const INDEX_BITS: u32 = 22;
/// Generations wrap after 2^37 frees of one slot: a stale handle could match again only after
/// that many reuses of its own slot.
const GENERATION_MASK: u64 = (1 << 37) - 1;

struct Slot {
    /// `generation << 9 | tag << 1 | live`. Release on publication (after `addr`), Acquire on
    /// lookup: a lookup that sees the live state sees the address stored before it.
    state: AtomicU64,
    /// The boxed object's address while live.
    addr: AtomicUsize,
}

type Segment = [Slot; SEGMENT_SLOTS];

/// Segment pointers, null until first needed; set once (Release) under the free list's lock
/// and never changed, so a lookup that reads non-null (Acquire) sees an initialized segment.
static TABLE: [AtomicPtr<Segment>; SEGMENTS] = [const { AtomicPtr::new(std::ptr::null_mut()) }; SEGMENTS];

/// Slots to reuse, and the first slot never used.
struct FreeList {
    free: Vec<u32>,
    next: u32,
}

static FREE: Mutex<FreeList> = Mutex::new(FreeList {
    free: Vec::new(),
    next: 0,
});

fn live_state(generation: u64, tag: u8) -> u64 {
    generation << 9 | (tag as u64) << 1 | 1
}

fn generation_of(state: u64) -> u64 {
    state >> 9
}

fn encode(index: u32, generation: u64) -> usize {
    (((generation << INDEX_BITS) | index as u64) << 4) as usize
}

/// The slot a handle names, if its segment exists; `None` for values no handle ever had.
fn slot_of(handle: usize) -> Option<(&'static Slot, u64)> {
    if handle & 15 != 0 {
        return None;
    }
    let key = (handle >> 4) as u64;
    let index = (key & ((1 << INDEX_BITS) - 1)) as usize;
    let generation = key >> INDEX_BITS;
    let segment = TABLE[index / SEGMENT_SLOTS].load(Ordering::Acquire);
    // SAFETY: a non-null segment pointer came from `Box::into_raw` in `register` and is never
    // freed.
    let segment = unsafe { segment.as_ref() }?;
    Some((&segment[index % SEGMENT_SLOTS], generation))
}

/// One free slot kept by the thread that freed it, for its next handle: a thread that makes
/// and frees a handle per call (a run's result) takes neither lock of the free list. Given back
/// to the list when the thread exits.
struct ThreadSlot(std::cell::Cell<Option<u32>>);

impl Drop for ThreadSlot {
    fn drop(&mut self) {
        if let Some(index) = self.0.take() {
            free_slot(index);
        }
    }
}

thread_local! {
    static THREAD_SLOT: ThreadSlot = const { ThreadSlot(std::cell::Cell::new(None)) };
}

/// Registers the object at `addr` under type `tag` (non-zero) and returns its handle, or `None`
/// if the table is full.
pub(crate) fn register(tag: u8, addr: usize) -> Option<usize> {
    let index = match THREAD_SLOT.try_with(|s| s.0.take()).ok().flatten() {
        Some(index) => index,
        None => take_slot()?,
    };
    let (slot, _) = slot_of(encode(index, 0)).expect("the segment exists");
    // Generation 0 is never live, so that no handle is NULL.
    let generation = generation_of(slot.state.load(Ordering::Relaxed)).max(1);
    slot.addr.store(addr, Ordering::Relaxed);
    slot.state.store(live_state(generation, tag), Ordering::Release);
    Some(encode(index, generation))
}

/// Puts a slot on the free list.
fn free_slot(index: u32) {
    FREE.lock().unwrap_or_else(|e| e.into_inner()).free.push(index);
}

/// A slot from the free list, or the next one never used; `None` if the table is full.
fn take_slot() -> Option<u32> {
    let mut list = FREE.lock().unwrap_or_else(|e| e.into_inner());
    let index = match list.free.pop() {
        Some(index) => index,
        None => {
            let index = list.next;
            if index as usize >= SEGMENT_SLOTS * SEGMENTS {
                return None;
            }
            let segment = &TABLE[index as usize / SEGMENT_SLOTS];
            if segment.load(Ordering::Relaxed).is_null() {
                let fresh: Box<Segment> = Box::new(std::array::from_fn(|_| Slot {
                    state: AtomicU64::new(0),
                    addr: AtomicUsize::new(0),
                }));
                segment.store(Box::into_raw(fresh), Ordering::Release);
            }
            list.next += 1;
            index
        }
    };
    Some(index)
}

/// The address registered under `handle` with type `tag`, if it is live.
pub(crate) fn lookup(handle: usize, tag: u8) -> Option<usize> {
    let (slot, generation) = slot_of(handle)?;
    (slot.state.load(Ordering::Acquire) == live_state(generation, tag)).then(|| slot.addr.load(Ordering::Relaxed))
}

/// Unregisters a live handle of type `tag` and returns its address; `None` (and nothing
/// changes) if it is not one.
pub(crate) fn unregister(handle: usize, tag: u8) -> Option<usize> {
    let (slot, generation) = slot_of(handle)?;
    let next = ((generation + 1) & GENERATION_MASK) << 9;
    // One compare-exchange from the live state: two frees of one handle cannot both succeed,
    // and the winner alone puts the slot on a free list.
    slot.state
        .compare_exchange(live_state(generation, tag), next, Ordering::AcqRel, Ordering::Relaxed)
        .ok()?;
    // Ordered after the registration's by the exchange's Acquire, and read before the slot can
    // serve again: once it is on a free list, another thread may register in it.
    let addr = slot.addr.load(Ordering::Relaxed);
    let index = ((handle >> 4) as u64 & ((1 << INDEX_BITS) - 1)) as u32;
    let kept = THREAD_SLOT.try_with(|s| match s.0.get() {
        None => {
            s.0.set(Some(index));
            true
        }
        Some(_) => false,
    });
    if kept != Ok(true) {
        free_slot(index);
    }
    Some(addr)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_freed_slot_serves_again_under_a_new_handle() {
        let a = register(7, 0x1000).unwrap();
        assert_eq!(a % 16, 0);
        assert_eq!(lookup(a, 7), Some(0x1000));
        assert_eq!(lookup(a, 6), None, "another type's tag");
        assert_eq!(unregister(a, 7), Some(0x1000));
        assert_eq!(unregister(a, 7), None, "freed twice");
        assert_eq!(lookup(a, 7), None, "freed");
        // Other tests register concurrently: take slots until this one's comes back.
        let mut taken = Vec::new();
        let again = loop {
            let h = register(7, 0x2000).unwrap();
            if h & (((1 << INDEX_BITS) - 1) << 4) == a & (((1 << INDEX_BITS) - 1) << 4) {
                break h;
            }
            taken.push(h);
            assert!(taken.len() < 100_000, "the freed slot never came back");
        };
        assert_ne!(again, a, "same slot, new generation");
        assert_eq!(lookup(a, 7), None, "the old handle stays invalid");
        assert_eq!(lookup(again, 7), Some(0x2000));
        for h in taken.into_iter().chain([again]) {
            assert!(unregister(h, 7).is_some());
        }
    }

    #[test]
    fn values_no_handle_had_are_refused() {
        for garbage in [8usize, 16 << 40, usize::MAX & !15, 0x7fff_dead_bee0] {
            assert_eq!(lookup(garbage, 1), None, "{garbage:#x}");
            assert_eq!(unregister(garbage, 1), None, "{garbage:#x}");
        }
    }
}
