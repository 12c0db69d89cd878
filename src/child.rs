//! The command `record` starts, and ends again whatever happens.
//!
//! stackscope does not start the command itself but through a small launcher, a second copy of
//! itself (`stackscope __launch`), which starts the command, waits for it and writes its exit
//! status to a file. The reason: stopping a thread with ptrace and waiting for the stop uses
//! `waitpid`, and when stackscope is both the command's parent and its tracer, a command that
//! exits during a stop has its exit status collected by that `waitpid` and lost to `record`. As a
//! grandchild, the command's status goes to the launcher, which nothing else waits on.
//!
//! `record` ends what it started. The command runs in its own process group, and the launcher
//! is a child subreaper, so every process the command starts (multiprocessing workers, the
//! resource tracker, a daemon that left its group) stays below the launcher where stackscope
//! can find it. At the end stackscope signals the group, waits a grace period, then kills
//! whatever of the tree is left, and says so ([`crate::ending`]). Should stackscope itself die,
//! the launcher does the same.

use std::path::{Path, PathBuf};
use std::process::{Child, ExitCode};
use std::time::{Duration, Instant};

use anyhow::{bail, Context};
use nix::sys::signal::Signal;
use nix::unistd::Pid;

use crate::ending::Stopped;
use crate::exit::{CommandExit, EndedBy, WithStatus, COMMAND_NOT_FOUND, COMMAND_NOT_RUN};

/// How long the launcher may take to start the command.
const START_TIMEOUT: Duration = Duration::from_secs(10);

/// The process `record` started. Dropping it without `end` ends it: a recording that fails must
/// not leave its command running.
pub struct LaunchedChild {
    launcher: Child,
    status_file: PathBuf,
    pid: u32,
    exit: Option<CommandExit>,
    /// How stackscope stopped the command, when it still ran at the end.
    stopped: Option<Stopped>,
}

impl LaunchedChild {
    pub fn spawn(command: &[String]) -> anyhow::Result<LaunchedChild> {
        let program = command.first().context("record needs a command after --")?;
        let exe = std::env::current_exe().context("cannot find the stackscope executable")?;
        let status_file = std::env::temp_dir().join(format!(
            "stackscope-launch-{}-{}",
            std::process::id(),
            Instant::now().elapsed().as_nanos() ^ u128::from(rand_bits())
        ));
        let launcher = std::process::Command::new(exe)
            .arg("__launch")
            .arg(&status_file)
            .arg("--")
            .args(command)
            .spawn()
            .context("cannot start the launcher")?;
        let mut child = LaunchedChild {
            launcher,
            status_file,
            pid: 0,
            exit: None,
            stopped: None,
        };
        let deadline = Instant::now() + START_TIMEOUT;
        loop {
            let status = read_status(&child.status_file);
            if let Some((status, error)) = status.error {
                return Err(WithStatus {
                    status,
                    message: format!("cannot start {program}: {error}"),
                }
                .into());
            }
            if let Some(pid) = status.pid {
                child.pid = pid;
                return Ok(child);
            }
            if let Ok(Some(_)) = child.launcher.try_wait() {
                bail!("cannot start {program}: the launcher ended");
            }
            if Instant::now() >= deadline {
                bail!("cannot start {program}: it did not start within {START_TIMEOUT:?}");
            }
            std::thread::sleep(Duration::from_millis(2));
        }
    }

    pub fn pid(&self) -> u32 {
        self.pid
    }

    /// The launcher's pid: every process the command started is below it.
    pub fn launcher_pid(&self) -> u32 {
        self.launcher.id()
    }

    /// The exit, if the command has ended.
    fn poll(&mut self) -> Option<CommandExit> {
        if self.exit.is_none() {
            self.exit = read_status(&self.status_file).exit;
        }
        self.exit
    }

    fn wait_until(&mut self, deadline: Instant) -> Option<CommandExit> {
        loop {
            if let Some(exit) = self.poll() {
                return Some(exit);
            }
            if Instant::now() >= deadline {
                return None;
            }
            std::thread::sleep(Duration::from_millis(10));
        }
    }

    /// How the command ended, if it has ended by itself: a command whose process is gone gets up
    /// to `grace` for the launcher to report its status; a running one is not waited for.
    pub fn ended_by_itself(&mut self, grace: Duration) -> Option<CommandExit> {
        if self.pid == 0 || stackscope_sampler::procfs::is_alive(self.pid) {
            return self.poll();
        }
        self.wait_until(Instant::now() + grace)
    }

    /// Waits up to `grace` for a command that is exiting by itself; asks it to end only if it
    /// has not by then. Processes it left behind are ended too.
    pub fn wait_for_exit(&mut self, grace: Duration) -> Option<CommandExit> {
        if let Some(exit) = self.wait_until(Instant::now() + grace) {
            crate::ending::end_leftovers(self.launcher_pid(), self.pid);
            self.reap_launcher();
            return Some(exit);
        }
        self.end(EndedBy::Target)
    }

    /// Ends the command and everything it started, as `by` ended the recording: a command
    /// still running gets SIGINT to its process group, a grace period, then SIGKILL to
    /// whatever of its tree is left ([`LaunchedChild::stopped`] says so). Returns how the
    /// command ended.
    pub fn end(&mut self, by: EndedBy) -> Option<CommandExit> {
        // Before the command started there is no pid to signal (and pid 0 would mean our own
        // process group).
        if self.pid != 0 {
            if self.poll().is_none() {
                self.stopped = Some(crate::ending::stop_tree(self.launcher_pid(), self.pid, by));
            } else {
                crate::ending::end_leftovers(self.launcher_pid(), self.pid);
            }
            self.wait_until(Instant::now() + Duration::from_secs(3));
        }
        self.reap_launcher();
        self.exit
    }

    /// How stackscope stopped the command, if it still ran when [`LaunchedChild::end`] came.
    pub fn stopped(&self) -> Option<Stopped> {
        self.stopped
    }

    /// The launcher ends once the command's last process has; one that does not is killed.
    fn reap_launcher(&mut self) {
        let deadline = Instant::now() + Duration::from_secs(3);
        while Instant::now() < deadline {
            if let Ok(Some(_)) = self.launcher.try_wait() {
                return;
            }
            std::thread::sleep(Duration::from_millis(10));
        }
        let _ = self.launcher.kill();
        let _ = self.launcher.wait();
    }
}

impl Drop for LaunchedChild {
    fn drop(&mut self) {
        self.end(EndedBy::Target);
        let _ = std::fs::remove_file(&self.status_file);
    }
}

/// What the launcher has written so far.
#[derive(Default)]
struct LaunchStatus {
    pid: Option<u32>,
    exit: Option<CommandExit>,
    /// Why the command could not be started, with the status `record` exits with for it.
    error: Option<(u8, String)>,
}

fn read_status(path: &Path) -> LaunchStatus {
    let mut status = LaunchStatus::default();
    let Ok(text) = std::fs::read_to_string(path) else {
        return status;
    };
    for line in text.lines() {
        match line.split_once(' ') {
            Some(("pid", pid)) => status.pid = pid.parse().ok(),
            Some(("exit", code)) => status.exit = code.parse().ok().map(CommandExit::Code),
            Some(("signal", signal)) => status.exit = signal.parse().ok().map(CommandExit::Signal),
            Some(("error", error)) => {
                status.error = error
                    .split_once(' ')
                    .and_then(|(code, why)| Some((code.parse().ok()?, why.to_owned())));
            }
            _ => {}
        }
    }
    status
}

fn write_status(path: &Path, text: &str) -> std::io::Result<()> {
    let tmp = path.with_extension("tmp");
    std::fs::write(&tmp, text)?;
    std::fs::rename(&tmp, path)
}

/// A few bits that differ between two launches in the same process and nanosecond.
fn rand_bits() -> u64 {
    use std::sync::atomic::{AtomicU64, Ordering};
    static COUNTER: AtomicU64 = AtomicU64::new(0);
    COUNTER.fetch_add(1, Ordering::Relaxed)
}

/// `stackscope __launch STATUS_FILE -- COMMAND...`: the launcher's side.
pub fn launcher_main(status_file: &Path, command: &[String]) -> ExitCode {
    use std::os::unix::process::ExitStatusExt;
    // Ctrl-C reaches the command through the terminal's process group; the launcher's job is
    // to outlive it and tell its status, so it ignores the signals that end the recording.
    for signal in [Signal::SIGINT, Signal::SIGTERM] {
        // SAFETY: installing SIG_IGN runs no handler code.
        let _ = unsafe { nix::sys::signal::signal(signal, nix::sys::signal::SigHandler::SigIgn) };
    }
    let Some((program, args)) = command.split_first() else {
        let _ = write_status(
            status_file,
            &format!("error {COMMAND_NOT_FOUND} no command\n"),
        );
        return ExitCode::FAILURE;
    };
    // Orphans of the command (a worker whose parent died, a daemon) are re-parented to the
    // launcher instead of init, so stackscope still finds them below it.
    // SAFETY: prctl with integer arguments only.
    unsafe {
        libc::prctl(libc::PR_SET_CHILD_SUBREAPER, 1, 0, 0, 0);
    }
    let mut cmd = std::process::Command::new(program);
    cmd.args(args);
    // The command gets the default dispositions back, not the launcher's ignored ones, and
    // its own process group, which stackscope signals as a whole at the end.
    // SAFETY: only async-signal-safe calls (signal, setpgid) between fork and exec.
    unsafe {
        use std::os::unix::process::CommandExt;
        cmd.pre_exec(|| {
            for signal in [Signal::SIGINT, Signal::SIGTERM] {
                nix::sys::signal::signal(signal, nix::sys::signal::SigHandler::SigDfl)
                    .map_err(std::io::Error::from)?;
            }
            nix::unistd::setpgid(Pid::from_raw(0), Pid::from_raw(0))
                .map_err(std::io::Error::from)?;
            Ok(())
        });
    }
    let stackscope = nix::unistd::getppid();
    let mut child = match cmd.spawn() {
        Ok(child) => child,
        Err(e) => {
            // As a shell says it: 127 for a command not found, 126 for one it cannot run.
            let status = match e.kind() {
                std::io::ErrorKind::NotFound => COMMAND_NOT_FOUND,
                _ => COMMAND_NOT_RUN,
            };
            let _ = write_status(status_file, &format!("error {status} {e}\n"));
            return ExitCode::FAILURE;
        }
    };
    let pid = child.id();
    if write_status(status_file, &format!("pid {pid}\n")).is_err() {
        let _ = child.kill();
        return ExitCode::FAILURE;
    }
    crate::ending::end_tree_if_orphaned(stackscope, pid);
    let ended = match child.wait() {
        Ok(status) => match (status.code(), status.signal()) {
            (Some(code), _) => format!("exit {code}"),
            (None, Some(signal)) => format!("signal {signal}"),
            (None, None) => "exit -1".to_owned(),
        },
        Err(_) => "exit -1".to_owned(),
    };
    let written = write_status(status_file, &format!("pid {pid}\n{ended}\n"));
    // What the command left running is ended by stackscope (or by the watcher above); reap
    // each as it goes, and end when none is left.
    while let Ok(_) | Err(nix::errno::Errno::EINTR) =
        nix::sys::wait::waitpid(Pid::from_raw(-1), None)
    {}
    match written {
        Ok(()) => ExitCode::SUCCESS,
        Err(_) => ExitCode::FAILURE,
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_status_file_is_read_line_by_line() {
        let dir = tempfile::tempdir().expect("tempdir");
        let path = dir.path().join("status");
        assert!(read_status(&path).pid.is_none());
        write_status(&path, "pid 42\n").expect("write");
        let s = read_status(&path);
        assert_eq!((s.pid, s.exit), (Some(42), None));
        write_status(&path, "pid 42\nsignal 9\n").expect("write");
        assert_eq!(read_status(&path).exit, Some(CommandExit::Signal(9)));
        write_status(&path, "pid 42\nexit 3\n").expect("write");
        let exit = read_status(&path).exit.expect("exit");
        assert_eq!(exit.code(), Some(3));
        assert_eq!(exit.to_string(), "exit status 3");
        write_status(&path, "error 127 No such file or directory (os error 2)\n").expect("write");
        let (status, why) = read_status(&path).error.expect("error");
        assert_eq!(status, 127);
        assert!(why.contains("No such file"), "{why}");
    }
}
