//! The pool under threads: blocks handed out at the same time never overlap, whatever the sizes.

use std::sync::Arc;

use graphsched::{Pool, PoolConfig};

/// Each thread fills its blocks with a tag of its own and checks the tag before releasing: a
/// block handed to two owners at once gets overwritten by the other and fails the check.
fn stress(pool: Arc<Pool>, threads: usize, ops: usize) {
    std::thread::scope(|s| {
        for t in 0..threads {
            let pool = pool.clone();
            s.spawn(move || {
                let mut x = 0x9E37_79B9_7F4A_7C15u64 ^ t as u64;
                let mut held: Vec<(std::ptr::NonNull<u8>, usize, u8)> = Vec::new();
                for i in 0..ops {
                    x ^= x << 13;
                    x ^= x >> 7;
                    x ^= x << 17;
                    if held.len() < 16 && (x % 3 != 0 || held.is_empty()) {
                        // Sizes from 1 byte to 1 MiB, log-uniform.
                        let size = 1 + (x >> 20) as usize % (1usize << (x % 21));
                        let p = pool.acquire(size, false).unwrap();
                        assert_eq!(p.as_ptr() as usize % 16, 0);
                        let tag = (t * 31 + i) as u8;
                        // SAFETY: the block holds `size` bytes and is ours.
                        unsafe { p.as_ptr().write_bytes(tag, size) };
                        held.push((p, size, tag));
                    } else {
                        let (p, size, tag) = held.swap_remove(x as usize % held.len());
                        // SAFETY: still ours until released below.
                        let bytes = unsafe { std::slice::from_raw_parts(p.as_ptr(), size) };
                        assert!(
                            bytes.iter().all(|&b| b == tag),
                            "thread {t}: a held block was overwritten"
                        );
                        // SAFETY: acquired by this thread, not used after.
                        unsafe { pool.release(p) }.unwrap();
                    }
                }
                for (p, _, _) in held {
                    // SAFETY: as above.
                    unsafe { pool.release(p) }.unwrap();
                }
            });
        }
    });
    let s = pool.stats();
    assert_eq!(s.live_bytes, 0);
    assert_eq!(s.acquires, s.releases);
}

#[test]
fn concurrent_acquire_and_release_never_share_a_block() {
    stress(Arc::new(Pool::default()), 4, 3000);
}

#[test]
fn concurrent_use_under_a_cap_and_small_regions() {
    let pool = Pool::new(PoolConfig {
        max_pool_bytes: 4 << 20,
        large_threshold_bytes: 4096,
        region_bytes: 8 << 20,
        red_zones: 0,
    })
    .unwrap();
    let pool = Arc::new(pool);
    stress(pool.clone(), 4, 3000);
    assert!(pool.stats().reserved_bytes <= 4 << 20);
    pool.trim();
    assert_eq!(pool.stats().reserved_bytes, 0);
}

#[test]
fn concurrent_use_with_red_zones() {
    let pool = Arc::new(
        Pool::new(PoolConfig {
            red_zones: 1,
            ..Default::default()
        })
        .unwrap(),
    );
    stress(pool, 4, 2000);
}
