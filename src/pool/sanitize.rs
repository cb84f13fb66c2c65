//! Telling AddressSanitizer and valgrind memcheck which pool bytes a program may touch.
//!
//! Buffers are carved from the pool's own mmap regions, so neither tool knows where a buffer ends
//! or when it is released: a kernel that reads a buffer after the run gave it back, or writes past
//! its output, goes unseen. Allocators that care (mimalloc, jemalloc) tell the tools through their
//! interfaces, and so does this module.
//!
//! **Detection, at run time.** The first `Pool::new` of the process looks once, and caches:
//! - ASan: its runtime is in the process (an engine built with `-fsanitize=address`, linking the
//!   static or the shared library) when `dlsym` finds `__asan_poison_memory_region` and
//!   `__asan_unpoison_memory_region`;
//! - memcheck: the `RUNNING_ON_VALGRIND` client request says so. Client requests are the magic
//!   instruction sequence of valgrind.h (x86_64 here, with `asm!`): a no-op on a real CPU, a call
//!   into valgrind under it. On other architectures there are none and valgrind counts as absent.
//!
//! No build flag, so the one library serves plain and checked builds of an engine. When no tool is
//! there, every hook below is one load of a cached flag (a plain load on x86_64) and a branch that
//! always goes the same way: no call, no system call, no client request.
//!
//! **The model** (the same for both tools; "hidden" = ASan poisoned, memcheck NOACCESS):
//! - when the arena carves a block out of a region (a large block, or a 16 KiB+ slab chunk), the
//!   whole block is hidden. Memory never carved is left alone: nothing handed out points there,
//!   and hiding 1 GiB regions up front would cost 128 MiB of ASan shadow each;
//! - a block handed out is revealed for exactly its requested `nbytes` (ASan to the byte; memcheck
//!   sees `MEMPOOL_ALLOC` of `nbytes`, undefined until written). The slack of its size class or
//!   64-byte grain stays hidden, so a write one byte past an output is reported;
//! - a released block is retired (`MEMPOOL_FREE`) and hidden whole *before* it goes back to the
//!   free lists: once there another thread may hand it out and reveal it again;
//! - red zones (`red_zones = 1`) stay hidden while their block is live, so the tool reports an
//!   overrun at the faulty instruction. The pool reveals them only to write the guard pattern; it
//!   compares them while they stay hidden, with memcheck's error reporting off for its thread for
//!   that moment (ASan does not see those loads: this code is not instrumented, and a loop of
//!   loads is no intercepted call);
//! - blocks the executor parks in its per-thread caches (released by the run, still live in the
//!   pool) are hidden and revealed by the executor itself, with [`hide`] and [`reveal`];
//! - a dropped pool destroys its mempool; an unmapped region is unpoisoned up to the highest byte
//!   ever carved, since ASan's shadow outlives the mapping and anyone may map those addresses next.
//!
//! The pool's own writes into its memory (guards, zeroing, the 0xDD fill of a released red-zoned
//! block) go through `memset`, which ASan intercepts and checks: each happens while its bytes are
//! revealed (see `Pool::hand_out` and `Pool::unguard`).

use std::ffi::c_void;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::OnceLock;

/// `void __asan_(un)poison_memory_region(void const volatile *addr, size_t size)`.
type AsanFn = unsafe extern "C" fn(*const c_void, usize);

#[derive(Clone, Copy)]
struct Asan {
    poison: AsanFn,
    unpoison: AsanFn,
}

struct Tools {
    asan: Option<Asan>,
    valgrind: bool,
}

static TOOLS: OnceLock<Tools> = OnceLock::new();
/// Whether any tool is there: the flag every hook tests first. Every store writes the one
/// detection result, so it changes at most once, from false to true. Set after `TOOLS`
/// (Release), so a hook that sees it set (Acquire) finds `TOOLS` filled in.
static ACTIVE: AtomicBool = AtomicBool::new(false);

/// A pool's handle for memcheck: the address of a byte of its own, so it differs from every other
/// live mempool in the process (memcheck aborts on a duplicate). 0 without valgrind.
#[derive(Clone, Copy, Debug)]
pub(super) struct Mempool(usize);

fn detect() -> Tools {
    let lookup = |name: &std::ffi::CStr| {
        // SAFETY: dlsym with RTLD_DEFAULT and a NUL-terminated name only looks the symbol up.
        let sym = unsafe { libc::dlsym(libc::RTLD_DEFAULT, name.as_ptr()) };
        // SAFETY: when present, these are the ASan runtime's functions with the signature of
        // `AsanFn` (sanitizer/asan_interface.h).
        (!sym.is_null()).then(|| unsafe { std::mem::transmute::<*mut c_void, AsanFn>(sym) })
    };
    let asan = match (
        lookup(c"__asan_poison_memory_region"),
        lookup(c"__asan_unpoison_memory_region"),
    ) {
        (Some(poison), Some(unpoison)) => Some(Asan { poison, unpoison }),
        _ => None,
    };
    Tools {
        asan,
        valgrind: running_on_valgrind(),
    }
}

#[inline]
fn tools() -> Option<&'static Tools> {
    if !ACTIVE.load(Ordering::Acquire) {
        return None;
    }
    TOOLS.get()
}

/// Whether a tool is watching (after the first `Pool::new`): for callers that have work to do only
/// then.
#[inline]
pub(super) fn active() -> bool {
    ACTIVE.load(Ordering::Acquire)
}

/// Detects the tools (once per process) and makes a mempool for a new pool.
pub(super) fn new_mempool() -> Mempool {
    let t = TOOLS.get_or_init(detect);
    ACTIVE.store(t.asan.is_some() || t.valgrind, Ordering::Release);
    if !t.valgrind {
        return Mempool(0);
    }
    let anchor = Box::into_raw(Box::new(0u8)) as usize;
    // No red zones of memcheck's own (the pool lays its own), and blocks are not zeroed.
    vg::request(vg::CREATE_MEMPOOL, anchor, 0, 0);
    Mempool(anchor)
}

/// Forgets every block of a pool being dropped.
pub(super) fn destroy_mempool(pool: Mempool) {
    if pool.0 == 0 {
        return;
    }
    vg::request(vg::DESTROY_MEMPOOL, pool.0, 0, 0);
    // SAFETY: made by `Box::into_raw` in `new_mempool`, and this is the pool's last use of it.
    drop(unsafe { Box::from_raw(pool.0 as *mut u8) });
}

/// The program must not touch `nbytes` at `ptr` (pool memory): carved but not handed out,
/// released, red zones, or parked in an executor's block cache. Changes no byte.
#[inline]
pub(crate) fn hide(ptr: *const u8, nbytes: usize) {
    if active() {
        hide_watched(ptr, nbytes);
    }
}

/// The hooks' work when a tool watches, out of line: inline, each hook is the flag's load.
#[cold]
#[inline(never)]
fn hide_watched(ptr: *const u8, nbytes: usize) {
    let Some(t) = tools() else { return };
    if let Some(a) = t.asan {
        // SAFETY: the ASan runtime's function; it only writes shadow memory for the range.
        unsafe { (a.poison)(ptr.cast(), nbytes) };
    }
    if t.valgrind {
        vg::request(vg::MAKE_MEM_NOACCESS, ptr as usize, nbytes, 0);
    }
}

/// The program may use `nbytes` at `ptr` (pool memory) again, as uninitialised memory: a cached
/// block handed to a node, or bytes the pool is about to write itself. Changes no byte.
#[inline]
pub(crate) fn reveal(ptr: *const u8, nbytes: usize) {
    if active() {
        reveal_watched(ptr, nbytes);
    }
}

#[cold]
#[inline(never)]
fn reveal_watched(ptr: *const u8, nbytes: usize) {
    let Some(t) = tools() else { return };
    if let Some(a) = t.asan {
        // SAFETY: the ASan runtime's function; it only writes shadow memory for the range.
        unsafe { (a.unpoison)(ptr.cast(), nbytes) };
    }
    if t.valgrind {
        vg::request(vg::MAKE_MEM_UNDEFINED, ptr as usize, nbytes, 0);
    }
}

/// A block of `nbytes` at `ptr` is handed out (it was hidden).
#[inline]
pub(super) fn announce(pool: Mempool, ptr: *const u8, nbytes: usize) {
    if active() {
        announce_watched(pool, ptr, nbytes);
    }
}

#[cold]
#[inline(never)]
fn announce_watched(pool: Mempool, ptr: *const u8, nbytes: usize) {
    let Some(t) = tools() else { return };
    if let Some(a) = t.asan {
        // SAFETY: the ASan runtime's function; it only writes shadow memory for the range.
        unsafe { (a.unpoison)(ptr.cast(), nbytes) };
    }
    if t.valgrind {
        vg::request(vg::MEMPOOL_ALLOC, pool.0, ptr as usize, nbytes);
    }
}

/// The block announced at `ptr` is released; the caller hides its bytes next.
#[inline]
pub(super) fn retire(pool: Mempool, ptr: *const u8) {
    if active() {
        retire_watched(pool, ptr);
    }
}

#[cold]
#[inline(never)]
fn retire_watched(pool: Mempool, ptr: *const u8) {
    if tools().is_some_and(|t| t.valgrind) {
        vg::request(vg::MEMPOOL_FREE, pool.0, ptr as usize, 0);
    }
}

/// Runs `read`, the pool reading its own hidden bytes (red zones), without memcheck reporting it:
/// error reporting is off for this thread meanwhile (memcheck gives such loads defined values).
/// The bytes stay hidden throughout, so a kernel on another thread that overruns into them is
/// still reported; marking them readable for the moment instead would race with a second reader.
pub(super) fn quietly<R>(read: impl FnOnce() -> R) -> R {
    let vg = tools().is_some_and(|t| t.valgrind);
    if vg {
        vg::request(vg::CHANGE_ERR_DISABLEMENT, 1, 0, 0);
    }
    let r = read();
    if vg {
        vg::request(vg::CHANGE_ERR_DISABLEMENT, usize::MAX, 0, 0); // -1: enable again
    }
    r
}

/// A region is being unmapped: its ASan shadow up to `nbytes` goes back to "addressable", as for
/// memory nobody manages (memcheck does this itself on munmap).
pub(super) fn forget(ptr: *const u8, nbytes: usize) {
    if let Some(a) = tools().and_then(|t| t.asan) {
        // SAFETY: the ASan runtime's function; it only writes shadow memory for the range.
        unsafe { (a.unpoison)(ptr.cast(), nbytes) };
    }
}

/// Whether the process runs under valgrind (any tool).
fn running_on_valgrind() -> bool {
    vg::request_or(0, vg::RUNNING_ON_VALGRIND, 0, 0, 0) != 0
}

/// Whether ASan's runtime was found.
#[cfg(test)]
fn asan_present() -> bool {
    TOOLS.get_or_init(detect).asan.is_some()
}

/// Valgrind client requests: the codes of valgrind.h and memcheck.h (valgrind 3.19, whose ABI
/// keeps them fixed), and the magic sequence.
mod vg {
    pub(super) const RUNNING_ON_VALGRIND: usize = 0x1001;
    pub(super) const CREATE_MEMPOOL: usize = 0x1303;
    pub(super) const DESTROY_MEMPOOL: usize = 0x1304;
    pub(super) const MEMPOOL_ALLOC: usize = 0x1305;
    pub(super) const MEMPOOL_FREE: usize = 0x1306;
    pub(super) const CHANGE_ERR_DISABLEMENT: usize = 0x1801;
    /// VG_USERREQ_TOOL_BASE('M','C') and the memcheck requests after it.
    const MC: usize = ((b'M' as usize) << 24) | ((b'C' as usize) << 16);
    pub(super) const MAKE_MEM_NOACCESS: usize = MC;
    pub(super) const MAKE_MEM_UNDEFINED: usize = MC + 1;
    #[cfg(test)]
    pub(super) const GET_VBITS: usize = MC + 8;

    /// A request whose answer does not matter.
    pub(super) fn request(code: usize, a1: usize, a2: usize, a3: usize) {
        request_or(0, code, a1, a2, a3);
    }

    /// VALGRIND_DO_CLIENT_REQUEST_EXPR: `default` when not under valgrind.
    #[cfg(target_arch = "x86_64")]
    pub(super) fn request_or(default: usize, code: usize, a1: usize, a2: usize, a3: usize) -> usize {
        let args: [usize; 6] = [code, a1, a2, a3, 0, 0];
        let result;
        // SAFETY: on a real CPU the four rotations of rdi add up to 128 bits (rdi unchanged) and
        // `xchg rbx, rbx` changes nothing; under valgrind the sequence makes valgrind read the six
        // words at rax and put its answer in rdx. Flags are clobbered (the default).
        unsafe {
            std::arch::asm!(
                "rol rdi, 3",
                "rol rdi, 13",
                "rol rdi, 61",
                "rol rdi, 51",
                "xchg rbx, rbx",
                in("rax") args.as_ptr(),
                inout("rdx") default => result,
                out("rdi") _,
                options(nostack),
            );
        }
        result
    }

    #[cfg(not(target_arch = "x86_64"))]
    pub(super) fn request_or(default: usize, _: usize, _: usize, _: usize, _: usize) -> usize {
        default
    }
}

#[cfg(test)]
mod tests {
    use super::super::{Pool, PoolConfig};
    use super::*;

    /// Whether any of `nbytes` at `ptr` is hidden; None when no tool can tell.
    fn hidden(ptr: *const u8, nbytes: usize) -> Option<bool> {
        if asan_present() {
            // SAFETY: dlsym with a NUL-terminated name only looks the symbol up.
            let f = unsafe { libc::dlsym(libc::RTLD_DEFAULT, c"__asan_region_is_poisoned".as_ptr()) };
            // SAFETY: `void *__asan_region_is_poisoned(void *beg, size_t size)` of the runtime.
            let f: unsafe extern "C" fn(*const u8, usize) -> *const u8 = unsafe { std::mem::transmute(f) };
            // SAFETY: reads shadow memory only.
            return Some(!unsafe { f(ptr, nbytes) }.is_null());
        }
        if running_on_valgrind() {
            let mut vbits = vec![0u8; nbytes];
            // 3: part of the range is not addressable (memcheck reports nothing for this request).
            let r = vg::request_or(0, vg::GET_VBITS, ptr as usize, vbits.as_mut_ptr() as usize, nbytes);
            return Some(r == 3);
        }
        None
    }

    #[test]
    fn detection_finds_what_the_process_has() {
        let _pool = Pool::default();
        // A plain `cargo test` has no ASan runtime; valgrind preloads its vgpreload libraries.
        let under_valgrind = std::env::var("LD_PRELOAD").is_ok_and(|p| p.contains("vgpreload"));
        assert_eq!(running_on_valgrind(), under_valgrind);
        let asan = std::env::var("LD_PRELOAD").is_ok_and(|p| p.contains("libasan"));
        assert_eq!(asan_present(), asan);
        assert_eq!(active(), asan || under_valgrind);
    }

    #[test]
    fn hooks_change_no_byte() {
        let pool = Pool::default();
        for n in [100, 1000, 5000] {
            let p = pool.acquire(n, true).unwrap().as_ptr();
            // SAFETY: a block of `n` bytes, this test's alone.
            unsafe { p.write_bytes(0x5A, n) };
            hide(p, n);
            reveal(p, n);
            // Revealed bytes are undefined to memcheck: the test reads them quietly.
            let same = quietly(|| {
                // SAFETY: `n` bytes of the block, revealed.
                unsafe { std::slice::from_raw_parts(p, n) }.iter().all(|&b| b == 0x5A)
            });
            assert!(same);
            // SAFETY: acquired above, not used after.
            unsafe { pool.release(std::ptr::NonNull::new(p).unwrap()) }.unwrap();
        }
    }

    /// Checks the model when run under a tool (e.g. `valgrind target/debug/deps/graphsched-*
    /// sanitize`, or with `LD_PRELOAD=libasan.so.8`); without one it checks that the pool, red
    /// zones on and off, works as ever.
    #[test]
    fn handed_out_bytes_are_exactly_the_visible_ones() {
        for red_zones in [0, 1] {
            let pool = Pool::new(PoolConfig {
                red_zones,
                ..Default::default()
            })
            .unwrap();
            for n in [100, 1000, 5000] {
                let p = pool.acquire(n, false).unwrap();
                let a = p.as_ptr();
                // SAFETY: a block of `n` bytes, this test's alone.
                unsafe { a.write_bytes(1, n) };
                // SAFETY: a live block of `n` bytes from this pool.
                assert!(unsafe { pool.guards_intact(p, n) });
                if let Some(past) = hidden(a.wrapping_add(n), 1) {
                    assert!(past, "the byte past {n} is hidden");
                    assert_eq!(hidden(a, n), Some(false), "all {n} bytes are visible");
                }
                // SAFETY: acquired above; only its address is used after.
                unsafe { pool.release(p) }.unwrap();
                assert_ne!(hidden(a, 1), Some(false), "a released block is hidden");
            }
            let mut many = Vec::new();
            pool.acquire_many(48, 3, crate::pool::Owner::Caller, false, &mut many)
                .unwrap();
            for &p in &many {
                assert_ne!(hidden(p.as_ptr(), 48), Some(true));
            }
            // SAFETY: acquired above, not used after.
            unsafe { pool.release_many(many, crate::pool::Owner::Caller, false) }.unwrap();
        }
    }
}
