//! The state of one run, shared by every thread that executes its nodes.
//!
//! Protocol (why the unsafe cells are sound):
//! - A value's slot is written once, by its producer, before the producer decrements its
//!   consumers' `pending` counts (AcqRel). A consumer reads the slot only after its own count
//!   reached 0, so it sees the write.
//! - A value's count of readers (`refs`, in its slot beside the descriptor but never reached
//!   through a `&mut Slot` while others may count it) is set by its producer as it ends, before
//!   it makes any reader ready. A slot is emptied by the thread whose decrement of that count
//!   reached 0 (AcqRel), so every reader has ended with it. Graph outputs hold one extra
//!   reference that only the caller drops, after the run is over.
//! - `active` counts the run's queued and running tasks, the tasks the window deferred, and its
//!   pending nodes (each holds the place of the task that ran its kernel until the task that ends
//!   it runs, [`pending`](crate::exec::node::pending)). Each task pushes the successors it made ready (incrementing
//!   `active`) before it decrements `active` for itself, so `active` reaches 0 exactly once: when
//!   nothing of the run is queued, running, deferred or pending any more. After that decrement,
//!   or after handing its place to a pending node, the task touches nothing of the run, and the
//!   caller may drop it. The task that takes a run queued in the budget to 0 gives its
//!   reservation back and reads its caller (`queued`) just before, while the run still counts
//!   it alone, and unparks the caller after.
//!
//! The run's parts live beside it: binding its inputs ([`bind`](crate::exec::run::bind)), memory admission
//! ([`admission`](crate::exec::memory::admission)), the window ([`window`](crate::exec::workers::window)), one node's kernel call ([`call`](crate::exec::node::call)), the
//! per-thread block caches ([`cache`](crate::exec::memory::cache)), where its large values go in the pool ([`hints`](crate::exec::memory::hints)).

pub(in crate::exec) mod annex;
pub(in crate::exec) mod arrays;
mod control;
pub(in crate::exec) mod counters;
mod counts;
pub(in crate::exec) use counts::Tally;
pub(in crate::exec) mod end;

pub(in crate::exec) use control::{lock, panic_text, Stop};

use std::cell::UnsafeCell;
use std::mem::ManuallyDrop;
use std::sync::atomic::{AtomicU32, AtomicU64, AtomicUsize, Ordering};
use std::sync::{Arc, Mutex};
use std::time::Instant;

use crate::error::Result;
use crate::exec::memory::admission::{Gate, GateInner};
use crate::exec::memory::cache::{release, BlockCache};
use crate::exec::memory::hints::{Hints, NO_HINT};
use crate::exec::node::context::{Observer, RunContext};
use crate::exec::padded::CachePadded;
use crate::exec::run::CancelToken;
use crate::exec::state::annex::Step;
use crate::exec::state::arrays::RunArrays;
use crate::exec::state::counters::CountersView;
use crate::exec::workers::window::Window;
use crate::graph::Graph;
use crate::kernel::Buffer;
pub(in crate::exec) use crate::kernel::Slot;
use crate::plan::Plan;
use crate::pool::{Owner, Pool, NEVER};
use crate::sched::{Admission, Policy, Priorities, RunPriority, BANDS};
use crate::tensor::Tensor;
use crate::trace::NodeEvent;

/// What a traced run records (times count from `RunState::started`).
pub(in crate::exec) struct Tracer {
    pub(in crate::exec) events: Mutex<Vec<NodeEvent>>,
}

/// How a run is set up.
pub(in crate::exec) struct StateOptions<'r> {
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
    /// The graph's hints and where the pool's free space for them starts ([`hints`](crate::exec::memory::hints)).
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

pub(in crate::exec) struct RunState<'r> {
    pub graph: &'r Graph,
    pub pool: &'r Pool,
    /// Handed back by [`end_run`](Self::end_run) (without touching its count), or dropped with the state: see
    /// `StateOptions::prio`.
    pub prio: ManuallyDrop<Arc<Priorities>>,
    pub(in crate::exec) prio_samples: Option<u64>,
    /// The arrays the run goes in, lent to it alone (`recycle::Lent`) while the state lives;
    /// the fields below are theirs, borrowed once here for the hot paths.
    pub(in crate::exec) arrays: &'r RunArrays,
    /// Per value: its descriptor and buffer, written once by its producer (module docs).
    pub(in crate::exec) slots: &'r [UnsafeCell<Slot>],
    /// Per input slot of every node (in the graph's order of inputs): the descriptor it reads,
    /// in `slots`. Fixed for the arrays' life, so a kernel's inputs are a slice of it.
    pub(in crate::exec) inputs: &'r [*const Tensor],
    /// Per node: producers still to finish. The decrement that reaches 0 (AcqRel) makes the
    /// node ready: it is ordered after every producer's slot writes. A node with a single
    /// producer is never counted down: that producer makes it ready, and hands it over on its
    /// own thread or through a queue, which orders the slot writes as the count would.
    pub(in crate::exec) pending: CountersView<'r>,
    /// Queued, running and deferred tasks and pending nodes of the run (module docs): reaches 0
    /// exactly once, when the run is over. AcqRel, so the caller that sees 0 sees everything the tasks did. Every task
    /// writes it: on its own cache line.
    pub active: CachePadded<AtomicUsize>,
    /// Its first error, cancellation and deadline ([`Stop`]).
    pub(in crate::exec) stop: Stop<'r>,
    /// Its live bytes and their peak, and what it counts of its nodes ([`Tally`]).
    pub(in crate::exec) tally: Tally,
    /// Boxed: only memory-limited runs have one (and allocate for their admission anyway),
    /// and every run writes its state whole.
    pub(in crate::exec) gate: Option<Box<Gate<'r>>>,
    pub window: Option<Window>,
    /// Per thread of the run (0: its caller, i + 1: worker i): small blocks kept at hand, so that
    /// small outputs rarely take the pool's lock. Slot i is touched only by its thread while the
    /// run goes on, and by the caller once it is over. None under a memory limit or with red
    /// zones (the pool's own count must then stay exact, and every block is checked). In a
    /// sequential run the pool counts the cached blocks as parked, not live (`sequential`); in a
    /// parallel run as live until the run ends.
    pub(in crate::exec) caches: &'r [UnsafeCell<BlockCache>],
    /// Per node: what executing it needs (`recycle::Step`).
    pub(in crate::exec) steps: &'r [Step],
    /// Per value: what its count in `refs` starts from.
    pub(in crate::exec) initial_refs: &'r [u32],
    /// Where this run asks the pool for its large values' blocks ([`hints`](crate::exec::memory::hints)), if
    /// anywhere: the hints and the address their offsets count from.
    pub(in crate::exec) hints: Option<(&'r Hints, usize)>,
    /// Plain nodes take the short path (`place_plain`): not with a plan, which places values
    /// itself.
    pub(in crate::exec) plain_run: bool,
    /// Plain nodes take the shortest path, [`lean`](crate::exec::node::lean) (which says when a run is lean).
    pub(in crate::exec) lean: bool,
    /// With a static plan: the plan, and the arena its values live in (one pool block per run,
    /// handed to the result with the graph outputs it may hold).
    pub(in crate::exec) plan: Option<&'r Plan>,
    pub(in crate::exec) arena: Buffer,
    /// Measure kernels and feed the graph's learned estimates.
    pub(in crate::exec) learn: bool,
    pub(in crate::exec) trace: Option<Tracer>,
    /// Which order: FIFO has one band and no continuations.
    pub(in crate::exec) policy: Policy,
    /// Added to every band: 0 for a high-priority run, [`BANDS`] for a normal one, so that the
    /// executor's queues hold every urgent node ahead of every normal one.
    pub(in crate::exec) band_offset: usize,
    /// A sequential run: one thread writes its counts (`add_live`), and the blocks in its cache
    /// are parked in the pool (not live there; the cache reports the count to the pool in
    /// batches, see `BlockCache::unparked`). A parallel run's caches count as live in the pool
    /// until the run ends: parking would make every node write a line all threads share.
    pub(in crate::exec) sequential: bool,
    /// What the run's kernels reach through their context ([`context`](crate::exec::node::context)).
    pub(in crate::exec) context: RunContext<'r>,
    pub(in crate::exec) observer: Option<&'r dyn Observer>,
    /// When the run started, if it is traced or observed (their times count from it).
    pub(in crate::exec) started: Option<Instant>,
    /// The run ended well and `end_run` handed its priorities back: the drop has nothing to do.
    pub(in crate::exec) ended: bool,
    /// Set if the run waits in its executor's memory budget, set up, for whoever makes room to
    /// start it (`exec::run::budget`).
    pub(in crate::exec) queued: Option<Queued>,
}

/// A run queued in the memory budget: its caller only waits, and its last task ends it.
pub(in crate::exec) struct Queued {
    /// Parked until the run is over; the task that ends the run unparks it.
    pub caller: std::thread::Thread,
    /// The reservation the run's last task gives back (0 if the run was refused at its start).
    pub reserved: AtomicU64,
    /// How long the run waited, set when it starts.
    pub waited_ns: AtomicU64,
}

// SAFETY: the slots are shared under the protocol in the module docs; everything else is atomic
// or behind a mutex. Raw pointers in slots point at pool blocks owned by the run, or at caller
// memory the caller keeps valid for the whole run.
unsafe impl Sync for RunState<'_> {}
// SAFETY: as above; the run owns its pool blocks.
unsafe impl Send for RunState<'_> {}

impl<'r> RunState<'r> {
    /// The state of a run of `graph` in `arrays` (`recycle::Lent`, then `fit_caches` to
    /// [`cache_count`](crate::exec::memory::cache::cache_count), and `reset` from the run's templates and
    /// priorities).
    pub(super) fn new(graph: &'r Graph, pool: &'r Pool, arrays: &'r RunArrays, options: StateOptions<'r>) -> Self {
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
            pending: arrays.pending.view(),
            active: CachePadded(AtomicUsize::new(0)),
            stop: Stop::new(cancel, deadline),
            tally: Tally::default(),
            gate: (memory_limit > 0).then(|| {
                Box::new(Gate {
                    limit: memory_limit,
                    inner: Mutex::new(GateInner {
                        waiting: Vec::new(),
                        admission: Admission::new(graph, memory_limit, parallel),
                    }),
                })
            }),
            window: window.map(Window::new),
            caches: &arrays.caches,
            steps,
            initial_refs,
            plain_run: plan.is_none(),
            lean: cached > 0 && plan.is_none() && !trace && observer.is_none(),
            hints,
            plan,
            arena: Buffer::NONE,
            learn,
            trace: trace.then(|| Tracer {
                events: Mutex::new(Vec::new()),
            }),
            policy,
            band_offset: match priority {
                RunPriority::High => 0,
                RunPriority::Normal => BANDS,
            },
            sequential: !parallel,
            context,
            observer,
            started,
            ended: false,
            queued: None,
        }
    }

    /// Per value: readers still to finish, plus one for a graph output, in the value's slot
    /// (`Slot::refs`). Its producer sets it as it ends, before it makes any reader ready (and
    /// its binding, before the run starts): nobody reads it before. The decrement that reaches
    /// 0 (AcqRel) frees the value: it is ordered after every reader's decrement, so after every
    /// read. A count that starts at 0 or 1 is neither set by a producer nor read: a value with
    /// no reader goes as its producer ends, and one with a single read and no place in the
    /// result is freed by that reader, with no atomic (and `take_over`, which asks whether a
    /// node is a value's last reader, knows it is when the node makes all of its reads).
    #[inline(always)]
    pub(in crate::exec) fn refs(&self, v: u32) -> &AtomicU32 {
        // SAFETY: the count is reached through a pointer to the field alone, never through a
        // reference to the whole slot: whoever holds `&mut Slot` (the producer while it places
        // and calls, the last reader as it empties the slot) does so while no other thread
        // counts the value (its readers start after the producer ends, and the last decrement
        // comes after every other), so no access to the count overlaps one.
        unsafe { &*std::ptr::addr_of!((*self.slots[v as usize].get()).refs) }
    }

    /// The slot of value `v`, for the calling thread: `&mut self` is had only before any node
    /// runs or once the run is over (its tasks borrow the state), and the arrays are lent to
    /// this state alone.
    pub(in crate::exec) fn slot_mut(&mut self, v: u32) -> &mut Slot {
        // SAFETY: as above, no other reference into the slot exists meanwhile.
        unsafe { &mut *self.slots[v as usize].get() }
    }

    /// Takes the arena of a planned run from the pool. Before any node runs.
    pub(super) fn take_arena_from_pool(&mut self) -> Result<()> {
        // The plan belongs to this run's graph: `run` checked it.
        let Some(plan) = self.plan else { return Ok(()) };
        if plan.arena_bytes() > 0 {
            let bytes = plan.arena_bytes() as usize;
            let block = self.pool.acquire_until(bytes, false, NEVER, Owner::Run)?;
            self.tally.count_acquire();
            self.arena = Buffer::new(block.as_ptr().cast(), bytes);
        }
        Ok(())
    }

    /// Hands the arena to the caller (the result keeps it while it holds graph outputs).
    pub(super) fn take_arena(&mut self) -> Buffer {
        std::mem::replace(&mut self.arena, Buffer::NONE)
    }

    pub(in crate::exec) fn in_arena(&self, b: Buffer) -> bool {
        self.arena.holds(b)
    }

    /// Where the pool should put value `v`'s block, if the run has a hint for it.
    pub(in crate::exec) fn hint(&self, v: u32) -> Option<usize> {
        let (hints, base) = self.hints?;
        match hints.offsets[v as usize] {
            NO_HINT => None,
            offset => Some(base + offset as usize),
        }
    }

    /// Returns a buffer to the pool, unless it lives in the plan's arena.
    pub(in crate::exec) fn give_back(&self, b: Buffer) {
        if !self.in_arena(b) {
            release(self.pool, b);
        }
    }

    /// The queue band of a node: its priority band under the policy, or 0 for FIFO.
    pub(super) fn band(&self, node: u32) -> usize {
        self.prio.band(self.policy, node) + self.band_offset
    }

    /// Whether the run is high-priority (`RunPriority::High`).
    pub(super) fn urgent(&self) -> bool {
        self.band_offset == 0
    }

    /// Which of the nodes `node` just made ready its thread runs next ([`Priorities::continuation`]);
    /// `queued` gives the most critical queue band that may hold a task (None: none may).
    pub(super) fn continuation(&self, node: u32, ready: &[u32], queued: impl FnOnce() -> Option<usize>) -> Option<u32> {
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
        // Queue bands are the policy's, after the urgent runs' (`band`): a task of an urgent run
        // is more critical than any of a normal one.
        let queued = || queued().map(|band| band.saturating_sub(self.band_offset));
        self.prio.continuation(self.policy, node, ready, queued)
    }
}
