//! Like threads and like processes, read as one: the one rule of what makes two threads or two
//! processes "the same kind", and how many of a kind there were.
//!
//! A job that runs for days starts and ends threads and processes all the time: a thread per
//! request, a pool that replaces its workers, DataLoader workers re-created at every epoch. Kept
//! apart, each would be a root of its own in the flamegraph, a line in the summary and a set of
//! tables in memory, so that both the recording and stackscope's memory grow with every thread
//! and process the job ever had. Read as one, a kind is one root, one entry, one set of tables,
//! and what an ended member held is released.
//!
//! - A **thread's kind** is its name with every run of digits as `N` (`Thread-N (worker)`,
//!   `ThreadPoolExecutor-N_N`): the same rule `compare` and `merge` match threads by.
//! - A **process's kind** is its command line, digits as `N`, and its rank: a rank keeps its
//!   rank, and a rank's DataLoader workers (which inherit its rank) are that rank's workers.
//!
//! Processes of a kind are one group from the first: every process of the kind but its *head*
//! (the first one seen, which started the others: the recorded process, a rank, a trainer whose
//! forked workers run its command line) joins the kind's group. A process that `multiprocessing`
//! started (spawn, forkserver) is never a head: its command line says so. Threads of a kind
//! stay apart until the kind churns (one of them ends): threads that start after that are the
//! kind's from their first sample, and those that end after that are folded into it.

use std::fmt::Write as _;

use crate::jobs::thread_key;

/// Pids of process groups, past any real pid (Linux's `pid_max` is at most 2^22), so that a
/// group is one more process to every table that counts by pid.
pub const GROUP_PIDS_FROM: u32 = 1 << 30;
/// Python thread ids of thread groups (a kind of thread folded into one entry), past any real
/// thread id's range of small counters and addresses.
pub(crate) const GROUP_THREADS_FROM: u64 = 1 << 62;

/// Whether `pid` is a process group's, not a real process's.
pub fn is_group_pid(pid: u32) -> bool {
    pid >= GROUP_PIDS_FROM
}

/// A thread's kind: its name, digits as `N`.
pub(crate) fn thread_kind(name: &str) -> String {
    thread_key(name)
}

/// The prefix of a pool's label.
pub const THREAD_POOL: &str = "thread pool ";

/// How a kind of thread read as one is shown, in its root, its lane and its summary entry. A
/// process's short-lived threads are a pool, named by what they run: `Thread-N (target)`, the
/// name `threading` gives a thread of `target`, is `thread pool target`; another kind is `thread
/// pool` and its kind (`thread pool ThreadPoolExecutor-N_N`). A process group's thread keeps its
/// kind (`MainThread` of the DataLoader workers), as do threads not named yet (`thread N`).
pub(crate) fn kind_label(owner: u32, name: &str) -> String {
    let kind = thread_kind(name);
    if is_group_pid(owner) || kind == UNNAMED_KIND || kind.starts_with(THREAD_POOL) {
        return kind;
    }
    let runs = kind
        .strip_prefix("Thread-N (")
        .and_then(|rest| rest.strip_suffix(')'))
        .filter(|target| !target.is_empty());
    format!("{THREAD_POOL}{}", runs.unwrap_or(&kind))
}

/// The kind of threads read before their names (`thread N`).
pub(crate) const UNNAMED_KIND: &str = "thread N";

/// A process's kind: its command line with digits as `N`, and its rank.
#[derive(Debug, Clone, PartialEq, Eq, Hash)]
pub(crate) struct ProcessKind {
    pub command: String,
    pub rank: Option<u32>,
}

impl ProcessKind {
    pub fn of(command_line: &str, rank: Option<u32>) -> ProcessKind {
        ProcessKind {
            command: thread_key(command_line.trim()),
            rank,
        }
    }
}

/// Whether a command line is that of a process `multiprocessing` started with its spawn or
/// forkserver method: a worker, never the head of its kind.
pub(crate) fn started_by_multiprocessing(command_line: &str) -> bool {
    command_line.contains("--multiprocessing-fork")
        || command_line.contains("from multiprocessing.")
}

/// How many members a kind had: all told, alive now, alive at once at most, ended.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct Headcount {
    pub members: u64,
    pub alive: u64,
    pub most_at_once: u64,
    pub ended: u64,
}

impl Headcount {
    pub fn join(&mut self) {
        self.members += 1;
        self.alive += 1;
        self.most_at_once = self.most_at_once.max(self.alive);
    }

    pub fn leave(&mut self) {
        self.alive = self.alive.saturating_sub(1);
        self.ended += 1;
    }
}

/// What a group of processes does, as people call it, from the functions its members ran.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub(crate) enum GroupWork {
    #[default]
    Workers,
    DataLoader,
    Pool,
}

impl GroupWork {
    /// What the functions a member ran (`(function, file)`) say it is; `Workers` when nothing.
    pub fn of<'a>(mut functions: impl Iterator<Item = (&'a str, &'a str)>) -> GroupWork {
        let mut found = GroupWork::Workers;
        for (function, file) in functions.by_ref() {
            if function.ends_with("_worker_loop") && file.ends_with("utils/data/_utils/worker.py") {
                return GroupWork::DataLoader;
            }
            if (function == "worker" && file.ends_with("multiprocessing/pool.py"))
                || (function.ends_with("_process_worker")
                    && file.ends_with("concurrent/futures/process.py"))
            {
                found = GroupWork::Pool;
            }
        }
        found
    }

    /// The better known of two: a DataLoader's workers stay that once seen.
    pub fn or(self, other: GroupWork) -> GroupWork {
        match (self, other) {
            (GroupWork::DataLoader, _) | (_, GroupWork::DataLoader) => GroupWork::DataLoader,
            (GroupWork::Pool, _) | (_, GroupWork::Pool) => GroupWork::Pool,
            _ => GroupWork::Workers,
        }
    }

    fn words(self) -> &'static str {
        match self {
            GroupWork::Workers => "workers",
            GroupWork::DataLoader => "DataLoader workers",
            GroupWork::Pool => "pool workers",
        }
    }
}

/// A process group's root frame: `DataLoader workers (3,100 processes, 2 at a time) python
/// train.py`, with `rank R ` before it for a rank's workers. [`parse_group_label`] reads it back.
pub(crate) fn group_label(
    work: GroupWork,
    rank: Option<u32>,
    count: &Headcount,
    command: &str,
) -> String {
    let mut label = String::new();
    if let Some(rank) = rank {
        let _ = write!(label, "rank {rank} ");
    }
    let noun = if count.members == 1 {
        "process"
    } else {
        "processes"
    };
    let _ = write!(
        label,
        "{} ({} {noun}, {} at a time)",
        work.words(),
        thousands(count.members),
        count.most_at_once
    );
    if !command.is_empty() {
        label.push(' ');
        label.push_str(command);
    }
    label
}

/// What a process group's root frame says: its rank, if any, and how many processes it has.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct GroupRoot {
    pub rank: Option<u32>,
    pub processes: u64,
    pub at_a_time: u64,
}

/// Reads a root frame made by [`group_label`]; `None` for any other frame.
pub fn parse_group_label(frame: &str) -> Option<GroupRoot> {
    let (rank, rest) = match frame.strip_prefix("rank ") {
        Some(after) => {
            let (rank, rest) = after.split_once(' ')?;
            (Some(rank.parse().ok()?), rest)
        }
        None => (None, frame),
    };
    let words = ["workers (", "DataLoader workers (", "pool workers ("];
    let inside = words.iter().find_map(|w| rest.strip_prefix(w))?;
    let (count, rest) = inside.split_once(' ')?;
    let rest = rest
        .strip_prefix("processes, ")
        .or_else(|| rest.strip_prefix("process, "))?;
    let (at_a_time, rest) = rest.split_once(' ')?;
    rest.strip_prefix("at a time)")?;
    Some(GroupRoot {
        rank,
        processes: count.replace(',', "").parse().ok()?,
        at_a_time: at_a_time.parse().ok()?,
    })
}

/// `3100` as `3,100`.
fn thousands(n: u64) -> String {
    let digits = n.to_string();
    let mut out = String::with_capacity(digits.len() + digits.len() / 3);
    for (i, c) in digits.chars().enumerate() {
        if i > 0 && (digits.len() - i).is_multiple_of(3) {
            out.push(',');
        }
        out.push(c);
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_group_label_says_its_work_count_and_rank_and_reads_back() {
        let mut count = Headcount::default();
        for _ in 0..3100 {
            if count.alive == 2 {
                count.leave();
            }
            count.join();
        }
        let label = group_label(GroupWork::DataLoader, None, &count, "python train.py");
        assert_eq!(
            label,
            "DataLoader workers (3,100 processes, 2 at a time) python train.py"
        );
        assert_eq!(
            parse_group_label(&label),
            Some(GroupRoot {
                rank: None,
                processes: 3100,
                at_a_time: 2
            })
        );
        let one = Headcount {
            members: 1,
            alive: 1,
            most_at_once: 1,
            ended: 0,
        };
        let ranked = group_label(GroupWork::Workers, Some(3), &one, "");
        assert_eq!(ranked, "rank 3 workers (1 process, 1 at a time)");
        assert_eq!(parse_group_label(&ranked).and_then(|g| g.rank), Some(3));
        assert_eq!(parse_group_label("process 12 python workers (x)"), None);
        assert_eq!(parse_group_label("rank 3 (pid 12) python t.py"), None);
    }

    #[test]
    fn kinds_of_processes_and_threads() {
        assert_eq!(
            ProcessKind::of("python -c from multiprocessing.spawn import spawn_main; spawn_main(tracker_fd=5, pipe_handle=11) --multiprocessing-fork", None),
            ProcessKind::of("python -c from multiprocessing.spawn import spawn_main; spawn_main(tracker_fd=6, pipe_handle=19) --multiprocessing-fork", None),
        );
        assert_ne!(
            ProcessKind::of("python t.py", Some(0)),
            ProcessKind::of("python t.py", Some(1))
        );
        assert!(started_by_multiprocessing(
            "python -c from multiprocessing.forkserver import main; main(3, 4) --multiprocessing-fork"
        ));
        assert!(!started_by_multiprocessing("python train.py"));
        assert_eq!(thread_kind("Thread-12 (worker)"), "Thread-N (worker)");
        assert_eq!(
            kind_label(7, "Thread-325 (process_request_thread)"),
            "thread pool process_request_thread"
        );
        assert_eq!(
            kind_label(7, "ThreadPoolExecutor-0_3"),
            "thread pool ThreadPoolExecutor-N_N"
        );
        assert_eq!(kind_label(7, "Thread-3"), "thread pool Thread-N");
        assert_eq!(kind_label(GROUP_PIDS_FROM + 1, "MainThread"), "MainThread");
        assert_eq!(kind_label(7, "thread 12"), "thread N");
        let label = kind_label(7, "Thread-1 (serve)");
        assert_eq!(kind_label(7, &label), label, "a label is its own label");
    }

    #[test]
    fn what_a_group_does_comes_from_its_functions() {
        let dl = [
            ("_bootstrap", "multiprocessing/process.py"),
            ("_worker_loop", "torch/utils/data/_utils/worker.py"),
        ];
        assert_eq!(GroupWork::of(dl.into_iter()), GroupWork::DataLoader);
        let pool = [("worker", "/usr/lib/python3.11/multiprocessing/pool.py")];
        assert_eq!(GroupWork::of(pool.into_iter()), GroupWork::Pool);
        assert_eq!(
            GroupWork::of([("f", "a.py")].into_iter()),
            GroupWork::Workers
        );
        assert_eq!(
            GroupWork::Pool.or(GroupWork::DataLoader),
            GroupWork::DataLoader
        );
    }
}
