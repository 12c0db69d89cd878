//! The memory cgroup a process runs in, and what its files say: usage, limit and OOM kills.
//!
//! - Which cgroup: `/proc/PID/cgroup`. A v1 line naming the `memory` controller
//!   (`4:memory:/job`) wins (on a hybrid system the memory controller is v1's whatever the
//!   unified line says); else the v2 line (`0::/job`).
//! - Where: v2 `<root>/<path>/` (`memory.current`, `memory.max`, `memory.events`' `oom_kill`);
//!   v1 `<root>/memory/<path>/` (`memory.usage_in_bytes`, `memory.limit_in_bytes`,
//!   `memory.oom_control`'s `oom_kill`). Inside a container whose cgroup is mounted at the root
//!   of its cgroup file system while `/proc/PID/cgroup` names the host's path, the path is not
//!   there: the mount's root is the container's own cgroup and is read instead.
//! - v1's root cgroup (`/`) is the whole machine, not the job's: no readings. v2's true root has
//!   no `memory.current`, so none either; a namespaced root (a container's) has, and is read.
//! - Unlimited is `None`: v2's `max`, v1's huge sentinel (a page counter's maximum, about 2^63).
//!
//! Parsers are pure functions of the files' text; reading returns `None` for anything missing,
//! unreadable or unparsable. The files are opened once, when located, and read again from their
//! start at every reading ([`read_from_start`]).

use std::fs::File;
use std::path::{Path, PathBuf};

use crate::procfs::read_from_start;

/// Where `/proc/PID/cgroup` places a process's memory cgroup.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum CgroupPath {
    /// Under the v1 `memory` controller's hierarchy.
    V1(String),
    /// In the unified (v2) hierarchy.
    V2(String),
}

/// The files of one memory cgroup, open.
#[derive(Debug)]
pub struct CgroupFiles {
    pub version: CgroupVersion,
    pub dir: PathBuf,
    usage: File,
    /// `memory.max` or `memory.limit_in_bytes`.
    limit: Option<File>,
    /// `memory.events` or `memory.oom_control`.
    events: Option<File>,
}

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum CgroupVersion {
    V1,
    V2,
}

/// One reading of a cgroup's files.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct CgroupReading {
    pub usage: u64,
    /// `None`: unlimited, or not read this time.
    pub limit: Option<u64>,
    /// `None`: unreadable, or not read this time.
    pub oom_kills: Option<u64>,
}

/// v1 reports "no limit" as the page counter's maximum (0x7FFF_FFFF_FFFF_F000 with 4 KiB
/// pages); anything from 2^62 (4 EiB) up is read as that.
const V1_UNLIMITED_FROM: u64 = 1 << 62;

/// The memory cgroup in `/proc/PID/cgroup`'s text.
pub fn parse_proc_cgroup(text: &str) -> Option<CgroupPath> {
    let mut unified = None;
    for line in text.lines() {
        let mut parts = line.splitn(3, ':');
        let (Some(_id), Some(controllers), Some(path)) = (parts.next(), parts.next(), parts.next())
        else {
            continue;
        };
        if controllers.split(',').any(|c| c == "memory") {
            return Some(CgroupPath::V1(path.to_owned()));
        }
        if controllers.is_empty() && line.starts_with("0:") {
            unified = Some(CgroupPath::V2(path.to_owned()));
        }
    }
    unified
}

/// A single number, as in `memory.current` or `memory.usage_in_bytes`.
pub fn parse_number(text: &str) -> Option<u64> {
    text.trim().parse().ok()
}

/// v2's `memory.max`: `max` is unlimited (`Some(None)`).
pub fn parse_v2_max(text: &str) -> Option<Option<u64>> {
    match text.trim() {
        "max" => Some(None),
        other => other.parse().ok().map(Some),
    }
}

/// v1's `memory.limit_in_bytes`: the huge sentinel is unlimited (`Some(None)`).
pub fn parse_v1_limit(text: &str) -> Option<Option<u64>> {
    let value = parse_number(text)?;
    Some((value < V1_UNLIMITED_FROM).then_some(value))
}

/// The value of a `key value` line (v2's `memory.events`, v1's `memory.oom_control`).
pub fn parse_keyed(text: &str, key: &str) -> Option<u64> {
    text.lines().find_map(|line| {
        let (name, value) = line.split_once(char::is_whitespace)?;
        (name == key).then(|| value.trim().parse().ok())?
    })
}

impl CgroupFiles {
    /// The memory cgroup of the process whose `/proc/PID/cgroup` text is given, under the
    /// cgroup file system mounted at `root` (`/sys/fs/cgroup`), its files open; `None` when it
    /// has none of its own or its usage file cannot be opened.
    pub fn locate(proc_cgroup: &str, root: &Path) -> Option<CgroupFiles> {
        let (version, base, path) = match parse_proc_cgroup(proc_cgroup)? {
            CgroupPath::V1(path) => (CgroupVersion::V1, root.join("memory"), path),
            CgroupPath::V2(path) => (CgroupVersion::V2, root.to_path_buf(), path),
        };
        let relative = path.trim_start_matches('/');
        if version == CgroupVersion::V1 && relative.is_empty() {
            return None;
        }
        let own = base.join(relative);
        if let Some(files) = CgroupFiles::open(version, own) {
            return Some(files);
        }
        // A container's view: its cgroup is the mount's root.
        if relative.is_empty() {
            return None;
        }
        CgroupFiles::open(version, base)
    }

    fn open(version: CgroupVersion, dir: PathBuf) -> Option<CgroupFiles> {
        let (usage, limit, events) = match version {
            CgroupVersion::V1 => (
                "memory.usage_in_bytes",
                "memory.limit_in_bytes",
                "memory.oom_control",
            ),
            CgroupVersion::V2 => ("memory.current", "memory.max", "memory.events"),
        };
        Some(CgroupFiles {
            version,
            usage: File::open(dir.join(usage)).ok()?,
            limit: File::open(dir.join(limit)).ok(),
            events: File::open(dir.join(events)).ok(),
            dir,
        })
    }

    /// Usage and OOM kills now; the limit too when `with_limit` (it seldom changes). `None`
    /// when usage is unreadable.
    pub fn read(&self, with_limit: bool, buffer: &mut Vec<u8>) -> Option<CgroupReading> {
        let usage = parse_number(read_from_start(&self.usage, buffer).ok()?)?;
        let oom_kills = self
            .events
            .as_ref()
            .and_then(|file| read_from_start(file, buffer).ok())
            .and_then(|text| parse_keyed(text, "oom_kill"));
        let limit = self
            .limit
            .as_ref()
            .filter(|_| with_limit)
            .and_then(|file| read_from_start(file, buffer).ok())
            .and_then(|text| match self.version {
                CgroupVersion::V1 => parse_v1_limit(text),
                CgroupVersion::V2 => parse_v2_max(text),
            })
            .flatten();
        Some(CgroupReading {
            usage,
            limit,
            oom_kills,
        })
    }
}

#[cfg(test)]
mod tests;
