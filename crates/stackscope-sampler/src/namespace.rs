//! Processes in another PID namespace (a container), as stackscope sees them from outside.
//!
//! CPython stores each thread's id as the thread itself sees it (`native_thread_id`, from
//! `gettid()` in its own namespace), while `/proc` and ptrace speak the ids of the namespace
//! that `/proc` was mounted for: a job in a container reads its spinning thread as `42` where
//! the host's `/proc` has it as `5124`, and `/proc/42` is some other process of the host. The
//! kernel states both in `NSpid:` of `/proc/PID/task/TID/status`: the id in the namespace of
//! the `/proc` we read first, the id in the thread's own namespace last. [`TidMap`] keeps that
//! translation for one process, read again when an id it does not know shows up.
//!
//! Where stackscope runs inside the target's namespace (a sidecar, `nsenter`), the two agree and
//! nothing is translated.

use std::collections::{HashMap, HashSet};
use std::fs;
use std::time::{Duration, Instant};

/// An id still unknown after a fresh read of the task list is read again at most this often:
/// a thread state whose thread has ended (or not started) must not cost a rescan per sample.
const MISS_RETRY: Duration = Duration::from_secs(1);

/// The inode of the initial PID namespace (`PROC_PID_INIT_INO` in the kernel, fixed since 3.8).
const INITIAL_PID_NS: &str = "pid:[4026531836]";

/// The ids of `NSpid:` in a status file's text: outermost (that of the `/proc` read) first.
pub(crate) fn parse_nspid(status: &str) -> Option<Vec<u64>> {
    let line = status.lines().find(|l| l.starts_with("NSpid:"))?;
    let ids: Vec<u64> = line["NSpid:".len()..]
        .split_whitespace()
        .filter_map(|w| w.parse().ok())
        .collect();
    (!ids.is_empty()).then_some(ids)
}

/// `NSpid:` of process `pid` (or of one of its threads, with `tid`).
fn nspid(pid: u32, tid: Option<u64>) -> Option<Vec<u64>> {
    let path = match tid {
        Some(tid) => format!("/proc/{pid}/task/{tid}/status"),
        None => format!("/proc/{pid}/status"),
    };
    parse_nspid(&fs::read_to_string(path).ok()?)
}

/// The pid process `pid` has in its own namespace, when it differs from `pid` (the process
/// runs in a PID namespace below the one of our `/proc`).
pub fn own_pid(pid: u32) -> Option<u32> {
    let ids = nspid(pid, None)?;
    let own = u32::try_from(*ids.last()?).ok()?;
    (ids.len() > 1 && own != pid).then_some(own)
}

/// The ids of the threads of `pid` as the process itself knows them (what its own memory holds,
/// `struct pthread`'s `tid` included): the last of each thread's `NSpid:`, which is the id
/// `/proc/PID/task` lists where the process is not in a namespace below ours.
pub fn own_thread_ids(pid: u32) -> Vec<u64> {
    let Ok(tasks) = fs::read_dir(format!("/proc/{pid}/task")) else {
        return Vec::new();
    };
    tasks
        .flatten()
        .filter_map(|t| t.file_name().to_str()?.parse::<u64>().ok())
        .filter_map(|tid| nspid(pid, Some(tid))?.last().copied())
        .collect()
}

/// Whether the `/proc` we read speaks the host's pids (those NVML reports): its namespace is
/// the initial one. `None` when that cannot be told (`/proc/1` is not ours to inspect).
pub fn proc_speaks_host_pids() -> Option<bool> {
    // Pid 1 of a /proc is the init of the namespace that /proc was mounted for.
    let link = fs::read_link("/proc/1/ns/pid").ok()?;
    Some(link.to_string_lossy() == INITIAL_PID_NS)
}

/// What to say when, with stackscope in a PID namespace of its own (a container, a sidecar), the
/// target shows up on no GPU: recent drivers list processes under the pids of the caller's
/// namespace (driver 580 does: `nvidia-smi` inside a PID namespace lists its job as pid 1), but
/// a driver that lists host pids names none that stackscope can see. `None` where our `/proc`
/// speaks the host's pids, as NVML does.
pub fn nvml_pid_note() -> Option<String> {
    match proc_speaks_host_pids() {
        Some(false) => Some(
            "stackscope runs in a PID namespace of its own (a container or a sidecar) and NVML \
             lists the target under none of the pids it sees (a driver that lists host pids \
             names none visible here), so the target cannot be matched to its GPUs"
                .to_owned(),
        ),
        _ => None,
    }
}

/// Which namespace an id is of.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
enum Side {
    Own,
    Ours,
}

/// The thread ids of one process, from its own namespace's to ours.
#[derive(Debug)]
pub struct TidMap {
    pid: u32,
    /// The process lives in a namespace below that of our `/proc`: ids need translating.
    nested: bool,
    /// Own id -> our id.
    to_ours: HashMap<u64, u64>,
    /// Ids not found at the last read of the task list.
    missing: HashSet<(Side, u64)>,
    read_at: Option<Instant>,
}

impl TidMap {
    /// The map for process `pid`; empty (every id is its own) unless the process is in a
    /// namespace below ours.
    pub fn new(pid: u32) -> TidMap {
        let nested = nspid(pid, None).is_some_and(|ids| ids.len() > 1);
        TidMap {
            pid,
            nested,
            to_ours: HashMap::new(),
            missing: HashSet::new(),
            read_at: None,
        }
    }

    /// Whether the process's thread ids differ from ours.
    pub fn is_nested(&self) -> bool {
        self.nested
    }

    /// Our id of the thread the process knows as `own` (what CPython stores); `None` when no
    /// thread of the process has that id now.
    pub fn ours(&mut self, own: u64) -> Option<u64> {
        if !self.nested {
            return Some(own);
        }
        self.lookup(Side::Own, own, |map| map.get(&own).copied())
    }

    /// The id the process itself knows our thread `tid` by, when it differs from `tid`.
    pub fn own(&mut self, tid: u64) -> Option<u64> {
        if !self.nested {
            return None;
        }
        let find = |map: &HashMap<u64, u64>| map.iter().find(|(_, &t)| t == tid).map(|(&o, _)| o);
        self.lookup(Side::Ours, tid, find).filter(|&own| own != tid)
    }

    /// Looks up in the map, reading it afresh when the id is new to it; an id still missing
    /// after that is looked up again only after [`MISS_RETRY`].
    fn lookup(
        &mut self,
        side: Side,
        id: u64,
        find: impl Fn(&HashMap<u64, u64>) -> Option<u64>,
    ) -> Option<u64> {
        if let Some(found) = find(&self.to_ours) {
            return Some(found);
        }
        let retry = self.read_at.is_none_or(|at| at.elapsed() >= MISS_RETRY);
        if self.missing.contains(&(side, id)) && !retry {
            return None;
        }
        self.reread();
        let found = find(&self.to_ours);
        if found.is_none() {
            self.missing.insert((side, id));
        }
        found
    }

    /// Reads every thread's `NSpid:` afresh: threads come and go.
    fn reread(&mut self) {
        self.read_at = Some(Instant::now());
        self.missing.clear();
        self.to_ours.clear();
        let Ok(tasks) = fs::read_dir(format!("/proc/{}/task", self.pid)) else {
            return;
        };
        for task in tasks.flatten() {
            let Some(tid) = task
                .file_name()
                .to_str()
                .and_then(|s| s.parse::<u64>().ok())
            else {
                continue;
            };
            if let Some(own) = nspid(self.pid, Some(tid)).and_then(|ids| ids.last().copied()) {
                self.to_ours.insert(own, tid);
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn nspid_lists_ids_outermost_first() {
        let status = "Name:\tpython3\nTgid:\t5124\nNSpid:\t5124\t42\nPPid:\t1\n";
        assert_eq!(parse_nspid(status), Some(vec![5124, 42]));
        assert_eq!(parse_nspid("NSpid:\t77\n"), Some(vec![77]));
        assert_eq!(parse_nspid("Name:\tx\n"), None);
    }

    #[test]
    fn a_process_beside_us_needs_no_translation() {
        let me = std::process::id();
        let tid = nix::unistd::gettid().as_raw() as u64;
        let mut map = TidMap::new(me);
        assert!(!map.is_nested());
        assert_eq!(map.ours(tid), Some(tid));
        assert_eq!(map.own(tid), None);
        assert_eq!(own_pid(me), None);
        assert!(own_thread_ids(me).contains(&tid));
    }
}
