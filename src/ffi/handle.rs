//! Opaque handles and the checks on pointers that cross the boundary.
//!
//! Every live handle is recorded in a registry, keyed by address, with its type. A handle is
//! looked up before it is dereferenced, so a freed, foreign or garbage pointer is an error
//! instead of undefined behaviour, even under valgrind. Freeing removes the record first. The one
//! misuse this cannot catch is freeing a handle while another thread is still inside a call on it.

use std::any::TypeId;
use std::collections::HashMap;
use std::ffi::{c_char, CStr};
use std::sync::{LazyLock, RwLock};

use super::gs_status::*;
use super::status::{set_last_error, FfiError, FfiResult};

static LIVE: LazyLock<RwLock<HashMap<usize, TypeId>>> = LazyLock::new(Default::default);

/// A type the C side holds by pointer.
pub(crate) trait Handle: Sized + 'static {
    /// The C type name, for messages.
    const NAME: &'static str;
}

/// Moves `value` to the heap and registers it.
pub(crate) fn into_handle<T: Handle>(value: T) -> *mut T {
    let ptr = Box::into_raw(Box::new(value));
    LIVE.write()
        .unwrap_or_else(|e| e.into_inner())
        .insert(ptr as usize, TypeId::of::<T>());
    ptr
}

fn check<T: Handle>(ptr: *const T, arg: &str) -> FfiResult<()> {
    if ptr.is_null() {
        return Err(FfiError::new(GS_ERR_NULL_ARGUMENT, format!("argument '{arg}' is NULL")));
    }
    let live = LIVE.read().unwrap_or_else(|e| e.into_inner());
    if live.get(&(ptr as usize)) != Some(&TypeId::of::<T>()) {
        return Err(FfiError::new(
            GS_ERR_INVALID_HANDLE,
            format!("argument '{arg}' ({ptr:p}) is not a live {}: it was freed, never created, or is another kind of handle", T::NAME),
        ));
    }
    Ok(())
}

/// Borrows a live handle.
///
/// # Safety
/// No other thread may free the handle during the borrow (the C API's documented rule).
pub(crate) unsafe fn handle_ref<'a, T: Handle>(ptr: *const T, arg: &str) -> FfiResult<&'a T> {
    check(ptr, arg)?;
    // SAFETY: registered, so it is a live `Box<T>` allocation; not freed meanwhile (caller).
    Ok(unsafe { &*ptr })
}

/// Unregisters and drops a handle. NULL does nothing; an unregistered pointer is left alone
/// and reported in the last error (the free functions return nothing).
///
/// # Safety
/// As for [`handle_ref`].
pub(crate) unsafe fn free_handle<T: Handle>(ptr: *mut T, arg: &str) {
    if ptr.is_null() {
        return;
    }
    let removed = {
        let mut live = LIVE.write().unwrap_or_else(|e| e.into_inner());
        match live.get(&(ptr as usize)) {
            Some(&t) if t == TypeId::of::<T>() => live.remove(&(ptr as usize)).is_some(),
            _ => false,
        }
    };
    if removed {
        // SAFETY: it was registered by `into_handle`, so it came from `Box::into_raw`, and the
        // registry entry is gone, so nobody frees it twice.
        drop(unsafe { Box::from_raw(ptr) });
    } else if let Err(e) = check(ptr as *const T, arg) {
        set_last_error(&e.message);
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
