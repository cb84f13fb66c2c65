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
//! **Only the head of the queue is woken**, and only when it may enter: each waiting thread is
//! parked with its ticket and need in the queue, and whoever changes what fits (a run leaving,
//! the head entering, the budget changing) unparks the new head if its reservation fits. With
//! one condition variable for all, every leave woke every waiter to find that only the first
//! could go: on a server of 8 clients and a budget for 2 requests, 2-6 context switches a
//! request.
//!
//! A run whose own bound is more than the whole budget is refused at once, naming the graph and
//! the bytes. A run started from inside a kernel (a nested run, or any run on one of the
//! executor's threads) never waits: it would wait for memory its own caller holds. It enters if
//! its reservation fits with nobody queued, and is refused otherwise.

use std::cell::Cell;
use std::collections::VecDeque;
use std::time::Instant;

use crate::sync::atomic::{AtomicU64, Ordering};
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
    /// The runs waiting, in ticket order: ticket, bytes needed, and the thread to unpark.
    waiting: VecDeque<(u64, u64, Thread)>,
}

impl Books {
    /// Whether a run needing `need` may enter when its turn has come: its reservation fits, or
    /// it never will (the budget was lowered below it, or removed), which it then learns.
    fn room_for(&self, need: u64) -> bool {
        self.reserved + need <= self.bytes || need > self.bytes
    }

    /// The head of the queue, if its turn has come and it may enter: to unpark once the lock is
    /// let go (so that it does not wake to a held lock).
    fn head_to_wake(&self) -> Option<Thread> {
        let (ticket, need, thread) = self.waiting.front()?;
        (*ticket == self.serving && self.room_for(*need)).then(|| thread.clone())
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
        lock(&self.state)
    }

    /// Lets go of the books, then wakes the head of the queue if it may enter now.
    fn release_and_wake(b: MutexGuard<'_, Books>) {
        let head = b.head_to_wake();
        drop(b);
        if let Some(thread) = head {
            thread.unpark();
        }
    }

    /// Sets the budget (0: none). Runs inside keep their reservations; the head of the queue
    /// looks again.
    pub(in crate::exec) fn set(&self, bytes: u64) {
        let mut b = self.books();
        b.bytes = bytes;
        self.bytes.store(bytes, Ordering::Relaxed);
        Budget::release_and_wake(b);
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
            if b.serving != ticket || !b.room_for(need) {
                start = Some(Instant::now());
                b.waiting.push_back((ticket, need, thread::current()));
                // Parked until its turn and its room come (`head_to_wake`); a wake-up that
                // finds neither (a spurious one, or the budget lowered meanwhile) parks again.
                // An unpark that comes before the park is kept: park returns at once.
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
                Budget::release_and_wake(b);
                return err(
                    ErrorKind::MemoryLimit,
                    format!(
                        "{} needs {need} bytes, more than the memory budget, lowered to {lowered} bytes",
                        who()
                    ),
                );
            }
        }
        b.reserved += need;
        b.peak_reserved = b.peak_reserved.max(b.reserved);
        debug_assert!(b.bytes == 0 || b.reserved <= b.bytes, "reservations within the budget");
        // The next in line may fit too.
        Budget::release_and_wake(b);
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
        Budget::release_and_wake(b);
    }
}

#[cfg(all(test, loom))]
mod loom_tests {
    use super::Budget;
    use loom::sync::Arc;

    /// Runs entering a budget that holds fewer of them at once than there are: every one enters
    /// and leaves, never more reserved than the budget. A waiter nobody unparks leaves its thread
    /// blocked for ever, which loom reports as a deadlock.
    fn all_enter(budget: u64, needs: &'static [u64]) {
        loom::model(move || {
            let b = Arc::new(Budget::default());
            b.set(budget);
            let threads: Vec<_> = needs
                .iter()
                .map(|&need| {
                    let b = b.clone();
                    loom::thread::spawn(move || {
                        let entry = b.enter(|| need, || "a run".into()).unwrap().expect("a budget is set");
                        let s = b.stats();
                        assert!(s.reserved <= s.bytes, "{} reserved of {}", s.reserved, s.bytes);
                        drop(entry);
                    })
                })
                .collect();
            for t in threads {
                t.join().unwrap();
            }
            assert_eq!(b.stats().reserved, 0);
        });
    }

    #[test]
    fn loom_two_runs_one_at_a_time() {
        all_enter(1, &[1, 1]);
    }

    /// Two runs that fit together are let in together: while a run holding the whole budget is
    /// inside, two more queue; when it leaves, the first of them enters and must wake the second
    /// (the leaving run woke only the head). Each waits inside for the other, so a second left
    /// parked blocks both: a deadlock for loom.
    #[test]
    fn loom_runs_that_fit_together_enter_together() {
        use loom::sync::{Condvar, Mutex};
        loom::model(|| {
            let b = Arc::new(Budget::default());
            b.set(2);
            let whole = b
                .enter(|| 2, || "the first run".into())
                .unwrap()
                .expect("a budget is set");
            let inside = Arc::new((Mutex::new(0u32), Condvar::new()));
            let threads: Vec<_> = (0..2)
                .map(|_| {
                    let (b, inside) = (b.clone(), inside.clone());
                    loom::thread::spawn(move || {
                        let entry = b.enter(|| 1, || "a run".into()).unwrap().expect("a budget is set");
                        let (count, both) = &*inside;
                        let mut n = count.lock().unwrap();
                        *n += 1;
                        both.notify_all();
                        while *n < 2 {
                            n = both.wait(n).unwrap();
                        }
                        drop(n);
                        drop(entry);
                    })
                })
                .collect();
            drop(whole);
            for t in threads {
                t.join().unwrap();
            }
            assert_eq!(b.stats().reserved, 0);
        });
    }
}
