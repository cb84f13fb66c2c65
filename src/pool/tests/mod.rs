//! Unit tests of the pool.
use super::*;

#[test]
fn reuses_released_blocks_and_counts() {
    let pool = Pool::default();
    let a = pool.acquire(100_000, false).unwrap();
    assert_eq!(a.as_ptr() as usize % 64, 0);
    // SAFETY: a block of this test, not used after its release.
    unsafe { pool.release(a) }.unwrap();
    let b = pool.acquire(90_000, true).unwrap();
    assert_eq!(a, b, "a smaller request reuses the freed block");
    let s = pool.stats();
    assert_eq!((s.acquires, s.cache_hits, s.live_bytes), (2, 1, 90_000));
    // SAFETY: not a block of the pool: refused before anything is touched.
    let dangling = unsafe { pool.release(NonNull::dangling()) };
    assert_eq!(dangling.unwrap_err().kind(), ErrorKind::UnknownPointer);
    // SAFETY: a block of this test, not used after its release.
    unsafe { pool.release(b) }.unwrap();
    // SAFETY: released already: refused before anything is touched.
    let again = unsafe { pool.release(b) };
    assert_eq!(again.unwrap_err().kind(), ErrorKind::UnknownPointer);
    pool.trim();
    assert_eq!(pool.stats().reserved_bytes, 0);
}

#[test]
fn the_largest_requests_are_refused_not_rounded_past_the_limit() {
    let pool = Pool::default();
    assert_eq!(
        pool.acquire((7 << 60) + 1, false).unwrap_err().kind(),
        ErrorKind::OutOfMemory
    );
    assert_eq!(
        pool.acquire(usize::MAX - 10, false).unwrap_err().kind(),
        ErrorKind::SizeOverflow
    );
    assert_eq!(pool.acquire(1 << 62, false).unwrap_err().kind(), ErrorKind::OutOfMemory);
    assert_eq!(pool.acquire(0, false).unwrap_err().kind(), ErrorKind::InvalidArgument);
    let s = pool.stats();
    assert_eq!((s.live_bytes, s.acquires), (0, 0));
}

#[test]
fn the_cap_holds_after_every_release() {
    let cap = 1 << 20;
    let pool = Pool::new(PoolConfig {
        max_pool_bytes: cap,
        ..Default::default()
    })
    .unwrap();
    let blocks: Vec<_> = (0..8)
        .map(|i| pool.acquire(300_000 + i * 1000, false).unwrap())
        .collect();
    assert!(pool.stats().reserved_bytes > cap, "live memory may exceed the cap");
    for b in blocks {
        // SAFETY: acquired above, not used after.
        unsafe { pool.release(b) }.unwrap();
        assert!(pool.stats().reserved_bytes <= cap.max(pool.stats().live_bytes + (1 << 16)));
    }
    assert!(pool.stats().reserved_bytes <= cap);
    assert!(pool.stats().os_frees > 0);
}

#[test]
fn bad_configurations_are_refused() {
    let e = Pool::new(PoolConfig {
        large_threshold_bytes: 1 << 20,
        ..Default::default()
    })
    .err()
    .unwrap();
    assert_eq!(e.kind(), ErrorKind::InvalidArgument);
    assert!(e.message().contains("large_threshold_bytes"));
}

#[test]
fn a_block_written_past_its_end_is_reported_as_an_overrun_and_still_goes_back() {
    let pool = Pool::new(PoolConfig {
        red_zones: 1,
        ..Default::default()
    })
    .unwrap();
    let p = pool.acquire(100, false).unwrap();
    let q = pool.acquire(100, false).unwrap();
    // SAFETY: writes one byte into the red zone just past the block, which the pool owns and
    // hides from the memory checkers; revealed first so a checker does not stop the test.
    unsafe {
        sanitize::reveal(p.as_ptr().add(100), 1);
        p.as_ptr().add(100).write(0xAB);
    }
    // SAFETY: blocks of this test, not used after their release.
    let damaged = unsafe { pool.release(p) }.unwrap_err();
    assert_eq!(damaged.kind(), ErrorKind::BufferOverrun, "{damaged}");
    assert!(damaged.message().contains("100-byte block"), "{damaged}");
    // SAFETY: as above.
    unsafe { pool.release(q) }.unwrap();
    assert_eq!(pool.stats().live_bytes, 0, "the damaged block went back too");
}

#[test]
fn reserved_bytes_without_the_lock_follow_the_stats() {
    let pool = Pool::default();
    assert_eq!(pool.reserved_bytes(), 0);
    let big = pool.acquire(1 << 20, false).unwrap();
    let small = pool.acquire(100, false).unwrap();
    assert!(pool.reserved_bytes() >= (1 << 20) + 100);
    assert_eq!(pool.reserved_bytes(), pool.stats().reserved_bytes);
    assert_eq!(pool.os_allocs(), pool.stats().os_allocs);
    assert!(pool.os_allocs() >= 2);
    // SAFETY: blocks of this test, not used after their release.
    unsafe {
        pool.release(big).unwrap();
        pool.release(small).unwrap();
    }
    pool.trim();
    assert_eq!(pool.reserved_bytes(), 0);
}

mod heaps;
