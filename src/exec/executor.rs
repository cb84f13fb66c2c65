//! The executor: persistent worker threads that run the nodes of any number of concurrent runs.
//!
//! Work stealing on crossbeam-deque, with priorities that survive stealing (`queues.rs`): every
//! thread that works has one FIFO deque per priority band, and the executor one shared queue per
//! band. A thread looking for work scans the bands from the most critical down, and in each band
//! tries its own deque, then the shared queue, then the other threads' deques. So an owner and a
//! thief alike take the most critical work they can see, and within a band the oldest. A node
//! that makes successors ready keeps the most critical one for itself when it is at least as
//! critical as the node that just ran (the critical path flows through one thread without
//! queueing) and queues the others, most critical first.
//!
//! The thread that calls `run` works too: it borrows a deque set for the run, runs the first
//! ready node itself, then any work it finds, until its run is over, so a small graph pays no
//! hand-off. Idle threads spin briefly, then sleep on an event count; an idle executor uses no
//! CPU.

use std::sync::atomic::{fence, AtomicBool, AtomicUsize, Ordering};
use std::sync::{Arc, Condvar, Mutex};
use std::thread::JoinHandle;
use std::time::{Duration, Instant};

use crossbeam_deque::Worker;

use std::panic::{catch_unwind, AssertUnwindSafe};

use super::padded::CachePadded;
use super::parallel::Job;
use super::pending::PendingNode;
use super::queues::{Local, Queues};
use super::scratch::Scratch;
use super::state::{panic_text, RunState};
use crate::error::{err, Error, ErrorKind, Result};

/// How long an idle thread keeps looking for work before it sleeps.
const SPIN: Duration = Duration::from_micros(50);

/// A node of a run, queued; or, with `node == JOB`, a helper of a parallel loop, whose `run` is
/// then an `Arc<Job>` turned into a raw pointer (`Shared::push_job`), which running the task
/// takes back; or, with `node == END`, the end of a pending node whose completion came, whose
/// `run` is then an `Arc<PendingNode>` (`Shared::push_finish`).
#[derive(Clone, Copy)]
pub(super) struct Task {
    run: *const RunState<'static>,
    node: u32,
    /// The node's output bytes are reserved already (under a memory limit: it was admitted
    /// while waiting); otherwise it is admitted when it starts.
    reserved: bool,
}

/// How a task's chain ended.
enum Chain {
    /// Every node it took on ran (or failed): the task leaves the run's `active` count.
    Done,
    /// A kernel deferred its node's end (`pending.rs`): the node keeps the task's place in
    /// `active` and in the window until the task that ends it (`END`) runs.
    Pending,
}

// SAFETY: a task points at a run that outlives it: the run's caller waits until the run's
// `active` count, which includes every queued task, reaches 0 before dropping the run. A job
// task owns a strong count of its `Arc<Job>`, which is `Send + Sync`.
unsafe impl Send for Task {}

/// The `node` of a job task: no node has this id (graphs have fewer than `u32::MAX - 1` nodes).
const JOB: u32 = u32::MAX;
/// The `node` of a task that ends a pending node.
const END: u32 = u32::MAX - 1;

/// A pool of worker threads; one executor serves many runs, concurrently.
pub struct Executor {
    shared: Arc<Shared>,
    workers: Vec<JoinHandle<()>>,
}

pub(super) struct Shared {
    threads: usize,
    /// The memory budget the executor's runs share (`budget.rs`).
    pub(super) budget: super::budget::Budget,
    /// High-priority runs going on the threads now: while there is one, a normal run's task
    /// keeps no successor for its own thread (it queues it, behind the urgent bands). Written
    /// twice a high-priority run, read once per continuation of a normal run: on its own line.
    pub(super) urgent_runs: CachePadded<AtomicUsize>,
    queues: Queues,
    sleep: Sleep,
    /// Set once when the executor drops (SeqCst store, then every sleeper is woken under the
    /// sleep lock); workers read it (Acquire) when they find no work, and exit.
    shutdown: AtomicBool,
}

/// An event count: sleepers take a key, check once more for work, and sleep until the key
/// moves; notifiers move it only when someone sleeps, so a busy executor never takes the lock.
struct Sleep {
    /// Threads between registering to sleep and waking. SeqCst with the fences in `sleep` and
    /// `notify`: a notifier that reads 0 here is ordered before the sleeper's registration, so
    /// the sleeper's last look for work sees what the notifier queued.
    /// Read on every push by every thread: on its own cache line.
    sleepers: CachePadded<AtomicUsize>,
    /// Moves on every wake-up; a sleeper waits until it differs from the key it took.
    epoch: Mutex<u64>,
    wake: Condvar,
}

impl Executor {
    /// An executor with `threads` threads in all, the calling thread of each run included
    /// (`threads - 1` workers are started); 0 means one per core.
    pub fn new(threads: usize) -> Result<Executor> {
        let threads = match threads {
            0 => std::thread::available_parallelism().map_or(1, |n| n.get()),
            n => n,
        };
        if threads > 4096 {
            return err(
                ErrorKind::InvalidArgument,
                format!("{threads} threads asked for; at most 4096 are allowed"),
            );
        }
        let (queues, locals) = Queues::new(threads - 1);
        let shared = Arc::new(Shared {
            threads,
            queues,
            sleep: Sleep {
                sleepers: CachePadded(AtomicUsize::new(0)),
                epoch: Mutex::new(0),
                wake: Condvar::new(),
            },
            shutdown: AtomicBool::new(false),
            budget: Default::default(),
            urgent_runs: CachePadded(AtomicUsize::new(0)),
        });
        let mut workers = Vec::new();
        for (index, local) in locals.into_iter().enumerate() {
            let mine = shared.clone();
            let spawned = std::thread::Builder::new()
                .name(format!("graphsched-{index}"))
                .spawn(move || mine.worker_main(index, local));
            match spawned {
                Ok(handle) => workers.push(handle),
                Err(e) => {
                    let executor = Executor { shared, workers };
                    drop(executor); // stops the workers already started
                    return err(
                        ErrorKind::OutOfMemory,
                        format!("could not start worker thread {index}: {e}"),
                    );
                }
            }
        }
        Ok(Executor { shared, workers })
    }

    /// Threads in all, the caller's included.
    pub fn threads(&self) -> usize {
        self.shared.threads
    }

    /// Sets the memory budget the runs given this executor share, in bytes (0: none, the
    /// default): the live bytes of all of them together stay within it (see
    /// [`RunOptions::priority`](super::RunOptions::priority) for the order on the threads, and
    /// the exec module's `budget.rs` for the rule: each run reserves its own bound on entry, first
    /// come first served). Runs inside keep their reservations; later ones see the new budget.
    pub fn set_memory_budget(&self, bytes: u64) {
        self.shared.budget.set(bytes);
    }

    /// The budget, what the runs inside reserve now, and the most they reserved at once.
    pub fn memory_budget(&self) -> super::BudgetStats {
        self.shared.budget.stats()
    }

    pub(super) fn shared(&self) -> &Arc<Shared> {
        &self.shared
    }

    /// Queues `helpers` tasks that each help `job` (`parallel.rs`), ahead of every node.
    pub(super) fn push_job(&self, job: &Arc<Job>, helpers: usize) {
        let task = |_| {
            let run = Arc::into_raw(job.clone()).cast::<RunState<'static>>();
            let task = Task {
                run,
                node: JOB,
                reserved: false,
            };
            (0, task)
        };
        self.shared.queues.push((0..helpers).map(task), None);
        self.shared.sleep.notify(helpers);
    }

    /// Runs `state` to its end: queues its ready roots, works until nothing of it is queued or
    /// running. The caller's thread executes the first root itself.
    pub(super) fn drive(&self, state: &RunState<'_>, roots: &[u32]) {
        // SAFETY: only the lifetime is erased; `state` outlives every task (see `Task`), since
        // this function returns only once `active` is 0.
        let run: *const RunState<'static> = (state as *const RunState<'_>).cast();
        let Some((&first, rest)) = roots.split_first() else {
            return;
        };
        let urgent = state.urgent();
        if urgent {
            self.shared.urgent_runs.fetch_add(1, Ordering::SeqCst);
        }
        let mut scratch = Scratch::for_caller();
        // A deque set of its own if one is free: the run's tasks then need no shared queue.
        let borrowed = self.shared.queues.borrow();
        let local = borrowed.as_ref().map(|b| b.local());
        state.active.store(roots.len(), Ordering::Release);
        self.shared.push(run, rest, local);
        let first = Task {
            run,
            node: first,
            reserved: false,
        };
        self.shared.run_task(first, local, &mut scratch, Some(run));
        let mut idle_since = None;
        while state.active.load(Ordering::Acquire) != 0 {
            if let Some(task) = self.shared.find_work(local) {
                self.shared.run_task(task, local, &mut scratch, Some(run));
                idle_since = None;
                continue;
            }
            self.shared.wait_for_work(&mut idle_since, || {
                state.active.load(Ordering::Acquire) != 0 && !self.shared.has_work()
            });
        }
        if let Some(borrowed) = borrowed {
            let moved = borrowed.give_back();
            if moved > 0 {
                self.shared.sleep.notify(moved);
            }
        }
        scratch.keep_for_caller();
        if urgent {
            self.shared.urgent_runs.fetch_sub(1, Ordering::SeqCst);
        }
    }
}

impl Drop for Executor {
    fn drop(&mut self) {
        self.shared.shutdown.store(true, Ordering::SeqCst);
        self.shared.sleep.wake_all();
        for w in self.workers.drain(..) {
            let _ = w.join();
        }
    }
}

impl Shared {
    /// Queues the task that ends `pending`, whose completion came (`pending.rs`), in `band`. It
    /// takes over the node's place in its run's `active` count: nothing is added.
    pub(super) fn push_finish(&self, pending: Arc<PendingNode>, band: usize) {
        let run = Arc::into_raw(pending).cast::<RunState<'static>>();
        let task = Task {
            run,
            node: END,
            reserved: true,
        };
        self.queues.push([(band, task)], None);
        self.sleep.notify(1);
    }

    fn worker_main(&self, index: usize, deques: Vec<Worker<Task>>) {
        super::budget::mark_worker();
        super::scratch::TRACK.with(|t| t.set(index as u32 + 1));
        let mut scratch = Scratch::default();
        let mut idle_since = None;
        let local = self.queues.worker_local(index, &deques);
        loop {
            if let Some(task) = self.find_work(Some(local)) {
                scratch.slot = Some(index + 1);
                scratch.thread = index as u32 + 1;
                self.run_task(task, Some(local), &mut scratch, None);
                idle_since = None;
                continue;
            }
            if self.shutdown.load(Ordering::Acquire) {
                return;
            }
            self.wait_for_work(&mut idle_since, || {
                !self.shutdown.load(Ordering::Acquire) && !self.has_work()
            });
        }
    }

    /// One step of an idle thread: spin for [`SPIN`] after it found no work, then sleep until
    /// `idle()` turns false (work was queued, the run ended, the executor stops). The callers
    /// look for work between steps.
    fn wait_for_work(&self, idle_since: &mut Option<Instant>, idle: impl Fn() -> bool) {
        let since = *idle_since.get_or_insert_with(Instant::now);
        if since.elapsed() < SPIN {
            std::hint::spin_loop();
            return;
        }
        self.sleep.sleep(idle);
        *idle_since = None;
    }

    /// The most critical task this thread can see (see `Queues::find`).
    fn find_work(&self, me: Option<Local<'_>>) -> Option<Task> {
        self.queues.find(me, random_below)
    }

    fn has_work(&self) -> bool {
        self.queues.has_work()
    }

    /// Queues nodes of a run (already counted in its `active`), most critical first.
    fn push(&self, run: *const RunState<'static>, nodes: &[u32], local: Option<Local<'_>>) {
        self.push_tasks(run, nodes, false, local);
    }

    /// Queues a task the window deferred (counted in `active` already), keeping its reservation.
    fn restart(&self, run: *const RunState<'static>, (node, reserved): (u32, bool), local: Option<Local<'_>>) {
        self.push_tasks(run, &[node], reserved, local);
    }

    /// Queues nodes admitted under the memory limit already.
    fn push_reserved(&self, run: *const RunState<'static>, nodes: &[u32], local: Option<Local<'_>>) {
        self.push_tasks(run, nodes, true, local);
    }

    fn push_tasks(&self, run: *const RunState<'static>, nodes: &[u32], reserved: bool, local: Option<Local<'_>>) {
        if nodes.is_empty() {
            return;
        }
        // SAFETY: the run is alive while it has active tasks, and these nodes are counted.
        let state = unsafe { &*run };
        let tasks = nodes
            .iter()
            .map(|&node| (state.band(node), Task { run, node, reserved }));
        self.queues.push(tasks, local);
        self.sleep.notify(nodes.len());
    }

    /// Executes a task and the chain of continuations it leads to. `own` is the run a calling
    /// thread drives: its cache slot there is 0, and it has none in runs it only helps.
    fn run_task(
        &self,
        task: Task,
        local: Option<Local<'_>>,
        scratch: &mut Scratch,
        own: Option<*const RunState<'static>>,
    ) {
        if task.node == JOB {
            // SAFETY: a job task carries one strong count of its job (`push_job`), taken back here once.
            let job = unsafe { Arc::from_raw(task.run.cast::<Job>()) };
            job.help(true);
            return;
        }
        let (run, first) = match task.node {
            END => {
                // SAFETY: an end task carries one strong count of its node (`push_finish`),
                // taken back here once.
                let pending = unsafe { Arc::from_raw(task.run.cast::<PendingNode>()) };
                (pending.run().0, First::End(pending))
            }
            node => (
                task.run,
                First::Node {
                    node,
                    reserved: task.reserved,
                },
            ),
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
            match state
                .active
                .compare_exchange_weak(active, active - 1, Ordering::AcqRel, Ordering::Acquire)
            {
                Ok(1) => {
                    // The run is over; from here on nothing of it may be touched. Its caller may
                    // be asleep waiting for this, and nothing else would wake it: unless this
                    // thread is that caller, every sleeper wakes (the caller among them).
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
            // A pending node holds its window place (`pending.rs`).
            First::End(p) => (p.run().1, true, Some(p)),
        };
        loop {
            scratch.ready.clear();
            scratch.admitted.clear();
            if let Some(p) = pending.take() {
                in_window.set(state.window.is_some());
                state.end_pending(&p, scratch);
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
                    state.end_pending(&p, scratch);
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
            let next = state.continuation(node, ready);
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

/// Where a task's chain starts.
enum First {
    /// Executing a node, whose memory may be reserved already.
    Node { node: u32, reserved: bool },
    /// Ending a pending node whose completion came.
    End(Arc<PendingNode>),
}

/// A number below `n` from a per-thread xorshift generator: cheap, and different per thread.
fn random_below(n: usize) -> usize {
    thread_local! {
        static STATE: std::cell::Cell<u32> = const { std::cell::Cell::new(0) };
    }
    STATE.with(|s| {
        let mut x = s.get();
        if x == 0 {
            // Seeded from the address of the thread's own state: distinct per live thread.
            x = (s as *const _ as usize as u32) | 1;
        }
        x ^= x << 13;
        x ^= x >> 17;
        x ^= x << 5;
        s.set(x);
        ((x as u64 * n as u64) >> 32) as usize
    })
}

impl Sleep {
    /// Sleeps unless `idle()` turns false after registering as a sleeper.
    fn sleep(&self, idle: impl Fn() -> bool) {
        let key = *self.epoch.lock().unwrap_or_else(|e| e.into_inner());
        self.sleepers.fetch_add(1, Ordering::SeqCst);
        // Pairs with the fence in `notify`: either the work pushed before it is seen by `idle`,
        // or the notifier sees this sleeper and moves the key.
        fence(Ordering::SeqCst);
        if idle() {
            let mut epoch = self.epoch.lock().unwrap_or_else(|e| e.into_inner());
            while *epoch == key {
                epoch = self.wake.wait(epoch).unwrap_or_else(|e| e.into_inner());
            }
        }
        self.sleepers.fetch_sub(1, Ordering::SeqCst);
    }

    /// Wakes up to `count` sleepers, if any sleep, after `count` tasks were queued (a thread
    /// per task: any awake thread takes any run's work), or all of them when a run ended.
    fn notify(&self, count: usize) {
        fence(Ordering::SeqCst);
        let sleepers = self.sleepers.load(Ordering::SeqCst);
        if sleepers == 0 {
            return;
        }
        if count >= sleepers {
            return self.wake_all();
        }
        // The key moves once; each `notify_one` lets one waiter see it moved. The others keep
        // waiting (a spurious wake-up only sends one looking for work early).
        *self.epoch.lock().unwrap_or_else(|e| e.into_inner()) += 1;
        for _ in 0..count {
            self.wake.notify_one();
        }
    }

    fn wake_all(&self) {
        *self.epoch.lock().unwrap_or_else(|e| e.into_inner()) += 1;
        self.wake.notify_all();
    }
}
