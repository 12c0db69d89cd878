//! The process tree's history while `watch` follows it: when each process appeared and
//! vanished, its role, and what ended it where that can be known (the sampler's [`EndWatch`]:
//! the kernel's exit events, a zombie's status, the memory cgroup's OOM kills, the kernel log).
//! The hang report's `processes_ended` and its `cause` come from here, and with
//! [`Past`], each vanished process's memory, and what the watch could not see: when it began,
//! and the workers that replaced one before then ([`TreeHistory::replaced_before`]).

use std::collections::{HashMap, VecDeque};

use chrono::{DateTime, Local};
use stackscope_aggregate::{late_starts, process_role, LateStart, ProcessStart, Vanished};
use stackscope_event::{ProcessEnded, RankInfo, Timestamp};
use stackscope_sampler::{procfs, EndWatch};

use super::memory::MemoryHistory;

/// Whether a process ended badly: killed, by the OOM killer or a signal, or with a failing
/// status (an end not known is none of these).
fn ended_badly(how: stackscope_event::HowEnded) -> bool {
    use stackscope_event::HowEnded;
    match how {
        HowEnded::Exited(status) => status != 0,
        HowEnded::Killed(_) | HowEnded::OomKilled(_) => true,
        HowEnded::Unknown => false,
    }
}

/// A replacement is a process of the same parent that appeared at most this long before the
/// vanished one was seen gone (a pool replaces its worker within its 100 ms loop; the tree is
/// walked ten times a second, and may find the new one before we see the old one gone).
const REPLACED_WITHIN_NANOS: u64 = 2_000_000_000;
/// Processes that ended kept for the reports: the most recent, what a hang's cause looks at
/// first (at two workers ended a second, the last two minutes) ...
const KEPT_ENDED: usize = 256;
/// ... and, older than those, the last that ended badly (killed, OOM killed, a failing exit
/// status): a cause may lie minutes back. A job that starts and ends workers for days keeps no
/// more than these.
const KEPT_BAD_ENDS: usize = 64;

/// Everything `watch` keeps of the tree's past for a report: how its processes came and went,
/// and their memory, since the watch began.
pub(crate) struct Past {
    pub(crate) tree: TreeHistory,
    pub(crate) memory: MemoryHistory,
    pub(crate) began: Began,
}

/// When the watch began, and when it first read every thread: a job that has not moved since
/// that read may have been stuck for long before.
pub(crate) struct Began {
    pub(crate) wall: DateTime<Local>,
    pub(crate) first_read: Option<Timestamp>,
}

impl Began {
    /// Whether the job last moved no later than the first read: nothing moved while watched.
    pub(crate) fn frozen_before(&self, frozen_since: Timestamp) -> bool {
        self.first_read.is_some_and(|first| frozen_since <= first)
    }
}

impl Past {
    pub(crate) fn new(root: u32) -> Past {
        Past {
            tree: TreeHistory::new(root),
            memory: MemoryHistory::default(),
            began: Began {
                wall: Local::now(),
                first_read: None,
            },
        }
    }

    /// Every thread was read at `now`.
    pub(crate) fn read_at(&mut self, now: Timestamp) {
        self.began.first_read.get_or_insert(now);
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
    /// Oldest first, bounded ([`KEPT_ENDED`], [`KEPT_BAD_ENDS`]).
    ended: VecDeque<(Seen, Gone)>,
}

#[derive(Clone)]
struct Seen {
    pid: u32,
    role: String,
    rank: Option<u32>,
    parent: Option<u32>,
    command_line: String,
    /// When it was first followed.
    started: Timestamp,
    started_wall: DateTime<Local>,
    /// When it started, in seconds of the Unix epoch (`/proc`).
    born_secs: Option<f64>,
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
            ended: VecDeque::new(),
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
                command_line,
                started: now,
                started_wall: Local::now(),
                born_secs: procfs::started_secs(pid),
            },
        );
    }

    /// A followed process is gone: how it ended, as far as can be known now.
    pub(crate) fn vanished(&mut self, pid: u32, now: Timestamp) {
        let Some(seen) = self.alive.remove(&pid) else {
            return;
        };
        let how = self.ends.how_ended(pid);
        self.ended.push_back((
            seen,
            Gone {
                at: now,
                wall: Local::now(),
                how,
            },
        ));
        self.forget_old_ends();
    }

    /// Keeps the [`KEPT_ENDED`] most recent ends, and of the older ones the [`KEPT_BAD_ENDS`]
    /// most recent bad ones.
    fn forget_old_ends(&mut self) {
        let Some(older) = self.ended.len().checked_sub(KEPT_ENDED) else {
            return;
        };
        let bad: Vec<usize> = (0..older)
            .filter(|&i| ended_badly(self.ended[i].1.how))
            .collect();
        let kept_bad = &bad[bad.len().saturating_sub(KEPT_BAD_ENDS)..];
        let mut i = 0;
        self.ended.retain(|_| {
            let keep = i >= older || kept_bad.binary_search(&i).is_ok();
            i += 1;
            keep
        });
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

    /// The processes still there that started long after their siblings, and before `began`
    /// (a replacement the watch saw start has its vanished worker in `vanished_since`).
    pub(crate) fn replaced_before(&self, began: DateTime<Local>) -> Vec<LateStart> {
        let began_secs = began.timestamp_millis() as f64 / 1e3;
        let starts: Vec<ProcessStart> = self
            .alive
            .values()
            .filter_map(|s| {
                Some(ProcessStart {
                    pid: s.pid,
                    parent: s.parent,
                    command_line: &s.command_line,
                    started_secs: s.born_secs?,
                })
            })
            .collect();
        let born = |pid: u32| self.alive.get(&pid).and_then(|s| s.born_secs);
        late_starts(&starts)
            .into_iter()
            .filter(|late| born(late.pid).is_some_and(|b| b < began_secs))
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

#[cfg(test)]
mod tests {
    use super::*;
    use stackscope_event::HowEnded;

    fn gone(history: &mut TreeHistory, pid: u32, how: HowEnded) {
        let now = Timestamp(u64::from(pid) * 1_000_000);
        history.appeared(pid, now);
        history.vanished(pid, now);
        // What the kernel said of it, as `vanished` would have found it.
        if let Some(last) = history.ended.back_mut() {
            last.1.how = how;
        }
        history.forget_old_ends();
    }

    /// Moves at the first read are first sights; the job moved while watched only after it.
    #[test]
    fn frozen_before_means_no_move_after_the_first_read() {
        let mut past = Past::new(1);
        assert!(!past.began.frozen_before(Timestamp(5)), "nothing read yet");
        past.read_at(Timestamp(10));
        past.read_at(Timestamp(20));
        assert!(past.began.frozen_before(Timestamp(10)));
        assert!(!past.began.frozen_before(Timestamp(11)));
    }

    /// Workers that end for days leave the last few hundred behind, and of the older the
    /// last that ended badly, whatever else ended since.
    #[test]
    fn what_is_kept_of_the_processes_that_ended_is_bounded() {
        let mut history = TreeHistory::new(1);
        // Pids no process has: nothing is read of them but that they are not there.
        let first = 4_000_000;
        gone(&mut history, first, HowEnded::Killed(9));
        for n in 1..3_000u32 {
            let how = if n.is_multiple_of(100) {
                HowEnded::Exited(1)
            } else {
                HowEnded::Exited(0)
            };
            gone(&mut history, first + n, how);
        }
        assert!(history.alive.is_empty());
        assert_eq!(history.ended.len(), KEPT_ENDED + 28);
        let ended = history.processes_ended();
        assert_eq!(ended.len(), KEPT_ENDED + 28);
        assert_eq!(ended[0].pid, first, "the kill is still there");
        assert_eq!(ended.last().map(|e| e.pid), Some(first + 2_999));
    }
}
