//! What a kernel can reach of the run that calls it, and what an engine's profiler is told.
//!
//! A kernel sees its node through [`KernelCtx`]; through the run context it also sees the run:
//! the caller's per-run data ([`RunOptions::data`]), and the pool and executor the run uses, so
//! that a kernel can run a nested graph (an If or Loop operator) on the same executor.
//! graphsched's own waits cannot deadlock: a thread that calls `run` executes queued work until
//! its own run is over, its own run's nodes among it, so a nested run always has a thread
//! working for it, the one waiting for it. What it helps with may be any queued node, of this
//! run or another: kernels must not block on one another (a lock held across a nested run that
//! another instance of the kernel needs would deadlock), and the stack grows with the nested
//! runs a thread picks up while it waits.
//!
//! An [`Observer`] ([`RunOptions::observer`]) hears when each node starts and ends, on which
//! thread, in nanoseconds since the run started; runs without one pay nothing for it.
//!
//! [`RunOptions::data`]: crate::exec::RunOptions::data
//! [`RunOptions::observer`]: crate::exec::RunOptions::observer

use std::any::Any;
use std::sync::Arc;

use crate::exec::workers::Executor;
use crate::kernel::KernelCtx;
use crate::pool::Pool;

/// The run a kernel belongs to, as its context reaches it.
pub(crate) struct RunContext<'r> {
    pub(crate) data: Option<&'r (dyn Any + Send + Sync)>,
    pub(crate) pool: &'r Arc<Pool>,
    pub(crate) executor: Option<&'r Executor>,
}

/// When one node ran: `end_ns` is 0 in the call made as it starts.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct NodeObservation {
    /// The node, as `GraphBuilder::add_node` numbered it.
    pub node: u32,
    /// 0: a thread that called `run`; i + 1: the executor's worker i (also when the worker runs
    /// nodes of a nested run it called).
    pub thread: u32,
    /// Kernel start, in nanoseconds since the run started (in the call made as the node starts:
    /// the time of that call, just before the kernel).
    pub start_ns: u64,
    /// Kernel end, in nanoseconds since the run started; 0 when the node starts. For a node whose
    /// kernel deferred its end (`KernelCtx::defer`), its completion.
    pub end_ns: u64,
    /// Whether the kernel (and a deferred node's completion) succeeded (true when the node
    /// starts). The node may still fail after it: its outputs checked.
    pub ok: bool,
}

/// Hears each node of a run start and end, on the thread that runs it (a deferred node's end:
/// on the thread that ends it after its completion; the observation's `thread` is still the
/// kernel's). Called from several threads at once on an
/// executor; it should be quick, and must not panic (a panic is caught and ignored).
pub trait Observer: Send + Sync {
    /// The node's kernel is about to run.
    fn node_started(&self, at: &NodeObservation);
    /// The node's kernel returned (or panicked: `ok` is false), or a deferred node completed.
    fn node_finished(&self, at: &NodeObservation);
}

impl KernelCtx<'_> {
    fn run_context(&self) -> Option<&RunContext<'_>> {
        // SAFETY: `run` is null or points at the `RunContext` of the run that called this
        // kernel (`RunState::context`), which outlives the call; nothing else sets it.
        unsafe { self.run.cast::<RunContext<'_>>().as_ref() }
    }

    /// The data the caller gave this run ([`RunOptions::data`](crate::exec::RunOptions::data)).
    pub fn run_data(&self) -> Option<&(dyn Any + Send + Sync)> {
        self.run_context().and_then(|c| c.data)
    }

    /// The pool this run takes its buffers from: for a nested run, or for scratch memory.
    pub fn pool(&self) -> Option<&Arc<Pool>> {
        self.run_context().map(|c| c.pool)
    }

    /// The executor the run was given, if any (the nodes of a serial graph, or of one of short
    /// kernels, run on its caller even so): a nested run on it shares its threads.
    pub fn executor(&self) -> Option<&Executor> {
        self.run_context().and_then(|c| c.executor)
    }
}
