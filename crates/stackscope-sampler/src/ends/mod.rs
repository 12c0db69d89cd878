//! How the processes of a job's tree ended, seen from outside without reaping anyone's child:
//!
//! - the kernel's exit events (the process connector, netlink; root only, in the host's
//!   network namespace), which carry each process's wait status as it exits;
//! - a zombie's `exit_code` (field 52 of `/proc/PID/stat`), readable until its parent reaps
//!   it (a `multiprocessing` pool reaps within 100 ms, so the events are what usually tells);
//! - an OOM kill: the job's memory cgroup counts one (v1 `memory.oom_control`, v2
//!   `memory.events`, `oom_kill`), or the kernel log (`/dev/kmsg`, root) names the pid.
//!
//! A source that cannot be opened (not root, another network namespace) is simply not there:
//! what it would have told is `unknown`.

mod cgroup;
mod connector;
mod kmsg;

use std::collections::{HashMap, HashSet, VecDeque};

use stackscope_event::{HowEnded, OomEvidence};

use crate::procfs::StatLine;

/// Exits remembered from the kernel's events, most recent last: every process of the machine
/// exits through them, and only ours are asked about.
const MAX_EXITS: usize = 4096;

pub struct EndWatch {
    connector: Option<connector::ExitEvents>,
    kmsg: Option<kmsg::KernelLog>,
    /// Wait statuses by pid, from the events and zombies seen.
    exits: HashMap<u32, i32>,
    order: VecDeque<u32>,
    /// Pids the kernel log says the OOM killer killed.
    oom_named: HashSet<u32>,
    /// Each followed process, with its memory cgroup where it has one; and the kills each
    /// cgroup had counted when last accounted for.
    followed: HashMap<u32, Option<cgroup::MemoryCgroup>>,
    oom_counted: HashMap<std::path::PathBuf, u64>,
}

impl EndWatch {
    /// Opens what can be opened; never fails.
    pub fn open() -> EndWatch {
        EndWatch {
            connector: connector::ExitEvents::open(),
            kmsg: kmsg::KernelLog::open(),
            exits: HashMap::new(),
            order: VecDeque::new(),
            oom_named: HashSet::new(),
            followed: HashMap::new(),
            oom_counted: HashMap::new(),
        }
    }

    /// Notes a process of the tree while it lives: its memory cgroup, and that cgroup's kill
    /// count so far (kills before we looked are no one's of ours).
    pub fn follow(&mut self, pid: u32) {
        if self.followed.contains_key(&pid) {
            return;
        }
        let cg = cgroup::MemoryCgroup::of(pid);
        if let Some(n) = cg.as_ref().and_then(cgroup::MemoryCgroup::oom_kills) {
            let path = cg.as_ref().map(|c| c.counter_path().to_owned());
            self.oom_counted
                .entry(path.unwrap_or_default())
                .or_insert(n);
        }
        self.followed.insert(pid, cg);
    }

    /// Takes in what the kernel said since the last call (cheap: a read that finds nothing
    /// costs one system call each).
    pub fn poll(&mut self) {
        let mut exits = Vec::new();
        if let Some(c) = self.connector.as_mut() {
            c.drain(&mut exits);
        }
        for (pid, status) in exits {
            self.remember(pid, status);
        }
        if let Some(k) = self.kmsg.as_mut() {
            self.oom_named.extend(k.drain_oom_kills());
        }
    }

    /// Notes the status of every followed process that is a zombie now: a `watch` tick's
    /// chance to see one its parent reaps before it is found gone (one stat read each).
    pub fn poll_zombies(&mut self) {
        let zombies: Vec<(u32, i32)> = self
            .followed
            .keys()
            .filter_map(|&pid| Some((pid, zombie_status(pid)?)))
            .collect();
        for (pid, status) in zombies {
            self.remember(pid, status);
        }
    }

    fn remember(&mut self, pid: u32, status: i32) {
        if self.exits.insert(pid, status).is_none() {
            self.order.push_back(pid);
        }
        while self.order.len() > MAX_EXITS {
            if let Some(old) = self.order.pop_front() {
                self.exits.remove(&old);
            }
        }
    }

    /// How `pid`, a followed process now gone, ended. Call once per process: an OOM kill its
    /// cgroup counted is attributed to it and not again.
    pub fn how_ended(&mut self, pid: u32) -> HowEnded {
        self.poll();
        if let Some(status) = zombie_status(pid) {
            self.remember(pid, status);
        }
        let how = self
            .exits
            .get(&pid)
            .map_or(HowEnded::Unknown, |&s| HowEnded::from_wait_status(s));
        let cgroup = self.followed.remove(&pid).flatten();
        // The OOM killer ends a process with SIGKILL; a status not known may be one too.
        if !matches!(how, HowEnded::Killed(9) | HowEnded::Unknown) {
            return how;
        }
        if self.oom_named.remove(&pid) {
            return HowEnded::OomKilled(OomEvidence::KernelLog);
        }
        if let Some(cg) = cgroup {
            if let Some(now) = cg.oom_kills() {
                let before = self
                    .oom_counted
                    .insert(cg.counter_path().to_owned(), now)
                    .unwrap_or(now);
                if now > before {
                    return HowEnded::OomKilled(OomEvidence::Cgroup(now - before));
                }
            }
        }
        how
    }
}

/// A zombie's wait status; `None` while it runs or once it is reaped.
fn zombie_status(pid: u32) -> Option<i32> {
    let stat = std::fs::read(format!("/proc/{pid}/stat")).ok()?;
    let line = StatLine::parse(&stat)?;
    line.state()?
        .is_zombie()
        .then(|| line.exit_code())
        .flatten()
}

#[cfg(test)]
mod tests {
    use super::*;

    /// A child of ours, ended by SIGKILL and not reaped yet: its zombie's status says so,
    /// and the kernel's events (where they can be opened here) agree.
    #[test]
    fn a_killed_child_is_killed_by_sigkill() {
        let mut watch = EndWatch::open();
        let mut child = std::process::Command::new("sleep")
            .arg("30")
            .spawn()
            .expect("sleep");
        let pid = child.id();
        watch.follow(pid);
        child.kill().expect("kill");
        // Not reaped: a zombie until wait.
        let deadline = std::time::Instant::now() + std::time::Duration::from_secs(5);
        while zombie_status(pid).is_none() && std::time::Instant::now() < deadline {
            std::thread::sleep(std::time::Duration::from_millis(10));
        }
        assert_eq!(watch.how_ended(pid), HowEnded::Killed(9));
        let _ = child.wait();
        let mut child = std::process::Command::new("sh")
            .args(["-c", "exit 3"])
            .spawn()
            .expect("sh");
        let pid = child.id();
        watch.follow(pid);
        let deadline = std::time::Instant::now() + std::time::Duration::from_secs(5);
        while zombie_status(pid).is_none() && std::time::Instant::now() < deadline {
            std::thread::sleep(std::time::Duration::from_millis(10));
        }
        assert_eq!(watch.how_ended(pid), HowEnded::Exited(3));
        let _ = child.wait();
    }
}
