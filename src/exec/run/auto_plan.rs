//! Plans without asking (`RunOptions::auto_plan`): a graph makes its own static plan at its first
//! run that asks for one, and later runs use it, as ONNX Runtime's memory patterns do.
//!
//! Runs on their caller alone (without an executor, or given one they do not use: [`run`](mod@crate::exec::run))
//! get a sequential plan along the topological order, the order they follow. Runs on an
//! executor's threads get a scheduled plan for its thread count (`plan::Mode::Scheduled`):
//! at the max-live bound of the simulated schedule, and safe in any real order through its
//! ordering constraints. Runs on executors of other sizes share the plan made for the first one
//! (still safe; its schedule is just another's). A graph the planner refuses (a scheduled plan
//! past `MAX_PARALLEL_SAFE_NODES` nodes) runs on the dynamic pool, as without the option.
//!
//! Not the default: a planned run takes one arena for all its values, and a result keeps the
//! whole arena while it holds the graph outputs that live in it, where the dynamic pool gives
//! every other value back as soon as it dies.

use std::sync::OnceLock;

use crate::graph::Graph;
use crate::plan::{Mode, Order, Plan};

/// A graph's own plans, made at the first run that asks for each.
#[derive(Default)]
pub(in crate::exec) struct AutoPlans {
    sequential: OnceLock<Option<Plan>>,
    scheduled: OnceLock<Option<Plan>>,
}

/// The graph's own plan for runs without an executor (`threads` `None`) or on one of `threads`
/// threads; `None` if the planner refused the graph.
pub(in crate::exec) fn auto_plan(graph: &std::sync::Arc<Graph>, threads: Option<usize>) -> Option<&Plan> {
    let plans = crate::exec::state::annex::auto_plans(graph);
    let (cell, mode) = match threads {
        None => (&plans.sequential, Mode::Sequential(Order::Topological)),
        Some(threads) => (&plans.scheduled, Mode::Scheduled { threads }),
    };
    // Checked as a caller's plan would be, where the verifier's pairwise pass is cheap.
    let checked = |plan: Plan| (graph.node_count() > VERIFY_UP_TO || plan.verify().is_ok()).then_some(plan);
    cell.get_or_init(|| Plan::new(graph, mode).ok().and_then(checked))
        .as_ref()
}

/// Auto plans of graphs up to this many nodes are verified (the verifier looks at every pair of
/// values) before any run uses them.
const VERIFY_UP_TO: usize = 2_000;
