//! Runs queued in the memory budget (`exec::run::budget`), set up by their callers: whoever makes
//! room starts them on the executor's threads, and their callers only wait.
//!
//! The thread that ends a queued run gives its reservation back and starts the runs that then
//! fit into its own deques, so that on a server whose requests queue, a thread that finishes one
//! takes the next at once, on its core, with no thread woken in between.

use std::sync::atomic::Ordering;

use crate::error::{err, Error, ErrorKind, Result};
use crate::exec::node::scratch::Scratch;
use crate::exec::run::budget::{Start, StartRuns};
use crate::exec::state::RunState;
use crate::exec::workers::queues::Local;
use crate::exec::workers::{Executor, Idle, Shared};

/// Starts runs from one of the executor's threads, into its own deques.
pub(super) struct FromThread<'a> {
    pub shared: &'a Shared,
    pub local: Option<Local<'a>>,
}

impl StartRuns for FromThread<'_> {
    fn start_runs(&self, runs: Vec<Start>) {
        self.shared.start_queued(runs, self.local);
    }
}

/// Starts runs from a thread outside the executor (a caller whose run left, or the budget
/// changed): into the shared queues.
impl StartRuns for Shared {
    fn start_runs(&self, runs: Vec<Start>) {
        self.start_queued(runs, None);
    }
}

impl Shared {
    /// Queues the roots of queued runs the budget admitted, counted in their `active` already.
    fn start_queued(&self, runs: Vec<Start>, local: Option<Local<'_>>) {
        for start in runs {
            // SAFETY: a queued run lives until it is over (`Start`), and it has not started.
            let state = unsafe { &*start.run };
            let queued = state.queued.as_ref().expect("a queued run says so");
            let waited = start.queued.elapsed().as_nanos().max(1) as u64;
            queued.waited_ns.store(waited, Ordering::Relaxed);
            if let Some(lowered) = start.refused_under {
                // Its nodes then run no kernel, and its caller hears why.
                queued.reserved.store(0, Ordering::Relaxed);
                state.fail(Error::new(
                    ErrorKind::MemoryLimit,
                    format!(
                        "{} needs more than the memory budget, lowered to {lowered} bytes while it waited",
                        state.graph.describe()
                    ),
                ));
            }
            self.push(start.run, &state.prio.roots, local);
        }
    }
}

impl Executor {
    /// Waits, parked, until `state` (queued in the budget) is over: the threads run it alone,
    /// and the task that ends it unparks this thread.
    pub(in crate::exec) fn wait_queued(&self, state: &RunState<'_>) {
        let urgent = state.urgent();
        if urgent {
            self.shared.urgent_runs.fetch_add(1, Ordering::SeqCst);
        }
        // A wake-up that finds the run going (a spurious one, or one left from an earlier wait)
        // parks again; an unpark before the park makes it return at once.
        while state.active.load(Ordering::Acquire) != 0 {
            std::thread::park();
        }
        if urgent {
            self.shared.urgent_runs.fetch_sub(1, Ordering::SeqCst);
        }
    }
}

impl Executor {
    /// Starts the thread that stands in for the callers, once: from the first budget on, a run
    /// that queues is run by the executor's threads alone while its caller waits, so without it
    /// the queued runs would have one thread fewer than the executor was made with.
    pub(super) fn start_stand_in(&self) -> Result<()> {
        let mut stand_in = self.stand_in.lock().unwrap_or_else(|p| p.into_inner());
        if stand_in.is_some() {
            return Ok(());
        }
        let shared = self.shared.clone();
        let track = self.shared.threads as u32;
        let spawned = std::thread::Builder::new()
            .name("graphsched-callers".into())
            .spawn(move || shared.stand_in_main(track));
        *stand_in = Some(spawned.or_else(|e| {
            err(
                ErrorKind::OutOfMemory,
                format!("could not start the thread that runs queued runs: {e}"),
            )
        })?);
        Ok(())
    }
}

impl Shared {
    /// The stand-in's loop: a worker's, with no deque set of its own (it takes from the shared
    /// queues and the workers' deques, and queues what it makes ready in the shared ones) and
    /// no cache slot in any run (as a caller helping a run not its own).
    fn stand_in_main(&self, track: u32) {
        crate::exec::run::budget::mark_worker();
        crate::exec::node::scratch::TRACK.with(|t| t.set(track));
        let mut scratch = Scratch {
            thread: track,
            ..Scratch::default()
        };
        let mut idle = Idle::default();
        loop {
            if let Some(task) = self.find_work(None) {
                scratch.slot = None;
                self.run_task(task, None, &mut scratch, None);
                idle = Idle::default();
                continue;
            }
            if self.shutdown.load(Ordering::Acquire) {
                return;
            }
            self.wait_for_work(&mut idle, || !self.shutdown.load(Ordering::Acquire) && !self.has_work());
        }
    }
}
