//! Roles: the job read as the people who run it read it.
//!
//! - the **trainer**: the thread that drives the GPU. Among the Python threads of processes that
//!   are neither DataLoader workers nor helpers, the one whose samples run while the GPU works
//!   and wait while it idles; the target's main thread when no thread stands out that way.
//! - its **feeders**: the other processes of the tree that hand it data: DataLoader workers,
//!   recognised by their frames (`_worker_loop` of `torch/utils/data/_utils/worker.py`) and
//!   numbered in the order they were started, and any other process whose main thread works
//!   while the GPU idles (`worker`).
//! - **helpers**: everything else (queue feeder threads, resource sharers, pin-memory threads,
//!   watchdogs, launchers): shown, never blamed.
//!
//! Roles are worked out when they are asked for, from the threads' activity the fold keeps
//! (`fold/activity.rs`), so a report over a window and the live `top` read them the same way.

pub mod while_idle;

use serde::{Deserialize, Serialize};

use crate::fold::{Activity, Aggregator, RunWait, StackTable};
use crate::gpu::MIN_SIDE_SAMPLES;

/// A trainer stands out when its running share while the GPU is busy exceeds its running
/// share while it idles by this much.
const TRAINER_CONTRAST: f64 = 0.25;
/// A process other than a DataLoader worker feeds the trainer when its main thread runs at
/// least this share of the time the GPU idles.
pub const FEEDER_MIN_RUNNING: f64 = 0.25;

/// What a thread is to the job.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, PartialOrd, Ord, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum Role {
    Trainer,
    DataloaderWorker,
    Worker,
    Helper,
}

/// One thread's role, as `summary.json`'s `roles` lists them.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct ThreadRole {
    pub pid: u32,
    pub python_thread_id: u64,
    #[serde(default)]
    pub os_thread_id: Option<u64>,
    /// The thread's own name.
    pub thread: String,
    pub role: Role,
    /// What people call it: `trainer (MainThread)`, `DataLoader worker 0`, `worker`,
    /// `QueueFeederThread`.
    pub label: String,
}

/// What the roles are read from, for one thread.
#[derive(Debug, Clone, Copy)]
pub struct ThreadFacts<'a> {
    pub pid: u32,
    pub python_thread_id: u64,
    pub os_thread_id: Option<u64>,
    pub name: &'a str,
    /// Whether its name was read (a thread Python's `threading` started); native threads that
    /// run Python callbacks (torch's autograd engine) have none.
    pub named: bool,
    pub activity: &'a Activity,
}

/// What the roles are read from, for one process.
#[derive(Debug, Clone, Copy)]
pub struct ProcessFacts<'a> {
    pub pid: u32,
    pub command_line: &'a str,
}

/// The roles of a recording's threads.
#[derive(Debug, Clone, Default, PartialEq)]
pub struct Roles {
    pub threads: Vec<ThreadRole>,
}

impl Roles {
    pub fn trainer(&self) -> Option<&ThreadRole> {
        self.threads.iter().find(|t| t.role == Role::Trainer)
    }

    /// The role of one thread.
    pub fn of(&self, pid: u32, python_thread_id: u64) -> Option<&ThreadRole> {
        self.threads
            .iter()
            .find(|t| t.pid == pid && t.python_thread_id == python_thread_id)
    }

    /// The feeders' processes with their role, by pid.
    pub fn feeders(&self) -> impl Iterator<Item = &ThreadRole> {
        self.threads
            .iter()
            .filter(|t| matches!(t.role, Role::DataloaderWorker | Role::Worker))
    }
}

/// Works out every thread's role. `root_pid` is the target's own process.
pub fn assign(
    table: &StackTable,
    threads: &[ThreadFacts<'_>],
    processes: &[ProcessFacts<'_>],
    root_pid: u32,
) -> Roles {
    let mut pids: Vec<u32> = threads.iter().map(|t| t.pid).collect();
    pids.sort_unstable();
    pids.dedup();
    let command_line = |pid: u32| {
        processes
            .iter()
            .find(|p| p.pid == pid)
            .map_or("", |p| p.command_line)
    };
    let loader_workers: Vec<u32> = pids
        .iter()
        .copied()
        .filter(|&pid| runs_dataloader_worker(table, threads, pid))
        .collect();
    let helper_processes: Vec<u32> = pids
        .iter()
        .copied()
        .filter(|&pid| crate::jobs::helper_by_command_line(command_line(pid)).is_some())
        .collect();
    let candidates: Vec<&ThreadFacts<'_>> = threads
        .iter()
        .filter(|t| !loader_workers.contains(&t.pid) && !helper_processes.contains(&t.pid))
        .collect();
    let trainer = choose_trainer(&candidates, root_pid);
    let mut roles = Vec::with_capacity(threads.len());
    for thread in threads {
        let is_trainer = trainer
            .is_some_and(|t| t.pid == thread.pid && t.python_thread_id == thread.python_thread_id);
        let main = thread.name == "MainThread";
        let (role, label) = if is_trainer {
            (Role::Trainer, format!("trainer ({})", thread.name))
        } else if main && trainer.is_some_and(|t| t.pid == thread.pid) {
            (Role::Helper, thread.name.to_owned())
        } else if main && loader_workers.contains(&thread.pid) {
            let n = loader_workers
                .iter()
                .position(|&p| p == thread.pid)
                .unwrap_or(0);
            (Role::DataloaderWorker, format!("DataLoader worker {n}"))
        } else if main && !helper_processes.contains(&thread.pid) && feeds(thread.activity) {
            (Role::Worker, "worker".to_owned())
        } else {
            (Role::Helper, thread.name.to_owned())
        };
        roles.push(ThreadRole {
            pid: thread.pid,
            python_thread_id: thread.python_thread_id,
            os_thread_id: thread.os_thread_id,
            thread: thread.name.to_owned(),
            role,
            label,
        });
    }
    roles.sort_by(|a, b| {
        (a.role, a.pid, a.python_thread_id).cmp(&(b.role, b.pid, b.python_thread_id))
    });
    Roles { threads: roles }
}

/// Whether any followed stack of `pid`'s threads runs a DataLoader worker's loop.
fn runs_dataloader_worker(table: &StackTable, threads: &[ThreadFacts<'_>], pid: u32) -> bool {
    threads
        .iter()
        .filter(|t| t.pid == pid)
        .flat_map(|t| t.activity.stacks.keys())
        .filter_map(|&id| table.stacks().get(id as usize))
        .any(|stack| {
            stack.frames.iter().any(|&f| {
                table
                    .frame(f)
                    .and_then(|frame| frame.function)
                    .and_then(|id| table.function(id))
                    .is_some_and(|key| {
                        key.function.as_ref() == "_worker_loop"
                            && key.file.ends_with("utils/data/_utils/worker.py")
                    })
            })
        })
}

/// Whether a process's main thread works while the GPU idles (or, without GPU data, at all).
fn feeds(activity: &Activity) -> bool {
    let side = if activity.totals.gpu_idle.total() > 0 {
        activity.totals.gpu_idle
    } else {
        activity.totals.all()
    };
    side.running_share()
        .is_some_and(|share| share >= FEEDER_MIN_RUNNING)
}

/// How much more a thread runs while the GPU is busy than while it idles.
fn contrast(busy: RunWait, idle: RunWait) -> Option<f64> {
    if busy.total() < MIN_SIDE_SAMPLES || idle.total() < MIN_SIDE_SAMPLES {
        return None;
    }
    Some(busy.running_share()? - idle.running_share()?)
}

fn choose_trainer<'a>(
    candidates: &[&'a ThreadFacts<'a>],
    root_pid: u32,
) -> Option<&'a ThreadFacts<'a>> {
    // A native thread (torch's autograd engine runs the backward pass and its Python hooks on
    // one) runs only while the GPU works and would stand out; the loop is a Python thread.
    let standing_out = candidates
        .iter()
        .filter(|t| t.named)
        .filter_map(|t| {
            let a = &t.activity.totals;
            contrast(a.gpu_busy, a.gpu_idle).map(|c| (c, *t))
        })
        .filter(|(c, _)| *c >= TRAINER_CONTRAST)
        .max_by(|a, b| a.0.total_cmp(&b.0).then(b.1.pid.cmp(&a.1.pid)));
    if let Some((_, t)) = standing_out {
        return Some(t);
    }
    let main_of = |pid: u32| {
        candidates
            .iter()
            .find(|t| t.pid == pid && t.name == "MainThread")
            .copied()
    };
    main_of(root_pid)
        .or_else(|| {
            candidates
                .iter()
                .filter(|t| t.name == "MainThread")
                .max_by_key(|t| (t.activity.totals.all().total(), std::cmp::Reverse(t.pid)))
                .copied()
        })
        .or_else(|| {
            candidates
                .iter()
                .max_by_key(|t| (t.activity.totals.all().running, std::cmp::Reverse(t.pid)))
                .copied()
        })
}

/// The facts of a recording's threads, handed to `f`.
pub fn with_facts<R>(aggregator: &Aggregator, f: impl FnOnce(&[ThreadFacts<'_>]) -> R) -> R {
    let facts: Vec<ThreadFacts<'_>> = aggregator
        .threads
        .iter()
        .map(|t| ThreadFacts {
            pid: t.pid,
            python_thread_id: t.python_thread_id,
            os_thread_id: t.os_thread_id,
            name: &t.name,
            named: t.named,
            activity: &t.activity,
        })
        .collect();
    f(&facts)
}

/// The roles of a recording's threads; `root_pid` is the target's own process.
pub fn of(aggregator: &Aggregator, root_pid: u32) -> Roles {
    let processes: Vec<ProcessFacts<'_>> = aggregator
        .processes
        .iter()
        .map(|p| ProcessFacts {
            pid: p.pid,
            command_line: &p.command_line,
        })
        .collect();
    with_facts(aggregator, |facts| {
        assign(&aggregator.table, facts, &processes, root_pid)
    })
}

/// What the trainer and its feeders did while the GPU idled, by `roles` (from [`of`]).
pub fn while_idle_of(aggregator: &Aggregator, roles: &Roles) -> while_idle::WhileIdle {
    with_facts(aggregator, |facts| {
        while_idle::while_idle(&aggregator.table, facts, roles)
    })
}
