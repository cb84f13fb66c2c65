//! Measured runs: one run with its figures, traces, progress on a terminal.

use std::io::{IsTerminal, Write};
use std::path::Path;
use std::sync::Arc;

use graphsched::plan::Plan;
use graphsched::{run, Executor, Policy, Pool, RunOptions, RunResult};
use graphsched_workloads::Measured;
use serde::Serialize;

/// One measured run.
#[derive(Serialize, Clone)]
pub(crate) struct Row {
    pub(crate) strategy: String,
    pub(crate) wall_ns: u64,
    pub(crate) peak_live_bytes: u64,
    pub(crate) peak_reserved_bytes: u64,
    pub(crate) os_allocs: u64,
    /// Acquires served from memory the pool already held, over all acquires of the run.
    pub(crate) reuse_rate: f64,
    /// Minor page faults of the whole process during the run.
    pub(crate) minor_faults: u64,
}

pub(crate) fn minor_faults() -> u64 {
    // SAFETY: getrusage writes into the zeroed struct we pass.
    unsafe {
        let mut u: libc::rusage = std::mem::zeroed();
        libc::getrusage(libc::RUSAGE_SELF, &mut u);
        u.ru_minflt.max(0) as u64
    }
}

/// The knobs of one measured run.
#[derive(Clone, Copy, Default)]
pub(crate) struct Knobs<'a> {
    /// None: the calling thread alone, in file order.
    pub(crate) executor: Option<&'a Executor>,
    pub(crate) policy: Policy,
    /// 0: no limit.
    pub(crate) memory_limit_bytes: u64,
    /// 0: as many nodes in flight as threads.
    pub(crate) window: usize,
    pub(crate) trace: bool,
    pub(crate) plan: Option<&'a Plan>,
}

/// Runs `built` once on `pool` and measures it; peaks are reset first, so they are this run's.
/// The row is labelled `strategy`.
pub(crate) fn measured_run(
    strategy: &str,
    built: &Measured,
    pool: &Arc<Pool>,
    knobs: Knobs<'_>,
) -> graphsched::Result<(Row, RunResult)> {
    pool.reset_peaks();
    let before = pool.stats();
    let faults = minor_faults();
    let bindings = built.inputs.bindings();
    let result = run(
        &built.graph,
        pool,
        &RunOptions {
            inputs: &bindings,
            executor: knobs.executor,
            policy: knobs.policy,
            memory_limit_bytes: knobs.memory_limit_bytes,
            window: knobs.window,
            freeze_estimates: true,
            trace: knobs.trace,
            plan: knobs.plan,
            ..Default::default()
        },
    )?;
    let faults = minor_faults().saturating_sub(faults);
    let after = pool.stats();
    let stats = result.stats();
    let acquires = after.acquires - before.acquires;
    let hits = after.cache_hits - before.cache_hits;
    let row = Row {
        strategy: strategy.to_string(),
        wall_ns: stats.wall_ns,
        peak_live_bytes: stats.peak_live_bytes,
        peak_reserved_bytes: after.peak_reserved_bytes,
        os_allocs: after.os_allocs - before.os_allocs,
        reuse_rate: if acquires == 0 {
            0.0
        } else {
            hits as f64 / acquires as f64
        },
        minor_faults: faults,
    };
    Ok((row, result))
}

pub(crate) fn write_trace(path: &Path, result: &RunResult) -> Result<(), String> {
    let trace = result
        .chrome_trace()
        .ok_or_else(|| "the run recorded no trace".to_string())?;
    std::fs::write(path, trace).map_err(|e| format!("cannot write the trace to {}: {e}", path.display()))
}

/// A live line on stderr (`demo: running fifo (3/5)...`), when stderr is a terminal and the
/// output is not JSON; cleared when dropped.
pub(crate) struct Progress {
    pub(crate) on: bool,
}

impl Progress {
    pub(crate) fn new(json: bool) -> Progress {
        Progress {
            on: !json && std::io::stderr().is_terminal(),
        }
    }

    pub(crate) fn show(&self, line: &str) {
        if self.on {
            let mut err = std::io::stderr().lock();
            let _ = write!(err, "\r{line}\x1b[K");
            let _ = err.flush();
        }
    }
}

impl Drop for Progress {
    fn drop(&mut self) {
        if self.on {
            let mut err = std::io::stderr().lock();
            let _ = write!(err, "\r\x1b[K");
            let _ = err.flush();
        }
    }
}
