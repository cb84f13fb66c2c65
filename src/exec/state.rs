//! The state of one run, shared by every thread that executes its nodes.
//!
//! Protocol (why the unsafe cells are sound):
//! - A value's slot is written once, by its producer, before the producer decrements its
//!   consumers' `pending` counts (AcqRel). A consumer reads the slot only after its own count
//!   reached 0, so it sees the write.
//! - A slot is emptied by the thread whose decrement of the value's `refs` reached 0 (AcqRel), so
//!   every reader has finished with it. Graph outputs hold one extra reference that only the
//!   caller drops, after the run is over.
//! - `active` counts the run's queued and running tasks. Each task pushes the successors it made
//!   ready (incrementing `active`) before it decrements `active` for itself, so `active` reaches 0
//!   exactly once: when nothing of the run is queued or running any more. After that decrement the
//!   task touches nothing of the run, and the caller may drop it.

use std::cell::UnsafeCell;
use std::ffi::c_void;
use std::panic::{catch_unwind, AssertUnwindSafe};
use std::ptr::NonNull;
use std::sync::atomic::{AtomicBool, AtomicU32, AtomicU64, AtomicUsize, Ordering};
use std::sync::{Mutex, MutexGuard};
use std::time::Instant;

use super::ctx::{Buffer, KernelCtx};
use super::run::CancelToken;
use super::run::InputBinding;
use crate::error::{err, Error, ErrorKind, Result};
use crate::graph::{Graph, OutputSize};
use crate::plan::Plan;
use crate::pool::{sanitize, Owner, Pool, NEVER};
use crate::sched::{Admission, Policy, Priorities};
use crate::tensor::{Tensor, ALIGNMENT, MAX_DIMS};
use crate::trace::NodeEvent;

/// One value during a run.
#[derive(Clone, Copy)]
pub(super) struct Slot {
    pub tensor: Tensor,
    /// The pool block behind the value; `NONE` for caller memory and values not made yet.
    pub buffer: Buffer,
}

impl Default for Slot {
    fn default() -> Self {
        Slot {
            tensor: Tensor::empty(),
            buffer: Buffer::NONE,
        }
    }
}

/// Per-thread scratch space reused by every node a thread executes, and counts kept per thread
/// until `flush` adds them to the run (one atomic add per task instead of per node).
#[derive(Default)]
pub(super) struct Scratch {
    inputs: Vec<Tensor>,
    outputs: Vec<Tensor>,
    buffers: Vec<Buffer>,
    pub ready: Vec<u32>,
    /// Waiting nodes a release let in (memory reserved), most critical first.
    pub admitted: Vec<u32>,
    nodes_run: u64,
    acquires: u64,
    /// Nodes executed by this thread, for sampling kernel durations.
    executed: u64,
    /// This thread's block cache in the run being executed, if it has one (see `RunState::caches`).
    pub slot: Option<usize>,
    /// Track of this thread in traces: 0 for a calling thread, worker index + 1.
    pub thread: u32,
    /// Nanoseconds spent in kernels while the run is traced.
    busy_ns: u64,
    /// An input whose buffer the current node's output took over (in place): at the node's
    /// end its value goes without giving the buffer back.
    taken: Option<u32>,
    /// Values the current node freed.
    freed: Vec<u32>,
}

/// What a traced run records.
struct Tracer {
    start: Instant,
    events: Mutex<Vec<NodeEvent>>,
}

/// A thread's small blocks at hand in one run, and the size that last missed with how many
/// blocks its refill took.
#[derive(Default)]
pub(super) struct BlockCache {
    blocks: Vec<Buffer>,
    streak: (usize, usize),
}

/// Blocks up to this size go through the per-thread caches (larger ones straight to the pool,
/// which coalesces them); a cache refills `REFILL` blocks at a time and holds at most
/// `CACHE_BLOCKS`, giving half back when full.
const CACHE_MAX_BYTES: usize = 16 * 1024;
const CACHE_BLOCKS: usize = 64;
const REFILL: usize = 16;

/// One node in this many has its kernel timed for the learned estimates (and every node of an
/// op type not measured yet): reading the clock costs about as much as an empty kernel.
const SAMPLE_EVERY: u64 = 8;

/// Memory admission: the run's live bytes stay under `limit`, and which nodes may start is
/// decided by `sched::Admission` (the banker's rule that guarantees completion at any limit
/// some order meets). Ready nodes it turns away wait in `waiting`, sorted most critical first;
/// every release looks at them again. The reservation and the decision to wait happen under the
/// same lock as that second look, so a node never waits for a release that has already
/// happened: a releaser lowers `live` before it takes the lock, so whoever holds the lock next
/// sees the lower value.
struct Gate<'r> {
    limit: u64,
    inner: Mutex<GateInner<'r>>,
}

struct GateInner<'r> {
    waiting: Vec<u32>,
    admission: Admission<'r>,
}

/// The window: at most `cap` nodes of the run execute at once. A task that finds the window full
/// waits in `deferred`; each node that leaves starts one deferred task. Entering and deferring
/// happen under the lock the leaver takes, so no deferred task is forgotten.
pub(super) struct Window {
    cap: u32,
    /// Nodes of the run executing now (a place taken optimistically and given back if over
    /// `cap`). AcqRel; what keeps a deferred task from being forgotten is the `deferred` lock,
    /// which both the last try of `enter` and `leave` take after changing the count.
    running: AtomicU32,
    /// Deferred nodes, with whether their memory is reserved already (admitted while waiting).
    deferred: Mutex<Vec<(u32, bool)>>,
}

/// How a run is set up.
pub(super) struct StateOptions<'r> {
    /// Most live bytes; 0: no limit.
    pub memory_limit: u64,
    /// Most nodes executing at once; `None`: as many as threads.
    pub window: Option<u32>,
    pub learn: bool,
    pub policy: Policy,
    /// Run on an executor (per-thread block caches apply).
    pub parallel: bool,
    /// Threads that may execute the run's nodes, its caller included.
    pub threads: usize,
    /// Record every node's execution (times every kernel); the run's start.
    pub trace: Option<Instant>,
    /// Place statically sized values at this plan's offsets.
    pub plan: Option<&'r Plan>,
    pub cancel: Option<&'r CancelToken>,
    pub deadline: Option<Instant>,
}

pub(super) struct RunState<'r> {
    pub graph: &'r Graph,
    pub pool: &'r Pool,
    pub prio: &'r Priorities,
    /// Per value: its descriptor and buffer, written once by its producer (module docs).
    slots: Box<[UnsafeCell<Slot>]>,
    /// Per value: readers still to finish, plus one for a graph output. The decrement that
    /// reaches 0 (AcqRel) frees the value: it is ordered after every reader's decrement, so
    /// after every read.
    refs: Box<[AtomicU32]>,
    /// Per node: producers still to finish. The decrement that reaches 0 (AcqRel) makes the
    /// node ready: it is ordered after every producer's slot writes.
    pending: Box<[AtomicU32]>,
    /// Queued and running tasks of the run (module docs): reaches 0 exactly once, when the run
    /// is over. AcqRel, so the caller that sees 0 sees everything the tasks did.
    pub active: AtomicUsize,
    /// Set (Release) with the first error, read (Acquire) before starting a node; the error
    /// itself is behind `error`'s lock.
    failed: AtomicBool,
    error: Mutex<Option<Error>>,
    /// Bytes the run holds: reserved outputs and values not yet released. A counter, not a
    /// publication: admission reads and raises it only under the gate's lock, and a releaser
    /// lowers it before it takes that lock to readmit, so the lock orders every decision after
    /// the releases it could depend on. Nothing else is published through it: Relaxed.
    live: AtomicU64,
    /// The most `live` reached; with `acquires` and `nodes_run`, counters read once the run is
    /// over (after `active` reached 0): Relaxed.
    peak_live: AtomicU64,
    acquires: AtomicU64,
    nodes_run: AtomicU64,
    gate: Option<Gate<'r>>,
    pub window: Option<Window>,
    /// Per thread of a parallel run (0: its caller, i + 1: worker i): small blocks kept at hand,
    /// so that small outputs rarely take the pool's lock, which every thread contends for. Slot
    /// i is touched only by its thread while the run goes on, and by the caller once it is over.
    /// None in sequential runs (no contention) and under a memory limit (the pool's own count of
    /// live bytes must then stay exact); otherwise the pool counts cached blocks as live until
    /// the run ends.
    caches: Box<[UnsafeCell<BlockCache>]>,
    /// With a static plan: the plan, and the arena its values live in (one pool block per run,
    /// handed to the result with the graph outputs it may hold).
    plan: Option<&'r Plan>,
    /// Stops the run between nodes.
    cancel: Option<&'r CancelToken>,
    deadline: Option<Instant>,
    arena: Buffer,
    /// Measure kernels and feed the graph's learned estimates.
    learn: bool,
    trace: Option<Tracer>,
    /// Kernel time of a traced run; a counter like `acquires`.
    busy_ns: AtomicU64,
    /// Which order: FIFO has one band and no continuations.
    policy: Policy,
}

// SAFETY: the slots are shared under the protocol in the module docs; everything else is atomic
// or behind a mutex. Raw pointers in slots point at pool blocks owned by the run, or at caller
// memory the caller keeps valid for the whole run.
unsafe impl Sync for RunState<'_> {}
// SAFETY: as above; the run owns its pool blocks.
unsafe impl Send for RunState<'_> {}

impl<'r> RunState<'r> {
    pub fn new(graph: &'r Graph, pool: &'r Pool, prio: &'r Priorities, options: StateOptions<'r>) -> Self {
        let StateOptions {
            memory_limit,
            window,
            learn,
            policy,
            parallel,
            threads,
            trace,
            plan,
            cancel,
            deadline,
        } = options;
        let refs = (0..graph.value_count() as u32)
            .map(|v| AtomicU32::new(graph.consumers(v) + graph.is_graph_output(v) as u32))
            .collect();
        RunState {
            graph,
            pool,
            prio,
            slots: (0..graph.value_count())
                .map(|_| UnsafeCell::new(Slot::default()))
                .collect(),
            refs,
            pending: prio.initial_pending.iter().map(|&p| AtomicU32::new(p)).collect(),
            active: AtomicUsize::new(0),
            failed: AtomicBool::new(false),
            error: Mutex::new(None),
            live: AtomicU64::new(0),
            peak_live: AtomicU64::new(0),
            acquires: AtomicU64::new(0),
            nodes_run: AtomicU64::new(0),
            gate: (memory_limit > 0).then(|| Gate {
                limit: memory_limit,
                inner: Mutex::new(GateInner {
                    waiting: Vec::new(),
                    admission: Admission::new(graph, memory_limit, parallel),
                }),
            }),
            window: window.map(|cap| Window {
                cap: cap.max(1),
                running: AtomicU32::new(0),
                deferred: Mutex::new(Vec::new()),
            }),
            caches: (0..if memory_limit > 0 || !parallel || pool.config().red_zones != 0 {
                0
            } else {
                threads
            })
                .map(|_| UnsafeCell::new(BlockCache::default()))
                .collect(),
            plan,
            cancel,
            deadline,
            arena: Buffer::NONE,
            learn,
            trace: trace.map(|start| Tracer {
                start,
                events: Mutex::new(Vec::new()),
            }),
            busy_ns: AtomicU64::new(0),
            policy,
        }
    }

    /// Takes the arena of a planned run from the pool. Before any node runs.
    pub fn take_arena_from_pool(&mut self) -> Result<()> {
        // The plan belongs to this run's graph: `run` checked it.
        let Some(plan) = self.plan else { return Ok(()) };
        if plan.arena_bytes() > 0 {
            let bytes = plan.arena_bytes() as usize;
            let block = self.pool.acquire_until(bytes, false, NEVER, Owner::Run)?;
            self.acquires.fetch_add(1, Ordering::Relaxed);
            self.arena = Buffer::new(block.as_ptr().cast(), bytes);
        }
        Ok(())
    }

    /// Hands the arena to the caller (the result keeps it while it holds graph outputs).
    pub fn take_arena(&mut self) -> Buffer {
        std::mem::replace(&mut self.arena, Buffer::NONE)
    }

    fn in_arena(&self, b: Buffer) -> bool {
        let (start, p) = (self.arena.ptr as usize, b.ptr as usize);
        !self.arena.ptr.is_null() && p >= start && p < start + self.arena.capacity
    }

    /// The input whose buffer output `k` (of `n` bytes) of `node` may take over, if the node
    /// declared the pair and it is safe now: the input holds a pool buffer (never caller memory
    /// or a planned arena slice) of at least `n` bytes, this node is its last reader (its
    /// reference count is this node's own reads; a graph output keeps one more), and the output
    /// need not be cleared first.
    fn take_over(&self, node: u32, k: u32, n: usize) -> Option<u32> {
        let (out, slot) = self.graph.in_place(node)?;
        if out != k
            || self.graph.zero_output(node)
            || self
                .plan
                .is_some_and(|p| p.offset(self.graph.node_values(node).start + k).is_some())
        {
            return None;
        }
        let inputs = self.graph.node_inputs(node);
        let v = *inputs.get(slot as usize)?;
        let reads = inputs.iter().filter(|&&x| x == v).count() as u32;
        // Acquire: the other readers' decrements, and so their reads, happened before.
        if self.refs[v as usize].load(Ordering::Acquire) != reads {
            return None;
        }
        // SAFETY: the producer of `v` finished before this node became ready.
        let held = unsafe { (*self.slots[v as usize].get()).buffer };
        (!held.ptr.is_null() && held.capacity >= n && !self.in_arena(held)).then_some(v)
    }

    /// With the pool's red zones on: after a kernel ran, checks the guards around its outputs
    /// and inputs, and names the node if it wrote out of bounds.
    fn check_red_zones(&self, node: u32, buffers: &[Buffer], in_place_output: Option<usize>) -> Result<()> {
        if self.pool.config().red_zones == 0 {
            return Ok(());
        }
        let g = self.graph;
        let intact = |b: Buffer| match std::ptr::NonNull::new(b.ptr.cast::<u8>()) {
            // SAFETY: `b` is a live pool block of this run, `block` bytes long.
            Some(p) if b.capacity > 0 && !self.in_arena(b) => unsafe { self.pool.guards_intact(p, b.block) },
            _ => true,
        };
        for (k, &b) in buffers.iter().enumerate() {
            if Some(k) != in_place_output && !intact(b) {
                return err(
                    ErrorKind::KernelFailed,
                    format!(
                        "node {} wrote out of the bounds of output {k} ({} bytes): its red zone was overwritten",
                        g.node_label(node),
                        b.capacity
                    ),
                );
            }
        }
        for (i, &v) in g.node_inputs(node).iter().enumerate() {
            // SAFETY: this node still holds its inputs; their slots do not change under it.
            let b = unsafe { (*self.slots[v as usize].get()).buffer };
            if in_place_output.is_none() && !intact(b) {
                return err(
                    ErrorKind::KernelFailed,
                    format!(
                        "node {} wrote out of the bounds of input {i} ({} bytes): its red zone was overwritten",
                        g.node_label(node),
                        b.capacity
                    ),
                );
            }
        }
        Ok(())
    }

    /// Returns a buffer to the pool, unless it lives in the plan's arena.
    fn give_back(&self, b: Buffer) {
        if !self.in_arena(b) {
            release(self.pool, b);
        }
    }

    /// The nodes executed, in the order they ended (traced runs only).
    pub fn take_events(&mut self) -> Vec<NodeEvent> {
        match &mut self.trace {
            Some(t) => std::mem::take(t.events.get_mut().unwrap_or_else(|p| p.into_inner())),
            None => Vec::new(),
        }
    }

    /// Nanoseconds spent in kernels (traced runs only).
    pub fn busy_ns(&self) -> u64 {
        self.busy_ns.load(Ordering::Relaxed)
    }

    /// The block cache of the thread in `slot`, if any.
    #[allow(clippy::mut_from_ref)]
    fn cache(&self, slot: Option<usize>) -> Option<&mut BlockCache> {
        let cell = self.caches.get(slot?)?;
        // SAFETY: a slot belongs to one thread while the run goes on (see `caches`), and this
        // borrow ends before that thread borrows it again.
        Some(unsafe { &mut *cell.get() })
    }

    /// Makes sure `cache` holds a block of `n` bytes, taking some from the pool if it does not:
    /// one at first, twice as many each time the same size misses again in a row, up to
    /// `REFILL` (a fan-out of equal outputs takes the lock once per `REFILL` nodes; sizes seen
    /// once cost no extra blocks).
    /// Returns how many blocks it took from the pool.
    fn refill(&self, cache: &mut BlockCache, n: usize) -> Result<u64> {
        if cache.blocks.iter().any(|b| b.capacity == n) {
            return Ok(0);
        }
        let count = match cache.streak {
            (size, count) if size == n => (count * 2).min(REFILL),
            _ => 1,
        };
        cache.streak = (n, count);
        let mut fresh = Vec::with_capacity(count);
        if let Err(e) = self.pool.acquire_many(n, count, Owner::Run, &mut fresh) {
            release_many(self.pool, fresh.into_iter().map(|p| Buffer::new(p.as_ptr().cast(), n)));
            return Err(e);
        }
        // Parked: a checker (ASan, valgrind) reports any touch until a node is handed one.
        cache.blocks.extend(fresh.into_iter().map(|p| {
            sanitize::hide(p.as_ptr(), n);
            Buffer::new(p.as_ptr().cast(), n)
        }));
        Ok(count as u64)
    }

    /// Gives every cached block back to the pool. By the caller, once the run is over.
    pub fn flush_caches(&mut self) {
        for cell in self.caches.iter_mut() {
            let cache = std::mem::take(cell.get_mut());
            release_many(self.pool, cache.blocks);
        }
    }

    /// The queue band of a node: its priority band under the policy, or 0 for FIFO.
    pub fn band(&self, node: u32) -> usize {
        self.prio.bands(self.policy).map_or(0, |b| b[node as usize] as usize)
    }

    /// Which of the nodes `node` just made ready (most critical first) its thread should run
    /// next without queueing: the first, if it is at least as critical as `node`.
    pub fn continuation(&self, node: u32, ready: &[u32]) -> Option<u32> {
        let &first = ready.first()?;
        (self.policy != Policy::Fifo && self.band(first) <= self.band(node)).then_some(first)
    }

    /// Binds graph inputs to caller memory. Before any node runs, on the calling thread.
    pub fn bind(&mut self, bindings: &[InputBinding<'_>]) -> Result<()> {
        let g = self.graph;
        let mut bound = vec![usize::MAX; g.value_count()];
        for (i, b) in bindings.iter().enumerate() {
            let (value, tensor) = (b.value(), *b.tensor());
            let node = value.node;
            if node as usize >= g.node_count() || !g.is_graph_input(node) || value.output != 0 {
                let what = match node as usize >= g.node_count() {
                    true => format!("value ({node}, {}), which does not exist", value.output),
                    false => format!(
                        "output {} of node '{}', which is not a graph input",
                        value.output,
                        g.node_name(node)
                    ),
                };
                return err(ErrorKind::InputBinding, format!("input binding {i} names {what}"));
            }
            let name = g.node_name(node);
            let v = g.node_values(node).start;
            if bound[v as usize] != usize::MAX {
                return err(
                    ErrorKind::InputBinding,
                    format!(
                        "graph input '{name}' is bound twice (bindings {} and {i})",
                        bound[v as usize]
                    ),
                );
            }
            bound[v as usize] = i;
            let declared = g.value_size(v).bytes().expect("graph inputs have a static size");
            if tensor.nbytes != declared {
                return err(
                    ErrorKind::InputBinding,
                    format!(
                        "graph input '{name}' is declared as {declared} bytes but bound to {} bytes",
                        tensor.nbytes
                    ),
                );
            }
            if tensor.data.is_null() {
                return err(
                    ErrorKind::InputBinding,
                    format!("graph input '{name}' is bound to a NULL pointer"),
                );
            }
            if tensor.data as usize % ALIGNMENT != 0 {
                return err(
                    ErrorKind::InputBinding,
                    format!(
                        "graph input '{name}' is bound to {:p}, which is not {ALIGNMENT}-byte aligned",
                        tensor.data
                    ),
                );
            }
            *self.slots[v as usize].get_mut() = Slot {
                tensor,
                buffer: Buffer::NONE,
            };
        }
        if let Some(&node) = g
            .graph_inputs()
            .iter()
            .find(|&&n| bound[g.node_values(n).start as usize] == usize::MAX)
        {
            return err(
                ErrorKind::InputBinding,
                format!("graph input '{}' (node {node}) is not bound", g.node_name(node)),
            );
        }
        Ok(())
    }

    pub fn failed(&self) -> bool {
        self.failed.load(Ordering::Acquire)
    }

    /// Whether the run was cancelled or passed its deadline: if so, records it as the run's
    /// error (once) so that nothing new starts.
    pub fn stopped(&self) -> bool {
        let why = if self.cancel.is_some_and(CancelToken::is_cancelled) {
            ErrorKind::Cancelled
        } else if self.deadline.is_some_and(|d| Instant::now() >= d) {
            ErrorKind::DeadlineExceeded
        } else {
            return false;
        };
        let done = self.nodes_run.load(Ordering::Relaxed);
        let total = self.graph.node_count() - self.graph.graph_inputs().len();
        let message = match why {
            ErrorKind::Cancelled => format!("the run was cancelled, with about {done} of {total} nodes done"),
            _ => format!("the run passed its deadline, with about {done} of {total} nodes done"),
        };
        self.fail(Error::new(why, message));
        true
    }

    /// Records the run's error if it is the first; later ones are dropped.
    pub fn fail(&self, e: Error) {
        let mut slot = self.error.lock().unwrap_or_else(|p| p.into_inner());
        if slot.is_none() {
            *slot = Some(e);
            self.failed.store(true, Ordering::Release);
        }
    }

    pub fn take_error(&self) -> Option<Error> {
        self.error.lock().unwrap_or_else(|p| p.into_inner()).take()
    }

    pub fn stats(&self) -> (u64, u64, u64) {
        (
            self.nodes_run.load(Ordering::Relaxed),
            self.peak_live.load(Ordering::Relaxed),
            self.acquires.load(Ordering::Relaxed),
        )
    }

    /// Moves a graph output out of the finished run.
    pub fn take_slot(&mut self, value: u32) -> Slot {
        std::mem::take(self.slots[value as usize].get_mut())
    }

    fn add_live(&self, bytes: u64) {
        if bytes > 0 {
            let now = self.live.fetch_add(bytes, Ordering::Relaxed) + bytes;
            if now > self.peak_live.load(Ordering::Relaxed) {
                self.peak_live.fetch_max(now, Ordering::Relaxed);
            }
        }
    }

    /// Adds a thread's counts to the run's.
    pub fn flush(&self, scratch: &mut Scratch) {
        if scratch.busy_ns > 0 {
            self.busy_ns
                .fetch_add(std::mem::take(&mut scratch.busy_ns), Ordering::Relaxed);
        }
        if scratch.nodes_run > 0 {
            self.nodes_run
                .fetch_add(std::mem::take(&mut scratch.nodes_run), Ordering::Relaxed);
            self.acquires
                .fetch_add(std::mem::take(&mut scratch.acquires), Ordering::Relaxed);
        }
    }

    /// Admits a ready node under the memory limit: true if it may run now. Without a limit,
    /// always. A node that cannot run now waits until a release makes room.
    pub fn admit(&self, node: u32) -> bool {
        let Some(gate) = &self.gate else {
            return true;
        };
        let mut inner = lock(&gate.inner);
        if self.try_reserve(&mut inner, Some(node), self.prio.output_bytes[node as usize]) {
            return true;
        }
        let ranks = self.prio.ranks(self.policy);
        let at = inner
            .waiting
            .partition_point(|&w| ranks[w as usize] < ranks[node as usize]);
        inner.waiting.insert(at, node);
        false
    }

    /// Reserves `need` bytes, for `node` to start (asking the admission rule) or for a dynamic
    /// output (`None`: only the limit applies). Under the gate's lock, so the only concurrent
    /// changes to `live` are releases, which lower it: a stale read only errs on the safe side.
    fn try_reserve(&self, inner: &mut GateInner<'_>, node: Option<u32>, need: u64) -> bool {
        let live = self.live.load(Ordering::Relaxed);
        let admitted = match node {
            Some(node) => inner.admission.try_admit(node, need, live),
            None => live.saturating_add(need) <= inner.admission.limit(),
        };
        if admitted {
            self.add_live(need);
        }
        admitted
    }

    /// After `freed` values were released: tells admission, then admits waiting nodes that now
    /// fit, most critical first.
    fn readmit(&self, out: &mut Vec<u32>, freed: &[u32]) {
        let Some(gate) = &self.gate else { return };
        let mut guard = lock(&gate.inner);
        let inner = &mut *guard;
        for &v in freed {
            let static_bytes = crate::graph::memory::value_bytes(self.graph, v);
            inner.admission.release(self.graph.value_producer(v), static_bytes);
        }
        let mut waiting = std::mem::take(&mut inner.waiting);
        waiting.retain(|&node| {
            let fits = self.try_reserve(inner, Some(node), self.prio.output_bytes[node as usize]);
            if fits {
                out.push(node);
            }
            !fits
        });
        inner.waiting = waiting;
    }

    /// Under a memory limit: reserves `bytes` for a dynamic output `node`'s kernel is
    /// allocating, or refuses with a `MemoryLimit` error naming the node and the bytes. Dynamic
    /// sizes are unknown in advance, so they are not part of the completion guarantee (see
    /// `sched::admission`): they are granted while they fit, and refused past the limit.
    fn reserve_dynamic(&self, node: u32, bytes: u64) -> Result<()> {
        let Some(gate) = &self.gate else { return Ok(()) };
        if self.try_reserve(&mut lock(&gate.inner), None, bytes) {
            return Ok(());
        }
        err(
            ErrorKind::MemoryLimit,
            format!(
                "node {} asked for a {bytes}-byte dynamic output, but {} of the {}-byte memory limit are live",
                self.graph.node_label(node),
                self.live.load(Ordering::Relaxed),
                gate.limit
            ),
        )
    }

    /// The order a run without an executor follows: the one admission's guarantee is about
    /// under a memory limit, else the topological order.
    pub fn sequential_order(&self) -> &'r [u32] {
        match self.gate {
            Some(_) => &self.graph.lowest_live_order().order,
            None => self.graph.topological_order(),
        }
    }

    pub fn has_gate(&self) -> bool {
        self.gate.is_some()
    }

    /// Called by the run's last active task before it finishes: if nodes still wait for memory
    /// that nothing running will release, admit what fits or fail the run naming the culprit.
    pub fn resolve_stall(&self, out: &mut Vec<u32>) {
        let Some(gate) = &self.gate else { return };
        self.readmit(out, &[]);
        if !out.is_empty() || self.failed() {
            return;
        }
        let inner = lock(&gate.inner);
        if let Some(&node) = inner.waiting.first() {
            let need = self.prio.output_bytes[node as usize];
            let live = self.live.load(Ordering::Relaxed);
            drop(inner);
            let label = self.graph.node_label(node);
            let message = if need > gate.limit {
                format!(
                    "node {label} needs {need} bytes for its outputs, more than the whole {}-byte memory limit",
                    gate.limit
                )
            } else {
                let bound = self.graph.lowest_live_order().peak;
                let why = if gate.limit >= bound {
                    "outputs of dynamic size took the room".to_string()
                } else {
                    format!(
                        "the limit is below {bound} bytes, the lowest max-live bound graphsched found for this graph"
                    )
                };
                format!(
                    "node {label} needs {need} bytes for its outputs, but {live} of the {}-byte memory limit are live and \
                     nothing else is running to free them ({why})",
                    gate.limit
                )
            };
            self.fail(Error::new(ErrorKind::MemoryLimit, message));
        }
    }

    /// Runs one node: outputs from the pool, the kernel, then releases and readiness. Nodes it
    /// makes ready (and admits) are appended to `scratch.ready`, most critical first. A failure
    /// is recorded in the run, not returned: the node's own buffers go back, and nothing it
    /// would have made ready is started.
    pub fn execute(&self, node: u32, scratch: &mut Scratch) {
        if self.failed() || self.stopped() {
            return;
        }
        if self.gate.is_none() {
            self.add_live(self.prio.output_bytes[node as usize]);
        }
        // A panic here is a bug in graphsched (kernel panics are caught around the kernel):
        // it fails the run with `KernelPanicked`, never unwinds into the executor's threads.
        let outcome = catch_unwind(AssertUnwindSafe(|| self.run_kernel(node, scratch)));
        let result = outcome.unwrap_or_else(|panic| {
            err(
                ErrorKind::KernelPanicked,
                format!(
                    "internal error while running node {}: {}",
                    self.graph.node_label(node),
                    panic_text(&*panic)
                ),
            )
        });
        if let Err(e) = result {
            // Static reservations of a node that never produced: nothing will release them.
            self.live
                .fetch_sub(self.prio.output_bytes[node as usize], Ordering::Relaxed);
            self.fail(e);
            return;
        }
        let finished = catch_unwind(AssertUnwindSafe(|| self.finish_node(node, scratch)));
        if let Err(panic) = finished {
            // The run stops here: what it made ready is dropped (the failure ends the run once
            // the running tasks finish), and whatever its values hold goes back when it drops.
            scratch.ready.clear();
            scratch.admitted.clear();
            self.fail(Error::new(
                ErrorKind::KernelPanicked,
                format!(
                    "internal error after node {} ran: {}",
                    self.graph.node_label(node),
                    panic_text(&*panic)
                ),
            ));
        }
    }

    fn run_kernel(&self, node: u32, scratch: &mut Scratch) -> Result<()> {
        let g = self.graph;
        let Scratch {
            inputs,
            outputs,
            buffers,
            executed,
            acquires,
            slot,
            thread,
            busy_ns,
            taken,
            ..
        } = scratch;
        let mut cache = self.cache(*slot);
        let values = g.node_values(node);
        outputs.clear();
        buffers.clear();
        *taken = None;
        let mut in_place_output = None;
        for v in values.clone() {
            let mut buffer = Buffer::NONE;
            if let OutputSize::Bytes(n) = g.value_size(v) {
                if let Some(input) = self.take_over(node, v - values.start, n) {
                    // SAFETY: the producer of `input` finished, and this node is its last reader.
                    let held = unsafe { (*self.slots[input as usize].get()).buffer };
                    buffer = Buffer {
                        ptr: held.ptr,
                        capacity: n,
                        block: held.block,
                    };
                    *taken = Some(input);
                    in_place_output = Some((v - values.start) as usize);
                    buffers.push(buffer);
                    outputs.push(Tensor::new(buffer.ptr, buffer.capacity));
                    continue;
                }
                if let Some(offset) = self.plan.and_then(|p| p.offset(v)) {
                    if self.plan.is_some_and(|p| p.alias_of(v).is_some()) {
                        in_place_output = Some((v - values.start) as usize);
                    }
                    buffer = Buffer::new((self.arena.ptr as usize + offset as usize) as *mut c_void, n);
                    if g.zero_output(node) {
                        // SAFETY: the plan gives this value `n` bytes of the arena, which no value
                        // live at the same time overlaps.
                        unsafe { buffer.ptr.cast::<u8>().write_bytes(0, n) };
                    }
                    buffers.push(buffer);
                    outputs.push(Tensor::new(buffer.ptr, buffer.capacity));
                    continue;
                }
                if let Some(cache) = cache.as_deref_mut().filter(|_| n <= CACHE_MAX_BYTES) {
                    *acquires += self.refill(cache, n)?;
                    let i = cache.blocks.iter().rposition(|b| b.capacity == n).expect("refilled");
                    buffer = cache.blocks.swap_remove(i);
                    sanitize::reveal(buffer.ptr.cast(), n);
                    if g.zero_output(node) {
                        // SAFETY: the cached block holds `n` bytes and is this node's alone.
                        unsafe { buffer.ptr.cast::<u8>().write_bytes(0, n) };
                    }
                    buffers.push(buffer);
                    outputs.push(Tensor::new(buffer.ptr, buffer.capacity));
                    continue;
                }
                let until = g.release_tick(v).map_or(NEVER, u64::from);
                match self.pool.acquire_until(n, g.zero_output(node), until, Owner::Run) {
                    Ok(p) => {
                        *acquires += 1;
                        buffer = Buffer::new(p.as_ptr().cast(), n)
                    }
                    Err(e) => {
                        for (k, &b) in buffers.iter().enumerate() {
                            if Some(k) != in_place_output {
                                self.give_back(b);
                            }
                        }
                        let k = v - values.start;
                        return err(
                            e.kind(),
                            format!(
                                "output {k} of node '{}' ({n} bytes): {}",
                                g.node_name(node),
                                e.message()
                            ),
                        );
                    }
                }
            }
            buffers.push(buffer);
            outputs.push(Tensor::new(buffer.ptr, buffer.capacity));
        }
        inputs.clear();
        // SAFETY: every input's producer finished before this node became ready (module docs).
        inputs.extend(
            g.node_inputs(node)
                .iter()
                .map(|&v| unsafe { (*self.slots[v as usize].get()).tensor }),
        );

        let kernel = g.kernel(node).expect("operator nodes have kernels");
        let reserve = |bytes: u64| self.reserve_dynamic(node, bytes);
        let mut ctx = KernelCtx {
            graph: g,
            node,
            pool: self.pool,
            inputs,
            outputs,
            buffers,
            error: None,
            in_place: in_place_output,
            reserve: self
                .gate
                .is_some()
                .then_some(&reserve as &(dyn Fn(u64) -> Result<()> + Sync)),
            reserved: 0,
            refused: None,
            acquired: 0,
        };
        *executed += 1;
        let sample = self.learn && (*executed % SAMPLE_EVERY == 0 || g.learned_op_ns(g.op_index(node)) == 0);
        let start = (sample || self.trace.is_some()).then(Instant::now);
        let outcome = catch_unwind(AssertUnwindSafe(|| kernel(&mut ctx)));
        if let Some(start) = start {
            let ns = start.elapsed().as_nanos() as u64;
            if sample {
                g.learn(node, ns);
            }
            if let Some(t) = &self.trace {
                *busy_ns += ns;
                let begin = start.duration_since(t.start).as_nanos() as u64;
                let event = NodeEvent {
                    node,
                    thread: *thread,
                    start_ns: begin,
                    end_ns: begin + ns,
                    live_bytes: self.live.load(Ordering::Relaxed),
                    reserved_bytes: self.pool.stats().reserved_bytes,
                };
                lock(&t.events).push(event);
            }
        }
        let detail = ctx.error.take();
        let (refused, reserved_dynamic) = (ctx.refused.take(), ctx.reserved);
        *acquires += ctx.acquired;
        let failure = match outcome {
            // A dynamic output the memory limit refused fails the node, whatever the kernel made
            // of the refusal.
            Ok(_) if refused.is_some() => refused,
            Ok(Ok(())) => check_outputs(g, node, outputs, buffers)
                .and_then(|_| self.check_red_zones(node, buffers, in_place_output))
                .err(),
            Ok(Err(msg)) => {
                let msg = match detail {
                    Some(d) => format!("{d} ({msg})"),
                    None => msg,
                };
                Some(Error::new(
                    ErrorKind::KernelFailed,
                    format!("node {} failed: {msg}", g.node_label(node)),
                ))
            }
            Err(panic) => Some(Error::new(
                ErrorKind::KernelPanicked,
                format!(
                    "kernel of node {} panicked: {}",
                    g.node_label(node),
                    panic_text(&*panic)
                ),
            )),
        };
        if let Some(e) = failure {
            // `buffers` records every block the node holds, dynamic ones included.
            for (k, &b) in buffers.iter().enumerate() {
                if Some(k) != in_place_output {
                    self.give_back(b);
                }
            }
            self.live.fetch_sub(reserved_dynamic, Ordering::Relaxed);
            return Err(e);
        }
        // Commit: the outputs become values.
        let mut dynamic = 0;
        for (k, v) in values.enumerate() {
            if g.value_size(v) == OutputSize::Dynamic {
                dynamic += buffers[k].capacity as u64;
            }
            // SAFETY: only this node writes its outputs' slots, before anyone may read them.
            unsafe {
                *self.slots[v as usize].get() = Slot {
                    tensor: outputs[k],
                    buffer: buffers[k],
                }
            };
        }
        if self.gate.is_none() {
            // Under a limit the kernel reserved them as it allocated (`reserve_dynamic`).
            self.add_live(dynamic);
        }
        Ok(())
    }

    /// After a successful kernel: drop what nobody needs any more, then mark successors.
    fn finish_node(&self, node: u32, scratch: &mut Scratch) {
        super::fault::check(self.graph, node);
        let g = self.graph;
        // Values this node freed, kept only under a memory limit: admission hears of them
        // (`readmit`); without one nothing needs the list.
        let gated = self.gate.is_some();
        let freed = &mut scratch.freed;
        freed.clear();
        for v in g.node_values(node) {
            if self.refs[v as usize].load(Ordering::Relaxed) == 0 && self.drop_value(v, scratch.slot) && gated {
                freed.push(v);
            }
        }
        for &v in g.node_inputs(node) {
            if self.refs[v as usize].fetch_sub(1, Ordering::AcqRel) == 1 {
                if scratch.taken == Some(v) {
                    // Its buffer lives on as this node's output: only the value goes.
                    // SAFETY: the last reference is gone; only this thread touches the slot.
                    let moved = unsafe { std::mem::take(&mut *self.slots[v as usize].get()) };
                    self.live.fetch_sub(moved.buffer.capacity as u64, Ordering::Relaxed);
                    // The run's count went down: waiting nodes get their look, as after a release.
                    if gated {
                        freed.push(v);
                    }
                    continue;
                }
                if self.drop_value(v, scratch.slot) && gated {
                    freed.push(v);
                }
            }
        }
        scratch.nodes_run += 1;
        let ready = &mut scratch.ready;
        if !scratch.freed.is_empty() {
            self.readmit(&mut scratch.admitted, &scratch.freed);
        }
        for &s in self.prio.successors_in(self.policy, node) {
            if self.pending[s as usize].fetch_sub(1, Ordering::AcqRel) == 1 {
                ready.push(s);
            }
        }
    }

    /// Returns a value's buffer to the pool, or to the thread's cache if it is small and the run
    /// has no memory limit (under a limit the pool's own count must stay exact); true if it held
    /// pool memory.
    fn drop_value(&self, v: u32, slot_of_thread: Option<usize>) -> bool {
        // SAFETY: the last reference is gone (refs reached 0 with AcqRel): nobody reads it again.
        let value = unsafe { std::mem::take(&mut *self.slots[v as usize].get()) };
        let bytes = value.buffer.capacity;
        if bytes == 0 {
            return false;
        }
        if self.in_arena(value.buffer) {
            self.live.fetch_sub(bytes as u64, Ordering::Relaxed);
            return true;
        }
        match self.cache(slot_of_thread).filter(|_| bytes <= CACHE_MAX_BYTES) {
            Some(cache) => {
                // Parked until a node of this thread takes it: a kernel that kept a pointer to
                // the value and reads it now is reported by the checkers.
                sanitize::hide(value.buffer.ptr.cast(), bytes);
                cache.blocks.push(value.buffer);
                if cache.blocks.len() > CACHE_BLOCKS {
                    release_many(self.pool, cache.blocks.drain(..CACHE_BLOCKS / 2));
                }
            }
            None => release(self.pool, value.buffer),
        }
        // Only now may admission count these bytes as free: the pool has them back, so the
        // pool's live bytes never exceed what the run accounts for.
        self.live.fetch_sub(bytes as u64, Ordering::Relaxed);
        true
    }
}

impl Window {
    /// Takes a place in the window, or defers the node: false if it must wait.
    pub fn enter(&self, node: u32, reserved: bool) -> bool {
        if self.running.fetch_add(1, Ordering::AcqRel) < self.cap {
            return true;
        }
        self.running.fetch_sub(1, Ordering::AcqRel);
        let mut deferred = lock(&self.deferred);
        // Retry under the lock `leave` takes: a place freed meanwhile is seen here.
        if self.running.fetch_add(1, Ordering::AcqRel) < self.cap {
            return true;
        }
        self.running.fetch_sub(1, Ordering::AcqRel);
        deferred.push((node, reserved));
        false
    }

    /// Gives the place back; returns a deferred node to start, if any, and whether its memory
    /// is reserved.
    pub fn leave(&self) -> Option<(u32, bool)> {
        self.running.fetch_sub(1, Ordering::AcqRel);
        lock(&self.deferred).pop()
    }
}

impl Drop for RunState<'_> {
    /// Whatever the run still holds goes back: everything after a failure, nothing after
    /// success (the graph outputs have moved to the result).
    fn drop(&mut self) {
        for i in 0..self.slots.len() {
            let buffer = std::mem::take(self.slots[i].get_mut()).buffer;
            self.give_back(buffer);
        }
        release(self.pool, std::mem::replace(&mut self.arena, Buffer::NONE));
    }
}

/// After a kernel succeeded: every output exists, sits where the run put it, and fits.
fn check_outputs(g: &Graph, node: u32, outputs: &[Tensor], buffers: &[Buffer]) -> Result<()> {
    for (k, (t, b)) in outputs.iter().zip(buffers).enumerate() {
        let problem = if b.ptr.is_null() {
            "is dynamic but the kernel did not allocate it".to_string()
        } else if t.data != b.ptr {
            format!("had its data pointer changed from {:p} to {:p}", b.ptr, t.data)
        } else if t.nbytes > b.capacity {
            format!("claims {} bytes but its buffer holds {}", t.nbytes, b.capacity)
        } else if !(0..=MAX_DIMS as i32).contains(&t.ndim) {
            format!("has ndim {}, outside 0..={MAX_DIMS}", t.ndim)
        } else {
            continue;
        };
        return err(
            ErrorKind::KernelFailed,
            format!("output {k} of node {} {problem}", g.node_label(node)),
        );
    }
    Ok(())
}

/// Gives blocks of the cache back to the pool, under one lock.
fn release_many(pool: &Pool, buffers: impl IntoIterator<Item = Buffer>) {
    let blocks = buffers.into_iter().filter_map(|b| NonNull::new(b.ptr.cast::<u8>()));
    // SAFETY: a run releases only blocks it acquired, once, when their last reader is done.
    unsafe { pool.release_many(blocks, Owner::Run) }.expect("a run releases only blocks it acquired, once");
}

/// Gives a buffer back to the pool; caller memory (NULL) and empty dynamic outputs (capacity 0,
/// never from the pool) are skipped.
pub(super) fn release(pool: &Pool, buffer: Buffer) {
    if buffer.capacity == 0 {
        return;
    }
    if let Some(p) = NonNull::new(buffer.ptr.cast::<u8>()) {
        // SAFETY: as in `release_many`.
        match unsafe { pool.release_by(p, Owner::Run) } {
            // A red zone overwritten: the block is back in the pool, and the run has already
            // named the node that did it (see `check_red_zones`).
            Err(e) if e.kind() == ErrorKind::KernelFailed => {}
            other => other.expect("a run releases only blocks it acquired, once"),
        }
    }
}

fn lock<T>(m: &Mutex<T>) -> MutexGuard<'_, T> {
    m.lock().unwrap_or_else(|p| p.into_inner())
}

pub(super) fn panic_text(panic: &(dyn std::any::Any + Send)) -> &str {
    panic
        .downcast_ref::<&str>()
        .copied()
        .or_else(|| panic.downcast_ref::<String>().map(String::as_str))
        .unwrap_or("(no message)")
}
