//! The summary's processes: every one followed, like processes as one group, and those that
//! ended with how.

use serde::{Deserialize, Serialize};
use stackscope_event::{HowEnded, ProcessEnded, RankInfo, Timestamp};

use super::ProcessSummary;
use crate::fold::{Aggregator, RecordingMeta, OTHER_PROCESSES};
use crate::jobs::process_role;

/// A group of like processes (`DataLoader workers (3,100 processes, 2 at a time)`): one entry
/// of `processes`, its pid one past any real pid.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct ProcessGroupSummary {
    /// Its root frame in the folded stacks and the flamegraph.
    pub label: String,
    /// Members, all told.
    pub processes: u64,
    /// Most members alive at once.
    pub at_a_time: u64,
    pub alive: u64,
    pub ended: u64,
}

impl ProcessGroupSummary {
    /// The group as people call it, without its command: `DataLoader workers (3,100
    /// processes, 2 at a time)`.
    pub fn name(&self) -> &str {
        match self.label.find(')') {
            Some(end) => &self.label[..=end],
            None => &self.label,
        }
    }
}

/// A process as a line of text names it: `pid 448`, or the group of like processes a group
/// pid stands for.
pub fn process_name(pid: u32, processes: &[ProcessSummary]) -> String {
    processes
        .iter()
        .find(|p| p.pid == pid)
        .and_then(|p| p.group.as_ref())
        .map_or_else(|| format!("pid {pid}"), |g| g.name().to_owned())
}

impl Aggregator {
    /// Every process seen exiting, in the order they ended; its times as wall clock (the
    /// recording's start plus the offset), else as seconds from the start.
    pub(super) fn processes_ended(&self, meta: &RecordingMeta) -> Vec<ProcessEnded> {
        let start = chrono::DateTime::parse_from_rfc3339(&meta.started_at).ok();
        let when = |t: Timestamp| {
            let secs = t.seconds_since(self.start);
            match start {
                Some(start) => {
                    (start + chrono::Duration::milliseconds((secs * 1e3) as i64)).to_rfc3339()
                }
                None => format!("+{secs:.1} s"),
            }
        };
        let ended_entry = |pid: u32,
                           rank: Option<u32>,
                           command: &str,
                           attached: Option<Timestamp>,
                           exited: Timestamp,
                           how: Option<HowEnded>| {
            (
                exited,
                ProcessEnded {
                    pid,
                    role: process_role(pid, meta.pid, rank, command),
                    started: attached.map_or_else(String::new, when),
                    ended: when(exited),
                    how: how.unwrap_or(HowEnded::Unknown),
                },
            )
        };
        let kept = self.processes.iter().filter_map(|p| {
            let exited = p.exited?;
            Some(ended_entry(
                p.pid,
                p.rank.rank,
                &p.command_line,
                p.attached,
                exited,
                p.how,
            ))
        });
        // Members of a group that ended well are the group's; those that did not are named.
        let remarkable = self.processes.groups.remarkable_ends().map(|e| {
            ended_entry(
                e.pid,
                e.rank.rank,
                &e.command_line,
                e.attached,
                e.exited,
                Some(e.how),
            )
        });
        let mut ended: Vec<(Timestamp, ProcessEnded)> = kept.chain(remarkable).collect();
        ended.sort_by_key(|(at, p)| (*at, p.pid));
        ended.into_iter().map(|(_, p)| p).collect()
    }

    pub(super) fn processes_followed(&self) -> u64 {
        if self.config.process_root {
            let ended_members: u64 = self.processes.groups.iter().map(|g| g.let_go).sum();
            let kept = self.processes.len() as u64 + self.processes.folded().processes;
            (kept + ended_members + self.processes.ended_unseen).max(1)
        } else {
            1
        }
    }

    /// Every process kept apart, then each group as one entry (its live members' samples
    /// with those that ended), by samples; `[other processes]` last.
    pub(super) fn process_summaries(&self) -> Vec<ProcessSummary> {
        let since_start = |t: Timestamp| t.seconds_since(self.start);
        let mut processes: Vec<ProcessSummary> = self
            .processes
            .iter()
            .filter(|p| p.group.is_none())
            .map(|p| ProcessSummary {
                pid: p.pid,
                rank: p.rank,
                command_line: p.command_line.clone(),
                samples: p.samples,
                exited: p.exited.is_some(),
                attached_secs: p.attached.map(since_start),
                exited_secs: p.exited.map(since_start),
                group: None,
            })
            .collect();
        processes.extend(self.processes.groups.iter().map(|g| {
            let live: u64 = self
                .processes
                .iter()
                .filter(|p| p.group == Some(g.pid))
                .map(|p| p.samples)
                .sum();
            // A group of one is the process it has, as it would be apart.
            let alone = g.count.members <= 1;
            ProcessSummary {
                pid: if alone { g.first_pid } else { g.pid },
                rank: g.rank,
                command_line: g.command_line.clone(),
                samples: g.ended_samples + live,
                exited: g.count.alive == 0,
                attached_secs: g.first_attached.map(since_start),
                exited_secs: g
                    .last_exited
                    .filter(|_| g.count.alive == 0)
                    .map(since_start),
                group: (!alone).then(|| ProcessGroupSummary {
                    label: g.label(),
                    processes: g.count.members,
                    at_a_time: g.count.most_at_once,
                    alive: g.count.alive,
                    ended: g.count.ended,
                }),
            }
        }));
        processes.sort_by(|a, b| b.samples.cmp(&a.samples).then(a.pid.cmp(&b.pid)));
        let folded = self.processes.folded();
        if folded.processes > 0 {
            processes.push(ProcessSummary {
                pid: 0,
                rank: RankInfo::default(),
                command_line: OTHER_PROCESSES.to_owned(),
                samples: folded.samples,
                exited: folded.exited == folded.processes,
                attached_secs: None,
                exited_secs: None,
                group: None,
            });
        }
        processes
    }
}
