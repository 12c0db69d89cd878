//! A process's memory cgroup and the OOM kills it counted: v1's `memory.oom_control` and v2's
//! `memory.events` both have a line `oom_kill N`.

use std::path::{Path, PathBuf};

/// Where cgroup hierarchies are mounted here; v2 alone, or beside v1 (`unified`).
const V1_MEMORY: &str = "/sys/fs/cgroup/memory";
const V2_ROOTS: [&str; 2] = ["/sys/fs/cgroup", "/sys/fs/cgroup/unified"];

#[derive(Debug, Clone)]
pub(super) struct MemoryCgroup {
    /// The file that counts its OOM kills.
    counter: PathBuf,
}

impl MemoryCgroup {
    /// The memory cgroup of `pid` that counts OOM kills: v1's memory controller where it has
    /// one, else its v2 group (where the memory controller is enabled).
    pub(super) fn of(pid: u32) -> Option<MemoryCgroup> {
        let text = std::fs::read_to_string(format!("/proc/{pid}/cgroup")).ok()?;
        let (v1, v2) = parse_cgroup_file(&text);
        let v1 = v1.map(|path| Path::new(V1_MEMORY).join(path).join("memory.oom_control"));
        let v2 = v2.into_iter().flat_map(|path| {
            V2_ROOTS
                .iter()
                .map(move |root| Path::new(root).join(path).join("memory.events"))
        });
        v1.into_iter()
            .chain(v2)
            .find(|counter| counter.is_file())
            .map(|counter| MemoryCgroup { counter })
    }

    /// A cgroup counted by the file at `counter`.
    #[cfg(test)]
    pub(super) fn at(counter: PathBuf) -> MemoryCgroup {
        MemoryCgroup { counter }
    }

    pub(super) fn counter_path(&self) -> &Path {
        &self.counter
    }

    /// The kills counted so far.
    pub(super) fn oom_kills(&self) -> Option<u64> {
        let text = std::fs::read_to_string(&self.counter).ok()?;
        oom_kill_line(&text)
    }
}

/// The v1 memory controller's path and the v2 group's path, relative to their roots, from a
/// `/proc/PID/cgroup`.
fn parse_cgroup_file(text: &str) -> (Option<&str>, Option<&str>) {
    let mut v1 = None;
    let mut v2 = None;
    for line in text.lines() {
        let mut parts = line.splitn(3, ':');
        let (Some(id), Some(controllers), Some(path)) = (parts.next(), parts.next(), parts.next())
        else {
            continue;
        };
        let path = path.trim_start_matches('/');
        if id == "0" && controllers.is_empty() {
            v2 = Some(path);
        } else if controllers.split(',').any(|c| c == "memory") {
            v1 = Some(path);
        }
    }
    (v1, v2)
}

fn oom_kill_line(text: &str) -> Option<u64> {
    text.lines()
        .find_map(|l| l.strip_prefix("oom_kill "))
        .and_then(|n| n.trim().parse().ok())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn v1_and_v2_paths_and_counters() {
        let text = "12:pids:/job\n4:memory:/job/limited\n0::/system.slice/job.scope\n";
        assert_eq!(
            parse_cgroup_file(text),
            (Some("job/limited"), Some("system.slice/job.scope"))
        );
        assert_eq!(parse_cgroup_file("0::/\n"), (None, Some("")));
        let v1 = "oom_kill_disable 0\nunder_oom 0\noom_kill 2\n";
        assert_eq!(oom_kill_line(v1), Some(2));
        let v2 = "low 0\nhigh 0\nmax 5\noom 1\noom_kill 1\noom_group_kill 0\n";
        assert_eq!(oom_kill_line(v2), Some(1));
        assert_eq!(oom_kill_line("oom 3\n"), None);
    }
}
