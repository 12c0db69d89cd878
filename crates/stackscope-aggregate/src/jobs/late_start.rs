//! Workers that started long after their siblings: what can still be told of processes that
//! ended before anyone watched.
//!
//! A pool starts its workers together, and starts one anew only when one ended (killed by a
//! signal or the OOM killer, exited, or retired after `maxtasksperchild` tasks). So among the
//! processes of one parent and one kind (one command, [`command_key`]; helpers aside), those
//! that started [`LATE_GAP_SECS`] or more after the others are replacements: a worker ended
//! before each started, and the task that worker held may be lost.
//!
//! The rule, in order:
//! 1. siblings: the processes of one parent with one command key, helpers left out;
//! 2. bursts: sorted by start, a burst ends where the next start is [`LATE_GAP_SECS`] or more
//!    later; the first burst is the pool as it started;
//! 3. a later burst replaced workers when it started one process, or fewer than had started
//!    before it; a burst of as many as there were, two or more at once, is a second pool (a
//!    second DataLoader, a new `Pool`), not replacements.

use std::collections::BTreeMap;

use chrono::{DateTime, Local};
use serde::Serialize;

use super::helpers::helper_by_command_line;
use super::identity::command_key;

/// How long after its siblings a process must start to be a late one: a pool's workers start
/// within milliseconds of each other, a replacement when a worker is found gone.
pub const LATE_GAP_SECS: f64 = 2.0;

/// A process of the job and when it started (`/proc/PID/stat`).
#[derive(Debug, Clone)]
pub struct ProcessStart<'a> {
    pub pid: u32,
    pub parent: Option<u32>,
    pub command_line: &'a str,
    /// Seconds of the Unix epoch.
    pub started_secs: f64,
}

/// A process that started long after its siblings: the replacement of one that ended.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct LateStart {
    pub pid: u32,
    pub parent: u32,
    /// When it started, RFC 3339.
    pub started: String,
    /// Seconds from the last of the first burst's starts to its own.
    pub secs_after_siblings: f64,
    /// The other processes of its parent and kind, by pid.
    pub siblings: Vec<u32>,
    /// Its start on the wall clock, `HH:MM:SS`, for sentences.
    #[serde(skip)]
    pub clock: String,
}

impl LateStart {
    /// "worker pid 4242 started 41 s after its 5 siblings (at 08:57:31): it replaced a worker
    /// that ended then, and the task that worker held may be lost".
    pub fn sentence(&self) -> String {
        let siblings = match self.siblings.len() {
            1 => "its sibling".to_owned(),
            n => format!("its {n} siblings"),
        };
        format!(
            "worker pid {} started {:.0} s after {siblings} (at {}): it replaced a worker that \
             ended then, and the task that worker held may be lost",
            self.pid, self.secs_after_siblings, self.clock
        )
    }
}

/// The processes of `processes` that started long after their siblings, by pid.
pub fn late_starts(processes: &[ProcessStart<'_>]) -> Vec<LateStart> {
    let mut late: Vec<LateStart> = sibling_groups(processes)
        .values()
        .flat_map(|group| late_in(group))
        .collect();
    late.sort_by_key(|l| l.pid);
    late
}

/// Siblings by parent and kind, each group sorted by start; helpers and processes without a
/// known parent left out.
fn sibling_groups<'a>(
    processes: &'a [ProcessStart<'a>],
) -> BTreeMap<(u32, String), Vec<&'a ProcessStart<'a>>> {
    let mut groups: BTreeMap<(u32, String), Vec<&ProcessStart>> = BTreeMap::new();
    for p in processes {
        let Some(parent) = p.parent else { continue };
        if helper_by_command_line(p.command_line).is_some() {
            continue;
        }
        let kind = command_key(p.command_line);
        groups.entry((parent, kind)).or_default().push(p);
    }
    for group in groups.values_mut() {
        group.sort_by(|a, b| a.started_secs.total_cmp(&b.started_secs));
    }
    groups
}

/// A group's starts cut where the next start is [`LATE_GAP_SECS`] or more later.
fn bursts<'a, 'b>(group: &'b [&'a ProcessStart<'a>]) -> Vec<&'b [&'a ProcessStart<'a>]> {
    let mut out = Vec::new();
    let mut from = 0;
    for i in 1..group.len() {
        if group[i].started_secs - group[i - 1].started_secs >= LATE_GAP_SECS {
            out.push(&group[from..i]);
            from = i;
        }
    }
    if from < group.len() {
        out.push(&group[from..]);
    }
    out
}

/// Whether a later burst of `started` processes replaced workers, after `before` had
/// started: one at a time, or fewer than there were.
fn replaces(started: usize, before: usize) -> bool {
    started == 1 || started < before
}

/// The late starts of one group of siblings.
fn late_in(group: &[&ProcessStart<'_>]) -> Vec<LateStart> {
    let bursts = bursts(group);
    let Some((first, later)) = bursts.split_first() else {
        return Vec::new();
    };
    let pool_started = first.last().map_or(0.0, |p| p.started_secs);
    let mut before = first.len();
    let mut late = Vec::new();
    for burst in later {
        if replaces(burst.len(), before) {
            late.extend(burst.iter().map(|p| late_start(p, group, pool_started)));
        }
        before += burst.len();
    }
    late
}

fn late_start(p: &ProcessStart<'_>, group: &[&ProcessStart<'_>], pool_started: f64) -> LateStart {
    let at = wall_clock(p.started_secs);
    LateStart {
        pid: p.pid,
        parent: p.parent.unwrap_or_default(),
        started: at.map(|t| t.to_rfc3339()).unwrap_or_default(),
        secs_after_siblings: p.started_secs - pool_started,
        siblings: group
            .iter()
            .map(|s| s.pid)
            .filter(|&s| s != p.pid)
            .collect(),
        clock: at
            .map(|t| t.format("%H:%M:%S").to_string())
            .unwrap_or_default(),
    }
}

fn wall_clock(secs: f64) -> Option<DateTime<Local>> {
    let whole = secs.floor();
    let nanos = ((secs - whole) * 1e9) as u32;
    DateTime::from_timestamp(whole as i64, nanos).map(|t| t.with_timezone(&Local))
}

#[cfg(test)]
mod tests {
    use super::*;

    const FORK_WORKER: &str = "python3 /srv/job/pool_job.py --epochs 3";
    const SPAWN_WORKER: &str = "python3 -c from multiprocessing.spawn import spawn_main; \
                                spawn_main(tracker_fd=5, pipe_handle=11) --multiprocessing-fork";

    /// A pool of `workers` started at `at` (a few ms apart), the worker `lost` of them
    /// replaced `after` seconds later; pids from 100.
    fn pool(workers: u32, at: f64, lost: Option<(u32, f64)>) -> Vec<(u32, f64)> {
        let mut starts: Vec<(u32, f64)> = (0..workers)
            .filter(|w| lost.is_none_or(|(l, _)| l != *w))
            .map(|w| (100 + w, at + f64::from(w) * 0.004))
            .collect();
        if let Some((_, after)) = lost {
            starts.push((100 + workers, at + after));
        }
        starts
    }

    fn of<'a>(starts: &[(u32, f64)], parent: u32, command: &'a str) -> Vec<ProcessStart<'a>> {
        starts
            .iter()
            .map(|&(pid, started_secs)| ProcessStart {
                pid,
                parent: Some(parent),
                command_line: command,
                started_secs,
            })
            .collect()
    }

    #[test]
    fn a_worker_started_long_after_its_siblings_replaced_one() {
        for (workers, command) in [(2, FORK_WORKER), (3, SPAWN_WORKER), (6, FORK_WORKER)] {
            let starts = pool(workers, 1_700_000_000.0, Some((1, 41.0)));
            let late = late_starts(&of(&starts, 1, command));
            assert_eq!(late.len(), 1, "{workers} workers: {late:?}");
            assert_eq!(late[0].pid, 100 + workers);
            assert_eq!(late[0].siblings.len(), workers as usize - 1);
            assert!((late[0].secs_after_siblings - 41.0).abs() < 0.1, "{late:?}");
            assert!(late[0].sentence().starts_with(&format!(
                "worker pid {} started 41 s after its",
                100 + workers
            )));
        }
    }

    #[test]
    fn a_pool_as_it_started_has_no_late_worker() {
        for workers in [1, 3, 6, 64] {
            let starts = pool(workers, 1_700_000_000.0, None);
            assert!(late_starts(&of(&starts, 1, FORK_WORKER)).is_empty());
        }
        // A start soon after the others is one pool: its workers start within the gap.
        let starts = pool(3, 1_700_000_000.0, Some((0, 1.0)));
        assert!(late_starts(&of(&starts, 1, FORK_WORKER)).is_empty());
    }

    #[test]
    fn a_second_pool_of_as_many_workers_is_no_replacement() {
        let mut starts = pool(4, 1_700_000_000.0, None);
        starts.extend(
            pool(4, 1_700_000_300.0, None)
                .into_iter()
                .map(|(pid, at)| (pid + 10, at)),
        );
        assert!(late_starts(&of(&starts, 1, FORK_WORKER)).is_empty());
        // Two replaced at once in a pool of six are two late workers.
        let mut starts = pool(6, 1_700_000_000.0, None);
        starts.retain(|&(pid, _)| pid > 101);
        starts.extend([(120, 1_700_000_050.0), (121, 1_700_000_050.01)]);
        let late: Vec<u32> = late_starts(&of(&starts, 1, FORK_WORKER))
            .iter()
            .map(|l| l.pid)
            .collect();
        assert_eq!(late, vec![120, 121]);
    }

    #[test]
    fn siblings_are_of_one_parent_and_one_kind() {
        // Started late, but the only one of its parent, or of its command, or a helper.
        let mut processes = of(&pool(3, 1_700_000_000.0, None), 1, FORK_WORKER);
        processes.extend(of(&[(200, 1_700_000_060.0)], 2, FORK_WORKER));
        processes.extend(of(&[(300, 1_700_000_060.0)], 1, "python3 /srv/job/eval.py"));
        let tracker = "python3 -c from multiprocessing.resource_tracker import main;main(8)";
        processes.extend(of(&[(400, 1_700_000_060.0)], 1, tracker));
        processes.push(ProcessStart {
            pid: 500,
            parent: None,
            command_line: FORK_WORKER,
            started_secs: 1_700_000_060.0,
        });
        assert!(late_starts(&processes).is_empty());
    }
}
