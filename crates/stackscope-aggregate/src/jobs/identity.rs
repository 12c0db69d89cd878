//! A stack's identity across recordings: what makes a folded line of one recording "the same
//! stack" as a line of another, taken on another day, with other pids and, after an edit, other
//! line numbers. The one definition that `merge` (ranks across nodes) and `compare` (before and
//! after a change) both read folded lines with.
//!
//! - A **process** is named by what it is to the job, never by its pid: a rank by its rank; the
//!   trainer's process; the job's worker processes (DataLoader workers and other workers) as one
//!   group, since a change often changes how many there are; the recorded process; any other by
//!   its command reduced to program and script names (`python3 train.py`), since paths and
//!   arguments change between runs.
//! - A **thread** by its name, with every run of digits as `N`: a numbered pool
//!   (`ThreadPoolExecutor-0_3`, `Thread-7 (worker)`) is one thread of the job.
//! - A **frame** by its function and file (`f (train.py)`), without the line: code moves when it
//!   is edited. Lines are kept where asked for ([`FrameMatch::Line`]).

use std::collections::{BTreeSet, HashMap};

use crate::fold::{is_group_pid, parse_group_label, GROUP_PIDS_FROM};

/// How frames match across recordings.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub enum FrameMatch {
    /// By function and file: `f (train.py:12)` and `f (train.py:30)` are one frame.
    #[default]
    Function,
    /// By function, file and line.
    Line,
}

/// A folded line's process root and the rest of it (thread, frames); `None` for a line
/// without a process root (a recording of one process).
pub fn split_process_root(stack: &str) -> (Option<u32>, &str) {
    let (first, rest) = stack.split_once(';').unwrap_or((stack, ""));
    if parse_group_label(first).is_some() {
        // A group of like processes: one process to every reader of folded lines.
        return (Some(GROUP_PIDS_FROM), rest);
    }
    match process_root_pid(first) {
        Some(pid) => (Some(pid), rest),
        None => (None, stack),
    }
}

/// The pid of a process root: `process 5124 python ...` or `rank 6 (pid 5124) python ...`.
pub fn process_root_pid(frame: &str) -> Option<u32> {
    if let Some(rest) = frame.strip_prefix("process ") {
        return rest.split(' ').next()?.parse().ok();
    }
    let rest = frame.strip_prefix("rank ")?;
    let after = rest.split_once("(pid ")?.1;
    after.split(')').next()?.parse().ok()
}

/// The rank a process root carries itself: `rank 6 (pid 5124) ...`.
pub fn process_root_rank(frame: &str) -> Option<u32> {
    frame
        .strip_prefix("rank ")
        .and_then(|r| r.split(' ').next())
        .and_then(|r| r.parse().ok())
}

/// `function (file:line)` as `function (file)`: a function's lines count together.
pub fn function_of(frame: &str) -> String {
    match frame.rfind(':') {
        Some(colon)
            if frame.ends_with(')')
                && frame[colon + 1..frame.len() - 1]
                    .chars()
                    .all(|c| c.is_ascii_digit()) =>
        {
            format!("{})", &frame[..colon])
        }
        _ => frame.to_owned(),
    }
}

/// A frame as `match_by` says frames match.
pub fn frame_key(frame: &str, match_by: FrameMatch) -> String {
    match match_by {
        FrameMatch::Function => function_of(frame),
        FrameMatch::Line => frame.to_owned(),
    }
}

/// A thread's name with every run of digits as `N`: the threads of a numbered pool are one.
pub fn thread_key(name: &str) -> String {
    let mut out = String::with_capacity(name.len());
    let mut in_digits = false;
    for c in name.chars() {
        if c.is_ascii_digit() {
            if !in_digits {
                out.push('N');
            }
            in_digits = true;
        } else {
            out.push(c);
            in_digits = false;
        }
    }
    out
}

/// A command line reduced to what stays the same between runs: the program's and the script's
/// (or `-m` module's) names, without directories or arguments: `python3 train.py`.
pub fn command_key(command_line: &str) -> String {
    let mut words = command_line.split_whitespace();
    let Some(program) = words.next() else {
        return String::new();
    };
    let base = |w: &str| w.rsplit('/').next().unwrap_or(w).to_owned();
    let mut key = base(program);
    let mut module = false;
    for word in words {
        if word == "-m" {
            module = true;
            continue;
        }
        if word.starts_with('-') {
            continue;
        }
        key.push(' ');
        if module {
            key.push_str("-m ");
        }
        key.push_str(&base(word));
        break;
    }
    key
}

/// What a process is to the job, the name it is matched by across recordings.
#[derive(Debug, Clone, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub enum ProcessIdentity {
    Rank(u32),
    Trainer,
    Workers,
    Target,
    Command(String),
}

impl ProcessIdentity {
    /// The root frame it gets in matched stacks: `rank 6`, `trainer's process`, `workers`,
    /// `recorded process`, `python3 train.py`.
    pub fn label(&self) -> String {
        match self {
            ProcessIdentity::Rank(rank) => format!("rank {rank}"),
            ProcessIdentity::Trainer => "trainer's process".to_owned(),
            ProcessIdentity::Workers => "workers".to_owned(),
            ProcessIdentity::Target => "recorded process".to_owned(),
            ProcessIdentity::Command(command) => format!("process {command}"),
        }
    }
}

/// What is known of one recording's processes, to name them by [`ProcessIdentity`].
#[derive(Debug, Clone, Default)]
pub struct JobProcesses {
    /// The recorded process.
    pub target_pid: u32,
    /// The process of the trainer (the loop), when the recording found one.
    pub trainer_pid: Option<u32>,
    /// Worker processes that feed it (DataLoader workers, other workers).
    pub worker_pids: BTreeSet<u32>,
    /// Ranks by pid, for processes a launcher started.
    pub ranks: HashMap<u32, u32>,
    /// Command lines by pid.
    pub commands: HashMap<u32, String>,
}

impl JobProcesses {
    /// The identity of process `pid`, whose root frame is `root` (which may carry its rank).
    pub fn identity(&self, pid: u32, root: &str) -> ProcessIdentity {
        let rank = self
            .ranks
            .get(&pid)
            .copied()
            .or_else(|| process_root_rank(root));
        // A rank's DataLoader workers inherit its rank: they are its workers, not the rank.
        if self.worker_pids.contains(&pid) || is_group_pid(pid) || parse_group_label(root).is_some()
        {
            return ProcessIdentity::Workers;
        }
        if let Some(rank) = rank {
            return ProcessIdentity::Rank(rank);
        }
        if self.trainer_pid == Some(pid) {
            return ProcessIdentity::Trainer;
        }
        if pid == self.target_pid {
            return ProcessIdentity::Target;
        }
        let command = self
            .commands
            .get(&pid)
            .map(String::as_str)
            .unwrap_or_else(|| root_command(root));
        ProcessIdentity::Command(command_key(command))
    }

    /// A folded line (`root;thread;frame;... `, without its count) as its identity: the
    /// process by what it is, the thread by its name, the frames as `match_by` says.
    pub fn stack_key(&self, stack: &str, match_by: FrameMatch) -> String {
        let (first, _) = stack.split_once(';').unwrap_or((stack, ""));
        let (pid, rest) = split_process_root(stack);
        let mut parts: Vec<String> = Vec::new();
        if let Some(pid) = pid {
            parts.push(self.identity(pid, first).label());
        }
        let mut frames = rest.split(';').filter(|f| !f.is_empty());
        if let Some(thread) = frames.next() {
            parts.push(thread_key(thread));
        }
        parts.extend(frames.map(|f| frame_key(f, match_by)));
        parts.join(";")
    }
}

/// The command of a process root: what follows `process PID ` or `rank R (pid P) `.
fn root_command(root: &str) -> &str {
    if let Some(rest) = root.strip_prefix("process ") {
        return rest.split_once(' ').map_or("", |(_, command)| command);
    }
    root.split_once(") ").map_or("", |(_, command)| command)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn frames_match_by_function_and_file_unless_lines_are_asked_for() {
        assert_eq!(function_of("f (a.py:12)"), "f (a.py)");
        assert_eq!(function_of("f (libc.so)"), "f (libc.so)");
        assert_eq!(frame_key("f (a.py:12)", FrameMatch::Line), "f (a.py:12)");
    }

    #[test]
    fn numbered_pools_are_one_thread() {
        assert_eq!(
            thread_key("ThreadPoolExecutor-0_3"),
            "ThreadPoolExecutor-N_N"
        );
        assert_eq!(
            thread_key("Thread-12 (worker)"),
            thread_key("Thread-3 (worker)")
        );
        assert_eq!(thread_key("MainThread"), "MainThread");
    }

    #[test]
    fn commands_lose_their_directories_and_arguments() {
        assert_eq!(
            command_key("/usr/bin/python3 /tmp/.tmpAb/train.py --seconds 4"),
            "python3 train.py"
        );
        assert_eq!(
            command_key("python -u -m pkg.train --lr 1"),
            "python -m pkg.train"
        );
        assert_eq!(command_key(""), "");
    }

    #[test]
    fn processes_are_named_by_what_they_are_to_the_job() {
        let job = JobProcesses {
            target_pid: 10,
            trainer_pid: Some(11),
            worker_pids: BTreeSet::from([12, 13]),
            ranks: HashMap::from([(14, 3)]),
            commands: HashMap::from([(15, "/opt/venv/bin/python /x/tb.py --port 1".to_owned())]),
        };
        let key = |s: &str| job.stack_key(s, FrameMatch::Function);
        assert_eq!(
            key("process 11 python t.py;MainThread;main (t.py:3);step (t.py:9)"),
            "trainer's process;MainThread;main (t.py);step (t.py)"
        );
        assert_eq!(
            key("process 12 python t.py;MainThread;loop (t.py:5)"),
            key("process 13 python t.py;MainThread;loop (t.py:7)")
        );
        assert_eq!(
            key("rank 3 (pid 14) python t.py;MainThread"),
            "rank 3;MainThread"
        );
        assert_eq!(
            key("process 15 python tb.py;Thread-4 (serve);f (tb.py:1)"),
            "process python tb.py;Thread-N (serve);f (tb.py)"
        );
        assert_eq!(
            key("process 10 sh run.sh;MainThread"),
            "recorded process;MainThread"
        );
        // A group of like processes is the job's workers, however many it had.
        assert_eq!(
            key("DataLoader workers (3,100 processes, 2 at a time) python t.py;MainThread;f (t.py:1)"),
            key("process 12 python t.py;MainThread;f (t.py:5)")
        );
        // A recording of one process has no process roots.
        assert_eq!(key("MainThread;f (a.py:1)"), "MainThread;f (a.py)");
    }
}
