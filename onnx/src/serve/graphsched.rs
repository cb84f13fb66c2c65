//! The graphsched server: each model's cluster graph (`GsModel`), its clients' requests on the
//! one executor and pool (`GsRequests`), the way its clusters run when serving, and the serving
//! itself under the executor's memory budget.

use super::closed_loop::{all_equal, closed_loop, Answer, Request, Served};
use super::ort::reference;
use super::row::{add_priority, add_usage, row, ServeRow};
use super::usage::{rss_now, rss_peak, Usage};
use super::{Load, Priority};
use crate::graph::{gs_check, OnnxGraph};
use crate::manifest::Manifest;
use crate::ort_api::{Arena, Runtime, SessionConfig};
use crate::partition::{clusters_dir, Choice, Way};
use crate::pool_allocator::{added_at_peak, OwnedPool};
use crate::run::Aligned;
use graphsched::ffi::*;
use graphsched::{Tensor, ValueRef};
use std::path::Path;
use std::sync::atomic::{AtomicU64, Ordering};

/// One model graphsched serves: its cluster graph, its input, its reference answer.
struct GsModel<'r> {
    graph: OnnxGraph<'r>,
    /// The graph inputs' bytes, in the manifest's order.
    inputs: Vec<Aligned>,
    want: Answer,
    name: String,
    /// One request's bound: the max-live bound of a memory-aware order (a plan tells it).
    bound: u64,
    /// What one request holds in the pool at its peak, its clusters' internal values included
    /// (`measure_need`): what it reserves of the budget.
    need: u64,
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
            need: bound,
        })
    }

    /// Measures what one request holds in `pool` at its peak, alone, on its caller and on
    /// `executor` (the higher of the two): its values and its clusters' internal values, which
    /// ONNX Runtime's sessions take from the pool inside each call, where the graph's bound sees
    /// only the values between clusters (cls: 8 bytes of its one cluster's output).
    fn measure_need(&mut self, pool: *mut gs_pool, executor: *mut gs_executor) -> Result<(), String> {
        let mut need = self.bound;
        for on in [std::ptr::null_mut(), executor] {
            let requests = self.requests(pool, on, GS_PRIORITY_NORMAL);
            need = need.max(added_at_peak(pool, || requests.request(false))?);
        }
        self.need = need;
        Ok(())
    }

    /// How clients send this model's requests: on `executor`, from `pool`, at `priority`, each
    /// reserving [`need`](Self::need) of the budget.
    fn requests(&mut self, pool: *mut gs_pool, executor: *mut gs_executor, priority: u32) -> GsRequests {
        GsRequests {
            limit: self.need,
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
    /// The memory limit of each request, which is also what it reserves of the budget.
    limit: u64,
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
            memory_limit_bytes: self.limit,
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

/// The nice value of the executor's threads while a priority client is served: the OS gives a
/// thread at 0 about nine times the CPU of one at 10, so the urgent requests, on their callers,
/// take a core at once, and the others keep running.
const BACKGROUND_NICE: i32 = 10;

/// Serves `load` (and the `priority` client) with graphsched.
pub(super) fn serve_graphsched(
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
    // What one request holds at its peak, measured before any budget (each request then
    // reserves that much).
    main.measure_need(pool.handle(), executor.0)?;
    if let Some(h) = &mut high {
        h.measure_need(pool.handle(), executor.0)?;
    }
    // The budget: one request's need times the threads, and room for the priority client's
    // request besides: an urgent request enters ahead of normal ones waiting, but in a budget the
    // normal runs can fill it still waits for one of them to finish (on det, a whole request:
    // p99 230 ms for cls in a first measurement).
    let budget = load
        .budget
        .unwrap_or(main.need.max(1) * threads as u64 + high.as_ref().map_or(0, |h| h.need));
    // SAFETY: a live executor.
    let status = unsafe { gs_executor_set_memory_budget(executor.0, budget) };
    gs_check(status, "gs_executor_set_memory_budget")?;
    if high.is_some() {
        // A kernel cannot be preempted, and det's longest lasts 8.7 ms: the urgent client's
        // requests go ahead of the others' by the OS, the others running on the executor's
        // threads at a lower OS priority (`exec::workers::os_priority`).
        // SAFETY: a live executor.
        let status = unsafe { gs_executor_set_background_nice(executor.0, BACKGROUND_NICE) };
        gs_check(status, "gs_executor_set_background_nice")?;
    }
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
    let name = match high {
        Some(_) => format!("graphsched ({}, threads at nice {BACKGROUND_NICE})", main.name),
        None => format!("graphsched ({})", main.name),
    };
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
            memory_pattern: false,
            whole: crate::partition::WholeModelFigures::default(),
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
    }
}
