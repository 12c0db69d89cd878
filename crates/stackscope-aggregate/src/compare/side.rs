//! One side of a comparison as `compare.json` shows it, the processes of its job as the stack
//! identity names them, and what differs between two sides besides the change (mismatches).

use std::collections::BTreeSet;

use serde::{Deserialize, Serialize};

use super::CompareInput;
use crate::jobs::JobProcesses;
use crate::roles::Role;
use crate::summary::Summary;
use crate::verdict::{IfFixed, Verdict};

/// `compare.json`'s `before` and `after`.
#[derive(Debug, Clone, Serialize, Deserialize)]
pub struct Side {
    /// `run1`, `run1@0-30`.
    pub label: String,
    pub dir: String,
    pub from_secs: f64,
    pub to_secs: f64,
    pub duration_secs: f64,
    pub samples: u64,
    pub rate_hz: f64,
    /// Processes followed.
    pub processes: u64,
    /// Worker processes (or pool threads) feeding the loop.
    pub workers: u64,
    pub python_version: String,
    /// Whether samples of idle threads were kept (`--idle`).
    pub idle: bool,
    pub gpu_devices: Vec<String>,
    pub verdict: Option<Verdict>,
    pub if_fixed: Option<IfFixed>,
}

impl Side {
    pub fn of(input: &CompareInput) -> Side {
        let s = &input.summary;
        let gpu = s.gpu.as_ref();
        Side {
            label: input.label.clone(),
            dir: input.dir.clone(),
            from_secs: input.from_secs,
            to_secs: input.to_secs,
            duration_secs: s.duration_secs,
            samples: s.samples,
            rate_hz: s.rate_hz,
            processes: s.processes_followed.max(1),
            workers: workers(s),
            python_version: s.python_version.clone(),
            idle: input.include_idle,
            gpu_devices: gpu
                .map(|g| g.devices.iter().map(|d| d.name.clone()).collect())
                .unwrap_or_default(),
            verdict: super::verdict_of(s),
            if_fixed: gpu.and_then(|g| g.if_fixed.clone()),
        }
    }
}

/// Worker processes of the job (DataLoader workers and others), else pool threads feeding
/// the loop.
fn workers(summary: &Summary) -> u64 {
    let processes: BTreeSet<u32> = summary
        .roles
        .iter()
        .filter(|r| matches!(r.role, Role::DataloaderWorker | Role::Worker))
        .map(|r| r.pid)
        .collect();
    if !processes.is_empty() {
        return processes.len() as u64;
    }
    summary
        .roles
        .iter()
        .filter(|r| r.role == Role::FeederThread)
        .count() as u64
}

/// The job's processes as the stack identity names them.
pub(crate) fn job_processes(summary: &Summary) -> JobProcesses {
    let trainer_pid = summary
        .roles
        .iter()
        .find(|r| r.role == Role::Trainer)
        .map(|r| r.pid);
    let worker_pids = summary
        .roles
        .iter()
        .filter(|r| matches!(r.role, Role::DataloaderWorker | Role::Worker))
        .map(|r| r.pid)
        .collect();
    JobProcesses {
        target_pid: summary.pid,
        trainer_pid,
        worker_pids,
        ranks: summary
            .processes
            .iter()
            .filter_map(|p| p.rank.rank.map(|rank| (p.pid, rank)))
            .collect(),
        commands: summary
            .processes
            .iter()
            .map(|p| (p.pid, p.command_line.clone()))
            .collect(),
    }
}

/// What differs between the recordings besides the change, each said in one sentence.
pub(crate) fn mismatches(before: &CompareInput, after: &CompareInput) -> Vec<String> {
    let (b, a) = (&before.summary, &after.summary);
    let mut out = Vec::new();
    if before.include_idle != after.include_idle {
        let (with, without) = if before.include_idle {
            ("BEFORE", "AFTER")
        } else {
            ("AFTER", "BEFORE")
        };
        out.push(format!(
            "{with} kept idle threads' samples (--idle) and {without} did not: shares of \
             waiting code differ for that alone"
        ));
    }
    if before.native != after.native {
        let with = if before.native { "BEFORE" } else { "AFTER" };
        out.push(format!(
            "only {with} holds native frames (--native): its stacks are deeper, shares of \
             Python functions are not affected"
        ));
    }
    if minor_version(&b.python_version) != minor_version(&a.python_version) {
        out.push(format!(
            "other Python versions: {} and {}",
            b.python_version, a.python_version
        ));
    }
    let models = |s: &Summary| -> BTreeSet<String> {
        s.gpu
            .iter()
            .flat_map(|g| g.devices.iter().map(|d| d.name.clone()))
            .collect()
    };
    let (bm, am) = (models(b), models(a));
    if !bm.is_empty() && !am.is_empty() && bm != am {
        out.push(format!("other GPUs: {} and {}", join(&bm), join(&am)));
    }
    if b.gpu.is_some() != a.gpu.is_some() {
        let with = if b.gpu.is_some() { "BEFORE" } else { "AFTER" };
        out.push(format!(
            "only {with} has GPU data: the GPU's work is not compared"
        ));
    }
    out
}

fn minor_version(version: &str) -> String {
    version.split('.').take(2).collect::<Vec<_>>().join(".")
}

fn join(names: &BTreeSet<String>) -> String {
    names.iter().cloned().collect::<Vec<_>>().join(", ")
}
