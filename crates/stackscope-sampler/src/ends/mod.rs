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
mod kmsg;

use std::collections::{HashMap, HashSet, VecDeque};

use stackscope_event::{HowEnded, OomEvidence};

use crate::proc_events::{ProcEvent, ProcEvents, PROC_EVENT_EXIT};
use crate::procfs::StatLine;

/// Exits remembered from the kernel's events, most recent last: every process of the machine
/// exits through them, and only ours are asked about.
const MAX_EXITS: usize = 4096;

/// A sampler polls at most this often ([`EndWatch::poll_if_due`]): what the kernel says
/// meanwhile waits in the connector's socket buffer and the kernel log, and a process found
/// gone is asked about after a poll of its own.
const POLL_EVERY: std::time::Duration = std::time::Duration::from_millis(100);

pub struct EndWatch {
    connector: Option<ProcEvents>,
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
    /// When [`EndWatch::poll`] last ran.
    polled: Option<std::time::Instant>,
}

impl EndWatch {
    /// Opens what can be opened; never fails.
    pub fn open() -> EndWatch {
        EndWatch {
            connector: ProcEvents::open(PROC_EVENT_EXIT),
            kmsg: kmsg::KernelLog::open(),
            exits: HashMap::new(),
            order: VecDeque::new(),
            oom_named: HashSet::new(),
            followed: HashMap::new(),
            oom_counted: HashMap::new(),
            polled: None,
        }
    }

    /// [`EndWatch::poll`], if [`POLL_EVERY`] has passed since the last one: a sampler's
    /// ticks do not each pay for two system calls that nearly always find nothing.
    pub fn poll_if_due(&mut self) {
        if self.polled.is_none_or(|at| at.elapsed() >= POLL_EVERY) {
            self.poll();
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
        self.polled = Some(std::time::Instant::now());
        let mut exits = Vec::new();
        if let Some(c) = self.connector.as_mut() {
            // A thread's exit (its pid is not the group's) is no process's.
            c.drain(|event| match event {
                ProcEvent::Exit { pid, tgid, status } if pid == tgid => exits.push((pid, status)),
                _ => {}
            });
        }
        for (pid, status) in exits {
            self.remember(pid, status);
        }
        if let Some(k) = self.kmsg.as_mut() {
            let named = k.drain_oom_kills();
            self.note_oom_kills(named);
        }
    }

    /// Pids the kernel log says the OOM killer killed: the log names every process of the
    /// machine, and only ours are kept (until asked how they ended).
    fn note_oom_kills(&mut self, pids: impl IntoIterator<Item = u32>) {
        let followed = &self.followed;
        self.oom_named
            .extend(pids.into_iter().filter(|pid| followed.contains_key(pid)));
    }

    /// Processes followed now, cgroups whose kill counts are kept, and OOM kills named but not
    /// yet asked about: what is kept per process, none of it for one asked about.
    #[cfg(test)]
    fn entries(&self) -> (usize, usize, usize) {
        (
            self.followed.len(),
            self.oom_counted.len(),
            self.oom_named.len(),
        )
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
        let named = self.oom_named.remove(&pid);
        let how = self.judge(how, named, cgroup.as_ref());
        if let Some(cg) = &cgroup {
            self.forget_cgroup_unless_used(cg.counter_path());
        }
        how
    }

    /// The end `how` as its status says it, told an OOM kill where the kernel log `named` the
    /// pid or its cgroup counted one more since.
    fn judge(
        &mut self,
        how: HowEnded,
        named: bool,
        cgroup: Option<&cgroup::MemoryCgroup>,
    ) -> HowEnded {
        // The OOM killer ends a process with SIGKILL; a status not known may be one too.
        if !matches!(how, HowEnded::Killed(9) | HowEnded::Unknown) {
            return how;
        }
        if named {
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

    /// Forgets a cgroup's kill count once no followed process is in it (a job that starts each
    /// worker in a cgroup of its own must not leave a count behind per worker); one that a new
    /// process joins later counts its kills from then, as at its first.
    fn forget_cgroup_unless_used(&mut self, counter: &std::path::Path) {
        let used = self
            .followed
            .values()
            .flatten()
            .any(|cg| cg.counter_path() == counter);
        if !used {
            self.oom_counted.remove(counter);
        }
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

    /// A process asked about leaves nothing behind: not its cgroup's kill count once no other
    /// process is in it, not a kill the kernel log named; the log's kills of processes not
    /// followed are not kept at all.
    #[test]
    fn what_is_kept_of_an_ended_process_goes_when_it_is_asked_about() {
        let dir = tempfile::tempdir().expect("tempdir");
        let counter = dir.path().join("memory.events");
        std::fs::write(&counter, "oom 0\noom_kill 0\n").expect("write");
        let mut watch = EndWatch {
            connector: None,
            kmsg: None,
            exits: HashMap::new(),
            order: VecDeque::new(),
            oom_named: HashSet::new(),
            followed: HashMap::new(),
            oom_counted: HashMap::new(),
            polled: None,
        };
        let own_cgroup = |watch: &mut EndWatch, pid| {
            let cg = cgroup::MemoryCgroup::at(counter.clone());
            watch.oom_counted.entry(counter.clone()).or_insert(0);
            watch.followed.insert(pid, Some(cg));
        };
        own_cgroup(&mut watch, 4_000_001);
        own_cgroup(&mut watch, 4_000_002);
        watch.note_oom_kills([4_000_001, 1, 2, 3]);
        assert_eq!(watch.entries(), (2, 1, 1));
        assert_eq!(
            watch.how_ended(4_000_001),
            HowEnded::OomKilled(OomEvidence::KernelLog)
        );
        // The other process still in the cgroup keeps its count.
        assert_eq!(watch.entries(), (1, 1, 0));
        std::fs::write(&counter, "oom 1\noom_kill 1\n").expect("write");
        assert_eq!(
            watch.how_ended(4_000_002),
            HowEnded::OomKilled(OomEvidence::Cgroup(1))
        );
        assert_eq!(watch.entries(), (0, 0, 0));
    }

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
