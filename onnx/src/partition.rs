//! `--partition`: graphsched picks the clusters, and how to run them, from what the per-node
//! graph measured, as any engine with a fixed cost per call would.
//!
//! For each way to run (graphsched's executor over single-threaded sessions; or the calling
//! thread, every session sharing ONNX Runtime's intra-op pool), a child process builds the
//! per-node graph, lets graphsched learn every node's duration (a few runs, estimates frozen
//! while the sessions warm up), measures the fixed cost of a call (the per-node durations summed,
//! less the whole model run in one session, per call saved), and asks `gs_partition_new` for
//! the clusters on its threads. The parent keeps the way whose partition simulates fastest and
//! writes `partition-T.json` for `prepare.py --clusters`, which writes one model per cluster.

use crate::graph::{gs_check, OnnxGraph};
use crate::manifest::Manifest;
use crate::measure::median;
use crate::ort_api::{Arena, Runtime, SessionConfig};
use crate::pool_allocator::added_at_peak;
use crate::run::{Aligned, Engine, Memory, WholeModel};
use graphsched::ffi::*;
use graphsched::{GraphInfo, SimResult};
use serde::{Deserialize, Serialize};
use std::path::{Path, PathBuf};
use std::time::Instant;

/// Runs that warm the sessions (estimates frozen), then runs graphsched learns from: at least
/// `LEARN_RUNS`, and more until `LEARN_NS` have passed (graphsched times one call in 8 of a
/// node's type, or in 64 for cheap ones, so short models need many runs), at most `MAX_RUNS`.
const WARM_RUNS: usize = 2;
const LEARN_RUNS: usize = 24;
const LEARN_NS: u128 = 1_500_000_000;
const MAX_RUNS: usize = 2_000;
/// Timed calls of the empty model (after 10 to warm up): about 2 ms.
const EMPTY_CALLS: usize = 1_000;

/// How the clusters run.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum Way {
    /// graphsched's executor on the threads, each session on one thread.
    Executor,
    /// The calling thread alone, every session sharing ONNX Runtime's intra-op pool of the threads.
    IntraOp,
}

/// One way measured and partitioned (a child's answer).
#[derive(Clone, Debug, Serialize, Deserialize)]
pub struct Proposal {
    /// How the clusters would run.
    pub way: Way,
    /// Threads in all.
    pub threads: usize,
    /// The cost of a call the partition was given: what the per-node run spent beyond the
    /// whole model, per call, but never less than an empty call.
    pub call_cost_ns: u64,
    /// What a call that does nothing costs (`call.onnx`), measured; 0 where not measured.
    #[serde(default)]
    pub empty_call_ns: u64,
    /// Whether the cluster sessions keep ONNX Runtime's memory pattern rather than allocate
    /// value by value ([`keeps_pattern`]).
    #[serde(default)]
    pub memory_pattern: bool,
    /// What `memory_pattern` was decided from.
    #[serde(default)]
    pub whole: WholeModelFigures,
    /// Operator nodes, and clusters proposed.
    pub nodes: usize,
    /// Clusters as indices of the manifest's nodes.
    pub clusters: Vec<Vec<usize>>,
    /// Simulated makespan with one call a node, and with one call a cluster.
    pub before_ns: u64,
    pub after_ns: u64,
    /// Simulated peak of live bytes with the clusters (internal values held for a cluster's time).
    pub after_peak_bytes: u64,
}

/// What `partition-T.json` holds: the proposal kept, and every one considered.
#[derive(Clone, Debug, Serialize, Deserialize)]
pub struct Choice {
    /// The proposal kept: the shortest simulated makespan.
    pub chosen: Proposal,
    /// Every proposal, the chosen one included.
    pub considered: Vec<Proposal>,
}

impl Choice {
    /// The choice `--partition` wrote for `threads` threads in `dir`.
    pub fn load(dir: &Path, threads: usize) -> Result<Choice, String> {
        let file = choice_file(dir, threads);
        let text = std::fs::read_to_string(&file).map_err(|e| {
            format!(
                "cannot read {}: {e} (run gsched-onnx --partition first)",
                file.display()
            )
        })?;
        serde_json::from_str(&text).map_err(|e| format!("{} is not a partition choice: {e}", file.display()))
    }
}

/// Where the choice for `threads` threads is written.
pub fn choice_file(dir: &Path, threads: usize) -> PathBuf {
    dir.join(format!("partition-{threads}.json"))
}

/// Where `prepare.py --clusters` writes the cluster models for `threads` threads.
pub fn clusters_dir(dir: &Path, threads: usize) -> PathBuf {
    dir.join(format!("clusters-{threads}"))
}

/// How many times `--partition` measures each way (in turns), keeping the least disturbed.
pub const MEASURE_ROUNDS: usize = 2;

/// The ways worth measuring on `threads` threads.
pub fn ways(threads: usize) -> Vec<Way> {
    if threads == 1 {
        vec![Way::Executor]
    } else {
        vec![Way::Executor, Way::IntraOp]
    }
}

/// Picks the proposal with the shortest simulated makespan (ties: fewer clusters).
pub fn choose(considered: Vec<Proposal>) -> Option<Choice> {
    let chosen = considered
        .iter()
        .min_by_key(|p| (p.after_ns, p.clusters.len()))?
        .clone();
    Some(Choice { chosen, considered })
}

/// In a child process: measures `way` on `threads` threads and partitions, with calls costing at
/// least `floor_ns`.
pub fn propose(
    manifest: &Manifest,
    library: &Path,
    way: Way,
    threads: usize,
    floor_ns: u64,
) -> Result<Proposal, String> {
    let intra = way == Way::IntraOp;
    // ONNX Runtime's memory from graphsched's pool, as the clusters will run (`measure.rs`):
    // the sessions' allocations are timed as they will cost. Declared first, freed last.
    let pool = crate::pool_allocator::OwnedPool::new()?;
    let runtime = Runtime::load_with(library, intra.then_some(threads), Some(pool.handle()))?;
    let config = SessionConfig {
        intra_threads: 1,
        global_threads: intra,
        arena: Arena::Shared,
        ..Default::default()
    };
    let graph = OnnxGraph::build(&runtime, manifest, config)?;
    // Durations are learned on the calling thread: a node's time alone, as a call of its own.
    let mut engine = Engine::new(&graph, manifest, 1, Memory::Pool)?;
    for _ in 0..WARM_RUNS {
        engine.run_with(&graph, false, GS_RUN_FREEZE_ESTIMATES)?;
    }
    let start = Instant::now();
    let mut runs = 0;
    while runs < LEARN_RUNS || (runs < MAX_RUNS && start.elapsed().as_nanos() < LEARN_NS) {
        engine.run(&graph, false)?;
        runs += 1;
    }
    let mut info = GraphInfo::default();
    // SAFETY: a finalized graph and a writable out pointer.
    let status = unsafe { gs_graph_get_info(graph.handle(), &mut info) };
    gs_check(status, "gs_graph_get_info")?;
    let whole = whole_model(&runtime, manifest, config, pool.handle())?;
    let calls = graph.nodes.max(2) as u64 - 1;
    // The excess per call is a difference of two sums that each drift by about 1% between runs:
    // on a model of few, long nodes it can read 0 (seen on a 48-node classifier), and a
    // partition told that calls are free merges nothing. A call never costs less than one that
    // does nothing.
    let empty_call_ns = empty_call_ns(&runtime, manifest, config)?;
    let call_cost_ns = (info.total_work_ns.saturating_sub(whole.pattern_ns) / calls)
        .max(floor_ns)
        .max(empty_call_ns);
    let options = gs_partition_options {
        call_cost_ns,
        threads: if intra { 1 } else { threads as u32 },
        policy: GS_POLICY_DEFAULT,
        memory_limit_bytes: 0,
    };
    let mut partition = std::ptr::null_mut();
    // SAFETY: a finalized graph, readable options, a writable out pointer.
    let status = unsafe { gs_partition_new(graph.handle(), &options, &mut partition) };
    gs_check(status, "gs_partition_new")?;
    let read = || -> Result<(Vec<Vec<usize>>, SimResult, SimResult), String> {
        let (mut count, mut before, mut after) = (0usize, SimResult::default(), SimResult::default());
        // SAFETY: a live partition and writable out pointers.
        unsafe {
            gs_check(
                gs_partition_cluster_count(partition, &mut count),
                "gs_partition_cluster_count",
            )?;
            gs_check(
                gs_partition_simulated(partition, &mut before, &mut after),
                "gs_partition_simulated",
            )?;
        }
        let manifest_index: std::collections::HashMap<u32, usize> =
            graph.node_ids.iter().enumerate().map(|(i, &id)| (id, i)).collect();
        let mut clusters = Vec::with_capacity(count);
        for c in 0..count {
            let (mut nodes, mut len) = (std::ptr::null(), 0usize);
            // SAFETY: as above; the ids live as long as the partition, and are copied out.
            let ids = unsafe {
                gs_check(
                    gs_partition_cluster(partition, c, &mut nodes, &mut len),
                    "gs_partition_cluster",
                )?;
                std::slice::from_raw_parts(nodes, len)
            };
            // The manifest's nodes by their graphsched ids (the graph inputs come first).
            let members = ids
                .iter()
                .map(|id| {
                    manifest_index.get(id).copied().ok_or(format!(
                        "the partition names node {id}, which is no operator node of the graph"
                    ))
                })
                .collect::<Result<Vec<usize>, String>>()?;
            clusters.push(members);
        }
        Ok((clusters, before, after))
    };
    let read = read();
    // SAFETY: made above, freed once.
    unsafe { gs_partition_free(partition) };
    let (clusters, before, after) = read?;
    Ok(Proposal {
        way,
        threads,
        call_cost_ns,
        empty_call_ns,
        memory_pattern: keeps_pattern(&whole),
        whole,
        nodes: graph.nodes,
        clusters,
        before_ns: before.makespan_ns,
        after_ns: after.makespan_ns,
        after_peak_bytes: after.peak_live_bytes,
    })
}

/// The whole model in one session run as `config` runs the nodes: median of a few runs.
/// The median time of a `Run` of the manifest's empty call (`call.onnx`, prepare.py), in a
/// session made as the nodes' are; 0 for a directory prepared without one.
fn empty_call_ns(runtime: &Runtime, manifest: &Manifest, config: SessionConfig) -> Result<u64, String> {
    let Some(file) = &manifest.call_model else {
        return Ok(0);
    };
    let session = runtime.session(&manifest.dir.join(file), config)?;
    let (mut x, mut y) = (Aligned::zeroed(4), Aligned::zeroed(4));
    const FLOAT: i32 = 1; // ONNX's TensorProto.FLOAT
                          // SAFETY: `x` holds one float and outlives every run below.
    let input = [unsafe { runtime.tensor(x.ptr(), 4, &[1], FLOAT) }?];
    // SAFETY: `y` holds one float and outlives every run below.
    let mut output = [unsafe { runtime.tensor(y.ptr(), 4, &[1], FLOAT) }?];
    let (names_in, names_out) = ([c"x".as_ptr()], [c"y".as_ptr()]);
    let mut times = Vec::with_capacity(EMPTY_CALLS);
    for i in 0..EMPTY_CALLS + 10 {
        let start = Instant::now();
        // SAFETY: static NUL-terminated names; the values wrap the buffers above.
        unsafe { session.run(&names_in, &input, &names_out, &mut output) }?;
        if i >= 10 {
            times.push(start.elapsed().as_nanos() as u64);
        }
    }
    Ok(median(&mut times))
}

/// The whole model in one session, with ONNX Runtime's memory pattern and value by value.
#[derive(Clone, Copy, Debug, Default, PartialEq, Serialize, Deserialize)]
pub struct WholeModelFigures {
    /// Median run of each, measured in turns.
    pub pattern_ns: u64,
    pub by_value_ns: u64,
    /// What one run adds to graphsched's pool at its peak (its values, and the kernels' scratch).
    pub pattern_bytes: u64,
    pub by_value_bytes: u64,
}

fn whole_model(
    runtime: &Runtime,
    manifest: &Manifest,
    config: SessionConfig,
    pool: *mut gs_pool,
) -> Result<WholeModelFigures, String> {
    // The same model twice: with ONNX Runtime's memory pattern (one planned block a run), and
    // value by value (each value allocated when made and freed after its last read), run in
    // turns so that drift weighs on both alike.
    // Its memory from the environment's allocator (graphsched's pool), as a cluster's.
    let whole = |value_by_value| -> Result<WholeModel<'_>, String> {
        let session = runtime.session(
            &manifest.dir.join(&manifest.prepared),
            SessionConfig {
                value_by_value,
                ..config
            },
        )?;
        let mut whole = WholeModel::new(runtime, session, manifest);
        whole.run(false)?;
        Ok(whole)
    };
    let (mut pattern, mut each) = (whole(false)?, whole(true)?);
    // What a run adds to the pool at its peak, beyond what lives between runs (the other
    // session's, the outputs).
    let pattern_bytes = added_at_peak(pool, || pattern.run(false))?;
    let by_value_bytes = added_at_peak(pool, || each.run(false))?;
    let (mut with_pattern, mut by_value) = (Vec::new(), Vec::new());
    let timed = |w: &mut WholeModel<'_>| -> Result<u64, String> {
        let start = Instant::now();
        w.run(false).map(|_| start.elapsed().as_nanos() as u64)
    };
    // At least a dozen pairs; on a fast model, as many as half a second holds (the two differ by
    // a few percent there, and so do two runs).
    let start = Instant::now();
    while with_pattern.len() < LEARN_RUNS / 2 || (with_pattern.len() < 500 && start.elapsed().as_millis() < 500) {
        with_pattern.push(timed(&mut pattern)?);
        by_value.push(timed(&mut each)?);
    }
    Ok(WholeModelFigures {
        pattern_ns: median(&mut with_pattern),
        by_value_ns: median(&mut by_value),
        pattern_bytes,
        by_value_bytes,
    })
}

/// Whether a cluster session should keep ONNX Runtime's memory pattern, from the whole model's
/// figures (`whole_model`). Value by value frees each value into graphsched's pool as soon as it
/// is dead, where the pattern holds ONNX Runtime's planned block for the whole run (on the
/// PP-OCRv4 detector, 60 MiB of resident growth against 51); but it allocates every value at
/// every run, which shows on a model of many short nodes (3.5% of the PP-OCR classifier's run,
/// 3.3% of PP-OCRv5's). So value by value only where it saves at least
/// [`BY_VALUE_SAVES_BYTES`] and does not cost more than [`PATTERN_GAIN`]: the time alone
/// decides badly near the threshold (PP-OCRv5's classifier read 0.9-2.1% in four measurements,
/// and ran 3.3% slower value by value), and a model whose values are small saves nothing worth it.
pub fn keeps_pattern(w: &WholeModelFigures) -> bool {
    let saves = w.pattern_bytes.saturating_sub(w.by_value_bytes);
    saves < BY_VALUE_SAVES_BYTES || w.by_value_ns as f64 > w.pattern_ns as f64 * (1.0 + PATTERN_GAIN)
}

/// The share of a run that allocating value by value must cost before a session keeps the
/// memory pattern instead: above the drift of two medians taken in turns.
pub const PATTERN_GAIN: f64 = 0.015;

/// What value by value must save of a run's peak in the pool to be worth its allocations.
pub const BY_VALUE_SAVES_BYTES: u64 = 1 << 20;

#[cfg(test)]
mod tests {
    use super::*;

    fn proposal(way: Way, after_ns: u64, clusters: usize) -> Proposal {
        Proposal {
            way,
            threads: 2,
            call_cost_ns: 1000,
            empty_call_ns: 0,
            memory_pattern: false,
            whole: WholeModelFigures::default(),
            nodes: 10,
            clusters: vec![vec![0]; clusters],
            before_ns: 100,
            after_ns,
            after_peak_bytes: 0,
        }
    }

    #[test]
    fn the_fastest_way_is_chosen_and_ties_go_to_fewer_calls() {
        let c = choose(vec![proposal(Way::Executor, 90, 3), proposal(Way::IntraOp, 50, 9)]).unwrap();
        assert_eq!(c.chosen.way, Way::IntraOp);
        assert_eq!(c.considered.len(), 2);
        let tie = choose(vec![proposal(Way::Executor, 50, 3), proposal(Way::IntraOp, 50, 9)]).unwrap();
        assert_eq!(tie.chosen.way, Way::Executor);
        assert!(choose(Vec::new()).is_none());
        assert_eq!(ways(1), [Way::Executor]);
    }

    #[test]
    fn the_memory_pattern_is_kept_unless_value_by_value_saves_memory_at_little_cost() {
        let figures = |pattern_ns, by_value_ns, pattern_bytes, by_value_bytes| WholeModelFigures {
            pattern_ns,
            by_value_ns,
            pattern_bytes,
            by_value_bytes,
        };
        const MIB: u64 = 1 << 20;
        // The detector: the same time both ways, within the drift, and value by value saves 9 MiB.
        assert!(!keeps_pattern(&figures(105_000_000, 105_500_000, 60 * MIB, 51 * MIB)));
        assert!(!keeps_pattern(&figures(105_000_000, 104_000_000, 60 * MIB, 51 * MIB)));
        // Saving as much but costing 3.3%: the pattern.
        assert!(keeps_pattern(&figures(871_000, 900_000, 60 * MIB, 51 * MIB)));
        // A classifier that reads within the drift but saves under 1 MiB: the pattern.
        assert!(keeps_pattern(&figures(1_157_000, 1_167_000, 900_000, 500_000)));
        // Value by value holding more than the pattern (a pool's peak past the planned block).
        assert!(keeps_pattern(&figures(1_000_000, 1_000_000, MIB, 2 * MIB)));
    }
}
