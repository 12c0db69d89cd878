//! What `/proc` says about a process, read without stopping it.

use std::fs;
use std::io;
use std::path::PathBuf;

use stackscope_event::ThreadState;

pub mod cpus;
mod started;
pub(crate) mod stat;
pub(crate) mod syscall;
mod waits;
pub use started::{start_ticks, started_secs};
pub use stat::ProcState;
pub(crate) use stat::StatLine;
pub use waits::waits_without_limit;

/// Whether a process with this pid exists (a zombie counts as gone: it runs no more code). A
/// process whose leader thread exited while other threads run on is alive.
pub fn is_alive(pid: u32) -> bool {
    match state(pid) {
        Some(s) if s.is_zombie() => live_thread(pid).is_some(),
        Some(s) => !s.is_gone(),
        None => false,
    }
}

/// At most this many processes below a root are listed: a fork bomb does not make the walk
/// endless. Four times the processes a tree of targets follows.
pub const MAX_DESCENDANTS: usize = 1024;

/// Every process below `root`, parents before children (at most about
/// [`MAX_DESCENDANTS`]).
pub fn descendants(root: u32) -> Vec<u32> {
    let mut all = vec![root];
    let mut next = 0;
    while next < all.len() && all.len() <= MAX_DESCENDANTS {
        all.extend(children(all[next]));
        next += 1;
    }
    all.remove(0);
    all
}

/// The threads of `pid` that have not exited, by OS id.
pub fn live_threads(pid: u32) -> Vec<u64> {
    let Ok(tasks) = fs::read_dir(format!("/proc/{pid}/task")) else {
        return Vec::new();
    };
    let mut out: Vec<u64> = tasks
        .flatten()
        .filter_map(|t| t.file_name().to_str()?.parse::<u64>().ok())
        .filter(|&tid| thread_alive(pid, tid))
        .collect();
    out.sort_unstable();
    out
}

/// Whether thread `tid` of `pid` exists and has not exited.
pub fn thread_alive(pid: u32, tid: u64) -> bool {
    state_of(&format!("/proc/{pid}/task/{tid}/stat")).is_some_and(|s| !s.is_gone())
}

/// A live thread of `pid` other than an exited leader, if any.
pub fn live_thread(pid: u32) -> Option<u32> {
    live_threads(pid)
        .into_iter()
        .find_map(|tid| u32::try_from(tid).ok())
}

/// The scheduler state from `/proc/PID/stat`.
pub fn state(pid: u32) -> Option<ProcState> {
    state_of(&format!("/proc/{pid}/stat"))
}

/// Whether the process (or the thread, given a tid) is stopped by a signal or a tracer.
/// Read from the leader thread's own stat file, which has the same state letter: the
/// process's stat file adds up the CPU time of every thread, a cost that grows with them
/// (the sampler asks this every sample).
pub fn is_stopped(pid: u32) -> bool {
    let state = state_of(&format!("/proc/{pid}/task/{pid}/stat")).or_else(|| state(pid));
    state.is_some_and(ProcState::is_stopped)
}

/// [`is_stopped`] for a process asked every sample: the leader's stat file stays open and is
/// re-read in place (`pread` at offset 0 makes procfs render it afresh), one system call
/// instead of open, statx, read and close. A file that cannot be read any more (the leader
/// exited) is opened again next time, and meanwhile [`is_stopped`] answers.
pub struct StopCheck {
    pid: u32,
    file: Option<fs::File>,
    buf: Vec<u8>,
}

impl StopCheck {
    pub fn new(pid: u32) -> StopCheck {
        StopCheck {
            pid,
            file: None,
            buf: vec![0; 1024],
        }
    }

    pub fn is_stopped(&mut self) -> bool {
        match self.leader_state() {
            Some(state) => state.is_stopped(),
            None => is_stopped(self.pid),
        }
    }

    fn leader_state(&mut self) -> Option<ProcState> {
        use std::os::unix::fs::FileExt;
        if self.file.is_none() {
            self.file = fs::File::open(format!("/proc/{0}/task/{0}/stat", self.pid)).ok();
        }
        let read = self.file.as_ref()?.read_at(&mut self.buf, 0);
        match read {
            Ok(n) if n > 0 => state_in(self.buf.get(..n)?),
            _ => {
                self.file = None;
                None
            }
        }
    }
}

/// Raises the soft limit on open files to the hard one. The reader keeps two `/proc` files
/// open per sleeping thread of the target (its `stat` and `schedstat`), and 1024, the usual
/// soft limit, is too few for a process of 500 threads; a file that cannot be opened makes
/// its thread's state unknown, which counts as busy.
pub fn raise_open_file_limit() {
    let mut limit = libc::rlimit {
        rlim_cur: 0,
        rlim_max: 0,
    };
    // SAFETY: a valid rlimit to fill, then to set; both calls only read or write it.
    unsafe {
        if libc::getrlimit(libc::RLIMIT_NOFILE, &mut limit) == 0 && limit.rlim_cur < limit.rlim_max
        {
            limit.rlim_cur = limit.rlim_max;
            libc::setrlimit(libc::RLIMIT_NOFILE, &limit);
        }
    }
}

/// The executable, as `/proc/PID/exe` resolves.
pub fn exe(pid: u32) -> io::Result<PathBuf> {
    fs::read_link(format!("/proc/{pid}/exe"))
}

/// The command line with arguments joined by spaces; empty for kernel threads.
pub fn command_line(pid: u32) -> io::Result<String> {
    let raw = fs::read(format!("/proc/{pid}/cmdline"))?;
    let parts: Vec<String> = raw
        .split(|b| *b == 0)
        .filter(|p| !p.is_empty())
        .map(|p| String::from_utf8_lossy(p).into_owned())
        .collect();
    Ok(parts.join(" "))
}

/// The pid of the parent of `pid`, while it lives.
pub fn parent(pid: u32) -> Option<u32> {
    let stat = fs::read(format!("/proc/{pid}/stat")).ok()?;
    StatLine::parse(&stat)?.parent()
}

/// Reads the memory map, the first thing that needs ptrace-level access to another process.
pub fn maps(pid: u32) -> io::Result<String> {
    fs::read_to_string(format!("/proc/{pid}/maps"))
}

/// Whether any mapped file looks like a Python interpreter or libpython.
pub fn maps_mention_python(maps: &str) -> bool {
    maps.lines()
        .filter_map(|line| line.split_whitespace().nth(5))
        .filter_map(|path| path.rsplit('/').next())
        .any(|name| name.starts_with("python") || name.starts_with("libpython"))
}

/// `kernel.yama.ptrace_scope`, when Yama is on.
pub fn ptrace_scope() -> Option<u32> {
    fs::read_to_string("/proc/sys/kernel/yama/ptrace_scope")
        .ok()?
        .trim()
        .parse()
        .ok()
}

/// The pids of the direct children of `pid`, from `/proc/PID/task/*/children`.
pub fn children(pid: u32) -> Vec<u32> {
    let Ok(tasks) = fs::read_dir(format!("/proc/{pid}/task")) else {
        return Vec::new();
    };
    let mut out = Vec::new();
    for task in tasks.flatten() {
        let path = task.path().join("children");
        if let Ok(text) = fs::read_to_string(path) {
            out.extend(
                text.split_whitespace()
                    .filter_map(|p| p.parse::<u32>().ok()),
            );
        }
    }
    out.sort_unstable();
    out.dedup();
    out
}

/// What the OS says a thread is doing: its scheduler state and, when blocked, the system call
/// it is blocked in (`/proc/PID/task/TID/syscall`). Read while the thread runs freely: once a
/// tracer stops it, both say only "stopped".
pub fn thread_state(pid: u32, tid: u64) -> ThreadState {
    let Some(state) = state_of(&format!("/proc/{pid}/task/{tid}/stat")) else {
        return ThreadState::Unknown;
    };
    if state.is_running() {
        ThreadState::Running
    } else if state.is_stopped() {
        ThreadState::Stopped
    } else if state.is_asleep() {
        let syscall =
            fs::read_to_string(format!("/proc/{pid}/task/{tid}/syscall")).unwrap_or_default();
        blocked_state(&syscall)
    } else {
        ThreadState::Unknown
    }
}

/// The state of every thread of `pid`, by OS thread id.
pub fn thread_states(pid: u32) -> std::collections::HashMap<u64, ThreadState> {
    let Ok(tasks) = fs::read_dir(format!("/proc/{pid}/task")) else {
        return std::collections::HashMap::new();
    };
    tasks
        .flatten()
        .filter_map(|t| t.file_name().to_str()?.parse::<u64>().ok())
        .map(|tid| (tid, thread_state(pid, tid)))
        .collect()
}

/// Classifies a blocked thread by the first field of `/proc/.../syscall` (x86_64 numbers).
fn blocked_state(syscall: &str) -> ThreadState {
    let first = syscall.split_whitespace().next().unwrap_or("");
    if first == "running" {
        return ThreadState::Running;
    }
    match first.parse::<i64>() {
        // futex, futex_waitv: locks, conditions, semaphores, and the GIL itself.
        Ok(202 | 449) => ThreadState::WaitingOnLock,
        // read, pread64, readv, poll, select, recvfrom, recvmsg, accept, connect, ppoll,
        // pselect6, epoll_wait, epoll_pwait, accept4, epoll_pwait2.
        Ok(0 | 17 | 19 | 7 | 23 | 45 | 47 | 43 | 42 | 271 | 270 | 232 | 281 | 288 | 441) => {
            ThreadState::WaitingOnIo
        }
        Ok(_) => ThreadState::Sleeping,
        Err(_) => ThreadState::Unknown,
    }
}

/// The state letter of a `stat` file ([`StatLine`]). Read as text, as it always was: a file
/// that is not UTF-8 (a command name that is not) answers None.
fn state_of(stat_path: &str) -> Option<ProcState> {
    state_in(fs::read_to_string(stat_path).ok()?.as_bytes())
}

fn state_in(stat: &[u8]) -> Option<ProcState> {
    StatLine::parse(stat)?.state()
}

#[cfg(test)]
mod tests {

    #[test]
    fn the_open_file_limit_is_raised_to_the_hard_one() {
        raise_open_file_limit();
        let mut limit = libc::rlimit {
            rlim_cur: 0,
            rlim_max: 0,
        };
        // SAFETY: a valid rlimit to fill.
        assert_eq!(
            unsafe { libc::getrlimit(libc::RLIMIT_NOFILE, &mut limit) },
            0
        );
        assert_eq!(limit.rlim_cur, limit.rlim_max);
    }

    use super::*;

    #[test]
    fn our_own_process_is_alive_and_running() {
        let me = std::process::id();
        assert!(is_alive(me));
        assert!(!is_stopped(me));
        // The harness's main thread waits for the test threads: sleeping, not stopped.
        assert!(state(me).is_some_and(|s| s.is_running() || s.is_asleep()));
        assert!(command_line(me).is_ok_and(|c| !c.is_empty()));
    }

    #[test]
    fn python_is_recognised_in_maps() {
        let maps = "7f00-7f01 r-xp 00000000 08:01 1 /usr/lib/libpython3.11.so.1.0\n";
        assert!(maps_mention_python(maps));
        let maps = "5500-5501 r-xp 00000000 08:01 1 /root/.pyenv/versions/3.11.7/bin/python3.11\n";
        assert!(maps_mention_python(maps));
        let maps = "5500-5501 r-xp 00000000 08:01 1 /usr/bin/sleep\n7f00-7f01 r--p 0 0 0 [vdso]\n";
        assert!(!maps_mention_python(maps));
    }

    #[test]
    fn blocked_threads_are_classified_by_their_system_call() {
        assert_eq!(blocked_state("running"), ThreadState::Running);
        assert_eq!(
            blocked_state("202 0x7f12 0x80 0x0 0x0 0x0 0x0 0x7ffd 0x7f34"),
            ThreadState::WaitingOnLock
        );
        assert_eq!(blocked_state("230 0x1 0x0"), ThreadState::Sleeping);
        assert_eq!(blocked_state("7 0x5 0x1"), ThreadState::WaitingOnIo);
        assert_eq!(blocked_state(""), ThreadState::Unknown);
    }

    #[test]
    fn our_own_thread_runs() {
        let me = std::process::id();
        let tid = nix::unistd::gettid().as_raw() as u64;
        assert_eq!(thread_state(me, tid), ThreadState::Running);
    }

    #[test]
    fn a_kept_open_stat_file_reads_afresh_each_time() {
        let me = std::process::id();
        let mut check = StopCheck::new(me);
        for _ in 0..3 {
            assert!(!check.is_stopped());
        }
        assert!(check.file.is_some(), "the file stays open");
        // The same open file follows a process that is stopped and resumed.
        let mut child = std::process::Command::new("sleep")
            .arg("30")
            .spawn()
            .expect("sleep runs");
        let pid = child.id();
        let mut check = StopCheck::new(pid);
        assert!(!check.is_stopped());
        let nix_pid = nix::unistd::Pid::from_raw(pid as i32);
        nix::sys::signal::kill(nix_pid, nix::sys::signal::Signal::SIGSTOP).expect("SIGSTOP");
        let deadline = std::time::Instant::now() + std::time::Duration::from_secs(10);
        while !check.is_stopped() && std::time::Instant::now() < deadline {
            std::thread::yield_now();
        }
        assert!(check.is_stopped());
        nix::sys::signal::kill(nix_pid, nix::sys::signal::Signal::SIGCONT).expect("SIGCONT");
        while check.is_stopped() && std::time::Instant::now() < deadline {
            std::thread::yield_now();
        }
        assert!(!check.is_stopped());
        let _ = child.kill();
        let _ = child.wait();
        // A pid that cannot exist: no file, and not stopped.
        assert!(!StopCheck::new(u32::MAX - 1).is_stopped());
    }

    #[test]
    fn a_missing_pid_is_not_alive() {
        // pid_max is at most 2^22, so this pid cannot exist.
        assert!(!is_alive(u32::MAX - 1));
        assert_eq!(state(u32::MAX - 1), None);
    }
}
