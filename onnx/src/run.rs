//! Running the model: graphsched over the per-node sessions (through the C ABI), or one ONNX
//! Runtime session over the whole prepared model. Both take the same input bytes and give back
//! the outputs' bytes.

use crate::graph::{gs_check, OnnxGraph};
use crate::manifest::Manifest;
use crate::ort_api::Session;
use graphsched::ffi::*;
use graphsched::{PoolStats, RunStats, Tensor};
use std::ffi::{c_char, c_void, CString};
use std::ptr;

/// Bytes at a 16-byte-aligned address, as graph inputs and ONNX Runtime's tensors want.
pub struct Aligned {
    words: Vec<u128>,
    len: usize,
}

impl Aligned {
    /// A copy of `bytes`.
    pub fn from(bytes: &[u8]) -> Aligned {
        let mut words = vec![0u128; bytes.len().div_ceil(16)];
        // SAFETY: `words` holds at least `bytes.len()` bytes; the two do not overlap.
        unsafe { ptr::copy_nonoverlapping(bytes.as_ptr(), words.as_mut_ptr().cast::<u8>(), bytes.len()) };
        Aligned {
            words,
            len: bytes.len(),
        }
    }

    /// `len` zero bytes.
    pub fn zeroed(len: usize) -> Aligned {
        Aligned {
            words: vec![0u128; len.div_ceil(16)],
            len,
        }
    }

    /// The bytes.
    pub fn bytes(&self) -> &[u8] {
        // SAFETY: `words` holds at least `len` initialized bytes.
        unsafe { std::slice::from_raw_parts(self.words.as_ptr().cast::<u8>(), self.len) }
    }

    pub(crate) fn ptr(&mut self) -> *mut c_void {
        self.words.as_mut_ptr().cast()
    }
}

/// Where a graphsched run puts its values.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Memory {
    /// Every value from the pool, back the moment its last reader is done.
    Pool,
    /// One arena at a sequential plan's offsets (runs without an executor).
    SequentialPlan,
    /// One arena at a parallel-safe plan's offsets (any executor).
    ParallelPlan,
    /// One arena at a plan made for the executor's schedule, which runs follow.
    ScheduledPlan,
}

impl Memory {
    /// The name in tables and JSON.
    pub fn name(self) -> &'static str {
        match self {
            Memory::Pool => "pool",
            Memory::SequentialPlan => "sequential plan",
            Memory::ParallelPlan => "parallel plan",
            Memory::ScheduledPlan => "scheduled plan",
        }
    }
}

/// A pool, an executor (none for one thread: runs go on the calling thread) and a plan.
pub struct Engine {
    pool: *mut gs_pool,
    /// Whether the engine made the pool (and frees it).
    owns_pool: bool,
    executor: *mut gs_executor,
    plan: *mut gs_plan,
    /// The graph inputs' bytes, in the manifest's order.
    inputs: Vec<Aligned>,
}

impl Drop for Engine {
    fn drop(&mut self) {
        // SAFETY: each made here and freed once; NULL ones are ignored.
        unsafe {
            gs_plan_free(self.plan);
            gs_executor_free(self.executor);
            if self.owns_pool {
                gs_pool_free(self.pool);
            }
        }
    }
}

impl Engine {
    /// What runs of `graph` on `threads` threads with `memory` need.
    pub fn new(graph: &OnnxGraph<'_>, manifest: &Manifest, threads: usize, memory: Memory) -> Result<Engine, String> {
        Engine::new_on(graph, manifest, threads, memory, None)
    }

    /// [`new`](Self::new), on `pool` when given (which must outlive the engine) instead of a
    /// pool of its own.
    pub fn new_on(
        graph: &OnnxGraph<'_>,
        manifest: &Manifest,
        threads: usize,
        memory: Memory,
        pool: Option<*mut gs_pool>,
    ) -> Result<Engine, String> {
        let mut engine = Engine {
            pool: pool.unwrap_or(ptr::null_mut()),
            owns_pool: pool.is_none(),
            executor: ptr::null_mut(),
            plan: ptr::null_mut(),
            inputs: manifest.input_bytes().iter().map(|b| Aligned::from(b)).collect(),
        };
        if engine.owns_pool {
            // SAFETY: NULL config means defaults; valid out pointer.
            gs_check(unsafe { gs_pool_new(ptr::null(), &mut engine.pool) }, "gs_pool_new")?;
        }
        if threads > 1 {
            let config = gs_executor_config {
                threads: threads as u32,
            };
            // SAFETY: readable config, valid out pointer.
            let status = unsafe { gs_executor_new(&config, &mut engine.executor) };
            gs_check(status, "gs_executor_new")?;
        }
        let g = graph.handle();
        // SAFETY: a finalized graph and valid out pointers.
        let status = unsafe {
            match memory {
                Memory::Pool => gs_status::GS_OK,
                Memory::SequentialPlan => gs_plan_new(g, GS_PLAN_SEQUENTIAL, &mut engine.plan),
                Memory::ParallelPlan => gs_plan_new(g, GS_PLAN_PARALLEL_SAFE, &mut engine.plan),
                Memory::ScheduledPlan => gs_plan_new_scheduled(g, threads as u32, &mut engine.plan),
            }
        };
        gs_check(status, "making the plan")?;
        Ok(engine)
    }

    /// One run; the outputs' bytes when `keep` says so.
    pub fn run(&mut self, graph: &OnnxGraph<'_>, keep: bool) -> Result<(RunStats, Vec<Vec<u8>>), String> {
        self.run_with(graph, keep, 0)
    }

    /// One run with `GS_RUN_*` `flags`; the outputs' bytes when `keep` says so.
    pub fn run_with(
        &mut self,
        graph: &OnnxGraph<'_>,
        keep: bool,
        flags: u32,
    ) -> Result<(RunStats, Vec<Vec<u8>>), String> {
        let bindings: Vec<gs_input_binding> = graph
            .inputs
            .iter()
            .zip(&mut self.inputs)
            .map(|(&value, input)| gs_input_binding {
                value,
                tensor: Tensor::new(input.ptr(), input.len),
            })
            .collect();
        let options = gs_run_options {
            inputs: bindings.as_ptr(),
            num_inputs: bindings.len(),
            executor: self.executor,
            plan: self.plan,
            flags,
            ..Default::default()
        };
        let mut result = ptr::null_mut();
        // SAFETY: live graph, pool, options whose binding outlives the call; valid out pointer.
        let status = unsafe { gs_run(graph.handle(), self.pool, &options, &mut result) };
        gs_check(status, "gs_run")?;
        let mut stats = RunStats::default();
        let mut outputs = Vec::new();
        // SAFETY: a live result, freed once at the end; output bytes are copied out before.
        let read = unsafe {
            gs_check(gs_result_stats(result, &mut stats), "gs_result_stats").and_then(|_| {
                for out in graph.outputs.iter().filter(|_| keep) {
                    let mut t = Tensor::empty();
                    gs_check(gs_result_output(result, out.value, &mut t), "gs_result_output")?;
                    outputs.push(std::slice::from_raw_parts(t.data.cast::<u8>(), t.nbytes).to_vec());
                }
                Ok(())
            })
        };
        // SAFETY: made by gs_run above.
        unsafe { gs_result_free(result) };
        read.map(|_| (stats, outputs))
    }

    /// The pool's figures: its peak reserved bytes are what the values took from the system.
    pub fn pool_stats(&self) -> PoolStats {
        let mut stats = PoolStats::default();
        // SAFETY: a live pool and a writable out pointer.
        let _ = unsafe { gs_pool_get_stats(self.pool, &mut stats) };
        stats
    }
}

/// The whole prepared model in one ONNX Runtime session, with its outputs written into memory
/// allocated once.
pub struct WholeModel<'r> {
    session: Held<'r>,
    runtime: &'r crate::ort_api::Runtime,
    /// Per graph input and output: name, buffer, shape, element type.
    inputs: Vec<(CString, Aligned, Vec<i64>, i32)>,
    outputs: Vec<(CString, Aligned, Vec<i64>, i32)>,
}

/// A session a [`WholeModel`] owns, or shares with others (concurrent `Run` calls).
enum Held<'r> {
    Own(Session<'r>),
    Shared(&'r Session<'r>),
}

impl<'r> Held<'r> {
    fn get(&self) -> &Session<'r> {
        match self {
            Held::Own(s) => s,
            Held::Shared(s) => s,
        }
    }
}

impl<'r> WholeModel<'r> {
    /// Runs of `session`, which was made over the manifest's prepared model.
    pub fn new(runtime: &'r crate::ort_api::Runtime, session: Session<'r>, manifest: &Manifest) -> WholeModel<'r> {
        WholeModel::held(runtime, Held::Own(session), manifest)
    }

    /// Runs of a session other `WholeModel`s share (each has its own input and outputs).
    pub fn shared(
        runtime: &'r crate::ort_api::Runtime,
        session: &'r Session<'r>,
        manifest: &Manifest,
    ) -> WholeModel<'r> {
        WholeModel::held(runtime, Held::Shared(session), manifest)
    }

    fn held(runtime: &'r crate::ort_api::Runtime, session: Held<'r>, manifest: &Manifest) -> WholeModel<'r> {
        let tensors = manifest.tensors();
        WholeModel {
            session,
            runtime,
            inputs: manifest
                .inputs
                .iter()
                .zip(manifest.input_bytes())
                .map(|(t, bytes)| {
                    let name = CString::new(t.name.as_str()).unwrap_or_default();
                    (name, Aligned::from(&bytes), t.shape.clone(), t.elem_type)
                })
                .collect(),
            outputs: manifest
                .outputs
                .iter()
                .map(|n| {
                    let t = tensors[n.as_str()];
                    (
                        CString::new(n.as_str()).unwrap_or_default(),
                        Aligned::zeroed(t.bytes()),
                        t.shape.clone(),
                        t.elem_type,
                    )
                })
                .collect(),
        }
    }

    /// One run; the outputs' bytes when `keep` says so.
    pub fn run(&mut self, keep: bool) -> Result<Vec<Vec<u8>>, String> {
        let mut ins = Vec::new();
        for (_, buffer, shape, elem) in &mut self.inputs {
            let len = buffer.len;
            // SAFETY: the input buffer outlives the value, which lives for this call.
            ins.push(unsafe { self.runtime.tensor(buffer.ptr(), len, shape, *elem) }?);
        }
        let in_names: Vec<*const c_char> = self.inputs.iter().map(|i| i.0.as_ptr()).collect();
        let mut outs = Vec::new();
        for (_, buffer, shape, elem) in &mut self.outputs {
            let len = buffer.len;
            // SAFETY: as above, for the output's buffer.
            outs.push(unsafe { self.runtime.tensor(buffer.ptr(), len, shape, *elem) }?);
        }
        let out_names: Vec<*const c_char> = self.outputs.iter().map(|o| o.0.as_ptr()).collect();
        // SAFETY: the names are the CStrings this struct owns; the tensors wrap its buffers.
        unsafe { self.session.get().run(&in_names, &ins, &out_names, &mut outs) }?;
        Ok(if keep {
            self.outputs.iter().map(|o| o.1.bytes().to_vec()).collect()
        } else {
            Vec::new()
        })
    }
}
