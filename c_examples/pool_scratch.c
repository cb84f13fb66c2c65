/*
 * pool_scratch: the pool on its own, as an engine's scratch memory (no graph involved).
 *
 * Blocks of 64 B .. 8 MiB are acquired, checked for 16-byte alignment, filled with a pattern
 * per block and verified all together (so overlapping blocks would show). Released blocks are
 * cached: acquiring the same sizes again is served without any system allocation. A zeroed
 * acquire clears a reused, dirty block; trim returns the cache to the system; a capped pool
 * keeps no more than its cap.
 */
#include <graphsched.h>
#include <stdint.h>
#include <string.h>

#include "check.h"

static const size_t sizes[] = {
    64, 64, 100, 255, 256, 257, 1000, 1000, 4096, 5000, 65536, 100000,
    1 << 20, (1 << 20) + 1, 3000000, 8 << 20, 8 << 20,
};
enum { NB = sizeof sizes / sizeof sizes[0] };

/* Distinct per block (37 is odd, so block * 37 differs mod 256 for every block here). */
static unsigned char pattern(size_t block, size_t i) {
    return (unsigned char)(block * 37 + i * 7 + (i >> 9));
}

static gs_pool_stats stats(const gs_pool *pool) {
    gs_pool_stats s;
    CHECK_OK(gs_pool_get_stats(pool, &s));
    return s;
}

static void acquire_all(gs_pool *pool, void **blocks) {
    for (size_t b = 0; b < NB; b++) {
        CHECK_OK(gs_pool_acquire(pool, sizes[b], &blocks[b]));
        CHECK(((uintptr_t)blocks[b] % GS_ALIGNMENT) == 0, "block %zu (%zu bytes) at %p is not %d-byte aligned",
              b, sizes[b], blocks[b], GS_ALIGNMENT);
    }
}

static void release_all(gs_pool *pool, void **blocks) {
    for (size_t b = 0; b < NB; b++) CHECK_OK(gs_pool_release(pool, blocks[b]));
}

int main(void) {
    gs_pool *pool;
    CHECK_OK(gs_pool_new(NULL, &pool));
    void *blocks[NB];
    size_t total = 0;
    for (size_t b = 0; b < NB; b++) total += sizes[b];

    /* Round 1: memory comes from the system (small blocks share pages, so not one commit per
     * block). Write every block, then verify every block. */
    acquire_all(pool, blocks);
    for (size_t b = 0; b < NB; b++)
        for (size_t i = 0; i < sizes[b]; i++) ((unsigned char *)blocks[b])[i] = pattern(b, i);
    for (size_t b = 0; b < NB; b++)
        for (size_t i = 0; i < sizes[b]; i++)
            CHECK(((unsigned char *)blocks[b])[i] == pattern(b, i), "block %zu byte %zu was overwritten", b, i);
    gs_pool_stats s = stats(pool);
    uint64_t round1_allocs = s.os_allocs;
    CHECK(s.acquires == NB && s.os_allocs >= 1 && s.os_allocs <= NB && s.cache_hits == NB - s.os_allocs,
          "round 1: %llu acquires, %llu os_allocs, %llu hits",
          (unsigned long long)s.acquires, (unsigned long long)s.os_allocs, (unsigned long long)s.cache_hits);
    CHECK(s.live_bytes == total && s.reserved_bytes >= total && s.os_alloc_bytes == s.reserved_bytes,
          "round 1: live %llu (expected %zu), reserved %llu", (unsigned long long)s.live_bytes, total,
          (unsigned long long)s.reserved_bytes);
    printf("round 1: %d blocks, %zu bytes asked, %llu bytes reserved from the system\n", NB, total,
           (unsigned long long)s.reserved_bytes);

    release_all(pool, blocks);
    s = stats(pool);
    CHECK(s.live_bytes == 0 && s.releases == NB, "after release: live %llu, %llu releases",
          (unsigned long long)s.live_bytes, (unsigned long long)s.releases);
    CHECK(s.reserved_bytes == s.os_alloc_bytes, "released blocks should stay cached");

    /* Round 2: the same sizes are all served from the cache. */
    acquire_all(pool, blocks);
    s = stats(pool);
    CHECK(s.cache_hits == 2 * NB - round1_allocs && s.os_allocs == round1_allocs,
          "round 2: %llu cache hits, %llu os_allocs (expected no new ones)", (unsigned long long)s.cache_hits,
          (unsigned long long)s.os_allocs);
    printf("round 2: %llu cache hits, no new system allocation\n", (unsigned long long)s.cache_hits);
    release_all(pool, blocks);

    /* Every cached block is dirty now; a zeroed acquire must still return zeros. */
    void *dirty, *clean;
    CHECK_OK(gs_pool_acquire(pool, 4096, &dirty));
    memset(dirty, 0xAB, 4096);
    CHECK_OK(gs_pool_release(pool, dirty));
    uint64_t hits = stats(pool).cache_hits;
    CHECK_OK(gs_pool_acquire_zeroed(pool, 4096, &clean));
    CHECK(stats(pool).cache_hits == hits + 1, "the zeroed acquire should reuse a cached block");
    const unsigned char *bytes = (const unsigned char *)clean;
    for (size_t i = 0; i < 4096; i++) CHECK(bytes[i] == 0, "zeroed block has byte %zu = %#x", i, bytes[i]);
    printf("zeroed acquire: reused a dirty block%s, all 4096 bytes are 0\n",
           clean == dirty ? " (the very same one)" : "");
    CHECK_OK(gs_pool_release(pool, clean));

    /* Peaks restart from the current level. */
    CHECK_OK(gs_pool_reset_peaks(pool));
    CHECK(stats(pool).peak_live_bytes == 0, "peak_live_bytes after reset");
    CHECK_OK(gs_pool_acquire(pool, 1000, &blocks[0]));
    CHECK_OK(gs_pool_release(pool, blocks[0]));
    CHECK(stats(pool).peak_live_bytes == 1000, "peak_live_bytes %llu, expected 1000",
          (unsigned long long)stats(pool).peak_live_bytes);

    /* Trim gives every cached byte back. */
    CHECK_OK(gs_pool_trim(pool));
    s = stats(pool);
    CHECK(s.reserved_bytes == 0 && s.os_free_bytes == s.os_alloc_bytes,
          "after trim: reserved %llu, %llu of %llu bytes given back", (unsigned long long)s.reserved_bytes,
          (unsigned long long)s.os_free_bytes, (unsigned long long)s.os_alloc_bytes);
    printf("trim: reserved_bytes 0, all %llu committed bytes given back\n", (unsigned long long)s.os_alloc_bytes);
    gs_pool_free(pool);

    /* A capped pool sends releases past its cap back to the system. */
    gs_pool_config cfg = {.max_pool_bytes = 1 << 20};
    CHECK_OK(gs_pool_new(&cfg, &pool));
    for (int i = 0; i < 4; i++) CHECK_OK(gs_pool_acquire(pool, 1 << 20, &blocks[i]));
    for (int i = 0; i < 4; i++) CHECK_OK(gs_pool_release(pool, blocks[i]));
    s = stats(pool);
    CHECK(s.reserved_bytes <= cfg.max_pool_bytes && s.os_frees >= 1, "capped pool: reserved %llu, %llu os_frees",
          (unsigned long long)s.reserved_bytes, (unsigned long long)s.os_frees);
    printf("capped pool (1 MiB): %llu bytes kept after releasing 4 MiB\n", (unsigned long long)s.reserved_bytes);
    gs_pool_free(pool);

    printf("pool_scratch: OK\n");
    return 0;
}
