//! A memory budget shared by the runs of one executor: what lets a server run many requests at
//! once without holding, together, more than the machine was sized for.
//!
//! The rule: a run **reserves its own bound** when it enters (the max-live bound of the order
//! its memory admission keeps safe, or its own `memory_limit_bytes` if it gives one; a plan's
//! arena if it has one) and runs under a memory limit of exactly that, so that its admission,
//! the banker's rule of `sched::Admission`, keeps its live bytes within the reservation and lets
//! it finish on any number of threads. The reservations of the runs inside never add up to more
//! than the budget, so neither do their live bytes; and since every run inside can finish on its
//! own, whatever the others do, nothing deadlocks at any budget at or above the largest single
//! run's bound.
//!
//! **Entry is first come, first served**: a run waits until every run that came before it has
//! entered and its reservation fits. So no run waits forever: a run waits at most until the runs
//! ahead of it have entered and enough of the runs inside have ended (each of which ends, as
//! above). Priorities (`RunOptions::priority`) order nodes on the threads, not entry, so a
//! stream of urgent runs cannot starve the others out of the budget.
//!
//! **A run that must wait is started by the run that makes room** (`enter_prepared`): its
//! caller sets the run up first (taking no memory) and puts it in the queue with its start (a
//! pointer to the run), then parks until the run is over; whoever lets the reservation go that
//! makes it fit admits it and queues its first nodes. That is usually a queued run's last task,
//! on one of the executor's threads, which gives its reservation back before it leaves the
//! run's `active` count and so starts the next runs into its own deques and takes them at once
//! (`exec::workers::queued`). A server's requests then run on the executor's threads, which stay
//! on their cores with their caches warm, instead of going from parked caller to parked caller
//! (a woken thread lands on any core, often a busy one: cls served at 8 clients lost a fifth of
//! its throughput to that).
//!
//! **A run with a plan waits parked** (`enter`): it takes its arena as it is set up, so it enters
//! first. It is queued with its ticket, its need and its thread, and whoever changes what fits
//! (a run leaving, the head entering, the budget changing) unparks it when it is the head and
//! fits: one wake-up a waiting run. Both kinds share the queue, in ticket order.
//!
//! A run whose own bound is more than the whole budget is refused at once, naming the graph and
//! the bytes. A run started from inside a kernel (a nested run, or any run on one of the
//! executor's threads) never waits: it would wait for memory its own caller holds. It enters if
//! its reservation fits with nobody queued, and is refused otherwise.

use std::cell::Cell;
use std::collections::VecDeque;
use std::time::Instant;

use crate::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use crate::sync::thread::{self, Thread};
use crate::sync::{lock, Mutex, MutexGuard};

use crate::error::{err, ErrorKind, Result};

/// The budget of an executor; 0 bytes: none (runs enter at once, nothing is reserved).
#[derive(Default)]
pub(in crate::exec) struct Budget {
    /// The budget's bytes, mirrored out of the books: a run on an executor without a budget
    /// reads this and nothing else (no lock, no bound computed). Written under the books' lock;
    /// a run racing a change may enter as if it came just before it.
    bytes: AtomicU64,
    /// Whether runs wait in the queue, mirrored out of the books (a hint, read without the lock).
    crowded: AtomicBool,
    state: Mutex<Books>,
}

#[derive(Default)]
struct Books {
    bytes: u64,
    reserved: u64,
    peak_reserved: u64,
    /// Tickets handed out, and the ticket whose turn it is: the queue is the tickets between.
    next_ticket: u64,
    serving: u64,
    /// The runs waiting, in ticket order: ticket, bytes needed, and who starts the run.
    waiting: VecDeque<(u64, u64, Waiter)>,
}

/// Who starts a waiting run when its turn and its room come.
enum Waiter {
    /// Its caller, parked in [`Budget::enter`]: unparked, it enters itself.
    Caller(Thread),
    /// Whoever makes room: the run is set up ([`Budget::enter_prepared`]).
    Prepared(Start),
}

/// A run set up and waiting for the budget: what starts it on the executor's threads.
pub(in crate::exec) struct Start {
    /// The run, alive until it is over: its caller waits for that.
    pub run: *const crate::exec::state::RunState<'static>,
    /// When it was queued.
    pub queued: Instant,
    /// Set when it is admitted to a budget lowered below its need while it waited: the budget it
    /// then refuses it at (it reserves nothing).
    pub refused_under: Option<u64>,
}

// SAFETY: the run a `Start` points at outlives it (its caller waits until the run is over, and
// the run cannot be over before it starts), and is `Sync`.
unsafe impl Send for Start {}

/// Starts prepared runs the budget admitted: the executor queues their first nodes.
pub(in crate::exec) trait StartRuns {
    /// Starts `runs`, in this order (the queue's).
    fn start_runs(&self, runs: Vec<Start>);
}

/// What to do once the books are let go: unpark a caller, and start runs that were admitted.
#[derive(Default)]
struct Admitted {
    caller: Option<Thread>,
    /// Admitted in turn, to start in this order.
    starts: Vec<Start>,
}

impl Books {
    /// Whether a run needing `need` may enter when its turn has come: its reservation fits, or
    /// it never will (the budget was lowered below it, or removed), which it then learns.
    fn room_for(&self, need: u64) -> bool {
        self.reserved + need <= self.bytes || need > self.bytes
    }

    /// Admits the prepared runs at the head of the queue while their turn has come and they fit,
    /// and names the caller to unpark if the head is then one whose turn and room came (to
    /// unpark once the lock is let go, so that it does not wake to a held lock).
    fn admit_heads(&mut self) -> Admitted {
        let mut admitted = Admitted::default();
        while let Some((ticket, need, waiter)) = self.waiting.front() {
            if *ticket != self.serving || !self.room_for(*need) {
                break;
            }
            let need = *need;
            if let Waiter::Caller(thread) = waiter {
                admitted.caller = Some(thread.clone());
                break;
            }
            let Some((_, _, Waiter::Prepared(mut start))) = self.waiting.pop_front() else {
                unreachable!("the head is a prepared run")
            };
            self.serving += 1;
            if self.bytes != 0 && need > self.bytes {
                // The budget was lowered below it while it waited: it starts refused.
                start.refused_under = Some(self.bytes);
            } else {
                self.reserved += need;
                self.peak_reserved = self.peak_reserved.max(self.reserved);
            }
            admitted.starts.push(start);
        }
        admitted
    }
}

/// What a budget holds now: its bytes, the reservations of the runs inside, and their peak.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct BudgetStats {
    /// The budget (0: none).
    pub bytes: u64,
    /// Bytes reserved by the runs inside now.
    pub reserved: u64,
    /// The most ever reserved at once.
    pub peak_reserved: u64,
}

#[cfg(not(loom))]
std::thread_local! {
    /// Entries held by this thread, and whether it is one of an executor's workers: a run started
    /// then is inside another (see the module docs).
    static INSIDE: Cell<u32> = const { Cell::new(0) };
}

// Loom's threads share one OS thread: each needs its own count (and loom's macro takes no
// `const` initializer).
#[cfg(loom)]
loom::thread_local! {
    static INSIDE: Cell<u32> = Cell::new(0);
}

/// Marks the calling thread as an executor's worker for its whole life.
pub(in crate::exec) fn mark_worker() {
    INSIDE.with(|c| c.set(c.get() + 1));
}

/// A run's place inside the budget: its reservation goes back on drop, unless the run's last
/// task gave it back already (a prepared run that was queued: [`Entered::Queued`]).
pub(in crate::exec) struct Entry<'b> {
    budget: &'b Budget,
    starter: &'b dyn StartRuns,
    bytes: u64,
    /// The reservation is the run's to give back at its end, not the entry's.
    given_back_by_run: bool,
    /// How long the run waited to enter (a queued run: set from its start).
    pub waited_ns: u64,
}

/// How a prepared run entered.
pub(in crate::exec) enum Entered<'b> {
    /// No budget: the run reserves nothing.
    Free,
    /// Its turn and its room had come: its caller drives it.
    Now(Entry<'b>),
    /// Queued: whoever makes room for it starts it on the executor's threads, and its last task
    /// gives the reservation back ([`Budget::leave`]); the caller waits for it to end.
    Queued(Entry<'b>),
}

impl Budget {
    fn books(&self) -> MutexGuard<'_, Books> {
        // A panic never happens under this lock (plain arithmetic); recover the books anyway.
        lock(&self.state)
    }

    /// Admits what may enter now, lets go of the books, wakes the caller at the head of the
    /// queue if it may enter and starts the prepared runs admitted.
    fn release_and_wake(&self, mut b: MutexGuard<'_, Books>, starter: &dyn StartRuns) {
        let Admitted { caller, starts } = b.admit_heads();
        self.crowded.store(!b.waiting.is_empty(), Ordering::Relaxed);
        drop(b);
        if let Some(thread) = caller {
            thread.unpark();
        }
        if !starts.is_empty() {
            starter.start_runs(starts);
        }
    }

    /// Sets the budget (0: none). Runs inside keep their reservations; the head of the queue
    /// looks again.
    pub(in crate::exec) fn set(&self, bytes: u64, starter: &dyn StartRuns) {
        let mut b = self.books();
        b.bytes = bytes;
        self.bytes.store(bytes, Ordering::Relaxed);
        self.release_and_wake(b, starter);
    }

    /// Whether a budget is set: runs then reserve their bounds.
    pub(in crate::exec) fn is_set(&self) -> bool {
        self.bytes.load(Ordering::Relaxed) != 0
    }

    /// Whether runs wait in the queue now (as last seen: a hint).
    pub(in crate::exec) fn crowded(&self) -> bool {
        self.crowded.load(Ordering::Relaxed)
    }

    /// Gives back the reservation of a prepared run that was queued, at its end (its last task
    /// calls this); starts the prepared runs that may start now.
    pub(in crate::exec) fn leave(&self, bytes: u64, starter: &dyn StartRuns) {
        let mut b = self.books();
        b.reserved -= bytes;
        self.release_and_wake(b, starter);
    }

    pub(in crate::exec) fn stats(&self) -> BudgetStats {
        let b = self.books();
        BudgetStats {
            bytes: b.bytes,
            reserved: b.reserved,
            peak_reserved: b.peak_reserved,
        }
    }

    /// Refuses a run of `need` bytes that could never enter, or that was started inside a
    /// kernel and would have to wait.
    fn refuse(b: &Books, need: u64, who: impl Fn() -> String) -> Result<()> {
        if need > b.bytes {
            return err(
                ErrorKind::MemoryLimit,
                format!(
                    "{} needs {need} bytes at least (its max-live bound), more than the executor's whole memory \
                     budget of {} bytes",
                    who(),
                    b.bytes
                ),
            );
        }
        if INSIDE.with(Cell::get) > 0 && (b.serving != b.next_ticket || b.reserved + need > b.bytes) {
            return err(
                ErrorKind::MemoryLimit,
                format!(
                    "{} was started inside a kernel and needs {need} bytes of the memory budget, where {} of its \
                     {} bytes are reserved{}: it cannot wait for memory its caller may hold",
                    who(),
                    b.reserved,
                    b.bytes,
                    if b.serving != b.next_ticket {
                        " and runs are queued"
                    } else {
                        ""
                    }
                ),
            );
        }
        Ok(())
    }

    /// Reserves `need` for a run whose turn has come (its ticket served), and lets the next in
    /// line in if it fits too.
    fn admit<'b>(
        &'b self,
        mut b: MutexGuard<'_, Books>,
        need: u64,
        starter: &'b dyn StartRuns,
        waited_ns: u64,
        given_back_by_run: bool,
    ) -> Entry<'b> {
        b.reserved += need;
        b.peak_reserved = b.peak_reserved.max(b.reserved);
        debug_assert!(b.bytes == 0 || b.reserved <= b.bytes, "reservations within the budget");
        self.release_and_wake(b, starter);
        INSIDE.with(|c| c.set(c.get() + 1));
        Entry {
            budget: self,
            starter,
            bytes: need,
            given_back_by_run,
            waited_ns,
        }
    }

    /// Enters with a reservation of `need()` bytes, for the run `who` describes, parking until
    /// its turn and its room come; `None` when there is no budget (then `need` is not called).
    pub(in crate::exec) fn enter<'b>(
        &'b self,
        need: impl FnOnce() -> u64,
        who: impl Fn() -> String,
        starter: &'b dyn StartRuns,
    ) -> Result<Option<Entry<'b>>> {
        if !self.is_set() {
            return Ok(None);
        }
        let need = need();
        let mut start = None;
        let mut b = self.books();
        if b.bytes == 0 {
            return Ok(None);
        }
        Budget::refuse(&b, need, &who)?;
        if INSIDE.with(Cell::get) == 0 {
            let ticket = b.next_ticket;
            b.next_ticket += 1;
            if b.serving != ticket || !b.room_for(need) {
                start = Some(Instant::now());
                b.waiting.push_back((ticket, need, Waiter::Caller(thread::current())));
                self.crowded.store(true, Ordering::Relaxed);
                // Parked until its turn and its room come (`admit_heads`); a wake-up that finds
                // neither (a spurious one, or the budget lowered meanwhile) parks again. An
                // unpark that comes before the park is kept: park returns at once.
                while b.serving != ticket || !b.room_for(need) {
                    drop(b);
                    thread::park();
                    b = self.books();
                }
                let head = b.waiting.pop_front();
                debug_assert!(head.is_some_and(|h| h.0 == ticket), "the head of the queue enters");
            }
            b.serving += 1;
            // The budget may have shrunk while the run waited: below its need, refuse it then.
            if b.bytes != 0 && need > b.bytes {
                let lowered = b.bytes;
                self.release_and_wake(b, starter);
                return err(
                    ErrorKind::MemoryLimit,
                    format!(
                        "{} needs {need} bytes, more than the memory budget, lowered to {lowered} bytes",
                        who()
                    ),
                );
            }
        }
        let waited_ns = start.map_or(0, |s: Instant| s.elapsed().as_nanos().max(1) as u64);
        Ok(Some(self.admit(b, need, starter, waited_ns, false)))
    }

    /// Enters a run that is set up, `start` pointing at it, with a reservation of `need` bytes:
    /// at once if its turn and its room have come, else queued, to be started by whoever makes
    /// room for it (module docs).
    pub(in crate::exec) fn enter_prepared<'b>(
        &'b self,
        need: u64,
        who: impl Fn() -> String,
        start: Start,
        starter: &'b dyn StartRuns,
    ) -> Result<Entered<'b>> {
        let mut b = self.books();
        if b.bytes == 0 {
            return Ok(Entered::Free);
        }
        Budget::refuse(&b, need, &who)?;
        let ticket = b.next_ticket;
        b.next_ticket += 1;
        if INSIDE.with(Cell::get) == 0 && (b.serving != ticket || !b.room_for(need)) {
            b.waiting.push_back((ticket, need, Waiter::Prepared(start)));
            self.crowded.store(true, Ordering::Relaxed);
            INSIDE.with(|c| c.set(c.get() + 1));
            return Ok(Entered::Queued(Entry {
                budget: self,
                starter,
                bytes: need,
                given_back_by_run: true,
                waited_ns: 0,
            }));
        }
        b.serving += 1;
        Ok(Entered::Now(self.admit(b, need, starter, 0, false)))
    }
}

impl Entry<'_> {
    /// The bytes reserved.
    pub(in crate::exec) fn bytes(&self) -> u64 {
        self.bytes
    }

    /// Gives `bytes` back when dropped: what a queued run's last task left of its reservation.
    pub(in crate::exec) fn give_back_on_drop(&mut self, bytes: u64) {
        self.bytes = bytes;
        self.given_back_by_run = bytes == 0;
    }
}

impl Drop for Entry<'_> {
    fn drop(&mut self) {
        INSIDE.with(|c| c.set(c.get() - 1));
        if !self.given_back_by_run {
            self.budget.leave(self.bytes, self.starter);
        }
    }
}

#[cfg(all(test, loom))]
mod loom_tests;
