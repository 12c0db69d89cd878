//! Why a read by the fast reader failed, as a type: the caller decides what a failure means
//! (this sample is lost, the recording ends, or this reader does not fit the interpreter and
//! py-spy's takes over) from its variant, never from its text.

use std::io;

/// A failed read of every thread.
#[derive(Debug, thiserror::Error)]
pub(crate) enum ReadError {
    /// A thread kept moving under every read and was not ours to stop (`--nonblocking`).
    #[error("Failed to read a consistent stack: a thread kept moving")]
    Torn,
    /// A thread ended, or could not be stopped, while it was read.
    #[error("Failed to read a thread's frames: the thread ended while it was read")]
    ThreadGone,
    /// The thread list changed under every one of a sample's reads.
    #[error("Failed to read PyThreadState list: it keeps changing")]
    ListKeepsChanging,
    /// The kernel says the process is gone (ESRCH for the whole process).
    #[error("process {0} exited")]
    ProcessGone(u32),
    /// A system call failed; `source` carries its errno.
    #[error("{what}: {source}")]
    Io {
        what: &'static str,
        #[source]
        source: io::Error,
    },
    /// What was read is not what an interpreter of this layout holds, in a thread that cannot
    /// have changed it meanwhile (garbage links, a stopped thread that never reads whole, no
    /// GIL where the table puts it): every later sample would fail the same way.
    #[error("the interpreter's memory does not fit this reader's layout: {0}")]
    Layout(String),
}

impl ReadError {
    /// A failed read of the process's memory.
    pub(crate) fn io(what: &'static str, source: io::Error) -> ReadError {
        ReadError::Io { what, source }
    }

    /// A failed ptrace stop: a thread that exited under it is gone, anything else is the
    /// system call's error (EPERM: no longer ours to trace).
    pub(crate) fn stop(e: remoteprocess::Error) -> ReadError {
        let source = match e {
            remoteprocess::Error::NixError(errno) => io::Error::from_raw_os_error(errno as i32),
            remoteprocess::Error::IOError(io) => io,
            other => io::Error::other(other.to_string()),
        };
        if source.raw_os_error() == Some(libc::ESRCH) {
            return ReadError::ThreadGone;
        }
        ReadError::io("Failed to suspend process", source)
    }

    /// The errno of a failed system call.
    pub(crate) fn errno(&self) -> Option<i32> {
        match self {
            ReadError::Io { source, .. } => source.raw_os_error(),
            _ => None,
        }
    }

    /// Whether this failure says the reader does not fit the interpreter, rather than that
    /// the process moved under one read (which the next sample is not likely to meet).
    pub(crate) fn is_misfit(&self) -> bool {
        matches!(self, ReadError::Layout(_))
    }
}

/// Decides when the fast reader is given up for py-spy's: after [`Misfits::LIMIT`] samples
/// in a row that failed for a reason that says the layout does not fit. Failures that come
/// and go (a torn read, a thread that ended, a thread list that kept changing, a failed
/// system call) neither count nor break a run: a pool that starts a thread per task can fail
/// many samples in a row, and py-spy's reader would be no better there.
#[derive(Debug, Default)]
pub(crate) struct Misfits {
    in_a_row: u32,
}

impl Misfits {
    /// A layout that does not match this build of the interpreter fails every sample: this
    /// many in a row, with no good read between, is taken as that.
    pub(crate) const LIMIT: u32 = 50;

    pub(crate) fn read_ok(&mut self) {
        self.in_a_row = 0;
    }

    /// Counts a failure; answers whether the reader is to be given up now.
    pub(crate) fn failed(&mut self, e: &ReadError) -> bool {
        if e.is_misfit() {
            self.in_a_row += 1;
        }
        self.in_a_row >= Self::LIMIT
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_burst_of_transient_failures_keeps_the_reader() {
        let mut misfits = Misfits::default();
        let transient = [
            ReadError::Torn,
            ReadError::ThreadGone,
            ReadError::ListKeepsChanging,
            ReadError::io("read", io::Error::from_raw_os_error(libc::EIO)),
        ];
        for i in 0..1000 {
            assert!(
                !misfits.failed(&transient[i % transient.len()]),
                "given up at {i}"
            );
        }
        // Transient failures do not break a run of misfits either.
        for _ in 0..Misfits::LIMIT - 1 {
            assert!(!misfits.failed(&ReadError::Layout("garbage".into())));
            assert!(!misfits.failed(&ReadError::ListKeepsChanging));
        }
        assert!(misfits.failed(&ReadError::Layout("garbage".into())));
    }

    #[test]
    fn a_good_read_resets_the_count_of_misfits() {
        let mut misfits = Misfits::default();
        for _ in 0..Misfits::LIMIT - 1 {
            assert!(!misfits.failed(&ReadError::Layout("garbage".into())));
        }
        misfits.read_ok();
        for _ in 0..Misfits::LIMIT - 1 {
            assert!(!misfits.failed(&ReadError::Layout("garbage".into())));
        }
        assert!(misfits.failed(&ReadError::Layout("garbage".into())));
    }

    #[test]
    fn a_stop_of_a_thread_that_exited_is_thread_gone() {
        let gone = ReadError::stop(remoteprocess::Error::NixError(nix::errno::Errno::ESRCH));
        assert!(matches!(gone, ReadError::ThreadGone));
        let denied = ReadError::stop(remoteprocess::Error::NixError(nix::errno::Errno::EPERM));
        assert_eq!(denied.errno(), Some(libc::EPERM));
        assert!(!denied.is_misfit());
    }
}
