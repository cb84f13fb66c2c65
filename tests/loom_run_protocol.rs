//! A loom model of the executor's run-completion protocol (`src/exec/executor.rs`,
//! `src/exec/state.rs`), checked over every interleaving of two threads up to a preemption bound,
//! the way crossbeam checks its deque.
//!
//! What is modelled, each part beside the real function it mirrors:
//! - `active`, the count of a run's queued and running tasks (`RunState::active`). A task counts
//!   and queues the successors it made ready, and the waiting nodes a release let in, before it
//!   leaves the count itself (`Shared::run_task` and its chain loop, `run_chain` in newer trees);
//!   the caller drives the run until the count is 0 (`Executor::drive`), then drops the run.
//! - The last-task handover: the task about to take `active` from 1 to 0 first resolves memory
//!   stalls (`RunState::resolve_stall`: readmit what fits, or fail the run with a memory-limit
//!   error), inside the same compare-exchange loop as the end of `Shared::run_task`.
//! - Admission under a memory limit (`RunState::admit`, `try_reserve`, `readmit`): a node that
//!   may not start goes on `waiting` under the gate mutex; every release subtracts from `live`
//!   (`drop_value`) and then re-examines `waiting` under the same mutex (`finish_node`). Which
//!   nodes may start is a predicate (`Rule`) over state kept under that mutex, so the rule is a
//!   detail: `Rule::Greedy` is `live + need <= limit` (commit 32560f8), `Rule::Bankers` a plain
//!   transcription of `sched::Admission::try_admit` (the banker's check against a safe
//!   completion order σ, in the lead's change). The reservation itself comes in both shapes:
//!   the compare-exchange loop on `live` of 32560f8, or a load and a `fetch_add` (`Reserve`).
//! - Nodes (`RunState::execute`, `run_kernel`, `finish_node`, `drop_value`): each makes one value,
//!   held in a slot written by its producer and emptied by its last reader (reference counts and
//!   `pending` counts with the real orderings); the continuation rule keeps the first node made
//!   ready and queues the rest (`RunState::continuation`, all nodes in one band).
//! - Threads: the caller (the model's main thread) and one worker (`Shared::worker_main`), as on
//!   an `Executor::new(2)`.
//!
//! Abstracted away: the per-band crossbeam deques, injectors and stealing are one mutex-protected
//! FIFO queue (any thread may take any queued task); sleeping and waking (`Sleep`) are
//! `yield_now`; the window (`Window`), cancellation, deadlines, kernel failures and panics,
//! in-place outputs, dynamic outputs, static plans, block caches and the pool itself (a ghost
//! count of the bytes it has handed out stands in for it). Every node has one output of a static
//! size, and its rank (the order of `waiting`) is its index. Ghost state (how often each node
//! ran, bytes held, how often `active` reached 0) is kept in `std` atomics, which loom does not
//! schedule on: it observes, it adds no interleavings.
//!
//! Checked in every interleaving: each node runs at most once, after its producers (loom's
//! `UnsafeCell` flags a slot read that does not happen after its write), and exactly once unless
//! the run failed; the pool's bytes and `live` never exceed the limit; a run never ends with a
//! node waiting and no error; it fails only with a memory-limit error, and never where the rule
//! guarantees completion; `active` never rises from 0 and reaches 0 exactly once; once it has, no
//! task touches the run (the caller's drop writes a loom `UnsafeCell` that every access to the
//! run reads).
//!
//! And, for the greedy rule, "a node never waits for a release that already happened": when the
//! last task resolves a stall, no waiting node may fit, since every release re-examined `waiting`
//! after lowering `live`. Without that check a lost wake-up in admission would go unseen: the
//! handover readmits the node and the run completes, only later than it could have. Two sources
//! of such late admissions are outside this check: in the real code an in-place output takes over
//! its input's buffer and `finish_node` lowers `live` without a readmit (not modelled), and under
//! the banker's rule an admission that moves the frontier can let a waiting node in, which only
//! the next release or the handover sees; the model counts those instead (`late`).
//!
//! Each graph is checked under 32560f8's admission (`GREEDY`) and the lead's (`BANKERS`); the
//! mutation tests break one step each and check that loom finds the violation.

use std::collections::VecDeque;
use std::panic::{catch_unwind, AssertUnwindSafe};
use std::sync::atomic::{AtomicBool as GhostBool, AtomicU32 as GhostU32, AtomicU64 as GhostU64};
use std::sync::atomic::{AtomicUsize as GhostUsize, Ordering::SeqCst};
use std::time::Instant;

use loom::cell::UnsafeCell;
use loom::sync::atomic::{AtomicBool, AtomicU32, AtomicU64, AtomicUsize, Ordering};
use loom::sync::Mutex;
use loom::thread;

/// A small graph. Node `i` makes one value, also numbered `i`, of `bytes[i]` bytes.
struct Spec {
    inputs: Vec<Vec<usize>>,
    bytes: Vec<u64>,
    /// Graph outputs: the caller holds one more reference, so they live past the run.
    output: Vec<bool>,
    /// The run's memory limit; 0: none (no gate).
    limit: u64,
    successors: Vec<Vec<usize>>,
    roots: Vec<usize>,
    /// σ, the safe completion order of the banker's rule (`LiveOrder`): nodes by position.
    order: Vec<usize>,
    /// Per node: its position in σ.
    position: Vec<usize>,
    /// Per position of σ: bytes live while that node runs alone in σ's order, its outputs
    /// included (`LiveOrder::live`), and their peak.
    live_sigma: Vec<u64>,
    peak: u64,
}

impl Spec {
    fn new(inputs: Vec<Vec<usize>>, bytes: Vec<u64>, output: Vec<bool>, limit: u64, order: Vec<usize>) -> Spec {
        let n = inputs.len();
        let mut successors = vec![Vec::new(); n];
        for (node, ins) in inputs.iter().enumerate() {
            for &p in ins {
                assert!(p < node, "nodes are numbered in topological order");
                successors[p].push(node);
            }
        }
        let roots = (0..n).filter(|&i| inputs[i].is_empty()).collect();
        let mut position = vec![0; n];
        for (k, &v) in order.iter().enumerate() {
            position[v] = k;
        }
        assert!(
            (0..n).all(|v| inputs[v].iter().all(|&p| position[p] < position[v])),
            "σ is a topological order"
        );
        // `graph::memory::lifetime`: a value lives from its producer's step to its last reader's
        // (to the end for a graph output).
        let live_sigma: Vec<u64> = (0..n)
            .map(|k| {
                (0..n)
                    .filter(|&v| {
                        let last = match output[v] {
                            true => n,
                            false => successors[v].iter().map(|&c| position[c]).max().unwrap_or(position[v]),
                        };
                        position[v] <= k && k <= last
                    })
                    .map(|v| bytes[v])
                    .sum()
            })
            .collect();
        let peak = live_sigma.iter().copied().max().unwrap_or(0);
        Spec {
            inputs,
            bytes,
            output,
            limit,
            successors,
            roots,
            order,
            position,
            live_sigma,
            peak,
        }
    }
}

/// An admission rule: may `node` start while the run holds `live` bytes? Asked in `try_reserve`
/// under the gate mutex, which also guards the rule's state (`Admission`).
#[derive(Clone, Copy, PartialEq, Eq, Debug)]
enum Rule {
    /// 32560f8's `RunState::try_reserve`: the node's output bytes fit under the limit.
    Greedy,
    /// `sched::Admission::try_admit`: besides fitting now, a node started ahead of σ's frontier
    /// must leave σ's continuation room at every step before its own.
    Bankers,
}

/// The rule's state, under the gate mutex (`sched::Admission`): per position of σ, started.
struct Admission {
    started: Vec<bool>,
}

impl Rule {
    /// True if `node` may start; it then counts as started.
    fn admit(self, spec: &Spec, state: &mut Admission, node: usize, live: u64) -> bool {
        let need = spec.bytes[node];
        if live + need > spec.limit {
            return false;
        }
        // A limit below σ's peak guarantees nothing: only the plain fit applies.
        if self == Rule::Bankers && spec.limit >= spec.peak {
            let p = spec.position[node];
            let frontier = state.started.iter().position(|&s| !s).unwrap_or(spec.order.len());
            // slack(k) = L - live_σ(k) - X(k), X(k) the bytes of nodes started past step k (all
            // of them started ahead of the frontier).
            for k in frontier..p {
                let x: u64 = (k + 1..spec.order.len())
                    .filter(|&q| state.started[q])
                    .map(|q| spec.bytes[spec.order[q]])
                    .sum();
                if spec.limit - spec.live_sigma[k] < x + need {
                    return false;
                }
            }
        }
        state.started[spec.position[node]] = true;
        true
    }

    /// Whether the run must complete: the banker's rule at a limit σ meets. (The greedy rule
    /// guarantees it only where no admission order deadlocks, which the tests state.)
    fn guarantees(self, spec: &Spec) -> bool {
        self == Rule::Bankers && spec.limit >= spec.peak
    }
}

/// How `try_reserve` adds a node's bytes to `live`. Both under the gate mutex, so only releases
/// race with it, and they only lower `live`.
#[derive(Clone, Copy, PartialEq, Eq, Debug)]
enum Reserve {
    /// 32560f8: the rule on a loaded `live`, then a compare-exchange, retried on a change (only
    /// for a rule without state: a retry asks it again).
    CompareExchange,
    /// The lead's change: the rule on a loaded `live` (a stale, higher value only errs on the
    /// safe side), then a `fetch_add`.
    LoadAdd,
}

/// One step of the protocol broken on purpose, to show that the model catches it.
#[derive(Clone, Copy, PartialEq, Eq, Debug)]
enum Mutation {
    None,
    /// The task leaves `active` before it counts and queues the successors it made ready.
    DecrementBeforePush,
    /// The task queues the successors it made ready before it counts them in `active`.
    CountAfterPush,
    /// `admit` fails to reserve under the gate mutex, lets go of it, and takes it again to wait:
    /// a release in between re-examines `waiting` before the node is on it.
    WaitOutsideGateLock,
    /// The last task leaves `active` without resolving stalls first.
    NoStallHandover,
}

/// What every interleaving of a model must end in.
#[derive(Clone, Copy, PartialEq, Eq, Debug)]
enum Expect {
    /// The run completes: a sequential order fits, and no admission order can deadlock.
    Complete,
    /// The run fails with a memory-limit error: no order fits.
    Fail,
    /// Either (an admission order can deadlock although a sequential order fits).
    Either,
}

#[derive(Clone, Copy, Debug)]
struct Model {
    rule: Rule,
    reserve: Reserve,
    mutation: Mutation,
}

const MEMORY_LIMIT: &str = "memory limit";

/// A value's slot (`Slot`): written once by its producer, emptied by its last reader.
#[derive(Default)]
struct Slot {
    made: bool,
    bytes: u64,
}

/// `Gate`: the limit is `Spec::limit`; the mutex guards the waiting list and the rule's state.
struct Gate {
    inner: Mutex<GateInner>,
}

/// `GateInner` (in 32560f8, only `waiting`).
struct GateInner {
    /// Sorted most critical (lowest rank) first.
    waiting: Vec<usize>,
    admission: Admission,
}

/// `RunState`, reduced to what the protocol touches.
struct Run {
    spec: std::sync::Arc<Spec>,
    model: Model,
    /// The run's storage: true until the caller drops the run. Every access to the run by a task
    /// reads it (`touch`), so loom flags any access that does not happen before the drop.
    alive: UnsafeCell<bool>,
    slots: Vec<UnsafeCell<Slot>>,
    refs: Vec<AtomicU32>,
    pending: Vec<AtomicU32>,
    active: AtomicUsize,
    failed: AtomicBool,
    error: Mutex<Option<&'static str>>,
    live: AtomicU64,
    gate: Option<Gate>,
    /// Ghost: times each node's kernel ran.
    ran: Vec<GhostU32>,
    /// Ghost: bytes the pool has handed out to the run's values.
    held: GhostU64,
    /// Ghost: a node went on `waiting`.
    waited: GhostBool,
    /// Ghost: nodes the stall handover admitted (see the module docs).
    late: GhostUsize,
}

// SAFETY: as for `RunState`: the slots are shared under the protocol (which loom checks here);
// everything else is atomic or behind a mutex.
unsafe impl Sync for Run {}
// SAFETY: as above.
unsafe impl Send for Run {}

/// The executor's shared part (`Shared`): the queue, and what must outlive the run.
struct Shared {
    queue: Mutex<VecDeque<Task>>,
    shutdown: AtomicBool,
    /// Ghost: times `active` went from 1 to 0.
    ends: GhostUsize,
    /// Ghost: nodes the worker thread executed.
    by_worker: GhostUsize,
}

/// `Task`: the real one holds a raw pointer to the run; the `Arc` only keeps the model's memory
/// valid, and `Run::alive` checks the lifetime.
struct Task {
    run: std::sync::Arc<Run>,
    node: usize,
    reserved: bool,
}

impl Run {
    fn new(spec: std::sync::Arc<Spec>, model: Model) -> Run {
        let n = spec.inputs.len();
        let mut consumers = vec![0; n];
        for ins in &spec.inputs {
            for &p in ins {
                consumers[p] += 1;
            }
        }
        Run {
            alive: UnsafeCell::new(true),
            slots: (0..n).map(|_| UnsafeCell::new(Slot::default())).collect(),
            refs: (0..n)
                .map(|v| AtomicU32::new(consumers[v] + spec.output[v] as u32))
                .collect(),
            pending: (0..n).map(|v| AtomicU32::new(spec.inputs[v].len() as u32)).collect(),
            active: AtomicUsize::new(0),
            failed: AtomicBool::new(false),
            error: Mutex::new(None),
            live: AtomicU64::new(0),
            gate: (spec.limit > 0).then(|| Gate {
                inner: Mutex::new(GateInner {
                    waiting: Vec::new(),
                    admission: Admission {
                        started: vec![false; n],
                    },
                }),
            }),
            ran: (0..n).map(|_| GhostU32::new(0)).collect(),
            held: GhostU64::new(0),
            waited: GhostBool::new(false),
            late: GhostUsize::new(0),
            spec,
            model,
        }
    }

    /// Any access to the run: it must not have been dropped.
    fn touch(&self) {
        // SAFETY: loom checks that this read happens before the caller's drop (in `check_counting`).
        self.alive
            .with(|alive| assert!(unsafe { *alive }, "a task touched the run after the caller dropped it"));
    }

    /// `RunState::failed`.
    fn failed(&self) -> bool {
        self.failed.load(Ordering::Acquire)
    }

    /// `RunState::fail`: the first error wins.
    fn fail(&self, why: &'static str) {
        let mut error = self.error.lock().unwrap();
        if error.is_none() {
            *error = Some(why);
            self.failed.store(true, Ordering::Release);
        }
    }

    /// Counts tasks about to be queued (the `active.fetch_add`s in `Shared::run_task`). Only a
    /// counted task adds, so the count never rises from 0.
    fn add_active(&self, n: usize) {
        self.touch();
        let before = self.active.fetch_add(n, Ordering::AcqRel);
        assert!(
            before > 0,
            "active rose from 0: the run was over and the caller may have dropped it"
        );
    }

    /// `RunState::admit`: true if the node may run now; otherwise it waits on `waiting`.
    fn admit(&self, node: usize) -> bool {
        self.touch();
        let Some(gate) = &self.gate else { return true };
        let mut inner = if self.model.mutation == Mutation::WaitOutsideGateLock {
            // Broken: the failed reservation and the wait in two holds of the lock.
            if self.try_reserve(&mut gate.inner.lock().unwrap(), node) {
                return true;
            }
            gate.inner.lock().unwrap()
        } else {
            let mut inner = gate.inner.lock().unwrap();
            if self.try_reserve(&mut inner, node) {
                return true;
            }
            inner
        };
        let at = inner.waiting.partition_point(|&w| w < node);
        inner.waiting.insert(at, node);
        self.waited.store(true, SeqCst);
        false
    }

    /// `RunState::try_reserve`, under the gate mutex: asks the rule, and reserves the node's
    /// bytes if it may start.
    fn try_reserve(&self, inner: &mut GateInner, node: usize) -> bool {
        let need = self.spec.bytes[node];
        let mut live = self.live.load(Ordering::Relaxed);
        let reserved = loop {
            if !self.model.rule.admit(&self.spec, &mut inner.admission, node, live) {
                return false;
            }
            match self.model.reserve {
                Reserve::LoadAdd => break self.live.fetch_add(need, Ordering::Relaxed) + need,
                Reserve::CompareExchange => {
                    match self
                        .live
                        .compare_exchange_weak(live, live + need, Ordering::Relaxed, Ordering::Relaxed)
                    {
                        Ok(_) => break live + need,
                        Err(now) => live = now,
                    }
                }
            }
        };
        assert!(reserved <= self.spec.limit, "live bytes exceed the limit");
        true
    }

    /// `RunState::readmit`: after a release, admits the waiting nodes that now fit.
    fn readmit(&self, out: &mut Vec<usize>) {
        self.touch();
        let Some(gate) = &self.gate else { return };
        let mut guard = gate.inner.lock().unwrap();
        let inner = &mut *guard;
        let mut waiting = std::mem::take(&mut inner.waiting);
        waiting.retain(|&node| {
            let fits = self.try_reserve(inner, node);
            if fits {
                out.push(node);
            }
            !fits
        });
        inner.waiting = waiting;
    }

    /// `RunState::resolve_stall`: by the last active task. Admits what fits, or fails the run if
    /// a node still waits.
    fn resolve_stall(&self, out: &mut Vec<usize>) {
        self.touch();
        let Some(gate) = &self.gate else { return };
        self.readmit(out);
        self.late.fetch_add(out.len(), SeqCst);
        // Model-only check (see the module docs): every release re-examined `waiting` after
        // lowering `live`, and nothing else runs, so under the greedy rule nothing waiting fits.
        assert!(
            out.is_empty() || self.model.rule != Rule::Greedy,
            "lost wake-up: node(s) {out:?} waited although a release had made room for them"
        );
        if !out.is_empty() || self.failed() {
            return;
        }
        let inner = gate.inner.lock().unwrap();
        if !inner.waiting.is_empty() {
            drop(inner);
            self.fail(MEMORY_LIMIT);
        }
    }

    /// `RunState::execute`: the kernel, then releases and readiness. Cancellation and deadlines
    /// (`stopped`) are failures like any other, so only `failed` is modelled.
    fn execute(&self, node: usize, ready: &mut Vec<usize>, admitted: &mut Vec<usize>) {
        self.touch();
        if self.failed() {
            return;
        }
        if self.gate.is_none() {
            // `add_live`: without a gate a node takes its bytes when it starts.
            self.live.fetch_add(self.spec.bytes[node], Ordering::Relaxed);
        }
        self.run_kernel(node);
        self.finish_node(node, ready, admitted);
    }

    /// `RunState::run_kernel`: reads the inputs, takes the output's block, writes its slot.
    fn run_kernel(&self, node: usize) {
        let before = self.ran[node].fetch_add(1, SeqCst);
        assert_eq!(before, 0, "node {node} ran twice");
        for &v in &self.spec.inputs[node] {
            // SAFETY: loom checks that the producer's write happens before this read.
            let made = self.slots[v].with(|s| unsafe { (*s).made });
            assert!(
                made,
                "node {node} ran before its producer {v} (or after its value was dropped)"
            );
        }
        let bytes = self.spec.bytes[node];
        let held = self.held.fetch_add(bytes, SeqCst) + bytes;
        if self.spec.limit > 0 {
            assert!(held <= self.spec.limit, "the run holds {held} bytes, over its limit");
        }
        // SAFETY: only this node writes its output's slot, before anyone may read it.
        self.slots[node].with_mut(|s| unsafe { *s = Slot { made: true, bytes } });
    }

    /// `RunState::finish_node`: drops what nobody reads any more, readmits if that released
    /// memory, then marks the successors.
    fn finish_node(&self, node: usize, ready: &mut Vec<usize>, admitted: &mut Vec<usize>) {
        let mut released = false;
        if self.refs[node].load(Ordering::Relaxed) == 0 {
            released |= self.drop_value(node);
        }
        for &v in &self.spec.inputs[node] {
            if self.refs[v].fetch_sub(1, Ordering::AcqRel) == 1 {
                released |= self.drop_value(v);
            }
        }
        if released {
            self.readmit(admitted);
        }
        for &s in &self.spec.successors[node] {
            if self.pending[s].fetch_sub(1, Ordering::AcqRel) == 1 {
                ready.push(s);
            }
        }
    }

    /// `RunState::drop_value`: the block goes back to the pool, and only then may admission
    /// count its bytes as free. True if it held memory.
    fn drop_value(&self, v: usize) -> bool {
        // SAFETY: the last reference is gone; loom checks that every read happened before.
        let slot = self.slots[v].with_mut(|s| unsafe { std::mem::take(&mut *s) });
        assert!(slot.made, "value {v} dropped before it was made");
        if slot.bytes == 0 {
            return false;
        }
        self.held.fetch_sub(slot.bytes, SeqCst);
        self.live.fetch_sub(slot.bytes, Ordering::Release);
        true
    }
}

impl Shared {
    /// `Shared::push_tasks`: queues nodes already counted in `active` (`sleep.notify` elided).
    fn push(&self, run: &std::sync::Arc<Run>, nodes: &[usize], reserved: bool) {
        if nodes.is_empty() {
            return;
        }
        run.touch(); // the real one reads the run for each node's band
        let mut queue = self.queue.lock().unwrap();
        for &node in nodes {
            queue.push_back(Task {
                run: run.clone(),
                node,
                reserved,
            });
        }
    }

    /// `Shared::find_work`.
    fn find_work(&self) -> Option<Task> {
        self.queue.lock().unwrap().pop_front()
    }

    /// `Shared::run_task`: a task and the chain of continuations it leads to, then the task
    /// leaves `active`.
    fn run_task(&self, task: Task, worker: bool) {
        let run = task.run;
        run.touch();
        let mut node = task.node;
        let mut reserved = task.reserved;
        loop {
            if !reserved && !run.admit(node) {
                break;
            }
            if worker {
                self.by_worker.fetch_add(1, SeqCst);
            }
            let mut ready = Vec::new();
            let mut admitted = Vec::new();
            run.execute(node, &mut ready, &mut admitted);
            if run.model.mutation == Mutation::DecrementBeforePush {
                self.leave(&run);
                for (nodes, reserved) in [(&admitted, true), (&ready, false)] {
                    if !nodes.is_empty() {
                        run.add_active(nodes.len());
                        self.push(&run, nodes, reserved);
                    }
                }
                return;
            }
            if !admitted.is_empty() {
                run.add_active(admitted.len());
                self.push(&run, &admitted, true);
            }
            reserved = false;
            let next = ready.first().copied(); // `RunState::continuation`, one band
            let queued = if next.is_some() { &ready[1..] } else { &ready[..] };
            if !queued.is_empty() {
                if run.model.mutation == Mutation::CountAfterPush {
                    self.push(&run, queued, false);
                    run.add_active(queued.len());
                } else {
                    run.add_active(queued.len());
                    self.push(&run, queued, false);
                }
            }
            match next {
                Some(n) => node = n,
                None => break,
            }
        }
        self.leave(&run);
    }

    /// The end of `Shared::run_task`: the task leaves the run's active count; the one that leaves
    /// it last first resolves memory stalls, since no release will come after it.
    fn leave(&self, run: &std::sync::Arc<Run>) {
        run.touch();
        let mut active = run.active.load(Ordering::Acquire);
        loop {
            if active == 1 && run.gate.is_some() && run.model.mutation != Mutation::NoStallHandover {
                let mut admitted = Vec::new();
                run.resolve_stall(&mut admitted);
                if !admitted.is_empty() {
                    run.add_active(admitted.len());
                    self.push(run, &admitted, true);
                }
                active = run.active.load(Ordering::Acquire);
                if active != 1 {
                    continue;
                }
            }
            run.touch();
            match run
                .active
                .compare_exchange_weak(active, active - 1, Ordering::AcqRel, Ordering::Acquire)
            {
                Ok(1) => {
                    // The run is over; from here on nothing of it may be touched (`sleep.notify`
                    // is the executor's).
                    self.ends.fetch_add(1, SeqCst);
                    return;
                }
                Ok(_) => return,
                Err(now) => active = now,
            }
        }
    }

    /// `Shared::worker_main`: runs whatever it finds until shutdown.
    fn worker_main(&self) {
        loop {
            if let Some(task) = self.find_work() {
                self.run_task(task, true);
                continue;
            }
            if self.shutdown.load(Ordering::Acquire) {
                return;
            }
            thread::yield_now();
        }
    }
}

/// `Executor::drive`: counts the roots, queues all but the first, runs the first, then works
/// until `active` is 0.
fn drive(shared: &Shared, run: &std::sync::Arc<Run>) {
    let roots = &run.spec.roots;
    run.active.store(roots.len(), Ordering::Release);
    shared.push(run, &roots[1..], false);
    shared.run_task(
        Task {
            run: run.clone(),
            node: roots[0],
            reserved: false,
        },
        false,
    );
    while run.active.load(Ordering::Acquire) != 0 {
        match shared.find_work() {
            Some(task) => shared.run_task(task, false),
            None => thread::yield_now(),
        }
    }
}

/// Counts over all the interleavings of one check.
#[derive(Default)]
struct Tally {
    executions: GhostUsize,
    failed: GhostUsize,
    waited: GhostUsize,
    late: GhostUsize,
    by_worker: GhostUsize,
}

/// Checks `spec` under `model` in every interleaving (up to `preemptions` preemptions).
fn check(spec: Spec, model: Model, expect: Expect, preemptions: usize) -> std::sync::Arc<Tally> {
    let tally = std::sync::Arc::new(Tally::default());
    check_counting(spec, model, expect, preemptions, tally.clone());
    tally
}

/// `check`, counting into `tally` as it goes (so that a check that panics has counted too).
fn check_counting(spec: Spec, model: Model, expect: Expect, preemptions: usize, tally: std::sync::Arc<Tally>) {
    assert!(
        model.reserve == Reserve::LoadAdd || model.rule == Rule::Greedy,
        "a compare-exchange retry would ask a rule with state twice"
    );
    let spec = std::sync::Arc::new(spec);
    let mut builder = loom::model::Builder::new();
    // Set in code, not by LOOM_* variables: a bound, and no cut-off that would make it partial.
    builder.preemption_bound = Some(preemptions);
    builder.max_branches = 1_000;
    builder.max_permutations = None;
    builder.max_duration = None;
    builder.checkpoint_file = None;
    builder.location = false;
    let counts = tally.clone();
    let started = Instant::now();
    builder.check(move || {
        counts.executions.fetch_add(1, SeqCst);
        let shared = std::sync::Arc::new(Shared {
            queue: Mutex::new(VecDeque::new()),
            shutdown: AtomicBool::new(false),
            ends: GhostUsize::new(0),
            by_worker: GhostUsize::new(0),
        });
        let run = std::sync::Arc::new(Run::new(spec.clone(), model));
        let worker = {
            let shared = shared.clone();
            thread::spawn(move || shared.worker_main())
        };
        drive(&shared, &run);

        // `active` is 0: the run is over. What the caller sees, then the drop.
        assert!(
            shared.queue.lock().unwrap().is_empty(),
            "a task is still queued although active is 0"
        );
        let failed = run.failed();
        let waiting = run
            .gate
            .as_ref()
            .map_or(Vec::new(), |g| g.inner.lock().unwrap().waiting.clone());
        if failed {
            assert_eq!(*run.error.lock().unwrap(), Some(MEMORY_LIMIT));
        } else {
            assert!(
                waiting.is_empty(),
                "lost wake-up: the run ended without an error while node(s) {waiting:?} waited for memory"
            );
            for (node, ran) in run.ran.iter().enumerate() {
                assert_eq!(
                    ran.load(SeqCst),
                    1,
                    "the run ended without an error but node {node} never ran"
                );
            }
            let outputs: u64 = (0..run.spec.bytes.len())
                .filter(|&v| run.spec.output[v])
                .map(|v| run.spec.bytes[v])
                .sum();
            assert_eq!(run.live.load(Ordering::Relaxed), outputs, "live bytes after the run");
            assert_eq!(run.held.load(SeqCst), outputs, "pool bytes after the run");
        }
        if model.rule.guarantees(&run.spec) {
            assert!(
                !failed,
                "the run failed although the banker's rule guarantees completion"
            );
        }
        match expect {
            Expect::Complete => assert!(!failed, "the run failed although no admission order can deadlock"),
            Expect::Fail => assert!(failed, "the run did not fail although no order fits the limit"),
            Expect::Either => {}
        }
        counts.failed.fetch_add(failed as usize, SeqCst);
        counts.waited.fetch_add(run.waited.load(SeqCst) as usize, SeqCst);
        counts.late.fetch_add(run.late.load(SeqCst), SeqCst);
        // SAFETY: loom checks that every task's access to the run happened before this write.
        run.alive.with_mut(|alive| unsafe { *alive = false });

        shared.shutdown.store(true, Ordering::Release);
        worker.join().unwrap();
        let ends = shared.ends.load(SeqCst);
        assert_eq!(ends, 1, "active reached 0 {ends} times");
        counts.by_worker.fetch_add(shared.by_worker.load(SeqCst), SeqCst);
    });
    eprintln!(
        "{model:?}: {} interleavings in {:.2?}: {} failed, {} with a node waiting for memory, {} nodes \
         admitted late by the stall handover, {} nodes run by the worker",
        tally.executions.load(SeqCst),
        started.elapsed(),
        tally.failed.load(SeqCst),
        tally.waited.load(SeqCst),
        tally.late.load(SeqCst),
        tally.by_worker.load(SeqCst),
    );
}

/// 32560f8: the greedy rule, reserved with a compare-exchange loop.
const GREEDY: Model = Model {
    rule: Rule::Greedy,
    reserve: Reserve::CompareExchange,
    mutation: Mutation::None,
};

/// The lead's change: the banker's rule, reserved with a load and a `fetch_add`.
const BANKERS: Model = Model {
    rule: Rule::Bankers,
    reserve: Reserve::LoadAdd,
    mutation: Mutation::None,
};

/// A -> B, A -> C, B -> D, C -> D, one byte each; D is a graph output. In index order (σ) 3 bytes
/// are live at most.
fn diamond(limit: u64) -> Spec {
    Spec::new(
        vec![vec![], vec![0], vec![0], vec![1, 2]],
        vec![1, 1, 1, 1],
        vec![false, false, false, true],
        limit,
        vec![0, 1, 2, 3],
    )
}

/// P1 -> Q1, P2 -> Q2 (nodes 0, 1, 2, 3): producers of 2 bytes, consumers of 1 byte that nobody
/// reads (dropped as they end), limit 3: only one producer's output fits at a time, so the other
/// waits for the release by the first one's consumer. No admission order deadlocks; σ = P1, Q1,
/// P2, Q2 peaks at 3.
fn two_chains() -> Spec {
    Spec::new(
        vec![vec![], vec![], vec![0], vec![1]],
        vec![2, 2, 1, 1],
        vec![false; 4],
        3,
        vec![0, 2, 1, 3],
    )
}

/// P1, P2 -> C: producers of 2 bytes, a consumer of 1 byte (a graph output); any order peaks at 5.
fn fan_in(limit: u64) -> Spec {
    Spec::new(
        vec![vec![], vec![], vec![0, 1]],
        vec![2, 2, 1],
        vec![false, false, true],
        limit,
        vec![0, 1, 2],
    )
}

/// X1 -> Y1, X2 -> Y2 (nodes 0, 1, 2, 3): inputs of 2 bytes, graph outputs of 1 byte, limit 4.
/// σ = X1, Y1, X2, Y2 peaks at 4, but admitting X1 and X2 together leaves no room for either Y.
fn greedy_trap() -> Spec {
    Spec::new(
        vec![vec![], vec![], vec![0], vec![1]],
        vec![2, 2, 1, 1],
        vec![false, false, true, true],
        4,
        vec![0, 2, 1, 3],
    )
}

#[test]
fn diamond_without_limit_completes() {
    let tally = check(diamond(0), GREEDY, Expect::Complete, 3);
    assert!(
        tally.by_worker.load(SeqCst) > 0,
        "the worker never ran a node: no concurrency explored"
    );
}

#[test]
fn diamond_under_a_limit_that_fits_completes() {
    check(diamond(4), GREEDY, Expect::Complete, 3);
    check(diamond(4), BANKERS, Expect::Complete, 3);
}

#[test]
fn two_chains_wait_and_readmit_and_complete() {
    for model in [GREEDY, BANKERS] {
        let tally = check(two_chains(), model, Expect::Complete, 3);
        assert!(
            tally.waited.load(SeqCst) > 0,
            "no interleaving made a producer wait: the readmit path was not explored"
        );
    }
}

#[test]
fn fan_in_that_fits_completes() {
    check(fan_in(5), GREEDY, Expect::Complete, 3);
    check(fan_in(5), BANKERS, Expect::Complete, 3);
}

#[test]
fn fan_in_over_the_limit_fails_and_never_hangs() {
    // Only one producer's 2 bytes fit under 3, and the consumer needs both.
    for model in [GREEDY, BANKERS] {
        let tally = check(fan_in(3), model, Expect::Fail, 3);
        assert_eq!(tally.failed.load(SeqCst), tally.executions.load(SeqCst));
    }
}

/// The greedy rule can fail a run that fits in a sequential order; the protocol still ends it
/// cleanly, with a memory-limit error. The banker's rule completes it in every interleaving.
#[test]
fn greedy_trap_fails_only_under_the_greedy_rule() {
    let tally = check(greedy_trap(), GREEDY, Expect::Either, 3);
    let (failed, all) = (tally.failed.load(SeqCst), tally.executions.load(SeqCst));
    assert!(failed > 0 && failed < all, "{failed} of {all} interleavings failed");
    let tally = check(greedy_trap(), BANKERS, Expect::Complete, 3);
    assert!(tally.waited.load(SeqCst) > 0, "no interleaving made a node wait");
}

/// A -> C, Z, W (nodes 0, 1, 2, 3): A makes 2 bytes that C reads, Z and C make nothing, W makes
/// 2 bytes (a graph output); limit 2, σ = A, Z, C, W (peak 2). W started ahead of the frontier
/// must wait for σ's steps before it; once Z starts, the frontier passes them and W may start,
/// but Z's start releases nothing, so no readmit sees it. (The greedy rule may start W first,
/// and then A never fits.)
fn frontier_move() -> Spec {
    Spec::new(
        vec![vec![], vec![], vec![0], vec![]],
        vec![2, 0, 0, 2],
        vec![false, false, false, true],
        2,
        vec![0, 1, 2, 3],
    )
}

/// Under the banker's rule an admission that moves σ's frontier can make a waiting node
/// admissible, and only a release re-examines `waiting`: here the node starts only when the last
/// task hands over. The run completes; it is just later than it could be. (If admission comes to
/// re-examine `waiting` after a frontier move, `late` becomes 0.)
#[test]
fn bankers_frontier_move_is_seen_only_by_the_handover() {
    let tally = check(frontier_move(), BANKERS, Expect::Complete, 3);
    assert!(tally.late.load(SeqCst) > 0, "no interleaving admitted a node late");
    let tally = check(frontier_move(), GREEDY, Expect::Either, 3);
    assert!(tally.failed.load(SeqCst) > 0, "the greedy rule never started W first");
}

/// Runs a mutated model, which must fail; returns loom's report.
fn violation(spec: Spec, model: Model, expect: Expect) -> String {
    let tally = std::sync::Arc::new(Tally::default());
    let counts = tally.clone();
    let outcome = catch_unwind(AssertUnwindSafe(|| check_counting(spec, model, expect, 3, counts)));
    let payload = match outcome {
        Ok(()) => panic!("loom found no violation with the mutation {:?}", model.mutation),
        Err(payload) => payload,
    };
    let message = payload
        .downcast_ref::<String>()
        .cloned()
        .or_else(|| payload.downcast_ref::<&str>().map(|s| s.to_string()))
        .unwrap_or_default();
    eprintln!(
        "{:?}: found in interleaving {}: {message}",
        model.mutation,
        tally.executions.load(SeqCst)
    );
    message
}

/// What a broken `active` protocol shows as.
const ACTIVE_BROKEN: [&str; 4] = [
    "active rose from 0",
    "after the caller dropped it",
    "Causality violation",
    "active reached 0",
];

#[test]
fn mutation_decrement_before_push_is_caught() {
    for base in [GREEDY, BANKERS] {
        let model = Model {
            mutation: Mutation::DecrementBeforePush,
            ..base
        };
        let message = violation(diamond(0), model, Expect::Complete);
        assert!(ACTIVE_BROKEN.iter().any(|m| message.contains(m)), "{message}");
    }
}

#[test]
fn mutation_count_after_push_is_caught() {
    // Only in an interleaving: a thief runs the queued node, and leaves `active`, before the
    // node was counted.
    let model = Model {
        mutation: Mutation::CountAfterPush,
        ..GREEDY
    };
    let message = violation(diamond(0), model, Expect::Complete);
    assert!(ACTIVE_BROKEN.iter().any(|m| message.contains(m)), "{message}");
}

#[test]
fn mutation_wait_outside_gate_lock_is_caught() {
    // Only in an interleaving: a release between the failed reservation and the wait. The
    // handover would still readmit the node; the greedy rule's lost-wake-up check sees it.
    let model = Model {
        mutation: Mutation::WaitOutsideGateLock,
        ..GREEDY
    };
    let message = violation(two_chains(), model, Expect::Complete);
    assert!(message.contains("lost wake-up"), "{message}");
}

#[test]
fn mutation_no_stall_handover_is_caught() {
    for base in [GREEDY, BANKERS] {
        let model = Model {
            mutation: Mutation::NoStallHandover,
            ..base
        };
        let message = violation(fan_in(3), model, Expect::Fail);
        assert!(message.contains("lost wake-up"), "{message}");
    }
}
