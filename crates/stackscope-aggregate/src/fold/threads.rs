//! The per-thread table: each thread's name, ids and kept samples, bounded under thread churn.
//!
//! A target that starts and ends threads all the time (a thread per request, a pool that
//! replaces its workers) would grow a table of every thread ever seen without bound. Past
//! [`crate::Limits::max_threads`], the least recently seen quarter is folded into one
//! `[other threads]` entry: threads that ended long ago, not the ones working now. Names are no
//! help as a key: churning threads are often named `Thread-1234 (worker)`.

use std::sync::Arc;

use foldhash::HashMap;

use stackscope_event::{Frames, ThreadInfo};

use super::activity::Activity;
use super::intern::FrameId;
use super::intern::StackId;
use super::thread_kinds::ThreadEnds;
use crate::gil::{GilCounts, RunsAt};

#[derive(Debug, Clone)]
pub(crate) struct ThreadStat {
    pub pid: u32,
    pub name: String,
    pub os_thread_id: Option<u64>,
    pub python_thread_id: u64,
    pub samples: u64,
    /// The root its samples were put under while its name was not known, renamed once it is;
    /// then `named_root`.
    pub unnamed_root: Option<FrameId>,
    pub named_root: Option<FrameId>,
    /// Whether its name has been read.
    pub named: bool,
    /// The table's clock at the thread's latest sample: what eviction orders by.
    last_seen: u64,
    /// The shared name of its latest sample: a sample with the very same one (the sampler
    /// hands on one `Arc` per name) needs no comparison of names.
    name_seen: Option<Arc<str>>,
    /// Whether the latest sample came with that same shared name.
    pub name_unchanged: bool,
    /// Where its samples went last, good while the name is unchanged: its root in the stack
    /// table (None past the cap on roots, counted at each sample), and its time lane.
    pub root: Option<FrameId>,
    pub lane: Option<u32>,
    /// What it did while the GPU idled and while it was busy, for roles and the verdict.
    pub activity: Activity,
    /// Its latest stack, to tell whether it moved.
    pub last_frames: Option<Frames>,
    /// The very frames of its latest sample and whether they are a spin wait: a thread that
    /// stays where it is is not read frame by frame again.
    pub spin_wait: Option<(Frames, bool)>,
    /// What it did with the GIL at each of its samples (`gil/`).
    pub gil: GilCounts,
    /// Where it runs, for whether a wait is one for the GIL.
    pub runs_at: RunsAt<StackId>,
    /// Its process's count of reads at its latest sample, and that read's time (ns): a thread
    /// missing from its process's reads ended (`thread_kinds.rs`).
    pub(super) read_seq: (u64, u64),
    /// Whose kind of thread it is: its process's pid, or its process group's.
    pub(super) owner: u32,
    /// Its kind's entry, when its samples go to its kind's root and lane (its kind had
    /// churned when it started, or its process is a group's member).
    pub in_kind: Option<ThreadKey>,
}

impl ThreadStat {
    /// The table's clock at its latest sample.
    pub(super) fn last_seen(&self) -> u64 {
        self.last_seen
    }

    /// Seen at `clock` (a kind's entry, when a thread that ended is added to it).
    pub(super) fn touch(&mut self, clock: u64) {
        self.last_seen = self.last_seen.max(clock);
    }
}

/// Threads folded out of the table.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub(crate) struct FoldedThreads {
    pub threads: u64,
    pub samples: u64,
}

/// A thread: its process, Python thread id and OS thread id (0 when unknown).
pub(crate) type ThreadKey = (u32, u64, u64);

/// The key of the thread a sample was taken from.
pub(crate) fn thread_key(pid: u32, info: &ThreadInfo) -> ThreadKey {
    (pid, info.python_thread_id, info.os_thread_id.unwrap_or(0))
}

#[derive(Debug)]
pub(crate) struct ThreadTable {
    max: usize,
    /// By (pid, Python thread id, OS thread id): a Python thread id is only unique within its
    /// process, and the interpreter hands a finished thread's id to the next thread it starts
    /// (the OS thread id tells them apart; 0 when unknown).
    pub(super) threads: HashMap<ThreadKey, ThreadStat>,
    /// Counts samples seen; a logical clock, so eviction does not depend on event times.
    clock: u64,
    folded: FoldedThreads,
    /// Kinds of threads, what ended and where it went (`thread_kinds.rs`).
    pub(super) ends: ThreadEnds,
}

impl ThreadTable {
    pub fn new(max: usize) -> ThreadTable {
        ThreadTable {
            max: max.max(1),
            threads: HashMap::default(),
            clock: 0,
            folded: FoldedThreads::default(),
            ends: ThreadEnds::default(),
        }
    }

    /// Keep every thread under its own name, never read as its kind (`--threads-apart`);
    /// threads of a process group stay its kind's.
    pub fn keep_threads_apart(&mut self) {
        self.ends.apart = true;
    }

    /// The entry of the thread a sample was taken from, created (evicting when full) and
    /// updated with its latest name and OS id. `owner` is whose kind of thread it is: its
    /// process's pid or its process group's.
    pub fn observe(
        &mut self,
        pid: u32,
        owner: u32,
        info: &ThreadInfo,
        name: &str,
    ) -> &mut ThreadStat {
        self.clock += 1;
        let key = thread_key(pid, info);
        if self.threads.len() >= self.max && !self.threads.contains_key(&key) {
            self.evict();
        }
        let clock = self.clock;
        let ends = &mut self.ends;
        let thread = self.threads.entry(key).or_insert_with(|| ThreadStat {
            pid,
            name: String::new(),
            os_thread_id: None,
            python_thread_id: info.python_thread_id,
            samples: 0,
            unnamed_root: None,
            named_root: None,
            named: false,
            last_seen: clock,
            name_seen: None,
            name_unchanged: false,
            root: None,
            lane: None,
            activity: Activity::default(),
            last_frames: None,
            spin_wait: None,
            gil: GilCounts::default(),
            runs_at: RunsAt::default(),
            read_seq: ends.reads_of(pid),
            owner,
            in_kind: ends.starts_in_kind(owner, name),
        });
        if !thread.named && info.name.is_some() {
            // Named now: its kind is its name's, not that of threads not named yet.
            thread.in_kind = ends.starts_in_kind(owner, name);
        }
        thread.named |= info.name.is_some();
        thread.last_seen = clock;
        thread.name_unchanged = match (&info.name, &thread.name_seen) {
            (Some(now), Some(seen)) => Arc::ptr_eq(now, seen),
            _ => false,
        };
        if !thread.name_unchanged {
            // A thread can be renamed after it starts; the latest name is the one people
            // know. A sample whose name could not be read does not take a known name away.
            if (info.name.is_some() || !thread.named) && thread.name != name {
                name.clone_into(&mut thread.name);
            }
            thread.name_seen.clone_from(&info.name);
        }
        if info.os_thread_id.is_some() {
            thread.os_thread_id = info.os_thread_id;
        }
        thread
    }

    /// Folds the least recently seen quarter of the table (at least one) into the folded
    /// entry. A quarter at a time keeps the cost per new thread constant on average: a sort
    /// of the table once every `max / 4` new threads.
    fn evict(&mut self) {
        let count = (self.threads.len() / 4).max(1);
        let mut by_age: Vec<(u64, ThreadKey)> = self
            .threads
            .iter()
            .map(|(&key, stat)| (stat.last_seen, key))
            .collect();
        by_age.select_nth_unstable(count - 1);
        for (_, key) in &by_age[..count] {
            if let Some(stat) = self.threads.remove(key) {
                self.folded.threads += 1;
                self.folded.samples += stat.samples;
            }
        }
    }

    /// A thread's entry, if it is still in the table; for a thread that ended, its kind's
    /// (samples held for their GPU state arrive after the end).
    pub fn get_mut(&mut self, key: &ThreadKey) -> Option<&mut ThreadStat> {
        let key = if self.threads.contains_key(key) {
            *key
        } else {
            self.ends.moved_to(key)?
        };
        self.threads.get_mut(&key)
    }

    pub fn iter(&self) -> impl Iterator<Item = &ThreadStat> {
        self.threads.values()
    }

    pub fn len(&self) -> usize {
        self.threads.len()
    }

    pub fn folded(&self) -> FoldedThreads {
        self.folded
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn info(id: u64) -> ThreadInfo {
        ThreadInfo {
            os_thread_id: Some(id + 1000),
            python_thread_id: id,
            name: None,
            active: true,
            owns_gil: true,
        }
    }

    #[test]
    fn least_recently_seen_threads_are_folded() {
        let mut table = ThreadTable::new(8);
        // Thread 0 stays busy while threads 1.. come and go.
        for id in 1..=100u64 {
            table.observe(1, 1, &info(0), "main").samples += 1;
            table
                .observe(1, 1, &info(id), &format!("Thread-{id}"))
                .samples += 1;
            assert!(table.len() <= 8);
        }
        let main = table.iter().find(|t| t.python_thread_id == 0);
        assert_eq!(main.map(|t| t.samples), Some(100), "the busy thread stays");
        assert!(table.iter().any(|t| t.python_thread_id == 100));
        let folded = table.folded();
        let kept: u64 = table.iter().map(|t| t.samples).sum();
        assert_eq!(kept + folded.samples, 200, "no sample lost");
        assert_eq!(folded.threads as usize + table.len(), 101);
    }

    /// The same shared name is known at once; a new one, even with the same text, is
    /// compared, and a rename is taken.
    #[test]
    fn a_thread_with_the_same_shared_name_is_not_compared_and_a_renamed_one_is_renamed() {
        let mut table = ThreadTable::new(8);
        let loader: Arc<str> = Arc::from("loader-0");
        let with = |name: &Arc<str>| ThreadInfo {
            name: Some(Arc::clone(name)),
            ..info(3)
        };
        assert!(!table.observe(1, 1, &with(&loader), &loader).name_unchanged);
        assert!(table.observe(1, 1, &with(&loader), &loader).name_unchanged);
        let same_text: Arc<str> = Arc::from("loader-0");
        let t = table.observe(1, 1, &with(&same_text), &same_text);
        assert!(!t.name_unchanged);
        assert_eq!(t.name, "loader-0");
        let renamed: Arc<str> = Arc::from("loader-1");
        let t = table.observe(1, 1, &with(&renamed), &renamed);
        assert!(!t.name_unchanged);
        assert_eq!(t.name, "loader-1");
        assert!(
            table
                .observe(1, 1, &with(&renamed), &renamed)
                .name_unchanged
        );
        // A sample without its name keeps the known one and is compared next time.
        let t = table.observe(1, 1, &info(3), "thread 1003");
        assert_eq!((t.name.as_str(), t.name_unchanged), ("loader-1", false));
        assert!(
            !table
                .observe(1, 1, &with(&renamed), &renamed)
                .name_unchanged
        );
    }

    #[test]
    fn same_thread_id_in_two_processes_is_two_threads() {
        let mut table = ThreadTable::new(8);
        table.observe(1, 1, &info(5), "MainThread");
        table.observe(2, 2, &info(5), "MainThread");
        assert_eq!(table.len(), 2);
    }
}
