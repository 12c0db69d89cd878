//! Roles: the job read as the people who run it read it.
//!
//! - the **trainer**: the thread that drives the GPU. Among the Python threads of processes that
//!   are neither DataLoader workers nor helpers, and that are not pool threads running others'
//!   work (and, where NVML lists the processes with a compute context and one of the job's is
//!   listed, only those of listed processes), the one whose stacks change most with the GPU's state (what it does while the GPU
//!   idles differs from what it does while it is busy, [`the_loop::stack_change`]); a thread doing the
//!   same whatever the GPU does is a helper, however busy. Where no thread changes that way
//!   (the GPU never idles, or its rhythm is faster than NVML's averaging shows): the thread
//!   found by its hand-offs, else the thread seen in GPU work (a synchronisation, torch's
//!   modules, autograd or optimizers), else the target's main thread unless it only waits in
//!   a `join` for a loop in a thread of its own. Without GPU data the same role, the
//!   **loop**, is found by its hand-offs (`handoff.rs`): the thread that again and again takes
//!   work from others through a queue, a pipe or a future and computes. A program with no such
//!   thread (and no GPU data) has no roles: threads are threads. The loop is one role, however
//!   found (`Roles::found_by`): the step, `if_fixed` and every view read the role.
//! - its **feeders**: the other processes of the tree that hand it data: DataLoader workers,
//!   recognised by their frames (`_worker_loop` of `torch/utils/data/_utils/worker.py`) and
//!   numbered in the order they were started, and any other process started by
//!   `multiprocessing` or whose main thread works while the GPU idles (`worker`); and the threads of a pool (`concurrent.futures`,
//!   `multiprocessing.pool`) in the trainer's process (`feeder_thread`): the trainer waits on
//!   their futures.
//! - **helpers**: everything else (queue feeder threads, resource sharers, pin-memory threads,
//!   watchdogs, metrics and logging threads, launchers: the target's own process when the
//!   trainer runs in another): shown, never blamed.
//!
//! Roles are worked out when they are asked for, from the threads' activity the fold keeps
//! (`fold/activity.rs`), so a report over a window and the live `top` read them the same way.

pub mod handoff;
pub mod step;
mod the_loop;
pub mod while_idle;

use std::collections::BTreeSet;

use serde::{Deserialize, Serialize};

use crate::fold::{Activity, Aggregator, StackTable};

use the_loop::{choose_trainer, in_listed_processes, loop_by_handoffs};

/// A trainer stands out when what it does while the GPU idles differs from what it does while
/// the GPU is busy by at least this share of its samples ([`the_loop::stack_change`]).
const TRAINER_CHANGE: f64 = 0.25;
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
    /// A thread of a pool in the trainer's process whose work the trainer waits on.
    FeederThread,
    Helper,
}

/// How the loop was found: the thread whose stacks change most with the GPU's state, or,
/// without GPU data, the thread that again and again takes work from others through a
/// hand-off and computes (`summary.json`'s `loop_found_by`).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum LoopFoundBy {
    Gpu,
    HandOffs,
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
    /// Its process as the roles count processes: its group of like processes (`fold/kinds.rs`)
    /// or itself, and how many processes that stands for at once.
    pub process: (u32, u64),
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
    /// How the loop was found; `None` without one.
    pub found_by: Option<LoopFoundBy>,
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
        self.threads.iter().filter(|t| t.role.feeds())
    }
}

impl Role {
    /// Whether this role hands the trainer its batches.
    pub fn feeds(self) -> bool {
        matches!(
            self,
            Role::DataloaderWorker | Role::Worker | Role::FeederThread
        )
    }
}

/// Works out every thread's role. `root_pid` is the target's own process.
/// `compute_pids`: the pids NVML listed with a compute context (`None`: no list).
pub fn assign(
    table: &StackTable,
    threads: &[ThreadFacts<'_>],
    processes: &[ProcessFacts<'_>],
    root_pid: u32,
    compute_pids: Option<&BTreeSet<u32>>,
) -> Roles {
    // The loop is one role found two ways: by the GPU's correlation where there is GPU data,
    // by its hand-offs where there is none. Without either, threads are threads.
    let has_gpu_data = threads.iter().any(|t| {
        let a = &t.activity.totals;
        a.gpu_idle.total() + a.gpu_busy.total() > 0
    });
    let kinds = Kinds::of(table, threads, processes, root_pid);
    let candidates: Vec<&ThreadFacts<'_>> = threads
        .iter()
        .filter(|t| {
            !kinds.loader_workers.contains(&t.pid)
                && !kinds.helper_processes.contains(&t.pid)
                && !kinds.in_pool(t)
        })
        .collect();
    let (trainer, found_by) = if has_gpu_data {
        let candidates = in_listed_processes(candidates, compute_pids);
        (choose_trainer(table, &candidates, &kinds), LoopFoundBy::Gpu)
    } else {
        match loop_by_handoffs(table, &candidates, &kinds) {
            Some(consumer) => (Some(consumer), LoopFoundBy::HandOffs),
            None => return Roles::default(),
        }
    };
    let mut roles: Vec<ThreadRole> = threads
        .iter()
        .map(|thread| {
            let (role, label) = kinds.role_of(thread, trainer, found_by);
            ThreadRole {
                pid: thread.pid,
                python_thread_id: thread.python_thread_id,
                os_thread_id: thread.os_thread_id,
                thread: thread.name.to_owned(),
                role,
                label,
            }
        })
        .collect();
    roles.sort_by(|a, b| {
        (a.role, a.pid, a.python_thread_id).cmp(&(b.role, b.pid, b.python_thread_id))
    });
    Roles {
        threads: roles,
        found_by: trainer.map(|_| found_by),
    }
}

/// What the threads and processes are before the trainer is chosen.
struct Kinds {
    /// Processes running a DataLoader worker's loop, in pid order.
    loader_workers: Vec<u32>,
    /// Processes that are helpers by their command line.
    helper_processes: Vec<u32>,
    /// Processes started by `multiprocessing`.
    mp_workers: Vec<u32>,
    /// Pool threads, by (pid, Python thread id).
    pool_threads: Vec<(u32, u64)>,
    /// The target's own process.
    root_pid: u32,
}

impl Kinds {
    fn of(
        table: &StackTable,
        threads: &[ThreadFacts<'_>],
        processes: &[ProcessFacts<'_>],
        root_pid: u32,
    ) -> Kinds {
        let mut pids: Vec<u32> = threads.iter().map(|t| t.pid).collect();
        pids.sort_unstable();
        pids.dedup();
        let command_line = |pid: u32| {
            processes
                .iter()
                .find(|p| p.pid == pid)
                .map_or("", |p| p.command_line)
        };
        Kinds {
            loader_workers: pids
                .iter()
                .copied()
                .filter(|&pid| runs_dataloader_worker(table, threads, pid))
                .collect(),
            helper_processes: pids
                .iter()
                .copied()
                .filter(|&pid| crate::jobs::helper_by_command_line(command_line(pid)).is_some())
                .collect(),
            // Processes started by `multiprocessing` (other than its helpers) are workers,
            // however little they run: a worker that mostly reads is a pipeline all the same.
            mp_workers: threads
                .iter()
                .filter(|t| t.name == "MainThread" && t.pid != root_pid)
                .filter(|t| {
                    runs_function(table, t, &[("_bootstrap", "multiprocessing/process.py")])
                })
                .map(|t| t.pid)
                .collect(),
            pool_threads: threads
                .iter()
                .filter(|t| runs_pool_work(table, t))
                .map(|t| (t.pid, t.python_thread_id))
                .collect(),
            root_pid,
        }
    }

    /// Whether `pid` is the target's process and the trainer runs in another: the target
    /// started the job (a launcher, a `multiprocessing` parent) and does not feed it, whatever
    /// it does while it waits.
    fn launched(&self, pid: u32, trainer: Option<&ThreadFacts<'_>>) -> bool {
        pid == self.root_pid && trainer.is_some_and(|t| t.pid != pid)
    }

    fn in_pool(&self, t: &ThreadFacts<'_>) -> bool {
        self.pool_threads.contains(&(t.pid, t.python_thread_id))
    }

    /// A thread's role and label, once the trainer is known.
    fn role_of(
        &self,
        thread: &ThreadFacts<'_>,
        trainer: Option<&ThreadFacts<'_>>,
        found_by: LoopFoundBy,
    ) -> (Role, String) {
        let is_trainer = trainer
            .is_some_and(|t| t.pid == thread.pid && t.python_thread_id == thread.python_thread_id);
        let in_trainers_process = trainer.is_some_and(|t| t.pid == thread.pid);
        let main = thread.name == "MainThread";
        if is_trainer {
            let word = match found_by {
                LoopFoundBy::Gpu => "trainer",
                LoopFoundBy::HandOffs => "loop",
            };
            (Role::Trainer, format!("{word} ({})", thread.name))
        } else if main && (in_trainers_process || self.launched(thread.pid, trainer)) {
            (Role::Helper, thread.name.to_owned())
        } else if main && self.loader_workers.contains(&thread.pid) {
            let n = self
                .loader_workers
                .iter()
                .position(|&p| p == thread.pid)
                .unwrap_or(0);
            (Role::DataloaderWorker, format!("DataLoader worker {n}"))
        } else if main
            && !self.helper_processes.contains(&thread.pid)
            && (feeds(thread.activity) || self.mp_workers.contains(&thread.pid))
        {
            (Role::Worker, "worker".to_owned())
        } else if self.in_pool(thread) && in_trainers_process {
            (
                Role::FeederThread,
                format!("feeder thread ({})", thread.name),
            )
        } else {
            (Role::Helper, thread.name.to_owned())
        }
    }
}

/// Whether any followed stack of `pid`'s threads runs a DataLoader worker's loop.
fn runs_dataloader_worker(table: &StackTable, threads: &[ThreadFacts<'_>], pid: u32) -> bool {
    threads
        .iter()
        .filter(|t| t.pid == pid)
        .any(|t| runs_function(table, t, &[("_worker_loop", "utils/data/_utils/worker.py")]))
}

/// Whether a thread is a pool's: it runs work items others submit (`concurrent.futures`'
/// thread pool, `multiprocessing.pool`'s workers).
fn runs_pool_work(table: &StackTable, thread: &ThreadFacts<'_>) -> bool {
    runs_function(
        table,
        thread,
        &[
            ("_worker", "concurrent/futures/thread.py"),
            ("worker", "multiprocessing/pool.py"),
        ],
    )
}

/// Whether a function (`f` or, qualified as Python 3.11+ names methods, `Class.f`) is `name`.
pub(crate) fn named(function: &str, name: &str) -> bool {
    function == name
        || function
            .strip_suffix(name)
            .is_some_and(|class| class.ends_with('.'))
}

/// Whether any followed stack of a thread holds one of `functions` (name, file suffix).
fn runs_function(table: &StackTable, thread: &ThreadFacts<'_>, functions: &[(&str, &str)]) -> bool {
    stacks_run(table, thread.activity.stacks.keys().copied(), functions)
}

/// Whether any of `stacks` holds one of `functions` (name, file suffix).
pub(crate) fn stacks_run(
    table: &StackTable,
    stacks: impl Iterator<Item = u32>,
    functions: &[(&str, &str)],
) -> bool {
    stacks
        .filter_map(|id| table.stacks().get(id as usize))
        .any(|stack| {
            calls_of(table, &stack.frames).any(|(key, _)| {
                functions
                    .iter()
                    .any(|(name, file)| named(&key.function, name) && key.file.ends_with(file))
            })
        })
}

/// A stack's frames that name a function, with where its file is from.
pub(crate) fn calls_of<'a>(
    table: &'a StackTable,
    frames: &'a [crate::fold::FrameId],
) -> impl Iterator<Item = (&'a crate::fold::FunctionKey, stackscope_event::FileOrigin)> + 'a {
    frames.iter().filter_map(move |&f| {
        let entry = table.frame(f)?;
        Some((table.function(entry.function?)?, entry.origin))
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
            process: aggregator.processes.counted_as(t.pid),
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
        assign(
            &aggregator.table,
            facts,
            &processes,
            root_pid,
            aggregator.compute_pids.as_ref(),
        )
    })
}

/// What the trainer and its feeders did while the GPU idled, by `roles` (from [`of`]); over
/// the whole recording where the loop was found by its hand-offs (there is no GPU data).
pub fn while_idle_of(aggregator: &Aggregator, roles: &Roles) -> while_idle::WhileIdle {
    let window = match roles.found_by {
        Some(LoopFoundBy::HandOffs) => while_idle::Window::All,
        _ => while_idle::Window::GpuIdle,
    };
    with_facts(aggregator, |facts| {
        while_idle::while_idle(&aggregator.table, facts, roles, window)
    })
}

/// The trainer's step broken down (`roles/step.rs`), and who held the GIL while it waited for
/// it when those waits are [`step::GIL_HOLDER_MIN_SHARE`] of the step or more. Without GPU
/// data (the loop found by its hand-offs) `gpu_wait` is 0: its waits are `other_wait`.
pub fn step_of(
    aggregator: &Aggregator,
    roles: &Roles,
) -> Option<(step::Step, Option<step::GilHolder>)> {
    let role = roles.trainer()?;
    let trainer = aggregator
        .threads
        .iter()
        .find(|t| t.pid == role.pid && t.python_thread_id == role.python_thread_id)?;
    let mut step = step::step(&aggregator.table, &trainer.activity)?;
    if roles.found_by == Some(LoopFoundBy::HandOffs) {
        // Without GPU data no wait is known to be the GPU's: a synchronisation is a wait.
        step.breakdown.other_wait += step.breakdown.gpu_wait;
        step.breakdown.gpu_wait = 0.0;
    }
    let holder = (step.breakdown.gil_wait >= step::GIL_HOLDER_MIN_SHARE)
        .then(|| gil_holder(aggregator, &trainer.activity))
        .flatten();
    Some((step, holder))
}

/// The thread that held the GIL most while `activity`'s thread waited for it, and where it ran.
fn gil_holder(aggregator: &Aggregator, activity: &Activity) -> Option<step::GilHolder> {
    let total: u64 = activity.gil_holders.values().sum();
    let (&(pid, python_thread_id, os_thread_id), &n) = activity
        .gil_holders
        .iter()
        .max_by_key(|(k, &n)| (n, std::cmp::Reverse(**k)))?;
    let holder = aggregator.threads.iter().find(|t| {
        t.pid == pid
            && t.python_thread_id == python_thread_id
            && t.os_thread_id.unwrap_or(0) == os_thread_id
    })?;
    let table = &aggregator.table;
    let frame = holder
        .activity
        .stacks
        .iter()
        .max_by_key(|(&id, c)| (c.all().running, std::cmp::Reverse(id)))
        .and_then(|(&id, _)| table.stacks().get(id as usize))
        .and_then(|entry| {
            entry
                .frames
                .iter()
                .rev()
                .find(|&&f| table.frame(f).is_some_and(|e| e.function.is_some()))
                .and_then(|&f| table.frame(f).map(|e| e.label.clone()))
        });
    Some(step::GilHolder {
        thread: holder.name.clone(),
        frame,
        share: n as f64 / total.max(1) as f64,
    })
}
