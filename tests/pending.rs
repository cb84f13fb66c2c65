//! Asynchronous kernels: `KernelCtx::defer` and `Completion`. A simulated device thread
//! completes deferred nodes in random order; the outputs, the window, memory admission,
//! cancellation, failures and traces all account for pending nodes.

use std::sync::atomic::{AtomicBool, AtomicUsize, Ordering};
use std::sync::mpsc::{channel, Sender};
use std::sync::{Arc, Mutex};
use std::thread::JoinHandle;
use std::time::Duration;

use graphsched::{
    trace, CancelToken, Completion, ErrorKind, Executor, GraphBuilder, NodeDesc, Pool, RunOptions, ValueRef,
};

/// Work a deferred kernel hands the device: write `byte` over `len` bytes at `out`, then
/// complete with `result`.
struct Work {
    out: usize,
    len: usize,
    byte: u8,
    result: Result<(), String>,
    completion: Completion,
}

// SAFETY (for the raw address in `Work`): the run keeps a pending node's output allocated until
// its completion, which the device calls after writing.

/// A device: a thread that holds deferred work until `batch` pieces arrived (or the channel
/// closes), then does them in a random order (seeded), with a pause of `pause_us` to 4 x
/// `pause_us` microseconds before each, so that completions come late, out of order, and from a
/// thread that runs no kernels.
struct Device {
    tx: Option<Sender<Work>>,
    thread: Option<JoinHandle<()>>,
    /// Nodes deferred and not completed yet, and the most seen at once.
    in_flight: Arc<AtomicUsize>,
    most_in_flight: Arc<AtomicUsize>,
    completed: Arc<AtomicUsize>,
}

impl Device {
    fn new(batch: usize, seed: u64, pause_us: u64) -> Device {
        let (tx, rx) = channel::<Work>();
        let in_flight = Arc::new(AtomicUsize::new(0));
        let completed = Arc::new(AtomicUsize::new(0));
        let (flight, done) = (in_flight.clone(), completed.clone());
        let thread = std::thread::spawn(move || {
            let mut rng = seed | 1;
            let mut held: Vec<Work> = Vec::new();
            loop {
                // Hold work until a batch is in, nothing came for 2 ms, or the channel closed.
                let (idle, closed) = match rx.recv_timeout(Duration::from_millis(2)) {
                    Ok(w) => {
                        held.push(w);
                        (false, false)
                    }
                    Err(std::sync::mpsc::RecvTimeoutError::Timeout) => (true, false),
                    Err(_) => (true, true),
                };
                if held.len() < batch && !idle {
                    continue;
                }
                while !held.is_empty() {
                    rng ^= rng << 13;
                    rng ^= rng >> 7;
                    rng ^= rng << 17;
                    let w = held.swap_remove((rng % held.len() as u64) as usize);
                    std::thread::sleep(Duration::from_micros(pause_us + rng % (3 * pause_us)));
                    // SAFETY: the node is pending, so its output block is allocated and its own.
                    unsafe { std::ptr::write_bytes(w.out as *mut u8, w.byte, w.len) };
                    flight.fetch_sub(1, Ordering::SeqCst);
                    done.fetch_add(1, Ordering::SeqCst);
                    w.completion.complete(w.result);
                }
                if closed {
                    return;
                }
            }
        });
        Device {
            tx: Some(tx),
            thread: Some(thread),
            in_flight,
            most_in_flight: Arc::new(AtomicUsize::new(0)),
            completed,
        }
    }

    fn handle(&self) -> DeviceHandle {
        DeviceHandle {
            tx: Mutex::new(self.tx.clone().unwrap()),
            in_flight: self.in_flight.clone(),
            most: self.most_in_flight.clone(),
        }
    }
}

impl Drop for Device {
    fn drop(&mut self) {
        drop(self.tx.take());
        self.thread.take().unwrap().join().unwrap();
    }
}

/// What kernels hold of the device.
struct DeviceHandle {
    tx: Mutex<Sender<Work>>,
    in_flight: Arc<AtomicUsize>,
    most: Arc<AtomicUsize>,
}

impl DeviceHandle {
    fn submit(&self, w: Work) {
        let now = self.in_flight.fetch_add(1, Ordering::SeqCst) + 1;
        self.most.fetch_max(now, Ordering::SeqCst);
        assert!(self.tx.lock().unwrap().send(w).is_ok(), "the device is gone");
    }
}

/// `width` deferred "Fill" nodes (node k fills its 256-byte output with k + 1 on the device;
/// node `fail`, if any, completes with an error), each read by a plain "Check" node that fails
/// unless every byte is k + 1, all summed into one output by a final node.
fn graph(width: usize, device: &Arc<DeviceHandle>, fail: Option<usize>) -> (Arc<graphsched::Graph>, u32) {
    let mut b = GraphBuilder::new();
    let mut checks = Vec::new();
    for k in 0..width {
        let dev = device.clone();
        let fill = b
            .add_node(
                NodeDesc::new(
                    format!("fill{k}"),
                    "DeviceFill",
                    Box::new(move |ctx| {
                        let out = ctx.output_bytes(0).unwrap();
                        let (ptr, len) = (out.as_mut_ptr() as usize, out.len());
                        let completion = ctx.defer().map_err(|e| e.to_string())?;
                        let result = match fail == Some(k) {
                            true => Err("the device reported a fault".to_string()),
                            false => Ok(()),
                        };
                        dev.submit(Work {
                            out: ptr,
                            len,
                            byte: k as u8 + 1,
                            result,
                            completion,
                        });
                        Ok(())
                    }),
                )
                .output(256),
            )
            .unwrap();
        let check = b
            .add_node(
                NodeDesc::new(
                    format!("check{k}"),
                    "Check",
                    Box::new(move |ctx| {
                        let input = ctx.input_bytes(0).unwrap();
                        if let Some(i) = input.iter().position(|&x| x != k as u8 + 1) {
                            return Err(format!("byte {i} is {}, not {}", input[i], k + 1));
                        }
                        ctx.output_bytes(0).unwrap()[..8].copy_from_slice(&(k as u64 + 1).to_ne_bytes());
                        Ok(())
                    }),
                )
                .input(ValueRef::new(fill, 0))
                .output(8),
            )
            .unwrap();
        checks.push(check);
    }
    let mut sum = NodeDesc::new(
        "sum",
        "Sum",
        Box::new(|ctx| {
            let total: u64 = (0..ctx.num_inputs())
                .map(|i| u64::from_ne_bytes(ctx.input_bytes(i).unwrap()[..8].try_into().unwrap()))
                .sum();
            ctx.output_bytes(0).unwrap().copy_from_slice(&total.to_ne_bytes());
            Ok(())
        }),
    )
    .output(8);
    for &c in &checks {
        sum = sum.input(ValueRef::new(c, 0));
    }
    let sum = b.add_node(sum).unwrap();
    b.mark_output(ValueRef::new(sum, 0)).unwrap();
    (Arc::new(b.finalize().unwrap()), sum)
}

fn total(width: usize) -> u64 {
    (1..=width as u64).sum()
}

#[test]
fn deferred_nodes_complete_in_random_order_from_another_thread() {
    let width = 24;
    for (threads, seed) in [(0, 1), (1, 2), (2, 3), (3, 4), (2, 5)] {
        let device = Device::new(5, seed, 100);
        let handle = Arc::new(device.handle());
        let (g, sum) = graph(width, &handle, None);
        let pool = Arc::new(Pool::default());
        let executor = (threads > 0).then(|| Executor::new(threads).unwrap());
        for _ in 0..3 {
            let options = RunOptions {
                executor: executor.as_ref(),
                ..RunOptions::default()
            };
            let r = graphsched::run(&g, &pool, &options).unwrap();
            let got = u64::from_ne_bytes(r.output_bytes(ValueRef::new(sum, 0)).unwrap().try_into().unwrap());
            assert_eq!(got, total(width), "{threads} threads");
            assert_eq!(r.stats().nodes_run, 2 * width as u64 + 1);
        }
        assert_eq!(device.completed.load(Ordering::SeqCst), 3 * width);
        if threads > 0 {
            // The threads did not wait at each node: several were on the device at once.
            assert!(device.most_in_flight.load(Ordering::SeqCst) > 1, "{threads} threads");
        } else {
            assert_eq!(
                device.most_in_flight.load(Ordering::SeqCst),
                1,
                "without an executor the run waits"
            );
        }
        assert_eq!(pool.stats().live_bytes, 0, "every buffer back");
    }
}

#[test]
fn a_thread_runs_other_nodes_while_a_node_is_pending() {
    // One thread in all: "wait" defers, and its completion comes only from "signal", a node
    // with no path to it, which the same thread must run meanwhile.
    let slot: Arc<Mutex<Option<Completion>>> = Arc::new(Mutex::new(None));
    let mut b = GraphBuilder::new();
    let (keep, take) = (slot.clone(), slot.clone());
    let wait = b
        .add_node(
            NodeDesc::new(
                "wait",
                "Wait",
                Box::new(move |ctx| {
                    *keep.lock().unwrap() = Some(ctx.defer().map_err(|e| e.to_string())?);
                    Ok(())
                }),
            )
            .output(16)
            // Far above any thread time a preempted kernel could show (`work_ns` is at most
            // the estimate), and above "signal"'s, so that "wait" runs first.
            .estimate_ns(1_000_000_000),
        )
        .unwrap();
    let signal = b
        .add_node(
            NodeDesc::new(
                "signal",
                "Signal",
                Box::new(move |_| {
                    let c = take.lock().unwrap().take().ok_or("signal ran before wait")?;
                    // "wait" holds its thread for microseconds: its latency, measured to this
                    // completion, must be well above that for the run to learn that it defers,
                    // even when a loaded machine preempts the kernel for a while.
                    std::thread::sleep(std::time::Duration::from_millis(20));
                    c.complete(Ok(()));
                    Ok(())
                }),
            )
            .output(16)
            .estimate_ns(10),
        )
        .unwrap();
    b.mark_output(ValueRef::new(wait, 0)).unwrap();
    b.mark_output(ValueRef::new(signal, 0)).unwrap();
    let g = Arc::new(b.finalize().unwrap());
    let executor = Executor::new(1).unwrap();
    let options = RunOptions {
        executor: Some(&executor),
        trace: true,
        ..RunOptions::default()
    };
    let r = graphsched::run(&g, &Arc::new(Pool::default()), &options).unwrap();
    assert_eq!(r.stats().nodes_run, 2);
    let events = r.events();
    let w = events.iter().find(|e| e.node == wait).unwrap();
    let s = events.iter().find(|e| e.node == signal).unwrap();
    assert!(
        w.completed_ns >= s.start_ns && w.completed_ns >= w.end_ns,
        "{w:?} {s:?}"
    );
    assert_eq!(s.completed_ns, 0, "signal ended with its kernel");
    // The run taught the scheduler how each spends its time.
    assert_eq!(g.node_kind(wait), graphsched::sched::NodeKind::Deferring);
    assert_eq!(g.node_kind(signal), graphsched::sched::NodeKind::Serial);
    assert!(
        g.work_ns(wait) < w.completed_ns - w.start_ns,
        "its thread time is less than its latency"
    );
    let json = trace::chrome_trace(&g, events);
    assert!(
        json.contains(r#""ph":"b""#) && json.contains(r#""cat":"pending""#),
        "{json}"
    );
}

#[test]
fn a_completion_before_the_kernel_returns_ends_the_node_at_once() {
    let mut b = GraphBuilder::new();
    let n = b
        .add_node(
            NodeDesc::new(
                "now",
                "Now",
                Box::new(|ctx| {
                    ctx.output_bytes(0).unwrap().fill(7);
                    let c = ctx.defer().map_err(|e| e.to_string())?;
                    assert!(ctx.defer().is_err(), "a second defer is refused");
                    c.complete(Ok(()));
                    Ok(())
                }),
            )
            .output(32),
        )
        .unwrap();
    b.mark_output(ValueRef::new(n, 0)).unwrap();
    let g = Arc::new(b.finalize().unwrap());
    let pool = Arc::new(Pool::default());
    for threads in [0, 2] {
        let executor = (threads > 0).then(|| Executor::new(threads).unwrap());
        let options = RunOptions {
            executor: executor.as_ref(),
            trace: true,
            ..RunOptions::default()
        };
        let r = graphsched::run(&g, &pool, &options).unwrap();
        assert_eq!(r.output_bytes(ValueRef::new(n, 0)).unwrap(), [7; 32]);
        let e = r.events()[0];
        assert!(e.completed_ns >= e.end_ns && e.completed_ns > 0, "{e:?}");
    }
}

#[test]
fn failed_and_dropped_completions_fail_the_run_and_every_buffer_comes_back() {
    let pool = Arc::new(Pool::default());
    let executor = Executor::new(2).unwrap();
    let device = Device::new(3, 9, 100);
    let handle = Arc::new(device.handle());
    let (g, _) = graph(8, &handle, Some(5));
    for executor in [None, Some(&executor)] {
        let options = RunOptions {
            executor,
            ..RunOptions::default()
        };
        let e = graphsched::run(&g, &pool, &options).err().expect("the run fails");
        assert_eq!(e.kind(), ErrorKind::KernelFailed);
        assert!(
            e.message().contains("'fill5'") && e.message().contains("the device reported a fault"),
            "{e}"
        );
        assert_eq!(pool.stats().live_bytes, 0);
    }
    // A completion dropped without a word: the node fails rather than hangs.
    let mut b = GraphBuilder::new();
    let n = b
        .add_node(
            NodeDesc::new(
                "lost",
                "Lost",
                Box::new(|ctx| {
                    let c = ctx.defer().map_err(|e| e.to_string())?;
                    std::thread::spawn(move || drop(c)).join().unwrap();
                    Ok(())
                }),
            )
            .output(64),
        )
        .unwrap();
    b.mark_output(ValueRef::new(n, 0)).unwrap();
    let g = Arc::new(b.finalize().unwrap());
    let e = graphsched::run(&g, &pool, &RunOptions::default())
        .err()
        .expect("the run fails");
    assert!(e.message().contains("'lost'") && e.message().contains("dropped"), "{e}");
    assert_eq!(pool.stats().live_bytes, 0);
}

#[test]
fn a_kernel_error_after_deferring_still_waits_for_the_completion() {
    let completed = Arc::new(AtomicBool::new(false));
    let done = completed.clone();
    let mut b = GraphBuilder::new();
    let n = b
        .add_node(
            NodeDesc::new(
                "broken",
                "Broken",
                Box::new(move |ctx| {
                    let out = ctx.output_bytes(0).unwrap();
                    let (ptr, len) = (out.as_mut_ptr() as usize, out.len());
                    let c = ctx.defer().map_err(|e| e.to_string())?;
                    let done = done.clone();
                    std::thread::spawn(move || {
                        std::thread::sleep(Duration::from_millis(20));
                        // SAFETY: the node's output stays allocated until its completion.
                        unsafe { std::ptr::write_bytes(ptr as *mut u8, 1, len) };
                        done.store(true, Ordering::SeqCst);
                        c.complete(Ok(()));
                    });
                    Err("launch half failed".into())
                }),
            )
            .output(4096),
        )
        .unwrap();
    b.mark_output(ValueRef::new(n, 0)).unwrap();
    let g = Arc::new(b.finalize().unwrap());
    let pool = Arc::new(Pool::default());
    let executor = Executor::new(2).unwrap();
    for executor in [None, Some(&executor)] {
        completed.store(false, Ordering::SeqCst);
        let options = RunOptions {
            executor,
            ..RunOptions::default()
        };
        let e = graphsched::run(&g, &pool, &options).err().expect("the run fails");
        assert!(e.message().contains("launch half failed"), "{e}");
        assert!(
            completed.load(Ordering::SeqCst),
            "the run returned before the work completed"
        );
        assert_eq!(pool.stats().live_bytes, 0);
    }
}

#[test]
fn a_cancelled_run_waits_for_its_pending_nodes_then_gives_every_buffer_back() {
    let device = Device::new(4, 11, 100);
    let handle = Arc::new(device.handle());
    let (g, _) = graph(16, &handle, None);
    let pool = Arc::new(Pool::default());
    let executor = Executor::new(2).unwrap();
    let token = CancelToken::new();
    // Cancelled as the first node starts, after the run's check: that node defers, and its
    // completion comes from the device after the run stopped.
    struct CancelOnStart<'a>(&'a CancelToken);
    impl graphsched::Observer for CancelOnStart<'_> {
        fn node_started(&self, _: &graphsched::NodeObservation) {
            self.0.cancel();
        }
        fn node_finished(&self, _: &graphsched::NodeObservation) {}
    }
    let observer = CancelOnStart(&token);
    let options = RunOptions {
        executor: Some(&executor),
        cancel: Some(&token),
        observer: Some(&observer),
        ..RunOptions::default()
    };
    let watcher = graphsched::run(&g, &pool, &options);
    let e = watcher.err().expect("the run fails");
    assert_eq!(e.kind(), ErrorKind::Cancelled);
    assert_eq!(
        handle.in_flight.load(Ordering::SeqCst),
        0,
        "returned with work on the device"
    );
    assert_eq!(pool.stats().live_bytes, 0);
    assert!(token.reset());
    let options = RunOptions {
        executor: Some(&executor),
        cancel: Some(&token),
        ..RunOptions::default()
    };
    graphsched::run(&g, &pool, &options).expect("runs again");
}

#[test]
fn the_window_counts_pending_nodes_and_memory_admission_covers_them() {
    let width = 12;
    for (window, limit) in [(2, 0), (3, 0), (0, 4 * 256 + 12 * 8)] {
        let device = Device::new(8, 21, 100);
        let handle = Arc::new(device.handle());
        let (g, sum) = graph(width, &handle, None);
        let executor = Executor::new(3).unwrap();
        let options = RunOptions {
            executor: Some(&executor),
            window,
            memory_limit_bytes: limit,
            ..RunOptions::default()
        };
        let r = graphsched::run(&g, &Arc::new(Pool::default()), &options).unwrap();
        let got = u64::from_ne_bytes(r.output_bytes(ValueRef::new(sum, 0)).unwrap().try_into().unwrap());
        assert_eq!(got, total(width));
        let most = device.most_in_flight.load(Ordering::SeqCst);
        if window > 0 {
            assert!(most <= window, "window {window}: {most} nodes pending at once");
        }
        if limit > 0 {
            assert!(
                r.stats().peak_live_bytes <= limit,
                "{} > {limit}",
                r.stats().peak_live_bytes
            );
            assert!(
                most <= 4,
                "{most} fills of 256 bytes pending under a limit that holds 4"
            );
        }
    }
}

#[test]
fn a_deadline_passed_while_nodes_are_pending_waits_for_them() {
    // The device holds each piece of work until 8 are in or 2 ms passed, then takes 4-16 ms per
    // piece: 16 nodes take over 100 ms, and the deadline, 30 ms after the run starts, passes
    // meanwhile. (A deadline of 500 us once passed on a loaded machine before any node ran.)
    let device = Device::new(8, 31, 4000);
    let handle = Arc::new(device.handle());
    let (g, _) = graph(16, &handle, None);
    let pool = Arc::new(Pool::default());
    let executor = Executor::new(2).unwrap();
    for executor in [None, Some(&executor)] {
        let options = RunOptions {
            executor,
            deadline: Some(std::time::Instant::now() + Duration::from_millis(30)),
            ..RunOptions::default()
        };
        let completed_before = device.completed.load(Ordering::SeqCst);
        let e = graphsched::run(&g, &pool, &options)
            .err()
            .expect("the run passes its deadline");
        assert_eq!(e.kind(), ErrorKind::DeadlineExceeded);
        assert_eq!(
            handle.in_flight.load(Ordering::SeqCst),
            0,
            "returned with work on the device"
        );
        assert_eq!(pool.stats().live_bytes, 0);
        let completed = device.completed.load(Ordering::SeqCst) - completed_before;
        assert!(completed >= 1, "no node was pending when the deadline passed");
    }
}
