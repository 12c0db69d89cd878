//! Finding the loop, one role two ways: where there is GPU data, the thread whose stacks change
//! most with the GPU's state ([`choose_trainer`]); where there is none, the thread that again
//! and again takes work through a hand-off ([`loop_by_handoffs`], `handoff.rs`). Everything
//! after reads the role, not the way it was found.

use std::collections::BTreeSet;

use super::handoff::{self, HandOffs};
use super::{Kinds, ThreadFacts, TRAINER_CHANGE};
use crate::fold::{Activity, StackTable};
use crate::gpu::MIN_SIDE_SAMPLES;

/// How much what a thread does changes with the GPU's state: the share of its samples that
/// would have to move for its GPU-idle samples to look like its GPU-busy ones (the total
/// variation distance of the two), by where they are (the innermost frame of the job's own
/// code, else the innermost code frame) and whether they ran. A thread spinning in one
/// function, or waiting in one place, scores 0 whatever the GPU does; the loop that waits for
/// a batch while the GPU idles and on the GPU (or launches) while it works scores near 1.
/// `None` with too few samples on either side.
pub fn stack_change(table: &StackTable, activity: &Activity) -> Option<f64> {
    let totals = &activity.totals;
    let (idle_n, busy_n) = (totals.gpu_idle.total(), totals.gpu_busy.total());
    if idle_n < MIN_SIDE_SAMPLES || busy_n < MIN_SIDE_SAMPLES {
        return None;
    }
    let mut by_place: foldhash::HashMap<(Option<u32>, bool), (u64, u64)> = Default::default();
    for (&stack, counts) in &activity.stacks {
        let place = table
            .stacks()
            .get(stack as usize)
            .and_then(|entry| place_of(table, &entry.frames));
        for (running, idle, busy) in [
            (true, counts.gpu_idle.running, counts.gpu_busy.running),
            (false, counts.gpu_idle.waiting, counts.gpu_busy.waiting),
        ] {
            let slot = by_place.entry((place, running)).or_default();
            slot.0 += idle;
            slot.1 += busy;
        }
    }
    let distance: f64 = by_place
        .values()
        .map(|&(idle, busy)| (idle as f64 / idle_n as f64 - busy as f64 / busy_n as f64).abs())
        .sum();
    Some(distance / 2.0)
}

/// The function a stack is at: its innermost frame of the job's own code, else its innermost
/// code frame.
fn place_of(table: &StackTable, frames: &[crate::fold::FrameId]) -> Option<u32> {
    let entry = |f: crate::fold::FrameId| table.frame(f).filter(|e| e.function.is_some());
    let at = crate::jobs::place_in(frames.iter().rev().copied(), |f| entry(f).map(|e| e.origin))?;
    entry(at)?.function
}

/// The candidates of the processes NVML lists with a compute context, when any of them is
/// listed: the GPU is driven from a process that holds a context, whatever its parent or a
/// sibling does in rhythm with it. All of them when nothing is listed or none of the job's is
/// (an old driver or log, a job whose context lives in a process stackscope does not follow).
pub(super) fn in_listed_processes<'a>(
    candidates: Vec<&'a ThreadFacts<'a>>,
    compute_pids: Option<&BTreeSet<u32>>,
) -> Vec<&'a ThreadFacts<'a>> {
    let Some(listed) = compute_pids else {
        return candidates;
    };
    if !candidates.iter().any(|t| listed.contains(&t.pid)) {
        return candidates;
    }
    candidates
        .into_iter()
        .filter(|t| listed.contains(&t.pid))
        .collect()
}

pub(super) fn choose_trainer<'a>(
    table: &StackTable,
    candidates: &[&'a ThreadFacts<'a>],
    kinds: &Kinds,
) -> Option<&'a ThreadFacts<'a>> {
    // A native thread (torch's autograd engine runs the backward pass and its Python hooks on
    // one) runs only while the GPU works and would stand out; the loop is a Python thread.
    let standing_out = candidates
        .iter()
        .filter(|t| t.named)
        .filter_map(|t| stack_change(table, t.activity).map(|c| (c, *t)))
        .filter(|(c, _)| *c >= TRAINER_CHANGE)
        .max_by(|a, b| a.0.total_cmp(&b.0).then(b.1.pid.cmp(&a.1.pid)));
    if let Some((_, t)) = standing_out {
        return Some(t);
    }
    // No thread changes with the GPU (it never idles, or its rhythm is faster than NVML's
    // averaging shows): the loop as found without GPU data, by its hand-offs; else the main
    // thread, unless it only waits for other threads to end (a loop in a thread of its own).
    if let Some(consumer) = loop_by_handoffs(table, candidates, kinds) {
        return Some(consumer);
    }
    let working: Vec<&'a ThreadFacts<'a>> = candidates
        .iter()
        .filter(|t| !joins_others(table, t.activity))
        .copied()
        .collect();
    // The thread seen in GPU work: a synchronisation, torch's modules, autograd or optimizers.
    let in_gpu_work = working
        .iter()
        .filter(|t| t.named)
        .map(|t| (gpu_work_samples(table, t.activity), *t))
        .filter(|(n, _)| *n > 0)
        .max_by_key(|(n, t)| (*n, std::cmp::Reverse((t.pid, t.python_thread_id))));
    if let Some((_, t)) = in_gpu_work {
        return Some(t);
    }
    let main_of = |pid: u32| {
        working
            .iter()
            .find(|t| t.pid == pid && t.name == "MainThread")
            .copied()
    };
    main_of(kinds.root_pid)
        .or_else(|| {
            working
                .iter()
                .filter(|t| t.name == "MainThread")
                .max_by_key(|t| (t.activity.totals.all().total(), std::cmp::Reverse(t.pid)))
                .copied()
        })
        .or_else(|| {
            working
                .iter()
                .max_by_key(|t| (t.activity.totals.all().running, std::cmp::Reverse(t.pid)))
                .copied()
        })
        .or_else(|| candidates.first().copied())
}

/// Files of torch's that only the loop runs: the forward pass, the backward, the optimizer
/// step, the device's calls.
const GPU_WORK_FILES: &[&str] = &[
    "torch/nn/modules/",
    "torch/autograd/",
    "torch/optim/",
    "torch/cuda/",
];

/// A thread's samples in GPU work: in a GPU synchronisation (`roles/step.rs`) or a file of
/// [`GPU_WORK_FILES`].
fn gpu_work_samples(table: &StackTable, activity: &Activity) -> u64 {
    activity
        .stacks
        .iter()
        .filter_map(|(&stack, c)| Some((table.stacks().get(stack as usize)?, c)))
        .filter(|(entry, _)| {
            super::calls_of(table, &entry.frames).any(|(key, origin)| {
                super::step::is_gpu_sync(&key.function, origin)
                    || GPU_WORK_FILES.iter().any(|w| key.file.contains(w))
            })
        })
        .map(|(_, c)| c.all().total())
        .sum()
}

/// A thread waits for others to end when at least this share of its samples are in a join.
const JOINING: f64 = 0.8;

/// Whether a thread mostly waits in `Thread.join`: a main thread that started the loop in a
/// thread of its own and waits for it.
fn joins_others(table: &StackTable, activity: &Activity) -> bool {
    let total = activity.totals.all().total();
    let joining: u64 = activity
        .stacks
        .iter()
        .filter(|(&stack, _)| {
            super::stacks_run(
                table,
                std::iter::once(stack),
                &[
                    ("join", "threading.py"),
                    ("_wait_for_tstate_lock", "threading.py"),
                ],
            )
        })
        .map(|(_, c)| c.all().total())
        .sum();
    total > 0 && joining as f64 >= JOINING * total as f64
}

/// Without GPU data, the loop: among the candidates' Python threads, those that take work
/// through hand-offs again and again and compute ([`HandOffs::is_loop`]), the one nearest the
/// top of the job (the target's process, then any process `multiprocessing` did not start:
/// its workers take tasks through a queue too) that computes most. Where none is seen in its
/// hand-off but the job has workers (a loop whose batches are always ready spends next to no
/// time taking them, and sampling misses it), the main thread nearest the top that computes;
/// last, a worker process's loop. `None` when no thread is a loop.
pub(super) fn loop_by_handoffs<'a>(
    table: &StackTable,
    candidates: &[&'a ThreadFacts<'a>],
    kinds: &Kinds,
) -> Option<&'a ThreadFacts<'a>> {
    let tier = |t: &ThreadFacts<'_>| {
        if t.pid == kinds.root_pid {
            2
        } else if kinds.mp_workers.contains(&t.pid) {
            0
        } else {
            1
        }
    };
    let rank = |h: &HandOffs, t: &ThreadFacts<'_>| {
        (
            tier(t),
            h.computing,
            t.name == "MainThread",
            std::cmp::Reverse((t.pid, t.python_thread_id)),
        )
    };
    let named = || {
        candidates
            .iter()
            .filter(|t| t.named)
            .map(|t| (HandOffs::of(table, t.activity), *t))
    };
    let is_worker = |t: &ThreadFacts<'_>| kinds.mp_workers.contains(&t.pid);
    let consumer = named()
        .filter(|(h, t)| h.is_loop() && !is_worker(t))
        .max_by_key(|(h, t)| rank(h, t));
    if let Some((_, t)) = consumer {
        return Some(t);
    }
    let has_workers = !kinds.loader_workers.is_empty() || !kinds.mp_workers.is_empty();
    let computing_main = named()
        .filter(|(h, t)| {
            has_workers
                && t.name == "MainThread"
                && !is_worker(t)
                && h.computing as f64 >= handoff::MIN_ELSEWHERE * h.total as f64
        })
        .max_by_key(|(h, t)| rank(h, t));
    if let Some((_, t)) = computing_main {
        return Some(t);
    }
    // Last, a worker that takes its tasks through a queue: a loop started by
    // `multiprocessing` (a rank of `torch.multiprocessing.spawn`).
    named()
        .filter(|(h, t)| h.is_loop() && is_worker(t))
        .max_by_key(|(h, t)| rank(h, t))
        .map(|(_, t)| t)
}
