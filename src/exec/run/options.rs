//! What a run is asked to do: its inputs bound to caller memory, its options, and the token that
//! stops it from another thread.

use std::ffi::c_void;
use std::marker::PhantomData;
use std::time::Instant;

use crate::exec::workers::Executor;
use crate::graph::ValueRef;
use crate::plan::Plan;
use crate::sched::{Policy, RunPriority};
use crate::tensor::{Tensor, MAX_DIMS};

/// Caller memory for one graph input, borrowed for as long as the binding lives (so for the
/// whole run). Its size must equal the input's declared size and its address be 16-byte
/// aligned (the run checks both); kernels only read it.
///
/// The layout is that of the C `gs_input_binding` (the borrow marker takes no space), so the C
/// API passes the caller's array through without copying it.
#[repr(C)]
#[derive(Clone, Copy, Debug)]
pub struct InputBinding<'a> {
    value: ValueRef,
    tensor: Tensor,
    _data: PhantomData<&'a [u8]>,
}

/// Where the descriptor sits in an [`InputBinding`], in bytes from its start: the C API relies
/// on it.
pub const INPUT_BINDING_TENSOR_OFFSET: usize = std::mem::offset_of!(InputBinding<'static>, tensor);

impl<'a> InputBinding<'a> {
    /// Binds graph input `value` to `data`.
    pub fn new(value: ValueRef, data: &'a [u8]) -> Self {
        InputBinding {
            value,
            tensor: Tensor::new(data.as_ptr() as *mut c_void, data.len()),
            _data: PhantomData,
        }
    }

    /// Sets the dtype and shape kernels see (graphsched never reads them).
    pub fn with_shape(mut self, dtype: i32, dims: &[i64]) -> Self {
        let n = dims.len().min(MAX_DIMS);
        self.tensor.dtype = dtype;
        self.tensor.ndim = n as i32;
        self.tensor.dims[..n].copy_from_slice(&dims[..n]);
        self
    }

    /// Binds graph input `value` to the memory `tensor` describes.
    ///
    /// # Safety
    /// `tensor.data` is valid for reads of `tensor.nbytes` bytes, and nothing writes them, for
    /// as long as `'a` (so for every run that uses the binding).
    pub unsafe fn from_raw(value: ValueRef, tensor: Tensor) -> Self {
        InputBinding {
            value,
            tensor,
            _data: PhantomData,
        }
    }

    /// The graph input this binding is for.
    pub fn value(&self) -> ValueRef {
        self.value
    }

    /// The descriptor kernels see.
    pub fn tensor(&self) -> &Tensor {
        &self.tensor
    }
}

/// How to run a graph.
#[derive(Clone, Copy, Default)]
pub struct RunOptions<'a> {
    /// One binding per graph input.
    pub inputs: &'a [InputBinding<'a>],
    /// Run on these threads, by priority; `None`: on the calling thread alone, in topological
    /// order (policy and window do not apply). So does, unless `memory_limit_bytes` or
    /// `force_executor` is set, a graph that can never have two nodes ready at once (a chain),
    /// and one whose kernels, as estimated, are too short for the threads to save more than
    /// they cost ([`Priorities::spreading_pays`](crate::sched::Priorities::spreading_pays)). Its kernels still reach the executor.
    pub executor: Option<&'a Executor>,
    /// Run on the `executor`'s threads even where the calling thread alone is expected to be
    /// faster (see `executor`).
    pub force_executor: bool,
    /// Which ready node runs first on an executor (default: [`Policy::BottomLevel`]).
    pub policy: Policy,
    /// Most nodes of this run in flight at once: executing, or pending (deferred by their
    /// kernels, `KernelCtx::defer`, and not completed yet); 0: no cap but the executor's
    /// threads, and none on pending nodes.
    pub window: usize,
    /// Most bytes this run's values may hold at once; 0: no limit. Nodes whose outputs do not
    /// fit wait for releases; a run that cannot go on fails with `ErrorKind::MemoryLimit`.
    /// Outputs of dynamic size are counted once allocated, not admitted in advance.
    pub memory_limit_bytes: u64,
    /// Keep the graph's learned estimates as they are (do not time the kernels). A graph no run
    /// has measured then keeps the executor's threads (`Priorities::spreading_pays`).
    pub freeze_estimates: bool,
    /// Read no clock for the run's wall time: [`RunStats::wall_ns`](crate::exec::RunStats::wall_ns) stays 0. The two reads
    /// (the time-stamp counter, or `clock_gettime`: 20-40 ns each on a virtual machine) are a
    /// fifth of a one-node run's round trip; a caller that times its runs itself, or not at
    /// all, need not pay them.
    pub no_wall_time: bool,
    /// Record when and where every node ran ([`RunResult::events`](crate::exec::RunResult::events)) and the time spent in
    /// kernels; costs a clock reading and a lock per node.
    pub trace: bool,
    /// Place statically sized values at this plan's offsets, in one arena taken from the pool
    /// per run (kept by the result while it lives). A sequential plan runs without an executor,
    /// in the plan's order; a parallel-safe or scheduled plan runs either way (on a scheduled
    /// plan, nodes also wait for the plan's ordering constraints).
    pub plan: Option<&'a Plan>,
    /// Without a `plan`: use the graph's own, made at the first run that asks (sequential for
    /// runs on their caller alone, scheduled for the executor's threads when the run goes on
    /// them: see `executor`), so that later runs place every static value in one arena.
    /// Ignored under a memory limit, which admission keeps on the dynamic pool. Not the
    /// default: a result keeps the whole arena while it holds its outputs.
    pub auto_plan: bool,
    /// Another thread may stop the run with this token: no new node starts, running kernels
    /// finish, every buffer goes back, and the run returns `ErrorKind::Cancelled`. A run whose
    /// nodes had all started when the token was cancelled has nothing left to stop: it ends as
    /// it would have, with its outputs.
    pub cancel: Option<&'a CancelToken>,
    /// Past this instant no new node starts; the run returns `ErrorKind::DeadlineExceeded` (as
    /// for `cancel`, a run whose nodes had all started by then ends with its outputs).
    pub deadline: Option<Instant>,
    /// Data of this run for its kernels ([`KernelCtx::run_data`](crate::KernelCtx::run_data)): what a graph-wide closure
    /// cannot know, such as the request being served.
    pub data: Option<&'a (dyn std::any::Any + Send + Sync)>,
    /// Hears each node start and end ([`Observer`](crate::exec::Observer)); `None` costs nothing.
    pub observer: Option<&'a dyn crate::exec::Observer>,
    /// How urgent the run is against the other runs on its executor: a high-priority run's
    /// nodes are taken before any normal run's, on every thread, and under the executor's
    /// memory budget it enters ahead of the normal runs waiting ([`RunPriority`]).
    pub priority: RunPriority,
}

/// Stops runs from another thread. One token may serve many runs; once cancelled it stays so
/// until [`reset`](Self::reset).
#[derive(Debug, Default)]
pub struct CancelToken {
    /// Set by `cancel`, cleared only by `reset` (between runs). The swap that sets it is AcqRel
    /// so exactly one caller sees `false` (and reports that it cancelled); runs read it with
    /// Acquire between nodes, and nothing else is published through it.
    cancelled: std::sync::atomic::AtomicBool,
}

impl CancelToken {
    /// A token not cancelled yet. Share it by reference (it is `Sync`) or in an `Arc`.
    pub fn new() -> Self {
        CancelToken::default()
    }

    /// Cancels; true for the call that did it, false if the token was cancelled already.
    pub fn cancel(&self) -> bool {
        !self.cancelled.swap(true, std::sync::atomic::Ordering::AcqRel)
    }

    /// Makes the token usable for another run; true if it was cancelled. Between runs: a run
    /// still using it may or may not see the cancellation that this undoes.
    pub fn reset(&self) -> bool {
        self.cancelled.swap(false, std::sync::atomic::Ordering::AcqRel)
    }

    /// Whether [`cancel`](Self::cancel) has been called, by any thread.
    pub fn is_cancelled(&self) -> bool {
        self.cancelled.load(std::sync::atomic::Ordering::Acquire)
    }
}
