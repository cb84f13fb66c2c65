//! What a kernel sees while it runs.

use std::ffi::c_void;

use crate::error::{err, ErrorKind, Result};
use crate::graph::{Graph, OutputSize};
use crate::pool::{Owner, Pool};
use crate::tensor::{Tensor, ALIGNMENT};

/// The inputs, outputs and services of one node while its kernel runs.
///
/// Inputs are read-only. A statically sized output arrives allocated; a dynamic one is allocated
/// by [`alloc_output`](Self::alloc_output) with the real size. The kernel may set an output's
/// dtype and shape, and may lower its `nbytes`, but not raise it or move `data`.
pub struct KernelCtx<'a> {
    pub(super) graph: &'a Graph,
    pub(super) node: u32,
    pub(super) pool: &'a Pool,
    pub(super) inputs: &'a [Tensor],
    pub(super) outputs: &'a mut [Tensor],
    /// What the run handed out for each output; the kernel cannot move these.
    pub(super) buffers: &'a mut [Buffer],
    pub(super) error: Option<String>,
    /// The output that took over an input's buffer, if any.
    pub(super) in_place: Option<usize>,
    /// Under a memory limit: reserves bytes for a dynamic output, or refuses them with the
    /// run's `MemoryLimit` error. `None`: no limit.
    pub(super) reserve: Option<&'a (dyn Fn(u64) -> Result<()> + Sync)>,
    /// Bytes of dynamic outputs reserved under the limit so far (given back if the node fails).
    pub(super) reserved: u64,
    /// A dynamic allocation the memory limit refused: the run fails with it whatever the kernel
    /// returns.
    pub(super) refused: Option<crate::error::Error>,
    /// Blocks this node took from the pool itself (dynamic outputs).
    pub(super) acquired: u64,
}

impl KernelCtx<'_> {
    pub fn node(&self) -> u32 {
        self.node
    }

    pub fn node_name(&self) -> &str {
        self.graph.node_name(self.node)
    }

    pub fn graph(&self) -> &Graph {
        self.graph
    }

    pub fn num_inputs(&self) -> usize {
        self.inputs.len()
    }

    pub fn num_outputs(&self) -> usize {
        self.outputs.len()
    }

    pub fn input(&self, i: usize) -> Option<&Tensor> {
        self.inputs.get(i)
    }

    pub fn output(&mut self, i: usize) -> Option<&mut Tensor> {
        self.outputs.get_mut(i)
    }

    /// The bytes of input `i`.
    pub fn input_bytes(&self, i: usize) -> Option<&[u8]> {
        let t = self.inputs.get(i)?;
        // SAFETY: input buffers stay valid and unwritten while any consumer runs, and `nbytes`
        // never exceeds the buffer (the run checks it after the producer finishes).
        Some(unsafe { std::slice::from_raw_parts(t.data as *const u8, t.nbytes) })
    }

    /// The bytes of output `i`: its whole buffer, empty while a dynamic output is unallocated.
    pub fn output_bytes(&mut self, i: usize) -> Option<&mut [u8]> {
        let b = *self.buffers.get(i)?;
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
        let graph = self.graph;
        let name = graph.node_name(self.node);
        if i >= self.outputs.len() {
            return err(
                ErrorKind::InvalidArgument,
                format!(
                    "node '{name}' has no output {i} to allocate ({} outputs)",
                    self.outputs.len()
                ),
            );
        }
        let value = self.graph.node_values(self.node).start + i as u32;
        if self.graph.value_size(value) != OutputSize::Dynamic {
            return err(
                ErrorKind::InvalidArgument,
                format!("output {i} of node '{name}' has a static size and is allocated already"),
            );
        }
        if !self.buffers[i].ptr.is_null() {
            return err(
                ErrorKind::InvalidArgument,
                format!("dynamic output {i} of node '{name}' is allocated already"),
            );
        }
        // An empty output gets a dangling, aligned pointer: nothing to allocate or give back.
        let ptr = if nbytes == 0 {
            ALIGNMENT as *mut c_void
        } else {
            if let Some(reserve) = self.reserve {
                if let Err(e) = reserve(nbytes as u64) {
                    self.refused = Some(e.clone());
                    return Err(e);
                }
                self.reserved += nbytes as u64;
            }
            let until = self.graph.release_tick(value).map_or(crate::pool::NEVER, u64::from);
            let block = self
                .pool
                .acquire_until(nbytes, self.graph.zero_output(self.node), until, Owner::Run)
                .map_err(|e| {
                    crate::error::Error::new(
                        e.kind(),
                        format!("dynamic output {i} of node '{name}': {}", e.message()),
                    )
                })?; // a reservation made above goes back with the node's others if it fails
            self.acquired += 1;
            block.as_ptr().cast()
        };
        self.buffers[i] = Buffer::new(ptr, nbytes);
        // Keep a dtype or shape the kernel set before allocating.
        self.outputs[i].data = ptr;
        self.outputs[i].nbytes = nbytes;
        Ok(&mut self.outputs[i])
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

/// A buffer the run handed to a node: where it is and how many bytes are usable.
#[derive(Clone, Copy, Debug)]
pub(crate) struct Buffer {
    pub ptr: *mut c_void,
    /// Bytes of the value: what the run accounts for.
    pub capacity: usize,
    /// Bytes of the pool block at `ptr`, where its red zones are: `capacity`, except for an
    /// in-place output that took over a larger input's block.
    pub block: usize,
}

impl Buffer {
    pub const NONE: Buffer = Buffer {
        ptr: std::ptr::null_mut(),
        capacity: 0,
        block: 0,
    };

    /// A whole block of `capacity` bytes.
    pub fn new(ptr: *mut c_void, capacity: usize) -> Buffer {
        Buffer {
            ptr,
            capacity,
            block: capacity,
        }
    }
}
