//! Every thread of a process (or of a process tree), read once: what `dump` shows.

use std::collections::HashMap;

use stackscope_event::{FrameDump, LocalVariable, ProcessDump, ThreadDump, ThreadState};

use crate::error::{AttachError, SampleFailure};
use crate::procfs;
use crate::target::{PythonTarget, TargetOptions, ThreadStack};
use crate::tree::descendants;

/// Reads every thread of `pid` once. The process is stopped only for the read.
pub fn dump_process(pid: u32, options: &TargetOptions) -> Result<ProcessDump, AttachError> {
    // What each thread is doing is read before anything stops the process: attaching may stop
    // it briefly, and a thread woken from its wait reads as running for a while after.
    let states = procfs::thread_states(pid);
    let mut target = PythonTarget::attach(pid, options)?;
    dump_with_states(&mut target, &states)
}

/// Reads `pid` and every Python process below it. Processes that are not Python (a shell, a
/// launcher) are skipped; the root must be Python.
pub fn dump_tree(pid: u32, options: &TargetOptions) -> Result<Vec<ProcessDump>, AttachError> {
    let mut dumps = vec![dump_process(pid, options)?];
    let parents = parent_map(pid);
    for child in descendants(pid) {
        // A child that exits or is not Python while we walk the tree is simply not in it.
        if let Ok(mut dump) = dump_process(child, options) {
            dump.parent_pid = parents.get(&child).copied();
            dumps.push(dump);
        }
    }
    Ok(dumps)
}

/// Each descendant's parent, for showing the tree.
fn parent_map(root: u32) -> HashMap<u32, u32> {
    let mut parents = HashMap::new();
    let mut queue = vec![root];
    while let Some(pid) = queue.pop() {
        for child in procfs::children(pid) {
            if parents.insert(child, pid).is_none() {
                queue.push(child);
            }
        }
    }
    parents
}

/// Reads an attached target once, with each thread's state taken just before the stop.
pub fn dump_target(target: &mut PythonTarget) -> Result<ProcessDump, AttachError> {
    let states = procfs::thread_states(target.pid());
    dump_with_states(target, &states)
}

fn dump_with_states(
    target: &mut PythonTarget,
    states: &HashMap<u64, ThreadState>,
) -> Result<ProcessDump, AttachError> {
    let pid = target.pid();
    // A read can race with the interpreter freeing a frame; a few tries get a clean one.
    let mut attempts = 0;
    let stacks = loop {
        attempts += 1;
        match target.read_stacks() {
            Ok(stacks) => break stacks,
            Err(SampleFailure::ProcessGone(_)) => return Err(AttachError::NoSuchProcess(pid)),
            Err(SampleFailure::PermissionLost(_)) => return Err(AttachError::permission(pid)),
            Err(e) if attempts >= 5 => {
                return Err(AttachError::Other {
                    pid,
                    message: e.to_string(),
                })
            }
            Err(_) => std::thread::sleep(std::time::Duration::from_millis(10)),
        }
    };
    let threads = stacks
        .into_iter()
        .map(|stack| thread_dump(stack, states))
        .collect();
    Ok(ProcessDump {
        pid,
        ns_pid: target.ns_pid(),
        parent_pid: None,
        command_line: target.command_line().to_owned(),
        python_version: target.python_version().to_owned(),
        rank: stackscope_event::RankInfo::of_process(pid),
        host: stackscope_event::host_name(),
        threads,
    })
}

fn thread_dump(stack: ThreadStack, states: &HashMap<u64, ThreadState>) -> ThreadDump {
    let raw_frames = stack.raw.map(|r| r.frames).unwrap_or_default();
    // The raw frames are Python's only; native frames interleave with them in `frames`.
    let mut python_index = 0;
    let frames: Vec<FrameDump> = stack
        .frames
        .iter()
        .map(|f| {
            let raw = if f.native {
                None
            } else {
                python_index += 1;
                raw_frames.get(python_index - 1)
            };
            (f, raw)
        })
        .map(|(f, raw)| FrameDump {
            function: f.function.to_string(),
            file: f.file.to_string(),
            line: f.line,
            native: f.native,
            locals: raw.and_then(|raw| {
                raw.locals.as_ref().map(|vars| {
                    vars.iter()
                        .map(|v| LocalVariable {
                            name: v.name.clone(),
                            repr: v.repr.clone(),
                            arg: v.arg,
                        })
                        .collect()
                })
            }),
        })
        .collect();
    let mut state = stack
        .thread
        .os_thread_id
        .and_then(|tid| states.get(&tid).copied())
        .unwrap_or_default();
    // With native frames a futex wait can be told apart: the GIL, or a lock of the program's.
    if state == ThreadState::WaitingOnLock
        && frames
            .iter()
            .any(|f: &FrameDump| f.native && f.function.contains("take_gil"))
    {
        state = ThreadState::WaitingForGil;
    }
    ThreadDump {
        name: stack.thread.name,
        os_thread_id: stack.thread.os_thread_id,
        ns_thread_id: stack.ns_thread_id,
        python_thread_id: stack.thread.python_thread_id,
        // The one idle rule (crate::idle), on the state read before the process was touched:
        // a thread the OS had parked in a wait is idle, however it looked once woken by a
        // stop, unless it holds the GIL.
        active: match state {
            ThreadState::Unknown => stack.thread.active,
            ThreadState::Running => true,
            ThreadState::Stopped => false,
            _ => stack.thread.owns_gil,
        },
        owns_gil: stack.thread.owns_gil,
        state,
        frames,
    }
}
