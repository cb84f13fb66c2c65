//! The state of one run, shared by every thread that executes its nodes.
//!
//! Protocol (why the unsafe cells are sound):
//! - A value's slot is written once, by its producer, before the producer decrements its
//!   consumers' `pending` counts (AcqRel). A consumer reads the slot only after its own count
//!   reached 0, so it sees the write.
//! - A slot is emptied by the thread whose decrement of the value's `refs` reached 0 (AcqRel), so
//!   every reader has finished with it. Graph outputs hold one extra reference that only the
//!   caller drops, after the run is over.
//! - `active` counts the run's queued and running tasks, the tasks the window deferred, and its
//!   pending nodes (each holds the place of the task that ran its kernel until the task that ends
//!   it runs, `pending.rs`). Each task pushes the successors it made ready (incrementing
//!   `active`) before it decrements `active` for itself, so `active` reaches 0 exactly once: when
//!   nothing of the run is queued, running, deferred or pending any more. After that decrement,
//!   or after handing its place to a pending node, the task touches nothing of the run, and the
//!   caller may drop it.
//!
//! The run's parts live beside it: binding its inputs (`bind.rs`), memory admission
//! (`gate.rs`), the window (`window.rs`), one node's kernel call (`kernel_call.rs`), the
//! per-thread block caches (`cache.rs`), where its large values go in the pool (`hints.rs`).

use std::cell::UnsafeCell;
use std::mem::ManuallyDrop;
use std::panic::{catch_unwind, AssertUnwindSafe};
use std::sync::atomic::{AtomicBool, AtomicU32, AtomicU64, AtomicUsize, Ordering};
use std::sync::{Arc, Mutex, MutexGuard};
use std::time::Instant;

use super::cache::{release, BlockCache};
use super::context::{Observer, RunContext};
use super::gate::{Gate, GateInner};
use super::hints::{Hints, NO_HINT};
use super::padded::CachePadded;
use super::pending::PendingNode;
use super::recycle::{RunArrays, Step};
use super::run::CancelToken;
use super::scratch::Scratch;
use super::window::Window;
use crate::error::{Error, ErrorKind, Result};
use crate::graph::Graph;
use crate::kernel::Buffer;
pub(super) use crate::kernel::Slot;
use crate::plan::Plan;
use crate::pool::{Owner, Pool, NEVER};
use crate::sched::{Admission, Policy, Priorities, RunPriority, BANDS};
use crate::tensor::Tensor;
use crate::trace::NodeEvent;

/// What a traced run records (times count from `RunState::started`).
pub(super) struct Tracer {
    pub(super) events: Mutex<Vec<NodeEvent>>,
}

/// How a run is set up.
pub(super) struct StateOptions<'r> {
    /// Most live bytes; 0: no limit.
    pub memory_limit: u64,
    /// Most nodes in flight at once, executing or pending; `None`: no window.
    pub window: Option<u32>,
    pub learn: bool,
    pub policy: Policy,
    /// How urgent the run is against other runs on its executor.
    pub priority: RunPriority,
    /// Run on an executor (per-thread block caches apply).
    pub parallel: bool,
    /// Record every node's execution (times every kernel).
    pub trace: bool,
    /// Place statically sized values at this plan's offsets.
    pub plan: Option<&'r Plan>,
    pub cancel: Option<&'r CancelToken>,
    pub deadline: Option<Instant>,
    /// The graph's hints and where the pool's free space for them starts (`hints.rs`).
    pub hints: Option<(&'r Hints, usize)>,
    /// What kernels reach of the run, and who hears nodes start and end.
    pub context: RunContext<'r>,
    pub observer: Option<&'r dyn Observer>,
    /// When the run started, if it is traced or observed: their times count from it.
    pub started: Option<Instant>,
    /// The priorities the run follows; if they are the graph's own, with the count of learned
    /// samples they are current for (the run keeps them with its arrays for the next one).
    pub prio: (Arc<Priorities>, Option<u64>),
    /// The graph's steps and initial reference counts (`recycle::templates`), which the arrays
    /// were reset from.
    pub templates: (&'r [Step], &'r [u32]),
}

pub(super) struct RunState<'r> {
    pub graph: &'r Graph,
    pub pool: &'r Pool,
    /// Handed back by `finish` (without touching its count), or dropped with the state: see
    /// `StateOptions::prio`.
    pub prio: ManuallyDrop<Arc<Priorities>>,
    pub(super) prio_samples: Option<u64>,
    /// The arrays the run goes in, lent to it alone (`recycle::Lent`) while the state lives;
    /// the fields below are theirs, borrowed once here for the hot paths.
    pub(super) arrays: &'r RunArrays,
    /// Per value: its descriptor and buffer, written once by its producer (module docs).
    pub(super) slots: &'r [UnsafeCell<Slot>],
    /// Per input slot of every node (in the graph's order of inputs): the descriptor it reads,
    /// in `slots`. Fixed for the arrays' life, so a kernel's inputs are a slice of it.
    pub(super) inputs: &'r [*const Tensor],
    /// Per value: readers still to finish, plus one for a graph output. The decrement that
    /// reaches 0 (AcqRel) frees the value: it is ordered after every reader's decrement, so
    /// after every read. A value with a single read and no place in the result is never
    /// counted down: its one reader frees it (its count stays 1, which `take_over` reads as
    /// "this node is the last reader", as it is).
    pub(super) refs: &'r [AtomicU32],
    /// Per node: producers still to finish. The decrement that reaches 0 (AcqRel) makes the
    /// node ready: it is ordered after every producer's slot writes. A node with a single
    /// producer is never counted down: that producer makes it ready, and hands it over on its
    /// own thread or through a queue, which orders the slot writes as the count would.
    pub(super) pending: &'r [AtomicU32],
    /// Queued, running and deferred tasks and pending nodes of the run (module docs): reaches 0
    /// exactly once, when the run is over. AcqRel, so the caller that sees 0 sees everything the tasks did. Every task
    /// writes it: on its own cache line.
    pub active: CachePadded<AtomicUsize>,
    /// Set (Release) with the first error, read (Acquire) before starting a node; the error
    /// itself is behind `error`'s lock.
    pub(super) failed: AtomicBool,
    pub(super) error: Mutex<Option<Error>>,
    /// Bytes the run holds: reserved outputs and values not yet released. A counter, not a
    /// publication: admission reads and raises it only under the gate's lock, and a releaser
    /// lowers it before it takes that lock to readmit, so the lock orders every decision after
    /// the releases it could depend on. Nothing else is published through it: Relaxed. On an
    /// executor every node's threads write it: on its own cache line, so that the fields every
    /// node reads do not go with it.
    pub(super) live: CachePadded<AtomicU64>,
    /// The most `live` reached; with `acquires` and `nodes_run`, counters read once the run is
    /// over (after `active` reached 0): Relaxed.
    pub(super) peak_live: AtomicU64,
    pub(super) acquires: AtomicU64,
    pub(super) nodes_run: AtomicU64,
    /// Boxed: only memory-limited runs have one (and allocate for their admission anyway),
    /// and every run writes its state whole.
    pub(super) gate: Option<Box<Gate<'r>>>,
    pub window: Option<Window>,
    /// Per thread of the run (0: its caller, i + 1: worker i): small blocks kept at hand, so that
    /// small outputs rarely take the pool's lock. Slot i is touched only by its thread while the
    /// run goes on, and by the caller once it is over. None under a memory limit or with red
    /// zones (the pool's own count must then stay exact, and every block is checked). In a
    /// sequential run the pool counts the cached blocks as parked, not live (`sequential`); in a
    /// parallel run as live until the run ends.
    pub(super) caches: &'r [UnsafeCell<BlockCache>],
    /// Per node: what executing it needs (`recycle::Step`).
    pub(super) steps: &'r [Step],
    /// Per value: what its count in `refs` starts from.
    pub(super) initial_refs: &'r [u32],
    /// Where this run asks the pool for its large values' blocks (`hints.rs`), if
    /// anywhere: the hints and the address their offsets count from.
    pub(super) hints: Option<(&'r Hints, usize)>,
    /// Plain nodes take the short path (`place_plain`): not with a plan, which places values
    /// itself.
    pub(super) plain_run: bool,
    /// Plain nodes take the shortest path, `lean.rs` (which says when a run is lean).
    pub(super) lean: bool,
    /// With a static plan: the plan, and the arena its values live in (one pool block per run,
    /// handed to the result with the graph outputs it may hold).
    pub(super) plan: Option<&'r Plan>,
    /// Stops the run between nodes.
    pub(super) cancel: Option<&'r CancelToken>,
    pub(super) deadline: Option<Instant>,
    pub(super) arena: Buffer,
    /// Measure kernels and feed the graph's learned estimates.
    pub(super) learn: bool,
    pub(super) trace: Option<Tracer>,
    /// Kernel time of a traced run; a counter like `acquires`.
    pub(super) busy_ns: AtomicU64,
    /// Which order: FIFO has one band and no continuations.
    pub(super) policy: Policy,
    /// Added to every band: 0 for a high-priority run, [`BANDS`] for a normal one, so that the
    /// executor's queues hold every urgent node ahead of every normal one.
    pub(super) band_offset: usize,
    /// A sequential run: one thread writes its counts (`add_live`), and the blocks in its cache
    /// are parked in the pool (not live there; the cache settles the count with the pool in
    /// batches, see `BlockCache::unparked`). A parallel run's caches count as live in the pool
    /// until the run ends: parking would make every node write a line all threads share.
    pub(super) sequential: bool,
    /// What the run's kernels reach through their context (`context.rs`).
    pub(super) context: RunContext<'r>,
    pub(super) observer: Option<&'r dyn Observer>,
    /// When the run started, if it is traced or observed (their times count from it).
    pub(super) started: Option<Instant>,
    /// The run ended well and `finish` handed its priorities back: the drop has nothing to do.
    pub(super) finished: bool,
}

// SAFETY: the slots are shared under the protocol in the module docs; everything else is atomic
// or behind a mutex. Raw pointers in slots point at pool blocks owned by the run, or at caller
// memory the caller keeps valid for the whole run.
unsafe impl Sync for RunState<'_> {}
// SAFETY: as above; the run owns its pool blocks.
unsafe impl Send for RunState<'_> {}

impl<'r> RunState<'r> {
    /// The state of a run of `graph` in `arrays` (`recycle::Lent`, then `fit_caches` to
    /// [`cache_count`](super::cache::cache_count), and `reset` from the run's templates and
    /// priorities).
    pub fn new(graph: &'r Graph, pool: &'r Pool, arrays: &'r RunArrays, options: StateOptions<'r>) -> Self {
        let StateOptions {
            memory_limit,
            window,
            learn,
            policy,
            priority,
            parallel,
            trace,
            plan,
            cancel,
            deadline,
            hints,
            context,
            observer,
            started,
            prio: (prio, prio_samples),
            templates: (steps, initial_refs),
        } = options;
        let cached = arrays.caches.len();
        RunState {
            graph,
            pool,
            prio: ManuallyDrop::new(prio),
            prio_samples,
            arrays,
            slots: &arrays.slots,
            inputs: &arrays.inputs,
            refs: &arrays.refs,
            pending: &arrays.pending,
            active: CachePadded(AtomicUsize::new(0)),
            failed: AtomicBool::new(false),
            error: Mutex::new(None),
            live: CachePadded(AtomicU64::new(0)),
            peak_live: AtomicU64::new(0),
            acquires: AtomicU64::new(0),
            nodes_run: AtomicU64::new(0),
            gate: (memory_limit > 0).then(|| {
                Box::new(Gate {
                    limit: memory_limit,
                    inner: Mutex::new(GateInner {
                        waiting: Vec::new(),
                        admission: Admission::new(graph, memory_limit, parallel),
                    }),
                })
            }),
            window: window.map(|cap| Window {
                cap: cap.max(1),
                running: AtomicU32::new(0),
                deferred: Mutex::new(Vec::new()),
            }),
            caches: &arrays.caches,
            steps,
            initial_refs,
            plain_run: plan.is_none(),
            lean: cached > 0 && plan.is_none() && !trace && observer.is_none(),
            hints,
            plan,
            cancel,
            deadline,
            arena: Buffer::NONE,
            learn,
            trace: trace.then(|| Tracer {
                events: Mutex::new(Vec::new()),
            }),
            busy_ns: AtomicU64::new(0),
            policy,
            band_offset: match priority {
                RunPriority::High => 0,
                RunPriority::Normal => BANDS,
            },
            sequential: !parallel,
            context,
            observer,
            started,
            finished: false,
        }
    }

    /// The slot of value `v`, for the calling thread: `&mut self` is had only before any node
    /// runs or once the run is over (its tasks borrow the state), and the arrays are lent to
    /// this state alone.
    pub(super) fn slot_mut(&mut self, v: u32) -> &mut Slot {
        // SAFETY: as above, no other reference into the slot exists meanwhile.
        unsafe { &mut *self.slots[v as usize].get() }
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

    pub(super) fn in_arena(&self, b: Buffer) -> bool {
        self.arena.holds(b)
    }

    /// Where the pool should put value `v`'s block, if the run has a hint for it.
    pub(super) fn hint(&self, v: u32) -> Option<usize> {
        let (hints, base) = self.hints?;
        match hints.offsets[v as usize] {
            NO_HINT => None,
            offset => Some(base + offset as usize),
        }
    }

    /// Returns a buffer to the pool, unless it lives in the plan's arena.
    pub(super) fn give_back(&self, b: Buffer) {
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

    /// The queue band of a node: its priority band under the policy, or 0 for FIFO.
    pub fn band(&self, node: u32) -> usize {
        self.prio.band(self.policy, node) + self.band_offset
    }

    /// Whether the run is high-priority (`RunPriority::High`).
    pub fn urgent(&self) -> bool {
        self.band_offset == 0
    }

    /// Which of the nodes `node` just made ready its thread runs next (see
    /// [`Priorities::continuation`]).
    pub fn continuation(&self, node: u32, ready: &[u32]) -> Option<u32> {
        // While a high-priority run goes on the threads, a normal run's successors take their
        // turn in the queues, behind its nodes.
        if !self.urgent()
            && self
                .context
                .executor
                .is_some_and(|e| e.shared().urgent_runs.load(Ordering::Relaxed) > 0)
        {
            return None;
        }
        self.prio.continuation(self.policy, node, ready)
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
        let message = match why {
            ErrorKind::Cancelled => "the run was cancelled",
            _ => "the run passed its deadline",
        };
        self.fail(Error::new(why, message));
        true
    }

    /// The run's error, once it is over (its threads' counts gathered): a stopped run's says
    /// how far it got.
    pub fn take_error(&mut self) -> Option<Error> {
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
    pub fn fail(&self, e: Error) {
        let mut slot = self.error.lock().unwrap_or_else(|p| p.into_inner());
        if slot.is_none() {
            *slot = Some(e);
            self.failed.store(true, Ordering::Release);
        }
    }

    pub fn stats(&self) -> (u64, u64, u64) {
        (
            self.nodes_run.load(Ordering::Relaxed),
            self.peak_live.load(Ordering::Relaxed),
            self.acquires.load(Ordering::Relaxed),
        )
    }

    /// Counts `bytes` more as live, raising `highest`, the thread's own peak (`Scratch::peak_live`).
    ///
    /// The run's peak is exact without a shared write per node beyond the add itself: the count
    /// only rises here, and each rise returns its new value to the thread that made it (one
    /// atomic add, in one order for all threads), so the highest count ever reached is the
    /// highest any thread saw. Each thread keeps its own and hands it over when it flushes
    /// (`flush`). A sequential run's counts have one writer, its thread: a plain load and store.
    pub(super) fn add_live(&self, bytes: u64, highest: &mut u64) {
        if bytes == 0 {
            return;
        }
        let now = match self.sequential {
            true => {
                let now = self.live.load(Ordering::Relaxed) + bytes;
                self.live.store(now, Ordering::Relaxed);
                now
            }
            false => self.live.fetch_add(bytes, Ordering::Relaxed) + bytes,
        };
        *highest = (*highest).max(now);
    }

    /// Counts `bytes` fewer as live (as `add_live`, a plain store in a sequential run).
    pub(super) fn sub_live(&self, bytes: u64) {
        match self.sequential {
            true => self
                .live
                .store(self.live.load(Ordering::Relaxed) - bytes, Ordering::Relaxed),
            false => _ = self.live.fetch_sub(bytes, Ordering::Relaxed),
        }
    }

    /// Adds the counts of a thread's task to the run's: to the thread's own place in the run if
    /// it has one (plain adds, no line another thread writes), else to the shared counts. Before
    /// the task leaves `active`: that AcqRel decrement publishes them to whoever sees the run end.
    pub fn flush(&self, scratch: &mut Scratch) {
        let counts = std::mem::take(&mut scratch.counts);
        if let Some(cache) = self.cache(scratch.slot) {
            cache.counts.add(counts);
            return;
        }
        if counts.busy_ns > 0 {
            self.busy_ns.fetch_add(counts.busy_ns, Ordering::Relaxed);
        }
        if counts.nodes_run > 0 {
            self.nodes_run.fetch_add(counts.nodes_run, Ordering::Relaxed);
        }
        if counts.acquires > 0 {
            self.acquires.fetch_add(counts.acquires, Ordering::Relaxed);
        }
        self.raise_peak(counts.peak_live);
    }

    /// Raises the run's peak to `highest`, a count of its live bytes some thread saw (a plain
    /// load first: the peak rarely moves).
    pub(super) fn raise_peak(&self, highest: u64) {
        if highest > self.peak_live.load(Ordering::Relaxed) {
            self.peak_live.fetch_max(highest, Ordering::Relaxed);
        }
    }

    /// Runs one node: outputs from the pool, the kernel, then releases and readiness. Nodes it
    /// makes ready (and admits) are appended to `scratch.ready`, most critical first. A failure
    /// is recorded in the run, not returned: the node's own buffers go back, and nothing it
    /// would have made ready is started. Returns the node if its kernel deferred its end
    /// (`pending.rs`): the caller hands the run its counts, then arrives at the node
    /// (`PendingNode::kernel_arrives`), and whoever arrives last ends it (`end_pending`).
    pub fn execute(&self, node: u32, scratch: &mut Scratch) -> Option<Arc<PendingNode>> {
        if self.failed() || self.stopped() {
            return None;
        }
        // By reference: a copy of the record costs more than the reads it saves.
        let step = &self.steps[node as usize];
        match self.lean_cache(step, scratch) {
            Some(cache) => self.execute_lean(node, step, cache, scratch),
            None => self.execute_general(node, step, scratch),
        }
    }

    /// `execute` for a node off the short path (`lean.rs`): out of line, so that the short
    /// path's frame stays small.
    #[inline(never)]
    fn execute_general(&self, node: u32, step: &Step, scratch: &mut Scratch) -> Option<Arc<PendingNode>> {
        if self.gate.is_none() {
            self.add_live(self.prio.output_bytes[node as usize], &mut scratch.counts.peak_live);
        }
        // A panic here is a bug in graphsched (kernel panics are caught around the kernel):
        // it fails the run with `KernelPanicked`, never unwinds into the executor's threads.
        let outcome = catch_unwind(AssertUnwindSafe(|| self.run_kernel(node, step, scratch)));
        match outcome.unwrap_or_else(|panic| Err(self.internal_error(node, "while running", &*panic))) {
            Ok(Some(pending)) => return Some(pending),
            Ok(None) => self.end_node::<false>(node, step, Ok(()), scratch),
            Err(e) => self.end_node::<false>(node, step, Err(e), scratch),
        }
        None
    }

    /// Ends a pending node once its completion came, as `execute` ends any other node.
    pub fn end_pending(&self, pending: &PendingNode, scratch: &mut Scratch) {
        let (_, node) = pending.run();
        let step = self.steps[node as usize];
        let concluded = catch_unwind(AssertUnwindSafe(|| self.conclude_pending(pending, &step, scratch)));
        let result = concluded.unwrap_or_else(|panic| Err(self.internal_error(node, "while ending", &*panic)));
        self.end_node::<true>(node, &step, result, scratch);
    }

    #[cold]
    pub(super) fn internal_error(&self, node: u32, when: &str, panic: &(dyn std::any::Any + Send)) -> Error {
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

pub(super) fn lock<T>(m: &Mutex<T>) -> MutexGuard<'_, T> {
    m.lock().unwrap_or_else(|p| p.into_inner())
}

pub(super) fn panic_text(panic: &(dyn std::any::Any + Send)) -> &str {
    panic
        .downcast_ref::<&str>()
        .copied()
        .or_else(|| panic.downcast_ref::<String>().map(String::as_str))
        .unwrap_or("(no message)")
}
