//! `--serve`: many requests at once, as a server meets them. N closed-loop clients each send
//! requests back to back for T seconds; each configuration runs in a process of its own (its
//! peak RSS its own), and every client's first answer is checked bit for bit.
//!
//! - graphsched: the clusters it chose for the thread count (`--partition`), one executor and
//!   one pool for every client, the executor's memory budget set to one request's bound times
//!   the threads (what graphsched admits: the values between clusters; the clusters' internal
//!   values come from the same pool through the `OrtAllocator`, outside the budget);
//! - ONNX Runtime: one session of the whole model shared by every client (concurrent `Run`),
//!   with one intra-op thread, and with the threads as intra-op threads.

use crate::graph::{gs_check, OnnxGraph};
use crate::manifest::Manifest;
use crate::measure::median;
use crate::ort_api::{Arena, Runtime, SessionConfig};
use crate::partition::{clusters_dir, Choice, Way};
use crate::pool_allocator::OwnedPool;
use crate::run::{Aligned, WholeModel};
use graphsched::ffi::*;
use graphsched::{Tensor, ValueRef};
use serde::{Deserialize, Serialize};
use std::path::Path;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Mutex;
use std::time::{Duration, Instant};

/// Who serves.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Server {
    /// graphsched over its clusters, under a memory budget.
    Graphsched,
    /// One ONNX Runtime session, one intra-op thread, shared by every client.
    OrtShared,
    /// One ONNX Runtime session with the threads as intra-op threads, shared.
    OrtIntra,
}

impl Server {
    /// Every server, by the name its child process is given.
    pub const ALL: [(&'static str, Server); 3] = [
        ("gs", Server::Graphsched),
        ("ort-shared", Server::OrtShared),
        ("ort-intra", Server::OrtIntra),
    ];

    /// The server a child-process name stands for.
    pub fn parse(key: &str) -> Option<Server> {
        Server::ALL.iter().find(|(k, _)| *k == key).map(|(_, s)| *s)
    }
}

/// One server's figures.
#[derive(Clone, Debug, Serialize, Deserialize)]
pub struct ServeRow {
    /// Who served and how.
    pub runtime: String,
    /// Closed-loop clients.
    pub clients: usize,
    /// Threads the server was given.
    pub threads: usize,
    /// Requests answered in the timed seconds.
    pub requests: u64,
    /// Requests a second.
    pub throughput_per_s: f64,
    /// Latency of one request: median and 99th percentile.
    pub p50_ns: u64,
    pub p99_ns: u64,
    /// The process's peak resident memory, and its growth while serving.
    pub peak_rss_bytes: u64,
    pub rss_growth_bytes: u64,
    /// graphsched: the executor's memory budget, and the most its runs reserved at once.
    pub budget_bytes: Option<u64>,
    pub peak_reserved_bytes: Option<u64>,
    /// Every client's first answer equal, bit for bit, to the whole model's.
    pub bitwise_equal: bool,
}

/// In a child process: serves `clients` closed-loop clients for `seconds` with `server` on
/// `threads` threads.
pub fn serve(
    manifest: &Manifest,
    library: &Path,
    server: Server,
    clients: usize,
    seconds: f64,
    threads: usize,
) -> Result<ServeRow, String> {
    match server {
        Server::Graphsched => serve_graphsched(manifest, library, clients, seconds, threads),
        Server::OrtShared | Server::OrtIntra => serve_ort(manifest, library, server, clients, seconds, threads),
    }
}

/// One request's answer: every output's bytes.
type Answer = Vec<Vec<u8>>;

/// Latencies of every client, from `requests` run back to back by each until `seconds` pass;
/// `request(client, check)` answers one request, returning its output bytes when `check`.
fn closed_loop(
    clients: usize,
    seconds: f64,
    request: &(dyn Fn(usize, bool) -> Result<Option<Answer>, String> + Sync),
) -> Result<(Vec<u64>, Vec<Answer>), String> {
    let stop = AtomicBool::new(false);
    let latencies = Mutex::new(Vec::new());
    let answers = Mutex::new(Vec::new());
    let failure = Mutex::new(None);
    std::thread::scope(|s| {
        for c in 0..clients {
            let (stop, latencies, answers, failure) = (&stop, &latencies, &answers, &failure);
            s.spawn(move || {
                let mut mine = Vec::new();
                let mut first = true;
                while !stop.load(Ordering::Relaxed) {
                    let start = Instant::now();
                    match request(c, first) {
                        Ok(out) => {
                            mine.push(start.elapsed().as_nanos() as u64);
                            if let Some(out) = out {
                                answers.lock().unwrap().push(out);
                            }
                        }
                        Err(e) => {
                            *failure.lock().unwrap() = Some(e);
                            stop.store(true, Ordering::Relaxed);
                        }
                    }
                    first = false;
                }
                latencies.lock().unwrap().extend(mine);
            });
        }
        std::thread::sleep(Duration::from_secs_f64(seconds));
        stop.store(true, Ordering::Relaxed);
    });
    if let Some(e) = failure.into_inner().unwrap() {
        return Err(e);
    }
    Ok((latencies.into_inner().unwrap(), answers.into_inner().unwrap()))
}

/// p50 and p99 of `xs`.
fn percentiles(xs: &mut [u64]) -> (u64, u64) {
    xs.sort_unstable();
    let p99 = xs
        .get((xs.len() * 99 / 100).min(xs.len().saturating_sub(1)))
        .copied()
        .unwrap_or(0);
    (median(xs), p99)
}

fn row(
    runtime: String,
    clients: usize,
    threads: usize,
    seconds: f64,
    mut latencies: Vec<u64>,
    rss: (u64, u64),
    equal: bool,
) -> ServeRow {
    let requests = latencies.len() as u64;
    let (p50_ns, p99_ns) = percentiles(&mut latencies);
    ServeRow {
        runtime,
        clients,
        threads,
        requests,
        throughput_per_s: requests as f64 / seconds,
        p50_ns,
        p99_ns,
        peak_rss_bytes: rss.1,
        rss_growth_bytes: rss.0,
        budget_bytes: None,
        peak_reserved_bytes: None,
        bitwise_equal: equal,
    }
}

/// The whole model's answer, in a session of `runtime`.
fn reference(runtime: &Runtime, manifest: &Manifest) -> Result<Vec<Vec<u8>>, String> {
    let config = SessionConfig {
        intra_threads: 1,
        ..Default::default()
    };
    let session = runtime.session(&manifest.dir.join(&manifest.prepared), config)?;
    WholeModel::new(runtime, session, manifest).run(true)
}

fn serve_graphsched(
    manifest: &Manifest,
    library: &Path,
    clients: usize,
    seconds: f64,
    threads: usize,
) -> Result<ServeRow, String> {
    let choice = Choice::load(&manifest.dir, threads)?;
    let clusters = Manifest::load(&clusters_dir(&manifest.dir, threads))?;
    let intra = serving_way(&choice, clients, threads) == Way::IntraOp;
    let pool = OwnedPool::new()?;
    let runtime = Runtime::load_with(library, intra.then_some(threads), Some(pool.handle()))?;
    let want = reference(&runtime, manifest)?;
    let config = SessionConfig {
        intra_threads: 1,
        global_threads: intra,
        arena: Arena::Shared,
        value_by_value: true,
        ..Default::default()
    };
    let graph = OnnxGraph::build(&runtime, &clusters, config)?;
    let mut executor = std::ptr::null_mut();
    let ec = gs_executor_config {
        threads: threads as u32,
    };
    // SAFETY: readable config, writable out pointer.
    gs_check(unsafe { gs_executor_new(&ec, &mut executor) }, "gs_executor_new")?;
    let executor = Executor(executor);
    // One request's bound: the max-live bound of a memory-aware order (a plan tells it).
    let mut plan = std::ptr::null_mut();
    let mut bound = 0u64;
    // SAFETY: a finalized graph and writable out pointers; the plan is freed at once.
    unsafe {
        gs_check(
            gs_plan_new(graph.handle(), GS_PLAN_SEQUENTIAL_MEMORY_ORDER, &mut plan),
            "gs_plan_new",
        )?;
        let read = gs_plan_bytes(plan, std::ptr::null_mut(), &mut bound);
        gs_plan_free(plan);
        gs_check(read, "gs_plan_bytes")?;
    }
    let budget = bound.max(1) * threads as u64;
    // SAFETY: a live executor.
    let status = unsafe { gs_executor_set_memory_budget(executor.0, budget) };
    gs_check(status, "gs_executor_set_memory_budget")?;
    // One set of inputs for every request (kernels only read them), at one address each, as the
    // sessions' cached tensors like: as (value, address, length), addresses as numbers (the
    // closure below is shared by the clients' threads).
    let mut inputs: Vec<Aligned> = manifest.input_bytes().iter().map(|b| Aligned::from(b)).collect();
    let bound: Vec<(ValueRef, usize, usize)> = graph
        .inputs
        .iter()
        .zip(&mut inputs)
        .map(|(&v, input)| (v, input.ptr() as usize, input.bytes().len()))
        .collect();
    // Handles as numbers: the C API is thread-safe, the Rust wrappers do not say so.
    let (g, p, e) = (graph.handle() as usize, pool.handle() as usize, executor.0 as usize);
    let outputs: Vec<_> = graph.outputs.iter().map(|o| o.value).collect();
    let request = |_client: usize, keep: bool| -> Result<Option<Answer>, String> {
        let bindings: Vec<gs_input_binding> = bound
            .iter()
            .map(|&(value, ptr, len)| gs_input_binding {
                value,
                tensor: Tensor::new(ptr as *mut std::ffi::c_void, len),
            })
            .collect();
        let options = gs_run_options {
            inputs: bindings.as_ptr(),
            num_inputs: bindings.len(),
            executor: e as *mut gs_executor,
            ..Default::default()
        };
        let mut result = std::ptr::null_mut();
        // SAFETY: live graph, pool and executor (they outlive the clients); the binding outlives
        // the call.
        let status = unsafe { gs_run(g as *const gs_graph, p as *mut gs_pool, &options, &mut result) };
        gs_check(status, "gs_run")?;
        let mut answer = Vec::new();
        if keep {
            for &out in &outputs {
                let mut t = Tensor::empty();
                // SAFETY: a live result; the bytes are copied before it is freed.
                unsafe {
                    gs_check(gs_result_output(result, out, &mut t), "gs_result_output")?;
                    answer.push(std::slice::from_raw_parts(t.data.cast::<u8>(), t.nbytes).to_vec());
                }
            }
        }
        // SAFETY: made by gs_run above, freed once.
        unsafe { gs_result_free(result) };
        Ok(keep.then_some(answer))
    };
    request(0, false)?; // warm
    let start_rss = rss_now();
    let (latencies, answers) = closed_loop(clients, seconds, &request)?;
    let rss = (rss_peak().saturating_sub(start_rss), rss_peak());
    let equal = !answers.is_empty() && answers.iter().all(|a| *a == want);
    let (mut peak_reserved, mut budget_now) = (0u64, 0u64);
    // SAFETY: a live executor, writable out pointers.
    unsafe { gs_executor_memory_budget(executor.0, &mut budget_now, std::ptr::null_mut(), &mut peak_reserved) };
    let name = format!(
        "graphsched ({} clusters, {})",
        clusters.nodes.len(),
        if intra { "intra-op pool" } else { "executor" }
    );
    let mut r = row(name, clients, threads, seconds, latencies, rss, equal);
    r.budget_bytes = Some(budget_now);
    r.peak_reserved_bytes = Some(peak_reserved);
    Ok(r)
}

/// How to run the clusters for `clients` requests at once. The choice was made for one request
/// at a time; once the clients alone fill the threads, ONNX Runtime's intra-op pool only
/// oversubscribes them, so each cluster's session keeps to its request's thread (the same
/// cluster models, run on the executor's way).
fn serving_way(choice: &Choice, clients: usize, threads: usize) -> Way {
    match choice.chosen.way {
        Way::IntraOp if clients >= threads => Way::Executor,
        way => way,
    }
}

/// An executor, freed on drop.
struct Executor(*mut gs_executor);

impl Drop for Executor {
    fn drop(&mut self) {
        // SAFETY: made above, freed once, after every run.
        unsafe { gs_executor_free(self.0) }
    }
}

fn serve_ort(
    manifest: &Manifest,
    library: &Path,
    server: Server,
    clients: usize,
    seconds: f64,
    threads: usize,
) -> Result<ServeRow, String> {
    let runtime = Runtime::load(library, None)?;
    let want = reference(&runtime, manifest)?;
    let intra = if server == Server::OrtIntra { threads } else { 1 };
    let config = SessionConfig {
        intra_threads: intra,
        arena: Arena::Own,
        ..Default::default()
    };
    let session = runtime.session(&manifest.dir.join(&manifest.prepared), config)?;
    // One WholeModel per client (its own output buffers), all over the one session.
    let sessions: Vec<Mutex<WholeModel<'_>>> = (0..clients)
        .map(|_| Ok(Mutex::new(WholeModel::shared(&runtime, &session, manifest))))
        .collect::<Result<_, String>>()?;
    let request = |client: usize, keep: bool| -> Result<Option<Answer>, String> {
        let out = sessions[client].lock().unwrap().run(keep)?;
        Ok(keep.then_some(out))
    };
    request(0, false)?;
    let start_rss = rss_now();
    let (latencies, answers) = closed_loop(clients, seconds, &request)?;
    let rss = (rss_peak().saturating_sub(start_rss), rss_peak());
    let equal = !answers.is_empty() && answers.iter().all(|a| *a == want);
    let name = format!(
        "onnxruntime (one shared session, {intra} intra-op thread{})",
        if intra == 1 { "" } else { "s" }
    );
    Ok(row(name, clients, threads, seconds, latencies, rss, equal))
}

fn rss_now() -> u64 {
    crate::measure::rss::status_kib("VmRSS:") * 1024
}

fn rss_peak() -> u64 {
    crate::measure::rss::status_kib("VmHWM:") * 1024
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::partition::Proposal;

    fn proposal(way: Way, clusters: Vec<Vec<usize>>) -> Proposal {
        Proposal {
            way,
            threads: 2,
            call_cost_ns: 1000,
            empty_call_ns: 0,
            nodes: 3,
            clusters,
            before_ns: 100,
            after_ns: 50,
            after_peak_bytes: 0,
        }
    }

    #[test]
    fn clients_that_fill_the_threads_keep_each_session_on_its_own() {
        let one = vec![vec![0, 1, 2]];
        let choice = Choice {
            chosen: proposal(Way::IntraOp, one.clone()),
            considered: vec![proposal(Way::Executor, vec![vec![0], vec![1, 2]])],
        };
        assert_eq!(serving_way(&choice, 1, 2), Way::IntraOp, "one request: as chosen");
        assert_eq!(serving_way(&choice, 2, 2), Way::Executor);
        let executor = Choice {
            chosen: proposal(Way::Executor, one),
            considered: Vec::new(),
        };
        assert_eq!(serving_way(&executor, 1, 2), Way::Executor);
        assert_eq!(percentiles(&mut [5, 1, 3, 2, 4]), (3, 5));
    }
}
