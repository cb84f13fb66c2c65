//! Idle threads: an event count that lets them sleep without a lost wake-up, and costs a busy
//! executor no lock.

use crate::sync::atomic::{fence, AtomicUsize, Ordering};
use crate::sync::{lock, Condvar, Mutex};

use crate::exec::padded::CachePadded;

/// An event count: sleepers take a key, check once more for work, and sleep until the key
/// moves; notifiers move it only when someone sleeps, so a busy executor never takes the lock.
pub(in crate::exec) struct Sleep {
    /// Threads between registering to sleep and waking. SeqCst with the fences in `sleep` and
    /// `notify`: a notifier that reads 0 here is ordered before the sleeper's registration, so
    /// the sleeper's last look for work sees what the notifier queued.
    /// Read on every push by every thread: on its own cache line.
    sleepers: CachePadded<AtomicUsize>,
    /// Moves on every wake-up; a sleeper waits until it differs from the key it took.
    epoch: Mutex<u64>,
    wake: Condvar,
}

impl Sleep {
    pub(super) fn new() -> Sleep {
        Sleep {
            sleepers: CachePadded(AtomicUsize::new(0)),
            epoch: Mutex::new(0),
            wake: Condvar::new(),
        }
    }

    /// Sleeps unless `idle()` turns false after registering as a sleeper.
    pub(super) fn sleep(&self, idle: impl Fn() -> bool) {
        let key = *lock(&self.epoch);
        self.sleepers.fetch_add(1, Ordering::SeqCst);
        // Pairs with the fence in `notify`: either the work pushed before it is seen by `idle`,
        // or the notifier sees this sleeper and moves the key.
        fence(Ordering::SeqCst);
        if idle() {
            let mut epoch = lock(&self.epoch);
            while *epoch == key {
                epoch = self.wake.wait(epoch).unwrap_or_else(|e| e.into_inner());
            }
        }
        self.sleepers.fetch_sub(1, Ordering::SeqCst);
    }

    /// Wakes up to `count` sleepers, if any sleep, after `count` tasks were queued (a thread
    /// per task: any awake thread takes any run's work), or all of them when a run ended.
    pub(super) fn notify(&self, count: usize) {
        fence(Ordering::SeqCst);
        let sleepers = self.sleepers.load(Ordering::SeqCst);
        if sleepers == 0 {
            return;
        }
        if count >= sleepers {
            return self.wake_all();
        }
        // The key moves once; each `notify_one` lets one waiter see it moved. The others keep
        // waiting (a spurious wake-up only sends one looking for work early).
        *lock(&self.epoch) += 1;
        for _ in 0..count {
            self.wake.notify_one();
        }
    }

    pub(super) fn wake_all(&self) {
        *lock(&self.epoch) += 1;
        self.wake.notify_all();
    }
}

#[cfg(all(test, loom))]
mod loom_tests {
    use super::Sleep;
    use loom::sync::atomic::{AtomicUsize, Ordering};
    use loom::sync::Arc;

    /// Threads that find no work sleep, and work queued with a notification always wakes enough
    /// of them: loom fails the model if every thread ends up blocked (a lost wake-up).
    fn no_lost_wake_up(sleepers: usize, notify_all_at_once: bool) {
        loom::model(move || {
            let sleep = Arc::new(Sleep::new());
            let work = Arc::new(AtomicUsize::new(0));
            let threads: Vec<_> = (0..sleepers)
                .map(|_| {
                    let (sleep, work) = (sleep.clone(), work.clone());
                    loom::thread::spawn(move || loop {
                        let n = work.load(Ordering::Acquire);
                        if n > 0 {
                            if work
                                .compare_exchange(n, n - 1, Ordering::AcqRel, Ordering::Acquire)
                                .is_ok()
                            {
                                return;
                            }
                            continue;
                        }
                        sleep.sleep(|| work.load(Ordering::Acquire) == 0);
                    })
                })
                .collect();
            match notify_all_at_once {
                true => {
                    work.fetch_add(sleepers, Ordering::AcqRel);
                    sleep.notify(sleepers);
                }
                false => {
                    for _ in 0..sleepers {
                        work.fetch_add(1, Ordering::AcqRel);
                        sleep.notify(1);
                    }
                }
            }
            for t in threads {
                t.join().unwrap();
            }
            assert_eq!(work.load(Ordering::Acquire), 0, "every item was taken");
        });
    }

    #[test]
    fn loom_one_sleeper_is_woken() {
        no_lost_wake_up(1, false);
    }

    #[test]
    fn loom_two_sleepers_woken_one_at_a_time() {
        no_lost_wake_up(2, false);
    }

    #[test]
    fn loom_two_sleepers_woken_at_once() {
        no_lost_wake_up(2, true);
    }
}
