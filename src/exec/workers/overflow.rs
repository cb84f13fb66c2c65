//! A band's shared queue: the tasks of threads that have no deque set, and those beyond a set's
//! room ([`queues`](crate::exec::workers::queues)).
//!
//! A FIFO under a mutex, used in batches as Go's global run queue is: a thread queues the tasks
//! of a band it made ready a batch per lock, and a thread looking for work takes one task and
//! moves a batch more to its own deque under one lock. So the lock is taken per batch, never per task:
//! a flood of ready nodes (a fan-out) costs no atomic per task. The queue keeps its buffer between
//! runs, so a steady run allocates nothing here (crossbeam's injector, which this replaced,
//! allocated a block per 63 tasks and fenced every push).
//!
//! Two figures leave the lock for readers that do not take it, both written only under it, so
//! that each matches the queue at every unlock:
//! - `len`, read by `Queues::has_work`, which decides whether a thread may sleep. The sleep
//!   protocol orders it (`Sleep::sleep` and `notify`: a SeqCst fence on each side between its
//!   own write and its read of the other's), as it did the injector's own state.
//! - The band's bit in the queues' `overflowing` mask, a hint of where to look: raised by the
//!   push that fills the empty queue, lowered by the take that empties it.

use std::collections::VecDeque;
use std::mem::MaybeUninit;
use std::sync::atomic::{AtomicU32, AtomicUsize, Ordering};
use std::sync::Mutex;

use crossbeam_deque::Worker;

use crate::exec::workers::Task;

/// Most tasks one push queues, and one take moves to the taker's deque besides the one it
/// returns, under one lock.
const BATCH: usize = 32;

pub(in crate::exec) struct Overflow {
    tasks: Mutex<VecDeque<Task>>,
    len: AtomicUsize,
}

impl Overflow {
    pub(crate) fn new() -> Overflow {
        Overflow {
            tasks: Mutex::new(VecDeque::new()),
            len: AtomicUsize::new(0),
        }
    }

    /// Whether the queue was empty at its last unlock (see the module docs for what orders it).
    pub(crate) fn is_empty(&self) -> bool {
        self.len.load(Ordering::Acquire) == 0
    }

    /// Queues `tasks` at the back, [`BATCH`] under each lock (a thread taking work waits for
    /// one batch, not for a whole fan-out), raising `bit` in `mask` when the queue was empty.
    #[inline]
    pub(crate) fn push(&self, tasks: impl IntoIterator<Item = Task>, mask: &AtomicU32, bit: u32) {
        let mut tasks = tasks.into_iter();
        // The batch is gathered before the lock: nothing of the caller's runs under it, so the
        // queue, its length and its bit change together or not at all.
        // Uninitialized: filling the whole array first cost 240 instructions a push, most pushes
        // being of one task (benches/c/instructions.sh, the tree).
        let mut batch: [MaybeUninit<Task>; BATCH] = [const { MaybeUninit::uninit() }; BATCH];
        loop {
            let n = batch
                .iter_mut()
                .zip(tasks.by_ref())
                .map(|(b, t)| _ = b.write(t))
                .count();
            if n == 0 {
                return;
            }
            let mut queue = self.tasks.lock().unwrap_or_else(|e| e.into_inner());
            let was_empty = queue.is_empty();
            // SAFETY: the first `n` entries were written just above, and each is moved out once
            // (the array never drops what it holds).
            queue.extend(batch[..n].iter().map(|t| unsafe { t.assume_init_read() }));
            if was_empty {
                mask.fetch_or(bit, Ordering::Relaxed);
            }
            // Release, after the bit: whoever sees the length (Acquire) sees the bit.
            self.len.store(queue.len(), Ordering::Release);
            drop(queue);
            if n < BATCH {
                return;
            }
        }
    }

    /// The task at the front, with up to half the rest (at most [`BATCH`] and `room`) moved to
    /// `into`, the taker's own deque of the band, under one lock; lowers `bit` in `mask` if that
    /// empties the queue. Returns how many tasks moved, besides the one returned.
    pub(crate) fn take(
        &self,
        into: Option<&Worker<Task>>,
        room: usize,
        mask: &AtomicU32,
        bit: u32,
    ) -> Option<(Task, usize)> {
        if self.is_empty() {
            return None;
        }
        let mut queue = self.tasks.lock().unwrap_or_else(|e| e.into_inner());
        let first = queue.pop_front()?;
        let mut moved = 0;
        if let Some(deque) = into {
            moved = queue.len().div_ceil(2).min(BATCH).min(room);
            for task in queue.drain(..moved) {
                deque.push(task);
            }
        }
        if queue.is_empty() {
            mask.fetch_and(!bit, Ordering::Relaxed);
        }
        self.len.store(queue.len(), Ordering::Release);
        Some((first, moved))
    }
}
