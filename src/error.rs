//! Errors of the safe Rust API. The C boundary maps each [`ErrorKind`] to one status code.

use std::fmt;

/// What went wrong, independent of the message text.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
#[non_exhaustive]
pub enum ErrorKind {
    /// An argument is out of its documented range (zero size, bad flag, interior NUL, ...).
    InvalidArgument,
    /// A node or input was given an empty name.
    EmptyName,
    /// Two nodes or inputs share a name.
    DuplicateName,
    /// An input names a node that does not exist.
    UnknownValue,
    /// An input names an output index the producing node does not have.
    OutputIndex,
    /// The graph has a cycle; the message lists the nodes on it.
    Cycle,
    /// A byte size, or a sum of byte sizes, does not fit the address space.
    SizeOverflow,
    /// The graph was finalized and can no longer change.
    Finalized,
    /// The graph must be finalized first.
    NotFinalized,
    /// The pool or the system could not provide the memory.
    OutOfMemory,
    /// A kernel reported failure (non-zero return or an error value).
    KernelFailed,
    /// A kernel panicked (Rust kernels only; C kernels cannot panic).
    KernelPanicked,
    /// Graph inputs were bound wrongly at run time (missing, unknown, wrong size, misaligned).
    InputBinding,
    /// A value was asked for that is not a graph output.
    NotAnOutput,
    /// A pointer was released that the pool did not hand out, or was already released.
    UnknownPointer,
    /// A run's memory limit cannot be met: a node's outputs do not fit even with nothing else
    /// running. The message names the node and the bytes.
    MemoryLimit,
    /// Reading or writing a file failed; the message names the file.
    Io,
    /// The run was cancelled through its cancel token.
    Cancelled,
    /// The run passed its deadline.
    DeadlineExceeded,
    /// A pool block's red zone was overwritten: something wrote past its bounds. The pool
    /// reports it when the block comes back; a run names the node instead (`KernelFailed`).
    BufferOverrun,
}

/// An error with a sentence naming the node, value or argument at fault. One pointer wide:
/// a `Result` of a pointer or a number then comes back in registers, not through memory (the
/// pool's acquire, on every call).
#[derive(Clone, PartialEq, Eq)]
pub struct Error(Box<Inner>);

#[derive(Clone, PartialEq, Eq)]
struct Inner {
    kind: ErrorKind,
    message: String,
}

impl Error {
    /// An error of `kind` with `message`, a sentence naming what was at fault.
    pub fn new(kind: ErrorKind, message: impl Into<String>) -> Self {
        Error(Box::new(Inner {
            kind,
            message: message.into(),
        }))
    }

    /// What went wrong, for code that branches on it.
    pub fn kind(&self) -> ErrorKind {
        self.0.kind
    }

    /// The sentence for people (also what `Display` prints).
    pub fn message(&self) -> &str {
        &self.0.message
    }
}

impl fmt::Debug for Error {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("Error")
            .field("kind", &self.0.kind)
            .field("message", &self.0.message)
            .finish()
    }
}

impl fmt::Display for Error {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(&self.0.message)
    }
}

impl std::error::Error for Error {}

/// The result of every fallible call of the safe API.
pub type Result<T> = std::result::Result<T, Error>;

/// Shorthand used throughout the crate: `err(ErrorKind::Cycle, format!(...))`.
pub(crate) fn err<T>(kind: ErrorKind, message: impl Into<String>) -> Result<T> {
    Err(Error::new(kind, message))
}
