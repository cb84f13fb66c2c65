//! Running a finalized graph: the run state shared by the threads of a run,
//! the executor's workers, and the two drivers.
//!
//! Every value is acquired from the pool just before its producer runs (or by the kernel, if its
//! size is dynamic) and released the moment its last consumer has finished; graph outputs stay in
//! the [`RunResult`] until it is dropped. Without an executor a run goes in topological order on
//! the calling thread; with one, by priority on all its threads (see [`Executor`]).

mod cache;
mod executor;
#[doc(hidden)]
pub mod fault;
mod gate;
mod kernel_call;
mod padded;
mod run;
mod state;
mod window;

pub use crate::trace::NodeEvent;
pub use crate::kernel::KernelCtx;
pub use executor::Executor;
pub use run::{run, CancelToken, InputBinding, RunOptions, RunResult, RunStats, INPUT_BINDING_TENSOR_OFFSET};
