//! One rule for whether a thread is idle, the same on every Python version and for both
//! readers (ours and py-spy's fallback): what the OS says the thread is doing, and the GIL.
//!
//! - A thread the scheduler has running or runnable (`R` in `/proc/PID/task/TID/stat`) is
//!   busy: spinning in Python, or in a C call that released the GIL (`zlib.compress`,
//!   `hashlib` on a big buffer, a tensor op).
//! - A thread asleep in the kernel (`S`, `D`, `I`: `time.sleep`, `Event.wait`, `Queue.get`,
//!   a lock, `select`, a socket or pipe read, or waiting for the GIL itself) is idle, unless
//!   it holds the GIL: a thread that blocks while holding it stops every other Python
//!   thread, and that is where the time goes.
//! - A thread stopped by a signal or a tracer (`T`, `t`) runs nothing: idle.
//! - When the state cannot be read, the thread counts as busy (as py-spy counts it).
//!
//! The state is read before anything of ours stops the target (a stop would make every
//! thread read as stopped, and wakes threads out of their waits). Function names play no
//! part: a list of names misses `time.sleep`, `select`, socket reads and every C extension.
//! The system call a blocked thread is in (`/proc/.../syscall`) names its wait in `dump`
//! ([`crate::procfs::thread_state`]) but does not change whether it is idle.

use crate::procfs::ProcState;

/// Whether a thread is busy, from its scheduler state (None: unreadable, which counts as busy)
/// and whether it holds the GIL (false where the holder is not known): [`ProcState::is_idle`].
pub(crate) fn is_active(state: Option<ProcState>, holds_gil: bool) -> bool {
    state.is_none_or(|s| !s.is_idle(holds_gil))
}

/// The state of a thread, read from `/proc/PID/task/TID/stat` (one open and read; the fast
/// reader keeps its files open instead, see `fast::activity`).
pub(crate) fn state_of(pid: u32, tid: u64) -> Option<ProcState> {
    let stat = std::fs::read(format!("/proc/{pid}/task/{tid}/stat")).ok()?;
    crate::procfs::StatLine::parse(&stat)?.state()
}

/// The state of every thread of `pid`, by OS thread id.
pub(crate) fn states(pid: u32) -> std::collections::HashMap<u64, ProcState> {
    let Ok(tasks) = std::fs::read_dir(format!("/proc/{pid}/task")) else {
        return std::collections::HashMap::new();
    };
    tasks
        .flatten()
        .filter_map(|t| t.file_name().to_str()?.parse::<u64>().ok())
        .filter_map(|tid| Some((tid, state_of(pid, tid)?)))
        .collect()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn running_threads_are_busy_and_sleeping_ones_idle() {
        assert!(is_active(Some(ProcState(b'R')), false));
        assert!(!is_active(Some(ProcState(b'S')), false));
        assert!(!is_active(Some(ProcState(b'D')), false));
        assert!(!is_active(Some(ProcState(b't')), false));
        assert!(!is_active(Some(ProcState(b'Z')), true));
    }

    #[test]
    fn a_sleeping_gil_holder_is_busy_and_an_unknown_state_counts() {
        assert!(is_active(Some(ProcState(b'S')), true));
        assert!(is_active(Some(ProcState(b'D')), true));
        assert!(is_active(None, false));
    }

    #[test]
    fn our_own_thread_reads_as_running() {
        let tid = nix::unistd::gettid().as_raw() as u64;
        assert_eq!(state_of(std::process::id(), tid), Some(ProcState(b'R')));
        assert_eq!(state_of(std::process::id(), u64::from(u32::MAX - 1)), None);
    }
}
