//! Where queued tasks wait: one FIFO deque per priority band for every thread that works, one
//! shared queue per band ([`overflow`](crate::exec::workers::overflow)) for threads that have no deques and for what a deque has
//! no room for, and a mask per deque set (and one for the shared queues) of the bands that may
//! hold tasks, so that a scan looks only where work may be.
//!
//! **Deque sets.** Each worker owns one set for its life. A thread that calls `run` borrows one of
//! [`CALLER_SETS`] sets for the run (one `try_lock`), pushes its ready nodes there and pops them
//! back with no shared queue in between; a caller that finds every set taken uses the shared
//! queues. A callers' set gets its deques when first borrowed: a set is a deque per band, about
//! 48 KB of an executor's heap, and most programs have one calling thread, or none that borrows.
//! Every thread steals from every set, the borrowed ones included. A caller gives its set back
//! with nothing in it: tasks of other runs it took on move to the shared queues.
//!
//! **Band masks are hints, never the truth.** `has_work`, which decides whether a thread may
//! sleep, looks at the queues themselves, so a stale mask costs a look, never a lost task.
//! - A set's mask is written by its owner alone: a bit goes up when the owner queues into the
//!   band, down when the owner finds the band empty. Thieves read it; a thief that takes the last
//!   task of a band leaves the bit up (one wasted look later).
//! - The shared queues' mask is written under each queue's lock, by the push that fills it and the
//!   take that empties it ([`overflow`](crate::exec::workers::overflow)): a queued task never stays behind a lowered bit.

use std::sync::atomic::{AtomicU32, Ordering};
use std::sync::{Mutex, MutexGuard, OnceLock, TryLockError};

use crossbeam_deque::{Steal, Stealer, Worker};

use crate::exec::padded::CachePadded;
use crate::exec::workers::overflow::Overflow;
use crate::exec::workers::Task;
use crate::sched::BANDS;

/// Queue bands: the policy's [`BANDS`] for high-priority runs, then as many for normal ones
/// (`RunState::band`), so that every urgent node is ahead of every normal one.
pub(in crate::exec) const QUEUE_BANDS: usize = 2 * BANDS;

static_assertions::const_assert!(QUEUE_BANDS <= 32);

/// Deque sets that calling threads may borrow for a run; more concurrent callers use the shared
/// queues.
pub(in crate::exec) const CALLER_SETS: usize = 4;

/// Tasks a deque takes before the shared queue takes the rest. crossbeam's deques start with room
/// for 64 and reallocate their buffer when they outgrow it (and when they shrink back); below it
/// they never allocate.
const LOCAL_ROOM: usize = 63;

pub(in crate::exec) struct Queues {
    /// Per band: the tasks no deque holds.
    overflow: Vec<Overflow>,
    /// Bands whose shared queue holds tasks (written under that queue's lock, [`overflow`](crate::exec::workers::overflow)).
    overflowing: CachePadded<AtomicU32>,
    /// The workers' sets, then the callers'.
    sets: Vec<SetShared>,
    /// The deques of the callers' sets, `sets[workers + i]`, owned by the thread holding the lock;
    /// none until the set is first borrowed.
    caller_sets: Vec<Mutex<Vec<Worker<Task>>>>,
}

/// What every thread sees of a deque set.
struct SetShared {
    /// Set once the set has its deques (a callers' set, when first borrowed): before that its
    /// mask is 0 and nobody looks here.
    stealers: OnceLock<Box<[Stealer<Task>]>>,
    /// Bands the owner may have tasks queued in (see the module docs).
    mask: CachePadded<AtomicU32>,
}

/// A thread's own deque set: its index in `Queues::sets` and its deques, one per band.
#[derive(Clone, Copy)]
pub(in crate::exec) struct Local<'a> {
    index: usize,
    deques: &'a [Worker<Task>],
}

/// A calling thread's borrowed set. [`give_back`](Borrowed::give_back) empties it; dropped
/// without that (a panic unwinding through the caller), it still empties itself.
pub(in crate::exec) struct Borrowed<'q> {
    queues: &'q Queues,
    index: usize,
    deques: MutexGuard<'q, Vec<Worker<Task>>>,
}

impl Borrowed<'_> {
    /// The set, as the thread's own.
    pub(crate) fn local(&self) -> Local<'_> {
        Local {
            index: self.index,
            deques: &self.deques,
        }
    }

    /// Gives the set back empty: tasks of other runs this caller queued while it helped them go
    /// to the shared queues, where anyone finds them. Returns about how many moved (thieves may
    /// take some meanwhile), for the caller to wake sleepers.
    pub(crate) fn give_back(mut self) -> usize {
        self.empty()
    }

    fn empty(&mut self) -> usize {
        let mut moved = 0;
        // The owner's mask has a bit up for every band it may have queued in (module docs).
        let mut bands = self.queues.sets[self.index].mask.load(Ordering::Relaxed);
        while bands != 0 {
            let band = bands.trailing_zeros() as usize;
            bands &= bands - 1;
            let deque = &self.deques[band];
            moved += deque.len();
            self.queues.share(band, std::iter::from_fn(|| deque.pop()));
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
    (0..QUEUE_BANDS).map(|_| Worker::new_fifo()).collect()
}

fn stealers_of(deques: &[Worker<Task>]) -> Box<[Stealer<Task>]> {
    deques.iter().map(Worker::stealer).collect()
}

impl Queues {
    /// Queues for `workers` workers, whose deque sets are returned in order.
    pub(crate) fn new(workers: usize) -> (Queues, Vec<Vec<Worker<Task>>>) {
        let worker_sets: Vec<Vec<Worker<Task>>> = (0..workers).map(|_| band_deques()).collect();
        let set = |stealers: OnceLock<_>| SetShared {
            stealers,
            mask: CachePadded(AtomicU32::new(0)),
        };
        let sets = worker_sets
            .iter()
            .map(|deques| set(OnceLock::from(stealers_of(deques))))
            .chain((0..CALLER_SETS).map(|_| set(OnceLock::new())))
            .collect();
        let queues = Queues {
            overflow: (0..QUEUE_BANDS).map(|_| Overflow::new()).collect(),
            overflowing: CachePadded(AtomicU32::new(0)),
            sets,
            caller_sets: (0..CALLER_SETS).map(|_| Mutex::new(Vec::new())).collect(),
        };
        (queues, worker_sets)
    }

    /// Worker `index`'s own set, from the deques `new` returned for it.
    pub(crate) fn worker_local<'a>(&self, index: usize, deques: &'a [Worker<Task>]) -> Local<'a> {
        Local { index, deques }
    }

    /// A free callers' set for the calling thread, if one is free.
    pub(crate) fn borrow(&self) -> Option<Borrowed<'_>> {
        let workers = self.sets.len() - CALLER_SETS;
        self.caller_sets.iter().enumerate().find_map(|(i, set)| {
            // A set whose borrower panicked was emptied on the way out (`Drop`): usable.
            let mut deques = match set.try_lock() {
                Ok(deques) => deques,
                Err(TryLockError::Poisoned(p)) => p.into_inner(),
                Err(TryLockError::WouldBlock) => return None,
            };
            if deques.is_empty() {
                *deques = band_deques();
                // Under the set's lock, so once: its stealers are published before its owner
                // queues anything (and raises its mask).
                let _ = self.sets[workers + i].stealers.set(stealers_of(&deques));
            }
            Some(Borrowed {
                queues: self,
                index: workers + i,
                deques,
            })
        })
    }

    /// Queues one task in `band`, as `push` would: the most common push, a node that made one
    /// successor ready.
    #[inline]
    pub(crate) fn push_one(&self, band: usize, task: Task, local: Option<Local<'_>>) {
        match local {
            Some(me) if me.deques[band].len() < LOCAL_ROOM => self.push_local(me, band, task),
            _ => self.share(band, std::iter::once(task)),
        }
    }

    /// Queues a task in the thread's own deque of `band`, which has room.
    #[inline]
    fn push_local(&self, me: Local<'_>, band: usize, task: Task) {
        me.deques[band].push(task);
        let mask = &self.sets[me.index].mask;
        let m = mask.load(Ordering::Relaxed);
        if m & (1 << band) == 0 {
            // Only the owner writes its mask: a load and a store suffice.
            mask.store(m | 1 << band, Ordering::Release);
        }
    }

    /// Queues tasks, each in its band (given with it): in the thread's own set while it has one
    /// with room, the rest in the band's shared queue, a run of them of one band under one lock.
    pub(crate) fn push(&self, tasks: impl IntoIterator<Item = (usize, Task)>, local: Option<Local<'_>>) {
        let mut tasks = tasks.into_iter().peekable();
        while let Some((band, task)) = tasks.next() {
            match local {
                Some(me) if me.deques[band].len() < LOCAL_ROOM => self.push_local(me, band, task),
                // The deque stays full while its owner pushes: the next tasks of the band go
                // along (a thief may have made room meanwhile, which costs nothing but order).
                _ => {
                    let same_band = std::iter::from_fn(|| tasks.next_if(|&(b, _)| b == band).map(|(_, t)| t));
                    self.share(band, std::iter::once(task).chain(same_band));
                }
            }
        }
    }

    /// Queues tasks of `band` in its shared queue, under one lock.
    fn share(&self, band: usize, tasks: impl Iterator<Item = Task>) {
        self.overflow[band].push(tasks, &self.overflowing, 1 << band);
    }

    /// The most critical task this thread can see: band by band from the most critical, its own
    /// deque, then the band's shared queue, then the other sets from a random one on (as TBB and Taskflow
    /// pick victims: thieves that all started at the same one would contend on it).
    #[inline]
    pub(crate) fn find(&self, me: Option<Local<'_>>, random_below: impl Fn(usize) -> usize) -> Option<Task> {
        let own_mask = me.map_or(0, |m| self.sets[m.index].mask.load(Ordering::Relaxed));
        if let Some(me) = me.filter(|_| own_mask != 0) {
            // The most critical band of the thread's own deques, where most tasks are found: the
            // scan below would take it first too, unless a more critical band may hold work
            // elsewhere, which band 0 never has to ask. (Empty: the scan lowers the bit.)
            let band = own_mask.trailing_zeros() as usize;
            let ahead = (1u32 << band) - 1;
            // Every set's bands, this one's included: only this thread adds bands to its own
            // set, and it has none ahead of `band`, so they add nothing ahead.
            if ahead == 0 || (self.overflowing.load(Ordering::Relaxed) | self.all_sets()) & ahead == 0 {
                if let Some(task) = me.deques[band].pop() {
                    return Some(task);
                }
            }
        }
        self.scan(me, own_mask, random_below)
    }

    /// The most critical band any queue may hold tasks in, as [`find`](Self::find) sees it from
    /// any thread (every thread scans every set, its own included); None if all look empty. A hint (the module docs): a stale bit only makes a
    /// band look busier than it is.
    #[inline]
    pub(crate) fn most_critical(&self) -> Option<usize> {
        let bands = self.overflowing.load(Ordering::Relaxed) | self.all_sets();
        (bands != 0).then(|| bands.trailing_zeros() as usize)
    }

    /// The bands any deque set may hold tasks in.
    #[inline]
    fn all_sets(&self) -> u32 {
        self.sets.iter().fold(0, |acc, s| acc | s.mask.load(Ordering::Relaxed))
    }

    /// The bands the other deque sets may hold tasks in.
    #[inline]
    fn others(&self, mine: usize) -> u32 {
        let masks = self.sets.iter().map(|s| s.mask.load(Ordering::Relaxed));
        masks
            .enumerate()
            .fold(0, |acc, (i, m)| if i == mine { acc } else { acc | m })
    }

    /// `find`, band by band (`own_mask`: the thread's own set's mask as `find` read it).
    #[inline(never)]
    fn scan(&self, me: Option<Local<'_>>, own_mask: u32, random_below: impl Fn(usize) -> usize) -> Option<Task> {
        let mine = me.map(|m| m.index);
        let shared = self.overflowing.load(Ordering::Relaxed);
        let others = self.others(mine.unwrap_or(usize::MAX));
        let mut bands = own_mask | shared | others;
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
            if shared & bit != 0 {
                if let Some(task) = self.take_shared(band, me) {
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
                // A set with a mask bit up has its deques.
                let Some(stealer) = self.sets[victim].stealers.get().map(|s| &s[band]) else {
                    continue;
                };
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

    /// A task of `band`'s shared queue, with a batch more moved to the thread's own deque if it
    /// has one.
    fn take_shared(&self, band: usize, me: Option<Local<'_>>) -> Option<Task> {
        let bit = 1u32 << band;
        let deque = me.map(|m| &m.deques[band]);
        let room = deque.map_or(0, |d| LOCAL_ROOM.saturating_sub(d.len()));
        let (task, moved) = self.overflow[band].take(deque, room, &self.overflowing, bit)?;
        if let Some(me) = me.filter(|_| moved > 0) {
            let mask = &self.sets[me.index].mask;
            mask.store(mask.load(Ordering::Relaxed) | bit, Ordering::Release);
        }
        Some(task)
    }

    /// Whether any task is queued anywhere (the queues themselves, not the masks).
    pub(crate) fn has_work(&self) -> bool {
        self.overflow.iter().any(|o| !o.is_empty())
            || self
                .sets
                .iter()
                .flat_map(|s| s.stealers.get().into_iter().flatten())
                .any(|s| !s.is_empty())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn node(node: u32) -> Task {
        Task::Node {
            run: std::ptr::null(),
            node,
            reserved: false,
        }
    }

    /// A callers' set, made when first borrowed, is where thieves and the sleep check look; a
    /// set given back and borrowed again keeps its deques. Fails if the new set's stealers are
    /// not published.
    #[test]
    fn a_callers_set_made_when_first_borrowed_is_seen_by_thieves() {
        let (queues, workers) = Queues::new(1);
        assert!(!queues.has_work());
        for round in 0..2 {
            let borrowed = queues.borrow().expect("a free set");
            queues.push([(3, node(round))], Some(borrowed.local()));
            assert!(queues.has_work(), "the sleep check sees the set's task");
            let thief = queues.worker_local(0, &workers[0]);
            match queues.find(Some(thief), |_| 0) {
                Some(Task::Node { node, .. }) => assert_eq!(node, round),
                _ => panic!("the worker found nothing in the caller's set"),
            }
            assert!(!queues.has_work());
            borrowed.give_back();
        }
    }
}
