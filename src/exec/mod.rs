//! Running a finalized graph: the kernel context and the run itself.
//!
//! This first executor runs nodes one at a time, in topological order, on the calling thread.
//! Every value is acquired from the pool just before its producer runs (or by the kernel, if its
//! size is dynamic) and released the moment its last consumer has finished; graph outputs stay in
//! the [`RunResult`] until it is dropped.

mod ctx;
mod run;

pub use ctx::KernelCtx;
pub use run::{run, InputBinding, RunOptions, RunResult, RunStats};
