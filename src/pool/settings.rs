//! What a caller sets on a pool and reads back from it.

/// Pool settings; zero fields take their defaults (C: `gs_pool_config`).
#[repr(C)]
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct PoolConfig {
    /// Most bytes the pool keeps committed (live plus cached); past it, released memory goes
    /// back to the system. 0: no cap.
    pub max_pool_bytes: u64,
    /// Requests of at least this many bytes take best-fit blocks of the arena; smaller ones come
    /// from size-class slabs. 0: 1024. At most 65536.
    pub large_threshold_bytes: u64,
    /// Address space each region reserves (committed only when touched). 0: 1 GiB.
    pub region_bytes: u64,
    /// Non-zero: debug red zones. Every block gets 64 guard bytes before and after it, checked
    /// when it is released (and by runs after each kernel), and is filled with a poison pattern
    /// when released. Costs 128 bytes and two fills per block.
    pub red_zones: u32,
}

/// Counters since the pool was made; peaks since the last reset (C: `gs_pool_stats`).
#[repr(C)]
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct PoolStats {
    /// Bytes callers asked for and still hold.
    pub live_bytes: u64,
    /// Highest `live_bytes` since the pool was made or its peaks were last reset.
    pub peak_live_bytes: u64,
    /// Bytes of memory the pool holds from the system (committed pages): live blocks, cached
    /// free memory and slack.
    pub reserved_bytes: u64,
    /// Highest `reserved_bytes` since the pool was made or its peaks were last reset.
    pub peak_reserved_bytes: u64,
    /// Times the pool took memory from the system (mapped a region's pages in).
    pub os_allocs: u64,
    /// Bytes taken from the system over those `os_allocs`.
    pub os_alloc_bytes: u64,
    /// Times the pool gave memory back (decommitted pages, unmapped regions).
    pub os_frees: u64,
    /// Bytes given back over those `os_frees`.
    pub os_free_bytes: u64,
    /// Successful acquires, a run's buffers included.
    pub acquires: u64,
    /// Acquires served entirely from memory the pool already held.
    pub cache_hits: u64,
    /// Blocks given back, a run's buffers included.
    pub releases: u64,
}
