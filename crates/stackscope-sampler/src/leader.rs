//! Processes whose leader thread has exited while other threads run on.
//!
//! A program whose main thread calls `pthread_exit` (or whose main thread ends while workers
//! go on) leaves its leader a zombie: `/proc/PID/stat` says `Z`, `/proc/PID/maps` is empty,
//! `/proc/PID/exe` cannot be read, and ptrace refuses to attach to the zombie thread, so a
//! whole-process stop fails with EPERM. The process still runs, and every per-process file
//! and `process_vm_readv` work through any live thread's id. So such a process is read
//! through one of its live threads, and stopped thread by thread, skipping the zombie.

use std::collections::HashSet;

use crate::procfs;

/// The id to read `pid` through: `pid` itself, or a live thread's id when the leader has
/// exited.
pub fn reader_pid(pid: u32) -> u32 {
    match procfs::state(pid) {
        Some(s) if s.is_zombie() => procfs::live_thread(pid).unwrap_or(pid),
        _ => pid,
    }
}

/// Every live thread of a process stopped (PTRACE_SEIZE + PTRACE_INTERRUPT), resumed on
/// Drop. Threads that have exited (the zombie leader among them) are skipped.
pub struct LiveThreadsStop {
    _locks: Vec<remoteprocess::ThreadLock>,
}

impl LiveThreadsStop {
    /// Stops every live thread of `pid`, again until no new thread appeared meanwhile.
    pub fn new(pid: u32) -> std::io::Result<LiveThreadsStop> {
        let mut locks = Vec::new();
        let mut locked = HashSet::new();
        loop {
            let mut new = false;
            for tid in procfs::live_threads(pid) {
                if !locked.insert(tid) {
                    continue;
                }
                let Ok(raw) = remoteprocess::Tid::try_from(tid) else {
                    continue;
                };
                let Ok(thread) = remoteprocess::Thread::new(raw) else {
                    continue;
                };
                match thread.lock() {
                    Ok(lock) => {
                        locks.push(lock);
                        new = true;
                    }
                    // Exited between the listing and the stop: nothing to stop.
                    Err(_) if !procfs::thread_alive(pid, tid) => {}
                    Err(e) => return Err(std::io::Error::other(e.to_string())),
                }
            }
            if !new {
                break;
            }
        }
        if locks.is_empty() {
            return Err(std::io::Error::from_raw_os_error(libc::ESRCH));
        }
        Ok(LiveThreadsStop { _locks: locks })
    }
}

/// The threads of a process that run Python stopped (PTRACE_SEIZE + PTRACE_INTERRUPT),
/// resumed on Drop: enough for a read of their frames and native stacks, which no other
/// thread touches (a thread must hold a thread state, and so be listed, to run Python).
/// Stopping the threads already known spares listing `/proc/PID/task` at every sample.
pub struct ThreadsStop {
    _locks: Vec<remoteprocess::ThreadLock>,
}

impl ThreadsStop {
    /// Stops each of `tids` of `pid`; one that exited meanwhile is skipped.
    pub fn new(pid: u32, tids: &[u64]) -> std::io::Result<ThreadsStop> {
        let mut locks = Vec::with_capacity(tids.len());
        for &tid in tids {
            let Ok(raw) = remoteprocess::Tid::try_from(tid) else {
                continue;
            };
            let Ok(thread) = remoteprocess::Thread::new(raw) else {
                continue;
            };
            match thread.lock() {
                Ok(lock) => locks.push(lock),
                Err(_) if !procfs::thread_alive(pid, tid) => {}
                Err(e) => return Err(std::io::Error::other(e.to_string())),
            }
        }
        if locks.is_empty() {
            return Err(std::io::Error::from_raw_os_error(libc::ESRCH));
        }
        Ok(ThreadsStop { _locks: locks })
    }
}
