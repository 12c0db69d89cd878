//! Errors, classified by what the caller should do about them.

use std::path::PathBuf;

use stackscope_event::SampleErrorKind;
use thiserror::Error;

use crate::fast::ReadError;
use crate::permission::{self, Refusal};
use crate::procfs;

/// Why attaching to a process failed. Each is fatal for that process; the message says what
/// to do about it.
#[derive(Debug, Error)]
pub enum AttachError {
    #[error("no process with pid {0}")]
    NoSuchProcess(u32),
    #[error(
        "permission denied reading process {pid}: tracing another user's process needs root or \
         CAP_SYS_PTRACE{scope_hint}\n{fixes}"
    )]
    PermissionDenied {
        pid: u32,
        scope_hint: String,
        fixes: &'static str,
    },
    #[error(
        "reading process {pid} is blocked by a seccomp profile: access to it is granted (its \
         /proc files read), but ptrace or process_vm_readv answers EPERM, and stackscope runs \
         under a seccomp filter (Seccomp: 2 in /proc/self/status)\n{fixes}"
    )]
    SeccompBlocked { pid: u32, fixes: &'static str },
    #[error(
        "process {pid} ({exe}) is not a Python process: no Python interpreter found in it{hint}"
    )]
    NotPython {
        pid: u32,
        exe: String,
        /// What to do instead, when there is something (empty otherwise).
        hint: String,
    },
    #[error("process {pid} runs Python {version}, which stackscope does not support (supported: {supported})")]
    UnsupportedVersion {
        pid: u32,
        version: String,
        supported: &'static str,
    },
    #[error("could not read the Python interpreter of process {pid}: {message}")]
    Other { pid: u32, message: String },
}

impl AttachError {
    /// Turns a failure to attach into the most specific error the process's state explains.
    pub(crate) fn diagnose(pid: u32, cause: &anyhow::Error) -> AttachError {
        if !procfs::is_alive(pid) {
            return AttachError::NoSuchProcess(pid);
        }
        if is_permission_error(cause) {
            return AttachError::permission(pid);
        }
        match procfs::maps(pid) {
            Err(e) if e.kind() == std::io::ErrorKind::PermissionDenied => {
                return AttachError::permission(pid)
            }
            Ok(maps) if !procfs::maps_mention_python(&maps) => {
                let exe = procfs::exe(pid)
                    .unwrap_or_else(|_| PathBuf::from("unknown executable"))
                    .display()
                    .to_string();
                return AttachError::NotPython {
                    pid,
                    exe,
                    hint: String::new(),
                };
            }
            _ => {}
        }
        AttachError::Other {
            pid,
            message: chain_text(cause),
        }
    }

    /// The same error, about `pid` (a process read through one of its threads is named by
    /// its own pid).
    pub(crate) fn for_pid(self, pid: u32) -> AttachError {
        match self {
            AttachError::NoSuchProcess(_) => AttachError::NoSuchProcess(pid),
            AttachError::PermissionDenied {
                scope_hint, fixes, ..
            } => AttachError::PermissionDenied {
                pid,
                scope_hint,
                fixes,
            },
            AttachError::SeccompBlocked { fixes, .. } => AttachError::SeccompBlocked { pid, fixes },
            AttachError::NotPython { exe, hint, .. } => AttachError::NotPython { pid, exe, hint },
            AttachError::UnsupportedVersion {
                version, supported, ..
            } => AttachError::UnsupportedVersion {
                pid,
                version,
                supported,
            },
            AttachError::Other { message, .. } => AttachError::Other { pid, message },
        }
    }

    pub(crate) fn permission(pid: u32) -> AttachError {
        if permission::refusal(pid) == Refusal::Seccomp {
            return AttachError::SeccompBlocked {
                pid,
                fixes: permission::SECCOMP_FIXES,
            };
        }
        let scope_hint = match procfs::ptrace_scope() {
            Some(scope) if scope > 0 => format!(
                "; kernel.yama.ptrace_scope is {scope}: run as root, or set it to 0 with \
                 `sysctl kernel.yama.ptrace_scope=0`"
            ),
            _ => String::new(),
        };
        AttachError::PermissionDenied {
            pid,
            scope_hint,
            fixes: permission::CONTAINER_FIXES,
        }
    }
}

/// Why one sampling attempt failed.
#[derive(Debug, Error)]
pub enum SampleFailure {
    /// The process is gone: the recording ends, this is not an error.
    #[error("process {0} exited")]
    ProcessGone(u32),
    /// We may no longer read the process (it exec'd a setuid binary, say): fatal.
    #[error("lost permission to read process {0}")]
    PermissionLost(u32),
    /// This sample is lost, the next one will likely work.
    #[error("{message}")]
    Transient {
        kind: SampleErrorKind,
        message: String,
    },
}

/// Classifies a failed read by stackscope's own reader, by its type.
pub(crate) fn read_failure(pid: u32, cause: &ReadError) -> SampleFailure {
    let errno = cause.errno();
    // The kernel's ESRCH is about the id we read through: the process is gone only if
    // /proc says so (a process whose leader exited is read through one of its threads).
    let gone = matches!(cause, ReadError::ProcessGone(_)) || errno == Some(libc::ESRCH);
    if gone && !procfs::is_alive(pid) {
        return SampleFailure::ProcessGone(pid);
    }
    if errno == Some(libc::EPERM) || errno == Some(libc::EACCES) {
        // A process that exited between our reads answers EPERM too.
        if !procfs::is_alive(pid) {
            return SampleFailure::ProcessGone(pid);
        }
        return SampleFailure::PermissionLost(pid);
    }
    let kind = match cause {
        ReadError::Torn => SampleErrorKind::TornRead,
        // Threads that start and end under the read, or the thread we read through.
        ReadError::ThreadGone | ReadError::ListKeepsChanging => SampleErrorKind::ThreadGone,
        ReadError::ProcessGone(_) => SampleErrorKind::ThreadGone,
        ReadError::Io { .. } if errno == Some(libc::ESRCH) => SampleErrorKind::ThreadGone,
        ReadError::Io { .. } | ReadError::Layout(_) => SampleErrorKind::Other,
    };
    SampleFailure::Transient {
        kind,
        message: cause.to_string(),
    }
}

/// A failure to stop the process, or the threads a read needs stopped, classified as
/// [`classify_sample_error`] does.
pub(crate) fn stop_failure(pid: u32, cause: impl Into<anyhow::Error>) -> SampleFailure {
    classify_sample_error(pid, &cause.into().context("cannot stop the process"))
}

/// Classifies an error from py-spy's reader, which are `anyhow` strings: by the I/O errors in
/// their chain, and else by their words (the only place that sorts errors by text).
pub fn classify_sample_error(pid: u32, cause: &anyhow::Error) -> SampleFailure {
    if !procfs::is_alive(pid) {
        return SampleFailure::ProcessGone(pid);
    }
    if is_permission_error(cause) {
        return SampleFailure::PermissionLost(pid);
    }
    let message = chain_text(cause);
    let kind = if is_gone_error(cause) {
        SampleErrorKind::ThreadGone
    } else if message.contains("copy") || message.contains("read") || message.contains("Invalid") {
        SampleErrorKind::TornRead
    } else {
        SampleErrorKind::Other
    };
    SampleFailure::Transient { kind, message }
}

fn io_errors(cause: &anyhow::Error) -> impl Iterator<Item = std::io::ErrorKind> + '_ {
    cause.chain().filter_map(|e| {
        if let Some(io) = e.downcast_ref::<std::io::Error>() {
            return Some(io.kind());
        }
        match e.downcast_ref::<remoteprocess::Error>() {
            Some(remoteprocess::Error::IOError(io)) => return Some(io.kind()),
            Some(remoteprocess::Error::NixError(errno)) => {
                return Some(std::io::Error::from_raw_os_error(*errno as i32).kind())
            }
            _ => {}
        }
        if let Some(errno) = e.downcast_ref::<nix::Error>() {
            return Some(std::io::Error::from_raw_os_error(*errno as i32).kind());
        }
        None
    })
}

fn is_permission_error(cause: &anyhow::Error) -> bool {
    io_errors(cause).any(|k| k == std::io::ErrorKind::PermissionDenied)
        || cause.chain().any(|e| {
            let text = e.to_string();
            text.contains("Operation not permitted") || text.contains("Permission denied")
        })
}

fn is_gone_error(cause: &anyhow::Error) -> bool {
    io_errors(cause).any(|k| k == std::io::ErrorKind::NotFound)
        || cause
            .chain()
            .any(|e| e.to_string().contains("No such process"))
}

/// The error and its causes on one line, the way a user reads them.
pub(crate) fn chain_text(cause: &anyhow::Error) -> String {
    let mut parts: Vec<String> = Vec::new();
    for e in cause.chain() {
        let text = e.to_string();
        if !parts.iter().any(|p| p.contains(&text)) {
            parts.push(text);
        }
    }
    parts.join(": ")
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_vanished_process_is_gone_not_an_error() {
        let err = anyhow::anyhow!("Failed to copy PyThreadState");
        assert!(matches!(
            classify_sample_error(u32::MAX - 1, &err),
            SampleFailure::ProcessGone(_)
        ));
        assert!(matches!(
            AttachError::diagnose(u32::MAX - 1, &err),
            AttachError::NoSuchProcess(_)
        ));
    }

    #[test]
    fn permission_errors_are_found_in_the_chain() {
        let io = std::io::Error::from_raw_os_error(libc::EPERM);
        let err = anyhow::Error::new(io).context("Failed to open process");
        assert!(is_permission_error(&err));
        let me = std::process::id();
        assert!(matches!(
            classify_sample_error(me, &err),
            SampleFailure::PermissionLost(_)
        ));
    }

    #[test]
    fn a_torn_read_is_transient() {
        let err = anyhow::anyhow!("Failed to copy PyCodeObject");
        let me = std::process::id();
        match classify_sample_error(me, &err) {
            SampleFailure::Transient { kind, .. } => assert_eq!(kind, SampleErrorKind::TornRead),
            other => panic!("expected transient, got {other:?}"),
        }
    }

    fn kind_of(failure: SampleFailure) -> SampleErrorKind {
        match failure {
            SampleFailure::Transient { kind, .. } => kind,
            other => panic!("expected transient, got {other:?}"),
        }
    }

    #[test]
    fn our_readers_errors_map_by_their_type() {
        let me = std::process::id();
        let errno = |e| std::io::Error::from_raw_os_error(e);
        assert_eq!(
            kind_of(read_failure(me, &ReadError::Torn)),
            SampleErrorKind::TornRead
        );
        for gone in [ReadError::ThreadGone, ReadError::ListKeepsChanging] {
            assert_eq!(
                kind_of(read_failure(me, &gone)),
                SampleErrorKind::ThreadGone
            );
        }
        // ESRCH from a process that is still there: the thread we read through ended.
        let esrch = ReadError::io("read", errno(libc::ESRCH));
        assert_eq!(
            kind_of(read_failure(me, &esrch)),
            SampleErrorKind::ThreadGone
        );
        assert!(matches!(
            read_failure(u32::MAX - 1, &esrch),
            SampleFailure::ProcessGone(_)
        ));
        assert!(matches!(
            read_failure(u32::MAX - 1, &ReadError::ProcessGone(u32::MAX - 1)),
            SampleFailure::ProcessGone(_)
        ));
        assert_eq!(
            kind_of(read_failure(me, &ReadError::ProcessGone(me))),
            SampleErrorKind::ThreadGone
        );
        assert!(matches!(
            read_failure(me, &ReadError::io("read", errno(libc::EPERM))),
            SampleFailure::PermissionLost(_)
        ));
        let eio = ReadError::io("read", errno(libc::EIO));
        assert_eq!(kind_of(read_failure(me, &eio)), SampleErrorKind::Other);
        let misfit = ReadError::Layout("a thread's walk reads garbage".into());
        match read_failure(me, &misfit) {
            SampleFailure::Transient { kind, message } => {
                assert_eq!(kind, SampleErrorKind::Other);
                assert!(message.contains("garbage"), "{message}");
            }
            other => panic!("expected transient, got {other:?}"),
        }
    }

    /// The text is not looked at: "thread" holds "read", which the py-spy classifier would
    /// call a torn read.
    #[test]
    fn words_in_the_message_do_not_decide_the_kind() {
        let me = std::process::id();
        let e = ReadError::Layout("Failed to read a thread: No such process".into());
        assert_eq!(kind_of(read_failure(me, &e)), SampleErrorKind::Other);
    }

    #[test]
    fn our_own_test_binary_is_not_python() {
        let err = anyhow::anyhow!("Failed to find python version from target process");
        let me = std::process::id();
        match AttachError::diagnose(me, &err) {
            AttachError::NotPython { exe, .. } => assert!(exe.contains("stackscope_sampler")),
            other => panic!("expected NotPython, got {other:?}"),
        }
    }

    #[test]
    fn the_chain_reads_as_one_line() {
        let err = anyhow::anyhow!("inner").context("outer");
        assert_eq!(chain_text(&err), "outer: inner");
    }
}
