//! The window: at most `cap` nodes of a run in flight at once, executing or pending (a node
//! whose kernel deferred its end holds its place until it ends, [`pending`](crate::exec::node::pending)).

use crate::sync::atomic::{AtomicU32, Ordering};
use crate::sync::{lock, Mutex};

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
    /// A window of `cap` places (at least one).
    pub(in crate::exec) fn new(cap: u32) -> Window {
        Window {
            cap: cap.max(1),
            running: AtomicU32::new(0),
            deferred: Mutex::new(Vec::new()),
        }
    }

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

#[cfg(all(test, loom))]
mod loom_tests {
    use super::Window;
    use loom::sync::Arc;
    use std::sync::atomic::{AtomicUsize, Ordering};

    /// Nodes on threads enter the window as the executor's tasks do; a node the window defers is
    /// restarted by the next node that leaves, and enters again. Checked in every interleaving:
    /// never more than `cap` nodes inside (a ghost count), every node runs exactly once, and the
    /// window ends empty.
    fn window(cap: u32, threads: u32) {
        loom::model(move || {
            let window = Arc::new(Window::new(cap));
            // Ghost state in std atomics, which loom does not schedule on.
            let inside = Arc::new(AtomicUsize::new(0));
            let ran = Arc::new(AtomicUsize::new(0));
            let handles: Vec<_> = (0..threads)
                .map(|node| {
                    let (window, inside, ran) = (window.clone(), inside.clone(), ran.clone());
                    loom::thread::spawn(move || {
                        let mut next = Some(node);
                        while let Some(node) = next.take() {
                            if !window.enter(node, false, || ()) {
                                break; // deferred: whoever leaves next restarts it
                            }
                            let now = inside.fetch_add(1, Ordering::SeqCst) + 1;
                            assert!(now <= cap as usize, "{now} nodes inside a window of {cap}");
                            ran.fetch_add(1, Ordering::SeqCst);
                            inside.fetch_sub(1, Ordering::SeqCst);
                            next = window.leave().map(|(n, _)| n);
                        }
                    })
                })
                .collect();
            for h in handles {
                h.join().unwrap();
            }
            assert_eq!(ran.load(Ordering::SeqCst), threads as usize, "every node ran once");
            assert!(window.deferred.lock().unwrap().is_empty(), "no node left deferred");
        });
    }

    #[test]
    fn loom_window_of_one_two_threads() {
        window(1, 2);
    }

    #[test]
    fn loom_window_of_one_three_threads() {
        window(1, 3);
    }
}
