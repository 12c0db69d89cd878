//! "Nothing `record` started outlives it": every `stackscope record` the tests run gets a
//! unique marker in its environment, which the launcher, the command and everything the
//! command starts inherit. Once the run has ended, no live process may carry it.

use std::fs;
use std::process::Command;
use std::sync::atomic::{AtomicU64, Ordering};
use std::time::{Duration, Instant};

/// The environment variable that marks the processes of one run.
pub const MARKER_VAR: &str = "STACKSCOPE_TEST_MARKER";

/// How long processes of a run that ended may take to go: stackscope ends the tree before it
/// exits; a stackscope killed with SIGKILL leaves it to the launcher (grace period included).
const LEFTOVER_WAIT: Duration = Duration::from_secs(10);

/// Marks `cmd` when it is a `record`; returns the marker.
pub fn mark_record(cmd: &mut Command) -> Option<String> {
    let is_record = cmd.get_args().next().is_some_and(|a| a == "record");
    if !is_record {
        return None;
    }
    if let Some((_, Some(existing))) = cmd.get_envs().find(|(k, _)| *k == MARKER_VAR) {
        return Some(existing.to_string_lossy().into_owned());
    }
    static NEXT: AtomicU64 = AtomicU64::new(0);
    let marker = format!(
        "{}-{}",
        std::process::id(),
        NEXT.fetch_add(1, Ordering::Relaxed)
    );
    cmd.env(MARKER_VAR, &marker);
    Some(marker)
}

/// The live processes whose environment carries `marker`.
pub fn processes_marked(marker: &str) -> Vec<u32> {
    let needle = format!("{MARKER_VAR}={marker}");
    let Ok(entries) = fs::read_dir("/proc") else {
        return Vec::new();
    };
    let mut out = Vec::new();
    for entry in entries.flatten() {
        let Some(pid) = entry
            .file_name()
            .to_str()
            .and_then(|n| n.parse::<u32>().ok())
        else {
            continue;
        };
        // A zombie's environment reads empty: it runs nothing any more.
        let Ok(env) = fs::read(format!("/proc/{pid}/environ")) else {
            continue;
        };
        if env.split(|b| *b == 0).any(|var| var == needle.as_bytes()) {
            out.push(pid);
        }
    }
    out
}

/// Panics when processes of the run marked `marker` are still alive a little after it ended
/// (and kills them, so that one failure does not spill into other tests).
pub fn assert_nothing_left(marker: &str, what: &str) {
    let deadline = Instant::now() + LEFTOVER_WAIT;
    loop {
        let left = processes_marked(marker);
        if left.is_empty() {
            return;
        }
        if Instant::now() >= deadline {
            let described: Vec<String> = left
                .iter()
                .map(|pid| {
                    let cmd = fs::read(format!("/proc/{pid}/cmdline")).unwrap_or_default();
                    let cmd = String::from_utf8_lossy(&cmd).replace('\0', " ");
                    format!("{pid} ({})", cmd.trim())
                })
                .collect();
            for pid in &left {
                super::kill_quietly(*pid);
            }
            panic!(
                "processes started by `stackscope record` outlived it: {}\n{what}",
                described.join(", ")
            );
        }
        std::thread::sleep(Duration::from_millis(50));
    }
}
