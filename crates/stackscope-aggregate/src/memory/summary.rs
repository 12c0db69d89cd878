//! `summary.json`'s `memory` and the timeline's points: every process read with its role,
//! the cgroup, and the verdict over them.

use foldhash::HashMap;
use stackscope_event::{HowEnded, Timestamp};

use super::ended::Identity;
use super::roles::{process_roles, ProcessRole};
use super::series::trend;
use super::timeline::{GpuProcess, ProcessState};
use super::verdict::{verdict, Judged, VerdictInput};
use super::{
    CgroupMemory, CgroupPoint, FoldedProcessMemory, MemoryPoint, MemoryState, MemorySummary,
    ProcessMemory,
};
use crate::fold::{Aggregator, FrameId, FunctionId, StackId, StackTable};
use crate::jobs::process_role;

/// Every process read and kept whole (alive, or ended and kept), by pid.
fn pids_read(memory: &MemoryState) -> Vec<u32> {
    let mut pids: Vec<u32> = memory
        .processes
        .by_pid
        .keys()
        .copied()
        .chain(memory.ended.kept.iter().map(|p| p.pid))
        .collect();
    pids.sort_unstable();
    pids.dedup();
    pids
}

/// What is kept of one process, alive or ended.
struct Kept<'a> {
    rss: &'a ProcessState,
    gpu: Option<&'a GpuProcess>,
    charged: Option<&'a HashMap<StackId, u64>>,
    identity: Option<&'a Identity>,
    oom_killed: Option<Timestamp>,
}

fn kept(memory: &MemoryState, pid: u32) -> Option<Kept<'_>> {
    if let Some(rss) = memory.processes.by_pid.get(&pid) {
        return Some(Kept {
            rss,
            gpu: memory.gpu.by_pid.get(&pid),
            charged: memory.attribution.by_pid.get(&pid).map(|c| &c.by_stack),
            identity: memory.identities.get(&pid),
            oom_killed: None,
        });
    }
    let ended = memory.ended.kept(pid)?;
    Some(Kept {
        rss: &ended.rss,
        gpu: ended.gpu.as_ref(),
        charged: Some(&ended.charged),
        identity: ended.identity.as_ref(),
        oom_killed: ended.oom_killed,
    })
}

/// The role of each of `pids`; a process the aggregate's tables no longer know (one that
/// ended, folded there) is named by the command line and rank kept with its memory.
fn roles_of(agg: &Aggregator, target: u32, pids: &[u32]) -> HashMap<u32, ProcessRole> {
    let mut roles = process_roles(agg, target, pids);
    for (&pid, role) in roles.iter_mut() {
        if role.name != "process" {
            continue;
        }
        if let Some(identity) = kept(&agg.memory, pid).and_then(|k| k.identity) {
            role.name = match identity.rank {
                Some(rank) => format!("rank {rank}"),
                None => process_role(pid, target, None, &identity.command_line),
            };
        }
    }
    roles
}

/// Every process's readings with its role and GPU memory, oldest first.
pub(crate) fn points(agg: &Aggregator, target: u32) -> Vec<MemoryPoint> {
    let memory = &agg.memory;
    let pids = pids_read(memory);
    let roles = roles_of(agg, target, &pids);
    let mut out = Vec::new();
    for pid in pids {
        let Some(kept) = kept(memory, pid) else {
            continue;
        };
        let role = roles.get(&pid).map(|r| r.name.clone()).unwrap_or_default();
        for r in kept.rss.points() {
            out.push(MemoryPoint {
                secs: r.time.seconds_since(agg.start),
                pid,
                role: role.clone(),
                rss: r.rss,
                private: r.private,
                shared: r.shared,
                swap: r.swap,
                gpu_memory: kept.gpu.and_then(|g| g.at(r.time)),
            });
        }
    }
    out.sort_by(|a, b| a.secs.total_cmp(&b.secs).then(a.pid.cmp(&b.pid)));
    out
}

pub(crate) fn cgroup_points(agg: &Aggregator) -> Vec<CgroupPoint> {
    let Some(cgroup) = &agg.memory.cgroup else {
        return Vec::new();
    };
    cgroup
        .points()
        .into_iter()
        .map(|r| CgroupPoint {
            secs: r.time.seconds_since(agg.start),
            usage: r.usage,
            limit: r.limit,
            oom_kills: r.oom_kills,
        })
        .collect()
}

/// `summary.json`'s `memory`; `None` when nothing of memory was read.
pub(crate) fn summary(agg: &Aggregator, target: u32) -> Option<MemorySummary> {
    let memory = &agg.memory;
    if memory.processes.by_pid.is_empty() && memory.ended.ended == 0 && memory.cgroup.is_none() {
        return None;
    }
    let mut killed = oom_killed(agg);
    for ended in &memory.ended.kept {
        if let Some(at) = ended.oom_killed {
            killed.entry(ended.pid).or_insert(at);
        }
    }
    let mut pids = pids_read(memory);
    pids.extend(killed.keys().copied());
    pids.sort_unstable();
    pids.dedup();
    let roles = roles_of(agg, target, &pids);
    let judged: Vec<Judged<'_>> = pids
        .iter()
        .map(|&pid| {
            let kept = kept(memory, pid);
            Judged {
                pid,
                role: roles.get(&pid).map(|r| r.name.clone()).unwrap_or_default(),
                parent: roles.get(&pid).is_some_and(|r| r.parent),
                rss: kept.as_ref().map(|k| k.rss),
                gpu: kept.as_ref().and_then(|k| k.gpu),
                top: kept
                    .as_ref()
                    .and_then(|k| k.charged)
                    .and_then(|c| top_function(&agg.table, c)),
                oom_killed: killed
                    .get(&pid)
                    .copied()
                    .or(kept.as_ref().and_then(|k| k.oom_killed)),
            }
        })
        .collect();
    let mut processes: Vec<ProcessMemory> = judged
        .iter()
        .filter_map(|p| process_memory(agg, p))
        .collect();
    processes.sort_by(|a, b| b.rss_peak.cmp(&a.rss_peak).then(a.pid.cmp(&b.pid)));
    let input = VerdictInput {
        start: agg.start,
        since: agg.startup.end(),
        processes: judged,
        cgroup: memory.cgroup.as_ref(),
        gpu_memory: one_gpu_memory(agg.gpu_timeline()),
    };
    Some(MemorySummary {
        processes,
        processes_ended: memory.ended.ended,
        processes_folded: memory.ended.folded,
        folded: folded(agg),
        cgroup: memory.cgroup.as_ref().map(|c| CgroupMemory {
            usage_peak: c.usage_peak,
            limit: c.limit(),
            oom_kills: c.oom_kills(),
        }),
        verdict: verdict(&input),
        growth_unattributed_bytes: memory.attribution.unattributed
            + memory.attribution.pending_unmatched_bytes(),
    })
}

/// The processes folded, by kind, most first.
fn folded(agg: &Aggregator) -> Vec<FoldedProcessMemory> {
    let mut out: Vec<FoldedProcessMemory> = agg
        .memory
        .ended
        .kinds
        .iter()
        .map(|k| FoldedProcessMemory {
            kind: k.kind.clone(),
            rank: k.rank,
            processes: k.processes,
            rss_peak: k.rss_peak,
            rss_peak_mean: u64::try_from(k.rss_peak_sum / u128::from(k.processes.max(1)))
                .unwrap_or(u64::MAX),
            gpu_memory_peak: k.gpu_memory_peak,
            first_secs: k.first.seconds_since(agg.start),
            last_secs: k.last.seconds_since(agg.start),
        })
        .collect();
    out.sort_by(|a, b| {
        b.processes
            .cmp(&a.processes)
            .then(a.kind.cmp(&b.kind))
            .then(a.rank.cmp(&b.rank))
    });
    out
}

/// One process's figures, when it was read.
fn process_memory(agg: &Aggregator, p: &Judged<'_>) -> Option<ProcessMemory> {
    let state = p.rss?;
    Some(ProcessMemory {
        pid: p.pid,
        role: p.role.clone(),
        rss_start: state.first.rss,
        rss_peak: state.peak,
        rss_end: state.last.rss,
        // Its trend's: the fall as it exits is no part of how it grew.
        growth_bytes_per_s: trend(&state.points(), &state.fit, None)
            .and_then(|t| t.fit.slope())
            .unwrap_or(0.0),
        private_start: state.smaps_first.and_then(|r| r.private),
        private_end: state.smaps_last.and_then(|r| r.private),
        gpu_memory_peak: p.gpu.map(|g| g.peak),
        first_secs: state.first.time.seconds_since(agg.start),
        last_secs: state.last.time.seconds_since(agg.start),
    })
}

/// The processes of the job the OOM killer ended, with when (`processes_ended`' `oom_kill`).
fn oom_killed(agg: &Aggregator) -> HashMap<u32, Timestamp> {
    agg.processes
        .ends()
        .filter(|(_, _, how)| matches!(how, HowEnded::OomKilled(_)))
        .map(|(pid, exited, _)| (pid, exited))
        .collect()
}

/// The function that ran most while a process grew: the function of the innermost frame of
/// the job's own code of each stack charged (else of its innermost code frame), by bytes,
/// named `function (file:line)` by its line charged most; with its share of the process's
/// charged growth.
pub(crate) fn top_function(
    table: &StackTable,
    by_stack: &HashMap<StackId, u64>,
) -> Option<(String, f64)> {
    let total: u64 = by_stack.values().sum();
    if total == 0 {
        return None;
    }
    let mut by_function: HashMap<FunctionId, (u64, HashMap<FrameId, u64>)> = HashMap::default();
    for (&stack, &bytes) in by_stack {
        let Some((function, frame)) = table
            .stacks()
            .get(stack as usize)
            .and_then(|s| place_of(table, &s.frames))
        else {
            continue;
        };
        let entry = by_function.entry(function).or_default();
        entry.0 += bytes;
        *entry.1.entry(frame).or_default() += bytes;
    }
    let (_, (bytes, frames)) = by_function
        .into_iter()
        .max_by(|a, b| a.1 .0.cmp(&b.1 .0).then(b.0.cmp(&a.0)))?;
    let (&frame, _) = frames
        .iter()
        .max_by(|a, b| a.1.cmp(b.1).then(b.0.cmp(a.0)))?;
    let label = table.frame(frame)?.label.clone();
    Some((label, bytes as f64 / total as f64))
}

/// The latest `(total, used)` memory of the one GPU the recording polled; `None` with several
/// (a process's GPU memory is summed over them) or none.
fn one_gpu_memory(readings: &[stackscope_event::GpuSample]) -> Option<(u64, u64)> {
    let device = readings.first()?.device;
    if readings.iter().any(|r| r.device != device) {
        return None;
    }
    readings
        .iter()
        .rev()
        .find_map(|r| Some((r.memory_total_bytes?, r.memory_used_bytes?)))
}

/// The frame a stack is at, with its function: its innermost frame of the job's own code,
/// else its innermost code frame (as the roles place a thread's samples).
fn place_of(table: &StackTable, frames: &[FrameId]) -> Option<(FunctionId, FrameId)> {
    let entry = |f: FrameId| table.frame(f).filter(|e| e.function.is_some());
    let at = crate::jobs::place_in(frames.iter().rev().copied(), |f| entry(f).map(|e| e.origin))?;
    Some((entry(at)?.function?, at))
}
