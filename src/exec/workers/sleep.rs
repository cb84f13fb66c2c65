//! Idle threads: an event count that lets them sleep without a lost wake-up, and costs a busy
//! executor no lock.

use std::sync::atomic::{fence, AtomicUsize, Ordering};
use std::sync::{Condvar, Mutex};

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
        let key = *self.epoch.lock().unwrap_or_else(|e| e.into_inner());
        self.sleepers.fetch_add(1, Ordering::SeqCst);
        // Pairs with the fence in `notify`: either the work pushed before it is seen by `idle`,
        // or the notifier sees this sleeper and moves the key.
        fence(Ordering::SeqCst);
        if idle() {
            let mut epoch = self.epoch.lock().unwrap_or_else(|e| e.into_inner());
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
        *self.epoch.lock().unwrap_or_else(|e| e.into_inner()) += 1;
        for _ in 0..count {
            self.wake.notify_one();
        }
    }

    pub(super) fn wake_all(&self) {
        *self.epoch.lock().unwrap_or_else(|e| e.into_inner()) += 1;
        self.wake.notify_all();
    }
}
