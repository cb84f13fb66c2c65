//! The tensor descriptor that travels with every buffer. graphsched never interprets shapes:
//! kernels write them, consumers read them.

use std::ffi::c_void;
use std::ptr;

/// Most dimensions a descriptor can carry.
pub const MAX_DIMS: usize = 8;

/// Buffer alignment every value's data pointer honours.
pub const ALIGNMENT: usize = 16;

/// Largest size of one buffer (one value, one node's outputs together, one pool block): what
/// `Layout` accepts with room for alignment.
pub const MAX_VALUE_BYTES: usize = isize::MAX as usize - 4096;

/// A buffer plus its shape. (C: `gs_tensor`).
///
/// `data` is 16-byte aligned and valid for `nbytes` bytes while the node that sees it runs (or,
/// for a run result, until the result is freed). `dtype` is one of the `GS_DTYPE_*` codes or any
/// value the engine chooses; `dims`/`strides` hold `ndim` entries (strides in elements).
#[repr(C)]
#[derive(Clone, Copy, Debug)]
pub struct Tensor {
    pub data: *mut c_void,
    pub nbytes: usize,
    pub dtype: i32,
    pub ndim: i32,
    pub dims: [i64; 8],
    pub strides: [i64; 8],
}

impl Tensor {
    /// A descriptor of `nbytes` at `data` with no shape set.
    pub fn new(data: *mut c_void, nbytes: usize) -> Self {
        Tensor {
            data,
            nbytes,
            dtype: 0,
            ndim: 0,
            dims: [0; MAX_DIMS],
            strides: [0; MAX_DIMS],
        }
    }

    /// An empty descriptor (no data yet), used for dynamic outputs before the kernel allocates.
    pub fn empty() -> Self {
        Tensor::new(ptr::null_mut(), 0)
    }
}

impl Default for Tensor {
    fn default() -> Self {
        Tensor::empty()
    }
}
