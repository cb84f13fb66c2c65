//! The executor's part of the model: `Shared`'s queue and the task path (`src/exec/workers/`),
//! and `Executor::drive`, each beside what it mirrors.

use std::sync::atomic::Ordering::SeqCst;
use std::sync::Arc;

use loom::sync::atomic::Ordering;
use loom::thread;

use super::{Mutation, Run, Shared, Task};

impl Shared {
    /// `Shared::push_tasks`: queues nodes already counted in `active` (`sleep.notify` elided).
    fn push(&self, run: &Arc<Run>, nodes: &[usize], reserved: bool) {
        if nodes.is_empty() {
            return;
        }
        run.touch(); // the real one reads the run for each node's band
        let mut queue = self.queue.lock().unwrap();
        queue.extend(nodes.iter().map(|&node| Task {
            run: run.clone(),
            node,
            reserved,
            end: false,
        }));
    }

    /// `Shared::find_work`.
    fn find_work(&self) -> Option<Task> {
        self.queue.lock().unwrap().pop_front()
    }

    /// `Shared::run_task` and `run_chain`: a task and the chain of continuations it leads to,
    /// then the task leaves `active`.
    fn run_task(&self, task: Task, worker: bool) {
        let run = task.run;
        run.touch();
        let mut node = task.node;
        let mut reserved = task.reserved;
        let mut end = task.end;
        let (slot, mut finished) = (worker as usize, 0);
        loop {
            let (mut ready, mut admitted) = (Vec::new(), Vec::new());
            if std::mem::take(&mut end) {
                // `RunState::end_pending_node`: the node's kernel ran; its work is done.
                run.end_node_ok(node, &mut ready, &mut admitted);
                finished += 1;
            } else {
                if !reserved && !run.admit(node) {
                    break;
                }
                if worker {
                    self.by_worker.fetch_add(1, SeqCst);
                }
                if run.execute(self, node, &mut ready, &mut admitted, (slot, &mut finished)) {
                    // `Chain::Pending`: the node keeps this task's place in `active`.
                    if run.mutation == Mutation::PendingLeavesActive {
                        self.leave(&run);
                    }
                    return;
                }
            }
            if run.mutation == Mutation::DecrementBeforePush {
                run.flush(slot, &mut finished);
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
                if run.mutation == Mutation::CountAfterPush {
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
        run.flush(slot, &mut finished);
        self.leave(&run);
    }

    /// The end of `Shared::run_task`: the task leaves the run's active count. One that reads it
    /// at 1 first resolves memory stalls, since no release will come after it; if that admitted
    /// nodes, it queues them and loads the count afresh, so only a check that admitted nothing,
    /// while the task was alone, lets it take the count to 0.
    fn leave(&self, run: &Arc<Run>) {
        run.touch();
        let mut active = run.active.load(Ordering::Acquire);
        let mut admitted_before = false;
        loop {
            if active == 1 && run.gate.is_some() && run.mutation != Mutation::NoStallHandover {
                let mut admitted = Vec::new();
                run.resolve_stall(&mut admitted);
                let any = !admitted.is_empty();
                if admitted_before {
                    run.late_again.fetch_add(admitted.len(), SeqCst);
                }
                if any {
                    run.add_active(admitted.len());
                    self.push(run, &admitted, true);
                }
                admitted_before = any;
                if run.mutation == Mutation::StaleReload {
                    active = run.active.load(Ordering::Acquire);
                    if active != 1 {
                        continue;
                    }
                } else if any {
                    active = run.active.load(Ordering::Acquire);
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

    /// The device: takes one piece of work a deferred node handed it, writes the node's output
    /// and completes it (`Completion::complete`); the last arrival queues the task that ends the
    /// node (`Shared::push_finish`), which takes over its place in `active`. False if there was
    /// none.
    fn device_work(&self) -> bool {
        let Some((task, pending)) = self.device.lock().unwrap().pop_front() else {
            return false;
        };
        task.run.make(task.node);
        if pending.arrive() {
            task.run.touch(); // the real one reads the run for the node's band
            self.queue.lock().unwrap().push_back(task);
        }
        true
    }

    /// `Shared::worker_main`: runs whatever it finds until shutdown.
    pub(super) fn worker_main(&self) {
        loop {
            if let Some(task) = self.find_work() {
                self.run_task(task, true);
                continue;
            }
            if self.device_work() {
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
pub(super) fn drive(shared: &Shared, run: &Arc<Run>) {
    let roots = &run.spec.roots;
    run.active.store(roots.len(), Ordering::Release);
    shared.push(run, &roots[1..], false);
    shared.run_task(
        Task {
            run: run.clone(),
            node: roots[0],
            reserved: false,
            end: false,
        },
        false,
    );
    while run.active.load(Ordering::Acquire) != 0 {
        match shared.find_work() {
            Some(task) => shared.run_task(task, false),
            None if shared.device_work() => {}
            None => thread::yield_now(),
        }
    }
}
