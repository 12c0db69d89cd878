//! What `/proc` says about a process, read without stopping it.

use std::fs;
use std::io;
use std::path::PathBuf;

/// Whether a process with this pid exists (a zombie counts as gone: it runs no more code).
pub fn is_alive(pid: u32) -> bool {
    matches!(state(pid), Some(s) if s != 'Z' && s != 'X')
}

/// The one-letter scheduler state from `/proc/PID/stat` (`R`, `S`, `D`, `T`, `t`, `Z`, ...).
pub fn state(pid: u32) -> Option<char> {
    let stat = fs::read_to_string(format!("/proc/{pid}/stat")).ok()?;
    // The command name is in parentheses and may itself contain ") ", so split at the last one.
    let after = &stat[stat.rfind(')')? + 1..];
    after.trim_start().chars().next()
}

/// Whether the process (or the thread, given a tid) is stopped by a signal or a tracer.
pub fn is_stopped(pid: u32) -> bool {
    matches!(state(pid), Some('T') | Some('t'))
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

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn our_own_process_is_alive_and_running() {
        let me = std::process::id();
        assert!(is_alive(me));
        assert!(!is_stopped(me));
        assert_eq!(state(me), Some('R'));
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
    fn a_missing_pid_is_not_alive() {
        // pid_max is at most 2^22, so this pid cannot exist.
        assert!(!is_alive(u32::MAX - 1));
        assert_eq!(state(u32::MAX - 1), None);
    }
}
