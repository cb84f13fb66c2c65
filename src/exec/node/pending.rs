//! Asynchronous kernels: a kernel that starts work elsewhere (a device, an I/O request) defers
//! its node's end and returns; the work completes the node later, from any thread.
//!
//! The model: `KernelCtx::defer` hands the kernel a [`Completion`]; once the kernel has returned
//! and the completion has been called, in either order, the node ends as any node does. Until
//! then the node is *pending*: its inputs stay alive, its outputs stay allocated (the work
//! writes them), it keeps its place in the run's window and in the run's count of tasks (so the
//! run cannot end, and a cancelled or failed run waits for it before it gives its buffers
//! back), and the thread that called the kernel is free for other nodes.
//!
//! Who ends the node: a [`PendingNode`] counts two arrivals, the kernel's return and the
//! completion. The one that arrives second resumes the node. If that is the kernel's own
//! thread (the work completed before the kernel returned), the node ends there, as if it had not
//! been deferred. If it is the completion, on an executor it queues a task that ends the node on
//! a worker (with that worker's caches and deques, and continuing along the critical path as
//! any task does); in a run on its calling thread alone (without an executor, or given one that
//! it does not use, [`run`](mod@crate::exec::run): a serial graph, short kernels) it wakes that thread, which waits
//! at the node. The completing thread does nothing else, so a device's callback thread never
//! runs kernels.

use std::any::Any;
use std::sync::atomic::{AtomicU32, Ordering};
use std::sync::{Arc, Condvar, Mutex, OnceLock};
use std::time::Instant;

use crate::error::{err, Error, ErrorKind, Result};
use crate::exec::state::{lock, RunState};
use crate::exec::workers::Shared;
use crate::kernel::KernelCtx;

/// How a kernel call went, kept until its node ends ([`RunState::end_call`]).
pub(in crate::exec) struct Called {
    /// The kernel's own failure (an error, a panic, a refused dynamic output), if any.
    pub failure: Option<Error>,
    /// The node's thread's track, and when its kernel started and returned.
    pub thread: u32,
    pub start: Option<Instant>,
    pub returned: Option<Instant>,
    /// Whether the call is sampled for the learned estimates, and the widest parallel loop it
    /// ran (1: none).
    pub sample: bool,
    pub width: u32,
    /// Dynamic output bytes reserved under the memory limit, and allocated.
    pub reserved_dynamic: u64,
    pub allocated: u64,
    /// The output placed in an input's buffer, and that input.
    pub in_place_output: Option<usize>,
    pub taken: Option<u32>,
}

/// Where a pending node resumes, written by its kernel's thread before that thread's arrival.
struct Resume {
    run: *const RunState<'static>,
    node: u32,
    /// The run's executor: where the completion queues the task that ends the node.
    executor: Option<Arc<Shared>>,
    called: Mutex<Option<Called>>,
}

/// One deferred node, shared by the run and its [`Completion`].
pub(in crate::exec) struct PendingNode {
    /// Arrivals still to come: the kernel's return and the completion. The decrement that
    /// reaches 0 (AcqRel) resumes the node: it sees what the other arrival wrote before its own.
    arrivals: AtomicU32,
    /// When the completion came, and its error; written before its arrival.
    completed: Mutex<Option<(Instant, Option<String>)>>,
    resume: OnceLock<Resume>,
    /// A run without an executor waits at the node: set, under the lock, by the completion.
    woken: Mutex<bool>,
    wake: Condvar,
}

// SAFETY: `Resume::run` points at a run that stays alive while the node is pending (the node is
// counted in its `active`, or its caller waits for it); everything else is Send + Sync.
unsafe impl Send for PendingNode {}
// SAFETY: as above; shared state is behind locks and atomics.
unsafe impl Sync for PendingNode {}

/// The right to end a deferred node: call [`complete`](Self::complete) once the work the kernel
/// started is done, from any thread. `Send`, so it goes where the work goes. Dropping it without
/// completing fails the node (rather than leaving the run waiting for ever).
pub struct Completion {
    node: Option<Arc<PendingNode>>,
}

impl Completion {
    /// Ends the node: `Ok` if the work succeeded, else the reason, which fails the run naming
    /// the node. The node's outputs must hold their final contents before this is called.
    pub fn complete(mut self, result: std::result::Result<(), String>) {
        if let Some(node) = self.node.take() {
            node.complete(result);
        }
    }
}

impl Drop for Completion {
    fn drop(&mut self) {
        if let Some(node) = self.node.take() {
            node.complete(Err("its Completion was dropped without being completed".into()));
        }
    }
}

impl std::fmt::Debug for Completion {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str("Completion")
    }
}

impl KernelCtx<'_> {
    /// Defers the end of this node: the kernel returns once it has started its work elsewhere,
    /// and the returned [`Completion`] ends the node when that work is done. Until then the
    /// node's inputs and outputs stay where they are, and the thread runs other nodes (without
    /// an executor the run waits at the node; so does, once, a run that went to its caller
    /// before any kernel of this op type deferred: `RunOptions::executor`). Everything else
    /// about the node is settled when the kernel returns: dynamic outputs must be allocated and
    /// descriptors set by then. A kernel that returns an error after deferring fails the run,
    /// which still waits for the completion. At most once per call.
    pub fn defer(&mut self) -> Result<Completion> {
        if self.deferred.is_some() {
            return err(
                ErrorKind::InvalidArgument,
                format!("node '{}' deferred its end already", self.node_name()),
            );
        }
        let node = Arc::new(PendingNode {
            arrivals: AtomicU32::new(2),
            completed: Mutex::new(None),
            resume: OnceLock::new(),
            woken: Mutex::new(false),
            wake: Condvar::new(),
        });
        self.deferred = Some(node.clone() as Arc<dyn Any + Send + Sync>);
        Ok(Completion { node: Some(node) })
    }
}

impl PendingNode {
    /// The run's record of a deferred call, from what the kernel's context kept.
    pub(in crate::exec) fn from_ctx(deferred: Arc<dyn Any + Send + Sync>) -> Arc<PendingNode> {
        deferred
            .downcast::<PendingNode>()
            .unwrap_or_else(|_| unreachable!("only `defer` sets it"))
    }

    /// The kernel returned: records where the node resumes. Its thread then arrives
    /// (`kernel_arrives`), once it has handed the run everything it counted: after that
    /// arrival the node, and with it the run, may end on another thread at any moment.
    pub(in crate::exec) fn kernel_returned(&self, state: &RunState<'_>, node: u32, called: Called) {
        let resume = Resume {
            run: (state as *const RunState<'_>).cast(),
            node,
            // A run on the calling thread alone (without an executor, or given one it does not
            // use, `exec::run`) waits at the node: its completion wakes it, queues nothing. That
            // caller runs no other task meanwhile (kernels must not wait on one another,
            // design.md).
            executor: state
                .context
                .executor
                .filter(|_| !state.sequential)
                .map(|e| e.shared().clone()),
            called: Mutex::new(Some(called)),
        };
        if self.resume.set(resume).is_err() {
            unreachable!("a kernel returns once");
        }
    }

    /// The kernel's arrival, after `kernel_returned`: true if the completion came already (the
    /// node ends now, on this thread); false if it is pending (then nothing of the run may be
    /// touched any more).
    pub(in crate::exec) fn kernel_arrives(&self) -> bool {
        self.arrive()
    }

    fn complete(self: Arc<Self>, result: std::result::Result<(), String>) {
        *lock(&self.completed) = Some((Instant::now(), result.err()));
        if !self.arrive() {
            return; // The kernel has not returned: its thread ends the node.
        }
        let resume = self.resume.get().expect("written before the kernel's arrival");
        match &resume.executor {
            Some(shared) => {
                // SAFETY: the run is alive: this node is counted in its `active` (module docs).
                let band = unsafe { &*resume.run }.band(resume.node);
                shared.push_end(self.clone(), band);
            }
            None => {
                *lock(&self.woken) = true;
                self.wake.notify_one();
            }
        }
        // Nothing of the run is touched after this: it may end as soon as the node does.
    }

    /// One arrival; true for the last.
    fn arrive(&self) -> bool {
        let before = self.arrivals.fetch_sub(1, Ordering::AcqRel);
        debug_assert!(
            matches!(before, 1 | 2),
            "a pending node has two arrivals; {before} were left"
        );
        before == 1
    }

    /// In a run on its calling thread alone: waits until the completion came (the kernel has
    /// returned), running nothing else meanwhile.
    pub(in crate::exec) fn wait(&self) {
        let mut woken = lock(&self.woken);
        while !*woken {
            woken = self.wake.wait(woken).unwrap_or_else(|p| p.into_inner());
        }
    }

    /// The run and node this pending node belongs to.
    pub(in crate::exec) fn run(&self) -> (*const RunState<'static>, u32) {
        let resume = self.resume.get().expect("written before the kernel's arrival");
        (resume.run, resume.node)
    }

    /// What the node's end needs: the kernel call's record and the completion (its time and
    /// error). Once, by the thread that ends the node.
    pub(in crate::exec) fn take(&self) -> (Called, Instant, Option<String>) {
        let resume = self.resume.get().expect("written before the kernel's arrival");
        let called = lock(&resume.called).take().expect("a pending node ends once");
        let (at, error) = lock(&self.completed).take().expect("completed before it ends");
        (called, at, error)
    }
}
