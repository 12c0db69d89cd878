//! Threads that ended, folded into their kind (`kinds.rs`): how the thread table tells that a
//! thread ended, where its counts go and what it lets go of.
//!
//! The sampler reads every thread of a process at each read, running or not, so a thread
//! missing from [`MISSED_READS_TO_END`] reads of its process in a row, for [`GONE_NANOS`] at
//! least, has ended (one missing read may be a torn one; a reader that skips a thread now and
//! then is not taken for its end). A thread of a process that ended, if the process was a group's
//! member, ends with it. An ended thread's counts (samples, activity, GIL, where it ran) are
//! added to its kind's entry, one per kind and owner (a process, or a process group), and its
//! own entry is let go: its kind's entry outlives it.

use std::collections::VecDeque;

use foldhash::HashMap;

use super::intern::FrameId;
use super::kinds::{is_group_pid, kind_label, thread_kind, GROUP_THREADS_FROM};
use super::threads::{ThreadKey, ThreadStat, ThreadTable};

/// The name shown for a thread whose name is not read yet, as its kind sees it (`thread N`).
const UNNAMED: &str = "thread 0";

/// Reads of its process a thread must be missing from to have ended.
pub const MISSED_READS_TO_END: u64 = 3;
/// And for how long, by its process's reads' clock.
pub const GONE_NANOS: u64 = 1_000_000_000;
/// Reads between two looks for threads that ended: a look walks the whole table.
const READS_BETWEEN_LOOKS: u64 = 64;
/// Ended threads whose late samples (held for their GPU state) still find their kind's entry.
const MOVES_REMEMBERED: usize = 4096;

/// A kind of thread of one owner.
#[derive(Debug, Clone, Default)]
struct KindState {
    /// One of them ended: those that start now are the kind's from their first sample.
    churned: bool,
    /// The kind's entry in the thread table, once it has one.
    group: Option<ThreadKey>,
}

/// What the thread table keeps to tell which threads ended and where they went.
#[derive(Debug, Default)]
pub(crate) struct ThreadEnds {
    /// By pid, the process's reads so far and the time of its latest; gone with the process.
    reads: HashMap<u32, (u64, u64)>,
    reads_since_look: u64,
    kinds: HashMap<(u32, String), KindState>,
    next_group: u64,
    moved: HashMap<ThreadKey, ThreadKey>,
    moved_order: VecDeque<ThreadKey>,
    /// By kind's entry: how many of its threads ended, and the most seen alive at once.
    heads: HashMap<ThreadKey, PoolHeads>,
    /// `--threads-apart`: a process's threads are never read as their kind.
    pub(super) apart: bool,
    /// Threads and processes let go so far.
    pub released: Released,
}

/// How many threads a kind read as one had: those that ended into it, and the most of those
/// read as it that were alive at one look.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct PoolHeads {
    pub ended: u64,
    pub most_at_once: u64,
}

/// What ending threads and processes let go of, as counts: what a test of the bound reads.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct Released {
    pub threads: u64,
    pub processes: u64,
}

/// A thread let go: what the other tables must do about it.
#[derive(Debug, Clone)]
pub(crate) struct ThreadEnded {
    /// Its own roots (by name, and the one it had before its name was read), to be relabelled
    /// as its kind.
    pub own_roots: [Option<FrameId>; 2],
    /// Its own lane and the key it had there, to be merged into its kind's lane.
    pub own_lane: Option<(u32, ThreadKey)>,
    /// Its kind's entry, whose lane it joins.
    pub kind_key: ThreadKey,
    /// Its kind's label (`thread pool worker`, `kinds::kind_label`), which its root takes.
    pub kind: String,
}

impl ThreadEnds {
    /// The process's reads so far and the time of its latest.
    pub fn reads_of(&self, pid: u32) -> (u64, u64) {
        self.reads.get(&pid).copied().unwrap_or((0, 0))
    }

    /// The kind's entry a thread that starts now belongs to from its first sample: always for a
    /// process group's threads, else once its kind churned.
    pub fn starts_in_kind(&mut self, owner: u32, name: &str) -> Option<ThreadKey> {
        let kind = thread_kind(name);
        if is_group_pid(owner) {
            return Some(self.group_of(owner, kind));
        }
        if self.apart {
            return None;
        }
        let churned = self
            .kinds
            .get(&(owner, kind.clone()))
            .is_some_and(|k| k.churned);
        churned.then(|| self.group_of(owner, kind))
    }

    /// The key of a kind's entry, made on first use.
    fn group_of(&mut self, owner: u32, kind: String) -> ThreadKey {
        let next = &mut self.next_group;
        *self
            .kinds
            .entry((owner, kind))
            .or_default()
            .group
            .get_or_insert_with(|| {
                *next += 1;
                (owner, GROUP_THREADS_FROM + *next, 0)
            })
    }

    /// Where an ended thread's late samples go.
    pub fn moved_to(&self, key: &ThreadKey) -> Option<ThreadKey> {
        self.moved.get(key).copied()
    }

    fn remember_move(&mut self, from: ThreadKey, to: ThreadKey) {
        if self.moved_order.len() >= MOVES_REMEMBERED {
            if let Some(old) = self.moved_order.pop_front() {
                self.moved.remove(&old);
            }
        }
        self.moved.insert(from, to);
        self.moved_order.push_back(from);
    }

    /// Entries kept now: kinds, processes read, moves remembered (for the test of the bound).
    pub fn kept(&self) -> (usize, usize, usize) {
        (self.kinds.len(), self.reads.len(), self.moved.len())
    }
}

/// Whether a thread table entry is a kind's, not one thread's.
pub(crate) fn is_kind_entry(key: &ThreadKey) -> bool {
    key.1 >= GROUP_THREADS_FROM
}

impl ThreadTable {
    /// A read of `pid` at `time` (ns) completed with the samples of `threads`.
    pub fn note_read(&mut self, pid: u32, time: u64, threads: impl Iterator<Item = ThreadKey>) {
        let read = {
            let (n, latest) = self.ends.reads.entry(pid).or_default();
            *n += 1;
            *latest = (*latest).max(time);
            (*n, *latest)
        };
        self.ends.reads_since_look += 1;
        for key in threads {
            if let Some(thread) = self.threads.get_mut(&key) {
                thread.read_seq = read;
            }
        }
    }

    /// Who held the GIL, as the waiters count it: the holder's kind when it is a thread of a
    /// kind read as one (or one that ended), else itself.
    pub fn as_holder(&self, key: ThreadKey) -> ThreadKey {
        match self.threads.get(&key) {
            Some(thread) => thread.in_kind.unwrap_or(key),
            None => self.ends.moved_to(&key).unwrap_or(key),
        }
    }

    /// Every so many reads, the threads that have not been in their process's last reads.
    pub fn ended_threads(&mut self) -> Vec<ThreadKey> {
        if self.ends.reads_since_look < READS_BETWEEN_LOOKS {
            return Vec::new();
        }
        self.ends.reads_since_look = 0;
        self.count_alive_in_kinds();
        let reads = &self.ends.reads;
        let apart = self.ends.apart;
        self.threads
            .iter()
            .filter(|(key, t)| {
                let (seen, seen_at) = t.read_seq;
                !is_kind_entry(key)
                    && (!apart || is_group_pid(t.owner))
                    && reads.get(&t.pid).is_some_and(|&(n, latest)| {
                        n.saturating_sub(seen) >= MISSED_READS_TO_END
                            && latest.saturating_sub(seen_at) >= GONE_NANOS
                    })
            })
            .map(|(&key, _)| key)
            .collect()
    }

    /// Threads alive now in each kind's entry (in their process's latest read), the most so
    /// far kept.
    fn count_alive_in_kinds(&mut self) {
        let mut alive: HashMap<ThreadKey, u64> = HashMap::default();
        for (key, t) in &self.threads {
            if let Some(kind) = t.in_kind.filter(|_| self.alive_now(key, t)) {
                *alive.entry(kind).or_default() += 1;
            }
        }
        for (kind, n) in alive {
            let heads = self.ends.heads.entry(kind).or_default();
            heads.most_at_once = heads.most_at_once.max(n);
        }
    }

    /// Whether a thread (not a kind's entry) was in its process's latest read.
    fn alive_now(&self, key: &ThreadKey, thread: &ThreadStat) -> bool {
        let latest = self.ends.reads.get(&thread.pid).map(|&(n, _)| n);
        !is_kind_entry(key) && latest == Some(thread.read_seq.0)
    }

    /// A kind's threads: (all it had, the most alive at once), counting those alive now.
    pub fn pool_heads(&self, kind: ThreadKey) -> (u64, u64) {
        let (mut members, mut alive) = (0, 0);
        for (key, t) in &self.threads {
            if t.in_kind == Some(kind) && !is_kind_entry(key) {
                members += 1;
                alive += u64::from(self.alive_now(key, t));
            }
        }
        let heads = self.ends.heads.get(&kind).copied().unwrap_or_default();
        (heads.ended + members, heads.most_at_once.max(alive).max(1))
    }

    /// Lets an ended thread go: its counts go to its kind's entry, which later samples of it
    /// find too.
    pub fn end_thread(&mut self, key: ThreadKey) -> Option<ThreadEnded> {
        let thread = self.threads.remove(&key)?;
        let kind = thread_kind(&thread.name);
        self.ends
            .kinds
            .entry((thread.owner, kind.clone()))
            .or_default()
            .churned = true;
        if thread.unnamed_root.is_some() || thread.named_root.is_some() {
            // It was read before its name was: threads not named yet churn too, and those that
            // follow share one root until their names are read.
            self.ends
                .kinds
                .entry((thread.owner, thread_kind(UNNAMED)))
                .or_default()
                .churned = true;
        }
        let group = self.ends.group_of(thread.owner, kind);
        self.ends.heads.entry(group).or_default().ended += 1;
        self.ends.remember_move(key, group);
        self.ends.released.threads += 1;
        let own = thread.in_kind.is_none();
        let own_roots = [thread.root, thread.named_root].map(|r| r.filter(|_| own));
        let own_lane = thread.lane.filter(|_| own).map(|lane| (lane, key));
        let label = kind_label(thread.owner, &thread.name);
        let entry = self
            .threads
            .entry(group)
            .or_insert_with(|| kind_entry(group, &label, &thread));
        absorb(entry, thread);
        Some(ThreadEnded {
            own_roots,
            own_lane,
            kind_key: group,
            kind: label,
        })
    }

    /// A process ended: its threads end with it when it was a group's member (`into`); a
    /// process kept apart keeps its threads by name, and only its count of reads goes.
    pub fn end_process(&mut self, pid: u32, member: bool) -> Vec<ThreadEnded> {
        self.ends.reads.remove(&pid);
        if !member {
            return Vec::new();
        }
        self.ends.released.processes += 1;
        let keys: Vec<ThreadKey> = self
            .threads
            .keys()
            .filter(|k| k.0 == pid && !is_kind_entry(k))
            .copied()
            .collect();
        keys.into_iter()
            .filter_map(|k| self.end_thread(k))
            .collect()
    }
}

/// A kind's entry, made when its first thread ends.
fn kind_entry(key: ThreadKey, kind: &str, first: &ThreadStat) -> ThreadStat {
    let mut entry = first.clone();
    entry.pid = key.0;
    entry.python_thread_id = key.1;
    entry.os_thread_id = None;
    kind.clone_into(&mut entry.name);
    entry.samples = 0;
    entry.unnamed_root = None;
    entry.named_root = None;
    entry.named = true;
    entry.name_unchanged = false;
    entry.root = None;
    entry.lane = None;
    entry.activity = Default::default();
    entry.gil = Default::default();
    entry.runs_at = Default::default();
    entry.owner = key.0;
    entry.in_kind = Some(key);
    entry
}

/// Adds an ended thread's counts to its kind's entry.
fn absorb(entry: &mut ThreadStat, thread: ThreadStat) {
    entry.samples += thread.samples;
    entry.activity.absorb(&thread.activity);
    entry.gil.absorb(&thread.gil);
    entry.runs_at.absorb(&thread.runs_at);
    entry.touch(thread.last_seen());
    if thread.last_frames.is_some() {
        entry.last_frames = thread.last_frames;
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use stackscope_event::ThreadInfo;
    use std::sync::Arc;

    fn info(id: u64, name: &str) -> ThreadInfo {
        ThreadInfo {
            os_thread_id: Some(id + 1000),
            python_thread_id: id,
            name: Some(Arc::from(name)),
            active: true,
            owns_gil: true,
        }
    }

    /// Reads of process 1, 100 ms apart: thread 0 always, and the threads named in `others`.
    fn read(table: &mut ThreadTable, others: &[u64]) {
        let mut keys = vec![];
        for &id in std::iter::once(&0).chain(others) {
            let name = if id == 0 {
                "MainThread".to_owned()
            } else {
                format!("Thread-{id} (worker)")
            };
            let i = info(id, &name);
            let t = table.observe(1, 1, &i, &name);
            t.samples += 1;
            keys.push((1, id, id + 1000));
        }
        let time = (table.ends.reads_of(1).0 + 1) * 100_000_000;
        table.note_read(1, time, keys.into_iter());
    }

    #[test]
    fn a_thread_missing_from_its_process_reads_ends_into_its_kind_and_is_let_go() {
        let mut table = ThreadTable::new(10_000);
        let mut ended = 0;
        // 200 request threads, each alive for 10 reads, 2 at a time.
        for id in 1..=200u64 {
            for _ in 0..10 {
                read(&mut table, &[id, id + 1000]);
                for key in table.ended_threads() {
                    ended += u64::from(table.end_thread(key).is_some());
                }
            }
        }
        // What is kept: the main thread, the kind's entry, and the few not yet seen ending.
        assert!(table.len() <= 2 + 2 * 64 / 10 + 4, "{} kept", table.len());
        assert_eq!(table.ends.released.threads, ended);
        let kind = table
            .iter()
            .find(|t| t.name == "thread pool worker")
            .map(|t| t.samples);
        let alive: u64 = table
            .iter()
            .filter(|t| t.name.starts_with("Thread-"))
            .map(|t| t.samples)
            .sum();
        assert_eq!(kind.unwrap_or(0) + alive, 200 * 10 * 2, "no sample lost");
        // Threads that start after the kind churned are the kind's from their first sample.
        let late = table.iter().find(|t| t.python_thread_id == 200);
        assert!(late.is_some_and(|t| t.in_kind.is_some()));
        let (kinds, reads, _) = table.ends.kept();
        assert!(kinds <= 2 && reads == 1, "{kinds} kinds, {reads} processes");
        // The pool had all 400 threads, 2 alive at a time.
        let late = late.and_then(|t| t.in_kind).expect("the pool");
        assert_eq!(table.pool_heads(late), (400, 2));
    }

    #[test]
    fn a_thread_read_each_time_never_ends() {
        let mut table = ThreadTable::new(100);
        for _ in 0..1000 {
            read(&mut table, &[7]);
            assert!(table.ended_threads().is_empty());
        }
    }

    #[test]
    fn a_thread_read_now_and_then_does_not_end() {
        let mut table = ThreadTable::new(100);
        for i in 0..1000 {
            let others: &[u64] = if i % 5 == 0 { &[7] } else { &[] };
            read(&mut table, others);
            assert!(table.ended_threads().is_empty());
        }
    }

    #[test]
    fn a_member_process_ending_lets_its_threads_go_and_a_kept_one_keeps_them() {
        let mut table = ThreadTable::new(100);
        let gpid = super::super::kinds::GROUP_PIDS_FROM;
        for pid in [5u32, 6] {
            let i = info(1, "MainThread");
            table.observe(pid, gpid, &i, "MainThread").samples += 3;
            table.note_read(pid, 1, std::iter::once((pid, 1, 1001)));
        }
        assert_eq!(table.end_process(5, true).len(), 1);
        assert_eq!(table.end_process(6, true).len(), 1);
        let kept: Vec<&ThreadStat> = table.iter().collect();
        assert_eq!(kept.len(), 1, "one entry for the group's main threads");
        assert_eq!((kept[0].pid, kept[0].samples), (gpid, 6));
        assert_eq!(table.ends.released.processes, 2);
        let i = info(1, "MainThread");
        table.observe(9, 9, &i, "MainThread");
        assert!(table.end_process(9, false).is_empty());
        assert_eq!(table.len(), 2);
    }
}
