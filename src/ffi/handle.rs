//! Opaque handles (their registry is [`registry`]) and the checks on pointers that cross the
//! boundary.

use std::ffi::{c_char, CStr};

use super::gs_status::*;
use super::registry;
use super::status::{set_last_error, FfiError, FfiResult};

/// A type the C side holds by handle.
pub(crate) trait Handle: Sized + 'static {
    /// The C type name, for messages.
    const NAME: &'static str;
    /// Tells this type's handles from others' (non-zero, one per type).
    const TAG: u8;
}

/// Moves `value` to the heap, registers it and returns its handle; `None` if 4,194,304 handles
/// are live already.
pub(crate) fn into_handle<T: Handle>(value: T) -> FfiResult<*mut T> {
    into_handle_boxed(Box::new(value))
}

/// [`into_handle`] for a value already on the heap (an allocation the caller recycles).
pub(crate) fn into_handle_boxed<T: Handle>(value: Box<T>) -> FfiResult<*mut T> {
    let addr = Box::into_raw(value) as usize;
    match registry::register(T::TAG, addr) {
        Some(handle) => Ok(handle as *mut T),
        None => {
            // SAFETY: just made by `Box::into_raw` and never registered.
            drop(unsafe { Box::from_raw(addr as *mut T) });
            Err(FfiError::new(
                GS_ERR_OUT_OF_MEMORY,
                format!("cannot create a {}: 4194304 handles are live", T::NAME),
            ))
        }
    }
}

fn lookup<T: Handle>(handle: *const T, arg: &str) -> FfiResult<usize> {
    if handle.is_null() {
        return Err(FfiError::new(GS_ERR_NULL_ARGUMENT, format!("argument '{arg}' is NULL")));
    }
    registry::lookup(handle as usize, T::TAG).ok_or_else(|| invalid::<T>(handle, arg))
}

fn invalid<T: Handle>(handle: *const T, arg: &str) -> FfiError {
    FfiError::new(
        GS_ERR_INVALID_HANDLE,
        format!(
            "argument '{arg}' ({handle:p}) is not a live {}: it was freed, never created, or is another kind of handle",
            T::NAME
        ),
    )
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
    // SAFETY: the caller's promise.
    unsafe { free_handle_with(handle, arg, drop) }
}

/// [`free_handle`] that hands the object, still boxed, to `dispose` (which may keep the
/// allocation for the next handle of its type).
///
/// # Safety
/// As for [`handle_ref`].
pub(crate) unsafe fn free_handle_with<T: Handle>(handle: *mut T, arg: &str, dispose: impl FnOnce(Box<T>)) {
    if handle.is_null() {
        return;
    }
    // SAFETY: the caller's promise.
    match unsafe { take_handle(handle, arg) } {
        Ok(object) => dispose(object),
        Err(e) => set_last_error(&e.message),
    }
}

/// Unregisters a handle and hands its object back, for calls that consume a handle and report
/// a status (a second call with it is `GS_ERR_INVALID_HANDLE`).
///
/// # Safety
/// As for [`handle_ref`].
pub(crate) unsafe fn take_handle<T: Handle>(handle: *mut T, arg: &str) -> FfiResult<Box<T>> {
    if handle.is_null() {
        return Err(FfiError::new(GS_ERR_NULL_ARGUMENT, format!("argument '{arg}' is NULL")));
    }
    match registry::unregister(handle as usize, T::TAG) {
        // SAFETY: registered by `into_handle_boxed`, so it came from `Box::into_raw`; the slot is
        // no longer live, so nobody takes it twice.
        Some(addr) => Ok(unsafe { Box::from_raw(addr as *mut T) }),
        None => Err(invalid::<T>(handle, arg)),
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
