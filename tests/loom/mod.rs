//! The model checked by `loom_run_protocol.rs` (whose module docs say what it covers), each part
//! beside the real function it mirrors (the executor's queue and task path in `workers.rs`, the
//! admission rule in `admission.rs`), and the checks run on every interleaving.

use std::collections::VecDeque;
use std::sync::atomic::{AtomicBool as GhostBool, AtomicU32 as GhostU32, AtomicU64 as GhostU64};
use std::sync::atomic::{AtomicUsize as GhostUsize, Ordering::SeqCst};
use std::sync::Arc;

use loom::cell::UnsafeCell;
use loom::sync::atomic::{AtomicBool, AtomicU32, AtomicU64, AtomicUsize, Ordering};
use loom::sync::Mutex;
use loom::thread;

use super::Spec;

mod admission;
mod workers;
use admission::Admission;
use workers::drive;

/// One step of the protocol broken on purpose, to show that the model catches it.
#[derive(Clone, Copy, PartialEq, Eq, Debug)]
pub enum Mutation {
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
    /// The handover as it was before the fix: after a stall check that admitted nodes, the task
    /// reloads `active` and, if it reads 1 again, takes it to 0 without checking again.
    StaleReload,
    /// `try_admit` without the banker's check: only the plain fit.
    NoSlackCheck,
    /// `try_admit`'s banker's check misses the step just before the node's position (an off by
    /// one in its range); the slack it takes still covers that step.
    SlackCheckShort,
    /// A task whose node went pending leaves `active` as a finished task would, instead of
    /// handing its place to the task that ends the node.
    PendingLeavesActive,
    /// The kernel's thread hands the run its counts (`RunState::flush`) after its arrival at
    /// the pending node instead of before: the node, and the run, may have ended meanwhile.
    FlushAfterArrival,
    /// The producer sets its output's count of readers after it made them ready, not before: a
    /// reader on another thread may count down a count not set yet.
    CountReadersLate,
}

pub const MEMORY_LIMIT: &str = "memory limit";

/// A value's slot (`Slot`): written once by its producer, emptied by its last reader.
#[derive(Default)]
struct Slot {
    made: bool,
    bytes: u64,
}

/// `GateInner` (the limit is `Spec::limit`): the waiting list and the rule, under one mutex.
struct GateInner {
    /// Sorted most critical (lowest rank, here the lowest index) first.
    waiting: Vec<usize>,
    admission: Admission,
    /// Ghost: the run's bytes as seen under this mutex: reservations, less the releases whose
    /// `readmit` has run. `live` is at most this whenever the mutex is held.
    announced: u64,
}

/// `RunState`, reduced to what the protocol touches.
struct Run {
    spec: Arc<Spec>,
    mutation: Mutation,
    /// The run's storage: true until the caller drops the run. Every access to the run by a task
    /// reads it (`touch`), so loom flags any access that does not happen before the drop.
    alive: UnsafeCell<bool>,
    /// Per thread (the caller 0, the worker 1): the nodes it finished, added with plain writes
    /// when it flushes (`RunState::flush` into its cache's slot), read by the caller once
    /// `active` is 0 (`RunState::flush_caches`).
    counts: [UnsafeCell<u32>; 2],
    slots: Vec<UnsafeCell<Slot>>,
    refs: Vec<AtomicU32>,
    pending: Vec<AtomicU32>,
    active: AtomicUsize,
    failed: AtomicBool,
    error: Mutex<Option<&'static str>>,
    live: AtomicU64,
    gate: Option<Mutex<GateInner>>,
    /// Ghost: times each node's kernel ran.
    ran: Vec<GhostU32>,
    /// Ghost: bytes the pool has handed out to the run's values.
    held: GhostU64,
    /// Ghost: a node went on `waiting`.
    waited: GhostBool,
    /// Ghost: nodes admitted by a stall check, and of them those admitted by a check the task ran
    /// again because its previous one admitted nodes.
    late: GhostUsize,
    late_again: GhostUsize,
    /// Ghost: freed values whose producer had started ahead, so that the rule gave slack back.
    returned: GhostUsize,
}

// SAFETY: as for `RunState`: the slots are shared under the protocol (which loom checks here);
// everything else is atomic or behind a mutex.
unsafe impl Sync for Run {}
// SAFETY: as above.
unsafe impl Send for Run {}

/// The executor's shared part (`Shared`): the queue, and what must outlive the run.
struct Shared {
    queue: Mutex<VecDeque<Task>>,
    /// Work deferred nodes handed to "the device": whichever thread finds no task completes it
    /// (`device_work`), so that a completion may come from the other thread while the kernel
    /// has not returned yet, or after.
    device: Mutex<VecDeque<(Task, Arc<PendingNode>)>>,
    shutdown: AtomicBool,
    /// Ghost: times `active` went from 1 to 0, and nodes the worker thread executed.
    ends: GhostUsize,
    by_worker: GhostUsize,
}

/// `Task`: the real one holds a raw pointer to the run; the `Arc` only keeps the model's memory
/// valid, and `Run::alive` checks the lifetime.
struct Task {
    run: Arc<Run>,
    node: usize,
    reserved: bool,
    /// An `END` task: ends a pending node whose completion came.
    end: bool,
}

/// `PendingNode` (`src/exec/node/pending.rs`): the two arrivals, the kernel's return and the
/// completion; the one that takes the count to 0 resumes the node.
struct PendingNode {
    arrivals: AtomicU32,
}

impl PendingNode {
    /// `PendingNode::arrive`: true for the last arrival.
    fn arrive(&self) -> bool {
        self.arrivals.fetch_sub(1, Ordering::AcqRel) == 1
    }
}

impl Run {
    fn new(spec: Arc<Spec>, mutation: Mutation) -> Run {
        let n = spec.inputs.len();
        // Counts of readers start unset: each producer sets its output's as it ends (`RunState::refs`).
        let refs = (0..n).map(|_| AtomicU32::new(0));
        Run {
            alive: UnsafeCell::new(true),
            counts: [UnsafeCell::new(0), UnsafeCell::new(0)],
            slots: (0..n).map(|_| UnsafeCell::new(Slot::default())).collect(),
            refs: refs.collect(),
            pending: (0..n).map(|v| AtomicU32::new(spec.inputs[v].len() as u32)).collect(),
            active: AtomicUsize::new(0),
            failed: AtomicBool::new(false),
            error: Mutex::new(None),
            live: AtomicU64::new(0),
            gate: (spec.limit > 0).then(|| {
                let admission = Admission::new(&spec, mutation);
                Mutex::new(GateInner {
                    waiting: Vec::new(),
                    admission,
                    announced: 0,
                })
            }),
            ran: (0..n).map(|_| GhostU32::new(0)).collect(),
            held: GhostU64::new(0),
            waited: GhostBool::new(false),
            late: GhostUsize::new(0),
            late_again: GhostUsize::new(0),
            returned: GhostUsize::new(0),
            spec,
            mutation,
        }
    }

    /// Any access to the run: it must not have been dropped.
    fn touch(&self) {
        // SAFETY: loom checks that this read happens before the caller's drop (in `execution`).
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

    /// Counts tasks about to be queued (the `active.fetch_add`s of `Shared::run_chain` and
    /// `run_task`). Only a counted task adds, so the count never rises from 0.
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
        let mut inner = if self.mutation == Mutation::WaitOutsideGateLock {
            // Broken: the failed reservation and the wait in two holds of the lock.
            if self.try_reserve(&mut gate.lock().unwrap(), node) {
                return true;
            }
            gate.lock().unwrap()
        } else {
            let mut inner = gate.lock().unwrap();
            if self.try_reserve(&mut inner, node) {
                return true;
            }
            inner
        };
        // Model-only check: the node waits only for a release still to come. The rule refused
        // it on a `live` of at most `announced` (see `GateInner`), and refuses at any higher
        // value; its slack is as the readmits so far left it. So this holds whenever the refusal
        // and the wait share one hold of the mutex.
        let (need, announced) = (self.spec.bytes[node], inner.announced);
        assert!(
            !inner.admission.clone().try_admit(&self.spec, node, need, announced),
            "lost wake-up: node {node} went on `waiting` although the rule admits it now"
        );
        let at = inner.waiting.partition_point(|&w| w < node);
        inner.waiting.insert(at, node);
        self.waited.store(true, SeqCst);
        false
    }

    /// `RunState::try_reserve`, under the gate mutex: asks the rule on a loaded `live` (only
    /// releases race with it, and they only lower it), and reserves the node's bytes if it may
    /// start (`add_live`).
    fn try_reserve(&self, inner: &mut GateInner, node: usize) -> bool {
        let need = self.spec.bytes[node];
        let live = self.live.load(Ordering::Relaxed);
        if !inner.admission.try_admit(&self.spec, node, need, live) {
            return false;
        }
        inner.admission.assert_safe();
        let now = self.live.fetch_add(need, Ordering::Relaxed) + need;
        assert!(now <= self.spec.limit, "live bytes exceed the limit");
        inner.announced += need;
        true
    }

    /// `RunState::readmit`: after the `freed` values were released (none for a stall check),
    /// tells the rule, then admits the waiting nodes that now fit, most critical first.
    fn readmit(&self, out: &mut Vec<usize>, freed: &[usize]) {
        self.touch();
        let Some(gate) = &self.gate else { return };
        let mut guard = gate.lock().unwrap();
        let inner = &mut *guard;
        for &v in freed {
            // Node `v` made value `v`, of `bytes[v]` static bytes (its buffer's size too).
            let bytes = self.spec.bytes[v];
            let back = inner.admission.gives_back(&self.spec, v);
            self.returned.fetch_add(back as usize, SeqCst);
            inner.admission.release(&self.spec, v, bytes);
            inner.announced -= bytes;
        }
        inner.admission.assert_safe();
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
        self.readmit(out, &[]);
        self.late.fetch_add(out.len(), SeqCst);
        // Model-only check: every release re-examined `waiting` after lowering `live` (and
        // telling the rule), so under the plain fit nothing waiting fits now (see the module
        // docs for the banker's rule).
        assert!(
            out.is_empty() || self.spec.guaranteed(),
            "lost wake-up: node(s) {out:?} waited although a release had made room for them"
        );
        if !out.is_empty() || self.failed() {
            return;
        }
        let inner = gate.lock().unwrap();
        if !inner.waiting.is_empty() {
            drop(inner);
            self.fail(MEMORY_LIMIT);
        }
    }

    /// `RunState::execute`: the kernel, then releases and readiness. Cancellation and deadlines
    /// (`stopped`) are failures like any other, so only `failed` is modelled.
    /// A deferring node's kernel hands its work to the device (`shared.device`) and returns: if
    /// the completion has not come yet, the node is pending and returned, not finished.
    /// `RunState::flush`: the thread in `slot` adds the nodes it finished to its place in the run.
    fn flush(&self, slot: usize, finished: &mut u32) {
        self.touch();
        // SAFETY: a slot is written by its thread alone while the run goes on; loom checks that
        // the caller's read, once `active` is 0, happens after every write.
        self.counts[slot].with_mut(|c| unsafe { *c += std::mem::take(finished) });
    }

    fn execute(
        self: &Arc<Self>,
        shared: &Shared,
        node: usize,
        ready: &mut Vec<usize>,
        admitted: &mut Vec<usize>,
        (slot, finished): (usize, &mut u32),
    ) -> bool {
        self.touch();
        if self.failed() {
            return false;
        }
        if self.gate.is_none() {
            // `add_live`: without a gate a node takes its bytes when it starts.
            self.live.fetch_add(self.spec.bytes[node], Ordering::Relaxed);
        }
        self.run_kernel(node);
        if self.spec.deferred[node] {
            // `KernelCtx::defer`, then the work goes to the device; `kernel_returned`.
            let pending = Arc::new(PendingNode {
                arrivals: AtomicU32::new(2),
            });
            let task = Task {
                run: self.clone(),
                node,
                reserved: true,
                end: true,
            };
            shared.device.lock().unwrap().push_back((task, pending.clone()));
            // `run_chain`: the thread's counts go to the run (`flush`), then it arrives.
            if self.mutation != Mutation::FlushAfterArrival {
                self.flush(slot, finished);
            }
            if !pending.arrive() {
                if self.mutation == Mutation::FlushAfterArrival {
                    self.flush(slot, finished);
                }
                return true; // pending: the completion queues its end
            }
        }
        self.end_node_ok(node, ready, admitted);
        *finished += 1;
        false
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
        if !self.spec.deferred[node] {
            self.make(node);
        }
    }

    /// The output's contents are written: by the kernel, or by the device for a deferred node.
    fn make(&self, node: usize) {
        self.touch();
        let bytes = self.spec.bytes[node];
        // SAFETY: only this node writes its output's slot, before anyone may read it.
        self.slots[node].with_mut(|s| unsafe { *s = Slot { made: true, bytes } });
    }

    /// `RunState::end_node_ok`: drops what nobody reads any more, collecting the values that
    /// held memory (`scratch.freed`), passes them to `readmit` if there are any, then marks the
    /// successors. (An in-place takeover, not modelled, lowers `live` and puts the input on
    /// `freed` too.)
    fn end_node_ok(&self, node: usize, ready: &mut Vec<usize>, admitted: &mut Vec<usize>) {
        let mut freed = Vec::new();
        // Its output's count of readers, set before any reader is made ready (Relaxed: the
        // successors' AcqRel decrements below carry it to them).
        let reads = self.spec.successors[node].len() as u32 + self.spec.output[node] as u32;
        if self.mutation != Mutation::CountReadersLate {
            self.refs[node].store(reads, Ordering::Relaxed);
        }
        if reads == 0 && self.drop_value(node) {
            freed.push(node);
        }
        for &v in &self.spec.inputs[node] {
            if self.refs[v].fetch_sub(1, Ordering::AcqRel) == 1 && self.drop_value(v) {
                freed.push(v);
            }
        }
        if !freed.is_empty() {
            self.readmit(admitted, &freed);
        }
        for &s in &self.spec.successors[node] {
            if self.pending[s].fetch_sub(1, Ordering::AcqRel) == 1 {
                ready.push(s);
            }
        }
        if self.mutation == Mutation::CountReadersLate {
            self.refs[node].store(reads, Ordering::Relaxed);
        }
    }

    /// `RunState::drop_value`: the block goes back to the pool, and only then may admission
    /// count its bytes as free. True if it held any.
    fn drop_value(&self, v: usize) -> bool {
        // SAFETY: the last reference is gone; loom checks that every read happened before.
        let slot = self.slots[v].with_mut(|s| unsafe { std::mem::take(&mut *s) });
        assert!(slot.made, "value {v} dropped before it was made");
        if slot.bytes > 0 {
            self.held.fetch_sub(slot.bytes, SeqCst);
            self.live.fetch_sub(slot.bytes, Ordering::Relaxed);
        }
        slot.bytes > 0
    }
}

/// What the caller sees once `active` is 0, and the ghost counts.
pub struct Outcome {
    pub failed: bool,
    pub error: Option<&'static str>,
    pub waiting: Vec<usize>,
    /// Per node: times its kernel ran.
    pub ran: Vec<u32>,
    /// `live`, and the pool's bytes.
    pub live: u64,
    pub held: u64,
    pub waited: bool,
    pub late: usize,
    pub late_again: usize,
    pub returned: usize,
    pub by_worker: usize,
    /// The nodes the threads counted as finished (`RunState::flush`), added up by the caller.
    pub counted: u32,
}

/// One execution of the run, inside `loom::model`: the caller drives the run, reads what it
/// sees, drops the run and stops the worker.
pub fn execution(spec: &Arc<Spec>, mutation: Mutation) -> Outcome {
    let shared = Arc::new(Shared {
        queue: Mutex::new(VecDeque::new()),
        device: Mutex::new(VecDeque::new()),
        shutdown: AtomicBool::new(false),
        ends: GhostUsize::new(0),
        by_worker: GhostUsize::new(0),
    });
    let run = Arc::new(Run::new(spec.clone(), mutation));
    let worker = {
        let shared = shared.clone();
        thread::spawn(move || shared.worker_main())
    };
    drive(&shared, &run);

    // `active` is 0: the run is over.
    assert!(
        shared.queue.lock().unwrap().is_empty(),
        "a task is still queued although active is 0"
    );
    let mut outcome = Outcome {
        failed: run.failed(),
        error: *run.error.lock().unwrap(),
        waiting: run
            .gate
            .as_ref()
            .map_or(Vec::new(), |g| g.lock().unwrap().waiting.clone()),
        ran: run.ran.iter().map(|r| r.load(SeqCst)).collect(),
        live: run.live.load(Ordering::Relaxed),
        held: run.held.load(SeqCst),
        waited: run.waited.load(SeqCst),
        late: run.late.load(SeqCst),
        late_again: run.late_again.load(SeqCst),
        returned: run.returned.load(SeqCst),
        by_worker: 0,
        // SAFETY: read once `active` is 0; loom checks that every thread's write came before.
        counted: run.counts.iter().map(|c| c.with(|c| unsafe { *c })).sum(),
    };
    // SAFETY: loom checks that every task's access to the run happened before this write.
    run.alive.with_mut(|alive| unsafe { *alive = false });

    assert!(
        shared.device.lock().unwrap().is_empty(),
        "work is still on the device although active is 0"
    );
    shared.shutdown.store(true, Ordering::Release);
    worker.join().unwrap();

    let ends = shared.ends.load(SeqCst);
    assert_eq!(ends, 1, "active reached 0 {ends} times");
    outcome.by_worker = shared.by_worker.load(SeqCst);
    outcome
}
