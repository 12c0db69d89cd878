//! The process tree's history while `watch` follows it: when each process appeared and
//! vanished, its role, and what ended it where that can be known (the sampler's [`EndWatch`]:
//! the kernel's exit events, a zombie's status, the memory cgroup's OOM kills, the kernel log).
//! The hang report's `processes_ended` and its `cause` come from here, and with
//! [`Past`], each vanished process's memory.

use std::collections::HashMap;

use chrono::{DateTime, Local};
use stackscope_aggregate::{process_role, Vanished};
use stackscope_event::{ProcessEnded, RankInfo, Timestamp};
use stackscope_sampler::{procfs, EndWatch};

use super::memory::MemoryHistory;

/// A replacement is a process of the same parent that appeared at most this long before the
/// vanished one was seen gone (a pool replaces its worker within its 100 ms loop; the tree is
/// rescanned every 500 ms, and may find the new one before we see the old one gone).
const REPLACED_WITHIN_NANOS: u64 = 2_000_000_000;

/// Everything `watch` keeps of the tree's past for a report: how its processes came and went,
/// and their memory.
pub(crate) struct Past {
    pub(crate) tree: TreeHistory,
    pub(crate) memory: MemoryHistory,
}

impl Past {
    pub(crate) fn new(root: u32) -> Past {
        Past {
            tree: TreeHistory::new(root),
            memory: MemoryHistory::default(),
        }
    }

    /// A process of the tree is followed from `now` on.
    pub(crate) fn appeared(&mut self, pid: u32, now: Timestamp) {
        self.tree.appeared(pid, now);
        self.memory.appeared(pid);
    }

    /// A followed process is gone.
    pub(crate) fn vanished(&mut self, pid: u32, now: Timestamp) {
        self.tree.vanished(pid, now);
        self.memory.vanished(pid);
    }
}

pub(crate) struct TreeHistory {
    ends: EndWatch,
    root: u32,
    alive: HashMap<u32, Seen>,
    ended: Vec<(Seen, Gone)>,
}

#[derive(Clone)]
struct Seen {
    pid: u32,
    role: String,
    rank: Option<u32>,
    parent: Option<u32>,
    started: Timestamp,
    started_wall: DateTime<Local>,
}

struct Gone {
    at: Timestamp,
    wall: DateTime<Local>,
    how: stackscope_event::HowEnded,
}

impl TreeHistory {
    pub(crate) fn new(root: u32) -> TreeHistory {
        TreeHistory {
            ends: EndWatch::open(),
            root,
            alive: HashMap::new(),
            ended: Vec::new(),
        }
    }

    /// A process of the tree is followed from `now` on.
    pub(crate) fn appeared(&mut self, pid: u32, now: Timestamp) {
        if self.alive.contains_key(&pid) {
            return;
        }
        self.ends.follow(pid);
        let rank = RankInfo::of_process(pid).rank;
        let command_line = procfs::command_line(pid).unwrap_or_default();
        let role = process_role(pid, self.root, rank, &command_line);
        self.alive.insert(
            pid,
            Seen {
                pid,
                role,
                rank,
                parent: procfs::parent(pid),
                started: now,
                started_wall: Local::now(),
            },
        );
    }

    /// A followed process is gone: how it ended, as far as can be known now.
    pub(crate) fn vanished(&mut self, pid: u32, now: Timestamp) {
        let Some(seen) = self.alive.remove(&pid) else {
            return;
        };
        let how = self.ends.how_ended(pid);
        self.ended.push((
            seen,
            Gone {
                at: now,
                wall: Local::now(),
                how,
            },
        ));
    }

    /// Takes in the kernel's news; once a tick, so that its queue does not overflow.
    pub(crate) fn poll(&mut self) {
        self.ends.poll();
        self.ends.poll_zombies();
    }

    /// `processes_ended`: every process that vanished while watched.
    pub(crate) fn processes_ended(&self) -> Vec<ProcessEnded> {
        self.ended
            .iter()
            .map(|(seen, gone)| ProcessEnded {
                pid: seen.pid,
                role: seen.role.clone(),
                started: seen.started_wall.to_rfc3339(),
                ended: gone.wall.to_rfc3339(),
                how: gone.how,
            })
            .collect()
    }

    /// The vanished processes, as a hang's cause reads them: when each ended relative to
    /// `frozen_since`, and what replaced it.
    pub(crate) fn vanished_since(&self, frozen_since: Timestamp) -> Vec<Vanished> {
        self.ended
            .iter()
            .map(|(seen, gone)| Vanished {
                pid: seen.pid,
                role: seen.role.clone(),
                rank: seen.rank,
                parent: seen.parent,
                how: gone.how,
                ended: gone.wall.format("%H:%M:%S").to_string(),
                secs_before_freeze: (frozen_since.0 as f64 - gone.at.0 as f64) / 1e9,
                replaced_by: self.replacement(seen, gone),
            })
            .collect()
    }

    /// The first process of the same parent that appeared after `seen`, around when it
    /// vanished.
    fn replacement(&self, seen: &Seen, gone: &Gone) -> Option<u32> {
        let later = self
            .alive
            .values()
            .chain(self.ended.iter().map(|(s, _)| s))
            .filter(|s| s.pid != seen.pid && s.parent == seen.parent && s.parent.is_some())
            .filter(|s| s.started.0 > seen.started.0)
            .filter(|s| s.started.0 + REPLACED_WITHIN_NANOS >= gone.at.0);
        later.min_by_key(|s| s.started.0).map(|s| s.pid)
    }
}
