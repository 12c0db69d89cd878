//! Why a job hangs, where it can be said: a process of the job vanished (a worker killed by
//! the OOM killer, a rank that crashed) and the rest wait for it; threads wait on locks in the
//! job's own code (a deadlock); the job waits on its GPU; a worker that started long after its
//! siblings replaced one that ended before anyone watched ([`LateStart`]); or nothing tells
//! (`unknown`). The hang report's `cause` and its first line.
//!
//! Pure: the watcher gives what it saw of the process tree ([`Vanished`]), what it can infer
//! of what it did not see ([`LateStart`]), the dump and the GPU's class of the hang.

use serde::Serialize;
use stackscope_event::{FileOrigin, FrameDump, HowEnded, ProcessDump, ThreadDump, ThreadState};

use super::hang::HangGpu;
use super::late_start::LateStart;
use super::locked::holders;
use super::view::is_main_thread;
use crate::gpu::GpuTag;

/// A process of the job that vanished while it was watched.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct Vanished {
    pub pid: u32,
    /// `worker`, `rank 1`, `main process`, `helper (resource tracker)`.
    pub role: String,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub rank: Option<u32>,
    #[serde(skip)]
    pub parent: Option<u32>,
    pub how: HowEnded,
    /// When it was seen gone, wall clock (`HH:MM:SS`).
    pub ended: String,
    /// Seconds from its end to the moment the stacks last changed (negative: it vanished after
    /// the job froze).
    pub secs_before_freeze: f64,
    /// The process of the same parent that appeared after it (a pool's replacement).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub replaced_by: Option<u32>,
}

impl Vanished {
    /// Whether its end can explain a hang: anything but a clean exit.
    pub fn abnormal(&self) -> bool {
        self.how != HowEnded::Exited(0)
    }
}

/// A thread blocked on a lock in the job's own code.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct LockWait {
    pub pid: u32,
    pub thread: String,
    pub frame: String,
    /// The threads that hold the lock it waits on, where an RLock records it
    /// ([`HangCause::name_lock_holders`]).
    #[serde(skip_serializing_if = "Vec::is_empty")]
    pub held_by: Vec<String>,
    #[serde(skip)]
    pub thread_id: u64,
}

/// The hang report's `cause`.
#[derive(Debug, Clone, PartialEq, Serialize)]
#[serde(tag = "kind", rename_all = "snake_case")]
pub enum HangCause {
    ProcessVanished {
        #[serde(flatten)]
        process: Vanished,
        /// Ranks of the job still there that all wait in one place, and that place.
        #[serde(skip_serializing_if = "Option::is_none")]
        peers: Option<PeersWaiting>,
    },
    Deadlock {
        threads: Vec<LockWait>,
    },
    WaitingOnGpu {
        state: GpuTag,
    },
    /// A worker started long after its siblings: one ended before the watch began.
    WorkerReplaced {
        #[serde(flatten)]
        replacement: LateStart,
    },
    Unknown,
}

/// The ranks still there and where they all wait.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct PeersWaiting {
    pub ranks: Vec<u32>,
    pub frame: String,
}

/// Why the job hangs. A vanished process explains it first (the latest abnormal end), then a
/// GPU that is busy (a kernel or a collective that never ends), then threads blocked on locks
/// in the job's own code, then the latest worker that replaced one unseen (`replaced`: an
/// inference, after what was seen).
pub fn hang_cause(
    processes: &[ProcessDump],
    vanished: &[Vanished],
    replaced: &[LateStart],
    gpu: Option<&HangGpu>,
) -> HangCause {
    if let Some(gone) = vanished.iter().rev().find(|v| v.abnormal()) {
        let peers = gone.rank.and_then(|_| peers_waiting(processes));
        return HangCause::ProcessVanished {
            process: gone.clone(),
            peers,
        };
    }
    if let Some(gpu) = gpu.filter(|g| matches!(g.state, GpuTag::Busy | GpuTag::BusyLowSm)) {
        return HangCause::WaitingOnGpu { state: gpu.state };
    }
    let threads = lock_waits(processes);
    if !threads.is_empty() {
        return HangCause::Deadlock { threads };
    }
    let latest = replaced
        .iter()
        .max_by(|a, b| a.secs_after_siblings.total_cmp(&b.secs_after_siblings));
    match latest {
        Some(late) => HangCause::WorkerReplaced {
            replacement: late.clone(),
        },
        None => HangCause::Unknown,
    }
}

/// Threads blocked on a lock whose innermost Python frame is the job's own code: a bare
/// `lock.acquire()` or `with lock:` (a queue's or a condition's wait shows the standard
/// library's frames instead).
fn lock_waits(processes: &[ProcessDump]) -> Vec<LockWait> {
    processes
        .iter()
        .flat_map(|p| p.threads.iter().map(move |t| (p, t)))
        .filter(|(_, t)| t.state == ThreadState::WaitingOnLock && !t.active)
        .filter_map(|(p, t)| {
            let frame = python_frames(t).next()?;
            (FileOrigin::infer(&frame.file, false) == FileOrigin::Job).then(|| LockWait {
                pid: p.pid,
                thread: t.display_name(),
                frame: frame.label(),
                held_by: Vec::new(),
                thread_id: t.python_thread_id,
            })
        })
        .collect()
}

impl HangCause {
    /// Names, in a deadlock, the threads that hold what each thread waits on, where an RLock
    /// records it (as `dump` does, [`super::locked`]); `owner_of(pid, lock)` reads a lock's
    /// owner from the target.
    pub fn name_lock_holders(
        &mut self,
        processes: &[ProcessDump],
        mut owner_of: impl FnMut(u32, u64) -> Option<u64>,
    ) {
        let HangCause::Deadlock { threads } = self else {
            return;
        };
        for wait in threads {
            let Some(p) = processes.iter().find(|p| p.pid == wait.pid) else {
                continue;
            };
            let waiting = p
                .threads
                .iter()
                .find(|t| t.python_thread_id == wait.thread_id);
            if let Some(t) = waiting {
                wait.held_by = holders(t, p, &mut |lock| owner_of(p.pid, lock));
            }
        }
    }
}

fn python_frames(thread: &ThreadDump) -> impl Iterator<Item = &FrameDump> {
    thread.frames.iter().filter(|f| !f.native)
}

/// Where a thread is stuck as its owner reads it: the call its own code made, at its own line
/// (`Pool.map (hang.py:11)`), else its innermost frame.
pub fn stuck_at(thread: &ThreadDump) -> Option<String> {
    let frames: Vec<&FrameDump> = python_frames(thread).collect();
    let own = frames
        .iter()
        .position(|f| FileOrigin::infer(&f.file, false) == FileOrigin::Job);
    match own {
        Some(i) if i > 0 => Some(format!(
            "{} ({}:{})",
            frames[i - 1].function,
            frames[i].file,
            frames[i].line
        )),
        _ => frames.first().map(|f| f.label()),
    }
}

/// Where a thread waits, by the innermost frame that is not the standard library's (the job's
/// or a package's: `all_reduce (distributed_c10d.py:3075)`).
fn waits_in(thread: &ThreadDump) -> Option<String> {
    let first = python_frames(thread).next()?;
    python_frames(thread)
        .find(|f| FileOrigin::infer(&f.file, false) != FileOrigin::Stdlib)
        .or(Some(first))
        .map(FrameDump::label)
}

/// The ranked processes still there, when their main threads all wait in one place.
fn peers_waiting(processes: &[ProcessDump]) -> Option<PeersWaiting> {
    let mut ranks = Vec::new();
    let mut frame: Option<String> = None;
    for p in processes {
        let Some(rank) = p.rank.rank else { continue };
        let main = p.threads.iter().find(|t| is_main_thread(p, t))?;
        let here = waits_in(main)?;
        if frame.get_or_insert_with(|| here.clone()) != &here {
            return None;
        }
        ranks.push(rank);
    }
    ranks.sort_unstable();
    Some(PeersWaiting {
        ranks,
        frame: frame?,
    })
}

/// The report's first line: "Stuck in Pool.map (hang.py:11) since 23:31:02; 2 s before,
/// worker pid 20205 vanished (killed by SIGKILL) and was replaced by 20209: the task it held
/// is lost."
pub fn headline(cause: &HangCause, processes: &[ProcessDump], since: &str) -> String {
    let stuck = processes
        .first()
        .and_then(|p| p.threads.iter().find(|t| is_main_thread(p, t)))
        .and_then(stuck_at)
        .map_or_else(|| "Stuck".to_owned(), |at| format!("Stuck in {at}"));
    let why = match cause {
        HangCause::ProcessVanished { process, peers } => vanished_sentence(process, peers.as_ref()),
        HangCause::Deadlock { threads } => {
            let waits: Vec<String> = threads
                .iter()
                .map(|t| match t.held_by.as_slice() {
                    [] => format!("{} (pid {}) at {}", t.thread, t.pid, t.frame),
                    held_by => format!(
                        "{} (pid {}) at {}, on an RLock held by {}",
                        t.thread,
                        t.pid,
                        t.frame,
                        held_by.join(" or ")
                    ),
                })
                .collect();
            format!(
                "a deadlock: threads wait on locks no running thread will release: {}.",
                waits.join("; ")
            )
        }
        HangCause::WaitingOnGpu { state } => format!(
            "the job waits on its GPU ({}).",
            match state {
                GpuTag::BusyLowSm => "busy on few SMs: a kernel or a collective that never ends",
                _ => "a kernel still working",
            }
        ),
        HangCause::WorkerReplaced { replacement } => format!("{}.", replacement.sentence()),
        HangCause::Unknown => "no process of the job vanished, and no thread waits on a lock of \
                               the job's own code: the stacks below say where each thread waits."
            .to_owned(),
    };
    format!("{stuck} since {since}; {why}")
}

fn vanished_sentence(v: &Vanished, peers: Option<&PeersWaiting>) -> String {
    // Its end is often the job's last move (a process that ends is a change).
    let when = match v.secs_before_freeze {
        secs if secs.abs() < 1.0 => "as it froze".to_owned(),
        secs if secs > 0.0 => format!("{secs:.0} s before"),
        secs => format!("{:.0} s after", -secs),
    };
    if let Some(rank) = v.rank {
        // "rank 1 (pid 617) is gone (killed by SIGKILL at 12:00:03); ranks 0 and 2 wait in
        // all_reduce (distributed_c10d.py:3075)".
        let mut out = format!(
            "{when}, rank {rank} (pid {}) is gone ({} at {})",
            v.pid,
            v.how.describe(),
            v.ended
        );
        match peers {
            Some(p) => out.push_str(&format!("; {} wait in {}.", rank_list(&p.ranks), p.frame)),
            None => out.push('.'),
        }
        return out;
    }
    let mut out = format!(
        "{when}, {} pid {} vanished ({}, at {})",
        v.role,
        v.pid,
        v.how.sentence(),
        v.ended
    );
    match v.replaced_by {
        Some(new) => out.push_str(&format!(
            " and was replaced by {new}: the task it held is lost."
        )),
        None => out.push_str(" and nothing replaced it."),
    }
    out
}

/// `rank 0`, `ranks 0 and 2`, `ranks 0, 2 and 3`.
pub fn rank_list(ranks: &[u32]) -> String {
    match ranks {
        [] => "no ranks".to_owned(),
        [one] => format!("rank {one}"),
        [init @ .., last] => {
            let init: Vec<String> = init.iter().map(u32::to_string).collect();
            format!("ranks {} and {last}", init.join(", "))
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use stackscope_event::RankInfo;

    fn frame(function: &str, file: &str, line: u32) -> FrameDump {
        FrameDump {
            function: function.into(),
            file: file.into(),
            line,
            native: false,
            locals: None,
            path: None,
        }
    }

    fn process(
        pid: u32,
        rank: Option<u32>,
        state: ThreadState,
        frames: Vec<FrameDump>,
    ) -> ProcessDump {
        ProcessDump {
            pid,
            parent_pid: None,
            ns_pid: None,
            command_line: "python3 hang.py".into(),
            python_version: "3.11.7".into(),
            rank: RankInfo {
                rank,
                ..RankInfo::default()
            },
            host: None,
            threads: vec![ThreadDump {
                name: Some("MainThread".into()),
                os_thread_id: Some(pid.into()),
                ns_thread_id: None,
                python_thread_id: 1,
                active: false,
                owns_gil: false,
                state,
                frames,
            }],
        }
    }

    fn vanished(how: HowEnded, rank: Option<u32>, replaced_by: Option<u32>) -> Vanished {
        Vanished {
            pid: 20205,
            role: if rank.is_some() { "rank 1" } else { "worker" }.into(),
            rank,
            parent: Some(1),
            how,
            ended: "23:31:00".into(),
            secs_before_freeze: 2.0,
            replaced_by,
        }
    }

    fn pool_map() -> Vec<FrameDump> {
        vec![
            frame("Condition.wait", "threading.py", 327),
            frame("ApplyResult.wait", "multiprocessing/pool.py", 765),
            frame("Pool.map", "multiprocessing/pool.py", 367),
            frame("main", "hang.py", 11),
        ]
    }

    #[test]
    fn a_worker_that_vanished_is_the_cause_and_the_first_line_says_so() {
        let tree = [process(1, None, ThreadState::WaitingOnLock, pool_map())];
        let gone = [
            Vanished {
                how: HowEnded::Exited(0),
                ..vanished(HowEnded::Exited(0), None, None)
            },
            vanished(
                HowEnded::OomKilled(stackscope_event::OomEvidence::Cgroup(1)),
                None,
                Some(20209),
            ),
        ];
        let cause = hang_cause(&tree, &gone, &[], None);
        assert!(matches!(cause, HangCause::ProcessVanished { .. }));
        assert_eq!(
            headline(&cause, &tree, "23:31:02"),
            "Stuck in Pool.map (hang.py:11) since 23:31:02; 2 s before, worker pid 20205 \
             vanished (killed by the OOM killer: the job's memory cgroup counted 1 kill, at \
             23:31:00) and was replaced by 20209: the task it held is lost."
        );
        let json = serde_json::to_value(&cause).expect("json");
        assert_eq!(json["kind"], "process_vanished");
        assert_eq!(json["how"], "oom_killed");
        assert_eq!(json["replaced_by"], 20209);
        // A clean exit alone explains nothing.
        assert!(!matches!(
            hang_cause(&tree, &gone[..1], &[], None),
            HangCause::ProcessVanished { .. }
        ));
        // Its end was the job's last move.
        let at_once = Vanished {
            secs_before_freeze: 0.2,
            ..vanished(HowEnded::Killed(9), None, Some(20209))
        };
        let cause = hang_cause(&tree, &[at_once], &[], None);
        assert!(headline(&cause, &tree, "23:31:02")
            .contains("since 23:31:02; as it froze, worker pid 20205 vanished (killed by SIGKILL"));
    }

    fn late(pid: u32, after: f64) -> LateStart {
        LateStart {
            pid,
            parent: 1,
            started: "2024-01-01T08:57:31+00:00".into(),
            secs_after_siblings: after,
            siblings: vec![20201, 20202],
            clock: "08:57:31".into(),
        }
    }

    #[test]
    fn a_worker_replaced_before_the_watch_is_the_cause_when_nothing_was_seen() {
        let tree = [process(1, None, ThreadState::WaitingOnLock, pool_map())];
        let cause = hang_cause(&tree, &[], &[late(20209, 41.0), late(20210, 3.0)], None);
        assert_eq!(
            headline(&cause, &tree, "before 08:58:12, when watching began"),
            "Stuck in Pool.map (hang.py:11) since before 08:58:12, when watching began; worker \
             pid 20209 started 41 s after its 2 siblings (at 08:57:31): it replaced a worker \
             that ended then, and the task that worker held may be lost."
        );
        let json = serde_json::to_value(&cause).expect("json");
        assert_eq!(json["kind"], "worker_replaced");
        assert_eq!(json["pid"], 20209);
        assert_eq!(json["siblings"], serde_json::json!([20201, 20202]));
        // What was seen comes first.
        let gone = [vanished(HowEnded::Killed(9), None, Some(20209))];
        assert!(matches!(
            hang_cause(&tree, &gone, &[late(20209, 41.0)], None),
            HangCause::ProcessVanished { .. }
        ));
    }

    #[test]
    fn a_deadlock_names_who_holds_each_rlock_where_it_is_read() {
        let waiting = |name: &str, ident: u64, held: u64, wanted: u64| {
            let mut frame = frame("transfer", "bank.py", 12);
            frame.locals = Some(
                [("first", held), ("second", wanted)]
                    .map(|(name, at)| stackscope_event::LocalVariable {
                        name: name.into(),
                        repr: Some(format!("<_thread.RLock at {at:#x}>")),
                        arg: true,
                    })
                    .to_vec(),
            );
            ThreadDump {
                name: Some(name.into()),
                python_thread_id: ident,
                ..process(1, None, ThreadState::WaitingOnLock, vec![frame]).threads[0].clone()
            }
        };
        let mut tree = process(1, None, ThreadState::WaitingOnLock, vec![]);
        tree.threads = vec![waiting("a", 0xa, 0x10, 0x20), waiting("b", 0xb, 0x20, 0x10)];
        let tree = [tree];
        let mut cause = hang_cause(&tree, &[], &[], None);
        cause.name_lock_holders(&tree, |pid, lock| {
            (pid == 1).then_some(if lock == 0x10 { 0xa } else { 0xb })
        });
        let text = headline(&cause, &tree, "10:00:00");
        assert!(
            text.ends_with(
                "a (pid 1) at transfer (bank.py:12), on an RLock held by b; b (pid 1) at \
                 transfer (bank.py:12), on an RLock held by a."
            ),
            "{text}"
        );
        let json = serde_json::to_value(&cause).expect("json");
        assert_eq!(json["threads"][0]["held_by"], serde_json::json!(["b"]));
    }

    #[test]
    fn a_rank_that_vanished_is_named_with_its_peers_frame() {
        let waiting = || {
            vec![
                frame("Barrier.wait", "threading.py", 700),
                frame("all_reduce", "ranks_job.py", 30),
                frame("train", "ranks_job.py", 50),
            ]
        };
        let tree = [
            process(
                10,
                None,
                ThreadState::WaitingOnIo,
                vec![frame("main", "launch.py", 5)],
            ),
            process(11, Some(0), ThreadState::WaitingOnLock, waiting()),
            process(13, Some(2), ThreadState::WaitingOnLock, waiting()),
        ];
        let cause = hang_cause(
            &tree,
            &[vanished(HowEnded::Killed(9), Some(1), None)],
            &[],
            None,
        );
        let text = headline(&cause, &tree, "12:00:05");
        assert!(
            text.contains(
                "rank 1 (pid 20205) is gone (killed by SIGKILL at 23:31:00); ranks 0 and 2 \
                 wait in all_reduce (ranks_job.py:30)."
            ),
            "{text}"
        );
    }

    #[test]
    fn a_plain_deadlock_is_a_deadlock_and_says_nothing_of_processes() {
        let tree = [process(
            1,
            None,
            ThreadState::WaitingOnLock,
            vec![frame("deadlock_a_body", "deadlock.py", 38)],
        )];
        let cause = hang_cause(&tree, &[], &[], None);
        let json = serde_json::to_value(&cause).expect("json");
        assert_eq!(json["kind"], "deadlock");
        assert_eq!(
            json["threads"][0]["frame"],
            "deadlock_a_body (deadlock.py:38)"
        );
        let text = headline(&cause, &tree, "10:00:00");
        assert!(text.contains("a deadlock"), "{text}");
        assert!(
            !text.contains("vanished") && !text.contains("pid 2"),
            "{text}"
        );
        // A queue's wait is no deadlock; a busy GPU is the cause before locks.
        let queue = [process(1, None, ThreadState::WaitingOnLock, pool_map())];
        assert_eq!(hang_cause(&queue, &[], &[], None), HangCause::Unknown);
        let gpu = HangGpu::classify(100.0, Some(1.0), 30.0, false);
        assert_eq!(
            hang_cause(&tree, &[], &[], Some(&gpu)),
            HangCause::WaitingOnGpu {
                state: GpuTag::BusyLowSm
            }
        );
        assert_eq!(rank_list(&[0, 2, 3]), "ranks 0, 2 and 3");
    }
}
