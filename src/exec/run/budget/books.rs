//! The budget's books: what the runs inside reserve, who waits, and who enters next. Plain data
//! under the budget's lock (`Budget`), so that the order of entry is tested without threads.
//!
//! **Who enters next**: the oldest urgent run waiting, ahead of older normal runs, unless urgent
//! runs have gone ahead of the oldest waiting run [`URGENT_PASSES`] times in a row; otherwise
//! the oldest run waiting. It enters once its reservation fits, and nobody enters before it.

use std::collections::VecDeque;

use super::Start;
use crate::sync::thread::Thread;

/// How many urgent runs in a row may enter ahead of the oldest waiting run. A normal run at the
/// head of the queue so waits for at most this many urgent runs besides the room it needs: no
/// stream of urgent runs starves it.
pub(super) const URGENT_PASSES: u32 = 8;

#[derive(Default)]
pub(super) struct Books {
    pub(super) bytes: u64,
    pub(super) reserved: u64,
    pub(super) peak_reserved: u64,
    next_ticket: u64,
    /// The runs waiting, oldest first.
    waiting: VecDeque<Waiting>,
    /// Urgent runs that entered in a row ahead of the oldest waiting run.
    passed: u32,
    /// Callers of parked runs that were let in (or refused), and not yet told: their tickets and
    /// verdicts.
    verdicts: Vec<(u64, Verdict)>,
}

struct Waiting {
    ticket: u64,
    need: u64,
    urgent: bool,
    waiter: Waiter,
}

/// Who starts a waiting run when it enters.
pub(super) enum Waiter {
    /// Its caller, parked in `Budget::enter`: unparked, it finds its verdict.
    Caller(Thread),
    /// Whoever lets it in: the run is set up (`Budget::enter_prepared`).
    Prepared(Start),
}

/// What a parked caller finds when it is let in.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(super) enum Verdict {
    /// Its reservation is made.
    Enter,
    /// The budget was lowered below its need while it waited, to this many bytes.
    Refused(u64),
}

/// Who was let in, to wake and to start once the lock is let go (so that nobody wakes to a held
/// lock), in the order they entered.
#[derive(Default)]
pub(super) struct Admitted {
    pub(super) callers: Vec<Thread>,
    pub(super) starts: Vec<Start>,
}

impl Books {
    /// Whether a run needing `need` may enter when its turn has come: its reservation fits, or
    /// it never will (the budget was lowered below it), which it then learns.
    fn room_for(&self, need: u64) -> bool {
        self.reserved + need <= self.bytes || need > self.bytes
    }

    /// Whether runs wait.
    pub(super) fn crowded(&self) -> bool {
        !self.waiting.is_empty()
    }

    /// Whether a run needing `need` may enter at once: nobody waits, and it fits.
    pub(super) fn fits_now(&self, need: u64) -> bool {
        self.waiting.is_empty() && self.reserved + need <= self.bytes
    }

    /// Whether a run needing `need` (`urgent`: a high-priority one) may enter at once, without
    /// queueing, and if so reserves for it: nobody waits and it fits; or it is urgent, no urgent
    /// run waits, the oldest waiting run has been passed fewer than [`URGENT_PASSES`] times in a
    /// row (which this pass counts), and it fits.
    pub(super) fn enter_now(&mut self, need: u64, urgent: bool) -> bool {
        let passes =
            !self.waiting.is_empty() && urgent && self.passed < URGENT_PASSES && !self.waiting.iter().any(|w| w.urgent);
        let enters = (self.waiting.is_empty() || passes) && self.reserved + need <= self.bytes;
        if enters {
            self.passed += u32::from(passes);
            self.reserve(need);
        }
        enters
    }

    /// Reserves `need` for a run that enters.
    pub(super) fn reserve(&mut self, need: u64) {
        self.reserved += need;
        self.peak_reserved = self.peak_reserved.max(self.reserved);
        debug_assert!(
            self.bytes == 0 || self.reserved <= self.bytes,
            "reservations within the budget"
        );
    }

    /// Queues a run; returns its ticket.
    pub(super) fn queue(&mut self, need: u64, urgent: bool, waiter: Waiter) -> u64 {
        let ticket = self.next_ticket;
        self.next_ticket += 1;
        self.waiting.push_back(Waiting {
            ticket,
            need,
            urgent,
            waiter,
        });
        ticket
    }

    /// Where the run to enter next waits (module docs).
    fn next(&self) -> Option<usize> {
        let oldest = self.waiting.front()?;
        if !oldest.urgent && self.passed < URGENT_PASSES {
            if let Some(urgent) = self.waiting.iter().position(|w| w.urgent) {
                return Some(urgent);
            }
        }
        Some(0)
    }

    /// Lets runs in, in order, while the next one fits: reserves for each (unless it is refused,
    /// the budget lowered below it), records the verdicts of parked callers, and says whom to
    /// wake and what to start.
    pub(super) fn admit(&mut self) -> Admitted {
        let mut admitted = Admitted::default();
        while let Some(i) = self.next() {
            let need = self.waiting[i].need;
            if !self.room_for(need) {
                break;
            }
            let w = self.waiting.remove(i).expect("an index into the queue");
            // An urgent run let in refused counts as a pass too: the oldest only gets its turn
            // sooner.
            self.passed = if i == 0 { 0 } else { self.passed + 1 };
            let refused = (self.bytes != 0 && need > self.bytes).then_some(self.bytes);
            if refused.is_none() {
                self.reserve(need);
            }
            match w.waiter {
                Waiter::Caller(thread) => {
                    self.verdicts
                        .push((w.ticket, refused.map_or(Verdict::Enter, Verdict::Refused)));
                    admitted.callers.push(thread);
                }
                Waiter::Prepared(mut start) => {
                    start.refused_under = refused;
                    admitted.starts.push(start);
                }
            }
        }
        admitted
    }

    /// The verdict for the parked caller of `ticket`, once it was let in.
    pub(super) fn verdict(&mut self, ticket: u64) -> Option<Verdict> {
        let i = self.verdicts.iter().position(|v| v.0 == ticket)?;
        Some(self.verdicts.swap_remove(i).1)
    }
}

#[cfg(all(test, not(loom)))]
mod tests {
    use super::*;

    /// A waiting run of `need` bytes (its caller: this thread, never woken here).
    fn wait(b: &mut Books, need: u64, urgent: bool) -> u64 {
        b.queue(need, urgent, Waiter::Caller(std::thread::current()))
    }

    /// Books of a budget of `bytes`, all of them reserved.
    fn full(bytes: u64) -> Books {
        let mut b = Books {
            bytes,
            ..Books::default()
        };
        b.reserve(bytes);
        b
    }

    /// Who got in, by ticket, in order.
    fn let_in(b: &mut Books, tickets: &[u64]) -> Vec<u64> {
        b.admit();
        tickets
            .iter()
            .copied()
            .filter(|&t| b.verdict(t) == Some(Verdict::Enter))
            .collect()
    }

    #[test]
    fn first_come_first_served_among_runs_of_one_priority() {
        let mut b = full(2);
        let (first, second) = (wait(&mut b, 1, false), wait(&mut b, 2, false));
        let third = wait(&mut b, 1, false);
        b.reserved = 0;
        // The second does not fit beside the first: the third, which would, waits behind it.
        assert_eq!(let_in(&mut b, &[first, second, third]), [first]);
        b.reserved = 0;
        assert_eq!(let_in(&mut b, &[second, third]), [second]);
    }

    #[test]
    fn an_urgent_run_goes_ahead_of_older_normal_ones_and_waits_for_its_room() {
        let mut b = full(2);
        let normal = wait(&mut b, 1, false);
        let urgent = wait(&mut b, 2, true);
        b.reserved = 1;
        // Room for the normal run, not the urgent one: nobody goes ahead of it.
        assert_eq!(let_in(&mut b, &[normal, urgent]), []);
        b.reserved = 0;
        assert_eq!(let_in(&mut b, &[normal, urgent]), [urgent]);
    }

    #[test]
    fn an_urgent_run_that_fits_enters_at_once_past_normal_runs_waiting() {
        let mut b = full(3);
        let normal = wait(&mut b, 3, false);
        b.reserved = 1;
        assert!(!b.enter_now(1, false), "a normal run queues behind the one waiting");
        assert!(b.enter_now(2, true), "an urgent one that fits goes ahead at once");
        assert!(!b.enter_now(1, true), "and one that does not fit queues");
        assert_eq!(b.passed, 1);
        b.reserved = 0;
        assert_eq!(let_in(&mut b, &[normal]), [normal]);
    }

    #[test]
    fn urgent_runs_pass_the_oldest_at_most_so_many_times_in_a_row() {
        let mut b = full(1);
        let normal = wait(&mut b, 1, false);
        let mut order = Vec::new();
        for _ in 0..URGENT_PASSES + 2 {
            let urgent = wait(&mut b, 1, true);
            b.reserved = 0;
            order.extend(let_in(&mut b, &[normal, urgent]));
        }
        let normal_at = order.iter().position(|&t| t == normal).expect("the normal run entered");
        assert_eq!(normal_at, URGENT_PASSES as usize, "{order:?}");
    }

    #[test]
    fn a_run_the_lowered_budget_cannot_hold_is_let_in_refused() {
        let mut b = full(4);
        let big = wait(&mut b, 3, false);
        b.bytes = 2;
        b.reserved = 0;
        b.admit();
        assert_eq!(b.verdict(big), Some(Verdict::Refused(2)));
        assert_eq!(b.reserved, 0, "a refused run reserves nothing");
    }
}
