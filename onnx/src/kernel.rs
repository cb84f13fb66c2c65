//! One ONNX node as a graphsched kernel: a C callback that runs the node's own ONNX Runtime
//! session on tensors wrapping the buffers graphsched hands it.
//!
//! Making an ONNX Runtime tensor costs allocations; in a steady state the pool hands a node the
//! same buffers run after run (and a plan always does), so each node keeps the tensors of its
//! last call and remakes them only when an address changed.

use crate::manifest::TensorInfo;
use crate::ort_api::{Runtime, Session, Value};
use graphsched::ffi::*;
use graphsched::Tensor;
use std::ffi::{c_char, c_void, CString};
use std::sync::Mutex;

/// What one node's kernel needs: its session, its tensors' names, shapes and types, and the
/// tensors of its last call.
pub struct NodeKernel<'r> {
    runtime: &'r Runtime,
    session: Session<'r>,
    inputs: Vec<TensorInfo>,
    outputs: Vec<TensorInfo>,
    /// Owns the names the two pointer lists below point into.
    _names: Vec<CString>,
    input_name_ptrs: Vec<*const c_char>,
    output_name_ptrs: Vec<*const c_char>,
    /// Taken with `try_lock`: a call that finds it busy (the same node in a concurrent run of the
    /// graph) makes tensors of its own instead of waiting.
    views: Mutex<Views<'r>>,
}

/// A call's tensors and the addresses they wrap (inputs, then outputs).
#[derive(Default)]
struct Views<'r> {
    addresses: Vec<*mut c_void>,
    inputs: Vec<Value<'r>>,
    outputs: Vec<Value<'r>>,
}

// SAFETY: ONNX Runtime values over caller memory have no thread affinity, and the cached ones
// are only touched under the kernel's mutex.
unsafe impl Send for Views<'_> {}

impl<'r> NodeKernel<'r> {
    /// The kernel of a node reading `inputs` and writing `outputs` by `session`.
    pub fn new(runtime: &'r Runtime, session: Session<'r>, inputs: Vec<TensorInfo>, outputs: Vec<TensorInfo>) -> Self {
        let c = |t: &TensorInfo| CString::new(t.name.as_str()).unwrap_or_default();
        let input_names: Vec<CString> = inputs.iter().map(c).collect();
        let output_names: Vec<CString> = outputs.iter().map(c).collect();
        NodeKernel {
            runtime,
            session,
            input_name_ptrs: input_names.iter().map(|n| n.as_ptr()).collect(),
            output_name_ptrs: output_names.iter().map(|n| n.as_ptr()).collect(),
            _names: input_names.into_iter().chain(output_names).collect(),
            inputs,
            outputs,
            views: Mutex::new(Views::default()),
        }
    }

    /// The tensors the node writes.
    pub fn outputs(&self) -> &[TensorInfo] {
        &self.outputs
    }

    /// The buffers of this call, inputs then outputs, checked against the shapes.
    ///
    /// # Safety
    /// `ctx` is the context of a running call of this node's kernel.
    unsafe fn addresses(&self, ctx: *mut gs_kernel_ctx, into: &mut Vec<*mut c_void>) -> Result<(), String> {
        for (i, info) in self.inputs.iter().enumerate() {
            // SAFETY: a live context (caller); the descriptor lives for the call.
            into.push(check(unsafe { gs_ctx_input(ctx, i as u32).as_ref() }, info)?);
        }
        for (i, info) in self.outputs.iter().enumerate() {
            // SAFETY: as above.
            into.push(check(unsafe { gs_ctx_output(ctx, i as u32).as_ref() }, info)?);
        }
        Ok(())
    }

    /// Tensors over `addresses`.
    ///
    /// # Safety
    /// The addresses hold the tensors' bytes for as long as the tensors are used on them.
    unsafe fn make_views(&self, addresses: Vec<*mut c_void>) -> Result<Views<'r>, String> {
        let mut views = Views {
            addresses,
            inputs: Vec::new(),
            outputs: Vec::new(),
        };
        for (info, &data) in self.inputs.iter().chain(&self.outputs).zip(&views.addresses) {
            // SAFETY: the caller vouches for the address; the size was checked against the shape.
            let value = unsafe { self.runtime.tensor(data, info.bytes(), &info.shape, info.elem_type) }?;
            if views.inputs.len() < self.inputs.len() {
                views.inputs.push(value);
            } else {
                views.outputs.push(value);
            }
        }
        Ok(views)
    }

    /// Runs the node's session on this call's buffers.
    ///
    /// # Safety
    /// `ctx` is the context of a running call of this node's kernel.
    unsafe fn call(&self, ctx: *mut gs_kernel_ctx) -> Result<(), String> {
        let run = |views: &mut Views<'_>| {
            // SAFETY: the names point into `_names`, which lives as long as the kernel; the
            // tensors wrap this call's buffers (checked against the addresses just above).
            unsafe {
                self.session.run(
                    &self.input_name_ptrs,
                    &views.inputs,
                    &self.output_name_ptrs,
                    &mut views.outputs,
                )
            }
        };
        match self.views.try_lock() {
            Ok(mut cached) => {
                let mut now = Vec::with_capacity(cached.addresses.len());
                // SAFETY: a live context (caller).
                unsafe { self.addresses(ctx, &mut now) }?;
                if now != cached.addresses {
                    // SAFETY: the buffers live for this call; the cached tensors are used again
                    // only on the same addresses, which a later call has checked hold its buffers.
                    *cached = unsafe { self.make_views(now) }?;
                }
                run(&mut cached)
            }
            Err(_) => {
                let mut now = Vec::new();
                // SAFETY: as above; these tensors die with this call.
                unsafe { self.addresses(ctx, &mut now) }?;
                // SAFETY: the buffers live for this call, and so do the tensors.
                let mut views = unsafe { self.make_views(now) }?;
                run(&mut views)
            }
        }
    }
}

/// The buffer's address, if it holds exactly the tensor's bytes.
fn check(t: Option<&Tensor>, info: &TensorInfo) -> Result<*mut c_void, String> {
    match t {
        Some(t) if t.nbytes == info.bytes() && !t.data.is_null() => Ok(t.data),
        Some(t) => Err(format!(
            "{} has {} bytes, its shape {:?} needs {}",
            info.name,
            t.nbytes,
            info.shape,
            info.bytes()
        )),
        None => Err(format!("no descriptor for {}", info.name)),
    }
}

/// The C callback every node shares; `user_data` is its `NodeKernel`.
///
/// Calls of one node may run on several threads at once (concurrent runs of the graph), all
/// through `&NodeKernel`: its fields are read-only (the name pointers point into its own
/// CStrings; ONNX Runtime's `Run` is thread-safe) except the cached tensors, behind a mutex.
///
/// # Safety
/// Called by graphsched with a live context and the `user_data` the node was added with.
pub unsafe extern "C" fn onnx_kernel(ctx: *mut gs_kernel_ctx, user_data: *mut c_void) -> i32 {
    // SAFETY: `user_data` is the node's boxed kernel, which outlives the graph (OnnxGraph frees
    // the graph before its kernels), so it outlives every run; kernels are only read.
    let kernel = unsafe { &*(user_data as *const NodeKernel<'_>) };
    // SAFETY: graphsched passes the live context of this call.
    match unsafe { kernel.call(ctx) } {
        Ok(()) => 0,
        Err(e) => {
            // graphsched reports it as "node '<name>' failed: <this>".
            let message = CString::new(e.replace('\0', " ")).unwrap_or_default();
            // SAFETY: live context, NUL-terminated message copied by the call.
            unsafe { gs_ctx_set_error(ctx, message.as_ptr()) };
            1
        }
    }
}
