//! Where queued tasks wait: one FIFO deque per priority band for every thread that works, one
//! injector per band for threads that have no deques, and a mask per deque set (and one for the
//! injectors) of the bands that may hold tasks, so that a scan looks only where work may be.
//!
//! **Deque sets.** Each worker owns one set for its life. A thread that calls `run` borrows one of
//! [`CALLER_SETS`] sets for the run (one `try_lock`), pushes its ready nodes there and pops them
//! back with no shared queue in between; a caller that finds every set taken uses the injectors.
//! Every thread steals from every set, the borrowed ones included. A caller gives its set back
//! with nothing in it: tasks of other runs it took on move to the injectors.
//!
//! **Band masks are hints, never the truth.** `has_work`, which decides whether a thread may
//! sleep, looks at the queues themselves, so a stale mask costs a look, never a lost task.
//! - A set's mask is written by its owner alone: a bit goes up when the owner queues into the
//!   band, down when the owner finds the band empty. Thieves read it; a thief that takes the last
//!   task of a band leaves the bit up (one wasted look later).
//! - The injectors' mask has many writers. A pusher raises the bit after its push; a finder that
//!   sees the band empty lowers the bit and then looks at the band once more, raising the bit
//!   again if a task arrived. A SeqCst fence sits between the two steps on each side, so either
//!   the finder's second look sees the task or the pusher sees the lowered bit and raises it: a
//!   queued task never stays behind a lowered bit.

use std::sync::atomic::{fence, AtomicU32, Ordering};
use std::sync::{Mutex, MutexGuard, TryLockError};

use crossbeam_deque::{Injector, Steal, Stealer, Worker};

use super::executor::Task;
use super::padded::CachePadded;
use crate::sched::BANDS;

static_assertions::const_assert!(BANDS <= 32);

/// Deque sets that calling threads may borrow for a run; more concurrent callers use the
/// injectors.
pub(super) const CALLER_SETS: usize = 4;

/// Tasks a deque takes before the injector takes the rest. crossbeam's deques start with room
/// for 64 and reallocate their buffer when they outgrow it (and when they shrink back); below it
/// they never allocate.
const LOCAL_ROOM: usize = 63;

pub(super) struct Queues {
    injectors: Vec<Injector<Task>>,
    /// Bands whose injector may hold tasks.
    injected: CachePadded<AtomicU32>,
    /// The workers' sets, then the callers'.
    sets: Vec<SetShared>,
    /// The deques of the callers' sets, `sets[workers + i]`, owned by the thread holding the lock.
    caller_sets: Vec<Mutex<Vec<Worker<Task>>>>,
}

/// What every thread sees of a deque set.
struct SetShared {
    stealers: Vec<Stealer<Task>>,
    /// Bands the owner may have tasks queued in (see the module docs).
    mask: CachePadded<AtomicU32>,
}

/// A thread's own deque set: its index in `Queues::sets` and its deques, one per band.
#[derive(Clone, Copy)]
pub(super) struct Local<'a> {
    index: usize,
    deques: &'a [Worker<Task>],
}

/// A calling thread's borrowed set. [`give_back`](Borrowed::give_back) empties it; dropped
/// without that (a panic unwinding through the caller), it still empties itself.
pub(super) struct Borrowed<'q> {
    queues: &'q Queues,
    index: usize,
    deques: MutexGuard<'q, Vec<Worker<Task>>>,
}

impl Borrowed<'_> {
    /// The set, as the thread's own.
    pub fn local(&self) -> Local<'_> {
        Local {
            index: self.index,
            deques: &self.deques,
        }
    }

    /// Gives the set back empty: tasks of other runs this caller queued while it helped them go
    /// to the injectors, where anyone finds them. Returns how many moved (the caller wakes
    /// sleepers for them).
    pub fn give_back(mut self) -> usize {
        self.empty()
    }

    fn empty(&mut self) -> usize {
        let mut moved = 0;
        // The owner's mask has a bit up for every band it may have queued in (module docs).
        let mut bands = self.queues.sets[self.index].mask.load(Ordering::Relaxed);
        while bands != 0 {
            let band = bands.trailing_zeros() as usize;
            bands &= bands - 1;
            while let Some(task) = self.deques[band].pop() {
                self.queues.inject(band, task);
                moved += 1;
            }
        }
        self.queues.sets[self.index].mask.store(0, Ordering::Relaxed);
        moved
    }
}

impl Drop for Borrowed<'_> {
    /// Nothing stays behind in a set nobody owns (after `give_back`, there is nothing to move).
    fn drop(&mut self) {
        self.empty();
    }
}

fn band_deques() -> Vec<Worker<Task>> {
    (0..BANDS).map(|_| Worker::new_fifo()).collect()
}

impl Queues {
    /// Queues for `workers` workers, whose deque sets are returned in order.
    pub fn new(workers: usize) -> (Queues, Vec<Vec<Worker<Task>>>) {
        let worker_sets: Vec<Vec<Worker<Task>>> = (0..workers).map(|_| band_deques()).collect();
        let caller_sets: Vec<Vec<Worker<Task>>> = (0..CALLER_SETS).map(|_| band_deques()).collect();
        let sets = worker_sets
            .iter()
            .chain(&caller_sets)
            .map(|deques| SetShared {
                stealers: deques.iter().map(Worker::stealer).collect(),
                mask: CachePadded(AtomicU32::new(0)),
            })
            .collect();
        let queues = Queues {
            injectors: (0..BANDS).map(|_| Injector::new()).collect(),
            injected: CachePadded(AtomicU32::new(0)),
            sets,
            caller_sets: caller_sets.into_iter().map(Mutex::new).collect(),
        };
        (queues, worker_sets)
    }

    /// Worker `index`'s own set, from the deques `new` returned for it.
    pub fn worker_local<'a>(&self, index: usize, deques: &'a [Worker<Task>]) -> Local<'a> {
        Local { index, deques }
    }

    /// A free callers' set for the calling thread, if one is free.
    pub fn borrow(&self) -> Option<Borrowed<'_>> {
        let workers = self.sets.len() - CALLER_SETS;
        self.caller_sets.iter().enumerate().find_map(|(i, set)| {
            // A set whose borrower panicked was emptied on the way out (`Drop`): usable.
            let deques = match set.try_lock() {
                Ok(deques) => deques,
                Err(TryLockError::Poisoned(p)) => p.into_inner(),
                Err(TryLockError::WouldBlock) => return None,
            };
            Some(Borrowed {
                queues: self,
                index: workers + i,
                deques,
            })
        })
    }

    /// Queues `task` in `band`: in the thread's own set if it has one with room, else in the
    /// injector.
    pub fn push(&self, band: usize, task: Task, local: Option<Local<'_>>) {
        match local {
            Some(me) if me.deques[band].len() < LOCAL_ROOM => {
                me.deques[band].push(task);
                let mask = &self.sets[me.index].mask;
                let m = mask.load(Ordering::Relaxed);
                if m & (1 << band) == 0 {
                    // Only the owner writes its mask: a load and a store suffice.
                    mask.store(m | 1 << band, Ordering::Release);
                }
            }
            _ => self.inject(band, task),
        }
    }

    fn inject(&self, band: usize, task: Task) {
        self.injectors[band].push(task);
        // Pairs with the fence in `steal_injected` (module docs).
        fence(Ordering::SeqCst);
        if self.injected.load(Ordering::Relaxed) & (1 << band) == 0 {
            self.injected.fetch_or(1 << band, Ordering::SeqCst);
        }
    }

    /// The most critical task this thread can see: band by band from the most critical, its own
    /// deque, then the injector, then the other sets from a random one on (as TBB and Taskflow
    /// pick victims: thieves that all started at the same one would contend on it).
    pub fn find(&self, me: Option<Local<'_>>, random_below: impl Fn(usize) -> usize) -> Option<Task> {
        let mine = me.map(|m| m.index);
        let own_mask = me.map_or(0, |m| self.sets[m.index].mask.load(Ordering::Relaxed));
        let injected = self.injected.load(Ordering::Relaxed);
        let others = self
            .sets
            .iter()
            .enumerate()
            .filter(|&(i, _)| Some(i) != mine)
            .fold(0, |acc, (_, s)| acc | s.mask.load(Ordering::Relaxed));
        let mut bands = own_mask | injected | others;
        let sets = self.sets.len();
        let first = if bands & others != 0 && sets > 1 {
            random_below(sets)
        } else {
            0
        };
        while bands != 0 {
            let band = bands.trailing_zeros() as usize;
            let bit = 1u32 << band;
            bands &= !bit;
            if let Some(me) = me.filter(|_| own_mask & bit != 0) {
                match me.deques[band].pop() {
                    Some(task) => return Some(task),
                    None => {
                        let mask = &self.sets[me.index].mask;
                        mask.store(mask.load(Ordering::Relaxed) & !bit, Ordering::Relaxed);
                    }
                }
            }
            if injected & bit != 0 {
                if let Some(task) = self.steal_injected(band, me) {
                    return Some(task);
                }
            }
            if others & bit == 0 {
                continue;
            }
            for victim in (first..sets).chain(0..first) {
                if Some(victim) == mine || self.sets[victim].mask.load(Ordering::Relaxed) & bit == 0 {
                    continue;
                }
                let stealer = &self.sets[victim].stealers[band];
                // Emptiness first: a steal attempt pins crossbeam's epoch (a fence and a
                // thread-local access) even on an empty deque.
                while !stealer.is_empty() {
                    match stealer.steal() {
                        Steal::Success(task) => return Some(task),
                        Steal::Retry => continue,
                        Steal::Empty => break,
                    }
                }
            }
        }
        None
    }

    /// A task of `band`'s injector (a batch moves to the thread's own deque if it has one), or
    /// None after lowering the band's bit when the injector is empty.
    fn steal_injected(&self, band: usize, me: Option<Local<'_>>) -> Option<Task> {
        let bit = 1u32 << band;
        let injector = &self.injectors[band];
        loop {
            while !injector.is_empty() {
                let stolen = match me {
                    Some(me) => {
                        let got = injector.steal_batch_and_pop(&me.deques[band]);
                        if matches!(got, Steal::Success(_)) && !me.deques[band].is_empty() {
                            let mask = &self.sets[me.index].mask;
                            mask.store(mask.load(Ordering::Relaxed) | bit, Ordering::Release);
                        }
                        got
                    }
                    None => injector.steal(),
                };
                match stolen {
                    Steal::Success(task) => return Some(task),
                    Steal::Retry => continue,
                    Steal::Empty => break,
                }
            }
            self.injected.fetch_and(!bit, Ordering::SeqCst);
            // Pairs with the fence in `inject` (module docs).
            fence(Ordering::SeqCst);
            if injector.is_empty() {
                return None;
            }
            self.injected.fetch_or(bit, Ordering::SeqCst);
        }
    }

    /// Whether any task is queued anywhere (the queues themselves, not the masks).
    pub fn has_work(&self) -> bool {
        self.injectors.iter().any(|i| !i.is_empty())
            || self.sets.iter().flat_map(|s| &s.stealers).any(|s| !s.is_empty())
    }
}
