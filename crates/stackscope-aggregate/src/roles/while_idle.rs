//! What the trainer and its feeders did while the GPU idled: `summary.json`'s
//! `gpu.while_idle`, and the words of the verdict. Without GPU data the same reading over the
//! whole recording ([`Window::All`]) says where the loop is and what its feeders run
//! (`summary.json`'s `feeders`).
//!
//! The trainer's line is the innermost frame of its GPU-idle samples that lies in the job's own
//! code (not the standard library, not an installed package: [`FileOrigin`]) and that is more
//! frequent while the GPU idles than while it is busy (an inner loop both phases share is not
//! the line, its caller in the data phase is), counted by function (a loop runs over several
//! lines) and named by its commonest line; what it waits in
//! is the call just inside that frame, when its samples there mostly waited. The feeders'
//! function is their top function by self samples over the GPU-idle time.

use std::collections::HashMap;

use serde::{Deserialize, Serialize};
use stackscope_event::FileOrigin;

use super::{Role, Roles, ThreadFacts};
use crate::fold::{FrameId, PhaseCounts, RunWait, StackTable};

/// The trainer while the GPU idled.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct TrainerWhileIdle {
    pub pid: u32,
    pub thread: String,
    /// `function (file:line)`: its innermost frame in the job's own code.
    pub frame: String,
    /// The library call it waits in there, `function (file:line)`; `None` when it ran.
    pub waiting_in: Option<String>,
    /// Of its GPU-idle samples, the share at `frame`.
    pub share: f64,
}

/// One kind of feeder while the GPU idled.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct FeedersWhileIdle {
    /// `dataloader_worker`, `worker` or `feeder_thread`.
    pub role: Role,
    pub pids: Vec<u32>,
    /// How many processes feed at once: a group of like processes (`fold/kinds.rs`, its pid
    /// among `pids`) counts as many as it had alive at once. 0 in older summaries.
    #[serde(default)]
    pub processes: usize,
    /// Their threads: one per process for worker processes, the pool's for feeder threads.
    #[serde(default)]
    pub threads: usize,
    /// Of their samples, the share that ran.
    pub busy_share: f64,
    /// Their top function over the GPU-idle time, `function (file:line)`.
    pub function: Option<String>,
    /// Of their GPU-idle samples, the share in `function`.
    pub share: f64,
}

/// `summary.json`'s `gpu.while_idle`.
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
pub struct WhileIdle {
    pub trainer: Option<TrainerWhileIdle>,
    pub feeders: Vec<FeedersWhileIdle>,
}

impl FeedersWhileIdle {
    /// How many pipelines feed the loop: feeder threads for a pool, else processes.
    pub fn pipelines(&self) -> usize {
        match self.role {
            Role::FeederThread => self.threads,
            _ if self.processes > 0 => self.processes,
            _ => self.pids.len(),
        }
    }
}

impl WhileIdle {
    /// Whether the trainer waited at its line (rather than ran there) most of its idle time.
    pub fn trainer_waits(&self) -> bool {
        self.trainer
            .as_ref()
            .is_some_and(|t| t.waiting_in.is_some())
    }

    /// The feeders that kept busy: at least `min_busy` of their samples ran.
    pub fn busy_feeders(&self, min_busy: f64) -> impl Iterator<Item = &FeedersWhileIdle> {
        self.feeders
            .iter()
            .filter(move |f| f.busy_share >= min_busy)
    }
}

/// Which of a thread's samples are read: those taken while the GPU idled, or, without GPU data,
/// all of them (the loop and its feeders over the whole recording).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Window {
    GpuIdle,
    All,
}

impl Window {
    fn of(self, counts: &PhaseCounts) -> RunWait {
        match self {
            Window::GpuIdle => counts.gpu_idle,
            Window::All => counts.all(),
        }
    }
}

/// Reads `while_idle` from the threads' observations and their roles, over `window`.
pub fn while_idle(
    table: &StackTable,
    threads: &[ThreadFacts<'_>],
    roles: &Roles,
    window: Window,
) -> WhileIdle {
    let trainer = roles.trainer().and_then(|role| {
        let facts = threads
            .iter()
            .find(|t| t.pid == role.pid && t.python_thread_id == role.python_thread_id)?;
        trainer_while_idle(table, facts, window)
    });
    let mut feeders = Vec::new();
    for kind in [Role::DataloaderWorker, Role::Worker, Role::FeederThread] {
        let group: Vec<&ThreadFacts<'_>> = threads
            .iter()
            .filter(|t| {
                roles
                    .of(t.pid, t.python_thread_id)
                    .is_some_and(|r| r.role == kind)
            })
            .collect();
        if let Some(f) = feeders_while_idle(table, &group, kind, window) {
            feeders.push(f);
        }
    }
    WhileIdle { trainer, feeders }
}

/// A frame joins the trainer's line only when its share of the trainer's GPU-idle samples
/// exceeds its share of the GPU-busy ones by this much: a helper both phases run (a shared
/// inner loop) says nothing about the idle time, its caller does.
const MIN_FRAME_RISE: f64 = 0.1;

/// Where a stack's job frame is, and the code frame just inside it (the call it makes), when
/// there is one: the innermost frame of the job's own code that `rises` (is more frequent while
/// the GPU idles than while it is busy); else the innermost of the job's frames; else the
/// innermost code frame.
fn job_frame(
    table: &StackTable,
    frames: &[FrameId],
    rises: impl Fn(FrameId) -> bool,
) -> Option<(FrameId, Option<FrameId>)> {
    let code = |f: &FrameId| {
        table
            .frame(*f)
            .is_some_and(|e| e.function.is_some() && e.origin != FileOrigin::Native)
    };
    let job = |f: FrameId| table.frame(f).is_some_and(|e| e.origin == FileOrigin::Job);
    let at = frames
        .iter()
        .rposition(|&f| job(f) && rises(f))
        .or_else(|| frames.iter().rposition(|&f| job(f)))
        .or_else(|| frames.iter().rposition(code))?;
    let inside = frames[at + 1..].iter().find(|f| code(f)).copied();
    Some((frames[at], inside))
}

/// The trainer's GPU-idle samples at one function of the job's code.
#[derive(Default)]
struct AtFunction {
    samples: RunWait,
    /// By line (frame) of the function.
    frames: HashMap<FrameId, u64>,
    /// Waiting samples by the call they wait in.
    callees: HashMap<FrameId, u64>,
}

/// For each frame, the trainer's GPU-idle and GPU-busy samples whose stack holds it.
fn frame_presence(
    table: &StackTable,
    facts: &ThreadFacts<'_>,
) -> (HashMap<FrameId, (u64, u64)>, u64, u64) {
    let mut presence: HashMap<FrameId, (u64, u64)> = HashMap::new();
    let (mut idle_total, mut busy_total) = (0u64, 0u64);
    for (&stack, counts) in &facts.activity.stacks {
        let (idle, busy) = (counts.gpu_idle.total(), counts.gpu_busy.total());
        let Some(entry) = table.stacks().get(stack as usize) else {
            continue;
        };
        idle_total += idle;
        busy_total += busy;
        let mut seen: Vec<FrameId> = Vec::with_capacity(entry.frames.len());
        for &f in entry.frames.iter() {
            if !seen.contains(&f) {
                seen.push(f);
                let slot = presence.entry(f).or_default();
                slot.0 += idle;
                slot.1 += busy;
            }
        }
    }
    (presence, idle_total, busy_total)
}

fn trainer_while_idle(
    table: &StackTable,
    facts: &ThreadFacts<'_>,
    window: Window,
) -> Option<TrainerWhileIdle> {
    let (presence, idle_total, busy_total) = frame_presence(table, facts);
    let share = |n: u64, total: u64| {
        if total == 0 {
            0.0
        } else {
            n as f64 / total as f64
        }
    };
    let rises = |f: FrameId| {
        presence.get(&f).is_some_and(|&(idle, busy)| {
            share(idle, idle_total) - share(busy, busy_total) >= MIN_FRAME_RISE
        })
    };
    // By function, so that a loop running over several lines counts as one place.
    let mut at: HashMap<u32, AtFunction> = HashMap::new();
    let mut total = 0u64;
    for (&stack, counts) in &facts.activity.stacks {
        let idle = window.of(counts);
        if idle.total() == 0 {
            continue;
        }
        let Some(entry) = table.stacks().get(stack as usize) else {
            continue;
        };
        total += idle.total();
        let Some((frame, inside)) = job_frame(table, &entry.frames, rises) else {
            continue;
        };
        let Some(function) = table.frame(frame).and_then(|f| f.function) else {
            continue;
        };
        let slot = at.entry(function).or_default();
        slot.samples = slot.samples.plus(idle);
        *slot.frames.entry(frame).or_default() += idle.total();
        if let Some(callee) = inside {
            *slot.callees.entry(callee).or_default() += idle.waiting;
        }
    }
    let (_, slot) = at
        .iter()
        .max_by_key(|(&f, s)| (s.samples.total(), std::cmp::Reverse(f)))?;
    let frame = most(&slot.frames)?;
    let waits = slot.samples.waiting * 2 >= slot.samples.total();
    let waiting_in = if waits {
        most(&slot.callees).and_then(|f| label(table, f))
    } else {
        None
    };
    Some(TrainerWhileIdle {
        pid: facts.pid,
        thread: facts.name.to_owned(),
        frame: label(table, frame)?,
        waiting_in,
        share: slot.samples.total() as f64 / total.max(1) as f64,
    })
}

/// The key counted most (ties to the lowest), among those counted at all.
fn most(counts: &HashMap<FrameId, u64>) -> Option<FrameId> {
    counts
        .iter()
        .filter(|(_, &n)| n > 0)
        .max_by_key(|(&f, &n)| (n, std::cmp::Reverse(f)))
        .map(|(&f, _)| f)
}

fn feeders_while_idle(
    table: &StackTable,
    group: &[&ThreadFacts<'_>],
    role: Role,
    window: Window,
) -> Option<FeedersWhileIdle> {
    if group.is_empty() {
        return None;
    }
    let all = group.iter().fold(RunWait::default(), |sum, t| {
        sum.plus(t.activity.totals.all())
    });
    // By function, then by the innermost frame (a line of it) within the function.
    let mut by_function: HashMap<u32, (u64, HashMap<FrameId, u64>)> = HashMap::new();
    let mut idle_total = 0u64;
    for facts in group {
        for (&stack, counts) in &facts.activity.stacks {
            let n = window.of(counts).total();
            let Some(entry) = (n > 0)
                .then(|| table.stacks().get(stack as usize))
                .flatten()
            else {
                continue;
            };
            idle_total += n;
            let innermost = entry.frames.iter().rev().find_map(|&f| {
                let function = table.frame(f)?.function?;
                Some((function, f))
            });
            if let Some((function, frame)) = innermost {
                let slot = by_function.entry(function).or_default();
                slot.0 += n;
                *slot.1.entry(frame).or_default() += n;
            }
        }
    }
    let top = by_function
        .iter()
        .max_by_key(|(&f, s)| (s.0, std::cmp::Reverse(f)));
    let (function, share) = match top {
        Some((_, (n, frames))) => {
            let frame = most(frames);
            (
                frame.and_then(|f| label(table, f)),
                *n as f64 / idle_total.max(1) as f64,
            )
        }
        None => (None, 0.0),
    };
    let mut pids: Vec<u32> = group.iter().map(|t| t.pid).collect();
    pids.sort_unstable();
    pids.dedup();
    let mut counted: Vec<(u32, u64)> = group.iter().map(|t| t.process).collect();
    counted.sort_unstable();
    counted.dedup_by_key(|c| c.0);
    Some(FeedersWhileIdle {
        role,
        pids,
        processes: counted.iter().map(|c| c.1 as usize).sum(),
        threads: group.len(),
        busy_share: all.running_share().unwrap_or(0.0),
        function,
        share,
    })
}

fn label(table: &StackTable, frame: FrameId) -> Option<String> {
    table.frame(frame).map(|f| f.label.clone())
}
