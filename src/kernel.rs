//! The kernel's side of a run: the [`Kernel`] type a node carries and the [`KernelCtx`] it is
//! called with. Below `graph` in the layers: a graph stores kernels without knowing how a run
//! calls them, and a kernel sees its node's tensors and nothing of the run.
//!
//! A kernel reads its inputs and writes its outputs through the context. Statically sized outputs
//! arrive allocated; a dynamic output is allocated by the kernel with its real size
//! ([`KernelCtx::alloc_output`]), through the run (the crate's `DynamicOutputs` trait), which
//! applies the memory limit and counts the block.
//!
//! ```
//! use graphsched::{GraphBuilder, NodeDesc, Pool, RunOptions, ValueRef};
//! use std::sync::Arc;
//!
//! let mut b = GraphBuilder::new();
//! let x = b.add_node(NodeDesc::new("x", "Iota", Box::new(|ctx| {
//!     let out = ctx.output_bytes(0).unwrap();
//!     out.iter_mut().enumerate().for_each(|(i, b)| *b = i as u8);
//!     Ok(())
//! })).output(4)).unwrap();
//! let sum = b.add_node(NodeDesc::new("sum", "Sum", Box::new(|ctx| {
//!     let total: u8 = ctx.input_bytes(0).unwrap().iter().sum();
//!     ctx.alloc_output(0, 1).map_err(|e| e.to_string())?;
//!     ctx.output_bytes(0).unwrap()[0] = total;
//!     Ok(())
//! })).input(ValueRef::new(x, 0)).dynamic_output()).unwrap();
//! b.mark_output(ValueRef::new(sum, 0)).unwrap();
//! let graph = Arc::new(b.finalize().unwrap());
//! let r = graphsched::run(&graph, &Arc::new(Pool::default()), &RunOptions::default()).unwrap();
//! assert_eq!(r.output_bytes(ValueRef::new(sum, 0)).unwrap(), &[6]);
//! ```

use std::ffi::{c_void, CStr, CString};
use std::sync::atomic::AtomicU32;

use crate::error::{err, ErrorKind, Result};
use crate::tensor::Tensor;

/// A kernel: reads the inputs and writes the outputs of its node through the context. An error
/// string stops the run and is reported with the node's name.
pub type Kernel = Box<KernelFn>;

/// What a [`Kernel`] boxes; a graph keeps it behind an `Arc`, which the graphs it makes for
/// other input sizes share (`Graph::specialize`).
pub type KernelFn = dyn Fn(&mut KernelCtx<'_>) -> std::result::Result<(), String> + Send + Sync;

/// A node's size function: from its inputs' sizes to its outputs', before any kernel of a run
/// whose inputs have sizes not seen before. `outputs` holds the declared sizes on entry
/// (`usize::MAX` for a dynamic one); it may overwrite any of them with a positive size, or with
/// `usize::MAX` to leave the output to the kernel (`KernelCtx::alloc_output`). Inputs of dynamic
/// size not known yet (a kernel-allocated output) read as `usize::MAX`. An error string fails
/// the run, naming the node.
pub type SizeFn = Box<SizeFnDyn>;

/// What a [`SizeFn`] boxes.
pub type SizeFnDyn = dyn Fn(&[usize], &mut [usize]) -> std::result::Result<(), String> + Send + Sync;

/// How a kernel's dynamic outputs get memory: the run implements it for each kernel call.
pub(crate) trait DynamicOutputs {
    /// Whether output `i` of the node is dynamic (sized by the kernel).
    fn is_dynamic(&self, i: usize) -> bool;
    /// A block of `nbytes > 0` bytes for dynamic output `i`, counted against the run (memory
    /// limit, statistics). An error's message names the node and the output.
    fn allocate(&mut self, i: usize, nbytes: usize) -> Result<*mut c_void>;
}

/// The inputs, outputs and services of one node while its kernel runs.
///
/// Inputs are read-only. A statically sized output arrives allocated; a dynamic one is allocated
/// by [`alloc_output`](Self::alloc_output) with the real size. The kernel may set an output's
/// dtype and shape, and may lower its `nbytes`, but not raise it or move `data`.
///
/// A context lives for one kernel call on one thread; it is neither `Send` nor `Sync`.
pub struct KernelCtx<'a> {
    pub(crate) node: u32,
    /// Every node's name, by node id (read only when asked: not a load per call).
    pub(crate) names: &'a [CString],
    pub(crate) inputs: &'a [&'a Tensor],
    /// The node's output slots: each a descriptor the kernel may edit and the buffer the run
    /// handed out, which it cannot move.
    pub(crate) outputs: &'a mut [Slot],
    pub(crate) error: Option<String>,
    /// The output that took over an input's buffer, if any.
    pub(crate) in_place: Option<usize>,
    /// How dynamic outputs get memory; `None` for a node that has none.
    pub(crate) dynamic: Option<&'a mut dyn DynamicOutputs>,
    /// The run's context (`exec::context`), type-erased since this layer sits below the run;
    /// null when there is none.
    pub(crate) run: *const (),
    /// Set when the kernel deferred its node's end (`KernelCtx::defer`, `exec/pending.rs`):
    /// the run's record of the pending node, type-erased for the same reason.
    pub(crate) deferred: Option<std::sync::Arc<dyn std::any::Any + Send + Sync>>,
}

impl KernelCtx<'_> {
    /// The id of the node whose kernel runs.
    pub fn node(&self) -> u32 {
        self.node
    }

    /// The node's name, as given to the builder.
    pub fn node_name(&self) -> &str {
        self.node_name_c().to_str().expect("names are UTF-8")
    }

    /// The node's name as a C string, for the C API.
    pub(crate) fn node_name_c(&self) -> &CStr {
        &self.names[self.node as usize]
    }

    /// Number of inputs of the node, one per input slot.
    pub fn num_inputs(&self) -> usize {
        self.inputs.len()
    }

    /// Number of outputs of the node.
    pub fn num_outputs(&self) -> usize {
        self.outputs.len()
    }

    /// The descriptor of input `i` (read-only).
    pub fn input(&self, i: usize) -> Option<&Tensor> {
        self.inputs.get(i).copied()
    }

    /// The descriptor of output `i`: the kernel may set its dtype and shape and lower `nbytes`.
    pub fn output(&mut self, i: usize) -> Option<&mut Tensor> {
        self.outputs.get_mut(i).map(|s| &mut s.tensor)
    }

    /// The bytes of input `i`.
    pub fn input_bytes(&self, i: usize) -> Option<&[u8]> {
        let t = *self.inputs.get(i)?;
        // SAFETY: input buffers stay valid and unwritten while any consumer runs, and `nbytes`
        // never exceeds the buffer (the run checks it after the producer finishes).
        Some(unsafe { std::slice::from_raw_parts(t.data as *const u8, t.nbytes) })
    }

    /// The bytes of output `i`: its whole buffer, empty while a dynamic output is unallocated.
    pub fn output_bytes(&mut self, i: usize) -> Option<&mut [u8]> {
        let b = self.outputs.get(i)?.buffer;
        if b.ptr.is_null() {
            return Some(&mut []);
        }
        // SAFETY: the buffer is `capacity` bytes long and belongs to this node alone until it
        // finishes; `b` is the run's record, not the kernel-writable descriptor.
        Some(unsafe { std::slice::from_raw_parts_mut(b.ptr as *mut u8, b.capacity) })
    }

    /// Allocates dynamic output `i` with its real size (0 is allowed: an empty output), from the
    /// run's pool. Sets the descriptor's data and nbytes and keeps its dtype and shape.
    pub fn alloc_output(&mut self, i: usize, nbytes: usize) -> Result<&mut Tensor> {
        let names = self.names;
        let name = names[self.node as usize].to_str().expect("names are UTF-8");
        if i >= self.outputs.len() {
            return err(
                ErrorKind::InvalidArgument,
                format!(
                    "node '{name}' has no output {i} to allocate ({} outputs)",
                    self.outputs.len()
                ),
            );
        }
        let Some(dynamic) = self.dynamic.as_deref_mut().filter(|d| d.is_dynamic(i)) else {
            return err(
                ErrorKind::InvalidArgument,
                format!("output {i} of node '{name}' has a static size and is allocated already"),
            );
        };
        if !self.outputs[i].buffer.ptr.is_null() {
            return err(
                ErrorKind::InvalidArgument,
                format!("dynamic output {i} of node '{name}' is allocated already"),
            );
        }
        // An empty output gets EMPTY_DATA, as every value of 0 bytes: nothing to allocate or
        // give back.
        let buffer = match nbytes {
            0 => Buffer::EMPTY,
            _ => Buffer::new(dynamic.allocate(i, nbytes)?, nbytes),
        };
        let slot = &mut self.outputs[i];
        slot.buffer = buffer;
        // Keep a dtype or shape the kernel set before allocating.
        slot.tensor.data = buffer.ptr;
        slot.tensor.nbytes = nbytes;
        Ok(&mut slot.tensor)
    }

    /// Whether output `i` took over its in-place input's buffer (its data pointer is then the
    /// input's: the kernel must read each input element before writing the output there).
    pub fn output_in_place(&self, i: usize) -> bool {
        self.in_place == Some(i)
    }

    /// Records why the kernel is about to fail; reported with the node's name.
    pub fn set_error(&mut self, message: impl Into<String>) {
        self.error = Some(message.into());
    }
}

/// A kernel that is a C function and its user data (the C API's `gs_kernel_fn`). A run calls it
/// directly, with no boxed closure in between and no panic guard around it: a C function cannot
/// unwind into Rust (the header bans C++ exceptions across it).
#[derive(Clone, Copy)]
pub(crate) struct CKernel {
    pub f: unsafe extern "C" fn(*mut TaggedCtx, *mut c_void) -> i32,
    pub user_data: *mut c_void,
}

// SAFETY: the header requires kernels and their user data to be callable from any thread;
// graphsched only passes the pointer back to the kernel.
unsafe impl Send for CKernel {}
// SAFETY: as above.
unsafe impl Sync for CKernel {}

/// What a C kernel receives as its context (the C API's opaque `gs_kernel_ctx`): the kernel
/// call's `KernelCtx` behind a tag, which the `gs_ctx_*` functions check before they trust it.
#[repr(C)]
pub(crate) struct TaggedCtx {
    pub tag: u64,
    pub ctx: *mut KernelCtx<'static>,
}

impl TaggedCtx {
    /// The tag of a live context: "gsctx_ok".
    pub(crate) const TAG: u64 = 0x6773_6374_785f_6f6b;
}

impl CKernel {
    /// Calls the function on `ctx`; its return code (0: success).
    #[inline(always)]
    pub(crate) fn call_raw(&self, ctx: &mut KernelCtx<'_>) -> i32 {
        let mut c = TaggedCtx {
            tag: TaggedCtx::TAG,
            ctx: (ctx as *mut KernelCtx<'_>).cast(),
        };
        // SAFETY: the caller vouched for the function and user data when adding the node; `c`
        // outlives the call. A C function cannot unwind into Rust.
        unsafe { (self.f)(&mut c, self.user_data) }
    }

    /// Calls the function on `ctx`, as a [`Kernel`] returns.
    pub(crate) fn call(&self, ctx: &mut KernelCtx<'_>) -> std::result::Result<(), String> {
        Self::result(self.call_raw(ctx))
    }

    /// What a return code tells, as a [`Kernel`] returns it.
    pub(crate) fn result(rc: i32) -> std::result::Result<(), String> {
        match rc {
            0 => Ok(()),
            rc => Err(format!("kernel returned {rc}")),
        }
    }
}

/// One value during a run: its readers still to come, its descriptor and the buffer behind it.
/// Laid out so that what a steady run touches of a value (its count of readers, its buffer,
/// then the descriptor's data, size, type and rank: `Slot::place`) is the first 56 bytes of one
/// cache line: the shape's 128 bytes after them are the kernel's to write, if it sets one. A
/// chain of 100,000 values then writes one line a value rather than two (10-30% of its time,
/// benches/c/compare_overhead.sh); and where a value's readers run on other threads than its
/// producer, the line each of them reads the value's address from is the line it counts itself
/// off on (`RunState::refs`), where a count of its own took one more line from thread to thread.
#[repr(C, align(64))]
pub(crate) struct Slot {
    /// The run's count of the value's readers still to finish (see `RunState::refs`): set by
    /// its producer as it ends, or by its binding; counted down by its readers. Atomic, and
    /// never reached through a `&mut Slot` while another thread may count it.
    pub refs: AtomicU32,
    /// The pool block behind the value; `NONE` for caller memory and values not made yet.
    pub buffer: Buffer,
    pub tensor: Tensor,
}

// Three lines, what a run touches in the first.
static_assertions::const_assert_eq!(std::mem::size_of::<Slot>(), 192);
static_assertions::const_assert!(std::mem::offset_of!(Slot, tensor) + 24 <= 64);

impl Slot {
    /// Hands `buffer` to the value as its producer's output of `nbytes`, with no shape. `dims`
    /// and `strides` are cleared only if an earlier run left a shape (`ndim` not 0): a value
    /// that never has one (the empty kernels of a benchmark) costs no write of its 128 bytes,
    /// nor of the lines they are on.
    #[inline(always)]
    pub(crate) fn place(&mut self, buffer: Buffer, nbytes: usize) {
        let t = &mut self.tensor;
        if t.ndim != 0 {
            (t.dims, t.strides) = ([0; crate::tensor::MAX_DIMS], [0; crate::tensor::MAX_DIMS]);
        }
        (t.data, t.nbytes, t.dtype, t.ndim) = (buffer.ptr, nbytes, 0, 0);
        self.buffer = buffer;
    }
}

impl Default for Slot {
    fn default() -> Self {
        Slot {
            refs: AtomicU32::new(0),
            tensor: Tensor::empty(),
            buffer: Buffer::NONE,
        }
    }
}

/// A buffer the run handed to a node: where it is and how many bytes are usable.
#[derive(Clone, Copy, Debug)]
pub(crate) struct Buffer {
    /// Start of the block; null for none (a dynamic output not allocated yet, [`Buffer::NONE`]).
    pub ptr: *mut c_void,
    /// Bytes of the value: what the run accounts for.
    pub capacity: usize,
    /// Bytes of the pool block at `ptr`, where its red zones are: `capacity`, except for an
    /// in-place output that took over a larger input's block.
    pub block: usize,
}

impl Buffer {
    /// No buffer: a null pointer and no bytes.
    pub(crate) const NONE: Buffer = Buffer {
        ptr: std::ptr::null_mut(),
        capacity: 0,
        block: 0,
    };

    /// The buffer of a value of 0 bytes: [`EMPTY_DATA`](crate::tensor::EMPTY_DATA), nothing to
    /// give back.
    pub(crate) const EMPTY: Buffer = Buffer {
        ptr: crate::tensor::EMPTY_DATA,
        capacity: 0,
        block: 0,
    };

    /// A whole block of `capacity` bytes.
    pub(crate) fn new(ptr: *mut c_void, capacity: usize) -> Buffer {
        Buffer {
            ptr,
            capacity,
            block: capacity,
        }
    }

    /// Whether `inner` starts inside this buffer (an arena holding a value); never for NONE.
    pub(crate) fn holds(&self, inner: Buffer) -> bool {
        (inner.ptr as usize).wrapping_sub(self.ptr as usize) < self.capacity
    }
}
