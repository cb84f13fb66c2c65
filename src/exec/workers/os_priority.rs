//! The OS priority of the executor's threads, for serving urgent runs beside others.
//!
//! Priorities order the nodes waiting in the queues, but a kernel that has started cannot be
//! preempted: an urgent request that arrives while every core runs a long kernel of another
//! request waits for one to end (PP-OCRv4's detector has a 8.7 ms node). Only the OS can
//! preempt. So an executor can be told to run its own threads at a lower OS priority (a higher
//! nice value, [`Executor::set_background_nice`](crate::exec::Executor::set_background_nice)):
//! then every normal-priority run under its memory budget goes to those threads while its caller
//! waits, and an urgent run goes on its caller's thread, at the caller's priority, which the OS
//! lets run ahead of the executor's threads. A normal run is never starved: the OS shares a core
//! by weight (nice 10 against 0 gets about a tenth), it does not idle a thread.
//!
//! An unprivileged process can raise a thread's nice value but never lower it again (the
//! default `RLIMIT_NICE` is 0), so the value only goes up, and the executor's threads keep it.

use std::sync::atomic::{AtomicI32, Ordering};
use std::sync::Mutex;

use crate::error::{err, ErrorKind, Result};

/// The nice value of the executor's threads (0: as they were made), and the threads.
#[derive(Default)]
pub(super) struct OsPriority {
    /// Read without the lock by every run's start; written under it.
    nice: AtomicI32,
    /// The OS ids of the executor's threads (workers, and the callers' stand-in once started).
    threads: Mutex<Vec<i32>>,
}

impl OsPriority {
    /// Registers the calling thread, one of the executor's, as it starts, and gives it the
    /// nice value set so far. Under the lock: a value set meanwhile reaches it either way.
    pub(super) fn join(&self) {
        let mut threads = self.threads.lock().unwrap_or_else(|p| p.into_inner());
        let id = this_thread();
        threads.push(id);
        let nice = self.nice.load(Ordering::Relaxed);
        if nice > 0 {
            // A thread that cannot take it runs at its priority; the setter heard for the others.
            let _ = set_nice(id, nice);
        }
    }

    /// Gives every thread of the executor `nice`, 1 to 19, not below the value set before.
    pub(super) fn set(&self, nice: i32) -> Result<()> {
        let threads = self.threads.lock().unwrap_or_else(|p| p.into_inner());
        let before = self.nice.load(Ordering::Relaxed);
        if !(1..=19).contains(&nice) || nice < before {
            return err(
                ErrorKind::InvalidArgument,
                format!(
                    "nice value {nice} for the executor's threads: it must be 1 to 19 and at least the value set before ({before}), since a process may not raise its threads' priority back"
                ),
            );
        }
        for &id in threads.iter() {
            set_nice(id, nice)?;
        }
        self.nice.store(nice, Ordering::Relaxed);
        Ok(())
    }

    /// The value set (0: none; above 0, normal runs under the budget go to the threads).
    pub(super) fn nice(&self) -> i32 {
        self.nice.load(Ordering::Relaxed)
    }
}

#[cfg(target_os = "linux")]
fn this_thread() -> i32 {
    // SAFETY: gettid takes nothing and cannot fail.
    unsafe { libc::syscall(libc::SYS_gettid) as i32 }
}

#[cfg(target_os = "linux")]
fn set_nice(thread: i32, nice: i32) -> Result<()> {
    // SAFETY: a plain system call on a thread id of this process; Linux sets one thread's
    // nice value when given its id.
    if unsafe { libc::setpriority(libc::PRIO_PROCESS, thread as libc::id_t, nice) } == 0 {
        return Ok(());
    }
    err(
        ErrorKind::InvalidArgument,
        format!(
            "could not set an executor thread's nice value to {nice}: {}",
            std::io::Error::last_os_error()
        ),
    )
}

#[cfg(not(target_os = "linux"))]
fn this_thread() -> i32 {
    0
}

#[cfg(not(target_os = "linux"))]
fn set_nice(_thread: i32, nice: i32) -> Result<()> {
    err(
        ErrorKind::InvalidArgument,
        format!("nice value {nice} for the executor's threads: only Linux sets one thread's priority"),
    )
}
