//! Every thread of a process (or of a process tree), read once: what `dump` shows.

use std::collections::HashMap;

use stackscope_event::{FrameDump, LocalVariable, ProcessDump, ThreadDump, ThreadState};

use crate::error::{AttachError, SampleFailure};
use crate::procfs;
use crate::procfs::descendants;
use crate::root::Root;
use crate::target::{PythonTarget, TargetOptions, ThreadStack};

/// Reads every thread of `pid` once. The process is stopped only for the read.
pub fn dump_process(pid: u32, options: &TargetOptions) -> Result<ProcessDump, AttachError> {
    // What each thread is doing is read before anything stops the process: attaching may stop
    // it briefly, and a thread woken from its wait reads as running for a while after.
    let states = procfs::thread_states(pid);
    let mut target = match Root::attach(pid, options, false)? {
        Root::Python(target) => *target,
        // Without subprocesses a root that is not Python is an error.
        Root::Other(other) => return Err(AttachError::NoSuchProcess(other.pid)),
    };
    dump_with_states(&mut target, &states)
}

/// Reads `pid` and every Python process below it. A root that is not Python (a shell, a
/// launcher) is a process without threads; descendants that are not Python are skipped.
pub fn dump_tree(pid: u32, options: &TargetOptions) -> Result<Vec<ProcessDump>, AttachError> {
    let states = procfs::thread_states(pid);
    let root = match Root::attach(pid, options, true)? {
        Root::Python(mut target) => dump_with_states(&mut target, &states)?,
        Root::Other(other) => ProcessDump {
            pid,
            parent_pid: None,
            command_line: other.command_line,
            python_version: String::new(),
            threads: Vec::new(),
            rank: stackscope_event::RankInfo::of_process(pid),
            host: stackscope_event::host_name(),
            ns_pid: crate::namespace::own_pid(pid),
        },
    };
    let mut dumps = vec![root];
    let parents = parent_map(pid);
    for child in descendants(pid) {
        // A child that exits or is not Python while we walk the tree is simply not in it.
        if let Ok(mut dump) = dump_python(child, options) {
            dump.parent_pid = parents.get(&child).copied();
            dumps.push(dump);
        }
    }
    Ok(dumps)
}

/// Reads a descendant: a plain attach (the hint that `dump_process` adds to "not Python" is
/// for the process the user named).
fn dump_python(pid: u32, options: &TargetOptions) -> Result<ProcessDump, AttachError> {
    let states = procfs::thread_states(pid);
    let mut target = PythonTarget::attach(pid, options)?;
    dump_with_states(&mut target, &states)
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
    target.keep_raw_frames();
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
            path: raw.map(|raw| raw.filename.clone()),
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
    // An idle thread is shown waiting, never "running": the reader judged it idle by where it
    // is (a standard library wait), which says how it waits better than an OS state caught
    // between two system calls.
    if !stack.thread.active && state == ThreadState::Running {
        state = implied_wait(&frames);
    }
    ThreadDump {
        name: stack.thread.name.as_deref().map(str::to_owned),
        os_thread_id: stack.thread.os_thread_id,
        ns_thread_id: stack.ns_thread_id,
        python_thread_id: stack.thread.python_thread_id,
        // The one idle rule (crate::idle) on two readings of the OS state: the one taken
        // before the process was touched, and the reader's own. A thread the OS had parked in
        // a wait is idle however it looked once woken by a stop, and one caught between two
        // waits (running for a moment) is idle if the second reading finds it waiting again;
        // a thread that blocks holding the GIL is busy.
        active: stack.thread.active
            && match state {
                ThreadState::Unknown | ThreadState::Running => true,
                ThreadState::Stopped => false,
                _ => stack.thread.owns_gil,
            },
        owns_gil: stack.thread.owns_gil,
        state,
        frames,
    }
}

/// Where an object's type is (`ob_type`), and a type's name (`tp_name`), on a 64-bit
/// interpreter of the default build.
const OB_TYPE: usize = 8;
const TP_NAME: usize = 24;
/// Where a `threading.RLock` (`_thread.RLock`) keeps the ident of the thread that holds it,
/// 0 when none does: `rlock_owner` in 3.10 to 3.13, the `_PyRecursiveMutex`'s `thread` from
/// 3.14, both right after the lock itself.
const RLOCK_OWNER: usize = 24;
const RLOCK_TYPE: &[u8] = b"_thread.RLock\0";

/// The ident (`threading.get_ident()`) of the thread of `pid` that holds the
/// `threading.RLock` at `addr`, read from the lock: 0 when no thread holds it; `None` where
/// `addr` holds no RLock or cannot be read. The process runs on: a lock its threads wait on
/// does not change.
pub fn rlock_owner(pid: u32, addr: u64) -> Option<u64> {
    use remoteprocess::ProcessMemory;
    let process = remoteprocess::Process::new(remoteprocess::Pid::try_from(pid).ok()?).ok()?;
    let word = |at: usize| -> Option<u64> {
        let bytes = process.copy(at, 8).ok()?;
        Some(u64::from_ne_bytes(bytes.try_into().ok()?))
    };
    let addr = usize::try_from(addr).ok()?;
    let ty = usize::try_from(word(addr + OB_TYPE)?).ok()?;
    let name = usize::try_from(word(ty + TP_NAME)?).ok()?;
    let name = process.copy(name, RLOCK_TYPE.len()).ok()?;
    (name == RLOCK_TYPE).then(|| word(addr + RLOCK_OWNER))?
}

/// The wait an idle thread is in, by its innermost Python frame; unknown when the frame does
/// not say.
fn implied_wait(frames: &[FrameDump]) -> ThreadState {
    let Some(innermost) = frames.iter().find(|f| !f.native) else {
        return ThreadState::Unknown;
    };
    let file = innermost.file.rsplit('/').next().unwrap_or("");
    match file {
        "selectors.py" | "connection.py" | "socket.py" | "ssl.py" => ThreadState::WaitingOnIo,
        "threading.py" | "queue.py" | "synchronize.py" => ThreadState::WaitingOnLock,
        _ => ThreadState::Unknown,
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn frame(function: &str, file: &str) -> FrameDump {
        FrameDump {
            function: function.to_owned(),
            file: file.to_owned(),
            line: 1,
            native: false,
            locals: None,
            path: None,
        }
    }

    /// Each interpreter at hand: a held RLock names its holder, a free one none, and a
    /// `threading.Lock` is no RLock.
    #[test]
    fn an_rlock_says_which_thread_holds_it() {
        use stackscope_testkit::python::{pyenv_interpreters, Fixture, VERSIONS};
        let code = "import os, threading, time\n\
                    held, free, plain = threading.RLock(), threading.RLock(), threading.Lock()\n\
                    held.acquire(); held.acquire(); plain.acquire()\n\
                    print('ready', os.getpid(), id(held), id(free), id(plain), \
                    threading.get_ident(), flush=True)\n\
                    time.sleep(60)";
        for (minor, python) in pyenv_interpreters(&VERSIONS) {
            let fixture = Fixture::code(code).python(&python).start();
            let said: Vec<u64> = fixture
                .wait_ready()
                .split_whitespace()
                .skip(1)
                .filter_map(|w| w.parse().ok())
                .collect();
            let &[pid, held, free, plain, ident] = said.as_slice() else {
                panic!("{minor}: {said:?}");
            };
            let pid = u32::try_from(pid).expect("a pid");
            assert_eq!(rlock_owner(pid, held), Some(ident), "{minor}");
            assert_eq!(rlock_owner(pid, free), Some(0), "{minor}");
            assert_eq!(rlock_owner(pid, plain), None, "{minor}");
        }
    }

    #[test]
    fn an_idle_thread_waits_the_way_its_frame_says() {
        let select = [
            frame("BaseSelector.select", "selectors.py"),
            frame("run", "a.py"),
        ];
        assert_eq!(implied_wait(&select), ThreadState::WaitingOnIo);
        let lock = [frame("Condition.wait", "threading.py")];
        assert_eq!(implied_wait(&lock), ThreadState::WaitingOnLock);
        assert_eq!(implied_wait(&[frame("f", "a.py")]), ThreadState::Unknown);
    }
}
