//! The per-process table for `--subprocesses`: which processes were sampled, their command
//! lines, samples, and when they came and went; and each one's root frame in the flamegraph.
//!
//! DataLoader workers are re-created every epoch and torchrun restarts ranks, so over days the
//! processes seen keep growing. Like processes are one group (`kinds.rs`, `process_groups.rs`):
//! a member's stacks are under the group's root from its first sample, and its entry is let go
//! when it ends. Past [`crate::Limits::max_processes`] the least recently active quarter
//! (exited ones first) is folded into one `[other processes]` entry.

use std::collections::HashMap;

use stackscope_event::{HowEnded, ProcessEvent, ProcessEventKind, RankInfo, Timestamp};

use super::intern::{FrameId, StackTable};
use super::process_groups::{ProcessGroups, RemarkableEnd};
use super::root_labels::{ranked_root_label, root_label, shorten};

/// How much of a command line the table keeps: a bound on memory, far past what people read.
const KEPT_COMMAND_CHARS: usize = 4096;

#[derive(Debug, Clone)]
pub(crate) struct ProcessStat {
    pub pid: u32,
    pub command_line: String,
    /// Its rank in a distributed job, when a launcher started it.
    pub rank: RankInfo,
    /// Kept stack samples.
    pub samples: u64,
    pub attached: Option<Timestamp>,
    pub exited: Option<Timestamp>,
    /// What ended it, where the sampler could tell.
    pub how: Option<HowEnded>,
    /// The root frame of its stacks, fixed at its first sample so that all its stacks share
    /// one root even if its command line is learnt later; cleared when it execs.
    root: Option<FrameId>,
    /// The table's clock at its latest event or sample: what eviction orders by.
    last_active: u64,
    /// The group of like processes it belongs to (its pid), if any.
    pub group: Option<u32>,
}

/// A process that ended and was let go: its group's, with what the tables that count by pid
/// must move there.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) struct MemberEnded {
    pub pid: u32,
    pub group: u32,
}

/// Processes folded out of the table.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub(crate) struct FoldedProcesses {
    pub processes: u64,
    /// Of those, the ones seen exiting.
    pub exited: u64,
    pub samples: u64,
}

#[derive(Debug)]
pub(crate) struct ProcessTable {
    max: usize,
    processes: HashMap<u32, ProcessStat>,
    clock: u64,
    folded: FoldedProcesses,
    pub groups: ProcessGroups,
    /// Processes that ended before anything of them was read, let go.
    pub ended_unseen: u64,
}

impl ProcessTable {
    /// A table of at most `max` processes; `apart` keeps like processes apart.
    pub fn new(max: usize, apart: bool) -> ProcessTable {
        ProcessTable {
            max: max.max(1),
            processes: HashMap::new(),
            clock: 0,
            folded: FoldedProcesses::default(),
            groups: ProcessGroups::new(apart),
            ended_unseen: 0,
        }
    }

    /// Records the sampler attaching to or losing a process; a member of a group that ended
    /// is let go, and said.
    pub fn handle(&mut self, event: &ProcessEvent, table: &mut StackTable) -> Option<MemberEnded> {
        if event.kind == ProcessEventKind::Exited && !self.processes.contains_key(&event.pid) {
            // Its end was told already (and it was let go), or it was never seen.
            return None;
        }
        let changed = self.record(event);
        match event.kind {
            ProcessEventKind::Attached => {
                self.place_in_group(event.pid, event.time, changed, table);
                None
            }
            ProcessEventKind::Exited => self.let_go(event.pid, table),
        }
    }

    /// Puts a process that attached (again) in the group of its kind, or apart.
    fn place_in_group(&mut self, pid: u32, time: Timestamp, changed: bool, table: &mut StackTable) {
        let Some(process) = self.processes.get(&pid) else {
            return;
        };
        let (command_line, rank, was) = (process.command_line.clone(), process.rank, process.group);
        if was.is_some() && !changed {
            return;
        }
        let now = self.groups.join(pid, &command_line, rank, time);
        if let Some(group) = was {
            // It exec'd into another kind.
            self.groups.leave(group, None);
            self.groups.relabel(group, table);
        }
        if let Some(process) = self.processes.get_mut(&pid) {
            process.group = now;
            if now.is_some() {
                process.root = None;
            }
        }
        if let Some(group) = now {
            self.groups.relabel(group, table);
        }
    }

    /// A member that ended leaves its group, its samples counted there, and its entry goes.
    /// A process that ended before anything of it was read (no command line, no sample: a
    /// worker gone before the sampler saw it) goes too, counted.
    fn let_go(&mut self, pid: u32, table: &mut StackTable) -> Option<MemberEnded> {
        let process = self.processes.get(&pid)?;
        if process.group.is_none() && process.samples == 0 && process.command_line.is_empty() {
            self.processes.remove(&pid);
            self.ended_unseen += 1;
            return None;
        }
        let group = process.group?;
        self.groups.leave(group, process.exited);
        self.groups.relabel(group, table);
        // Until its kind is re-created (more members than ever alive at once), a member that
        // ends stays, as it would apart: two workers that end with the job are two workers.
        if !self.groups.churned(group) {
            return None;
        }
        let process = self.processes.remove(&pid)?;
        self.groups.absorb_samples(group, process.samples);
        if let Some(exited) = process.exited {
            let end = RemarkableEnd {
                pid,
                command_line: process.command_line,
                rank: process.rank,
                attached: process.attached,
                exited,
                how: process.how.unwrap_or(HowEnded::Unknown),
            };
            self.groups.ended_remarkably(end);
        }
        Some(MemberEnded { pid, group })
    }

    /// Updates a process's entry with an event; whether it runs something else now.
    fn record(&mut self, event: &ProcessEvent) -> bool {
        let mut changed = false;
        let command_line = shorten(&event.command_line, KEPT_COMMAND_CHARS);
        let process = self.entry(event.pid);
        match event.kind {
            ProcessEventKind::Attached => {
                // Attached again under the same pid: it exec'd, or the pid was reused. Either
                // way it runs something else now, and its stacks deserve a root saying so.
                if !command_line.is_empty() && process.command_line != command_line {
                    process.command_line = command_line;
                    process.root = None;
                    changed = true;
                }
                if !event.rank.is_empty() && process.rank != event.rank {
                    process.rank = event.rank;
                    process.root = None;
                    changed = true;
                }
                process.attached = Some(event.time);
                process.exited = None;
                process.how = None;
            }
            ProcessEventKind::Exited => {
                if process.command_line.is_empty() {
                    process.command_line = command_line;
                }
                process.exited = Some(event.time);
                process.how = event.how;
            }
        }
        changed
    }

    /// Every end known with how it came: processes kept apart, and the group members whose
    /// end was worth keeping (a signal, a non-zero status, the OOM killer).
    pub fn ends(&self) -> impl Iterator<Item = (u32, Timestamp, HowEnded)> + '_ {
        let kept = self
            .processes
            .values()
            .filter_map(|p| Some((p.pid, p.exited?, p.how?)));
        let members = self
            .groups
            .remarkable_ends()
            .map(|e| (e.pid, e.exited, e.how));
        kept.chain(members)
    }

    /// How `pid` counts among the processes of the job: as its group of like processes (a
    /// group's own pid or a member's), with the most members alive at once, or as itself.
    pub fn counted_as(&self, pid: u32) -> (u32, u64) {
        let group = if super::kinds::is_group_pid(pid) {
            Some(pid)
        } else {
            self.group_of(pid)
        };
        match group {
            Some(group) => (group, self.groups.at_once(group)),
            None => (pid, 1),
        }
    }

    /// The group `pid` is a member of, if any.
    pub fn group_of(&self, pid: u32) -> Option<u32> {
        self.processes.get(&pid)?.group
    }

    /// Notes a stack sample of `pid`; `kept` when it was counted (not skipped as idle).
    pub fn sample(&mut self, pid: u32, kept: bool) {
        let process = self.entry(pid);
        if kept {
            process.samples += 1;
        }
    }

    /// The root frame of `pid`'s stacks: `process PID COMMAND`, or its group's.
    pub fn root(&mut self, pid: u32, table: &mut StackTable) -> FrameId {
        let process = self.entry(pid);
        if let Some(root) = process.root {
            return root;
        }
        if let Some(group) = process.group {
            if let Some(root) = self.groups.root(group, table) {
                if let Some(process) = self.processes.get_mut(&pid) {
                    process.root = Some(root);
                }
                return root;
            }
        }
        let process = self.entry(pid);
        let label = match process.rank.rank {
            Some(rank) => ranked_root_label(pid, rank, &process.command_line),
            None => root_label(pid, &process.command_line),
        };
        let root = table.process_root(&label);
        process.root = Some(root);
        root
    }

    fn entry(&mut self, pid: u32) -> &mut ProcessStat {
        self.clock += 1;
        if !self.processes.contains_key(&pid) && self.processes.len() >= self.max {
            self.evict();
        }
        let clock = self.clock;
        let process = self.processes.entry(pid).or_insert_with(|| ProcessStat {
            pid,
            command_line: String::new(),
            rank: RankInfo::default(),
            samples: 0,
            attached: None,
            exited: None,
            how: None,
            root: None,
            last_active: clock,
            group: None,
        });
        process.last_active = clock;
        process
    }

    /// Folds a quarter of the table (at least one): exited processes first, then the least
    /// recently active.
    fn evict(&mut self) {
        let count = (self.processes.len() / 4).max(1);
        let mut by_age: Vec<((bool, u64), u32)> = self
            .processes
            .iter()
            .map(|(&pid, p)| ((p.exited.is_none(), p.last_active), pid))
            .collect();
        by_age.select_nth_unstable(count - 1);
        for (_, pid) in &by_age[..count] {
            if let Some(process) = self.processes.remove(pid) {
                if let (Some(group), None) = (process.group, process.exited) {
                    self.groups.leave(group, None);
                }
                self.folded.processes += 1;
                self.folded.exited += u64::from(process.exited.is_some());
                self.folded.samples += process.samples;
            }
        }
    }

    pub fn iter(&self) -> impl Iterator<Item = &ProcessStat> {
        self.processes.values()
    }

    pub fn len(&self) -> usize {
        self.processes.len()
    }

    pub fn folded(&self) -> FoldedProcesses {
        self.folded
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn event(pid: u32, command_line: &str, kind: ProcessEventKind) -> ProcessEvent {
        ProcessEvent {
            time: Timestamp(u64::from(pid)),
            pid,
            command_line: command_line.to_owned(),
            kind,
            rank: Default::default(),
            how: None,
        }
    }

    #[test]
    fn exec_gives_a_new_root() {
        let mut table = ProcessTable::new(10, false);
        let mut stacks = StackTable::default();
        table.handle(
            &event(5, "python a.py", ProcessEventKind::Attached),
            &mut stacks,
        );
        let a = table.root(5, &mut stacks);
        assert_eq!(a, table.root(5, &mut stacks));
        table.handle(
            &event(5, "python b.py", ProcessEventKind::Attached),
            &mut stacks,
        );
        let b = table.root(5, &mut stacks);
        assert_ne!(a, b);
        assert_eq!(
            stacks.frame(b).map(|f| f.label.as_str()),
            Some("process 5 python b.py")
        );
    }

    #[test]
    fn exited_processes_are_folded_first() {
        let mut table = ProcessTable::new(4, true);
        let mut stacks = StackTable::default();
        for pid in 1..=4 {
            table.handle(
                &event(pid, "worker", ProcessEventKind::Attached),
                &mut stacks,
            );
            table.sample(pid, true);
        }
        table.handle(&event(3, "", ProcessEventKind::Exited), &mut stacks);
        table.handle(&event(9, "new", ProcessEventKind::Attached), &mut stacks);
        let mut pids: Vec<u32> = table.iter().map(|p| p.pid).collect();
        pids.sort_unstable();
        assert_eq!(pids, vec![1, 2, 4, 9]);
        assert_eq!(
            table.folded(),
            FoldedProcesses {
                processes: 1,
                exited: 1,
                samples: 1
            }
        );
    }
}
