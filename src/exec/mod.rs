//! Running a finalized graph: the run state shared by the threads of a run, the executor's workers,
//! and the two drivers.
//!
//! Every value is acquired from the pool just before its producer runs (or by the kernel, if its
//! size is dynamic) and released the moment its last consumer has finished; graph outputs stay in
//! the [`RunResult`] until it is dropped. Without an executor a run goes in topological order on
//! the calling thread; with one, by priority on all its threads (see [`Executor`]).
//!
//! What holds for every run: a node runs at most once, after the producers of all its inputs; its
//! kernel has its outputs to itself and reads inputs nobody writes. A run ends with every node run,
//! or with one error (the first) and every buffer back in the pool; either way the graph may run
//! again. Graph, pool and executor are shared: any number of runs may overlap on one executor.
//!
//! API: [`run()`] with [`RunOptions`] (inputs as [`InputBinding`]s, an [`Executor`], a policy,
//! limits, a [`CancelToken`]) returns a [`RunResult`] that owns the outputs, with [`RunStats`].
//!
//! ```
//! use graphsched::{Executor, GraphBuilder, NodeDesc, Pool, RunOptions, ValueRef};
//! use std::sync::Arc;
//!
//! let fill = |name: &str, x: u8| NodeDesc::new(name, "Fill", Box::new(move |ctx| {
//!     ctx.output_bytes(0).unwrap().fill(x);
//!     Ok(())
//! })).output(4);
//! let mut b = GraphBuilder::new();
//! let (l, r) = (b.add_node(fill("l", 2)).unwrap(), b.add_node(fill("r", 3)).unwrap());
//! let sum = b.add_node(NodeDesc::new("sum", "Add", Box::new(|ctx| {
//!     let x = ctx.input_bytes(0).unwrap()[0] + ctx.input_bytes(1).unwrap()[0];
//!     ctx.output_bytes(0).unwrap().fill(x);
//!     Ok(())
//! })).input(ValueRef::new(l, 0)).input(ValueRef::new(r, 0)).output(4)).unwrap();
//! b.mark_output(ValueRef::new(sum, 0)).unwrap();
//! let (graph, pool) = (Arc::new(b.finalize().unwrap()), Arc::new(Pool::default()));
//! let executor = Executor::new(2).unwrap();
//! let options = RunOptions { executor: Some(&executor), ..RunOptions::default() };
//! let result = graphsched::run(&graph, &pool, &options).unwrap();
//! assert_eq!(result.output_bytes(ValueRef::new(sum, 0)).unwrap(), [5; 4]);
//! let stats = result.stats(); // l's and r's values stay live while sum runs: 12 bytes
//! assert_eq!((stats.nodes_run, stats.threads, stats.peak_live_bytes), (3, 2, 12));
//! ```
mod memory;
mod node;
mod padded;
mod run;
mod sequential;
mod state;
mod workers;

#[cfg(feature = "fault-injection")]
pub mod fault;

pub use crate::kernel::KernelCtx;
pub use crate::trace::NodeEvent;
pub(crate) use node::context::RunContext;
pub use node::context::{NodeObservation, Observer};
pub use node::parallel::Parallel;
pub use node::pending::Completion;
pub use run::budget::BudgetStats;
pub use run::outcome::RunStats;
pub use run::{run, CancelToken, InputBinding, RunOptions, RunResult, INPUT_BINDING_TENSOR_OFFSET};
pub use workers::Executor;
