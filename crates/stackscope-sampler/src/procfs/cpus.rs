//! How many CPUs a process may use: its CPU affinity (`Cpus_allowed_list` of
//! `/proc/PID/status`), capped by the CPU quota of its cgroup and the cgroups above it (v2
//! `cpu.max`, v1 `cpu.cfs_quota_us` over `cpu.cfs_period_us`). `gpu.if_fixed.cpus_usable`: how
//! many worker processes the job could run at once.
//!
//! The cgroup is found from `/proc/PID/cgroup`, under this machine's cgroup mount; a process
//! in its own cgroup namespace (a container) names a path relative to its namespace's root,
//! which is read through `/proc/PID/root` instead.

use std::fs;
use std::path::{Path, PathBuf};

/// CPUs `pid` may use; `None` when its affinity cannot be read.
pub fn cpus_usable(pid: u32) -> Option<f64> {
    let status = fs::read_to_string(format!("/proc/{pid}/status")).ok()?;
    let affinity = status
        .lines()
        .find_map(|l| l.strip_prefix("Cpus_allowed_list:"))
        .and_then(|list| count_cpu_list(list.trim()))?;
    let quota = fs::read_to_string(format!("/proc/{pid}/cgroup"))
        .ok()
        .and_then(|cgroups| quota_of(pid, &cgroups));
    Some(match quota {
        Some(q) => q.min(affinity as f64),
        None => affinity as f64,
    })
}

/// The CPUs of a list such as `0-3,8,10-11`; `None` when it does not parse.
pub fn count_cpu_list(list: &str) -> Option<u32> {
    let mut n = 0u32;
    for part in list.split(',').filter(|p| !p.is_empty()) {
        n += match part.split_once('-') {
            Some((a, b)) => {
                let (a, b): (u32, u32) = (a.trim().parse().ok()?, b.trim().parse().ok()?);
                b.checked_sub(a)? + 1
            }
            None => {
                part.trim().parse::<u32>().ok()?;
                1
            }
        };
    }
    (n > 0).then_some(n)
}

/// Reads one cgroup folder's CPU quota, in CPUs.
type QuotaReader = fn(&Path) -> Option<f64>;

/// The tightest CPU quota on `pid`'s cgroup and its ancestors, in CPUs; `None` for none.
fn quota_of(pid: u32, cgroups: &str) -> Option<f64> {
    let mut tightest: Option<f64> = None;
    for line in cgroups.lines() {
        // `ID:CONTROLLERS:PATH`; v2 has ID 0 and no controllers.
        let mut fields = line.splitn(3, ':');
        let (Some(_), Some(controllers), Some(path)) =
            (fields.next(), fields.next(), fields.next())
        else {
            continue;
        };
        let (mounts, reader): (Vec<String>, QuotaReader) = if controllers.is_empty() {
            (vec!["sys/fs/cgroup".to_owned()], quota_v2)
        } else if controllers.split(',').any(|c| c == "cpu") {
            (
                vec![
                    format!("sys/fs/cgroup/{controllers}"),
                    "sys/fs/cgroup/cpu,cpuacct".to_owned(),
                    "sys/fs/cgroup/cpu".to_owned(),
                ],
                quota_v1,
            )
        } else {
            continue;
        };
        for mount in mounts {
            if let Some(q) = quota_up_from(pid, &mount, path, reader) {
                tightest = Some(tightest.map_or(q, |t: f64| t.min(q)));
                break;
            }
        }
    }
    tightest
}

/// The tightest quota from the cgroup at `path` up to its mount's root. The cgroup is looked
/// for on this machine's mount first, then inside the process's root (its own namespace).
fn quota_up_from(pid: u32, mount: &str, path: &str, reader: QuotaReader) -> Option<f64> {
    let relative = path.trim_start_matches('/');
    let base = [
        PathBuf::from("/").join(mount),
        PathBuf::from(format!("/proc/{pid}/root")).join(mount),
    ]
    .into_iter()
    .find(|b| b.join(relative).is_dir())?;
    let mut dir = base.join(relative);
    let mut tightest: Option<f64> = None;
    loop {
        if let Some(q) = reader(&dir) {
            tightest = Some(tightest.map_or(q, |t: f64| t.min(q)));
        }
        if dir == base || !dir.pop() {
            break;
        }
    }
    tightest
}

/// cgroup v2: `cpu.max` holds `QUOTA PERIOD`, or `max PERIOD` for none.
fn quota_v2(dir: &Path) -> Option<f64> {
    let text = fs::read_to_string(dir.join("cpu.max")).ok()?;
    parse_cpu_max(&text)
}

/// `cpu.max`'s quota in CPUs; `None` for `max`.
pub fn parse_cpu_max(text: &str) -> Option<f64> {
    let mut fields = text.split_whitespace();
    let quota: f64 = fields.next()?.parse().ok()?;
    let period: f64 = fields.next()?.parse().ok()?;
    (quota > 0.0 && period > 0.0).then(|| quota / period)
}

/// cgroup v1: `cpu.cfs_quota_us` (-1 for none) over `cpu.cfs_period_us`.
fn quota_v1(dir: &Path) -> Option<f64> {
    let read = |name: &str| -> Option<f64> {
        fs::read_to_string(dir.join(name)).ok()?.trim().parse().ok()
    };
    let (quota, period) = (read("cpu.cfs_quota_us")?, read("cpu.cfs_period_us")?);
    (quota > 0.0 && period > 0.0).then(|| quota / period)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn cpu_lists_and_quotas_parse() {
        assert_eq!(count_cpu_list("0-3,8,10-11"), Some(7));
        assert_eq!(count_cpu_list("0"), Some(1));
        assert_eq!(count_cpu_list("3-1"), None);
        assert_eq!(count_cpu_list(""), None);
        assert_eq!(parse_cpu_max("150000 100000\n"), Some(1.5));
        assert_eq!(parse_cpu_max("max 100000\n"), None);
    }

    #[test]
    fn this_process_may_use_at_least_part_of_a_cpu() {
        let cpus = cpus_usable(std::process::id()).expect("our own affinity");
        assert!(cpus > 0.0, "{cpus}");
        let status = fs::read_to_string("/proc/self/status").expect("status");
        let list = status
            .lines()
            .find_map(|l| l.strip_prefix("Cpus_allowed_list:"))
            .expect("an affinity");
        let affinity = count_cpu_list(list.trim()).expect("a list");
        assert!(cpus <= f64::from(affinity), "{cpus} of {affinity}");
    }
}
