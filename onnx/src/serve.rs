//! `--serve`: many requests at once, as a server meets them. N closed-loop clients each send
//! requests back to back for T seconds; each configuration runs in a process of its own (its
//! peak RSS its own), and every client's first answer is checked bit for bit.
//!
//! - graphsched: the clusters it chose for the thread count (`--partition`), one executor and
//!   one pool for every client, the executor's memory budget set to one request's bound times
//!   the threads (what graphsched admits: the values between clusters; the clusters' internal
//!   values come from the same pool through the `OrtAllocator`, outside the budget, as one
//!   block a cluster's run with ONNX Runtime's memory pattern);
//! - ONNX Runtime: one session of the whole model shared by every client (concurrent `Run`),
//!   with one intra-op thread, and with the threads as intra-op threads.
//!
//! With a priority stream (`--priority-model`), one more closed-loop client sends another
//! model's requests: to graphsched at `GS_PRIORITY_HIGH`, on the same executor and pool (that
//! model's own clusters; the budget has room for its request besides the others'); to ONNX Runtime as a
//! second session, with one intra-op thread and with the threads (it has no priorities: which
//! setting serves it best is measured, not guessed). Its latencies are reported apart.

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
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
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

    /// The name a child process is given.
    pub fn key(self) -> &'static str {
        Server::ALL.iter().find(|(_, s)| *s == self).map_or("gs", |(k, _)| *k)
    }
}

/// One server to measure, in a child process of its own.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Job {
    pub server: Server,
    /// With the priority client.
    pub priority: bool,
    /// ONNX Runtime, with the priority client: its session's intra-op threads (graphsched: 0).
    pub priority_intra: usize,
}

/// The servers to measure: every server without a priority client; with `priority`, then
/// graphsched with it, and ONNX Runtime's two sessions with its second session on one intra-op
/// thread and on `threads` (the rows without it are what the priority client costs the others).
pub fn jobs(priority: bool, threads: usize) -> Vec<Job> {
    let mut jobs: Vec<Job> = Server::ALL
        .iter()
        .map(|&(_, server)| Job {
            server,
            priority: false,
            priority_intra: 0,
        })
        .collect();
    if priority {
        jobs.push(Job {
            server: Server::Graphsched,
            priority: true,
            priority_intra: 0,
        });
        let mut intra = vec![1, threads.max(1)];
        intra.dedup();
        for server in [Server::OrtShared, Server::OrtIntra] {
            for &priority_intra in &intra {
                jobs.push(Job {
                    server,
                    priority: true,
                    priority_intra,
                });
            }
        }
    }
    jobs
}

/// The priority stream a child serves besides the clients.
pub struct Priority<'m> {
    /// The model its requests run (its prepared directory, partitioned too).
    pub manifest: &'m Manifest,
    /// ONNX Runtime: the second session's intra-op threads.
    pub ort_intra_threads: usize,
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
    /// The priority client, when one ran: its model, how it was served, its requests, their
    /// latencies (median, 99th percentile), and its first answer checked like the others'.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub priority_model: Option<String>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub priority_runtime: Option<String>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub priority_requests: Option<u64>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub priority_throughput_per_s: Option<f64>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub priority_p50_ns: Option<u64>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub priority_p99_ns: Option<u64>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub priority_bitwise_equal: Option<bool>,
    /// graphsched: how long a request waited to enter the budget, on average (the priority
    /// client's apart).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub budget_wait_ns_mean: Option<u64>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub priority_budget_wait_ns_mean: Option<u64>,
    /// While serving, per request answered (the priority client's included): the process's
    /// CPU time (every thread's, user and system), context switches (voluntary: a thread
    /// blocked; involuntary: it was preempted) and minor page faults, from `getrusage`.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub cpu_ns_per_request: Option<f64>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub voluntary_switches_per_request: Option<f64>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub involuntary_switches_per_request: Option<f64>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub minor_faults_per_request: Option<f64>,
}

/// What the process has spent so far, every thread's (ended ones included).
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
struct Usage {
    cpu_ns: u64,
    voluntary: u64,
    involuntary: u64,
    minor_faults: u64,
}

impl Usage {
    /// `getrusage(RUSAGE_SELF)`; zeros where it is not known.
    fn now() -> Usage {
        #[cfg(all(target_os = "linux", target_pointer_width = "64"))]
        {
            /// `struct rusage` on 64-bit Linux: two `timeval`s, then 14 `long`s.
            #[repr(C)]
            struct RUsage([i64; 18]);
            extern "C" {
                fn getrusage(who: i32, usage: *mut RUsage) -> i32;
            }
            let mut u = RUsage([0; 18]);
            // SAFETY: RUSAGE_SELF (0), and a writable struct of the kernel's layout and size.
            if unsafe { getrusage(0, &mut u) } == 0 {
                let f = u.0.map(|x| x.max(0) as u64);
                return Usage {
                    cpu_ns: (f[0] + f[2]) * 1_000_000_000 + (f[1] + f[3]) * 1_000,
                    minor_faults: f[8],
                    voluntary: f[16],
                    involuntary: f[17],
                };
            }
        }
        Usage::default()
    }

    /// What was spent since `before`.
    fn since(self, before: Usage) -> Usage {
        Usage {
            cpu_ns: self.cpu_ns.saturating_sub(before.cpu_ns),
            voluntary: self.voluntary.saturating_sub(before.voluntary),
            involuntary: self.involuntary.saturating_sub(before.involuntary),
            minor_faults: self.minor_faults.saturating_sub(before.minor_faults),
        }
    }
}

/// Fills in what serving `requests` requests (every stream's) spent.
fn add_usage(row: &mut ServeRow, spent: Usage, requests: u64) {
    if spent == Usage::default() || requests == 0 {
        return;
    }
    let per = |x: u64| Some(x as f64 / requests as f64);
    row.cpu_ns_per_request = per(spent.cpu_ns);
    row.voluntary_switches_per_request = per(spent.voluntary);
    row.involuntary_switches_per_request = per(spent.involuntary);
    row.minor_faults_per_request = per(spent.minor_faults);
}

/// How much a server is asked to serve, and with what.
#[derive(Clone, Copy, Debug)]
pub struct Load {
    /// Closed-loop clients (the priority client apart).
    pub clients: usize,
    /// Seconds measured.
    pub seconds: f64,
    /// The server's threads.
    pub threads: usize,
    /// graphsched's memory budget in bytes (0: none); by default one request's bound times the
    /// threads, and the priority model's bound besides.
    pub budget: Option<u64>,
}

/// In a child process: serves `load` (and the `priority` client) with `server`.
pub fn serve(
    manifest: &Manifest,
    library: &Path,
    server: Server,
    load: Load,
    priority: Option<Priority<'_>>,
) -> Result<ServeRow, String> {
    if load.clients == 0 {
        return Err("--clients must be at least 1".into());
    }
    match server {
        Server::Graphsched => serve_graphsched(manifest, library, load, priority),
        Server::OrtShared | Server::OrtIntra => serve_ort(manifest, library, server, load, priority),
    }
}

/// One request's answer: every output's bytes.
type Answer = Vec<Vec<u8>>;

/// Answers one request of a client (`request(client, check)`), its output bytes when `check`.
type Request<'a> = &'a (dyn Fn(usize, bool) -> Result<Option<Answer>, String> + Sync);

/// What one stream of clients saw: every request's latency, and each client's first answer.
#[derive(Debug, Default)]
struct Served {
    latencies: Vec<u64>,
    answers: Vec<Answer>,
}

/// Streams of closed-loop clients, all at once: `(clients, request)` each, every client
/// sending requests back to back until `seconds` pass. What each stream saw, in order.
fn closed_loop(seconds: f64, streams: &[(usize, Request<'_>)]) -> Result<Vec<Served>, String> {
    let stop = AtomicBool::new(false);
    let served: Vec<Mutex<Served>> = streams.iter().map(|_| Mutex::new(Served::default())).collect();
    let failure = Mutex::new(None);
    std::thread::scope(|s| {
        for (&(clients, request), served) in streams.iter().zip(&served) {
            for c in 0..clients {
                let (stop, failure) = (&stop, &failure);
                s.spawn(move || {
                    let mut mine = Vec::new();
                    let mut first = true;
                    while !stop.load(Ordering::Relaxed) {
                        let start = Instant::now();
                        match request(c, first) {
                            Ok(out) => {
                                mine.push(start.elapsed().as_nanos() as u64);
                                if let Some(out) = out {
                                    served.lock().unwrap().answers.push(out);
                                }
                            }
                            Err(e) => {
                                *failure.lock().unwrap() = Some(e);
                                stop.store(true, Ordering::Relaxed);
                            }
                        }
                        first = false;
                    }
                    served.lock().unwrap().latencies.extend(mine);
                });
            }
        }
        // Until the time is up, or a failed request stopped the clients.
        let end = Instant::now() + Duration::from_secs_f64(seconds);
        while !stop.load(Ordering::Relaxed) {
            let left = end.saturating_duration_since(Instant::now());
            if left.is_zero() {
                break;
            }
            std::thread::sleep(left.min(Duration::from_millis(10)));
        }
        stop.store(true, Ordering::Relaxed);
    });
    if let Some(e) = failure.into_inner().unwrap() {
        return Err(e);
    }
    Ok(served.into_iter().map(|s| s.into_inner().unwrap()).collect())
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

/// Every answer `served` checked equals `want` (and there is one).
fn all_equal(served: &Served, want: &Answer) -> bool {
    !served.answers.is_empty() && served.answers.iter().all(|a| a == want)
}

fn row(
    runtime: String,
    clients: usize,
    threads: usize,
    seconds: f64,
    served: &mut Served,
    rss: (u64, u64),
) -> ServeRow {
    let requests = served.latencies.len() as u64;
    let (p50_ns, p99_ns) = percentiles(&mut served.latencies);
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
        bitwise_equal: false,
        priority_model: None,
        priority_runtime: None,
        priority_requests: None,
        priority_throughput_per_s: None,
        priority_p50_ns: None,
        priority_p99_ns: None,
        priority_bitwise_equal: None,
        budget_wait_ns_mean: None,
        priority_budget_wait_ns_mean: None,
        cpu_ns_per_request: None,
        voluntary_switches_per_request: None,
        involuntary_switches_per_request: None,
        minor_faults_per_request: None,
    }
}

/// Fills in the priority stream's figures.
fn add_priority(row: &mut ServeRow, model: &str, runtime: String, seconds: f64, served: &mut Served, equal: bool) {
    let (p50, p99) = percentiles(&mut served.latencies);
    row.priority_model = Some(model.to_string());
    row.priority_runtime = Some(runtime);
    row.priority_requests = Some(served.latencies.len() as u64);
    row.priority_throughput_per_s = Some(served.latencies.len() as f64 / seconds);
    row.priority_p50_ns = Some(p50);
    row.priority_p99_ns = Some(p99);
    row.priority_bitwise_equal = Some(equal);
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

/// One model graphsched serves: its cluster graph, its input, its reference answer.
struct GsModel<'r> {
    graph: OnnxGraph<'r>,
    /// The graph inputs' bytes, in the manifest's order.
    inputs: Vec<Aligned>,
    want: Answer,
    name: String,
    /// One request's bound: the max-live bound of a memory-aware order (a plan tells it).
    bound: u64,
}

impl<'r> GsModel<'r> {
    fn build(runtime: &'r Runtime, manifest: &Manifest, threads: usize, intra: bool) -> Result<GsModel<'r>, String> {
        let clusters = Manifest::load(&clusters_dir(&manifest.dir, threads))?;
        let want = reference(runtime, manifest)?;
        // Memory from graphsched's pool, and ONNX Runtime's memory pattern on: each cluster's
        // run takes its values as one planned block, not value by value. Side by side on cls at
        // 2 clients (3 rounds, quiet machine), value by value cost 1,020-1,070 us of CPU a
        // request against 890-900 with the pattern (whose throughput matched ONNX Runtime's own
        // session, 2,210-2,240 against 2,250-2,260 req/s), with graphsched's pool or ONNX
        // Runtime's arena alike; one request at a time shows no difference. On det the two
        // served the same (19.5 req/s).
        let config = SessionConfig {
            intra_threads: 1,
            global_threads: intra,
            arena: Arena::Shared,
            value_by_value: false,
            ..Default::default()
        };
        let graph = OnnxGraph::build(runtime, &clusters, config)?;
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
        Ok(GsModel {
            graph,
            // One set of inputs for every request (kernels only read them), at one address
            // each, as the sessions' cached tensors like.
            inputs: manifest.input_bytes().iter().map(|b| Aligned::from(b)).collect(),
            want,
            name: format!(
                "{} clusters, {}",
                clusters.nodes.len(),
                if intra { "intra-op pool" } else { "executor" }
            ),
            bound,
        })
    }

    /// How clients send this model's requests: on `executor`, from `pool`, at `priority`.
    fn requests(&mut self, pool: *mut gs_pool, executor: *mut gs_executor, priority: u32) -> GsRequests {
        GsRequests {
            graph: self.graph.handle() as usize,
            pool: pool as usize,
            executor: executor as usize,
            inputs: self
                .graph
                .inputs
                .iter()
                .zip(&mut self.inputs)
                .map(|(&v, input)| (v, input.ptr() as usize, input.bytes().len()))
                .collect(),
            outputs: self.graph.outputs.iter().map(|o| o.value).collect(),
            priority,
            waited_ns: AtomicU64::new(0),
        }
    }
}

/// One model's requests to graphsched. Handles as numbers: the C API is thread-safe, the Rust
/// wrappers do not say so; the graph, pool, executor and input outlive the clients.
struct GsRequests {
    graph: usize,
    pool: usize,
    executor: usize,
    /// Each graph input's value, address and length.
    inputs: Vec<(ValueRef, usize, usize)>,
    outputs: Vec<ValueRef>,
    priority: u32,
    /// Nanoseconds the requests waited to enter the budget, all together.
    waited_ns: AtomicU64,
}

impl GsRequests {
    fn request(&self, keep: bool) -> Result<Option<Answer>, String> {
        let bindings: Vec<gs_input_binding> = self
            .inputs
            .iter()
            .map(|&(value, ptr, len)| gs_input_binding {
                value,
                tensor: Tensor::new(ptr as *mut std::ffi::c_void, len),
            })
            .collect();
        let options = gs_run_options {
            inputs: bindings.as_ptr(),
            num_inputs: bindings.len(),
            executor: self.executor as *mut gs_executor,
            priority: self.priority,
            ..Default::default()
        };
        let mut result = std::ptr::null_mut();
        // SAFETY: live graph, pool and executor (they outlive the clients); the binding outlives
        // the call.
        let status = unsafe {
            gs_run(
                self.graph as *const gs_graph,
                self.pool as *mut gs_pool,
                &options,
                &mut result,
            )
        };
        gs_check(status, "gs_run")?;
        let mut waited = 0;
        // SAFETY: a live result, a writable out pointer.
        if unsafe { gs_result_budget_wait_ns(result, &mut waited) } == gs_status::GS_OK {
            self.waited_ns.fetch_add(waited, Ordering::Relaxed);
        }
        let mut answer = Vec::new();
        if keep {
            for &out in &self.outputs {
                let mut t = Tensor::empty();
                // SAFETY: a live result; the bytes are copied before it is freed.
                let read = unsafe { gs_result_output(result, out, &mut t) };
                if let Err(e) = gs_check(read, "gs_result_output") {
                    // SAFETY: made by gs_run above, freed once.
                    unsafe { gs_result_free(result) };
                    return Err(e);
                }
                // SAFETY: the result is live, its output `nbytes` long.
                answer.push(unsafe { std::slice::from_raw_parts(t.data.cast::<u8>(), t.nbytes) }.to_vec());
            }
        }
        // SAFETY: made by gs_run above, freed once.
        unsafe { gs_result_free(result) };
        Ok(keep.then_some(answer))
    }
}

fn serve_graphsched(
    manifest: &Manifest,
    library: &Path,
    load: Load,
    priority: Option<Priority<'_>>,
) -> Result<ServeRow, String> {
    let Load {
        clients,
        seconds,
        threads,
        ..
    } = load;
    // Requests at once, the priority client's included.
    let at_once = clients + usize::from(priority.is_some());
    let intra = serving_way(&Choice::load(&manifest.dir, threads)?, at_once, threads) == Way::IntraOp;
    let priority_intra = match &priority {
        Some(p) => serving_way(&Choice::load(&p.manifest.dir, threads)?, at_once, threads) == Way::IntraOp,
        None => false,
    };
    let pool = OwnedPool::new()?;
    let runtime = Runtime::load_with(
        library,
        (intra || priority_intra).then_some(threads),
        Some(pool.handle()),
    )?;
    let mut main = GsModel::build(&runtime, manifest, threads, intra)?;
    let mut high = match &priority {
        Some(p) => Some(GsModel::build(&runtime, p.manifest, threads, priority_intra)?),
        None => None,
    };
    let mut executor = std::ptr::null_mut();
    let ec = gs_executor_config {
        threads: threads as u32,
    };
    // SAFETY: readable config, writable out pointer.
    gs_check(unsafe { gs_executor_new(&ec, &mut executor) }, "gs_executor_new")?;
    let executor = Executor(executor);
    // The budget: one request's bound times the threads, and room for the priority client's
    // request besides. Runs enter first come, first served whatever their priority: in a budget
    // the normal runs can fill, an urgent request waits for a normal one to finish (on det, a
    // whole request: p99 230 ms for cls in a first measurement).
    let budget = load
        .budget
        .unwrap_or(main.bound.max(1) * threads as u64 + high.as_ref().map_or(0, |h| h.bound));
    // SAFETY: a live executor.
    let status = unsafe { gs_executor_set_memory_budget(executor.0, budget) };
    gs_check(status, "gs_executor_set_memory_budget")?;
    let normal = main.requests(pool.handle(), executor.0, GS_PRIORITY_NORMAL);
    let urgent = high
        .as_mut()
        .map(|h| h.requests(pool.handle(), executor.0, GS_PRIORITY_HIGH));
    normal.request(false)?; // warm
    normal.waited_ns.store(0, Ordering::Relaxed);
    if let Some(u) = &urgent {
        u.request(false)?;
        u.waited_ns.store(0, Ordering::Relaxed);
    }
    let start_rss = rss_now();
    let send = |_client: usize, keep: bool| normal.request(keep);
    let send_urgent = |_client: usize, keep: bool| urgent.as_ref().map_or(Ok(None), |u| u.request(keep));
    let mut streams: Vec<(usize, Request<'_>)> = vec![(clients, &send)];
    if urgent.is_some() {
        streams.push((1, &send_urgent));
    }
    let before = Usage::now();
    let mut served = closed_loop(seconds, &streams)?;
    let spent = Usage::now().since(before);
    let rss = (rss_peak().saturating_sub(start_rss), rss_peak());
    let (mut peak_reserved, mut budget_now) = (0u64, 0u64);
    // SAFETY: a live executor, writable out pointers.
    unsafe { gs_executor_memory_budget(executor.0, &mut budget_now, std::ptr::null_mut(), &mut peak_reserved) };
    let name = format!("graphsched ({})", main.name);
    let mut r = row(name, clients, threads, seconds, &mut served[0], rss);
    r.bitwise_equal = all_equal(&served[0], &main.want);
    add_usage(&mut r, spent, served.iter().map(|s| s.latencies.len() as u64).sum());
    let mean = |r: &GsRequests, s: &Served| r.waited_ns.load(Ordering::Relaxed) / (s.latencies.len() as u64).max(1);
    r.budget_wait_ns_mean = Some(mean(&normal, &served[0]));
    if let Some(u) = &urgent {
        r.priority_budget_wait_ns_mean = Some(mean(u, &served[1]));
    }
    r.budget_bytes = Some(budget_now);
    r.peak_reserved_bytes = Some(peak_reserved);
    if let (Some(p), Some(h)) = (&priority, &high) {
        let equal = all_equal(&served[1], &h.want);
        let how = format!("high priority, same executor ({})", h.name);
        add_priority(&mut r, &p.manifest.model, how, seconds, &mut served[1], equal);
    }
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

fn intra_name(intra: usize) -> String {
    format!("{intra} intra-op thread{}", if intra == 1 { "" } else { "s" })
}

fn serve_ort(
    manifest: &Manifest,
    library: &Path,
    server: Server,
    load: Load,
    priority: Option<Priority<'_>>,
) -> Result<ServeRow, String> {
    let Load {
        clients,
        seconds,
        threads,
        ..
    } = load;
    let runtime = Runtime::load(library, None)?;
    let want = reference(&runtime, manifest)?;
    let intra = if server == Server::OrtIntra { threads } else { 1 };
    let config = |intra_threads: usize| SessionConfig {
        intra_threads,
        arena: Arena::Own,
        ..Default::default()
    };
    let session = runtime.session(&manifest.dir.join(&manifest.prepared), config(intra))?;
    // One WholeModel per client (its own output buffers), all over the one session.
    let sessions: Vec<Mutex<WholeModel<'_>>> = (0..clients)
        .map(|_| Mutex::new(WholeModel::shared(&runtime, &session, manifest)))
        .collect();
    // The priority client's model: a second session, its reference.
    let second = match &priority {
        Some(p) => {
            let want = reference(&runtime, p.manifest)?;
            let s = runtime.session(&p.manifest.dir.join(&p.manifest.prepared), config(p.ort_intra_threads))?;
            Some((Mutex::new(WholeModel::new(&runtime, s, p.manifest)), want))
        }
        None => None,
    };
    let request = |client: usize, keep: bool| -> Result<Option<Answer>, String> {
        let out = sessions[client].lock().unwrap().run(keep)?;
        Ok(keep.then_some(out))
    };
    let urgent = |_client: usize, keep: bool| -> Result<Option<Answer>, String> {
        match &second {
            Some((s, _)) => {
                let out = s.lock().unwrap().run(keep)?;
                Ok(keep.then_some(out))
            }
            None => Ok(None),
        }
    };
    request(0, false)?;
    urgent(0, false)?;
    let start_rss = rss_now();
    let mut streams: Vec<(usize, Request<'_>)> = vec![(clients, &request)];
    if second.is_some() {
        streams.push((1, &urgent));
    }
    let before = Usage::now();
    let mut served = closed_loop(seconds, &streams)?;
    let spent = Usage::now().since(before);
    let rss = (rss_peak().saturating_sub(start_rss), rss_peak());
    let name = format!("onnxruntime (one shared session, {})", intra_name(intra));
    let mut r = row(name, clients, threads, seconds, &mut served[0], rss);
    r.bitwise_equal = all_equal(&served[0], &want);
    add_usage(&mut r, spent, served.iter().map(|s| s.latencies.len() as u64).sum());
    if let (Some(p), Some((_, want))) = (&priority, &second) {
        let equal = all_equal(&served[1], want);
        let how = format!("a second session, {}", intra_name(p.ort_intra_threads));
        add_priority(&mut r, &p.manifest.model, how, seconds, &mut served[1], equal);
    }
    Ok(r)
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

    #[test]
    fn without_a_priority_model_the_servers_are_as_before_and_with_one_each_runs_both_ways() {
        let keys = |jobs: &[Job]| -> Vec<(&str, bool, usize)> {
            jobs.iter()
                .map(|j| (j.server.key(), j.priority, j.priority_intra))
                .collect()
        };
        let plain = vec![("gs", false, 0), ("ort-shared", false, 0), ("ort-intra", false, 0)];
        assert_eq!(keys(&jobs(false, 2)), plain);
        let mut with = plain.clone();
        with.extend([
            ("gs", true, 0),
            ("ort-shared", true, 1),
            ("ort-shared", true, 2),
            ("ort-intra", true, 1),
            ("ort-intra", true, 2),
        ]);
        assert_eq!(keys(&jobs(true, 2)), with);
        // One thread: the second session's one setting once.
        let one = jobs(true, 1);
        assert_eq!(one.len(), 3 + 1 + 2);
        for (k, _) in Server::ALL {
            assert_eq!(Server::parse(Server::parse(k).unwrap().key()), Server::parse(k));
        }
    }

    #[test]
    fn each_stream_keeps_its_own_latencies_and_first_answers() {
        // Two clients of 1 ms requests, one priority client of 3 ms: every client checks its
        // first answer only, and the streams' latencies stay apart.
        let slow = |c: usize, keep: bool| -> Result<Option<Answer>, String> {
            std::thread::sleep(Duration::from_millis(1));
            Ok(keep.then(|| vec![vec![c as u8]]))
        };
        let urgent = |_: usize, keep: bool| -> Result<Option<Answer>, String> {
            std::thread::sleep(Duration::from_millis(3));
            Ok(keep.then(|| vec![vec![9]]))
        };
        let mut served = closed_loop(0.2, &[(2, &slow), (1, &urgent)]).unwrap();
        assert_eq!(served.len(), 2);
        let mut firsts = served[0].answers.clone();
        firsts.sort();
        assert_eq!(firsts, vec![vec![vec![0]], vec![vec![1]]]);
        assert_eq!(served[1].answers, vec![vec![vec![9]]]);
        assert!(served[0].latencies.len() > served[1].latencies.len());
        assert!(served[1].latencies.iter().all(|&ns| ns >= 3_000_000));
        let mut row = row("x".into(), 2, 2, 0.2, &mut served[0], (0, 0));
        assert!(!row.bitwise_equal, "set by the server from its reference");
        assert!(row.priority_p99_ns.is_none());
        let text = serde_json::to_string(&row).unwrap();
        assert!(
            !text.contains("priority"),
            "rows without a priority client print as before: {text}"
        );
        let n = served[1].latencies.len() as u64;
        add_priority(&mut row, "cls", "high".into(), 0.2, &mut served[1], true);
        assert_eq!(row.priority_requests, Some(n));
        assert!(row.priority_p50_ns.unwrap() >= 3_000_000);
        assert!(row.priority_p99_ns >= row.priority_p50_ns);
        assert!(row.p50_ns < row.priority_p50_ns.unwrap(), "the streams were not mixed");
        let before = Usage::now();
        let spin = Instant::now();
        while spin.elapsed() < Duration::from_millis(20) {
            std::hint::spin_loop();
        }
        let spent = Usage::now().since(before);
        if cfg!(target_os = "linux") {
            assert!(spent.cpu_ns >= 10_000_000, "20 ms of spinning is CPU time: {spent:?}");
        }
        add_usage(&mut row, spent, 4);
        assert_eq!(row.cpu_ns_per_request, Some(spent.cpu_ns as f64 / 4.0));
        let back: ServeRow = serde_json::from_str(&serde_json::to_string(&row).unwrap()).unwrap();
        assert_eq!(back.priority_p99_ns, row.priority_p99_ns);
        assert_eq!(back.priority_model.as_deref(), Some("cls"));
    }

    #[test]
    fn a_failing_request_stops_every_stream_and_is_reported() {
        let fine = |_: usize, _: bool| -> Result<Option<Answer>, String> {
            std::thread::sleep(Duration::from_millis(1));
            Ok(None)
        };
        let fails = |_: usize, _: bool| -> Result<Option<Answer>, String> { Err("broken".into()) };
        let start = Instant::now();
        assert_eq!(closed_loop(5.0, &[(2, &fine), (1, &fails)]).unwrap_err(), "broken");
        assert!(
            start.elapsed() < Duration::from_secs(4),
            "no need to serve the time out"
        );
    }
}
