//! Running a graph: options, the two drivers (the calling thread alone in topological order,
//! or an executor), and the result.

pub(in crate::exec) mod auto_plan;
pub(in crate::exec) mod bind;
pub(in crate::exec) mod budget;
mod options;
pub(in crate::exec) mod outcome;
mod result;
pub(in crate::exec) mod stopwatch;
#[cfg(test)]
mod tests;

pub use options::{CancelToken, InputBinding, RunOptions, INPUT_BINDING_TENSOR_OFFSET};
pub use result::RunResult;

use std::sync::atomic::Ordering;
use std::sync::Arc;
use std::time::Instant;

use crate::error::{err, ErrorKind, Result};
use crate::exec::run::budget::{Budget, Entered, Entry, Start};
use crate::exec::run::outcome::{Outcome, RunStats};
use crate::exec::run::stopwatch::Stopwatch;
use crate::exec::state::annex::Lent;
use crate::exec::state::{Queued, RunState, StateOptions};
use crate::exec::workers::Executor;
use crate::graph::Graph;
use crate::plan::{Mode, Plan};
use crate::pool::Pool;
use crate::sched::Priorities;

/// Runs `graph` once. On failure every buffer the run took is back in the pool before this
/// returns, exactly one error is reported (the first), and the graph can run again.
pub fn run(graph: &Arc<Graph>, pool: &Arc<Pool>, options: &RunOptions<'_>) -> Result<RunResult> {
    if graph.has_dynamic_inputs() {
        // Runs go on the graph made for these input sizes (`graph/specialize.rs`).
        if options.plan.is_some() {
            // `Plan::new` refuses such a graph; a plan of another graph gets the same answer.
            crate::plan::refuse_dynamic_inputs(graph)?;
        }
        let sizes = crate::exec::run::bind::dynamic_sizes(graph, options.inputs)?;
        return run(&graph.specialize(&sizes)?, pool, options);
    }
    // Under the executor's memory budget the run reserves its own bound, and keeps within it
    // (`exec::run::budget`); the entry is released when the run returns, whichever way. A run
    // without a plan is set up first and enters then: if it must wait, the run that makes room
    // starts it on the executor's threads (`Budget::enter_prepared`). One with a plan takes its
    // arena as it is set up, so it enters first, waiting parked.
    let budget = options.executor.map(|e| &e.shared().budget).filter(|b| b.is_set());
    let prepared = budget.is_some() && options.plan.is_none();
    let urgent = options.priority == crate::sched::RunPriority::High;
    // Declared before the state, so that it drops after the state's leftovers (on a failure)
    // have gone back to the pool; a prepared run's entry is put here once it has entered.
    let mut entry = match (budget, options.executor) {
        (Some(budget), Some(e)) if !prepared => budget.enter(
            || reservation(graph, options),
            || graph.describe(),
            urgent,
            &**e.shared(),
        )?,
        _ => None,
    };
    let need = prepared.then(|| reservation(graph, options));
    let asked = *options;
    let mut options = *options;
    if let Some(bytes) = entry.as_ref().map(|e| e.bytes()).or(need) {
        if options.plan.is_none() {
            options.memory_limit_bytes = bytes;
        }
    }
    let options = &options;
    let stopwatch = (!options.no_wall_time).then(Stopwatch::start);
    // Traces and observers count times from the run's start; no other run reads the clock for it.
    let started = (options.trace || options.observer.is_some()).then(Instant::now);
    if let Some(plan) = options.plan {
        plan.check_graph(graph)?;
        if matches!(plan.mode(), Mode::Sequential(_)) && options.executor.is_some() {
            return err(
                ErrorKind::InvalidArgument,
                "a sequential plan holds only for its own order: run it without an executor, or plan in parallel-safe mode",
            );
        }
        if plan.scheduled().is_some() && options.memory_limit_bytes > 0 {
            // Admission orders nodes by the graph's edges alone; the plan's arena already fixes
            // what the run holds.
            return err(
                ErrorKind::InvalidArgument,
                "a scheduled plan orders nodes beyond the graph's edges, which memory admission does not know: \
                 run it without a memory limit (its arena fixes the run's memory), or plan in parallel-safe mode",
            );
        }
    }
    let mut arrays = Lent::take(graph);
    let (graph_prio, samples) = arrays.priorities(graph);
    // A run that may queue in the budget goes on the threads, where whoever makes room starts it
    // (a plan's run, which waits parked, does not: a limit the budget set keeps it on its caller
    // alone if it would be there anyway, in the order admission's guarantee is about).
    let executor = options
        .executor
        .filter(|e| prepared || spreads(graph, &graph_prio, e, &asked));
    let plan = match options.plan {
        None if options.auto_plan && options.memory_limit_bytes == 0 => {
            crate::exec::run::auto_plan::auto_plan(graph, executor.map(Executor::threads))
        }
        caller => caller,
    };
    let os_allocs_before = pool.os_allocs();
    // Start from a settled pool, so that repeated runs make the same placement choices. Not
    // from the other threads' heaps while other runs are inside the budget or queue there:
    // those run at once, and a settle would take their threads' blocks from under them with a
    // process-wide barrier each time (cls served at 8 clients: 3% of the CPU in the kernel's
    // barrier alone), holding the heaps' locks while it does: their owners, inside kernels
    // that take scratch from the pool, wait, and on a machine with more threads than cores
    // they wait for a visitor the OS has preempted (cls served at 4 clients on 2 cores: ten
    // yields a request).
    let own = entry.as_ref().map_or(0, |e| e.bytes());
    pool.settle_from(!budget.is_some_and(|b| b.others_inside(own)));
    let threads = executor.map_or(1, Executor::threads);
    arrays.fit_caches(crate::exec::memory::cache::cache_count(
        pool,
        options.memory_limit_bytes,
        threads,
    ));
    arrays.open_reserve(pool, executor.is_none());
    // Large values go where a placement of the graph's lifetimes puts them, from free space
    // the pool has now (`exec::memory::hints`); a caller's plan places them itself.
    let executor_hints;
    let hints = match (plan, executor) {
        (Some(_), _) => None,
        (None, None) => crate::exec::memory::hints::sequential(graph),
        (None, Some(e)) => {
            executor_hints = crate::exec::memory::hints::parallel(graph, e.threads(), &graph_prio);
            executor_hints.as_deref()
        }
    };
    // A scheduled plan's runs follow its priorities: the graph's, with its ordering constraints;
    // so do runs on hints along a schedule, unless a memory limit's admission is in charge.
    let constrained = match (hints, options.memory_limit_bytes) {
        (Some(h), 0) => h.priorities(&graph_prio),
        _ => None,
    };
    let prio = match (plan.and_then(Plan::scheduled), constrained) {
        (Some(s), _) => (s.priorities.clone(), None),
        (None, Some(p)) => (p, None),
        _ => (graph_prio, Some(samples)),
    };
    let hints = hints.and_then(|h| Some((h, pool.room_for(h.bytes as usize)?)));
    let templates = crate::exec::state::annex::templates(graph);
    arrays.reset(&prio.0, threads > 1);
    // A block, so that the state drops where it lies (`drop(state)` moved it whole first), and
    // before the arrays it borrows: after a failure they go back to the graph empty.
    let ((nodes_run, peak_live_bytes, acquires), busy_ns, events, arena, prio, (waited_ns, queued_ns)) = {
        let mut state = RunState::new(
            graph,
            pool,
            &arrays,
            StateOptions {
                memory_limit: options.memory_limit_bytes,
                window: crate::sched::window_cap(options.window).map(|w| w.min(u32::MAX as usize) as u32),
                learn: !options.freeze_estimates,
                policy: options.policy,
                priority: options.priority,
                parallel: executor.is_some(),
                trace: options.trace,
                plan,
                cancel: options.cancel,
                deadline: options.deadline,
                hints,
                context: crate::exec::RunContext {
                    data: options.data,
                    pool,
                    executor: options.executor,
                },
                observer: options.observer,
                started,
                prio,
                templates,
            },
        );
        state.bind(options.inputs)?;
        state.take_arena_from_pool()?;
        let mut waited_ns = entry.as_ref().map_or(0, |e| e.waited_ns);
        let mut queued_ns = 0;
        match (executor, budget.zip(need)) {
            (Some(executor), Some((budget, need))) if !state.prio.roots.is_empty() => {
                let (entered, queued) = enter_and_drive(executor, budget, need, urgent, &mut state)?;
                entry = entered;
                if let Some(waited) = queued {
                    (waited_ns, queued_ns) = (waited, waited);
                }
            }
            (Some(executor), _) => executor.drive(&state, &state.prio.roots),
            (None, _) => {
                crate::exec::sequential::in_order(&state, plan.map_or(state.sequential_order(), |p| p.order()))
            }
        }
        state.flush_caches();
        // Dropping `state` on failure returns every buffer it holds.
        if let Some(e) = state.take_error() {
            return Err(e);
        }
        let (nodes_run, _, _) = state.stats();
        let operators = graph.node_count() - graph.graph_inputs().len();
        if nodes_run as usize != operators {
            // A run that ends early without an error would hand back missing outputs: never.
            return err(
                ErrorKind::KernelPanicked,
                format!(
                    "internal error: the run ended with {} of {operators} nodes executed",
                    nodes_run
                ),
            );
        }
        state.end_bindings()?;
        let (stats, busy_ns, events, arena) = (state.stats(), state.busy_ns(), state.take_events(), state.take_arena());
        (stats, busy_ns, events, arena, state.end_run(), (waited_ns, queued_ns))
    };
    let mut arrays = arrays.keep();
    arrays.prio = prio;
    arrays.outcome = Outcome {
        stats: RunStats {
            // A queued run's wait is not its time.
            wall_ns: stopwatch.map_or(0, |s| s.elapsed_ns().saturating_sub(queued_ns)),
            nodes_run,
            peak_live_bytes,
            acquires,
            os_allocs: pool.os_allocs() - os_allocs_before,
            threads: threads as u64,
            busy_ns,
        },
        events,
        traced: options.trace,
        arena,
        budget_wait_ns: waited_ns,
    };
    // The reservation goes back once the state and its leftovers are gone.
    drop(entry);
    Ok(RunResult::new(graph.clone(), pool.clone(), arrays))
}

/// Enters a run set up under its executor's budget and drives it: on its caller if it enters at
/// once, else queued, to be started on the executor's threads by whoever makes room while the
/// caller waits (`Budget::enter_prepared`). Returns the entry, to hold until the run's leftovers
/// are back in the pool, and if the run was queued, how long it waited. Out of line: runs
/// without a budget do not carry it.
#[inline(never)]
fn enter_and_drive<'b>(
    executor: &'b Executor,
    budget: &'b Budget,
    need: u64,
    urgent: bool,
    state: &mut RunState<'_>,
) -> Result<(Option<Entry<'b>>, Option<u64>)> {
    // Set up to be started by another thread: counted, and told whom to wake.
    state.active.store(state.prio.roots.len(), Ordering::Relaxed);
    state.queued = Some(Queued {
        caller: std::thread::current(),
        reserved: need.into(),
        waited_ns: 0.into(),
    });
    // Shared from here with whoever starts it, through this reference only.
    let shared: &RunState<'_> = state;
    let start = Start {
        run: (shared as *const RunState<'_>).cast(),
        queued: Instant::now(),
        refused_under: None,
    };
    // With the executor's threads at a lower OS priority, a normal run goes to them.
    let to_threads = !urgent && executor.background_nice() > 0;
    match budget.enter_prepared(
        need,
        || shared.graph.describe(),
        urgent,
        to_threads,
        start,
        &**executor.shared(),
    )? {
        Entered::Queued(mut entry) => {
            executor.wait_queued(shared);
            let q = shared.queued.as_ref().expect("a queued run");
            // What its last task did not give back (a failed run's) goes back when the entry
            // drops, after the state's leftovers.
            entry.give_back_on_drop(q.reserved.load(Ordering::Relaxed));
            Ok((Some(entry), Some(q.waited_ns.load(Ordering::Relaxed))))
        }
        entered => {
            // It entered at once (or the budget went): nobody else has it, and its
            // caller drives it.
            state.queued = None;
            executor.drive(state, &state.prio.roots);
            Ok((
                match entered {
                    Entered::Now(entry) => Some(entry),
                    _ => None,
                },
                None,
            ))
        }
    }
}

/// What a run reserves of its executor's memory budget: its plan's arena, or its own memory
/// limit, or else the max-live bound of the order its admission keeps safe (at which it always
/// completes).
fn reservation(graph: &Graph, options: &RunOptions<'_>) -> u64 {
    match (options.plan, options.memory_limit_bytes) {
        (Some(plan), _) => plan.arena_bytes(),
        (None, 0) => graph.lowest_live_order().peak,
        (None, limit) => limit,
    }
}

/// Whether a run of `graph` given `executor` goes on its threads, rather than on its caller
/// alone, as a run without one. Always under a memory limit (whose admission differs without an
/// executor) or when the caller insists (`RunOptions::force_executor`). Otherwise not for a graph
/// that can never have two nodes ready at once (a chain): the threads could add nothing but
/// their queues. Nor for one whose kernels, as estimated, are too short to pay for the threads
/// (`Priorities::spreading_pays`). Either way its kernels still reach the executor through
/// their context.
fn spreads(graph: &Graph, prio: &Priorities, executor: &Executor, options: &RunOptions<'_>) -> bool {
    options.memory_limit_bytes > 0
        || options.force_executor
        || (!crate::exec::state::annex::is_chain(graph) && prio.spreading_pays(executor.threads()))
}
