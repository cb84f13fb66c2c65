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
//! A run whose own bound is more than the whole budget is refused at once, naming the graph and
//! the bytes. A run started from inside a kernel (a nested run, or any run on one of the
//! executor's threads) never waits: it would wait for memory its own caller holds. It enters if
//! its reservation fits with nobody queued, and is refused otherwise.

use std::cell::Cell;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Condvar, Mutex, MutexGuard};
use std::time::Instant;

use crate::error::{err, ErrorKind, Result};

/// The budget of an executor; 0 bytes: none (runs enter at once, nothing is reserved).
#[derive(Default)]
pub(in crate::exec) struct Budget {
    /// The budget's bytes, mirrored out of the books: a run on an executor without a budget
    /// reads this and nothing else (no lock, no bound computed). Written under the books' lock;
    /// a run racing a change may enter as if it came just before it.
    bytes: AtomicU64,
    state: Mutex<Books>,
    /// Woken when a run leaves, the budget changes or the head of the queue enters.
    turn: Condvar,
}

#[derive(Default)]
struct Books {
    bytes: u64,
    reserved: u64,
    peak_reserved: u64,
    /// Tickets handed out, and the ticket whose turn it is: the queue is the tickets between.
    next_ticket: u64,
    serving: u64,
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

thread_local! {
    /// Entries held by this thread, and whether it is one of an executor's workers: a run started
    /// then is inside another (see the module docs).
    static INSIDE: Cell<u32> = const { Cell::new(0) };
}

/// Marks the calling thread as an executor's worker for its whole life.
pub(in crate::exec) fn mark_worker() {
    INSIDE.with(|c| c.set(c.get() + 1));
}

/// A run's place inside the budget: its reservation goes back on drop.
pub(in crate::exec) struct Entry<'b> {
    budget: &'b Budget,
    bytes: u64,
    /// How long the run waited to enter.
    pub waited_ns: u64,
}

impl Budget {
    fn books(&self) -> MutexGuard<'_, Books> {
        // A panic never happens under this lock (plain arithmetic); recover the books anyway.
        self.state.lock().unwrap_or_else(|e| e.into_inner())
    }

    /// Sets the budget (0: none). Runs inside keep their reservations; waiting runs look again.
    pub(in crate::exec) fn set(&self, bytes: u64) {
        let mut b = self.books();
        b.bytes = bytes;
        self.bytes.store(bytes, Ordering::Relaxed);
        drop(b);
        self.turn.notify_all();
    }

    pub(in crate::exec) fn stats(&self) -> BudgetStats {
        let b = self.books();
        BudgetStats {
            bytes: b.bytes,
            reserved: b.reserved,
            peak_reserved: b.peak_reserved,
        }
    }

    /// Enters with a reservation of `need()` bytes, for the run `who` describes; `None` when
    /// there is no budget (then `need` is not called).
    pub(in crate::exec) fn enter(
        &self,
        need: impl FnOnce() -> u64,
        who: impl Fn() -> String,
    ) -> Result<Option<Entry<'_>>> {
        if self.bytes.load(Ordering::Relaxed) == 0 {
            return Ok(None);
        }
        let need = need();
        let mut start = None;
        let mut b = self.books();
        if b.bytes == 0 {
            return Ok(None);
        }
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
        if INSIDE.with(Cell::get) > 0 {
            if b.serving != b.next_ticket || b.reserved + need > b.bytes {
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
        } else {
            let ticket = b.next_ticket;
            b.next_ticket += 1;
            // The budget may shrink while the run waits: below its need, refuse it then too.
            while b.serving != ticket || (b.reserved + need > b.bytes && need <= b.bytes) {
                start.get_or_insert_with(Instant::now);
                b = self.turn.wait(b).unwrap_or_else(|e| e.into_inner());
            }
            b.serving += 1;
            if b.bytes != 0 && need > b.bytes {
                self.turn.notify_all();
                return err(
                    ErrorKind::MemoryLimit,
                    format!(
                        "{} needs {need} bytes, more than the memory budget, lowered to {} bytes",
                        who(),
                        b.bytes
                    ),
                );
            }
        }
        b.reserved += need;
        b.peak_reserved = b.peak_reserved.max(b.reserved);
        debug_assert!(b.bytes == 0 || b.reserved <= b.bytes, "reservations within the budget");
        drop(b);
        // The next in line may fit too.
        self.turn.notify_all();
        INSIDE.with(|c| c.set(c.get() + 1));
        Ok(Some(Entry {
            budget: self,
            bytes: need,
            // 0 for a run that found its turn and its room at once.
            waited_ns: start.map_or(0, |s| s.elapsed().as_nanos().max(1) as u64),
        }))
    }
}

impl Entry<'_> {
    /// The bytes reserved.
    pub(in crate::exec) fn bytes(&self) -> u64 {
        self.bytes
    }
}

impl Drop for Entry<'_> {
    fn drop(&mut self) {
        INSIDE.with(|c| c.set(c.get() - 1));
        let mut b = self.budget.books();
        b.reserved -= self.bytes;
        drop(b);
        self.budget.turn.notify_all();
    }
}
