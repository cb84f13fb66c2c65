//! graphsched: a runtime layer for static compute graphs whose kernels belong to the caller.
//!
//! The model: a caller describes a graph of nodes (operator invocations with kernels) and values
//! (node outputs), compiles it once with [`GraphBuilder::finalize`], then runs it many times.
//! graphsched decides when each node runs and where each value lives: every value's buffer comes
//! from a [`Pool`] just before its producer runs and goes back the moment its last consumer has
//! finished.
//!
//! Layers, data flowing down:
//! - [`ffi`]: the C ABI (`include/graphsched.h`), a thin shell of checks and conversions;
//! - [`graph`]: the builder, validation and analysis (topological order, memory along an order);
//! - [`kernel`]: the [`Kernel`] type and the [`KernelCtx`] a kernel sees;
//! - [`plan`]: static memory plans, one arena offset per value;
//! - [`sched`]: policy: which ready node goes first (levels, bands, the successor a thread keeps),
//!   the learned estimates and critical path, and which node may start under a memory limit
//!   (admission, the banker's rule over a safe order);
//! - [`exec`]: mechanism: the run state, the executor's work-stealing workers, the drivers;
//! - [`sim`]: the same policy on a virtual clock, for any thread count;
//! - [`partition`]: which nodes to run together as one call, chosen by the simulator;
//! - [`pool`]: aligned buffers with reuse; knows nothing about graphs;
//! - [`trace`]: Chrome trace-event JSON of a run, Graphviz DOT of a graph.
//!
//! `sched` decides, `exec` executes: the scheduler never calls a kernel, the executor never
//! picks a priority.
//!
//! ```
//! use graphsched::{GraphBuilder, NodeDesc, Pool, PoolConfig, RunOptions, ValueRef};
//! use std::sync::Arc;
//!
//! let mut b = GraphBuilder::new();
//! let fill = b.add_node(NodeDesc::new("fill", "Fill", Box::new(|ctx| {
//!     ctx.output_bytes(0).unwrap().fill(7);
//!     Ok(())
//! })).output(64)).unwrap();
//! b.mark_output(ValueRef::new(fill, 0)).unwrap();
//! let graph = Arc::new(b.finalize().unwrap());
//! let pool = Arc::new(Pool::default());
//! let result = graphsched::run(&graph, &pool, &RunOptions::default()).unwrap();
//! assert!(result.output_bytes(ValueRef::new(fill, 0)).unwrap().iter().all(|&x| x == 7));
//! ```

#![warn(unreachable_pub)]
#![warn(missing_docs)]

pub mod error;
pub mod exec;
pub mod ffi;
pub mod graph;
pub mod kernel;
pub mod partition;
pub mod plan;
pub mod pool;
pub mod sched;
pub mod sim;
mod sync;
pub mod tensor;
pub mod trace;

pub use error::{Error, ErrorKind, Result};
pub use exec::{
    run, CancelToken, Completion, Executor, InputBinding, NodeEvent, NodeObservation, Observer, Parallel, RunOptions,
    RunResult, RunStats,
};
pub use graph::{Graph, GraphBuilder, GraphInfo, NodeDesc, OutputSize, ValueRef};
pub use kernel::{Kernel, KernelCtx};
pub use pool::{Pool, PoolConfig, PoolStats};
pub use sched::Policy;
pub use sim::{simulate, SimOptions, SimResult};
pub use tensor::Tensor;
