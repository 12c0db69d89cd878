//! What a look at a process tree says beyond its stacks, taking reads of its own: whether
//! each thread's lock wait has a time limit (`/proc`), the owners of the locks of a process
//! whose every thread waits on one with none (read from the target's memory), and when each
//! process started (`/proc`), for the workers that replaced one that ended.

use stackscope_aggregate::{
    all_wait_on_locks, late_starts, LateStart, LockedProcess, ProcessStart,
};
use stackscope_event::{ProcessDump, ThreadDump};
use stackscope_report::DumpNotes;
use stackscope_sampler::{dump_process, procfs, rlock_owner, TargetOptions};

/// The notes of a dump read with `options`.
pub(crate) fn dump_notes(processes: &[ProcessDump], options: &TargetOptions) -> DumpNotes {
    DumpNotes {
        locked: locked(processes, options),
        late: late_started(processes),
    }
}

/// The processes whose every thread waits on a lock, with the owners of the locks that record
/// one.
fn locked(processes: &[ProcessDump], options: &TargetOptions) -> Vec<LockedProcess> {
    processes
        .iter()
        .filter(|p| all_wait_on_locks(p, |t| waits_without_limit(p.pid, t)))
        .map(|p| locked_one(p, options))
        .collect()
}

/// Whether `thread` of `pid` waits with no time limit, as the OS says now (a thread whose OS id
/// is not known: not said to).
fn waits_without_limit(pid: u32, thread: &ThreadDump) -> bool {
    thread
        .os_thread_id
        .is_some_and(|tid| procfs::waits_without_limit(pid, tid))
}

/// Owners are looked for among the waiting frames' variables: in `process` where locals were
/// read, else in a second read with them (the process is stuck: its stacks are the same).
fn locked_one(process: &ProcessDump, options: &TargetOptions) -> LockedProcess {
    let owner = |lock| rlock_owner(process.pid, lock);
    if options.locals {
        return LockedProcess::of(process, process, owner);
    }
    let with_locals = TargetOptions {
        locals: true,
        ..options.clone()
    };
    match dump_process(process.pid, &with_locals) {
        Ok(again) => LockedProcess::of(process, &again, owner),
        Err(_) => LockedProcess::of(process, process, owner),
    }
}

/// The processes that started long after their siblings, by their start times now.
pub(crate) fn late_started(processes: &[ProcessDump]) -> Vec<LateStart> {
    let starts: Vec<ProcessStart> = processes
        .iter()
        .filter_map(|p| {
            Some(ProcessStart {
                pid: p.pid,
                parent: p.parent_pid,
                command_line: &p.command_line,
                started_secs: procfs::started_secs(p.pid)?,
            })
        })
        .collect();
    late_starts(&starts)
}
