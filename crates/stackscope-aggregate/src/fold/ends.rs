//! The aggregator's side of threads and processes that end: each is folded into what outlives
//! it (its kind of thread, its group of processes: `kinds.rs`) in every table that keeps
//! something of it, and what it alone held is let go, so that memory follows what is alive.

use stackscope_event::{Frame, ProcessEvent, StackSample};

use super::aggregator::Aggregator;
use super::buckets::{ThreadName, TimeBuckets};
use super::kinds::{kind_label, GroupWork};
use super::processes::MemberEnded;
use super::thread_kinds::{Released, ThreadEnded};
use super::threads::{ThreadKey, ThreadStat};

impl Aggregator {
    /// Whose kind of thread a thread of `pid` is: its process group's, or its process's (a
    /// group of one is the process it has, as it would be apart).
    pub(super) fn owner_of(&self, pid: u32) -> u32 {
        if !self.config.process_root {
            return pid;
        }
        self.shared_group_of(pid).unwrap_or(pid)
    }

    /// The group `pid` is a member of, once the group was re-created (its members replaced):
    /// until then each member's threads are its own, with their roles and lanes.
    fn shared_group_of(&self, pid: u32) -> Option<u32> {
        let group = self.processes.group_of(pid)?;
        self.processes.groups.churned(group).then_some(group)
    }

    /// A process attached or ended; a group's member that ended is let go everywhere.
    pub(super) fn process_event(&mut self, event: &ProcessEvent) {
        // Only a member of a kind that was re-created is let go (`ProcessGroups::churned`).
        let member = self.processes.handle(event, &mut self.table);
        if event.kind != stackscope_event::ProcessEventKind::Exited {
            return;
        }
        let threads = self.threads.end_process(event.pid, member.is_some());
        for thread in threads {
            self.relabel_ended(thread);
        }
        if let Some(MemberEnded { pid, group }) = member {
            if let Some(counts) = self.gil_by_process.remove(&pid) {
                self.gil_by_process
                    .entry(group)
                    .or_default()
                    .absorb(&counts);
            }
            self.motion.activity.forget(pid);
        }
    }

    /// A new stack of a group's member says what the group does (`DataLoader workers`).
    pub(super) fn learn_group_work(&mut self, pid: u32, frames: &[Frame]) {
        if !self.config.process_root {
            return;
        }
        let Some(group) = self.processes.group_of(pid) else {
            return;
        };
        let work = GroupWork::of(frames.iter().map(|f| (&*f.function, &*f.file)));
        if work != GroupWork::Workers {
            self.processes.groups.learn_work(group, work);
            self.processes.groups.relabel(group, &mut self.table);
        }
    }

    /// Every so many reads, the threads missing from their process's last reads are folded
    /// into their kinds.
    pub(super) fn end_missing_threads(&mut self) {
        for key in self.threads.ended_threads() {
            if let Some(thread) = self.threads.end_thread(key) {
                self.relabel_ended(thread);
            }
        }
    }

    /// An ended thread's own root shows as its kind from now on: its stacks and its kind's are
    /// one in the folded lines.
    fn relabel_ended(&mut self, thread: ThreadEnded) {
        for root in thread.own_roots.into_iter().flatten() {
            self.table.relabel_root(root, &thread.kind);
        }
        if let Some((lane, (pid, python_thread_id, _))) = thread.own_lane {
            let (into_pid, into_id, _) = thread.kind_key;
            self.buckets.merge_lane(
                lane,
                (pid, python_thread_id),
                (into_pid, into_id),
                &thread.kind,
            );
        }
    }

    /// Threads and processes let go so far, and the entries kept to tell what ends: what a test
    /// of the bound on memory counts.
    pub fn released(&self) -> Released {
        self.threads.ends.released
    }

    /// Entries kept about kinds and ends: kinds of threads, processes whose reads are counted,
    /// ended threads whose late samples are still redirected.
    pub fn end_tables(&self) -> (usize, usize, usize) {
        self.threads.ends.kept()
    }
}

/// Counts a sample in its thread's lane, or its kind's lane for a thread of a kind read as one.
pub(super) fn count_in_lane(
    buckets: &mut TimeBuckets,
    thread: &mut ThreadStat,
    sample: &StackSample,
    name: &str,
) {
    let running = sample.thread.active;
    match thread.in_kind {
        Some(kind) => {
            let unchanged = thread.name_unchanged && thread.lane.is_some();
            let label = if unchanged {
                String::new()
            } else {
                kind_label(thread.owner, name)
            };
            count_under(buckets, thread, sample, kind, &label, unchanged, running);
        }
        None => {
            let key = (sample.pid, sample.thread.python_thread_id, 0);
            let unchanged = thread.name_unchanged;
            count_under(buckets, thread, sample, key, name, unchanged, running);
        }
    }
}

fn count_under(
    buckets: &mut TimeBuckets,
    thread: &mut ThreadStat,
    sample: &StackSample,
    (pid, python_thread_id, _): ThreadKey,
    name: &str,
    unchanged: bool,
    running: bool,
) {
    buckets.count_thread_in(
        &mut thread.lane,
        sample.time,
        pid,
        python_thread_id,
        ThreadName { name, unchanged },
        running,
    );
}
