//! Opaque handles and the checks on pointers that cross the boundary.
//!
//! A handle given to C is not an address: it is a registry key, a number drawn from a counter
//! that never repeats, dressed as a pointer. Every call looks the key up before touching the
//! object behind it, so NULL, freed, foreign and garbage handles are errors instead of undefined
//! behaviour (even under valgrind), and a freed handle stays invalid even after its memory is
//! reused by a new handle. The one misuse this cannot catch is freeing a handle while another
//! thread is still inside a call on it.

use std::any::TypeId;
use std::collections::HashMap;
use std::ffi::{c_char, CStr};
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::{LazyLock, RwLock, RwLockWriteGuard};

use super::gs_status::*;
use super::status::{set_last_error, FfiError, FfiResult};

/// Key -> (type, address of the boxed object).
type Registry = HashMap<usize, (TypeId, usize)>;

static LIVE: LazyLock<RwLock<Registry>> = LazyLock::new(Default::default);

/// Keys step by 16 so that a handle looks like an aligned pointer to C tools; 0 stays NULL.
/// Invariant: a multiple of 16, above every key handed out. Relaxed: the read-modify-write alone
/// makes every key unique, and the registry's lock, not this counter, publishes the object.
static NEXT_KEY: AtomicUsize = AtomicUsize::new(16);

/// A type the C side holds by handle.
pub(crate) trait Handle: Sized + 'static {
    /// The C type name, for messages.
    const NAME: &'static str;
}

fn write() -> RwLockWriteGuard<'static, Registry> {
    LIVE.write().unwrap_or_else(|e| e.into_inner())
}

/// Moves `value` to the heap, registers it and returns its handle.
pub(crate) fn into_handle<T: Handle>(value: T) -> *mut T {
    let key = NEXT_KEY.fetch_add(16, Ordering::Relaxed);
    let addr = Box::into_raw(Box::new(value)) as usize;
    write().insert(key, (TypeId::of::<T>(), addr));
    key as *mut T
}

fn lookup<T: Handle>(handle: *const T, arg: &str) -> FfiResult<usize> {
    if handle.is_null() {
        return Err(FfiError::new(GS_ERR_NULL_ARGUMENT, format!("argument '{arg}' is NULL")));
    }
    match LIVE.read().unwrap_or_else(|e| e.into_inner()).get(&(handle as usize)) {
        Some(&(t, addr)) if t == TypeId::of::<T>() => Ok(addr),
        _ => Err(FfiError::new(
            GS_ERR_INVALID_HANDLE,
            format!(
                "argument '{arg}' ({handle:p}) is not a live {}: it was freed, never created, or is another kind of handle",
                T::NAME
            ),
        )),
    }
}

/// Borrows the object behind a live handle.
///
/// # Safety
/// No other thread may free the handle during the borrow (the C API's documented rule).
pub(crate) unsafe fn handle_ref<'a, T: Handle>(handle: *const T, arg: &str) -> FfiResult<&'a T> {
    let addr = lookup(handle, arg)?;
    // SAFETY: registered, so `addr` is a live `Box<T>` allocation, not freed meanwhile (caller).
    Ok(unsafe { &*(addr as *const T) })
}

/// Unregisters a handle and drops its object. NULL does nothing; an invalid handle is left alone
/// and reported in the last error (the free functions return nothing).
///
/// # Safety
/// As for [`handle_ref`].
pub(crate) unsafe fn free_handle<T: Handle>(handle: *mut T, arg: &str) {
    if handle.is_null() {
        return;
    }
    let addr = {
        let mut live = write();
        let addr = match live.get(&(handle as usize)) {
            Some(&(t, addr)) if t == TypeId::of::<T>() => live.remove(&(handle as usize)).map(|_| addr),
            _ => None,
        };
        if live.is_empty() {
            // Give the table's memory back, so a program that freed every handle holds nothing
            // from graphsched (leak checkers stay quiet).
            *live = HashMap::new();
        }
        addr
    };
    match addr {
        // SAFETY: registered by `into_handle`, so it came from `Box::into_raw`; the entry is
        // gone, so nobody frees it twice.
        Some(addr) => drop(unsafe { Box::from_raw(addr as *mut T) }),
        None => {
            if let Err(e) = lookup(handle as *const T, arg) {
                set_last_error(&e.message);
            }
        }
    }
}

/// A required output argument.
///
/// # Safety
/// A non-NULL `ptr` must be valid for writes of `T`.
pub(crate) unsafe fn out_arg<'a, T>(ptr: *mut T, arg: &str) -> FfiResult<&'a mut T> {
    // SAFETY: non-NULL and valid by the caller's contract.
    unsafe { ptr.as_mut() }.ok_or_else(|| FfiError::new(GS_ERR_NULL_ARGUMENT, format!("argument '{arg}' is NULL")))
}

/// A required NUL-terminated UTF-8 string.
///
/// # Safety
/// A non-NULL `ptr` must point to a NUL-terminated string that outlives the borrow.
pub(crate) unsafe fn str_arg<'a>(ptr: *const c_char, arg: &str) -> FfiResult<&'a str> {
    if ptr.is_null() {
        return Err(FfiError::new(GS_ERR_NULL_ARGUMENT, format!("argument '{arg}' is NULL")));
    }
    // SAFETY: non-NULL and NUL-terminated by the caller's contract.
    let bytes = unsafe { CStr::from_ptr(ptr) };
    bytes.to_str().map_err(|e| {
        FfiError::new(
            GS_ERR_INVALID_ARGUMENT,
            format!(
                "argument '{arg}' (\"{}\") is not valid UTF-8: {e}",
                bytes.to_string_lossy()
            ),
        )
    })
}

/// An array of `len` elements; NULL is fine when `len` is 0.
///
/// # Safety
/// A non-NULL `ptr` must be valid for reads of `len` elements.
pub(crate) unsafe fn slice_arg<'a, T>(ptr: *const T, len: usize, max: usize, arg: &str) -> FfiResult<&'a [T]> {
    if len == 0 {
        return Ok(&[]);
    }
    if len > max {
        return Err(FfiError::new(
            GS_ERR_INVALID_ARGUMENT,
            format!("count of '{arg}' is {len}, more than the {max} allowed"),
        ));
    }
    if ptr.is_null() {
        return Err(FfiError::new(
            GS_ERR_NULL_ARGUMENT,
            format!("argument '{arg}' is NULL but its count is {len}"),
        ));
    }
    // SAFETY: valid for `len` reads by the caller's contract; `len` is bounded above.
    Ok(unsafe { std::slice::from_raw_parts(ptr, len) })
}
