//! One configuration measured in a process of its own, so that its peak resident memory is its
//! own: wall time per inference (median), activation bytes and peak RSS.

use crate::graph::OnnxGraph;
use crate::manifest::Manifest;
use crate::ort_api::{Arena, Runtime, SessionConfig};
use crate::run::{Engine, Memory, WholeModel};
use serde::{Deserialize, Serialize};
use std::path::Path;
use std::time::Instant;

/// Who runs the model, and how.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Runner {
    /// graphsched's executor over single-threaded per-node sessions.
    Graphsched(Memory),
    /// graphsched without an executor, with a sequential plan, its per-node sessions sharing
    /// one intra-op pool of the configuration's threads (ONNX Runtime's global thread pool).
    GraphschedIntra,
    /// graphsched's executor on `threads` threads with a scheduled plan, its per-node sessions
    /// sharing an intra-op pool of as many: both kinds of parallelism at once (oversubscribed).
    GraphschedBoth,
    /// What graphsched picks with no flags: the clusters `--partition` chose and the way it
    /// chose to run them (graphsched's executor, or ONNX Runtime's intra-op pool).
    GraphschedAuto,
    /// ONNX Runtime's sequential executor, `threads` intra-op threads.
    OrtSequential,
    /// ONNX Runtime's parallel executor, `threads` inter-op threads, one intra-op thread.
    OrtParallel,
}

impl Runner {
    /// Every runner, by the name the child process is given.
    pub const ALL: [(&'static str, Runner); 9] = [
        ("gs-auto", Runner::GraphschedAuto),
        ("gs-pool", Runner::Graphsched(Memory::Pool)),
        ("gs-sequential-plan", Runner::Graphsched(Memory::SequentialPlan)),
        ("gs-parallel-plan", Runner::Graphsched(Memory::ParallelPlan)),
        ("gs-scheduled-plan", Runner::Graphsched(Memory::ScheduledPlan)),
        ("gs-intra", Runner::GraphschedIntra),
        ("gs-both", Runner::GraphschedBoth),
        ("ort-sequential", Runner::OrtSequential),
        ("ort-parallel", Runner::OrtParallel),
    ];

    /// The child-process name.
    pub fn key(self) -> &'static str {
        Runner::ALL.iter().find(|(_, r)| *r == self).map_or("?", |(k, _)| k)
    }

    /// The runner a child-process name stands for.
    pub fn parse(key: &str) -> Option<Runner> {
        Runner::ALL.iter().find(|(k, _)| *k == key).map(|(_, r)| *r)
    }

    /// The `runtime` column: who runs and how it keeps memory.
    pub fn describe(self) -> String {
        match self {
            Runner::Graphsched(memory) => format!("graphsched ({})", memory.name()),
            Runner::GraphschedIntra => "graphsched (sequential plan, shared intra-op pool)".to_string(),
            Runner::GraphschedBoth => "graphsched (scheduled plan, executor + intra-op pool)".to_string(),
            Runner::GraphschedAuto => "graphsched (auto)".to_string(),
            Runner::OrtSequential => "onnxruntime (sequential, intra-op)".to_string(),
            Runner::OrtParallel => "onnxruntime (parallel, inter-op)".to_string(),
        }
    }
}

/// One configuration's figures.
#[derive(Clone, Debug, Serialize, Deserialize)]
pub struct Row {
    /// Who ran the model and how.
    pub runtime: String,
    /// The child-process name of the configuration.
    pub config: String,
    /// Threads in all.
    pub threads: usize,
    /// Median wall time of one inference, warm (over every round, in the parent's table).
    pub wall_ns: u64,
    /// Every timed inference's wall time.
    pub walls_ns: Vec<u64>,
    /// graphsched: the pool's peak reserved bytes (values, plan arena included); ONNX Runtime:
    /// the growth of resident memory from just before the first inference to its peak.
    pub activation_bytes: u64,
    /// Resident memory's growth from just before the first inference to its peak (the same
    /// measure for both runtimes: kernels' scratch included).
    pub rss_growth_bytes: u64,
    /// The process's peak resident memory.
    pub peak_rss_bytes: u64,
    /// Whether the outputs are bitwise equal to ONNX Runtime's (filled in by the parent).
    #[serde(default)]
    pub bitwise_equal: bool,
    /// Whether the peak RSS could be reset before the inferences (Linux `clear_refs`); if not,
    /// `rss_growth_bytes` (and ONNX Runtime's activation bytes) count from an earlier peak.
    pub peak_reset: bool,
}

/// Runs `runner` on `threads` threads: one warm-up inference (its outputs written to `out`),
/// then `runs` timed ones.
pub fn measure(
    manifest: &Manifest,
    library: &Path,
    runner: Runner,
    threads: usize,
    runs: usize,
    out: &Path,
) -> Result<Row, String> {
    let auto = match runner {
        Runner::GraphschedAuto => Some(crate::partition::Choice::load(&manifest.dir, threads)?),
        _ => None,
    };
    let auto_intra = auto
        .as_ref()
        .is_some_and(|c| c.chosen.way == crate::partition::Way::IntraOp);
    let shared = matches!(runner, Runner::GraphschedIntra | Runner::GraphschedBoth) || auto_intra;
    // graphsched's runs of its clusters give ONNX Runtime its memory from graphsched's pool;
    // declared first, so that it is freed last.
    let pool = auto
        .as_ref()
        .map(|_| crate::pool_allocator::OwnedPool::new())
        .transpose()?;
    let runtime = Runtime::load_with(library, shared.then_some(threads), pool.as_ref().map(|p| p.handle()))?;
    let per_node = SessionConfig {
        intra_threads: 1,
        global_threads: shared,
        arena: Arena::Shared,
        ..Default::default()
    };
    let mut times = Vec::with_capacity(runs);
    let mut timed = |f: &mut dyn FnMut(bool) -> Result<Vec<Vec<u8>>, String>| -> Result<(), String> {
        let start_rss = rss::reset_peak();

        std::fs::write(out, f(true)?.concat()).map_err(|e| format!("cannot write {}: {e}", out.display()))?;
        for _ in 0..runs {
            let start = Instant::now();
            f(false)?;
            times.push(start.elapsed().as_nanos() as u64);
        }
        rss::note_start(start_rss);
        Ok(())
    };
    let mut activation = None;
    let mut described = runner.describe();
    match runner {
        Runner::GraphschedAuto => {
            let clusters = Manifest::load(&crate::partition::clusters_dir(&manifest.dir, threads))?;
            let intra = auto_intra;
            let pattern = auto.as_ref().is_some_and(|c| c.chosen.memory_pattern);
            described = format!(
                "graphsched (auto: {} clusters, {}{})",
                clusters.nodes.len(),
                if intra { "intra-op pool" } else { "executor" },
                if pattern { ", memory pattern" } else { "" }
            );
            let config = SessionConfig {
                global_threads: intra,
                value_by_value: !pattern,
                ..per_node
            };
            let graph = OnnxGraph::build(&runtime, &clusters, config)?;
            let executor_threads = if intra { 1 } else { threads };
            let on = pool.as_ref().map(|p| p.handle());
            let mut engine = Engine::new_on(&graph, &clusters, executor_threads, Memory::Pool, on)?;
            timed(&mut |keep| engine.run(&graph, keep).map(|r| r.1))?;
            activation = Some(engine.pool_stats().peak_reserved_bytes);
        }
        Runner::Graphsched(_) | Runner::GraphschedIntra | Runner::GraphschedBoth => {
            let memory = match runner {
                Runner::Graphsched(m) => m,
                Runner::GraphschedIntra => Memory::SequentialPlan,
                _ => Memory::ScheduledPlan,
            };
            let graph = OnnxGraph::build(&runtime, manifest, per_node)?;
            let executor_threads = if runner == Runner::GraphschedIntra { 1 } else { threads };
            let mut engine = Engine::new(&graph, manifest, executor_threads, memory)?;
            timed(&mut |keep| engine.run(&graph, keep).map(|r| r.1))?;
            activation = Some(engine.pool_stats().peak_reserved_bytes);
        }
        Runner::OrtSequential | Runner::OrtParallel => {
            let parallel = runner == Runner::OrtParallel;
            let config = SessionConfig {
                intra_threads: if parallel { 1 } else { threads },
                inter_threads: threads,
                parallel,
                global_threads: false,
                arena: Arena::Own,
                value_by_value: false,
            };
            let session = runtime.session(&manifest.dir.join(&manifest.prepared), config)?;
            let mut whole = WholeModel::new(&runtime, session, manifest);
            timed(&mut |keep| whole.run(keep))?;
        }
    }
    let (growth, peak) = rss::growth_and_peak();

    Ok(Row {
        runtime: described,
        config: runner.key().to_string(),
        threads,
        wall_ns: median(&mut times),
        walls_ns: times,
        activation_bytes: activation.unwrap_or(growth),
        rss_growth_bytes: growth,
        peak_rss_bytes: peak,
        bitwise_equal: false,
        peak_reset: rss::was_reset(),
    })
}

/// The median of `xs` (0 for none).
pub fn median(xs: &mut [u64]) -> u64 {
    xs.sort_unstable();
    xs.get(xs.len() / 2).copied().unwrap_or(0)
}

/// Resident memory from `/proc/self/status`, and Linux's peak reset (`clear_refs` 5).
pub(crate) mod rss {
    use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};

    static START: AtomicU64 = AtomicU64::new(0);
    static PEAK_BEFORE: AtomicU64 = AtomicU64::new(0);
    static RESET: AtomicBool = AtomicBool::new(false);

    /// Whether the kernel let the peak be reset: if not, growth counts from the process's
    /// earlier peak (sessions being built included) and overstates the inferences' memory.
    pub fn was_reset() -> bool {
        RESET.load(Ordering::Relaxed)
    }

    /// A `/proc/self/status` field, in KiB (0 if absent).
    pub(crate) fn status_kib(field: &str) -> u64 {
        let text = std::fs::read_to_string("/proc/self/status").unwrap_or_default();
        text.lines()
            .find(|l| l.starts_with(field))
            .and_then(|l| l.split_whitespace().nth(1))
            .and_then(|v| v.parse().ok())
            .unwrap_or(0)
    }

    /// Resets the peak to the current resident size, where the kernel allows it; returns the
    /// current resident bytes.
    pub fn reset_peak() -> u64 {
        PEAK_BEFORE.store(status_kib("VmHWM:") * 1024, Ordering::Relaxed);
        let reset = std::fs::write("/proc/self/clear_refs", "5").is_ok();
        RESET.store(reset, Ordering::Relaxed);
        status_kib("VmRSS:") * 1024
    }

    /// Records the resident bytes the inferences started from.
    pub fn note_start(bytes: u64) {
        START.store(bytes, Ordering::Relaxed);
    }

    /// Growth from the start to the peak since the reset, and the process's peak.
    pub fn growth_and_peak() -> (u64, u64) {
        let peak = status_kib("VmHWM:") * 1024;
        (
            peak.saturating_sub(START.load(Ordering::Relaxed)),
            peak.max(PEAK_BEFORE.load(Ordering::Relaxed)),
        )
    }
}
