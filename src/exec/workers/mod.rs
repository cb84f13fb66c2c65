//! The executor: persistent worker threads that run the nodes of any number of concurrent runs.
//!
//! Work stealing on crossbeam-deque, with priorities that survive stealing ([`queues`]): every
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
//! hand-off. Idle threads pause, then yield their core, then sleep on an event count
//! ([`Idle`]); an idle executor uses no CPU.

mod os_priority;
pub(in crate::exec) mod overflow;
mod queued;
pub(in crate::exec) mod queues;
mod sleep;
mod task;
pub(in crate::exec) mod window;

use sleep::Sleep;
use task::Task;

use std::sync::atomic::{AtomicBool, AtomicUsize, Ordering};
use std::sync::Arc;
use std::thread::JoinHandle;
use std::time::{Duration, Instant};

use crossbeam_deque::Worker;

use crate::error::{err, ErrorKind, Result};
use crate::exec::node::parallel::Job;
use crate::exec::node::pending::PendingNode;
use crate::exec::node::scratch::Scratch;
use crate::exec::padded::CachePadded;
use crate::exec::state::RunState;
use crate::exec::workers::queues::{Local, Queues};

/// How long an idle thread keeps looking for work before it sleeps.
const SPIN: Duration = Duration::from_micros(50);

/// Looks for work an idle thread makes with growing runs of `pause` between them (1, 2, 4 ...
/// 16 pauses) before it starts yielding its core between looks, as oneTBB's backoff does.
const PAUSING_LOOKS: u32 = 5;

/// An idle thread's backoff between looks for work: a few looks with pauses between them, then
/// looks with a yield between them until [`SPIN`] has passed since the first, then sleep.
///
/// Why yield: where the machine has fewer free cores than threads (a shared host, or a second
/// program on it), a thread that only pauses holds the core that the thread it waits for (a
/// run's caller between two runs, a worker about to queue successors) needs, for its whole
/// time slice; a yield hands the core over at once. Where nobody else wants the core the yield
/// returns at once.
#[derive(Default)]
struct Idle {
    since: Option<Instant>,
    looks: u32,
}
/// A pool of worker threads; one executor serves many runs, concurrently.
pub struct Executor {
    shared: Arc<Shared>,
    workers: Vec<JoinHandle<()>>,
    /// The thread that stands in for the callers once a budget is set ([`queued`]).
    stand_in: std::sync::Mutex<Option<JoinHandle<()>>>,
}

pub(in crate::exec) struct Shared {
    threads: usize,
    /// The memory budget the executor's runs share ([`budget`](crate::exec::run::budget)).
    pub(in crate::exec) budget: crate::exec::run::budget::Budget,
    /// High-priority runs going on the threads now: while there is one, a normal run's task
    /// keeps no successor for its own thread (it queues it, behind the urgent bands). Written
    /// twice a high-priority run, read once per continuation of a normal run: on its own line.
    pub(in crate::exec) urgent_runs: CachePadded<AtomicUsize>,
    /// Runs queued in the budget that started and are not over: the stand-in works while there
    /// are some ([`queued`]).
    queued_runs: AtomicUsize,
    queues: Queues,
    sleep: Sleep,
    /// Where the stand-in sleeps while no queued run goes ([`queued`]).
    stand_in_sleep: Sleep,
    /// The OS priority of the threads, and whether normal runs under the budget go to them
    /// ([`os_priority`]).
    os_priority: os_priority::OsPriority,
    /// Set once when the executor drops (SeqCst store, then every sleeper is woken under the
    /// sleep lock); workers read it (Acquire) when they find no work, and exit.
    shutdown: AtomicBool,
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
            sleep: Sleep::new(),
            stand_in_sleep: Sleep::new(),
            shutdown: AtomicBool::new(false),
            budget: Default::default(),
            urgent_runs: CachePadded(AtomicUsize::new(0)),
            queued_runs: AtomicUsize::new(0),
            os_priority: Default::default(),
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
                    let executor = Executor {
                        shared,
                        workers,
                        stand_in: Default::default(),
                    };
                    drop(executor); // stops the workers already started
                    return err(
                        ErrorKind::OutOfMemory,
                        format!("could not start worker thread {index}: {e}"),
                    );
                }
            }
        }
        Ok(Executor {
            shared,
            workers,
            stand_in: Default::default(),
        })
    }

    /// Threads in all, the caller's included.
    pub fn threads(&self) -> usize {
        self.shared.threads
    }

    /// Sets the memory budget the runs given this executor share, in bytes (0: none, the
    /// default): the live bytes of all of them together stay within it (see
    /// [`RunOptions::priority`](crate::exec::RunOptions::priority) for the order on the threads, and
    /// the exec module's `exec::run::budget` for the rule: each run reserves its own bound on entry, first
    /// come, first served, urgent runs first, at most 8 in a row ahead of the oldest waiting run).
    /// Runs inside keep their reservations; later ones see the new budget.
    ///
    /// A run that has to wait is started on the executor's threads by the run that makes room
    /// for it, while its caller waits; the first budget starts one more thread, in the callers'
    /// place. An error (`OutOfMemory`) if that thread cannot be started: the budget is then not
    /// set.
    pub fn set_memory_budget(&self, bytes: u64) -> Result<()> {
        if bytes > 0 {
            self.start_stand_in()?;
        }
        self.shared.budget.set(bytes, &*self.shared);
        Ok(())
    }

    /// The budget, what the runs inside reserve now, and the most they reserved at once.
    pub fn memory_budget(&self) -> crate::exec::BudgetStats {
        self.shared.budget.stats()
    }

    /// Lowers the OS priority of the executor's threads to `nice` (1 to 19, never below a value
    /// set before: a process may not raise its threads' priority back), so that urgent runs
    /// preempt the others' kernels (`exec::workers::os_priority`): from then on every
    /// normal-priority run under the memory budget is run by the executor's threads while its
    /// caller waits, and a [`High`](crate::sched::RunPriority::High) run goes on its caller's
    /// thread as before, at the caller's priority. Runs with a plan, and runs when no budget is
    /// set, go as before. `InvalidArgument` for a value out of range or lower than before, or
    /// if the OS refuses (only Linux sets one thread's priority).
    pub fn set_background_nice(&self, nice: i32) -> Result<()> {
        self.shared.os_priority.set(nice)
    }

    /// The nice value set by [`set_background_nice`](Self::set_background_nice) (0: none).
    pub fn background_nice(&self) -> i32 {
        self.shared.os_priority.nice()
    }

    pub(in crate::exec) fn shared(&self) -> &Arc<Shared> {
        &self.shared
    }

    /// Queues `helpers` tasks that each help `job` ([`parallel`](crate::exec::node::parallel)), ahead of every node.
    pub(in crate::exec) fn push_job(&self, job: &Arc<Job>, helpers: usize) {
        let task = |_| (0, Task::Help(job.clone()));
        self.shared.queues.push((0..helpers).map(task), None);
        self.shared.sleep.notify(helpers);
    }

    /// Runs `state` to its end: queues its ready roots, works until nothing of it is queued or
    /// running. The caller's thread executes the first root itself.
    pub(in crate::exec) fn drive(&self, state: &RunState<'_>, roots: &[u32]) {
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
        let first = Task::Node {
            run,
            node: first,
            reserved: false,
        };
        self.shared.run_task(first, local, &mut scratch, Some(run));
        let mut idle = Idle::default();
        while state.active.load(Ordering::Acquire) != 0 {
            if let Some(task) = self.shared.find_work(local) {
                self.shared.run_task(task, local, &mut scratch, Some(run));
                idle = Idle::default();
                continue;
            }
            self.shared.wait_for_work(&mut idle, || {
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
        self.shared.stand_in_sleep.wake_all();
        let stand_in = self.stand_in.get_mut().unwrap_or_else(|p| p.into_inner()).take();
        for w in self.workers.drain(..).chain(stand_in) {
            let _ = w.join();
        }
    }
}

impl Shared {
    /// Queues the task that ends `pending`, whose completion came ([`pending`](crate::exec::node::pending)), in `band`. It
    /// takes over the node's place in its run's `active` count: nothing is added.
    pub(in crate::exec) fn push_end(&self, pending: Arc<PendingNode>, band: usize) {
        self.queues.push([(band, Task::End(pending))], None);
        self.sleep.notify(1);
    }

    fn worker_main(&self, index: usize, deques: Vec<Worker<Task>>) {
        crate::exec::run::budget::mark_worker();
        self.os_priority.join();
        crate::exec::node::scratch::TRACK.with(|t| t.set(index as u32 + 1));
        let mut scratch = Scratch::default();
        let mut idle = Idle::default();
        let local = self.queues.worker_local(index, &deques);
        loop {
            if let Some(task) = self.find_work(Some(local)) {
                scratch.slot = Some(index + 1);
                scratch.thread = index as u32 + 1;
                self.run_task(task, Some(local), &mut scratch, None);
                idle = Idle::default();
                continue;
            }
            if self.shutdown.load(Ordering::Acquire) {
                return;
            }
            self.wait_for_work(&mut idle, || !self.shutdown.load(Ordering::Acquire) && !self.has_work());
        }
    }

    /// One step of an idle thread after it found no work ([`Idle`]): a pause, a yield, or once
    /// [`SPIN`] has passed, sleep until `idle()` turns false (work was queued, the run ended, the
    /// executor stops). The callers look for work between steps.
    fn wait_for_work(&self, idle: &mut Idle, still_idle: impl Fn() -> bool) {
        let since = *idle.since.get_or_insert_with(Instant::now);
        idle.looks += 1;
        if idle.looks <= PAUSING_LOOKS {
            for _ in 0..1u32 << (idle.looks - 1) {
                std::hint::spin_loop();
            }
            return;
        }
        if since.elapsed() < SPIN {
            std::thread::yield_now();
            return;
        }
        self.sleep.sleep(still_idle);
        *idle = Idle::default();
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
        if let &[node] = nodes {
            self.queues
                .push_one(state.band(node), Task::Node { run, node, reserved }, local);
            self.sleep.notify(1);
            return;
        }
        let tasks = nodes
            .iter()
            .map(|&node| (state.band(node), Task::Node { run, node, reserved }));
        self.queues.push(tasks, local);
        self.sleep.notify(nodes.len());
    }
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
