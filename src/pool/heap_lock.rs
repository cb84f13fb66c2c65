//! A heap's lock, biased towards the thread that owns the heap.
//!
//! **Why.** The owner takes its heap's lock on every `acquire` and every `release`: two per
//! pair. A lock taken with an atomic swap costs a locked instruction each time, 3 ns on one
//! machine and 8-11 ns on another, whatever the line's state: on the second, two of them were
//! over half of a cached pair. Other threads reach a heap rarely: to release a block it handed
//! out, to drain it when the pool settles or trims, to read its counts.
//!
//! **The model** (an asymmetric Dekker lock, as userspace RCU and hazard-pointer libraries
//! use). The owner announces itself with a plain store (`owner_in`) and then reads whether a
//! visitor holds the heap; a visitor takes `visitor` (a swap: visitors exclude one another),
//! then makes every thread of the process pass a full memory barrier (`membarrier(2)`,
//! `MEMBARRIER_CMD_PRIVATE_EXPEDITED`), then waits until the owner is out. The barrier stands in
//! for the fence the owner's side leaves out, between its store and its load: once it has
//! returned, either the owner's `owner_in = true` is visible to the visitor (which waits), or
//! the owner's read of `visitor` comes after the barrier and sees it set (the owner steps out
//! and waits). So at most one of them is inside. The owner's path has no locked instruction;
//! a visit costs a system call (0.3 us with the other threads asleep, 3 us with them running,
//! on a 2-vCPU virtual machine), and a visit of many heaps pays it once (`visit_all`).
//!
//! **The bias comes and goes.** Without it the lock is an ordinary spin lock: the owner takes
//! `visitor` too, with a swap, as every other thread does, and visits pay no barrier. A heap
//! visited often (another thread releases its blocks one by one, or reads the pool's counts in
//! a loop) would pay a barrier per visit, 0.4 us more than the spin lock's swap, for 10 ns saved
//! per owner call: so every `WINDOW` of its calls the owner reconsiders, and turns the bias
//! off after a busy window and on again after quiet ones. Only the owner switches, while it
//! holds `visitor`: no visitor is inside then, and visitors read the mode once they hold it.
//! A thread that exits turns its heaps' bias off (nobody is there to reconsider it).
//!
//! Where the barrier is not to be had (not Linux, an old kernel, a sandbox that refuses the
//! call, valgrind), every heap keeps the spin lock. The choice is made once for the process;
//! the environment variable `GS_POOL_UNBIASED_HEAPS` (any value) makes it the spin lock, to
//! compare the two.
//!
//! Which thread is the owner is the caller's business (`heaps.rs`): one thread at a time, the
//! one whose heap it is (`Heap::owned`, the thread's `LAST`), hands it to the next only when it
//! exits.

use std::sync::atomic::{compiler_fence, AtomicBool, AtomicU32, Ordering};
use std::sync::OnceLock;

/// Every `WINDOW` of its owner's counted calls (acquires), a heap reconsiders its bias. A window with
/// `WINDOW_VISITS` visits or more turns it off: a visit costs a barrier (0.3-3 us) where the
/// bias saves the owner about 10 ns a call, so past one visit in about 100 calls the bias loses.
/// It comes back on after quiet windows in a row (fewer than `WINDOW_VISITS` visits each): 2 the
/// first time, twice as many each time after, up to `MAX_QUIET`. So a thread whose blocks another
/// releases in batches, between its own batches of calls, settles on the spin lock.
const WINDOW: u32 = 1024;
const WINDOW_VISITS: u32 = 8;
const MAX_QUIET: u32 = 64;

pub(super) struct HeapLock {
    /// The owner is inside, under the bias: written by the owner alone, with plain stores.
    owner_in: AtomicBool,
    /// Held by a visitor; without the bias, by whoever holds the lock.
    visitor: AtomicBool,
    /// The bias is on. Changed only by the owner while it holds `visitor` (so while no visitor
    /// is inside or deciding how to wait), and read by visitors once they hold `visitor`.
    biased: AtomicBool,
    /// The process has the barrier (from [`barrier_available`] when the heap is made).
    can_bias: bool,
    /// Visits so far: written by visitors while they hold `visitor`, read by the owner inside.
    visits: AtomicU32,
    /// The owner's alone: its calls in this window, `visits` when it began, the quiet windows
    /// in a row, and how many turn the bias back on.
    calls: AtomicU32,
    window_start: AtomicU32,
    quiet: AtomicU32,
    quiet_needed: AtomicU32,
}

impl HeapLock {
    pub(super) fn new() -> HeapLock {
        HeapLock::with_bias(barrier_available())
    }

    /// A lock that may be biased to its owner (`can_bias`: the process has the barrier), and
    /// starts so; or a spin lock for good.
    fn with_bias(can_bias: bool) -> HeapLock {
        HeapLock {
            owner_in: AtomicBool::new(false),
            visitor: AtomicBool::new(false),
            biased: AtomicBool::new(can_bias),
            can_bias,
            visits: AtomicU32::new(0),
            calls: AtomicU32::new(0),
            window_start: AtomicU32::new(0),
            quiet: AtomicU32::new(0),
            quiet_needed: AtomicU32::new(1),
        }
    }

    /// Takes the lock as the heap's owner (the calling thread owns the heap). Calls with
    /// `count` make the windows in which the owner reconsiders its bias: its acquires (every
    /// pair has one; a release need not pay for the count).
    #[inline]
    pub(super) fn enter_owned(&self, count: bool) {
        // Relaxed: only the owner changes it, and this is the owner.
        let biased = self.biased.load(Ordering::Relaxed);
        if biased {
            self.owner_in.store(true, Ordering::Relaxed);
            // The visitor's barrier orders the store above before the load below (module
            // docs); the compiler must not reorder them either.
            compiler_fence(Ordering::SeqCst);
            // Acquire: what a visitor that left wrote to the heap is seen.
            if self.visitor.load(Ordering::Acquire) {
                self.owner_wait();
            }
        } else {
            self.take_visitor();
        }
        if count {
            let calls = self.calls.load(Ordering::Relaxed) + 1;
            self.calls.store(calls, Ordering::Relaxed);
            if calls == WINDOW {
                self.reconsider(biased);
            }
        }
    }

    /// Takes the lock as the owner if that is the bias's plain store and load alone: the bias
    /// is on, no visitor holds the heap, and the call (counted if `count`) does not end a
    /// window. False, the lock untouched and nothing counted, otherwise: the caller then takes
    /// [`enter_owned`](Self::enter_owned)'s path. The allocation fast path's entry: it makes no
    /// call, so the path that holds it need not save registers around one.
    #[inline]
    pub(super) fn try_enter_owned(&self, count: bool) -> bool {
        if !self.biased.load(Ordering::Relaxed) {
            return false;
        }
        let calls = self.calls.load(Ordering::Relaxed) + u32::from(count);
        if calls == WINDOW {
            return false;
        }
        self.owner_in.store(true, Ordering::Relaxed);
        // As in `enter_owned`.
        compiler_fence(Ordering::SeqCst);
        if self.visitor.load(Ordering::Acquire) {
            // Out again, as `owner_wait` steps out, for the visitor to go on.
            self.owner_in.store(false, Ordering::Release);
            return false;
        }
        self.calls.store(calls, Ordering::Relaxed);
        true
    }

    /// Takes back the count of the call that [`try_enter_owned`](Self::try_enter_owned) just
    /// counted, the owner inside: the caller goes on to the full path, which counts it again.
    #[inline]
    pub(super) fn uncount(&self) {
        let calls = self.calls.load(Ordering::Relaxed);
        self.calls.store(calls.saturating_sub(1), Ordering::Relaxed);
    }

    /// A visitor holds the heap: step out until it leaves, then in again.
    #[cold]
    #[inline(never)]
    fn owner_wait(&self) {
        loop {
            self.owner_in.store(false, Ordering::Release);
            spin_while(&self.visitor);
            self.owner_in.store(true, Ordering::Relaxed);
            compiler_fence(Ordering::SeqCst);
            if !self.visitor.load(Ordering::Acquire) {
                return;
            }
        }
    }

    /// A window of the owner's calls is over, the owner inside (taken `biased` or not): turns
    /// the bias on or off as the window's visits say. The owner switches while it holds
    /// `visitor`, and leaves holding the lock the new way.
    #[cold]
    #[inline(never)]
    fn reconsider(&self, biased: bool) {
        self.calls.store(0, Ordering::Relaxed);
        // Inside, the visitors' writes to `visits` are seen (their leave is a Release store
        // that the owner's entry read with Acquire, or took by swap).
        let visits = self.visits.load(Ordering::Relaxed);
        let recent = visits.wrapping_sub(self.window_start.load(Ordering::Relaxed));
        self.window_start.store(visits, Ordering::Relaxed);
        let relaxed = |c: &AtomicU32| c.load(Ordering::Relaxed);
        let quiet = match recent < WINDOW_VISITS {
            true => relaxed(&self.quiet) + 1,
            false => 0,
        };
        self.quiet.store(quiet, Ordering::Relaxed);
        let bias = self.can_bias
            && match biased {
                // A busy window turns it off; coming back on takes `quiet_needed` quiet ones.
                true => quiet > 0,
                false => quiet >= relaxed(&self.quiet_needed),
            };
        if bias == biased {
            return;
        }
        if biased {
            if self.switch_off() {
                let needed = relaxed(&self.quiet_needed);
                self.quiet_needed.store((needed * 2).min(MAX_QUIET), Ordering::Relaxed);
            }
        } else {
            // On. Held by `visitor` now; held by `owner_in` from here: a visitor that takes
            // `visitor` after the store below reads `biased` set and waits for `owner_in`.
            self.biased.store(true, Ordering::Relaxed);
            self.owner_in.store(true, Ordering::Relaxed);
            self.visitor.store(false, Ordering::Release);
        }
    }

    /// Turns the bias off for good until a new owner's windows turn it on again: the owner
    /// lets the heap go (its thread exits). A heap nobody owns cannot reconsider its bias, and
    /// every visit of it would pay the barrier.
    pub(super) fn unbias(&self) {
        self.enter_owned(false);
        if self.biased.load(Ordering::Relaxed) {
            self.switch_off();
        }
        self.leave_owned();
    }

    /// Turns the bias off, the owner inside under it; false if a visitor holds `visitor`
    /// already (it waits for the owner to step out: the bias stays, rather than the owner
    /// waiting for it inside).
    fn switch_off(&self) -> bool {
        if self.visitor.swap(true, Ordering::Acquire) {
            return false;
        }
        // Now held by `visitor`, as the spin lock is: no visitor is inside, and the next reads
        // `biased` only after this owner leaves (Release in `leave_owned`).
        self.biased.store(false, Ordering::Relaxed);
        self.owner_in.store(false, Ordering::Release);
        true
    }

    /// Releases the lock taken by [`enter_owned`](Self::enter_owned).
    #[inline]
    pub(super) fn leave_owned(&self) {
        match self.biased.load(Ordering::Relaxed) {
            // Release: a visitor that sees the owner out sees what it wrote.
            true => self.owner_in.store(false, Ordering::Release),
            false => self.visitor.store(false, Ordering::Release),
        }
    }

    /// Takes `visitor`: visitors (and, without the bias, owners) one at a time.
    #[inline]
    fn take_visitor(&self) {
        if self.visitor.swap(true, Ordering::Acquire) {
            self.wait_for_visitor();
        }
    }

    #[cold]
    #[inline(never)]
    fn wait_for_visitor(&self) {
        loop {
            spin_while(&self.visitor);
            if !self.visitor.swap(true, Ordering::Acquire) {
                return;
            }
        }
    }

    /// Releases the lock taken by a visit ([`visit_all`]).
    pub(super) fn leave_visit(&self) {
        self.visitor.store(false, Ordering::Release);
    }

    /// Whether the bias is on now (for tests: it moves).
    #[cfg(test)]
    fn is_biased(&self) -> bool {
        self.biased.load(Ordering::Relaxed)
    }

    /// Visits so far (for tests).
    #[cfg(test)]
    pub(super) fn visits(&self) -> u32 {
        self.visits.load(Ordering::Relaxed)
    }
}

/// Takes the lock of every heap in `locks`, in their order (so two visitors of the same heaps
/// cannot hold one each and wait for the other), with one barrier for those that are biased.
/// Each is left with [`HeapLock::leave_visit`].
pub(super) fn visit_all<'a>(locks: impl IntoIterator<Item = &'a HeapLock> + Clone) {
    let mut any_biased = false;
    for lock in locks.clone() {
        lock.take_visitor();
        // Under `visitor`: nobody else writes it now, and the owner does not switch its bias.
        let visits = lock.visits.load(Ordering::Relaxed);
        lock.visits.store(visits.wrapping_add(1), Ordering::Relaxed);
        any_biased |= lock.biased.load(Ordering::Acquire);
    }
    if !any_biased {
        return;
    }
    barrier();
    for lock in locks {
        if lock.biased.load(Ordering::Relaxed) {
            // Acquire: what the owner wrote before it stepped out is seen.
            spin_while(&lock.owner_in);
        }
    }
}

/// Spins, then yields, while `flag` is set: its holder keeps it for a few table operations or
/// one call to the central pool.
fn spin_while(flag: &AtomicBool) {
    let mut spins = 0u32;
    while flag.load(Ordering::Acquire) {
        if spins < 100 {
            spins += 1;
            std::hint::spin_loop();
        } else {
            std::thread::yield_now();
        }
    }
}

#[cfg(target_os = "linux")]
mod sys {
    /// `membarrier(2)` commands (linux/membarrier.h).
    const QUERY: libc::c_long = 0;
    const GLOBAL: libc::c_long = 1;
    const PRIVATE_EXPEDITED: libc::c_long = 1 << 3;
    const REGISTER_PRIVATE_EXPEDITED: libc::c_long = 1 << 4;

    fn membarrier(cmd: libc::c_long) -> libc::c_long {
        // SAFETY: membarrier takes two integers and touches no memory of the caller's.
        unsafe { libc::syscall(libc::SYS_membarrier, cmd, 0 as libc::c_long, 0 as libc::c_long) }
    }

    /// Whether the process can use the expedited barrier: the kernel has it, and registering
    /// for it (once per process, required before use) worked.
    pub(super) fn register() -> bool {
        let commands = membarrier(QUERY);
        commands >= 0 && commands & PRIVATE_EXPEDITED != 0 && membarrier(REGISTER_PRIVATE_EXPEDITED) == 0
    }

    pub(super) fn barrier() {
        if membarrier(PRIVATE_EXPEDITED) == 0 {
            return;
        }
        // Registered, so this cannot fail (a child after `fork` would be the one doubt): the
        // global barrier needs no registration, and is slower (milliseconds), but as good.
        if membarrier(GLOBAL) == 0 {
            return;
        }
        // Without a barrier the owner's side is unguarded, and a panic would leave the heaps
        // being visited locked: neither is to be risked.
        eprintln!("graphsched: membarrier failed after it was registered; aborting");
        std::process::abort();
    }
}

#[cfg(not(target_os = "linux"))]
mod sys {
    pub fn register() -> bool {
        false
    }

    pub fn barrier() {
        unreachable!("heaps are biased only where the barrier exists")
    }
}

/// Whether heaps made now are biased: decided at the first call, for the process.
fn barrier_available() -> bool {
    static AVAILABLE: OnceLock<bool> = OnceLock::new();
    *AVAILABLE.get_or_init(|| std::env::var_os("GS_POOL_UNBIASED_HEAPS").is_none() && sys::register())
}

fn barrier() {
    sys::barrier();
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::cell::UnsafeCell;
    use std::sync::Arc;

    /// A counter that the lock alone guards, written by an owner and by visitors at once:
    /// no increment is lost, whether the lock can be biased (where the process has the
    /// barrier) or not, and while its bias goes off and on.
    #[test]
    fn the_owner_and_visitors_exclude_each_other() {
        exclusion(false);
        if barrier_available() {
            // Whether the bias goes off depends on the visitors running while the owner does:
            // on a loaded machine a round may see none of that, so up to 20 rounds, each
            // checking exclusion, until one sees the bias go off and on.
            let off_and_on = (0..20).any(|_| exclusion(true) == [true, true]);
            assert!(
                off_and_on,
                "in 20 rounds the bias never went off under the visitors' bursts"
            );
        }
    }

    /// Runs an owner and two visitors on one lock and checks that no increment is lost; returns
    /// the biases the owner saw (off, on).
    fn exclusion(biased: bool) -> [bool; 2] {
        struct Guarded {
            lock: HeapLock,
            count: UnsafeCell<u64>,
        }
        // SAFETY: `count` is touched only under `lock`.
        unsafe impl Sync for Guarded {}
        /// Reads the count, waits a little, writes it back plus one: a second thread inside at
        /// the same time loses an increment.
        fn bump(g: &Guarded) {
            // SAFETY: the caller holds the lock.
            unsafe {
                let c = std::ptr::read_volatile(g.count.get());
                for _ in 0..20 {
                    std::hint::spin_loop();
                }
                std::ptr::write_volatile(g.count.get(), c + 1);
            }
        }
        let g = Arc::new(Guarded {
            lock: HeapLock::with_bias(biased),
            count: UnsafeCell::new(0),
        });
        const VISITS: u64 = 2_000;
        let running = Arc::new(std::sync::atomic::AtomicUsize::new(2));
        let visitors: Vec<_> = (0..2)
            .map(|_| {
                let (g, running) = (g.clone(), running.clone());
                std::thread::spawn(move || {
                    for i in 0..VISITS {
                        visit_all([&g.lock]);
                        bump(&g);
                        g.lock.leave_visit();
                        // Bursts and pauses, so that the owner's windows see many visits and
                        // none: its bias goes off and on again.
                        if i % 200 == 199 {
                            std::thread::sleep(std::time::Duration::from_millis(2));
                        }
                    }
                    running.fetch_sub(1, Ordering::Release);
                })
            })
            .collect();
        // The owner goes on for as long as the visitors do, noting the bias it sees.
        let (mut owned, mut fast, mut seen) = (0, 0, [false; 2]);
        while running.load(Ordering::Acquire) > 0 {
            // Every other call tries the fast entry first, as the pool's fast paths do.
            if owned % 2 == 1 && g.lock.try_enter_owned(true) {
                fast += 1;
            } else {
                g.lock.enter_owned(true);
            }
            bump(&g);
            seen[g.lock.is_biased() as usize] = true;
            g.lock.leave_owned();
            owned += 1;
        }
        for v in visitors {
            v.join().unwrap();
        }
        visit_all([&g.lock]);
        // SAFETY: under the lock, every other thread gone.
        assert_eq!(unsafe { *g.count.get() }, owned + 2 * VISITS, "can bias: {biased}");
        assert!(!seen[1] || fast > 0, "the bias was on, and no fast entry was taken");
        assert!(biased || fast == 0, "a fast entry without the bias");
        // Without the barrier the bias never comes on.
        assert!(
            biased || seen == [true, false],
            "biases seen (off, on): {seen:?}, without the barrier"
        );
        g.lock.leave_visit();
        seen
    }
}
