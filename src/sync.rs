//! The synchronization types of the parts checked by loom: std's, or loom's in a build with
//! `--cfg loom`, as crossbeam does. So the loom models (`#[cfg(loom)]` tests beside the code,
//! run by scripts/test.sh) explore the real code's interleavings, not a copy of it.
//!
//! Checked this way: the executor's sleep (`exec::workers::sleep`: no lost wake-up), a run's
//! window (`exec::workers::window`: never more than its cap in flight, no deferred node lost) and
//! the memory budget's queue (`exec::run::budget`: every waiter let in and woken when its turn and
//! its room come, a queued run started exactly once, never more reserved than the budget; the
//! order of entry is tested without threads, in `budget/books.rs`).
//! The run-completion protocol as a whole is modelled by hand (tests/loom_run_protocol.rs): it
//! goes through crossbeam's deques, thread-locals and clocks, which loom cannot schedule.

#[cfg(not(loom))]
pub(crate) use std::{
    sync::{atomic, Condvar, Mutex, MutexGuard},
    thread,
};

#[cfg(loom)]
pub(crate) use loom::{
    sync::{atomic, Condvar, Mutex, MutexGuard},
    thread,
};

/// Locks `m`, through a poisoning: what the lock guards stays consistent across a panic.
pub(crate) fn lock<T>(m: &Mutex<T>) -> MutexGuard<'_, T> {
    m.lock().unwrap_or_else(|p| p.into_inner())
}
