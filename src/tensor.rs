//! The tensor descriptor that travels with every buffer. graphsched never interprets shapes:
//! kernels write them, consumers read them.
//!
//! A [`Tensor`] is a plain `repr(C)` value (the C `gs_tensor`) that borrows its bytes: it never
//! owns or frees `data`, and copying it copies the pointer. Before a kernel runs, each static
//! output's descriptor holds its buffer and the declared size, with no shape: `dtype`, `ndim`,
//! `dims` and `strides` 0 (a dynamic one is empty until the kernel allocates it). To spare a
//! steady run writing 128 bytes of every value, `dims` and `strides` are cleared only where an
//! earlier run left a shape (`ndim` not 0): a producer that writes `strides` sets `ndim`. The
//! kernel may set `dtype`, `ndim`, `dims` and `strides`, and lower `nbytes`. After the kernel the run checks that `data` is unchanged,
//! `nbytes` fits the buffer and `ndim` is in `0..=MAX_DIMS` (else `KernelFailed`), then hands
//! the descriptor as it is to every consumer and, for a graph output, to the result.
//!
//! ```
//! use graphsched::{GraphBuilder, NodeDesc, Pool, RunOptions, ValueRef};
//! use std::sync::Arc;
//!
//! let mut b = GraphBuilder::new();
//! let m = b.add_node(NodeDesc::new("m", "Matrix", Box::new(|ctx| {
//!     let t = ctx.output(0).unwrap(); // a 16-byte buffer; 6 bytes used, as a 2 x 3 u8 matrix
//!     (t.nbytes, t.dtype, t.ndim) = (6, graphsched::ffi::GS_DTYPE_U8, 2);
//!     t.dims[..2].copy_from_slice(&[2, 3]);
//!     Ok(())
//! })).output(16)).unwrap();
//! b.mark_output(ValueRef::new(m, 0)).unwrap();
//! let graph = Arc::new(b.finalize().unwrap());
//! let pool = Arc::new(Pool::default());
//! let result = graphsched::run(&graph, &pool, &RunOptions::default()).unwrap();
//! let t = result.output(ValueRef::new(m, 0)).unwrap();
//! assert_eq!((t.nbytes, &t.dims[..t.ndim as usize]), (6, &[2, 3][..]));
//! assert_eq!(t.data as usize % graphsched::tensor::ALIGNMENT, 0);
//! ```

use std::ffi::c_void;
use std::ptr;

/// Most dimensions a descriptor can carry.
pub const MAX_DIMS: usize = 8;

/// Buffer alignment every value's data pointer honours.
pub const ALIGNMENT: usize = 16;

/// Where the `data` of a value of 0 bytes points: a non-NULL address, [`ALIGNMENT`]-aligned,
/// that no allocation owns. An empty tensor (a batch of 0, a zero-sized dimension) has nothing to
/// read or write; its data is never dereferenced, so the same address serves every one, the
/// bindings of 0 bytes included (whatever pointer the caller bound, NULL too).
// An address with no provenance, never dereferenced (`ptr::without_provenance_mut` in const
// needs Rust 1.84; the crate supports 1.81).
pub const EMPTY_DATA: *mut c_void = ALIGNMENT as *mut c_void;

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
    /// First byte of the buffer; borrowed, never freed through the descriptor. NULL for a
    /// dynamic output not allocated yet; [`EMPTY_DATA`] for a value of 0 bytes.
    pub data: *mut c_void,
    /// Bytes of meaningful data at `data`; at most the buffer's size.
    pub nbytes: usize,
    /// Element type code, stored and passed on, never read by graphsched.
    pub dtype: i32,
    /// Number of dimensions in use, 0 to 8.
    pub ndim: i32,
    /// Extent of each dimension; the first `ndim` entries count.
    pub dims: [i64; 8],
    /// Step of each dimension, in elements; the first `ndim` entries count. graphsched never
    /// fills these in: 0 unless the producer wrote them (it clears them, with `dims`, where an
    /// earlier run left `ndim` set: a producer that writes strides sets `ndim`).
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
