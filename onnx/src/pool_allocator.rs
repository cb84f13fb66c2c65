//! ONNX Runtime's memory from graphsched's pool: an `OrtAllocator` whose blocks are the pool's.
//!
//! Registered in the environment (`RegisterAllocator`), it serves every session made with
//! `session.use_env_allocators`: a cluster's internal values and its kernels' scratch then come
//! from the same pool as graphsched's values, are given back when ONNX Runtime frees them, and
//! are reused by the next cluster and the next run, instead of growing an arena of ONNX
//! Runtime's own beside the pool. One memory manager for the process, counted in one place.

use graphsched::ffi::{
    gs_pool, gs_pool_acquire, gs_pool_free, gs_pool_get_stats, gs_pool_new, gs_pool_release, gs_pool_reset_peaks,
    gs_status,
};
use ort::sys::{OrtAllocator, OrtMemoryInfo};
use std::ffi::c_void;
use std::ptr;

/// Smallest block handed to ONNX Runtime: blocks of the pool's large tier (1 KiB and up) are
/// 64-byte aligned, as ONNX Runtime's own CPU allocator aligns for MLAS's vector kernels.
const MIN_BLOCK: usize = 1024;

/// A graphsched pool, owned: freed on drop (after the runtime that used it, see `Runtime`).
pub struct OwnedPool(*mut gs_pool);

impl OwnedPool {
    /// A pool with the default configuration.
    pub fn new() -> Result<OwnedPool, String> {
        let mut pool = ptr::null_mut();
        // SAFETY: NULL config means defaults; valid out pointer.
        let status = unsafe { gs_pool_new(ptr::null(), &mut pool) };
        crate::graph::gs_check(status, "gs_pool_new")?;
        Ok(OwnedPool(pool))
    }

    /// The handle, for runs and for the allocator.
    pub fn handle(&self) -> *mut gs_pool {
        self.0
    }
}

/// What `work` adds to `pool` at its peak: from the bytes live before it (held by others) to
/// the highest the pool's live bytes reach during it, the peak being reset first.
pub fn added_at_peak<T>(pool: *mut gs_pool, work: impl FnOnce() -> Result<T, String>) -> Result<u64, String> {
    let stats = || {
        let mut s = graphsched::PoolStats::default();
        // SAFETY: a live pool, a writable out pointer.
        let read = unsafe { gs_pool_get_stats(pool, &mut s) };
        crate::graph::gs_check(read, "gs_pool_get_stats").map(|_| s)
    };
    // SAFETY: a live pool.
    crate::graph::gs_check(unsafe { gs_pool_reset_peaks(pool) }, "gs_pool_reset_peaks")?;
    let before = stats()?.live_bytes;
    work()?;
    Ok(stats()?.peak_live_bytes.saturating_sub(before))
}

impl Drop for OwnedPool {
    fn drop(&mut self) {
        // SAFETY: made in `new`, freed once; its users (engine, runtime) are gone by then.
        unsafe { gs_pool_free(self.0) }
    }
}

/// The allocator ONNX Runtime calls: its table first, as ONNX Runtime reads it.
#[repr(C)]
pub struct PoolAllocator {
    table: OrtAllocator,
    pool: *mut gs_pool,
    info: *const OrtMemoryInfo,
}

impl PoolAllocator {
    /// An allocator over `pool` describing itself with `info` (the CPU's).
    pub fn new(pool: *mut gs_pool, info: *const OrtMemoryInfo) -> Box<PoolAllocator> {
        // SAFETY: `default` only fills the table with empty entries and the API version.
        let mut table = unsafe { OrtAllocator::default() };
        // Version 18: Alloc, Free, Info and Reserve; none of the later optional entries.
        table.version = 18;
        table.Alloc = Some(alloc);
        table.Free = Some(free);
        table.Info = Some(info_of);
        table.Reserve = Some(reserve);
        Box::new(PoolAllocator { table, pool, info })
    }

    /// The pointer `RegisterAllocator` takes.
    pub fn as_ort(&mut self) -> *mut OrtAllocator {
        &mut self.table
    }
}

/// # Safety
/// `this` is the table of a live `PoolAllocator` (ONNX Runtime passes back what was registered).
unsafe extern "system" fn alloc(this: *mut OrtAllocator, size: usize) -> *mut c_void {
    // SAFETY: the table is the first field of a live `PoolAllocator` (repr(C)).
    let a = unsafe { &*(this as *const PoolAllocator) };
    let mut p = ptr::null_mut();
    // SAFETY: a live pool (it outlives the runtime) and a valid out pointer.
    match unsafe { gs_pool_acquire(a.pool, size.max(MIN_BLOCK), &mut p) } {
        gs_status::GS_OK => p,
        _ => ptr::null_mut(),
    }
}

/// # Safety
/// As [`alloc`]; `p` is NULL or a block `alloc` returned, not freed since.
unsafe extern "system" fn free(this: *mut OrtAllocator, p: *mut c_void) {
    if p.is_null() {
        return;
    }
    // SAFETY: as in `alloc`.
    let a = unsafe { &*(this as *const PoolAllocator) };
    // SAFETY: a block of this pool, given back once (ONNX Runtime's contract).
    let _ = unsafe { gs_pool_release(a.pool, p) };
}

/// # Safety
/// As [`alloc`].
unsafe extern "system" fn info_of(this: *const OrtAllocator) -> *const OrtMemoryInfo {
    // SAFETY: as in `alloc`.
    unsafe { (*(this as *const PoolAllocator)).info }
}

/// # Safety
/// As [`alloc`].
unsafe extern "system" fn reserve(this: *const OrtAllocator, size: usize) -> *mut c_void {
    // SAFETY: as in `alloc`; the pool is thread-safe, so the shared pointer may allocate.
    unsafe { alloc(this as *mut OrtAllocator, size) }
}
