//! What each process read is to the job, named as its owner names it: `DataLoader worker 1`,
//! `rank 3`, `trainer` (`loop` where it was found without GPU data), `main` (the process
//! stackscope was given), `worker`, `helper (...)`.
//! One definition, for the memory timeline and the memory summary alike.

use foldhash::HashMap;

use crate::fold::Aggregator;
use crate::jobs::process_role;
use crate::roles::{self, Role};

/// The frame a DataLoader worker's main thread runs, as `roles/` knows it.
const DATALOADER_LOOP: (&str, &str) = ("_worker_loop", "utils/data/_utils/worker.py");

/// A process's role, and whether it is one that forks the job's workers.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) struct ProcessRole {
    pub name: String,
    /// The target, the trainer's process or a rank's: where the workers are forked from. In
    /// such a parent the pages its workers copy turn private once every worker has its copy:
    /// their copy-on-write seen from the other side, not its own.
    pub parent: bool,
}

/// The role of each of `pids`; `target` is the process stackscope was given.
pub(crate) fn process_roles(
    agg: &Aggregator,
    target: u32,
    pids: &[u32],
) -> HashMap<u32, ProcessRole> {
    let roles = roles::of(agg, target);
    let trainer = roles.trainer().map(|t| t.pid);
    let loaders = loader_workers(agg, &roles);
    let processes: HashMap<u32, _> = agg.processes.iter().map(|p| (p.pid, p)).collect();
    let role = |pid: u32| -> (String, bool) {
        let process = processes.get(&pid);
        if let Some(label) = loaders.get(&pid) {
            // A rank's DataLoader workers inherit its rank: they are its workers.
            return (label.clone(), false);
        }
        if let Some(rank) = process.and_then(|p| p.rank.rank) {
            return (format!("rank {rank}"), true);
        }
        // The loop found by its hand-offs (no GPU data) in the target itself is its main
        // process, as it always was; elsewhere it is the loop.
        let found_by = roles.found_by;
        match (trainer == Some(pid), found_by) {
            (true, Some(roles::LoopFoundBy::Gpu)) => return ("trainer".to_owned(), true),
            (true, _) if pid != target => return ("loop".to_owned(), true),
            _ => {}
        }
        if pid == target {
            return ("main".to_owned(), true);
        }
        let worker = roles
            .threads
            .iter()
            .any(|t| t.pid == pid && t.role == Role::Worker);
        let name = match process {
            _ if worker => "worker".to_owned(),
            Some(p) => process_role(pid, target, None, &p.command_line),
            None => "process".to_owned(),
        };
        (name, false)
    };
    pids.iter()
        .map(|&pid| {
            let (name, parent) = role(pid);
            (pid, ProcessRole { name, parent })
        })
        .collect()
}

/// DataLoader workers with their labels: as the roles name them where there are roles (GPU
/// data), else by the same frame and the same numbering (in pid order, the order they were
/// started).
fn loader_workers(agg: &Aggregator, roles: &roles::Roles) -> HashMap<u32, String> {
    let by_roles: HashMap<u32, String> = roles
        .threads
        .iter()
        .filter(|t| t.role == Role::DataloaderWorker)
        .map(|t| (t.pid, t.label.clone()))
        .collect();
    if !roles.threads.is_empty() {
        return by_roles;
    }
    let mut pids: Vec<u32> = agg
        .threads
        .iter()
        .filter(|t| runs_loader(agg, t.activity.stacks.keys().copied()))
        .map(|t| t.pid)
        .collect();
    pids.sort_unstable();
    pids.dedup();
    pids.into_iter()
        .enumerate()
        .map(|(n, pid)| (pid, format!("DataLoader worker {n}")))
        .collect()
}

/// Whether any of `stacks` runs a DataLoader worker's loop.
fn runs_loader(agg: &Aggregator, stacks: impl Iterator<Item = u32>) -> bool {
    roles::stacks_run(&agg.table, stacks, &[DATALOADER_LOOP])
}
