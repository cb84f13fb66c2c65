//! The C side of a run's context: per-run user data, the handles a kernel can run nested graphs
//! with, and node observers.

use std::ffi::c_void;

use super::executor::gs_executor;
use super::pool::gs_pool;
use crate::exec::{NodeObservation, Observer};

/// When one node ran, for an observer (C: `gs_node_observation`).
#[repr(C)]
#[derive(Clone, Copy, Debug, Default)]
pub struct gs_node_observation {
    /// The node's id.
    pub node: u32,
    /// 0: a thread that called `gs_run`; i + 1: the executor's worker i (also in a nested run).
    pub thread: u32,
    /// Kernel start, in nanoseconds since the run started.
    pub start_ns: u64,
    /// Kernel end, in nanoseconds since the run started; 0 in `on_node_start`.
    pub end_ns: u64,
    /// 1 if the kernel succeeded (and in `on_node_start`), 0 if it failed.
    pub ok: i32,
}

/// Told when a node starts or ends, on the thread that runs it, several threads at once on an
/// executor. Must be quick; a C++ exception must not leave it.
#[allow(non_camel_case_types)]
pub type gs_observer_fn =
    Option<unsafe extern "C" fn(observation: *const gs_node_observation, observer_data: *mut c_void)>;

/// What a C run's kernels reach through `gs_ctx_user_data`, `gs_ctx_pool` and `gs_ctx_executor`:
/// the pointers the caller passed to `gs_run`, handed back as they were.
pub(crate) struct CRunData {
    pub user_data: *mut c_void,
    pub pool: *mut gs_pool,
    pub executor: *mut gs_executor,
}

// SAFETY: graphsched never dereferences these pointers; it hands them back to kernels, which the
// header lets run on any thread (the handles are thread-safe, the user data the caller's
// business, as the header says).
unsafe impl Send for CRunData {}
// SAFETY: as above.
unsafe impl Sync for CRunData {}

/// A C observer: the two callbacks and their data.
pub(crate) struct CObserver {
    pub on_start: gs_observer_fn,
    pub on_end: gs_observer_fn,
    pub data: *mut c_void,
}

// SAFETY: the header requires observers and their data to be callable from any thread at once;
// graphsched only passes the pointer back.
unsafe impl Send for CObserver {}
// SAFETY: as above.
unsafe impl Sync for CObserver {}

impl CObserver {
    fn tell(&self, f: gs_observer_fn, at: &NodeObservation) {
        let Some(f) = f else { return };
        let c = gs_node_observation {
            node: at.node,
            thread: at.thread,
            start_ns: at.start_ns,
            end_ns: at.end_ns,
            ok: at.ok as i32,
        };
        // SAFETY: the caller vouched for the function and its data in `gs_run_options`; `c`
        // outlives the call. A C function cannot unwind into Rust.
        unsafe { f(&c, self.data) };
    }
}

impl Observer for CObserver {
    fn node_started(&self, at: &NodeObservation) {
        self.tell(self.on_start, at);
    }

    fn node_finished(&self, at: &NodeObservation) {
        self.tell(self.on_end, at);
    }
}
