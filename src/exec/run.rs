//! One run of a finalized graph on the calling thread, in topological order.

use std::any::Any;
use std::panic::{catch_unwind, AssertUnwindSafe};
use std::ptr::NonNull;
use std::sync::Arc;
use std::time::Instant;

use super::ctx::{Buffer, KernelCtx};
use crate::error::{err, Error, ErrorKind, Result};
use crate::graph::{Graph, OutputSize, ValueRef};
use crate::pool::Pool;
use crate::tensor::{Tensor, ALIGNMENT, MAX_DIMS};

/// Caller memory for one graph input. (C: `gs_input_binding`).
/// `tensor.nbytes` must equal the input's declared size and `tensor.data` be 16-byte aligned;
/// kernels only read it.
#[repr(C)]
#[derive(Clone, Copy, Debug)]
pub struct InputBinding {
    pub value: ValueRef,
    pub tensor: Tensor,
}

/// How to run a graph.
#[derive(Clone, Copy, Debug, Default)]
pub struct RunOptions<'a> {
    /// One binding per graph input.
    pub inputs: &'a [InputBinding],
}

/// Figures of one run. (C: `gs_run_stats`).
#[repr(C)]
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct RunStats {
    pub wall_ns: u64,
    pub nodes_run: u64,
    /// Most bytes this run's values held at once (graph inputs, which the caller owns, excluded).
    pub peak_live_bytes: u64,
    /// Buffers this run took from the pool.
    pub acquires: u64,
    /// System allocations the pool made while the run went on (by any user of the pool).
    pub os_allocs: u64,
}

/// The graph outputs of a successful run. Dropping it returns their buffers to the pool.
pub struct RunResult {
    graph: Arc<Graph>,
    pool: Arc<Pool>,
    outputs: Vec<(u32, Slot)>,
    stats: RunStats,
}

// SAFETY: a result owns its output buffers exclusively (nothing else frees or writes them until
// it drops), and the pool it returns them to is thread-safe.
unsafe impl Send for RunResult {}
// SAFETY: shared access only reads descriptors.
unsafe impl Sync for RunResult {}

impl RunResult {
    /// The descriptor of graph output `value`.
    pub fn output(&self, value: ValueRef) -> Result<&Tensor> {
        let Some(index) = (value.node < self.graph.node_count() as u32)
            .then(|| self.graph.value_index(value))
            .flatten()
        else {
            return err(
                ErrorKind::UnknownValue,
                format!("value ({}, {}) does not exist in this graph", value.node, value.output),
            );
        };
        match self.outputs.iter().find(|(v, _)| *v == index) {
            Some((_, slot)) => Ok(&slot.tensor),
            None => err(
                ErrorKind::NotAnOutput,
                format!(
                    "output {} of node '{}' is not a graph output; mark it (gs_graph_mark_output) to keep it",
                    value.output,
                    self.graph.node_name(value.node)
                ),
            ),
        }
    }

    /// The bytes of graph output `value` (its descriptor's `nbytes`).
    pub fn output_bytes(&self, value: ValueRef) -> Result<&[u8]> {
        let t = self.output(value)?;
        // SAFETY: the buffer lives as long as `self` and holds at least `nbytes` bytes.
        Ok(unsafe { std::slice::from_raw_parts(t.data as *const u8, t.nbytes) })
    }

    pub fn stats(&self) -> RunStats {
        self.stats
    }
}

impl Drop for RunResult {
    fn drop(&mut self) {
        for (_, slot) in self.outputs.drain(..) {
            release(&self.pool, slot.buffer);
        }
    }
}

/// Runs `graph` once on the calling thread. On failure every buffer the run took is back in
/// the pool before this returns, and the graph can run again.
pub fn run(graph: &Arc<Graph>, pool: &Arc<Pool>, options: &RunOptions<'_>) -> Result<RunResult> {
    let start = Instant::now();
    let os_allocs_before = pool.stats().os_allocs;
    // Start from a settled pool, so that repeated runs make the same placement choices.
    pool.settle();
    let mut run = Run::new(graph, pool);
    run.bind(options.inputs)?;
    // On failure, dropping `run` returns every buffer it still holds.
    run.execute()?;
    let outputs = graph
        .graph_outputs()
        .iter()
        .map(|&v| (v, std::mem::take(&mut run.slots[v as usize])))
        .collect();
    let stats = RunStats {
        wall_ns: start.elapsed().as_nanos() as u64,
        nodes_run: run.nodes_run,
        peak_live_bytes: run.peak_live,
        acquires: run.acquires,
        os_allocs: pool.stats().os_allocs - os_allocs_before,
    };
    Ok(RunResult {
        graph: graph.clone(),
        pool: pool.clone(),
        outputs,
        stats,
    })
}

/// One value during a run.
#[derive(Clone, Copy)]
struct Slot {
    tensor: Tensor,
    /// The pool block behind the value; `NONE` for caller memory and for values not made yet.
    buffer: Buffer,
    /// Consumers still to finish, plus one while the value is a graph output.
    remaining: u32,
}

impl Default for Slot {
    fn default() -> Self {
        Slot {
            tensor: Tensor::empty(),
            buffer: Buffer::NONE,
            remaining: 0,
        }
    }
}

struct Run<'g> {
    graph: &'g Graph,
    pool: &'g Pool,
    slots: Vec<Slot>,
    live: u64,
    peak_live: u64,
    acquires: u64,
    nodes_run: u64,
}

impl<'g> Run<'g> {
    fn new(graph: &'g Graph, pool: &'g Pool) -> Self {
        Run {
            graph,
            pool,
            slots: vec![Slot::default(); graph.value_count()],
            live: 0,
            peak_live: 0,
            acquires: 0,
            nodes_run: 0,
        }
    }

    fn refcount(&self, value: u32) -> u32 {
        self.graph.consumers(value) + self.graph.is_graph_output(value) as u32
    }

    fn bind(&mut self, bindings: &[InputBinding]) -> Result<()> {
        let g = self.graph;
        let mut bound = vec![usize::MAX; g.value_count()];
        for (i, b) in bindings.iter().enumerate() {
            let node = b.value.node;
            if node as usize >= g.node_count() || !g.is_graph_input(node) || b.value.output != 0 {
                return err(
                    ErrorKind::InputBinding,
                    format!(
                        "input binding {i} names value ({}, {}), which is not a graph input",
                        node, b.value.output
                    ),
                );
            }
            let name = g.node_name(node);
            let v = g.node_values(node).start;
            if bound[v as usize] != usize::MAX {
                return err(
                    ErrorKind::InputBinding,
                    format!(
                        "graph input '{name}' is bound twice (bindings {} and {i})",
                        bound[v as usize]
                    ),
                );
            }
            bound[v as usize] = i;
            let declared = g.value_size(v).bytes().expect("graph inputs have a static size");
            if b.tensor.nbytes != declared {
                return err(
                    ErrorKind::InputBinding,
                    format!(
                        "graph input '{name}' is declared as {declared} bytes but bound to {} bytes",
                        b.tensor.nbytes
                    ),
                );
            }
            if b.tensor.data.is_null() {
                return err(
                    ErrorKind::InputBinding,
                    format!("graph input '{name}' is bound to a NULL pointer"),
                );
            }
            if b.tensor.data as usize % ALIGNMENT != 0 {
                return err(
                    ErrorKind::InputBinding,
                    format!(
                        "graph input '{name}' is bound to {:p}, which is not {ALIGNMENT}-byte aligned",
                        b.tensor.data
                    ),
                );
            }
            self.slots[v as usize] = Slot {
                tensor: b.tensor,
                buffer: Buffer::NONE,
                remaining: self.refcount(v),
            };
        }
        if let Some(&node) = g
            .graph_inputs()
            .iter()
            .find(|&&n| bound[g.node_values(n).start as usize] == usize::MAX)
        {
            return err(
                ErrorKind::InputBinding,
                format!("graph input '{}' (node {node}) is not bound", g.node_name(node)),
            );
        }
        Ok(())
    }

    fn execute(&mut self) -> Result<()> {
        // Scratch space reused by every node.
        let mut inputs = Vec::new();
        let mut outputs = Vec::new();
        let mut buffers = Vec::new();
        for &node in self.graph.topological_order() {
            if !self.graph.is_graph_input(node) {
                self.run_node(node, &mut inputs, &mut outputs, &mut buffers)?;
            }
        }
        Ok(())
    }

    fn run_node(
        &mut self,
        node: u32,
        inputs: &mut Vec<Tensor>,
        outputs: &mut Vec<Tensor>,
        buffers: &mut Vec<Buffer>,
    ) -> Result<()> {
        let g = self.graph;
        let values = g.node_values(node);
        outputs.clear();
        buffers.clear();
        for v in values.clone() {
            let mut buffer = Buffer::NONE;
            if let OutputSize::Bytes(n) = g.value_size(v) {
                let until = g.release_tick(v).map_or(crate::pool::NEVER, u64::from);
                match self.pool.acquire_until(n, g.zero_output(node), until) {
                    Ok(p) => {
                        buffer = Buffer {
                            ptr: p.as_ptr().cast(),
                            capacity: n,
                        }
                    }
                    Err(e) => {
                        buffers.iter().for_each(|&b| release(self.pool, b));
                        let k = v - values.start;
                        return err(
                            e.kind(),
                            format!(
                                "output {k} of node '{}' ({n} bytes): {}",
                                g.node_name(node),
                                e.message()
                            ),
                        );
                    }
                }
            }
            buffers.push(buffer);
            outputs.push(Tensor::new(buffer.ptr, buffer.capacity));
        }
        inputs.clear();
        inputs.extend(g.node_inputs(node).iter().map(|&v| self.slots[v as usize].tensor));

        let kernel = g.kernel(node).expect("operator nodes have kernels");
        let mut ctx = KernelCtx {
            graph: g,
            node,
            pool: self.pool,
            inputs,
            outputs,
            buffers,
            error: None,
        };
        let outcome = catch_unwind(AssertUnwindSafe(|| kernel(&mut ctx)));
        let detail = ctx.error.take();
        let failure = match outcome {
            Ok(Ok(())) => check_outputs(g, node, outputs, buffers).err(),
            Ok(Err(msg)) => {
                let msg = match detail {
                    Some(d) => format!("{d} ({msg})"),
                    None => msg,
                };
                Some(Error::new(
                    ErrorKind::KernelFailed,
                    format!("node {} failed: {msg}", g.node_label(node)),
                ))
            }
            Err(panic) => Some(Error::new(
                ErrorKind::KernelPanicked,
                format!("kernel of node {} panicked: {}", g.node_label(node), panic_text(&panic)),
            )),
        };
        if let Some(e) = failure {
            // `buffers` records every block the node holds, dynamic ones included.
            buffers.iter().for_each(|&b| release(self.pool, b));
            return Err(e);
        }

        // Commit: the outputs become live values; values nobody reads go back at once.
        for (k, v) in values.enumerate() {
            let slot = Slot {
                tensor: outputs[k],
                buffer: buffers[k],
                remaining: self.refcount(v),
            };
            self.live += slot.buffer.capacity as u64;
            self.acquires += 1;
            self.slots[v as usize] = slot;
        }
        self.peak_live = self.peak_live.max(self.live);
        for v in g.node_values(node) {
            if self.slots[v as usize].remaining == 0 {
                self.drop_value(v);
            }
        }
        for &v in g.node_inputs(node) {
            let slot = &mut self.slots[v as usize];
            slot.remaining -= 1;
            if slot.remaining == 0 {
                self.drop_value(v);
            }
        }
        self.nodes_run += 1;
        Ok(())
    }

    fn drop_value(&mut self, v: u32) {
        let slot = std::mem::take(&mut self.slots[v as usize]);
        self.live -= slot.buffer.capacity as u64;
        release(self.pool, slot.buffer);
    }
}

impl Drop for Run<'_> {
    /// Returns whatever the run still holds: everything after a failure, nothing after success
    /// (the graph outputs have moved to the result by then).
    fn drop(&mut self) {
        for slot in &mut self.slots {
            release(self.pool, std::mem::take(slot).buffer);
        }
    }
}

/// After a kernel succeeded: every output exists, sits where the run put it, and fits.
fn check_outputs(g: &Graph, node: u32, outputs: &[Tensor], buffers: &[Buffer]) -> Result<()> {
    for (k, (t, b)) in outputs.iter().zip(buffers).enumerate() {
        let problem = if b.ptr.is_null() {
            "is dynamic but the kernel did not allocate it".to_string()
        } else if t.data != b.ptr {
            format!("had its data pointer changed from {:p} to {:p}", b.ptr, t.data)
        } else if t.nbytes > b.capacity {
            format!("claims {} bytes but its buffer holds {}", t.nbytes, b.capacity)
        } else if !(0..=MAX_DIMS as i32).contains(&t.ndim) {
            format!("has ndim {}, outside 0..={MAX_DIMS}", t.ndim)
        } else {
            continue;
        };
        return err(
            ErrorKind::KernelFailed,
            format!("output {k} of node {} {problem}", g.node_label(node)),
        );
    }
    Ok(())
}

/// Gives a buffer back to the pool; caller memory (NULL) and empty dynamic outputs (capacity 0,
/// never from the pool) are skipped.
fn release(pool: &Pool, buffer: Buffer) {
    if buffer.capacity == 0 {
        return;
    }
    if let Some(p) = NonNull::new(buffer.ptr.cast::<u8>()) {
        pool.release(p).expect("the run releases only blocks it acquired, once");
    }
}

fn panic_text(panic: &Box<dyn Any + Send>) -> &str {
    panic
        .downcast_ref::<&str>()
        .copied()
        .or_else(|| panic.downcast_ref::<String>().map(String::as_str))
        .unwrap_or("(no message)")
}
