//! What the queues hold, and how a thread runs it: a task is a node of a run (with the chain of
//! continuations it leads to), a helper of a parallel loop, or the end of a pending node.
//!
//! A task of a run is counted in the run's `active` count from the moment it is queued until it
//! leaves it at its end (`RunState`'s protocol): the run, and so the pointer a task holds, lives
//! until that count reaches 0.

use std::panic::{catch_unwind, AssertUnwindSafe};
use std::sync::atomic::Ordering;
use std::sync::Arc;

use crate::error::{Error, ErrorKind};
use crate::exec::node::parallel::Job;
use crate::exec::node::pending::PendingNode;
use crate::exec::node::scratch::Scratch;
use crate::exec::state::{panic_text, RunState};
use crate::exec::workers::queued::FromThread;
use crate::exec::workers::queues::Local;
use crate::exec::workers::Shared;

/// A queued piece of work.
pub(in crate::exec) enum Task {
    /// A node of a run. `reserved`: the node's output bytes are reserved already (under a memory
    /// limit: it was admitted while waiting); otherwise it is admitted when it starts.
    Node {
        run: *const RunState<'static>,
        node: u32,
        reserved: bool,
    },
    /// A helper of a parallel loop (`Shared::push_job`).
    Help(Arc<Job>),
    /// The end of a pending node whose completion came (`Shared::push_end`): it holds the
    /// node's place in its run's `active` count.
    End(Arc<PendingNode>),
}

// A task is two words: the deques copy it on every push and steal.
const _: () = assert!(std::mem::size_of::<Task>() == 16);

// SAFETY: a node task points at a run that outlives it: the run's caller waits until the run's
// `active` count, which includes every queued task, reaches 0 before dropping the run. Jobs and
// pending nodes are `Send + Sync`.
unsafe impl Send for Task {}

/// How a task's chain ended.
enum Chain {
    /// Every node it took on ran (or failed): the task leaves the run's `active` count.
    Done,
    /// A kernel deferred its node's end ([`pending`](crate::exec::node::pending)): the node keeps the task's place in
    /// `active` and in the window until the task that ends it (`Task::End`) runs.
    Pending,
}

/// Where a task's chain starts.
enum First {
    /// Executing a node, whose memory may be reserved already.
    Node { node: u32, reserved: bool },
    /// Ending a pending node whose completion came.
    End(Arc<PendingNode>),
}

impl Shared {
    /// Executes a task and the chain of continuations it leads to. `own` is the run a calling
    /// thread drives: its cache slot there is 0, and it has none in runs it only helps.
    pub(super) fn run_task(
        &self,
        task: Task,
        local: Option<Local<'_>>,
        scratch: &mut Scratch,
        own: Option<*const RunState<'static>>,
    ) {
        let (run, first) = match task {
            Task::Help(job) => return job.help(true),
            Task::End(pending) => (pending.run().0, First::End(pending)),
            Task::Node { run, node, reserved } => (run, First::Node { node, reserved }),
        };
        if own.is_some() {
            // A calling thread: its cache slot is 0 in its own run, it has none in others.
            scratch.slot = (own == Some(run)).then_some(0);
        }
        // SAFETY: see `Task`: the run is alive while this task is counted in `active`.
        let state = unsafe { &*run };
        // Node execution catches panics itself; this is the backstop for the rest of the chain,
        // so that a bug here fails the run instead of killing the thread and leaving `active`
        // above 0 for ever. A window place taken and not given back would strand the deferred
        // tasks, so it is given back here.
        let in_window = std::cell::Cell::new(false);
        // Set once the task's place in `active` belongs to a pending node: from then on the run
        // may end on another thread at any moment, so not even the backstop may touch it.
        let handed_over = std::cell::Cell::new(false);
        let chain = catch_unwind(AssertUnwindSafe(|| {
            self.run_chain(run, first, local, scratch, &in_window, &handed_over)
        }));
        if matches!(chain, Ok(Chain::Pending)) || handed_over.get() {
            // `run_chain` handed the run this task's counts before letting go.
            return;
        }
        if let Err(panic) = chain {
            state.fail(Error::new(
                ErrorKind::KernelPanicked,
                format!("internal error in the executor: {}", panic_text(&*panic)),
            ));
            scratch.ready.clear();
            scratch.admitted.clear();
            if in_window.get() {
                if let Some(deferred) = state.window.as_ref().and_then(|w| w.leave()) {
                    self.restart(run, deferred, local);
                }
            }
        }
        state.flush(scratch);
        // This task is done: leave the run's active count. The task that leaves it last must
        // first give nodes still waiting for memory their chance (or fail the run), since no
        // release will come after it. Only an active task adds to the count, so while it reads 1
        // this task is alone and the check cannot go stale before the decrement below.
        let mut active = state.active.load(Ordering::Acquire);
        // A run queued in the budget: its caller, and the reservation this task gives back if it
        // ends the run (`exec::workers::queued`).
        let mut queued = None;
        loop {
            if active == 1 && state.has_gate() {
                scratch.ready.clear();
                state.resolve_stall(&mut scratch.ready);
                let admitted = std::mem::take(&mut scratch.ready);
                let any = !admitted.is_empty();
                if any {
                    state.active.fetch_add(admitted.len(), Ordering::AcqRel);
                    self.push_reserved(run, &admitted, local);
                }
                scratch.ready = admitted;
                if any {
                    // The admitted tasks may run, make others wait and finish before the load
                    // below: a count back at 1 is then not the same situation as before, and
                    // the stall check must run again. Only a check that admitted nothing,
                    // while this task was alone, lets it leave the count at 0.
                    active = state.active.load(Ordering::Acquire);
                    continue;
                }
            }
            debug_assert!(active > 0, "a task leaves a run it is counted in");
            if let (1, Some(q), None) = (active, &state.queued, &queued) {
                // This task ends a queued run (alone at 1, and the stall check admitted
                // nothing): nothing else adds to the count now, so the run is over once this
                // task leaves it. Its reservation goes back first, while the run is still
                // counted, so that its caller, which may see the count at 0 before it is
                // unparked, returns with it given back, and its next run finds the room; the
                // runs it makes room for start on this thread. A failed run's leftovers go back
                // to the pool when its caller drops it, and its reservation with them.
                if !state.failed() {
                    let reserved = q.reserved.swap(0, Ordering::Relaxed);
                    self.budget.leave(reserved, &FromThread { shared: self, local });
                }
                self.queued_runs.fetch_sub(1, Ordering::Relaxed);
                queued = Some(q.caller.clone());
            }
            match state
                .active
                .compare_exchange_weak(active, active - 1, Ordering::AcqRel, Ordering::Acquire)
            {
                Ok(1) => {
                    // The run is over; from here on nothing of it may be touched.
                    if let Some(caller) = queued.take() {
                        caller.unpark();
                        return;
                    }
                    // Its caller may be asleep waiting for this, and nothing else would wake it:
                    // unless this thread is that caller, every sleeper wakes (the caller among
                    // them).
                    if own != Some(run) {
                        self.sleep.notify(usize::MAX);
                    }
                    return;
                }
                Ok(_) => return,
                Err(now) => active = now,
            }
        }
    }

    /// The body of `run_task`: the task's node (or the end of a pending one), then the
    /// continuations it keeps. `in_window` tells the caller whether a window place is held,
    /// should this panic.
    fn run_chain(
        &self,
        run: *const RunState<'static>,
        first: First,
        local: Option<Local<'_>>,
        scratch: &mut Scratch,
        in_window: &std::cell::Cell<bool>,
        handed_over: &std::cell::Cell<bool>,
    ) -> Chain {
        // SAFETY: see `Task`: the run is alive while this task is counted in `active`.
        let state = unsafe { &*run };
        let (mut node, mut reserved, mut pending) = match first {
            First::Node { node, reserved } => (node, reserved, None),
            // A pending node holds its window place (`exec::node::pending`).
            First::End(p) => (p.run().1, true, Some(p)),
        };
        loop {
            scratch.ready.clear();
            scratch.admitted.clear();
            if let Some(p) = pending.take() {
                in_window.set(state.window.is_some());
                state.end_pending_node(&p, scratch);
            } else {
                if let Some(window) = &state.window {
                    // Deferred: the entry gets its own place in `active` (under the window's
                    // lock, see `Window::enter`); the next node that leaves the window restarts
                    // it, and this task ends as any other.
                    let count = || _ = state.active.fetch_add(1, Ordering::AcqRel);
                    if !window.enter(node, reserved, count) {
                        break;
                    }
                    in_window.set(true);
                }
                // Under a memory limit a node is admitted when it starts, as the simulator does:
                // a queued node holds no memory. One that does not fit waits for a release.
                if !reserved && !state.admit(node) {
                    if let Some(deferred) = state.window.as_ref().and_then(|w| w.leave()) {
                        self.restart(run, deferred, local);
                    }
                    in_window.set(false);
                    break;
                }
                if let Some(p) = state.execute(node, scratch) {
                    // After this thread's arrival the node may end, and the run with it, on
                    // another thread: its counts go to the run first.
                    state.flush(scratch);
                    handed_over.set(true);
                    if !p.kernel_arrives() {
                        // Pending: its completion queues its end, which gives the window place
                        // back.
                        in_window.set(false);
                        return Chain::Pending;
                    }
                    // The work completed before the kernel returned: the node ends here, and the
                    // task keeps its place.
                    handed_over.set(false);
                    state.end_pending_node(&p, scratch);
                }
            }
            if let Some(deferred) = state.window.as_ref().and_then(|w| w.leave()) {
                self.restart(run, deferred, local);
            }
            in_window.set(false);
            if !scratch.admitted.is_empty() {
                let admitted = std::mem::take(&mut scratch.admitted);
                state.active.fetch_add(admitted.len(), Ordering::AcqRel);
                self.push_reserved(run, &admitted, local);
                scratch.admitted = admitted;
            }
            reserved = false;
            let ready = &scratch.ready;
            let next = state.continuation(node, ready, || self.queues.most_critical());
            let queued = if next.is_some() { &ready[1..] } else { &ready[..] };
            if !queued.is_empty() {
                state.active.fetch_add(queued.len(), Ordering::AcqRel);
                self.push(run, queued, local);
            }
            match next {
                Some(n) => node = n,
                None => break,
            }
        }
        Chain::Done
    }
}
