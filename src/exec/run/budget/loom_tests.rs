//! Loom models of the budget's queue (`scripts/test.sh` runs them): no waiter left parked, runs
//! that fit together enter together, and a queued run started exactly once by whoever makes room.

use super::{Budget, Entered, Start, StartRuns};
use loom::sync::{Arc, Mutex};

/// For runs that only enter (none is prepared): nothing to start.
struct NoStarts;

impl StartRuns for NoStarts {
    fn start_runs(&self, runs: Vec<Start>) {
        assert!(runs.is_empty(), "no run was prepared");
    }
}

/// Counts the prepared runs started, as the executor would queue their first nodes.
#[derive(Default)]
struct Starts(Mutex<usize>);

impl StartRuns for Starts {
    fn start_runs(&self, runs: Vec<Start>) {
        *self.0.lock().unwrap() += runs.len();
    }
}

/// On a new thread, enters a prepared run of `need` bytes (`urgent`: a high-priority one;
/// `to_threads`: one for the executor's threads) and lets its entry go; the thread answers
/// whether the run was queued (then its last task, which the model plays, gives the reservation
/// back) rather than let in at once.
fn prepared_run(
    b: &Arc<Budget>,
    starts: &Arc<Starts>,
    need: u64,
    urgent: bool,
    to_threads: bool,
) -> loom::thread::JoinHandle<bool> {
    let (b, starts) = (b.clone(), starts.clone());
    loom::thread::spawn(move || {
        let start = Start {
            run: std::ptr::null(),
            queued: std::time::Instant::now(),
            refused_under: None,
        };
        match b
            .enter_prepared(need, || "a run".into(), urgent, to_threads, start, &*starts)
            .unwrap()
        {
            Entered::Now(entry) => {
                drop(entry);
                false
            }
            Entered::Queued(entry) => {
                drop(entry);
                true
            }
            Entered::Free => unreachable!("a budget is set"),
        }
    })
}

/// Runs entering a budget that holds fewer of them at once than there are: every one enters
/// and leaves, never more reserved than the budget. A waiter nobody unparks leaves its thread
/// blocked for ever, which loom reports as a deadlock.
fn all_enter(budget: u64, needs: &'static [u64]) {
    loom::model(move || {
        let b = Arc::new(Budget::default());
        b.set(budget, &NoStarts);
        let threads: Vec<_> = needs
            .iter()
            .map(|&need| {
                let b = b.clone();
                loom::thread::spawn(move || {
                    let entry = b
                        .enter(|| need, || "a run".into(), false, &NoStarts)
                        .unwrap()
                        .expect("a budget is set");
                    let s = b.stats();
                    assert!(s.reserved <= s.bytes, "{} reserved of {}", s.reserved, s.bytes);
                    drop(entry);
                })
            })
            .collect();
        for t in threads {
            t.join().unwrap();
        }
        assert_eq!(b.stats().reserved, 0);
    });
}

#[test]
fn loom_two_runs_one_at_a_time() {
    all_enter(1, &[1, 1]);
}

/// Two runs that fit together are let in together: while a run holding the whole budget is
/// inside, two more queue; when it leaves, both must be let in and woken. Each waits inside for
/// the other, so a second left parked blocks both: a deadlock for loom.
#[test]
fn loom_runs_that_fit_together_enter_together() {
    use loom::sync::{Condvar, Mutex};
    loom::model(|| {
        let b = Arc::new(Budget::default());
        b.set(2, &NoStarts);
        let whole = b
            .enter(|| 2, || "the first run".into(), false, &NoStarts)
            .unwrap()
            .expect("a budget is set");
        let inside = Arc::new((Mutex::new(0u32), Condvar::new()));
        let threads: Vec<_> = (0..2)
            .map(|_| {
                let (b, inside) = (b.clone(), inside.clone());
                loom::thread::spawn(move || {
                    let entry = b
                        .enter(|| 1, || "a run".into(), false, &NoStarts)
                        .unwrap()
                        .expect("a budget is set");
                    let (count, both) = &*inside;
                    let mut n = count.lock().unwrap();
                    *n += 1;
                    both.notify_all();
                    while *n < 2 {
                        n = both.wait(n).unwrap();
                    }
                    drop(n);
                    drop(entry);
                })
            })
            .collect();
        drop(whole);
        for t in threads {
            t.join().unwrap();
        }
        assert_eq!(b.stats().reserved, 0);
    });
}

/// A prepared run (`to_threads`: one for the executor's threads) enters while a run holding the
/// whole budget leaves. Queued, it is started once by whichever comes second, its own entry or
/// the leaving (then it enters at once); its last task, played by the model, gives the
/// reservation back.
fn behind_a_leaving_run(to_threads: bool) {
    loom::model(move || {
        let b = Arc::new(Budget::default());
        let starts = Arc::new(Starts::default());
        b.set(1, &*starts);
        let first = b
            .enter(|| 1, || "the first run".into(), false, &*starts)
            .unwrap()
            .expect("a budget is set");
        let queued = prepared_run(&b, &starts, 1, false, to_threads);
        drop(first);
        let was_queued = queued.join().unwrap();
        assert!(was_queued || !to_threads, "a run for the threads is always queued");
        let started = *starts.0.lock().unwrap();
        assert_eq!(
            started,
            usize::from(was_queued),
            "started once if queued, else entered at once"
        );
        if was_queued {
            assert_eq!(b.stats().reserved, 1, "the started run holds its reservation");
            b.leave(1, &*starts);
        }
        assert_eq!(b.stats().reserved, 0);
    });
}

/// Fails if a leave does not start the queued runs it makes room for (nothing counts a start).
#[test]
fn loom_a_queued_run_is_started_by_the_run_that_makes_room() {
    behind_a_leaving_run(false);
}

/// A run for the executor's threads (their OS priority lowered) queues even when it fits. Fails
/// if it enters at once (its caller would drive it) or is never started.
#[test]
fn loom_a_run_for_the_threads_is_queued_and_started_once() {
    behind_a_leaving_run(true);
}

/// An urgent prepared run queues behind the run inside, beside a normal run that also waits for
/// room: each enters exactly once, whoever lets it in, whatever the order of arrival, and the
/// urgent run's last task (here, the model) gives its reservation back. A run never let in
/// leaves its thread parked for ever, or the model spinning: loom reports either.
#[test]
fn loom_an_urgent_run_and_a_normal_one_both_enter() {
    loom::model(|| {
        let b = Arc::new(Budget::default());
        let starts = Arc::new(Starts::default());
        b.set(2, &*starts);
        let first = b
            .enter(|| 2, || "the first run".into(), false, &*starts)
            .unwrap()
            .expect("a budget is set");
        let normal = {
            let (b, starts) = (b.clone(), starts.clone());
            loom::thread::spawn(move || {
                let entry = b.enter(|| 1, || "a normal run".into(), false, &*starts).unwrap();
                drop(entry.expect("a budget is set"));
            })
        };
        let urgent = prepared_run(&b, &starts, 2, true, false);
        drop(first);
        if urgent.join().unwrap() {
            // Queued: started once by whoever let it in; it ends, as its last task would.
            while *starts.0.lock().unwrap() == 0 {
                loom::thread::yield_now();
            }
            b.leave(2, &*starts);
        }
        normal.join().unwrap();
        assert!(*starts.0.lock().unwrap() <= 1, "started at most once");
        assert_eq!(b.stats().reserved, 0);
    });
}
