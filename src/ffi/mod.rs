//! The C ABI: the only place with `extern "C"`. It checks and converts, then calls the safe API.
//!
//! Conventions, for every `gs_*` function:
//! - It returns a [`gs_status`] (a few getters return a pointer or a number instead, and say so).
//! - A failing call stores a sentence naming the culprit in the calling thread's last error,
//!   read with [`gs_last_error_message`].
//! - Handles are opaque and registered while alive, so NULL, freed, foreign or garbage handles
//!   are reported as errors instead of being dereferenced. `*_free(NULL)` does nothing.
//! - Panics are caught at the boundary and reported as `GS_ERR_PANIC`.

// C names, spelled as the header spells them.
#![allow(non_camel_case_types)]
// The exports are `extern "C"` functions for C callers, and this module is public, so Rust can
// call them too. Every export that takes a pointer or a handle is `unsafe`: handles are looked
// up in the registry before any use and NULL is checked, but what is left (pointers valid for
// reads or writes, no handle freed while another thread is inside a call on it) is the caller's
// to guarantee, and each function's `# Safety` section says exactly what. Only the exports
// without pointer arguments are safe.

mod cancel;
mod completion;
mod ctx;
mod executor;
mod graph;
mod handle;
mod observe;
mod parallel;
mod partition;
mod plan;
mod pool;
mod registry;
mod run;
mod sim;
mod status;

pub use cancel::*;
pub use completion::*;
pub use ctx::*;
pub use executor::*;
pub use graph::*;
pub use observe::{gs_node_observation, gs_observer_fn};
pub use parallel::*;
pub use partition::*;
pub use plan::*;
pub use pool::*;
pub use run::*;
pub use sim::*;
pub use status::*;

use static_assertions::{assert_eq_align, const_assert_eq};

use crate::exec::RunStats;
use crate::graph::{GraphInfo, ValueRef};
use crate::pool::{PoolConfig, PoolStats};
use crate::tensor::Tensor;

/// Major version this header declares: the crate's, checked when the library builds.
pub const GS_VERSION_MAJOR: u32 = 0;
/// Minor version this header declares: the crate's, checked when the library builds.
pub const GS_VERSION_MINOR: u32 = 4;
/// Patch version this header declares: the crate's, checked when the library builds.
pub const GS_VERSION_PATCH: u32 = 0;
/// `major * 10000 + minor * 100 + patch`.
pub const GS_VERSION_NUMBER: u32 = 400;

/// Most dimensions a `gs_tensor` carries.
pub const GS_MAX_DIMS: u32 = 8;
/// Alignment, in bytes, of every buffer graphsched hands out.
pub const GS_ALIGNMENT: u32 = 16;
/// Output size meaning "the kernel allocates this output with `gs_ctx_alloc_output`"
/// (`SIZE_MAX`; cbindgen cannot spell it, so the header defines it in cbindgen.toml).
pub const GS_SIZE_DYNAMIC: usize = usize::MAX;
/// Most inputs, and most outputs, of one node.
pub const GS_MAX_NODE_PORTS: u32 = 65535;
/// Node flag: clear every output buffer before the kernel runs.
pub const GS_NODE_ZERO_OUTPUT: u32 = 1;
/// Node flag: output `in_place_output` may take over input `in_place_input`'s buffer (see
/// `gs_node_desc`); the kernel can tell with `gs_ctx_output_in_place`.
pub const GS_NODE_IN_PLACE: u32 = 2;

/// Suggested `gs_tensor.dtype` codes; graphsched stores the field and never reads it.
pub const GS_DTYPE_UNKNOWN: i32 = 0;
/// IEEE 754 binary32.
pub const GS_DTYPE_F32: i32 = 1;
/// IEEE 754 binary16.
pub const GS_DTYPE_F16: i32 = 2;
/// bfloat16: binary32's exponent, 7 bits of mantissa.
pub const GS_DTYPE_BF16: i32 = 3;
/// IEEE 754 binary64.
pub const GS_DTYPE_F64: i32 = 4;
/// Signed 8-bit integer.
pub const GS_DTYPE_I8: i32 = 5;
/// Unsigned 8-bit integer.
pub const GS_DTYPE_U8: i32 = 6;
/// Signed 16-bit integer.
pub const GS_DTYPE_I16: i32 = 7;
/// Signed 32-bit integer.
pub const GS_DTYPE_I32: i32 = 8;
/// Signed 64-bit integer.
pub const GS_DTYPE_I64: i32 = 9;
/// Boolean; the element's size and encoding are the engine's to choose.
pub const GS_DTYPE_BOOL: i32 = 10;

/// Version of the loaded library; compare with `GS_VERSION_NUMBER` from the header compiled in.
///
/// Thread-safe: no state.
#[no_mangle]
pub extern "C" fn gs_version_number() -> u32 {
    GS_VERSION_NUMBER
}

// The header's literals must match Cargo.toml: cbindgen copies literals, so the check is here.
const fn parse_u32(s: &str) -> u32 {
    let b = s.as_bytes();
    let mut i = 0;
    let mut n = 0;
    while i < b.len() {
        n = n * 10 + (b[i] - b'0') as u32;
        i += 1;
    }
    n
}
const_assert_eq!(GS_VERSION_MAJOR, parse_u32(env!("CARGO_PKG_VERSION_MAJOR")));
const_assert_eq!(GS_VERSION_MINOR, parse_u32(env!("CARGO_PKG_VERSION_MINOR")));
const_assert_eq!(GS_VERSION_PATCH, parse_u32(env!("CARGO_PKG_VERSION_PATCH")));
const_assert_eq!(
    GS_VERSION_NUMBER,
    GS_VERSION_MAJOR * 10000 + GS_VERSION_MINOR * 100 + GS_VERSION_PATCH
);
const_assert_eq!(GS_MAX_DIMS as usize, crate::tensor::MAX_DIMS);
const_assert_eq!(GS_ALIGNMENT as usize, crate::tensor::ALIGNMENT);
const_assert_eq!(GS_MAX_NODE_PORTS as usize, crate::graph::MAX_NODE_PORTS);

// Every struct the header exposes, pinned: a change here is an ABI change. The C side checks the
// same numbers (c_examples/abi_layout.c).
const_assert_eq!(std::mem::size_of::<Tensor>(), 152);
const_assert_eq!(std::mem::size_of::<ValueRef>(), 8);
const_assert_eq!(std::mem::size_of::<gs_input_binding>(), 160);
const_assert_eq!(std::mem::size_of::<GraphInfo>(), 80);
const_assert_eq!(std::mem::size_of::<PoolConfig>(), 32);
const_assert_eq!(std::mem::size_of::<PoolStats>(), 88);
const_assert_eq!(std::mem::size_of::<RunStats>(), 56);
const_assert_eq!(std::mem::size_of::<gs_node_desc>(), 80);
const_assert_eq!(std::mem::size_of::<gs_run_options>(), 104);
const_assert_eq!(std::mem::size_of::<gs_node_observation>(), 32);
const_assert_eq!(std::mem::size_of::<gs_executor_config>(), 4);
const_assert_eq!(std::mem::size_of::<gs_sim_options>(), 24);
const_assert_eq!(std::mem::size_of::<gs_partition_options>(), 24);
const_assert_eq!(std::mem::size_of::<crate::sim::SimResult>(), 56);
assert_eq_align!(Tensor, u64);
assert_eq_align!(ValueRef, u32);
assert_eq_align!(gs_input_binding, u64);
assert_eq_align!(GraphInfo, u64);
assert_eq_align!(PoolConfig, u64);
assert_eq_align!(PoolStats, u64);
assert_eq_align!(RunStats, u64);
assert_eq_align!(gs_node_desc, u64);
assert_eq_align!(gs_run_options, u64);
assert_eq_align!(gs_node_observation, u64);
assert_eq_align!(gs_executor_config, u32);
assert_eq_align!(gs_sim_options, u64);
assert_eq_align!(gs_partition_options, u64);
assert_eq_align!(crate::sim::SimResult, u64);
