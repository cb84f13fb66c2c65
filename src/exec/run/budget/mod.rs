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
//! **Entry is first come, first served, urgent runs first** (`books.rs`): the next run to enter
//! is the oldest urgent one waiting (`RunOptions::priority`), unless urgent runs went ahead of
//! the oldest waiting run [`URGENT_PASSES`](books::URGENT_PASSES) times in a row, in which case
//! it is the oldest; it enters once its reservation fits, and nobody enters before it. So no run
//! waits forever: a run waits at most until the runs ahead of it, and at most that many urgent
//! runs at a time besides, have entered and enough of the runs inside have ended (each of which
//! ends, as above).
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
//! first. It is queued with its need and its thread, and whoever changes what fits (a run
//! leaving, one entering, the budget changing) lets it in and unparks it when its turn and its
//! room have come: one wake-up a waiting run. Both kinds share the queue.
//!
//! A run whose own bound is more than the whole budget is refused at once, naming the graph and
//! the bytes. A run started from inside a kernel (a nested run, or any run on one of the
//! executor's threads) never waits: it would wait for memory its own caller holds. It enters if
//! its reservation fits with nobody queued, and is refused otherwise.

use std::cell::Cell;
use std::time::Instant;

use crate::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use crate::sync::thread;
use crate::sync::{lock, Mutex, MutexGuard};

use crate::error::{err, ErrorKind, Result};

mod books;
use books::{Admitted, Books, Verdict, Waiter};

/// The budget of an executor; 0 bytes: none (runs enter at once, nothing is reserved).
#[derive(Default)]
pub(in crate::exec) struct Budget {
    /// The budget's bytes, mirrored out of the books: a run on an executor without a budget
    /// reads this and nothing else (no lock, no bound computed). Written under the books' lock;
    /// a run racing a change may enter as if it came just before it.
    bytes: AtomicU64,
    /// Whether runs wait in the queue, mirrored out of the books (a hint, read without the lock).
    crowded: AtomicBool,
    /// The bytes reserved, mirrored out of the books (a hint, read without the lock): whether
    /// other runs are inside.
    reserved: AtomicU64,
    state: Mutex<Books>,
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
    /// Nobody waited and it fitted (or it went ahead, urgent): its caller drives it.
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

    /// Lets in what may enter now, lets go of the books, wakes the parked callers let in and
    /// starts the prepared runs let in.
    fn release_and_wake(&self, mut b: MutexGuard<'_, Books>, starter: &dyn StartRuns) {
        let Admitted { callers, starts } = b.admit();
        self.mirror(&b);
        drop(b);
        for thread in callers {
            thread.unpark();
        }
        if !starts.is_empty() {
            starter.start_runs(starts);
        }
    }

    /// Copies what runs read without the lock out of the books.
    fn mirror(&self, b: &Books) {
        self.crowded.store(b.crowded(), Ordering::Relaxed);
        self.reserved.store(b.reserved, Ordering::Relaxed);
    }

    /// Sets the budget (0: none). Runs inside keep their reservations; the queue looks again.
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

    /// Whether runs other than one holding `own` bytes of reservation are inside or wait in
    /// the queue now (as last seen: a hint).
    pub(in crate::exec) fn others_inside(&self, own: u64) -> bool {
        self.crowded.load(Ordering::Relaxed) || self.reserved.load(Ordering::Relaxed) > own
    }

    /// Gives back `bytes` of reservation (a run left); lets in what now fits.
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
    /// kernel and cannot enter at once.
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
        if INSIDE.with(Cell::get) > 0 && !b.fits_now(need) {
            return err(
                ErrorKind::MemoryLimit,
                format!(
                    "{} was started inside a kernel and needs {need} bytes of the memory budget, where {} of its \
                     {} bytes are reserved{}: it cannot wait for memory its caller may hold",
                    who(),
                    b.reserved,
                    b.bytes,
                    if b.crowded() { " and runs are queued" } else { "" }
                ),
            );
        }
        Ok(())
    }

    /// The entry of a run let in with a reservation of `need`.
    fn entry<'b>(
        &'b self,
        need: u64,
        starter: &'b dyn StartRuns,
        waited_ns: u64,
        given_back_by_run: bool,
    ) -> Entry<'b> {
        INSIDE.with(|c| c.set(c.get() + 1));
        Entry {
            budget: self,
            starter,
            bytes: need,
            given_back_by_run,
            waited_ns,
        }
    }

    /// Enters with a reservation of `need()` bytes, for the run `who` describes (`urgent`: a
    /// high-priority one), parking until it is let in; `None` when there is no budget (then
    /// `need` is not called).
    pub(in crate::exec) fn enter<'b>(
        &'b self,
        need: impl FnOnce() -> u64,
        who: impl Fn() -> String,
        urgent: bool,
        starter: &'b dyn StartRuns,
    ) -> Result<Option<Entry<'b>>> {
        if !self.is_set() {
            return Ok(None);
        }
        let need = need();
        let mut b = self.books();
        if b.bytes == 0 {
            return Ok(None);
        }
        Budget::refuse(&b, need, &who)?;
        if b.enter_now(need, urgent) {
            self.mirror(&b);
            return Ok(Some(self.entry(need, starter, 0, false)));
        }
        let start = Instant::now();
        let ticket = b.queue(need, urgent, Waiter::Caller(thread::current()));
        // After every change the next run to enter does not fit (else it would be in), and a
        // run that queues does not change that; looking again costs nothing and keeps it true
        // whatever comes.
        self.release_and_wake(b, starter);
        // Parked until let in (`Books::admit` records the verdict); a wake-up that finds none
        // (a spurious one, or one left from an earlier wait) parks again. An unpark that comes
        // before the park is kept: park returns at once.
        let verdict = loop {
            if let Some(v) = self.books().verdict(ticket) {
                break v;
            }
            thread::park();
        };
        if let Verdict::Refused(lowered) = verdict {
            return err(
                ErrorKind::MemoryLimit,
                format!(
                    "{} needs {need} bytes, more than the memory budget, lowered to {lowered} bytes",
                    who()
                ),
            );
        }
        let waited_ns = start.elapsed().as_nanos().max(1) as u64;
        Ok(Some(self.entry(need, starter, waited_ns, false)))
    }

    /// Enters a run that is set up, `start` pointing at it, with a reservation of `need` bytes
    /// (`urgent`: a high-priority run): at once if it may (`Books::enter_now`), else queued, to
    /// be started by whoever lets it in (module docs). `to_threads`: queued even if it may enter
    /// at once, so that the executor's threads run it (`exec::workers::os_priority`).
    pub(in crate::exec) fn enter_prepared<'b>(
        &'b self,
        need: u64,
        who: impl Fn() -> String,
        urgent: bool,
        to_threads: bool,
        start: Start,
        starter: &'b dyn StartRuns,
    ) -> Result<Entered<'b>> {
        let mut b = self.books();
        if b.bytes == 0 {
            return Ok(Entered::Free);
        }
        Budget::refuse(&b, need, &who)?;
        // A run for the threads queues even when it fits: the admission below starts it on
        // them at once, in its turn. Not one started inside another: its caller, parked, could
        // be the thread it waits for.
        let to_threads = to_threads && INSIDE.with(Cell::get) == 0;
        if !to_threads && b.enter_now(need, urgent) {
            self.mirror(&b);
            return Ok(Entered::Now(self.entry(need, starter, 0, false)));
        }
        b.queue(need, urgent, Waiter::Prepared(start));
        // As in `enter`: looking again lets nobody in, and keeps the queue moving whatever comes.
        self.release_and_wake(b, starter);
        Ok(Entered::Queued(self.entry(need, starter, 0, true)))
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
