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
            if state.urgent() {
                // Counted from its start, as a run its caller drives (`Executor::drive`); its
                // caller takes it back off when the run is over (`wait_queued`).
                self.urgent_runs.fetch_add(1, Ordering::SeqCst);
            }
            // The stand-in works while this run goes; its last task takes it back off.
            self.queued_runs.fetch_add(1, Ordering::Relaxed);
            self.push(start.run, &state.prio.roots, local);
            self.stand_in_sleep.notify(1);
        }
    }
}

impl Executor {
    /// Waits, parked, until `state` (queued in the budget) is over: the threads run it alone,
    /// and the task that ends it unparks this thread.
    pub(in crate::exec) fn wait_queued(&self, state: &RunState<'_>) {
        // A wake-up that finds the run going (a spurious one, or one left from an earlier wait)
        // parks again; an unpark before the park makes it return at once.
        while state.active.load(Ordering::Acquire) != 0 {
            std::thread::park();
        }
        if state.urgent() {
            // Counted when it started (`start_queued`), which it did: it is over.
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
        let spawned = std::thread::Builder::new()
            .name("graphsched-callers".into())
            .spawn(move || shared.stand_in_main());
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
    /// The stand-in's loop: a worker's while queued runs go, with no deque set of its own (it
    /// takes from the shared queues and the workers' deques, and queues what it makes ready in
    /// the shared ones), no cache slot in any run (as a caller helping a run not its own), and
    /// the callers' track in traces and observations (0). With no queued run going, the callers
    /// drive their runs, and one more thread would only take their cores: it sleeps apart from
    /// the workers then (`stand_in_sleep`), where a notification meant for them cannot wake it
    /// instead of them. Woken from the workers' sleep it always looks for work first, so a
    /// notification that did reach it is never dropped.
    fn stand_in_main(&self) {
        crate::exec::run::budget::mark_worker();
        self.os_priority.join();
        let mut scratch = Scratch::default();
        let mut idle = Idle::default();
        let stopping = || self.shutdown.load(Ordering::Acquire);
        loop {
            if let Some(task) = self.find_work(None) {
                scratch.slot = None;
                self.run_task(task, None, &mut scratch, None);
                idle = Idle::default();
                continue;
            }
            if stopping() {
                return;
            }
            if self.queued_runs.load(Ordering::Relaxed) == 0 {
                self.stand_in_sleep
                    .sleep(|| !stopping() && self.queued_runs.load(Ordering::Relaxed) == 0);
                idle = Idle::default();
                continue;
            }
            self.wait_for_work(&mut idle, || !stopping() && !self.has_work());
        }
    }
}
