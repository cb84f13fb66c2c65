//! How a run stops: its first error (kept, later ones dropped), cancellation and the deadline,
//! read between nodes.

use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Mutex, MutexGuard};
use std::time::Instant;

use crate::error::{Error, ErrorKind};
use crate::exec::run::CancelToken;
use crate::exec::state::RunState;

/// What stops a run: its first error, a cancellation, its deadline.
pub(in crate::exec) struct Stop<'r> {
    /// Set (Release) with the first error, read (Acquire) before starting a node; the error
    /// itself is behind `error`'s lock.
    failed: AtomicBool,
    error: Mutex<Option<Error>>,
    /// Stops the run between nodes.
    cancel: Option<&'r CancelToken>,
    deadline: Option<Instant>,
}

impl<'r> Stop<'r> {
    pub(in crate::exec) fn new(cancel: Option<&'r CancelToken>, deadline: Option<Instant>) -> Self {
        Stop {
            failed: AtomicBool::new(false),
            error: Mutex::new(None),
            cancel,
            deadline,
        }
    }

    /// Whether the run has a deadline (a driver that never reads the clock must not take it).
    pub(in crate::exec) fn has_deadline(&self) -> bool {
        self.deadline.is_some()
    }

    /// Whether the run's token was cancelled (without recording it: see
    /// [`RunState::stopped`]).
    pub(in crate::exec) fn cancelled(&self) -> bool {
        self.cancel.is_some_and(CancelToken::is_cancelled)
    }
}

impl RunState<'_> {
    pub(crate) fn failed(&self) -> bool {
        self.stop.failed.load(Ordering::Acquire)
    }

    /// Whether the run was cancelled or passed its deadline: if so, records it as the run's
    /// error (once) so that nothing new starts. Asked before every node: a run with neither a
    /// deadline nor a cancellation so far answers from one load, inline.
    #[inline]
    pub(crate) fn stopped(&self) -> bool {
        if !self.stop.cancelled() && !self.stop.has_deadline() {
            return false;
        }
        self.stopped_now()
    }

    #[cold]
    #[inline(never)]
    fn stopped_now(&self) -> bool {
        let why = if self.stop.cancelled() {
            ErrorKind::Cancelled
        } else if self.stop.deadline.is_some_and(|d| Instant::now() >= d) {
            ErrorKind::DeadlineExceeded
        } else {
            return false;
        };
        let message = match why {
            ErrorKind::Cancelled => "the run was cancelled",
            _ => "the run passed its deadline",
        };
        self.fail(Error::new(why, message));
        true
    }

    /// The run's error, once it is over (its threads' counts gathered): a stopped run's says
    /// how far it got.
    pub(crate) fn take_error(&mut self) -> Option<Error> {
        if !*self.stop.failed.get_mut() {
            return None;
        }
        let e = self.stop.error.get_mut().unwrap_or_else(|p| p.into_inner()).take()?;
        if !matches!(e.kind(), ErrorKind::Cancelled | ErrorKind::DeadlineExceeded) {
            return Some(e);
        }
        let done = self.tally.nodes_run();
        let total = self.graph.node_count() - self.graph.graph_inputs().len();
        Some(Error::new(
            e.kind(),
            format!("{}, with {done} of {total} nodes done", e.message()),
        ))
    }

    /// Records the run's error if it is the first; later ones are dropped.
    pub(crate) fn fail(&self, e: Error) {
        let mut slot = self.stop.error.lock().unwrap_or_else(|p| p.into_inner());
        if slot.is_none() {
            *slot = Some(e);
            self.stop.failed.store(true, Ordering::Release);
        }
    }

    #[cold]
    pub(in crate::exec) fn internal_error(&self, node: u32, when: &str, panic: &(dyn std::any::Any + Send)) -> Error {
        Error::new(
            ErrorKind::KernelPanicked,
            format!(
                "internal error {when} node {}: {}",
                self.graph.node_label(node),
                panic_text(panic)
            ),
        )
    }
}

pub(in crate::exec) fn lock<T>(m: &Mutex<T>) -> MutexGuard<'_, T> {
    m.lock().unwrap_or_else(|p| p.into_inner())
}

pub(in crate::exec) fn panic_text(panic: &(dyn std::any::Any + Send)) -> &str {
    panic
        .downcast_ref::<&str>()
        .copied()
        .or_else(|| panic.downcast_ref::<String>().map(String::as_str))
        .unwrap_or("(no message)")
}
