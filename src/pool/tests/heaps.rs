//! Unit tests of the threads' heaps: releases from other threads, adoption, settles, the fast
//! paths.
use super::*;

/// Blocks of several sizes, small and large, for the heap tests.
const SIZES: [usize; 6] = [16, 100, 1000, 1024, 5000, 300_000];

#[test]
fn a_block_released_by_another_thread_goes_back_once() {
    let pool = Pool::default();
    let blocks: Vec<usize> = std::thread::scope(|s| {
        s.spawn(|| {
            SIZES
                .iter()
                .cycle()
                .take(60)
                .map(|&n| pool.acquire(n, false).unwrap().as_ptr() as usize)
                .collect()
        })
        .join()
        .unwrap()
    });
    let total: usize = SIZES.iter().sum::<usize>() * 10;
    assert_eq!(pool.stats().live_bytes, total as u64);
    std::thread::scope(|s| {
        s.spawn(|| {
            for &b in &blocks {
                let p = NonNull::new(b as *mut u8).unwrap();
                // SAFETY: acquired above by the other thread, not used after.
                unsafe { pool.release(p) }.unwrap();
            }
        });
    });
    for &b in &blocks {
        let p = NonNull::new(b as *mut u8).unwrap();
        // SAFETY: released already: refused before anything is touched.
        let again = unsafe { pool.release(p) }.unwrap_err();
        assert_eq!(again.kind(), ErrorKind::UnknownPointer, "{again}");
    }
    let s = pool.stats();
    assert_eq!((s.acquires, s.releases, s.live_bytes), (60, 60, 0));
    assert_eq!(
        s.peak_live_bytes, total as u64,
        "one thread at a time: the peak is exact"
    );
    assert_eq!(pool.heaps.count(), 1, "the releasing thread made no heap");
}

#[test]
fn a_pointer_no_heap_handed_out_is_refused() {
    let pool = Pool::default();
    let p = pool.acquire(4096, false).unwrap();
    let q = pool.acquire(64, false).unwrap();
    // SAFETY: neither pointer is a block of the pool: refused before anything is touched.
    unsafe {
        let inside = NonNull::new(p.as_ptr().add(64)).unwrap();
        assert_eq!(pool.release(inside).unwrap_err().kind(), ErrorKind::UnknownPointer);
        let mut local = 0u64;
        let foreign = NonNull::new((&mut local as *mut u64).cast::<u8>()).unwrap();
        assert_eq!(pool.release(foreign).unwrap_err().kind(), ErrorKind::UnknownPointer);
    }
    // A spare of the small class waits free in the heap's bin: refused as released.
    let spare = NonNull::new(q.as_ptr().wrapping_add(64)).unwrap();
    // SAFETY: not out, so refused before anything is touched.
    let refused = unsafe { pool.release(spare) };
    assert_eq!(refused.unwrap_err().kind(), ErrorKind::UnknownPointer);
    // SAFETY: blocks of this test, not used after.
    unsafe {
        pool.release(p).unwrap();
        pool.release(q).unwrap();
    }
    assert_eq!(pool.stats().live_bytes, 0);
}

#[test]
fn a_finished_threads_heap_is_adopted_and_its_blocks_stay_releasable() {
    let pool = Pool::default();
    let kept = std::thread::scope(|s| {
        s.spawn(|| pool.acquire(5000, false).unwrap().as_ptr() as usize)
            .join()
            .unwrap()
    });
    std::thread::scope(|s| {
        s.spawn(|| {
            let p = pool.acquire(5000, false).unwrap();
            // SAFETY: acquired just above, not used after.
            unsafe { pool.release(p) }.unwrap();
        });
    });
    assert_eq!(pool.heaps.count(), 1, "the second thread adopted the first one's heap");
    // SAFETY: acquired by the first thread, not used after.
    unsafe { pool.release(NonNull::new(kept as *mut u8).unwrap()) }.unwrap();
    let s = pool.stats();
    assert_eq!((s.acquires, s.releases, s.live_bytes), (2, 2, 0));
}

#[test]
fn threads_acquiring_at_once_keep_exact_counts() {
    let pool = Pool::default();
    let rounds = 2_000;
    std::thread::scope(|s| {
        for t in 0..2 {
            let pool = &pool;
            s.spawn(move || {
                let mut held = Vec::new();
                for i in 0..rounds {
                    held.push(pool.acquire(SIZES[(i + t) % SIZES.len()], i % 3 == 0).unwrap());
                    if held.len() > 8 {
                        // SAFETY: acquired above, not used after.
                        unsafe { pool.release(held.swap_remove(i % 8)) }.unwrap();
                    }
                }
                for p in held {
                    // SAFETY: as above.
                    unsafe { pool.release(p) }.unwrap();
                }
            });
        }
    });
    let s = pool.stats();
    assert_eq!(
        (s.acquires, s.releases, s.live_bytes),
        (2 * rounds as u64, 2 * rounds as u64, 0)
    );
    assert!(s.peak_live_bytes >= 9 * 16 && s.peak_live_bytes <= 2 * 9 * 300_000);
    pool.trim();
    assert_eq!(
        pool.stats().reserved_bytes,
        0,
        "trim takes back what the heaps held free"
    );
}

#[test]
fn settle_gives_the_heaps_free_blocks_back_for_other_sizes() {
    let pool = Pool::default();
    let blocks: Vec<_> = (0..10).map(|_| pool.acquire(100_000, false).unwrap()).collect();
    for p in blocks {
        // SAFETY: acquired above, not used after.
        unsafe { pool.release(p) }.unwrap();
    }
    let reserved = pool.stats().reserved_bytes;
    pool.settle();
    // One block the size of all ten fits in their coalesced memory.
    let big = pool.acquire(10 * 100_000, false).unwrap();
    assert_eq!(pool.stats().reserved_bytes, reserved, "no new memory");
    // SAFETY: acquired above, not used after.
    unsafe { pool.release(big) }.unwrap();
}

#[test]
fn a_dropped_pools_heap_is_let_go_by_the_thread() {
    for _ in 0..3 {
        let pool = Pool::default();
        let p = pool.acquire(64, false).unwrap();
        // SAFETY: acquired above, not used after.
        unsafe { pool.release(p) }.unwrap();
    }
    assert!(
        crate::pool::heaps::attached_here() <= 1,
        "dead pools' heaps were let go"
    );
}

#[test]
fn pools_with_red_zones_or_a_cap_have_no_heaps() {
    for config in [
        PoolConfig {
            red_zones: 1,
            ..Default::default()
        },
        PoolConfig {
            max_pool_bytes: 1 << 20,
            ..Default::default()
        },
    ] {
        let pool = Pool::new(config).unwrap();
        let p = pool.acquire(64, false).unwrap();
        // SAFETY: acquired above, not used after.
        unsafe { pool.release(p) }.unwrap();
        assert_eq!(pool.heaps.count(), 0);
    }
}

#[test]
fn blocks_handed_between_threads_while_the_pool_settles_and_counts() {
    use std::sync::mpsc;
    let pool = Pool::default();
    let rounds = 20_000usize;
    let (to_releaser, from_acquirer) = mpsc::sync_channel::<usize>(64);
    std::thread::scope(|s| {
        // Acquires blocks of every kind and hands each to the other thread, which releases it;
        // meanwhile a third thread settles, trims and reads the counts.
        let pool = &pool;
        s.spawn(move || {
            for i in 0..rounds {
                let p = pool.acquire(SIZES[i % SIZES.len()], false).unwrap();
                // SAFETY: the block holds at least 16 bytes and is this thread's until sent.
                unsafe { p.as_ptr().write_bytes(i as u8, 16) };
                to_releaser.send(p.as_ptr() as usize).unwrap();
            }
        });
        s.spawn(move || {
            for (i, addr) in from_acquirer.iter().enumerate() {
                let p = NonNull::new(addr as *mut u8).unwrap();
                // SAFETY: written by the acquirer before the send, which orders it before this.
                assert_eq!(unsafe { p.as_ptr().read() }, i as u8, "block {i} was handed out twice");
                // SAFETY: sent to this thread, not used after. (Releasing it twice here is no
                // test: the acquirer may have the block again already, as from any allocator.)
                unsafe { pool.release(p) }.unwrap();
            }
        });
        s.spawn(move || {
            for i in 0..200 {
                if i % 2 == 0 {
                    pool.settle();
                } else {
                    pool.trim();
                }
                let s = pool.stats();
                assert!(s.releases <= s.acquires);
                std::thread::yield_now();
            }
        });
    });
    let s = pool.stats();
    assert_eq!(
        (s.acquires, s.releases, s.live_bytes),
        (rounds as u64, rounds as u64, 0)
    );
    pool.trim();
    assert_eq!(pool.stats().reserved_bytes, 0);
}

#[test]
fn blocks_taken_a_slab_at_a_time_count_as_single_acquires_do() {
    let pool = Pool::default();
    let mut blocks = Vec::new();
    // 1000 blocks of 64 bytes span four slabs of 256: each new slab commits memory once.
    pool.acquire_many(64, 1000, Owner::Caller, false, &mut blocks).unwrap();
    let mut addrs: Vec<usize> = blocks.iter().map(|p| p.as_ptr() as usize).collect();
    addrs.sort_unstable();
    addrs.dedup();
    assert_eq!(addrs.len(), 1000, "every block is its own");
    assert!(addrs.iter().all(|a| a % 16 == 0));
    assert!(addrs.windows(2).all(|w| w[1] - w[0] >= 64), "no two blocks overlap");
    let s = pool.stats();
    assert_eq!((s.acquires, s.live_bytes), (1000, 64_000));
    let commits = 1000 - s.cache_hits;
    assert_eq!(commits, 4, "the first block of each new slab commits memory");
    assert_eq!(commits, s.os_allocs);
    // SAFETY: blocks of this test, released once.
    unsafe { pool.release_many(blocks.iter().copied(), Owner::Caller, false) }.unwrap();
    // SAFETY: released already: refused before anything is touched.
    let again = unsafe { pool.release(blocks[999]) };
    assert_eq!(again.unwrap_err().kind(), ErrorKind::UnknownPointer);
    // Again on memory committed already: every block is a hit.
    blocks.clear();
    pool.acquire_many(64, 1000, Owner::Caller, false, &mut blocks).unwrap();
    let s = pool.stats();
    assert_eq!((s.acquires, s.cache_hits, s.live_bytes), (2000, 2000 - commits, 64_000));
    // SAFETY: blocks of this test, released once.
    unsafe { pool.release_many(blocks, Owner::Caller, false) }.unwrap();
    assert_eq!(pool.stats().live_bytes, 0);
}

#[test]
fn releases_from_another_thread_take_no_lock_and_the_owner_reuses_the_blocks() {
    let pool = Pool::default();
    // This thread's heap hands out blocks of every kind; another thread releases them.
    let blocks: Vec<usize> = (0..300)
        .map(|i| pool.acquire(SIZES[i % SIZES.len()], false).unwrap().as_ptr() as usize)
        .collect();
    let (os, visits) = (pool.stats().os_allocs, pool.heaps.visits());
    std::thread::scope(|s| {
        s.spawn(|| {
            for &b in &blocks {
                // SAFETY: acquired above, handed to this thread, not used after.
                unsafe { pool.release(NonNull::new(b as *mut u8).unwrap()) }.unwrap();
                // SAFETY: released just now: refused before anything is touched.
                let again = unsafe { pool.release(NonNull::new(b as *mut u8).unwrap()) }.unwrap_err();
                assert_eq!(again.kind(), ErrorKind::UnknownPointer, "{again}");
            }
        });
    });
    // Every release claimed its block without visiting the heap; only the refused second
    // releases visited (their claims found nothing).
    assert_eq!(
        pool.heaps.visits() - visits,
        300,
        "one visit per refused release, none per release"
    );
    // Released by the other thread, refused here too (claimed, not yet collected).
    // SAFETY: released already: refused before anything is touched.
    let again = unsafe { pool.release(NonNull::new(blocks[0] as *mut u8).unwrap()) }.unwrap_err();
    assert_eq!(again.kind(), ErrorKind::UnknownPointer, "{again}");
    // The owner takes them back into its bins: the same blocks again, nothing new from the
    // system, and the counts exact.
    let again: Vec<usize> = (0..300)
        .map(|i| pool.acquire(SIZES[i % SIZES.len()], false).unwrap().as_ptr() as usize)
        .collect();
    assert_eq!(pool.stats().os_allocs, os, "the released blocks were reused");
    // Mostly the same blocks (a bin may also hold spares from an earlier refill).
    let released: std::collections::HashSet<usize> = blocks.iter().copied().collect();
    let reused = again.iter().filter(|b| released.contains(b)).count();
    assert!(reused >= 250, "{reused} of 300 released blocks came back");
    for &p in &again {
        // SAFETY: acquired above, not used after.
        unsafe { pool.release(NonNull::new(p as *mut u8).unwrap()) }.unwrap();
    }
    let s = pool.stats();
    assert_eq!((s.acquires, s.releases, s.live_bytes), (600, 600, 0));
}

/// Four threads acquire blocks of every size and send each to a random other thread, which
/// checks it and releases it: every block is out once at a time (its bytes say whose it is),
/// claims race with their owners' acquires, misses and table rebuilds, and with settles and
/// count reads; at the end every count is exact and every byte goes back.
#[test]
fn blocks_released_by_any_thread_while_their_owners_go_on() {
    use std::sync::mpsc;
    const THREADS: usize = 4;
    const ROUNDS: usize = 6_000;
    let pool = Pool::default();
    let (senders, receivers): (Vec<_>, Vec<_>) = (0..THREADS).map(|_| mpsc::channel::<(usize, u64)>()).unzip();
    std::thread::scope(|s| {
        for (t, rx) in receivers.into_iter().enumerate() {
            let (pool, senders) = (&pool, senders.clone());
            s.spawn(move || {
                let mut seed = t as u64 + 1;
                let mut kept = std::collections::VecDeque::new();
                let check_and_release = |(addr, tag): (usize, u64)| {
                    let p = NonNull::new(addr as *mut u8).unwrap();
                    // SAFETY: written by its acquirer before the send, which orders it before
                    // this read; the block is this thread's now.
                    let seen = unsafe { (p.as_ptr() as *const u64).read() };
                    assert_eq!(seen, tag, "a block was handed out twice");
                    // SAFETY: this thread's, not used after.
                    unsafe { pool.release(p) }.unwrap();
                };
                for i in 0..ROUNDS {
                    seed = seed.wrapping_mul(6364136223846793005).wrapping_add(1442695040888963407);
                    let n = SIZES[(seed >> 33) as usize % SIZES.len()];
                    let p = pool.acquire(n, false).unwrap();
                    let tag = (t * ROUNDS + i) as u64;
                    // SAFETY: at least 16 bytes, this thread's until sent.
                    unsafe { (p.as_ptr() as *mut u64).write(tag) };
                    // Held a while, so that tables hold many blocks and rebuild.
                    kept.push_back((p.as_ptr() as usize, tag));
                    if kept.len() > 200 {
                        let to = (seed >> 40) as usize % THREADS;
                        senders[to].send(kept.pop_front().unwrap()).unwrap();
                    }
                    while let Ok(b) = rx.try_recv() {
                        check_and_release(b);
                    }
                    if i % 1000 == 999 && t == 0 {
                        pool.settle();
                        assert!(pool.stats().releases <= pool.stats().acquires);
                    }
                }
                kept.into_iter().for_each(|b| senders[t].send(b).unwrap());
                drop(senders);
                rx.into_iter().for_each(check_and_release);
            });
        }
        drop(senders);
    });
    let s = pool.stats();
    let n = (THREADS * ROUNDS) as u64;
    assert_eq!((s.acquires, s.releases, s.live_bytes), (n, n, 0));
    pool.trim();
    assert_eq!(pool.stats().reserved_bytes, 0, "every block went back");
}

#[test]
fn a_heap_keeps_few_kib_blocks_across_a_run_start_and_gives_back_bigger_ones() {
    let pool = Pool::default();
    let hits = || pool.stats().cache_hits;
    let small = pool.acquire(3000, false).unwrap();
    let big = pool.acquire(200_000, false).unwrap();
    // SAFETY: blocks of this test, not used after their release.
    unsafe {
        pool.release(small).unwrap();
        pool.release(big).unwrap();
    }
    // A run's start, then a miss of another size: the 200,000-byte block went back to the
    // central pool, which serves the new size from its bytes; the 3,000-byte one stayed.
    pool.settle_from(true);
    let other = pool.acquire(150_000, false).unwrap();
    assert_eq!(other, big, "the big block went back and serves another size");
    let before = hits();
    let again = pool.acquire(3000, false).unwrap();
    assert_eq!(
        (again, hits()),
        (small, before + 1),
        "the few-KiB block stayed in the heap"
    );
    // SAFETY: as above.
    unsafe {
        pool.release(other).unwrap();
        pool.release(again).unwrap();
    }
    // `trim` (as `settle`) gives the kept blocks back too.
    pool.trim();
    assert_eq!(pool.stats().reserved_bytes, 0);
}

#[test]
fn a_run_start_takes_no_lock_when_the_heap_keeps_only_few_kib_blocks() {
    let pool = Pool::default();
    let locks = || pool.published.locks.load(Ordering::Relaxed);
    let small = pool.acquire(3000, false).unwrap();
    // SAFETY: a block of this test, not used after its release.
    unsafe { pool.release(small).unwrap() };
    pool.settle_from(true);
    let before = locks();
    // The heap keeps the 3,000-byte block: a run's start has nothing to give back.
    pool.settle_from(true);
    assert_eq!(locks(), before, "a run's start took the central lock for nothing");
    assert_eq!(pool.acquire(3000, false).unwrap(), small, "the block stayed at hand");
    // A block the heap does not keep (a small slab block) still goes back, under the lock.
    let slab = pool.acquire(64, false).unwrap();
    // SAFETY: as above.
    unsafe {
        pool.release(slab).unwrap();
        pool.release(small).unwrap();
    }
    let before = locks();
    pool.settle_from(true);
    assert!(locks() > before, "the slab block went back to the central pool");
}

/// A thread that looked for its heap before it had one (a settle, as every run's start does)
/// still gets one at its first acquire: the pool remembers "none" only until then.
#[test]
fn a_thread_that_had_no_heap_gets_one_at_its_first_acquire() {
    let pool = Pool::default();
    std::thread::scope(|s| {
        s.spawn(|| {
            pool.settle();
            let heaps = pool.heaps.count();
            let pair = || {
                let p = pool.acquire(64, false).unwrap();
                // SAFETY: acquired above, not used after.
                unsafe { pool.release(p) }.unwrap();
            };
            pair();
            assert_eq!(
                pool.heaps.count(),
                heaps + 1,
                "the first acquire made the thread a heap"
            );
            let hits = pool.stats().cache_hits;
            pair();
            assert_eq!(pool.stats().cache_hits, hits + 1, "the second acquire came from it");
        });
    });
}

/// One thread's pairs take the fast path (`heap/fast.rs`): they count as any acquire and
/// release do, a second release is still refused, the lock's windows still turn (3000 pairs
/// cross two of them), and the block in the front slot of the heap's record can still be
/// released by another thread and reused by the owner.
#[test]
fn pairs_on_the_fast_path_count_and_check_as_any() {
    let pool = Pool::default();
    for n in [64usize, 1000, 20_000] {
        let first = pool.acquire(n, false).unwrap();
        // SAFETY: acquired above, not used after (here and below).
        unsafe { pool.release(first) }.unwrap();
        for _ in 0..3000 {
            let p = pool.acquire(n, false).unwrap();
            assert_eq!(p, first, "the same block every time");
            // SAFETY: as above.
            unsafe { pool.release(p) }.unwrap();
        }
        // SAFETY: released already: refused before anything is touched.
        let again = unsafe { pool.release(first) }.unwrap_err();
        assert_eq!(again.kind(), ErrorKind::UnknownPointer, "{again}");
    }
    let s = pool.stats();
    assert_eq!((s.acquires, s.releases, s.live_bytes), (3 * 3001, 3 * 3001, 0));
    assert_eq!(s.cache_hits, 3 * 3000, "all but each size's first came from the bins");
    assert_eq!(s.peak_live_bytes, 20_000, "one block out at a time");
    let p = pool.acquire(64, false).unwrap();
    let addr = p.as_ptr() as usize;
    std::thread::scope(|s| {
        s.spawn(|| {
            let p = NonNull::new(addr as *mut u8).unwrap();
            // SAFETY: acquired above by the other thread, not used after.
            unsafe { pool.release(p) }.unwrap();
        });
    });
    assert_eq!(pool.stats().live_bytes, 0, "claimed, and collected by the count");
    let q = pool.acquire(64, false).unwrap();
    assert_eq!(q, p, "the owner reuses the block another thread released");
    // SAFETY: as above.
    unsafe { pool.release(q) }.unwrap();
    assert_eq!(pool.heaps.count(), 1, "the releasing thread made no heap");
}

/// Pointers that are no block's start are refused whatever the heap's record holds: the low
/// bits of its keys are marks, and neither a tombstone (1, which `NonNull::dangling` also is)
/// nor a key claimed by another thread (the address + 8) may match one.
#[test]
fn pointers_that_look_like_the_records_marks_are_refused() {
    let pool = Pool::default();
    let p = pool.acquire(64, false).unwrap();
    // SAFETY: acquired above, not used after (here and below).
    unsafe { pool.release(p) }.unwrap();
    // SAFETY: not a block of the pool: refused before anything is touched.
    let e = unsafe { pool.release(NonNull::dangling()) }.unwrap_err();
    assert_eq!(e.kind(), ErrorKind::UnknownPointer, "{e}");
    let q = pool.acquire(64, false).unwrap();
    assert_eq!(q, p, "the bin still holds the block, and nothing else");
    let addr = q.as_ptr() as usize;
    std::thread::scope(|s| {
        s.spawn(|| {
            let q = NonNull::new(addr as *mut u8).unwrap();
            // SAFETY: acquired above by the other thread, not used after.
            unsafe { pool.release(q) }.unwrap();
        });
    });
    let inner = NonNull::new((addr + 8) as *mut u8).unwrap();
    // SAFETY: inside a block, not its start: refused before anything is touched.
    let e = unsafe { pool.release(inner) }.unwrap_err();
    assert_eq!(e.kind(), ErrorKind::UnknownPointer, "{e}");
    let s = pool.stats();
    assert_eq!((s.acquires, s.releases, s.live_bytes), (2, 2, 0));
    let r = pool.acquire(64, false).unwrap();
    assert_eq!(r, p, "the claimed block was collected and reused");
    // SAFETY: as above.
    unsafe { pool.release(r) }.unwrap();
}
