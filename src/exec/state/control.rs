//! How a run stops: its first error (kept, later ones dropped), cancellation and the deadline,
//! read between nodes.

use std::sync::atomic::Ordering;
use std::sync::{Mutex, MutexGuard};
use std::time::Instant;

use crate::error::{Error, ErrorKind};
use crate::exec::run::CancelToken;
use crate::exec::state::RunState;

impl RunState<'_> {
    pub(crate) fn failed(&self) -> bool {
        self.failed.load(Ordering::Acquire)
    }

    /// Whether the run was cancelled or passed its deadline: if so, records it as the run's
    /// error (once) so that nothing new starts.
    pub(crate) fn stopped(&self) -> bool {
        let why = if self.cancel.is_some_and(CancelToken::is_cancelled) {
            ErrorKind::Cancelled
        } else if self.deadline.is_some_and(|d| Instant::now() >= d) {
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
        if !*self.failed.get_mut() {
            return None;
        }
        let e = self.error.get_mut().unwrap_or_else(|p| p.into_inner()).take()?;
        if !matches!(e.kind(), ErrorKind::Cancelled | ErrorKind::DeadlineExceeded) {
            return Some(e);
        }
        let done = self.nodes_run.load(Ordering::Relaxed);
        let total = self.graph.node_count() - self.graph.graph_inputs().len();
        Some(Error::new(
            e.kind(),
            format!("{}, with {done} of {total} nodes done", e.message()),
        ))
    }

    /// Records the run's error if it is the first; later ones are dropped.
    pub(crate) fn fail(&self, e: Error) {
        let mut slot = self.error.lock().unwrap_or_else(|p| p.into_inner());
        if slot.is_none() {
            *slot = Some(e);
            self.failed.store(true, Ordering::Release);
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
