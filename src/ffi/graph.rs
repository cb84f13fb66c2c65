//! `gs_graph_*`: building, finalizing and inspecting graphs.

use std::ffi::{c_char, c_void};
use std::sync::{Arc, Mutex, MutexGuard, OnceLock};

use super::ctx::gs_kernel_ctx;
use super::handle::{free_handle, handle_ref, into_handle, out_arg, slice_arg, str_arg, Handle};
use super::status::{guard, FfiError, FfiResult};
use super::{gs_status, gs_status::*, GS_MAX_NODE_PORTS, GS_NODE_IN_PLACE, GS_NODE_ZERO_OUTPUT, GS_SIZE_DYNAMIC};
use crate::graph::{Graph, GraphBuilder, GraphInfo, NodeDesc, OutputSize, ValueRef};
use crate::kernel::{CKernel, TaggedCtx};

/// A graph: mutable until `gs_graph_finalize`, immutable and shareable between threads after.
pub struct gs_graph {
    builder: Mutex<GraphBuilder>,
    compiled: OnceLock<Arc<Graph>>,
}

impl Handle for gs_graph {
    const NAME: &'static str = "gs_graph";
    const TAG: u8 = 2;
}

impl gs_graph {
    fn builder(&self) -> MutexGuard<'_, GraphBuilder> {
        self.builder.lock().unwrap_or_else(|e| e.into_inner())
    }

    pub(crate) fn compiled(&self) -> FfiResult<&Arc<Graph>> {
        self.compiled.get().ok_or_else(|| {
            FfiError::new(
                GS_ERR_NOT_FINALIZED,
                "the graph is not finalized: call gs_graph_finalize before running or inspecting it",
            )
        })
    }
}

/// A node's kernel: reads inputs and writes outputs through `ctx`, returns 0 on success.
/// Any other value stops the run with `GS_ERR_KERNEL_FAILED`. Kernels may run on any thread.
/// A C++ exception must not leave a kernel: catch it and return non-zero.
#[allow(non_camel_case_types)]
pub type gs_kernel_fn = Option<unsafe extern "C" fn(ctx: *mut gs_kernel_ctx, user_data: *mut c_void) -> i32>;

/// A node's size function, for graphs with inputs of dynamic size: from the sizes of the values
/// the node reads (`input_sizes[i]` for input slot `i`; `GS_SIZE_DYNAMIC` for one not known
/// before its kernel runs) to its output sizes. `output_sizes` holds the declared sizes on entry;
/// overwrite any with a byte count (0 for an empty tensor), or `GS_SIZE_DYNAMIC` to leave the output to the
/// kernel. Called with the node's `user_data` before any kernel of a run whose input sizes were
/// not seen before, in topological order, on the thread that called `gs_run` (so possibly on
/// several threads at once, for runs started at once); return 0, or non-zero to fail the run
/// (`GS_ERR_KERNEL_FAILED`, naming the node). An output size larger than a buffer can be
/// (`PTRDIFF_MAX - 4096` bytes, or outputs adding up to more) fails the run with
/// `GS_ERR_SIZE_OVERFLOW`, naming the node and the output.
/// A C++ exception must not leave it.
#[allow(non_camel_case_types)]
pub type gs_size_fn = Option<
    unsafe extern "C" fn(
        input_sizes: *const usize,
        num_inputs: u32,
        output_sizes: *mut usize,
        num_outputs: u32,
        user_data: *mut c_void,
    ) -> i32,
>;

/// Everything that describes one node. Zero-initialize, then fill in.
#[repr(C)]
#[derive(Clone, Copy, Debug)]
pub struct gs_node_desc {
    /// Unique, non-empty, UTF-8.
    pub name: *const c_char,
    /// Operator type, e.g. "Conv" (NULL means ""). Nodes of one type share learned durations.
    pub op_type: *const c_char,
    /// Computes the node's outputs, called at most once per run; must not be NULL.
    pub kernel: gs_kernel_fn,
    /// Passed to every call of `kernel`, for the graph's life, from several threads at once
    /// when runs use an executor; graphsched never reads, copies or frees it.
    pub user_data: *mut c_void,
    /// Values the node reads; may name nodes added later.
    pub inputs: *const ValueRef,
    /// Length of `inputs`, at most `GS_MAX_NODE_PORTS`; 0 for a node that reads nothing
    /// (`inputs` may then be NULL).
    pub num_inputs: u32,
    /// At least 1.
    pub num_outputs: u32,
    /// Byte size of each output, or `GS_SIZE_DYNAMIC`.
    pub output_sizes: *const usize,
    /// Expected duration; 0 if unknown.
    pub estimated_ns: u64,
    /// `GS_NODE_*` bits.
    pub flags: u32,
    /// With `GS_NODE_IN_PLACE`: the output (index among the node's outputs) that may take over
    /// an input's buffer, when the node is that input's last reader and the buffer is large enough.
    pub in_place_output: u16,
    /// With `GS_NODE_IN_PLACE`: the input slot (index into `inputs`) whose buffer that output may
    /// take over.
    pub in_place_input: u16,
    /// How the output sizes follow the input sizes, for graphs with inputs of dynamic size; NULL:
    /// the declared sizes hold whatever the inputs.
    pub size_fn: gs_size_fn,
}

impl Default for gs_node_desc {
    /// All zeros, as C code starts one: no name or kernel yet, no inputs, no outputs.
    fn default() -> Self {
        gs_node_desc {
            name: std::ptr::null(),
            op_type: std::ptr::null(),
            kernel: None,
            user_data: std::ptr::null_mut(),
            inputs: std::ptr::null(),
            num_inputs: 0,
            num_outputs: 0,
            output_sizes: std::ptr::null(),
            estimated_ns: 0,
            flags: 0,
            in_place_output: 0,
            in_place_input: 0,
            size_fn: None,
        }
    }
}

/// A C size function and its user data, callable from any thread (the header's contract).
struct CSizeFn {
    f: unsafe extern "C" fn(*const usize, u32, *mut usize, u32, *mut c_void) -> i32,
    user_data: *mut c_void,
}

// SAFETY: the header requires size functions and their user data to be callable from any
// thread; graphsched only passes the pointer back.
unsafe impl Send for CSizeFn {}
// SAFETY: as above.
unsafe impl Sync for CSizeFn {}

impl CSizeFn {
    fn call(&self, inputs: &[usize], outputs: &mut [usize]) -> Result<(), String> {
        // SAFETY: the caller vouched for the function and user data when adding the node; both
        // arrays live for the call, with the lengths given.
        let rc = unsafe {
            (self.f)(
                inputs.as_ptr(),
                inputs.len() as u32,
                outputs.as_mut_ptr(),
                outputs.len() as u32,
                self.user_data,
            )
        };
        match rc {
            0 => Ok(()),
            rc => Err(format!("size function returned {rc}")),
        }
    }
}

/// Makes an empty graph.
///
/// Thread-safe: any thread, concurrently with any call but a free of the same handle.
///
/// # Safety
/// `out` is writable.
#[no_mangle]
pub unsafe extern "C" fn gs_graph_new(out: *mut *mut gs_graph) -> gs_status {
    guard(|| {
        // SAFETY: `out` is NULL or writable (C contract).
        let out = unsafe { out_arg(out, "out") }?;
        *out = into_handle(gs_graph {
            builder: Mutex::new(GraphBuilder::new()),
            compiled: OnceLock::new(),
        })?;
        Ok(())
    })
}

/// Frees a graph. NULL does nothing. Results of its runs stay valid.
///
/// Thread-safe with respect to other handles; no other call may be using this handle, on any
/// thread.
///
/// # Safety
/// No other thread is inside a call on `graph` (a `gs_run` or `gs_plan_new` on it included)
/// during this call.
#[no_mangle]
pub unsafe extern "C" fn gs_graph_free(graph: *mut gs_graph) {
    let _ = guard(|| {
        // SAFETY: no other thread uses the handle while it is freed (C contract).
        unsafe { free_handle(graph, "graph") };
        Ok(())
    });
}

/// Adds a graph input of `nbytes`, bound to caller memory at each run; `out` (may be NULL)
/// receives its value. `GS_SIZE_DYNAMIC`: each run's binding gives the size, and nodes whose
/// outputs follow it say how with a `size_fn`; runs plan once per set of input sizes.
///
/// Thread-safe: calls on one graph are serialized by its lock (node ids then follow the order the
/// calls took it).
///
/// # Safety
/// `name` is NUL-terminated; `out` is NULL or writable; no other thread frees `graph` during
/// this call.
#[no_mangle]
pub unsafe extern "C" fn gs_graph_add_input(
    graph: *mut gs_graph,
    name: *const c_char,
    nbytes: usize,
    out: *mut ValueRef,
) -> gs_status {
    guard(|| {
        // SAFETY: the handle is not freed concurrently (C contract).
        let g = unsafe { handle_ref(graph, "graph") }?;
        // SAFETY: NUL-terminated by contract; NULL is reported, not read.
        let name = unsafe { str_arg(name, "name") }?;
        let value = match nbytes {
            GS_SIZE_DYNAMIC => g.builder().add_dynamic_input(name)?,
            n => g.builder().add_input(name, n)?,
        };
        // SAFETY: NULL or writable by contract.
        if let Some(out) = unsafe { out.as_mut() } {
            *out = value;
        }
        Ok(())
    })
}

/// Adds a node; `out_node` (may be NULL) receives its id. Ids count from 0 in the order nodes
/// and inputs are added. The description, its strings and its arrays are copied: they need not
/// outlive the call (the user data pointer is kept as is).
///
/// The kernel is called with `desc.user_data` as long as the graph lives, from several threads at
/// once when runs use an executor: graphsched never frees or copies what it points to.
/// Thread-safe: calls on one graph are serialized by its lock (node ids then follow the order the
/// calls took it).
///
/// # Safety
/// `desc` and the arrays and strings it points to are readable; `out_node` is NULL or writable;
/// no other thread frees `graph` during this call. `desc.kernel` may be called with
/// `desc.user_data` from any thread, several calls at once, in every run of the graph.
#[no_mangle]
pub unsafe extern "C" fn gs_graph_add_node(
    graph: *mut gs_graph,
    desc: *const gs_node_desc,
    out_node: *mut u32,
) -> gs_status {
    guard(|| {
        // SAFETY: the handle is not freed concurrently (C contract).
        let g = unsafe { handle_ref(graph, "graph") }?;
        // SAFETY: readable by contract.
        let d =
            unsafe { desc.as_ref() }.ok_or_else(|| FfiError::new(GS_ERR_NULL_ARGUMENT, "argument 'desc' is NULL"))?;
        // SAFETY: NUL-terminated by contract; NULL is reported, not read.
        let name = unsafe { str_arg(d.name, "desc.name") }?;
        let op_type = if d.op_type.is_null() {
            ""
        } else {
            // SAFETY: NUL-terminated by contract; NULL is reported, not read.
            unsafe { str_arg(d.op_type, "desc.op_type") }?
        };
        let Some(kernel) = d.kernel else {
            return Err(FfiError::new(
                GS_ERR_NULL_ARGUMENT,
                format!("node '{name}' has a NULL kernel"),
            ));
        };
        if d.flags & !(GS_NODE_ZERO_OUTPUT | GS_NODE_IN_PLACE) != 0 {
            return Err(FfiError::new(
                GS_ERR_INVALID_ARGUMENT,
                format!(
                    "node '{name}' has unknown flag bits {:#x}",
                    d.flags & !(GS_NODE_ZERO_OUTPUT | GS_NODE_IN_PLACE)
                ),
            ));
        }
        let max = GS_MAX_NODE_PORTS as usize;
        // Errors name the node as well as the field.
        let of_node = |e: FfiError| FfiError::new(e.status, format!("node '{name}': {}", e.message));
        // SAFETY: readable for that many elements by contract; NULL and absurd counts are reported.
        let inputs = unsafe { slice_arg(d.inputs, d.num_inputs as usize, max, "desc.inputs") }.map_err(of_node)?;
        // SAFETY: readable for that many elements by contract; NULL and absurd counts are reported.
        let sizes =
            unsafe { slice_arg(d.output_sizes, d.num_outputs as usize, max, "desc.output_sizes") }.map_err(of_node)?;
        let kernel = CKernel {
            // SAFETY: one signature up to the pointee of the first argument: a kernel's
            // `gs_kernel_ctx *` is a `TaggedCtx *` (`ffi/ctx.rs`), passed the same way.
            f: unsafe {
                std::mem::transmute::<
                    unsafe extern "C" fn(*mut gs_kernel_ctx, *mut c_void) -> i32,
                    unsafe extern "C" fn(*mut TaggedCtx, *mut c_void) -> i32,
                >(kernel)
            },
            user_data: d.user_data,
        };
        let node = NodeDesc {
            name: name.to_owned(),
            op_type: op_type.to_owned(),
            kernel: Box::new(move |ctx| kernel.call(ctx)),
            inputs: inputs.to_vec(),
            outputs: sizes
                .iter()
                .map(|&n| {
                    if n == GS_SIZE_DYNAMIC {
                        OutputSize::Dynamic
                    } else {
                        OutputSize::Bytes(n)
                    }
                })
                .collect(),
            estimate_ns: (d.estimated_ns != 0).then_some(d.estimated_ns),
            zero_output: d.flags & GS_NODE_ZERO_OUTPUT != 0,
            in_place: (d.flags & GS_NODE_IN_PLACE != 0).then_some((d.in_place_output as u32, d.in_place_input as u32)),
            sizes: d.size_fn.map(|f| {
                let f = CSizeFn {
                    f,
                    user_data: d.user_data,
                };
                Box::new(move |inputs: &[usize], outputs: &mut [usize]| f.call(inputs, outputs))
                    as crate::kernel::SizeFn
            }),
        };
        let mut builder = g.builder();
        let id = builder.add_node(node)?;
        builder.set_c_kernel(id, kernel);
        drop(builder);
        // SAFETY: NULL or writable by contract.
        if let Some(out) = unsafe { out_node.as_mut() } {
            *out = id;
        }
        Ok(())
    })
}

/// Marks a value as a graph output: it survives the run in the result. A graph input marked as
/// an output is copied into the result, which owns all it hands back.
///
/// Thread-safe: calls on one graph are serialized by its lock (node ids then follow the order the
/// calls took it).
///
/// # Safety
/// No other thread frees `graph` during this call.
#[no_mangle]
pub unsafe extern "C" fn gs_graph_mark_output(graph: *mut gs_graph, value: ValueRef) -> gs_status {
    guard(|| {
        // SAFETY: the handle is not freed concurrently (C contract).
        let g = unsafe { handle_ref(graph, "graph") }?;
        Ok(g.builder().mark_output(value)?)
    })
}

/// Validates and analyses the graph. After success the graph is immutable and may be run from
/// many threads; after failure nothing changed.
///
/// Thread-safe: calls on one graph are serialized by its lock (node ids then follow the order the
/// calls took it).
///
/// # Safety
/// No other thread frees `graph` during this call.
#[no_mangle]
pub unsafe extern "C" fn gs_graph_finalize(graph: *mut gs_graph) -> gs_status {
    guard(|| {
        // SAFETY: the handle is not freed concurrently (C contract).
        let g = unsafe { handle_ref(graph, "graph") }?;
        let mut builder = g.builder();
        let compiled = builder.finalize()?;
        g.compiled.set(Arc::new(compiled)).expect("the builder finalizes once");
        Ok(())
    })
}

/// Figures of a finalized graph.
///
/// Thread-safe: any thread, concurrently with any call but a free of the same handle.
///
/// # Safety
/// `out` is writable; no other thread frees `graph` during this call.
#[no_mangle]
pub unsafe extern "C" fn gs_graph_get_info(graph: *const gs_graph, out: *mut GraphInfo) -> gs_status {
    guard(|| {
        // SAFETY: the handle is not freed concurrently (C contract).
        let g = unsafe { handle_ref(graph, "graph") }?;
        // SAFETY: writable by contract; NULL is reported.
        let out = unsafe { out_arg(out, "out") }?;
        *out = g.compiled()?.info();
        Ok(())
    })
}

/// Copies up to `capacity` of `ids` to `nodes` and their count to `*len`.
///
/// # Safety
/// `nodes` is NULL or writable for `capacity` ids; `len` is NULL or writable.
unsafe fn copy_ids(ids: &[u32], nodes: *mut u32, capacity: usize, len: *mut usize) -> FfiResult<()> {
    // SAFETY: NULL or writable by contract; NULL is reported.
    let len = unsafe { out_arg(len, "len") }?;
    *len = ids.len();
    let n = ids.len().min(capacity);
    if n > 0 {
        if nodes.is_null() {
            return Err(FfiError::new(
                GS_ERR_NULL_ARGUMENT,
                format!("argument 'nodes' is NULL but capacity is {capacity}"),
            ));
        }
        // SAFETY: non-NULL, so writable for `capacity` elements (contract), and n <= capacity.
        unsafe { std::ptr::copy_nonoverlapping(ids.as_ptr(), nodes, n) };
    }
    Ok(())
}

/// Writes up to `capacity` node ids of the critical path (operator nodes, in order) to `nodes`
/// and its full length to `*len`. Call with capacity 0 to learn the length.
///
/// Thread-safe: any thread, concurrently with any call but a free of the same handle.
///
/// # Safety
/// `nodes` is NULL or writable for `capacity` ids; `len` is writable; no other thread frees
/// `graph` during this call.
#[no_mangle]
pub unsafe extern "C" fn gs_graph_critical_path(
    graph: *const gs_graph,
    nodes: *mut u32,
    capacity: usize,
    len: *mut usize,
) -> gs_status {
    guard(|| {
        // SAFETY: the handle is not freed concurrently (C contract).
        let g = unsafe { handle_ref(graph, "graph") }?;
        // SAFETY: `nodes` and `len` as the caller's contract states.
        unsafe { copy_ids(&g.compiled()?.critical_path(), nodes, capacity, len) }
    })
}

/// Like `gs_graph_critical_path`, for the topological order (every node, graph inputs included).
///
/// Thread-safe: any thread, concurrently with any call but a free of the same handle.
///
/// # Safety
/// As for `gs_graph_critical_path`.
#[no_mangle]
pub unsafe extern "C" fn gs_graph_topological_order(
    graph: *const gs_graph,
    nodes: *mut u32,
    capacity: usize,
    len: *mut usize,
) -> gs_status {
    guard(|| {
        // SAFETY: the handle is not freed concurrently (C contract).
        let g = unsafe { handle_ref(graph, "graph") }?;
        // SAFETY: `nodes` and `len` as the caller's contract states.
        unsafe { copy_ids(g.compiled()?.topological_order(), nodes, capacity, len) }
    })
}

/// Finds a node (or graph input) by name.
///
/// Thread-safe: any thread, concurrently with any call but a free of the same handle.
///
/// # Safety
/// `name` is NUL-terminated; `out` is writable; no other thread frees `graph` during this call.
#[no_mangle]
pub unsafe extern "C" fn gs_graph_find_node(graph: *const gs_graph, name: *const c_char, out: *mut u32) -> gs_status {
    guard(|| {
        // SAFETY: the handle is not freed concurrently (C contract).
        let g = unsafe { handle_ref(graph, "graph") }?;
        // SAFETY: NUL-terminated by contract; NULL is reported, not read.
        let name = unsafe { str_arg(name, "name") }?;
        // SAFETY: writable by contract; NULL is reported.
        let out = unsafe { out_arg(out, "out") }?;
        let found = match g.compiled.get() {
            Some(c) => c.find_node(name),
            None => g.builder().find_node(name),
        };
        *out = found
            .ok_or_else(|| FfiError::new(GS_ERR_UNKNOWN_VALUE, format!("the graph has no node named '{name}'")))?;
        Ok(())
    })
}

/// The name of a node, valid until the graph is freed; NULL (with the last error set) for a bad
/// handle or id.
///
/// The name stays valid as long as the graph.
/// Thread-safe: any thread, concurrently with any call but a free of the same handle.
///
/// # Safety
/// No other thread frees `graph` during this call.
#[no_mangle]
pub unsafe extern "C" fn gs_graph_node_name(graph: *const gs_graph, node: u32) -> *const c_char {
    let mut name = std::ptr::null();
    let status = guard(|| {
        // SAFETY: the handle is not freed concurrently (C contract).
        let g = unsafe { handle_ref(graph, "graph") }?;
        // Names live in heap buffers that neither finalize nor later additions move.
        name = match g.compiled.get() {
            Some(c) if (node as usize) < c.node_count() => c.node_name_c(node).as_ptr(),
            Some(_) => std::ptr::null(),
            None => g.builder().node_name_c(node).map_or(std::ptr::null(), |n| n.as_ptr()),
        };
        if name.is_null() {
            return Err(FfiError::new(
                GS_ERR_UNKNOWN_VALUE,
                format!("the graph has no node {node}"),
            ));
        }
        Ok(())
    });
    if status != GS_OK {
        return std::ptr::null();
    }
    name
}
