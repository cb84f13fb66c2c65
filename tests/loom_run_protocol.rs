//! A loom model of the executor's run-completion protocol (`src/exec/workers/`,
//! `src/exec/state/`, `src/sched/admission.rs`), checked over every interleaving of two threads
//! up to a preemption bound, the way crossbeam checks its deque. The model is in `loom/mod.rs`
//! (the run), `loom/workers.rs` (the queue, the task path, `drive`) and `loom/admission.rs`, each
//! part beside the real function it mirrors; this file holds the graphs and the checks.
//!
//! What is modelled:
//! - `active`, the count of a run's queued and running tasks (`RunState::active`). A task counts
//!   and queues the waiting nodes a release admitted and the successors it made ready before it
//!   leaves the count itself (`Shared::run_chain`); the caller drives the run until the count is 0
//!   (`Executor::drive`), then drops the run.
//! - The last-task handover at the end of `Shared::run_task`: a task that reads the count at 1
//!   first resolves memory stalls (`RunState::resolve_stall`: readmit what fits, or fail the run
//!   with a memory-limit error). If that admitted nodes, it counts and queues them and loads the
//!   count afresh: only a check that admitted nothing, while the task was alone, lets it take the
//!   count from 1 to 0. (Reading 1 again after an admitting check is not enough: the admitted
//!   tasks may have run, left a node waiting and finished meanwhile; `Mutation::StaleReload`.)
//! - Admission under a memory limit (`RunState::admit`, `try_reserve`, `readmit`): a node that may
//!   not start goes on `waiting` under the gate mutex. A finishing node frees the values nobody
//!   reads any more, each lowering `live` (`drop_value`), and passes those that held memory to
//!   `readmit` (`end_node_ok`), which under the same mutex first tells the rule of each, then
//!   re-examines `waiting`; a stall check is a `readmit` with none. The rule is
//!   `sched::Admission` (in `loom/admission.rs`) with a plain array for its segment tree:
//!   `try_admit` is the plain fit `live + need <= limit` and, at a limit at or above the peak of σ
//!   (the safe completion order, given with each graph), the banker's check of σ's slack for a
//!   node that starts ahead of σ's frontier, which then takes its need from the slack of every
//!   step before its own and is marked ahead; `release` gives a freed value's static bytes back
//!   to those steps if its producer started ahead.
//! - Nodes (`RunState::execute`, `run_kernel`, `end_node_ok`, `drop_value`): each makes one value
//!   of a static size, held in a slot written by its producer and emptied by its last reader
//!   (reference and `pending` counts with the real orderings: the producer sets its value's count
//!   of readers as it ends, before it makes them ready, `Mutation::CountReadersLate`); the
//!   continuation rule keeps the
//!   first node made ready and queues the rest (`RunState::continuation`, all nodes in one band).
//!   A node's rank (the order of `waiting`) is its index.
//! - Threads: the caller (loom's main thread) and one worker (`Shared::worker_main`), as on an
//!   `Executor::new(2)`.
//! - Pending nodes (`src/exec/node/pending.rs`): a deferring node's kernel hands its work to "the
//!   device", a queue that whichever thread finds no task serves, so that the completion may come
//!   from the other thread before the kernel's thread arrives, or after. The kernel's thread hands
//!   the run its counts, then arrives; the device writes the node's output, then arrives; the last
//!   arrival ends the node, the device's by queueing an `END` task that takes over the node's
//!   place in `active` (`Shared::push_finish`, `RunState::end_pending_node`).
//!
//! Abstracted away: the per-band deques, shared queues and stealing (one mutex-protected FIFO queue:
//! any thread may take any queued task); sleeping and waking (`Sleep`: `yield_now`); the window
//! (`Window::enter`, `leave`, `Shared::restart`: a deferred task stays counted in `active` and
//! keeps its `reserved` flag, but neither that nor the window's own protocol is modelled); in-place
//! outputs (their takeover lowers `live` and puts the input on `freed`, so it is one more release),
//! dynamic outputs, static plans, block caches, cancellation, deadlines, kernel failures, the
//! `catch_unwind` backstops and the pool itself (a ghost count of the bytes it has handed out
//! stands in for it). Ghost state, in `std` atomics (which loom does not schedule on) or in plain
//! fields under a mutex already held, observes; it adds no interleavings.
//!
//! Checked in every interleaving: each node runs at most once, after its producers (loom's
//! `UnsafeCell` flags a slot read that does not happen after its write), and exactly once unless
//! the run failed; the pool's bytes and `live` never exceed the limit; a run never ends with a node
//! waiting and no error; it fails only with a memory-limit error, and never where the banker's rule
//! guarantees completion; the rule's state stays safe, no step at or past σ's frontier with
//! negative slack (checked at every change to the slack: the invariant that guarantees completion);
//! `active` never rises from 0 and reaches 0 exactly once; once it has, no task touches the run
//! (the caller's drop writes a loom `UnsafeCell` that every access to the run reads).
//!
//! And "a node never waits for a release that already happened", which the handover would otherwise
//! hide by readmitting the node late: a node goes on `waiting` only while the rule still refuses it
//! on the bytes (and the slack) whose release has been followed by a readmit; under the plain fit a
//! stall check admits nothing. Under the banker's rule a stall check can admit nodes, with no wake
//! lost: an admission that moves σ's frontier (no release) can make a waiting node admissible, and
//! so can an admission later in the same `readmit` pass; only the next release or stall check looks
//! again. The model counts those (`late`). Slack a release gives back is not among them: `readmit`
//! tells the rule before it looks at `waiting`.
//!
//! The mutation tests break one step each and check that loom finds the violation.

#[path = "loom/mod.rs"]
mod model;

use std::panic::{catch_unwind, AssertUnwindSafe};
use std::sync::atomic::{AtomicUsize, Ordering::SeqCst};
use std::sync::Arc;
use std::time::Instant;

use model::{execution, Mutation, MEMORY_LIMIT};

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
    /// Nodes whose kernels defer their end to the device thread (`KernelCtx::defer`).
    deferred: Vec<bool>,
    /// Per node: its position in σ, the safe completion order of the banker's rule (the real
    /// run's `LiveOrder::lowest`; here given with the graph).
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
        let topological = (0..n).all(|v| inputs[v].iter().all(|&p| position[p] < position[v]));
        assert!(order.len() == n && topological, "σ is a topological order");
        // `graph::memory::lifetime`: a value lives from its producer's step to its last reader's
        // (to the end for a graph output).
        let last = |v: usize| match output[v] {
            true => n,
            false => successors[v].iter().map(|&c| position[c]).max().unwrap_or(position[v]),
        };
        let live_sigma: Vec<u64> = (0..n)
            .map(|k| {
                (0..n)
                    .filter(|&v| position[v] <= k && k <= last(v))
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
            deferred: vec![false; n],
            position,
            live_sigma,
            peak,
        }
    }

    /// The same graph, with these nodes' kernels deferring their end.
    fn deferring(mut self, nodes: &[usize]) -> Spec {
        for &v in nodes {
            self.deferred[v] = true;
        }
        self
    }

    /// `Admission::guaranteed`: the banker's rule applies, and the run must complete.
    fn guaranteed(&self) -> bool {
        self.limit > 0 && self.limit >= self.peak
    }
}

/// What every interleaving of a model must end in.
#[derive(Clone, Copy, PartialEq, Eq, Debug)]
enum Expect {
    /// The run completes.
    Complete,
    /// The run fails with a memory-limit error: no order fits.
    Fail,
}

/// Counts over all the interleavings of one check.
#[derive(Default)]
struct Tally {
    executions: AtomicUsize,
    failed: AtomicUsize,
    waited: AtomicUsize,
    late: AtomicUsize,
    late_again: AtomicUsize,
    returned: AtomicUsize,
    by_worker: AtomicUsize,
}

/// Checks `spec` under `mutation` in every interleaving (up to `preemptions` preemptions).
fn check(spec: Spec, mutation: Mutation, expect: Expect, preemptions: usize) -> Arc<Tally> {
    let tally = Arc::new(Tally::default());
    check_counting(spec, mutation, expect, preemptions, tally.clone());
    tally
}

/// `check`, counting into `tally` as it goes (so that a check that panics has counted too).
fn check_counting(spec: Spec, mutation: Mutation, expect: Expect, preemptions: usize, tally: Arc<Tally>) {
    let spec = Arc::new(spec);
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
        let end = execution(&spec, mutation);
        if end.failed {
            assert_eq!(end.error, Some(MEMORY_LIMIT));
        } else {
            let waiting = &end.waiting;
            assert!(
                waiting.is_empty(),
                "lost wake-up: the run ended with node(s) {waiting:?} waiting for memory and no error"
            );
            if let Some(node) = end.ran.iter().position(|&r| r != 1) {
                panic!(
                    "the run ended without an error but node {node} ran {} times",
                    end.ran[node]
                );
            }
            assert_eq!(end.counted as usize, end.ran.len(), "nodes the threads counted");
            let outputs: u64 = (0..spec.bytes.len())
                .filter(|&v| spec.output[v])
                .map(|v| spec.bytes[v])
                .sum();
            assert_eq!(end.live, outputs, "live bytes after the run");
            assert_eq!(end.held, outputs, "pool bytes after the run");
        }
        if spec.guaranteed() {
            assert!(
                !end.failed,
                "the run failed although the banker's rule guarantees completion"
            );
        }
        match expect {
            Expect::Complete => assert!(!end.failed, "the run failed although it fits"),
            Expect::Fail => assert!(end.failed, "the run did not fail although no order fits the limit"),
        }
        counts.failed.fetch_add(end.failed as usize, SeqCst);
        counts.waited.fetch_add(end.waited as usize, SeqCst);
        counts.late.fetch_add(end.late, SeqCst);
        counts.late_again.fetch_add(end.late_again, SeqCst);
        counts.returned.fetch_add(end.returned, SeqCst);
        counts.by_worker.fetch_add(end.by_worker, SeqCst);
    });
    eprintln!(
        "{mutation:?}: {} interleavings in {:.2?}: {} failed, {} with a node waiting for memory, {} nodes \
         admitted late by a stall check, {} of them by a task's second check, {} releases that gave slack \
         back, {} nodes run by the worker",
        tally.executions.load(SeqCst),
        started.elapsed(),
        tally.failed.load(SeqCst),
        tally.waited.load(SeqCst),
        tally.late.load(SeqCst),
        tally.late_again.load(SeqCst),
        tally.returned.load(SeqCst),
        tally.by_worker.load(SeqCst),
    );
}

/// Runs a mutated model, which must fail; returns loom's report.
fn violation(spec: Spec, mutation: Mutation, expect: Expect, preemptions: usize) -> String {
    let tally = Arc::new(Tally::default());
    let counts = tally.clone();
    let started = Instant::now();
    let outcome = catch_unwind(AssertUnwindSafe(|| {
        check_counting(spec, mutation, expect, preemptions, counts)
    }));
    let Err(payload) = outcome else {
        panic!("loom found no violation with the mutation {mutation:?}")
    };
    let message = payload
        .downcast_ref::<String>()
        .cloned()
        .or_else(|| payload.downcast_ref::<&str>().map(|s| s.to_string()))
        .unwrap_or_default();
    eprintln!(
        "{mutation:?}: found in interleaving {} after {:.2?}: {message}",
        tally.executions.load(SeqCst),
        started.elapsed()
    );
    message
}

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
/// waits for the release by the first one's consumer. σ = P1, Q1, P2, Q2 peaks at 3.
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

/// A -> C, Z, W (nodes 0, 1, 2, 3): A makes 2 bytes that C reads, Z and C make nothing, W makes
/// 2 bytes (a graph output); limit 2, σ = A, Z, C, W (peak 2). W started ahead of the frontier
/// must wait for σ's steps before it; once Z starts, the frontier passes them and W may start,
/// but Z's start releases nothing, so no readmit sees it.
fn frontier_move() -> Spec {
    Spec::new(
        vec![vec![], vec![], vec![0], vec![]],
        vec![2, 0, 0, 2],
        vec![false, false, false, true],
        2,
        vec![0, 1, 2, 3],
    )
}

/// O1, O2, U, P, Z, Q1, Q2 (nodes 0 to 6), P -> Q1, P -> Q2, the others roots: O1 and O2 make
/// 2 bytes and 1 byte that nobody reads (dropped as they end), U and P 1 and 2 bytes (graph
/// outputs), Z, Q1 and Q2 nothing; limit 3, σ = Z, O1, P, O2, U, Q1, Q2 (live 0, 2, 2, 3, 3, 3,
/// 3). O1 and O2 may start first, ahead of σ's frontier (Z), and P and U then wait. Once both
/// values are freed, the slack O1 and O2 took is back, but σ itself holds P at O1's step (1 byte
/// of slack, P needs 2) and U at O2's (none) while the frontier is before them. Z starts and
/// moves the frontier to P, releasing nothing. If Z's task is the last, its stall check looks at
/// U first (more critical), still refused at O2's step, then admits P, whose start moves the
/// frontier past P and O2 to U. U now fits (3 bytes with P), but the pass is past it, and P, Q1
/// and Q2 release nothing (P is a graph output): only a second stall check admits U. (Were O1
/// and P 1 byte each under a limit of 2, O2's release would give back the slack P lacks and
/// admit it then, before Z.)
/// Without Q1 and Q2 the graph has the same race, but loom does not find it (not at a bound of 3
/// either): the worker's only accesses to `active` are then its leave's load and compare-exchange,
/// and loom's DPOR compares an access with the object's last access only, so the race of that
/// compare-exchange with the last task's reload, behind the worker's own load, gives it no point
/// to backtrack to. Queueing Q2 makes the worker add to `active` first.
fn handover_twice() -> Spec {
    Spec::new(
        vec![vec![], vec![], vec![], vec![], vec![], vec![3], vec![3]],
        vec![2, 1, 1, 2, 0, 0, 0],
        vec![false, false, true, true, false, false, false],
        3,
        vec![4, 0, 3, 1, 2, 5, 6],
    )
}

#[test]
fn diamond_without_limit_completes() {
    let tally = check(diamond(0), Mutation::None, Expect::Complete, 3);
    assert!(
        tally.by_worker.load(SeqCst) > 0,
        "the worker never ran a node: no concurrency explored"
    );
}

#[test]
fn diamond_under_a_limit_that_fits_completes() {
    check(diamond(4), Mutation::None, Expect::Complete, 3);
}

#[test]
fn two_chains_wait_and_readmit_and_complete() {
    let tally = check(two_chains(), Mutation::None, Expect::Complete, 3);
    assert!(
        tally.waited.load(SeqCst) > 0,
        "no interleaving made a producer wait: the readmit path was not explored"
    );
}

/// A producer that starts ahead of the other takes slack for its value; the consumer frees it
/// and the slack comes back (`Admission::release`).
#[test]
fn fan_in_that_fits_completes() {
    let tally = check(fan_in(5), Mutation::None, Expect::Complete, 3);
    assert!(tally.returned.load(SeqCst) > 0, "no release gave slack back");
}

#[test]
fn fan_in_over_the_limit_fails_and_never_hangs() {
    // Only one producer's 2 bytes fit under 3, and the consumer needs both.
    let tally = check(fan_in(3), Mutation::None, Expect::Fail, 3);
    assert_eq!(tally.failed.load(SeqCst), tally.executions.load(SeqCst));
}

/// Admitting both inputs first would deadlock; the banker's rule completes the run in every
/// interleaving (without its check, it does not: `mutation_no_slack_check_is_caught`).
#[test]
fn bankers_rule_avoids_the_greedy_trap() {
    let tally = check(greedy_trap(), Mutation::None, Expect::Complete, 3);
    assert!(tally.waited.load(SeqCst) > 0, "no interleaving made a node wait");
}

/// An admission that moves σ's frontier can make a waiting node admissible, and only a release
/// re-examines `waiting`: here the node starts only when the last task hands over. The run
/// completes; it is just later than it could be. (If admission comes to re-examine `waiting`
/// after a frontier move, `late` becomes 0.)
#[test]
fn bankers_frontier_move_is_seen_only_by_the_handover() {
    let tally = check(frontier_move(), Mutation::None, Expect::Complete, 3);
    assert!(tally.late.load(SeqCst) > 0, "no interleaving admitted a node late");
}

/// The handover's stall check admits P; when P and its successors have run before the task loads
/// the count again, the count is back at 1 and a second check admits U (`handover_twice`).
#[test]
fn handover_checks_again_after_its_admissions_ran() {
    let tally = check(handover_twice(), Mutation::None, Expect::Complete, 2);
    assert!(
        tally.late_again.load(SeqCst) > 0,
        "no interleaving admitted U at a second stall check"
    );
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
    let message = violation(diamond(0), Mutation::DecrementBeforePush, Expect::Complete, 3);
    assert!(ACTIVE_BROKEN.iter().any(|m| message.contains(m)), "{message}");
}

#[test]
fn mutation_count_after_push_is_caught() {
    // Only in an interleaving: a thief runs the queued node, and leaves `active`, before the
    // node was counted.
    let message = violation(diamond(0), Mutation::CountAfterPush, Expect::Complete, 3);
    assert!(ACTIVE_BROKEN.iter().any(|m| message.contains(m)), "{message}");
}

#[test]
fn mutation_count_readers_late_is_caught() {
    // Only in an interleaving: B runs on the other thread and counts A's output down before A
    // set its count, so the value is never freed (or freed twice).
    let message = violation(diamond(0), Mutation::CountReadersLate, Expect::Complete, 3);
    assert!(
        ["live bytes after the run", "dropped before it was made"]
            .iter()
            .any(|m| message.contains(m)),
        "{message}"
    );
}

#[test]
fn mutation_wait_outside_gate_lock_is_caught() {
    // Only in an interleaving: a release between the failed reservation and the wait. The
    // handover would still readmit the node, so only the model's wait check sees it.
    let message = violation(two_chains(), Mutation::WaitOutsideGateLock, Expect::Complete, 3);
    assert!(
        message.contains("went on `waiting` although the rule admits it now"),
        "{message}"
    );
}

#[test]
fn mutation_no_stall_handover_is_caught() {
    for spec in [fan_in(3), frontier_move()] {
        let expect = if spec.guaranteed() {
            Expect::Complete
        } else {
            Expect::Fail
        };
        let message = violation(spec, Mutation::NoStallHandover, expect, 3);
        assert!(message.contains("waiting for memory and no error"), "{message}");
    }
}

/// The handover before the fix (`Mutation::StaleReload`): only in an interleaving where the
/// worker runs P, Q1 and Q2 between the last task's push and its reload, which then reads 1.
#[test]
fn mutation_stale_reload_is_caught() {
    let message = violation(handover_twice(), Mutation::StaleReload, Expect::Complete, 2);
    assert!(
        message.contains("lost wake-up: the run ended with node(s) [2] waiting for memory and no error"),
        "{message}"
    );
}

#[test]
fn mutation_no_slack_check_is_caught() {
    let message = violation(greedy_trap(), Mutation::NoSlackCheck, Expect::Complete, 3);
    assert!(message.contains("the banker's rule guarantees completion"), "{message}");
}

/// X2 (2 bytes) passes a check that misses Y1's step, where σ leaves 1 byte of slack: the state
/// is unsafe as soon as X2 is admitted, before the run deadlocks.
#[test]
fn mutation_slack_check_short_is_caught() {
    let message = violation(greedy_trap(), Mutation::SlackCheckShort, Expect::Complete, 3);
    assert!(
        message.contains("unsafe admission state: slack -1 at step 1"),
        "{message}"
    );
}

/// Pending nodes (`src/exec/node/pending.rs`): the diamond's B and C defer to the device, which a
/// thread runs while it has no task: it writes the node's output and completes it, before or
/// after the node's kernel returns. Their consumer D reads the device's writes (loom's cells),
/// and the run ends once, after both completions.
#[test]
fn a_deferred_node_ends_once_after_its_completion() {
    check(diamond(0).deferring(&[1, 2]), Mutation::None, Expect::Complete, 3);
}

/// Under a limit, a pending node keeps its bytes until its consumers release them: the second
/// chain's producer waits for the release, as without deferring.
#[test]
fn a_deferred_producer_under_a_memory_limit_completes() {
    check(two_chains().deferring(&[0]), Mutation::None, Expect::Complete, 3);
}

#[test]
fn mutation_pending_leaves_active_is_caught() {
    let message = violation(
        diamond(0).deferring(&[1]),
        Mutation::PendingLeavesActive,
        Expect::Complete,
        3,
    );
    let broken = ["work is still on the device", "ran before its producer"];
    assert!(
        ACTIVE_BROKEN.iter().chain(&broken).any(|m| message.contains(m)),
        "{message}"
    );
}

/// The first review of pending nodes found this: the kernel's thread flushed its counts into the
/// run after its arrival, when the completion may already have ended the node and the run.
#[test]
fn mutation_flush_after_arrival_is_caught() {
    let message = violation(
        // C, the node the caller queues: the worker runs it, so the caller may end the run.
        diamond(0).deferring(&[2]),
        Mutation::FlushAfterArrival,
        Expect::Complete,
        3,
    );
    assert!(ACTIVE_BROKEN.iter().any(|m| message.contains(m)), "{message}");
}
