//! Status codes, the last-error text, and the guard every export runs its body in.

use std::cell::RefCell;
use std::ffi::{c_char, CString};
use std::panic::{catch_unwind, AssertUnwindSafe};

use crate::error::{Error, ErrorKind};

/// What a call did. 0 is success; every other value names one kind of failure, and
/// `gs_last_error_message()` says which node, value or argument it was about.
#[allow(non_camel_case_types)]
#[repr(i32)]
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum gs_status {
    /// Success.
    GS_OK = 0,
    /// A required pointer argument is NULL.
    GS_ERR_NULL_ARGUMENT = 1,
    /// A handle is not live: freed, never created, or a handle of another kind.
    GS_ERR_INVALID_HANDLE = 2,
    /// An argument is out of range: zero or oversize count, unknown flag, non-UTF-8 text.
    GS_ERR_INVALID_ARGUMENT = 3,
    /// A node or graph input has an empty name.
    GS_ERR_EMPTY_NAME = 4,
    /// A node or graph input name is taken.
    GS_ERR_DUPLICATE_NAME = 5,
    /// A value names a node that does not exist.
    GS_ERR_UNKNOWN_VALUE = 6,
    /// A value names an output index its node does not have.
    GS_ERR_OUTPUT_INDEX = 7,
    /// The graph has a cycle; the message lists it.
    GS_ERR_CYCLE = 8,
    /// A size, or a sum of sizes, does not fit the address space.
    GS_ERR_SIZE_OVERFLOW = 9,
    /// The graph is finalized and can no longer change.
    GS_ERR_FINALIZED = 10,
    /// The graph must be finalized first.
    GS_ERR_NOT_FINALIZED = 11,
    /// The pool or the system could not provide memory.
    GS_ERR_OUT_OF_MEMORY = 12,
    /// A kernel returned non-zero or broke its output contract; the run stopped.
    GS_ERR_KERNEL_FAILED = 13,
    /// Graph inputs were bound wrongly: missing, twice, unknown, wrong size, NULL or misaligned.
    GS_ERR_INPUT_BINDING = 14,
    /// The value is not a graph output of this result.
    GS_ERR_NOT_AN_OUTPUT = 15,
    /// The pool did not hand out this pointer, or it was released already.
    GS_ERR_UNKNOWN_POINTER = 16,
    /// graphsched panicked internally; the call had no effect that can be relied on.
    GS_ERR_PANIC = 17,
    /// A run's memory limit cannot be met: the message names the node and the bytes.
    GS_ERR_MEMORY_LIMIT = 18,
    /// Reading or writing a file failed; the message names the file and the reason.
    GS_ERR_IO = 19,
    /// The run was cancelled (`gs_cancel_token_cancel`): nothing new started, every buffer went
    /// back, the graph can run again.
    GS_ERR_CANCELLED = 20,
    /// The run passed its deadline (`gs_run_options.timeout_ns`); as for a cancelled run.
    GS_ERR_DEADLINE = 21,
    /// A block given back to the pool (`gs_pool_release`) had its red zone overwritten: something
    /// wrote past its end or before its start. The block went back all the same.
    GS_ERR_BUFFER_OVERRUN = 22,
}

use gs_status::*;

impl From<ErrorKind> for gs_status {
    fn from(kind: ErrorKind) -> Self {
        match kind {
            ErrorKind::InvalidArgument => GS_ERR_INVALID_ARGUMENT,
            ErrorKind::EmptyName => GS_ERR_EMPTY_NAME,
            ErrorKind::DuplicateName => GS_ERR_DUPLICATE_NAME,
            ErrorKind::UnknownValue => GS_ERR_UNKNOWN_VALUE,
            ErrorKind::OutputIndex => GS_ERR_OUTPUT_INDEX,
            ErrorKind::Cycle => GS_ERR_CYCLE,
            ErrorKind::SizeOverflow => GS_ERR_SIZE_OVERFLOW,
            ErrorKind::Finalized => GS_ERR_FINALIZED,
            ErrorKind::NotFinalized => GS_ERR_NOT_FINALIZED,
            ErrorKind::OutOfMemory => GS_ERR_OUT_OF_MEMORY,
            ErrorKind::KernelFailed => GS_ERR_KERNEL_FAILED,
            ErrorKind::KernelPanicked => GS_ERR_PANIC,
            ErrorKind::InputBinding => GS_ERR_INPUT_BINDING,
            ErrorKind::NotAnOutput => GS_ERR_NOT_AN_OUTPUT,
            ErrorKind::UnknownPointer => GS_ERR_UNKNOWN_POINTER,
            ErrorKind::MemoryLimit => GS_ERR_MEMORY_LIMIT,
            ErrorKind::Io => GS_ERR_IO,
            ErrorKind::Cancelled => GS_ERR_CANCELLED,
            ErrorKind::DeadlineExceeded => GS_ERR_DEADLINE,
            ErrorKind::BufferOverrun => GS_ERR_BUFFER_OVERRUN,
        }
    }
}

/// Every status, for tests and for `gs_status_name`.
pub(crate) const ALL_STATUSES: [gs_status; 23] = [
    GS_OK,
    GS_ERR_NULL_ARGUMENT,
    GS_ERR_INVALID_HANDLE,
    GS_ERR_INVALID_ARGUMENT,
    GS_ERR_EMPTY_NAME,
    GS_ERR_DUPLICATE_NAME,
    GS_ERR_UNKNOWN_VALUE,
    GS_ERR_OUTPUT_INDEX,
    GS_ERR_CYCLE,
    GS_ERR_SIZE_OVERFLOW,
    GS_ERR_FINALIZED,
    GS_ERR_NOT_FINALIZED,
    GS_ERR_OUT_OF_MEMORY,
    GS_ERR_KERNEL_FAILED,
    GS_ERR_INPUT_BINDING,
    GS_ERR_NOT_AN_OUTPUT,
    GS_ERR_UNKNOWN_POINTER,
    GS_ERR_PANIC,
    GS_ERR_MEMORY_LIMIT,
    GS_ERR_IO,
    GS_ERR_CANCELLED,
    GS_ERR_DEADLINE,
    GS_ERR_BUFFER_OVERRUN,
];

/// A failure on its way to C: the status plus the sentence for the last error.
#[derive(Debug)]
pub(crate) struct FfiError {
    pub status: gs_status,
    pub message: String,
}

impl FfiError {
    pub(crate) fn new(status: gs_status, message: impl Into<String>) -> Self {
        FfiError {
            status,
            message: message.into(),
        }
    }
}

impl From<Error> for FfiError {
    fn from(e: Error) -> Self {
        FfiError::new(e.kind().into(), e.message())
    }
}

pub(crate) type FfiResult<T> = Result<T, FfiError>;

thread_local! {
    static LAST_ERROR: RefCell<CString> = RefCell::new(CString::default());
}

pub(crate) fn set_last_error(message: &str) {
    // An interior NUL cannot cross to C: cut the text there.
    let text = message.split('\0').next().unwrap_or_default();
    let text = CString::new(text).expect("NUL removed");
    // `try_with`: during thread teardown the slot may be gone; the status still reports.
    let _ = LAST_ERROR.try_with(|slot| *slot.borrow_mut() = text);
}

/// Runs an export's body: catches panics, stores the message of a failure, returns the status.
pub(crate) fn guard(body: impl FnOnce() -> FfiResult<()>) -> gs_status {
    let failure = match catch_unwind(AssertUnwindSafe(body)) {
        Ok(Ok(())) => return GS_OK,
        Ok(Err(e)) => e,
        Err(panic) => {
            let what = panic
                .downcast_ref::<&str>()
                .copied()
                .or_else(|| panic.downcast_ref::<String>().map(String::as_str))
                .unwrap_or("(no message)");
            FfiError::new(GS_ERR_PANIC, format!("internal error (panic): {what}"))
        }
    };
    set_last_error(&failure.message);
    failure.status
}

/// The sentence describing the calling thread's most recent failed call, or "" if none failed.
/// The text stays valid until the next failed call on the same thread.
///
/// Thread-safe: reads and writes only the calling thread's state.
#[no_mangle]
pub extern "C" fn gs_last_error_message() -> *const c_char {
    LAST_ERROR
        .try_with(|slot| slot.borrow().as_ptr())
        .unwrap_or(c"".as_ptr())
}

/// Forgets the calling thread's last error: `gs_last_error_message()` gives "" until a call on
/// this thread fails again. Call it before a sequence of calls to tell a fresh message from a
/// stale one (only failures write the message; successes leave it).
///
/// Thread-safe: reads and writes only the calling thread's state.
#[no_mangle]
pub extern "C" fn gs_clear_last_error() {
    let _ = LAST_ERROR.try_with(|slot| *slot.borrow_mut() = CString::default());
}

/// The name of a status code, e.g. "GS_ERR_CYCLE"; "GS_UNKNOWN_STATUS" for other values.
/// The text is static.
///
/// Thread-safe: no state.
#[no_mangle]
pub extern "C" fn gs_status_name(status: i32) -> *const c_char {
    macro_rules! cstr {
        ($s:literal) => {
            concat!($s, "\0").as_ptr() as *const c_char
        };
    }
    match ALL_STATUSES.iter().find(|&&s| s as i32 == status) {
        Some(GS_OK) => cstr!("GS_OK"),
        Some(GS_ERR_NULL_ARGUMENT) => cstr!("GS_ERR_NULL_ARGUMENT"),
        Some(GS_ERR_INVALID_HANDLE) => cstr!("GS_ERR_INVALID_HANDLE"),
        Some(GS_ERR_INVALID_ARGUMENT) => cstr!("GS_ERR_INVALID_ARGUMENT"),
        Some(GS_ERR_EMPTY_NAME) => cstr!("GS_ERR_EMPTY_NAME"),
        Some(GS_ERR_DUPLICATE_NAME) => cstr!("GS_ERR_DUPLICATE_NAME"),
        Some(GS_ERR_UNKNOWN_VALUE) => cstr!("GS_ERR_UNKNOWN_VALUE"),
        Some(GS_ERR_OUTPUT_INDEX) => cstr!("GS_ERR_OUTPUT_INDEX"),
        Some(GS_ERR_CYCLE) => cstr!("GS_ERR_CYCLE"),
        Some(GS_ERR_SIZE_OVERFLOW) => cstr!("GS_ERR_SIZE_OVERFLOW"),
        Some(GS_ERR_FINALIZED) => cstr!("GS_ERR_FINALIZED"),
        Some(GS_ERR_NOT_FINALIZED) => cstr!("GS_ERR_NOT_FINALIZED"),
        Some(GS_ERR_OUT_OF_MEMORY) => cstr!("GS_ERR_OUT_OF_MEMORY"),
        Some(GS_ERR_KERNEL_FAILED) => cstr!("GS_ERR_KERNEL_FAILED"),
        Some(GS_ERR_INPUT_BINDING) => cstr!("GS_ERR_INPUT_BINDING"),
        Some(GS_ERR_NOT_AN_OUTPUT) => cstr!("GS_ERR_NOT_AN_OUTPUT"),
        Some(GS_ERR_UNKNOWN_POINTER) => cstr!("GS_ERR_UNKNOWN_POINTER"),
        Some(GS_ERR_PANIC) => cstr!("GS_ERR_PANIC"),
        Some(GS_ERR_MEMORY_LIMIT) => cstr!("GS_ERR_MEMORY_LIMIT"),
        Some(GS_ERR_IO) => cstr!("GS_ERR_IO"),
        Some(GS_ERR_CANCELLED) => cstr!("GS_ERR_CANCELLED"),
        Some(GS_ERR_DEADLINE) => cstr!("GS_ERR_DEADLINE"),
        Some(GS_ERR_BUFFER_OVERRUN) => cstr!("GS_ERR_BUFFER_OVERRUN"),
        None => cstr!("GS_UNKNOWN_STATUS"),
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::ffi::CStr;

    #[test]
    fn guard_turns_a_panic_into_a_status_and_message() {
        let status = guard(|| panic!("boom in the middle"));
        assert_eq!(status, GS_ERR_PANIC);
        // SAFETY: the last error is a valid C string owned by this thread.
        let text = unsafe { CStr::from_ptr(gs_last_error_message()) }.to_str().unwrap();
        assert!(text.contains("boom in the middle"), "{text}");
    }

    #[test]
    fn every_status_has_its_own_name() {
        let mut names: Vec<String> = ALL_STATUSES
            .iter()
            .map(|&s| {
                // SAFETY: gs_status_name returns static C strings.
                unsafe { CStr::from_ptr(gs_status_name(s as i32)) }
                    .to_str()
                    .unwrap()
                    .to_owned()
            })
            .collect();
        assert!(names.iter().all(|n| n.starts_with("GS_") && n != "GS_UNKNOWN_STATUS"));
        names.sort();
        names.dedup();
        assert_eq!(names.len(), ALL_STATUSES.len());
        // SAFETY: as above.
        let unknown = unsafe { CStr::from_ptr(gs_status_name(-7)) };
        assert_eq!(unknown.to_str().unwrap(), "GS_UNKNOWN_STATUS");
    }
}
