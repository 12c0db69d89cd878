//! Groups of like processes (`kinds.rs`): which processes of a recording are one, the group's
//! root frame and its counts, and the few ended members worth keeping by name.

use std::collections::{HashMap, VecDeque};

use stackscope_event::{HowEnded, RankInfo, Timestamp};

use super::intern::{FrameId, StackTable};
use super::kinds::{
    group_label, started_by_multiprocessing, GroupWork, Headcount, ProcessKind, GROUP_PIDS_FROM,
};
use super::root_labels::{ranked_root_label, root_label, shorten, ROOT_COMMAND_CHARS};

/// Ended members whose end says something (a signal, a non-zero status, the OOM killer) are
/// kept by name for the summary's `processes_ended`, the most recent this many.
pub const REMARKABLE_ENDS_KEPT: usize = 64;

/// One group of like processes.
#[derive(Debug, Clone)]
pub(crate) struct ProcessGroup {
    /// Its pid in every table that counts by pid: past any real one.
    pub pid: u32,
    /// Its first member's pid: a group of one is shown as that process.
    pub first_pid: u32,
    /// The first member's command line.
    pub command_line: String,
    pub rank: RankInfo,
    pub count: Headcount,
    pub work: GroupWork,
    /// Kept samples of the members let go (the others count in their own entries).
    pub ended_samples: u64,
    /// Members that ended and were let go.
    pub let_go: u64,
    pub first_attached: Option<Timestamp>,
    pub last_exited: Option<Timestamp>,
    root: Option<FrameId>,
}

impl ProcessGroup {
    /// Its root frame's label: a group of one is the process it has, as it would be apart.
    pub fn label(&self) -> String {
        if self.count.members <= 1 {
            return match self.rank.rank {
                Some(rank) => ranked_root_label(self.first_pid, rank, &self.command_line),
                None => root_label(self.first_pid, &self.command_line),
            };
        }
        let command = shorten(self.command_line.trim(), ROOT_COMMAND_CHARS);
        group_label(self.work, self.rank.rank, &self.count, &command)
    }
}

/// A member that ended in a way worth naming.
#[derive(Debug, Clone)]
pub(crate) struct RemarkableEnd {
    pub pid: u32,
    pub command_line: String,
    pub rank: RankInfo,
    pub attached: Option<Timestamp>,
    pub exited: Timestamp,
    pub how: HowEnded,
}

/// Every kind seen: its head (kept apart) and its group, once it has one.
#[derive(Debug, Default)]
pub(crate) struct ProcessGroups {
    /// Keep every process apart (`--processes-apart`).
    apart: bool,
    /// The recorded process: the first attached, never a member.
    target: Option<u32>,
    heads: HashMap<ProcessKind, u32>,
    by_kind: HashMap<ProcessKind, usize>,
    groups: Vec<ProcessGroup>,
    remarkable: VecDeque<RemarkableEnd>,
    /// Remarkable ends let go past [`REMARKABLE_ENDS_KEPT`].
    pub remarkable_dropped: u64,
}

impl ProcessGroups {
    pub fn new(apart: bool) -> ProcessGroups {
        ProcessGroups {
            apart,
            ..ProcessGroups::default()
        }
    }

    /// The group a process attached now joins, if any (its pid); the first process of a
    /// kind is its head and stays apart, as does the recorded process.
    pub fn join(
        &mut self,
        pid: u32,
        command_line: &str,
        rank: RankInfo,
        time: Timestamp,
    ) -> Option<u32> {
        let target = *self.target.get_or_insert(pid);
        if self.apart || command_line.is_empty() {
            return None;
        }
        let kind = ProcessKind::of(command_line, rank.rank);
        if pid == target {
            // The recorded process heads its kind: the workers it forks run its command line.
            self.heads.entry(kind).or_insert(pid);
            return None;
        }
        if !self.heads.contains_key(&kind) && !started_by_multiprocessing(command_line) {
            self.heads.insert(kind, pid);
            return None;
        }
        if self.heads.get(&kind) == Some(&pid) {
            return None;
        }
        let next = self.groups.len();
        let at = *self.by_kind.entry(kind).or_insert(next);
        if at == next {
            self.groups.push(ProcessGroup {
                pid: GROUP_PIDS_FROM + next as u32,
                first_pid: pid,
                command_line: command_line.to_owned(),
                rank,
                count: Headcount::default(),
                work: GroupWork::default(),
                ended_samples: 0,
                let_go: 0,
                first_attached: Some(time),
                last_exited: None,
                root: None,
            });
        }
        let group = &mut self.groups[at];
        group.count.join();
        Some(group.pid)
    }

    /// A member left: ended (`exited`), or exec'd into something else (`None`).
    pub fn leave(&mut self, group: u32, exited: Option<Timestamp>) {
        if let Some(g) = self.get_mut(group) {
            g.count.leave();
            if exited.is_some() {
                g.last_exited = exited;
            }
        }
    }

    /// An ended member let go: its samples are the group's now.
    pub fn absorb_samples(&mut self, group: u32, samples: u64) {
        if let Some(g) = self.get_mut(group) {
            g.ended_samples += samples;
            g.let_go += 1;
        }
    }

    /// Keeps a member's end by name when it says something.
    pub fn ended_remarkably(&mut self, end: RemarkableEnd) {
        let remarkable = match end.how {
            HowEnded::Exited(status) => status != 0,
            HowEnded::Killed(_) | HowEnded::OomKilled(_) => true,
            HowEnded::Unknown => false,
        };
        if !remarkable {
            return;
        }
        if self.remarkable.len() >= REMARKABLE_ENDS_KEPT {
            self.remarkable.pop_front();
            self.remarkable_dropped += 1;
        }
        self.remarkable.push_back(end);
    }

    /// Whether the group's members have been replaced: more of them all told than ever alive
    /// at once (a DataLoader's workers re-created at an epoch). Only then are ended members let
    /// go.
    pub fn churned(&self, group: u32) -> bool {
        self.get(group)
            .is_some_and(|g| g.count.members > g.count.most_at_once)
    }

    /// How many processes a member of `group` stands with at once: its group's most at once, or
    /// 1 for a group of one.
    pub fn at_once(&self, group: u32) -> u64 {
        self.get(group).map_or(1, |g| g.count.most_at_once.max(1))
    }

    /// What a member ran says what the group is.
    pub fn learn_work(&mut self, group: u32, work: GroupWork) {
        if let Some(g) = self.get_mut(group) {
            g.work = g.work.or(work);
        }
    }

    /// The group's root frame, made at its first use and relabelled as its counts change.
    pub fn root(&mut self, group: u32, table: &mut StackTable) -> Option<FrameId> {
        let g = self.get_mut(group)?;
        if let Some(root) = g.root {
            return Some(root);
        }
        let root = table.group_root(&g.label());
        g.root = Some(root);
        Some(root)
    }

    /// Gives every group's root its label as of now.
    pub fn relabel(&self, group: u32, table: &mut StackTable) {
        if let Some(g) = self.get(group) {
            if let Some(root) = g.root {
                table.relabel_root(root, &g.label());
            }
        }
    }

    pub fn get(&self, group: u32) -> Option<&ProcessGroup> {
        let at = group.checked_sub(GROUP_PIDS_FROM)? as usize;
        self.groups.get(at)
    }

    fn get_mut(&mut self, group: u32) -> Option<&mut ProcessGroup> {
        let at = group.checked_sub(GROUP_PIDS_FROM)? as usize;
        self.groups.get_mut(at)
    }

    pub fn iter(&self) -> impl Iterator<Item = &ProcessGroup> {
        self.groups.iter()
    }

    pub fn remarkable_ends(&self) -> impl Iterator<Item = &RemarkableEnd> {
        self.remarkable.iter()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn rank(r: Option<u32>) -> RankInfo {
        RankInfo {
            rank: r,
            ..RankInfo::default()
        }
    }

    #[test]
    fn the_target_and_the_first_of_a_kind_stay_apart_the_rest_are_one() {
        let mut groups = ProcessGroups::new(false);
        let t = Timestamp(1);
        assert_eq!(groups.join(10, "python train.py", rank(None), t), None);
        // Forked workers run the trainer's command line: the trainer is their head.
        let w1 = groups.join(11, "python train.py", rank(None), t);
        assert!(w1.is_some());
        assert_eq!(groups.join(12, "python train.py", rank(None), t), w1);
        // Spawned workers have no head.
        let spawn = "python -c from multiprocessing.spawn import spawn_main; spawn_main(tracker_fd=5) --multiprocessing-fork";
        let s = groups.join(13, spawn, rank(None), t);
        assert!(s.is_some() && s != w1);
        // A rank keeps its rank; its workers are its own group.
        assert_eq!(groups.join(20, "python t.py", rank(Some(0)), t), None);
        assert_eq!(groups.join(21, "python t.py", rank(Some(1)), t), None);
        let r0 = groups.join(22, "python t.py", rank(Some(0)), t);
        let r1 = groups.join(23, "python t.py", rank(Some(1)), t);
        assert!(r0.is_some() && r1.is_some() && r0 != r1);
        let g = groups.get(w1.unwrap_or(0)).map(|g| g.count);
        assert_eq!(g.map(|c| (c.members, c.alive)), Some((2, 2)));
    }

    #[test]
    fn apart_keeps_every_process_apart() {
        let mut groups = ProcessGroups::new(true);
        for pid in 1..5 {
            assert_eq!(
                groups.join(pid, "python t.py", rank(None), Timestamp(1)),
                None
            );
        }
    }

    #[test]
    fn only_remarkable_ends_are_kept_and_only_so_many() {
        let mut groups = ProcessGroups::new(false);
        let end = |pid: u32, how| RemarkableEnd {
            pid,
            command_line: String::new(),
            rank: RankInfo::default(),
            attached: None,
            exited: Timestamp(u64::from(pid)),
            how,
        };
        groups.ended_remarkably(end(1, HowEnded::Exited(0)));
        groups.ended_remarkably(end(2, HowEnded::Unknown));
        for pid in 0..100 {
            groups.ended_remarkably(end(pid, HowEnded::Killed(9)));
        }
        assert_eq!(groups.remarkable_ends().count(), REMARKABLE_ENDS_KEPT);
        assert_eq!(groups.remarkable_dropped, 100 - REMARKABLE_ENDS_KEPT as u64);
        assert_eq!(groups.remarkable_ends().last().map(|e| e.pid), Some(99));
    }
}
