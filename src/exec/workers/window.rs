//! The window: at most `cap` nodes of a run in flight at once, executing or pending (a node
//! whose kernel deferred its end holds its place until it ends, [`pending`](crate::exec::node::pending)).

use std::sync::atomic::{AtomicU32, Ordering};
use std::sync::Mutex;

use crate::exec::state::lock;

/// The window: at most `cap` nodes of the run in flight at once. A task that finds the window full
/// waits in `deferred`; each node that leaves starts one deferred task. Entering and deferring
/// happen under the lock the leaver takes, so no deferred task is forgotten.
pub(in crate::exec) struct Window {
    pub(in crate::exec) cap: u32,
    /// Nodes of the run in flight now, executing or pending (a place taken optimistically and
    /// given back if over `cap`). AcqRel; what keeps a deferred task from being forgotten is the `deferred` lock,
    /// which both the last try of `enter` and `leave` take after changing the count.
    pub(in crate::exec) running: AtomicU32,
    /// Deferred nodes, with whether their memory is reserved already (admitted while waiting).
    pub(in crate::exec) deferred: Mutex<Vec<(u32, bool)>>,
}

impl Window {
    /// Takes a place in the window, or defers the node: false if it must wait. `count` runs
    /// under the lock, before the node goes on the list: it gives the deferred entry a place
    /// of its own in the run's `active` count, so that the task that defers it still holds its
    /// own place while it lets go of the lock (a leaver may restart the entry, and the run end,
    /// the moment the lock is free).
    pub(crate) fn enter(&self, node: u32, reserved: bool, count: impl FnOnce()) -> bool {
        if self.running.fetch_add(1, Ordering::AcqRel) < self.cap {
            return true;
        }
        self.running.fetch_sub(1, Ordering::AcqRel);
        let mut deferred = lock(&self.deferred);
        // Retry under the lock `leave` takes: a place freed meanwhile is seen here.
        if self.running.fetch_add(1, Ordering::AcqRel) < self.cap {
            return true;
        }
        self.running.fetch_sub(1, Ordering::AcqRel);
        count();
        deferred.push((node, reserved));
        false
    }

    /// Gives the place back; returns a deferred node to start, if any, and whether its memory
    /// is reserved.
    pub(crate) fn leave(&self) -> Option<(u32, bool)> {
        let before = self.running.fetch_sub(1, Ordering::AcqRel);
        debug_assert!(before > 0, "a window place given back that nobody held");
        lock(&self.deferred).pop()
    }
}
