//! Ending everything `record` started: the command's process group, then whatever of its
//! tree is left (a process that left the group, an orphan the launcher adopted as subreaper).
//!
//! The order: SIGINT to the group (what Ctrl-C at a terminal does, so Python runs its
//! `finally` blocks and multiprocessing its cleanup), a grace period, then SIGKILL to every
//! process still alive below the launcher. Each step that signals says so on stderr, and why:
//! a command stackscope stops did not end by itself, and its KeyboardInterrupt traceback is
//! stackscope's doing.

use std::time::{Duration, Instant};

use nix::sys::signal::{kill, Signal};
use nix::unistd::Pid;
use stackscope_report::STOPPED_BY_STACKSCOPE;
use stackscope_sampler::{descendants, procfs};

use crate::exit::EndedBy;

/// How long the command's processes get to end after the first signal.
pub const GRACE: Duration = Duration::from_secs(3);

/// How long processes left behind by a command that exited by itself get to end on their own
/// (multiprocessing's resource tracker ends when the last worker closes its pipe).
const LEFTOVER_GRACE: Duration = Duration::from_secs(1);

/// How stackscope stopped a command that still ran.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Stopped {
    /// What ended the recording, and so the command.
    pub by: EndedBy,
    /// Processes of its tree still running [`GRACE`] after the SIGINT, killed (SIGKILL).
    pub killed: usize,
}

impl Stopped {
    /// `stackscope stopped the command at the end of --duration: SIGINT to its process group,
    /// as Ctrl-C would`: the summary's notice, before how the command then ended.
    pub fn describe(&self) -> String {
        let killed = match self.killed {
            0 => String::new(),
            n => format!(
                ", then SIGKILL to {} still running {} s later",
                processes(n),
                GRACE.as_secs()
            ),
        };
        format!(
            "{STOPPED_BY_STACKSCOPE} {}: SIGINT to its process group, as Ctrl-C would{killed}",
            reason(self.by)
        )
    }
}

/// Why stackscope stops the command: `at the end of --duration`, `on SIGINT to stackscope
/// (Ctrl-C)`.
pub fn reason(by: EndedBy) -> String {
    match by {
        EndedBy::Duration => "at the end of --duration".to_owned(),
        EndedBy::Signal(2) => "on SIGINT to stackscope (Ctrl-C)".to_owned(),
        EndedBy::Signal(15) => "on SIGTERM to stackscope".to_owned(),
        EndedBy::Signal(n) => format!("on signal {n} to stackscope"),
        EndedBy::Target => "as the recording ended".to_owned(),
    }
}

/// The live processes below the launcher (zombies waiting for it to reap them are not).
pub fn live_tree(launcher: u32) -> Vec<u32> {
    descendants(launcher)
        .into_iter()
        .filter(|&pid| procfs::is_alive(pid))
        .collect()
}

/// Stops the command that still runs in process group `pgid`, and every process below
/// `launcher`, because of `by`: SIGINT to the group, then SIGKILL to what is left after
/// [`GRACE`].
pub fn stop_tree(launcher: u32, pgid: u32, by: EndedBy) -> Stopped {
    eprintln!(
        "stackscope: stopping the command {}: SIGINT to its process group {pgid}, as Ctrl-C \
         would (Python prints KeyboardInterrupt), then SIGKILL to what still runs {} s later",
        reason(by),
        GRACE.as_secs()
    );
    signal_group(pgid, Signal::SIGINT);
    Stopped {
        by,
        killed: kill_after_grace(launcher, pgid, Signal::SIGINT),
    }
}

/// Ends what a command that exited by itself left running below `launcher`: a moment to end
/// by itself, then SIGTERM, then SIGKILL after [`GRACE`].
pub fn end_leftovers(launcher: u32, pgid: u32) {
    let left = wait_until_gone(launcher, LEFTOVER_GRACE);
    if left.is_empty() {
        return;
    }
    eprintln!(
        "stackscope: the command left {} running ({}): SIGTERM",
        processes(left.len()),
        pid_list(&left)
    );
    signal_group(pgid, Signal::SIGTERM);
    for &pid in &left {
        let _ = kill(Pid::from_raw(pid as i32), Signal::SIGTERM);
    }
    kill_after_grace(launcher, pgid, Signal::SIGTERM);
}

/// Waits [`GRACE`] after `first` for the tree below `launcher` to end, then kills what is
/// left; gives how many processes that was.
fn kill_after_grace(launcher: u32, pgid: u32, first: Signal) -> usize {
    let left = wait_until_gone(launcher, GRACE);
    if left.is_empty() {
        return 0;
    }
    eprintln!(
        "stackscope: {} of the command still ran {} s after {first} ({}): killed (SIGKILL)",
        processes(left.len()),
        GRACE.as_secs(),
        pid_list(&left)
    );
    kill_all(launcher, pgid);
    wait_until_gone(launcher, GRACE);
    left.len()
}

/// In the launcher: ends the command's tree if stackscope, its parent, dies first (killed
/// with SIGKILL, or a second Ctrl-C), so that nothing it started outlives it.
pub fn end_tree_if_orphaned(stackscope: Pid, pgid: u32) {
    let launcher = std::process::id();
    let _ = std::thread::Builder::new()
        .name("stackscope-watch-parent".into())
        .spawn(move || loop {
            std::thread::sleep(Duration::from_millis(200));
            if nix::unistd::getppid() == stackscope {
                continue;
            }
            signal_group(pgid, Signal::SIGINT);
            wait_until_gone(launcher, GRACE);
            kill_all(launcher, pgid);
            return;
        });
}

fn signal_group(pgid: u32, signal: Signal) {
    if pgid > 1 {
        let _ = kill(Pid::from_raw(-(pgid as i32)), signal);
    }
}

fn kill_all(launcher: u32, pgid: u32) {
    signal_group(pgid, Signal::SIGKILL);
    for pid in live_tree(launcher) {
        let _ = kill(Pid::from_raw(pid as i32), Signal::SIGKILL);
    }
}

/// Waits up to `timeout` for the tree below `launcher` to end; returns what is left.
fn wait_until_gone(launcher: u32, timeout: Duration) -> Vec<u32> {
    let deadline = Instant::now() + timeout;
    loop {
        let left = live_tree(launcher);
        if left.is_empty() || Instant::now() >= deadline {
            return left;
        }
        std::thread::sleep(Duration::from_millis(20));
    }
}

fn processes(n: usize) -> String {
    if n == 1 {
        "1 process".to_owned()
    } else {
        format!("{n} processes")
    }
}

fn pid_list(pids: &[u32]) -> String {
    let shown: Vec<String> = pids.iter().take(8).map(|p| format!("pid {p}")).collect();
    let more = if pids.len() > 8 { ", ..." } else { "" };
    format!("{}{more}", shown.join(", "))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_stopped_command_is_said_to_be_stackscopes_doing_and_how() {
        let duration = Stopped {
            by: EndedBy::Duration,
            killed: 0,
        };
        assert_eq!(
            duration.describe(),
            "stackscope stopped the command at the end of --duration: SIGINT to its process \
             group, as Ctrl-C would"
        );
        let ctrl_c = Stopped {
            by: EndedBy::Signal(2),
            killed: 2,
        };
        assert_eq!(
            ctrl_c.describe(),
            "stackscope stopped the command on SIGINT to stackscope (Ctrl-C): SIGINT to its \
             process group, as Ctrl-C would, then SIGKILL to 2 processes still running 3 s later"
        );
        assert_eq!(reason(EndedBy::Signal(15)), "on SIGTERM to stackscope");
    }
}
