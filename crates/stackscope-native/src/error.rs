//! Errors, classified by what the caller should do about them.

use std::path::PathBuf;

use thiserror::Error;

/// Why a native unwind failed, or why it stopped early.
#[derive(Debug, Error)]
pub enum NativeError {
    /// The process exited.
    #[error("process {pid} is gone")]
    ProcessGone { pid: u32 },
    /// The thread exited (or never existed in this process).
    #[error("thread {tid} of process {pid} is gone")]
    ThreadGone { pid: u32, tid: u32 },
    /// The thread exists but is not ptrace-stopped by the calling thread, so its registers
    /// cannot be read. A ptrace stop belongs to the OS thread that made it: unwind from the
    /// thread that stopped the target.
    #[error(
        "thread {tid} of process {pid} is not ptrace-stopped by this thread; stop it (from the \
         thread that unwinds) before unwinding"
    )]
    NotStopped { pid: u32, tid: u32 },
    /// We may not read the process.
    #[error(
        "permission denied reading process {pid}: needs root or CAP_SYS_PTRACE (in a container: \
         --cap-add SYS_PTRACE)"
    )]
    PermissionDenied { pid: u32 },
    /// The target's memory at `address` could not be read (a corrupt or unmapped stack).
    #[error("could not read memory of process {pid} at {address:#x}")]
    UnreadableMemory { pid: u32, address: u64 },
    /// No module and no unwind information covers `address` (JIT code, a corrupt return
    /// address): unwinding could not go past it.
    #[error("no unwind information for address {address:#x}")]
    NoUnwindInfo { address: u64 },
    /// Unwinding went in circles or backwards (a corrupt stack).
    #[error("unwinding stopped at {address:#x}: {reason}")]
    Corrupt { address: u64, reason: String },
    /// A file of the target could not be read (its memory map, a module).
    #[error("could not read {path}: {source}")]
    Io {
        path: PathBuf,
        #[source]
        source: std::io::Error,
    },
}

/// The class of a [`NativeError`], for callers that count or route failures.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum NativeErrorKind {
    /// The process or thread went away: not an error of ours, the sample is simply lost.
    Gone,
    /// Memory of the target could not be read.
    UnreadableMemory,
    /// Unwind information was missing (or the stack corrupt), so the stack is cut short.
    NoUnwindInfo,
    /// The caller must do something: stop the thread first, or get permission.
    Usage,
    /// Reading a file failed.
    Io,
}

impl NativeError {
    pub fn kind(&self) -> NativeErrorKind {
        match self {
            NativeError::ProcessGone { .. } | NativeError::ThreadGone { .. } => {
                NativeErrorKind::Gone
            }
            NativeError::UnreadableMemory { .. } => NativeErrorKind::UnreadableMemory,
            NativeError::NoUnwindInfo { .. } | NativeError::Corrupt { .. } => {
                NativeErrorKind::NoUnwindInfo
            }
            NativeError::NotStopped { .. } | NativeError::PermissionDenied { .. } => {
                NativeErrorKind::Usage
            }
            NativeError::Io { .. } => NativeErrorKind::Io,
        }
    }

    /// Classifies an error from reading a `/proc/PID/...` file.
    pub(crate) fn from_proc_io(pid: u32, path: PathBuf, source: std::io::Error) -> NativeError {
        match source.kind() {
            std::io::ErrorKind::NotFound => NativeError::ProcessGone { pid },
            std::io::ErrorKind::PermissionDenied => NativeError::PermissionDenied { pid },
            _ => NativeError::Io { path, source },
        }
    }
}
