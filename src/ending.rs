//! Ending everything `record` started: the command's process group, then whatever of its
//! tree is left (a process that left the group, an orphan the launcher adopted as subreaper).
//!
//! The order: SIGINT to the group (what Ctrl-C at a terminal does, so Python runs its
//! `finally` blocks and multiprocessing its cleanup), a grace period, then SIGKILL to every
//! process still alive below the launcher. Each step that signals says so on stderr.

use std::time::{Duration, Instant};

use nix::sys::signal::{kill, Signal};
use nix::unistd::Pid;
use stackscope_sampler::{descendants, procfs};

/// How long the command's processes get to end after the first signal.
pub const GRACE: Duration = Duration::from_secs(3);

/// How long processes left behind by a command that exited by itself get to end on their own
/// (multiprocessing's resource tracker ends when the last worker closes its pipe).
const LEFTOVER_GRACE: Duration = Duration::from_secs(1);

/// The live processes below the launcher (zombies waiting for it to reap them are not).
pub fn live_tree(launcher: u32) -> Vec<u32> {
    descendants(launcher)
        .into_iter()
        .filter(|&pid| procfs::is_alive(pid))
        .collect()
}

/// Ends the command's process group `pgid` and every process below `launcher`. With
/// `command_running`, the group gets SIGINT first; otherwise what the command left behind
/// gets a moment to end by itself, then SIGTERM.
pub fn end_tree(launcher: u32, pgid: u32, command_running: bool) {
    let first = if command_running {
        eprintln!("stackscope: ending the command: SIGINT to its process group {pgid}");
        signal_group(pgid, Signal::SIGINT);
        Signal::SIGINT
    } else {
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
        Signal::SIGTERM
    };
    let left = wait_until_gone(launcher, GRACE);
    if left.is_empty() {
        return;
    }
    eprintln!(
        "stackscope: {} of the command still ran {} s after {first} ({}): killed (SIGKILL)",
        processes(left.len()),
        GRACE.as_secs(),
        pid_list(&left)
    );
    kill_all(launcher, pgid);
    wait_until_gone(launcher, GRACE);
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
