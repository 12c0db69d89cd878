//! Every thread of a process, read once: what the `dump` command shows.

use serde::Serialize;

use crate::error::{AttachError, SampleFailure};
use crate::target::{PythonTarget, TargetOptions};

#[derive(Debug, Clone, Serialize)]
pub struct ProcessDump {
    pub pid: u32,
    pub command_line: String,
    pub python_version: String,
    pub threads: Vec<ThreadDump>,
}

#[derive(Debug, Clone, Serialize)]
pub struct ThreadDump {
    pub name: Option<String>,
    pub os_thread_id: Option<u64>,
    pub python_thread_id: u64,
    pub active: bool,
    pub owns_gil: bool,
    /// Innermost first.
    pub frames: Vec<FrameDump>,
}

#[derive(Debug, Clone, Serialize)]
pub struct FrameDump {
    pub function: String,
    pub file: String,
    pub line: u32,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub locals: Option<Vec<LocalVariable>>,
}

#[derive(Debug, Clone, Serialize)]
pub struct LocalVariable {
    pub name: String,
    /// The value's repr, cut short; `None` when it could not be read.
    pub repr: Option<String>,
    /// Whether it is one of the function's arguments.
    pub arg: bool,
}

/// Reads every thread of `pid` once. The process is stopped only for the read.
pub fn dump_process(pid: u32, locals: bool) -> Result<ProcessDump, AttachError> {
    let options = TargetOptions {
        blocking: true,
        locals,
    };
    let mut target = PythonTarget::attach(pid, &options)?;
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
        .map(|stack| {
            let raw_frames = stack.raw.map(|r| r.frames).unwrap_or_default();
            let frames = stack
                .frames
                .iter()
                .enumerate()
                .map(|(i, f)| FrameDump {
                    function: f.function.to_string(),
                    file: f.file.to_string(),
                    line: f.line,
                    locals: raw_frames.get(i).and_then(|raw| {
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
            ThreadDump {
                name: stack.thread.name,
                os_thread_id: stack.thread.os_thread_id,
                python_thread_id: stack.thread.python_thread_id,
                active: stack.thread.active,
                owns_gil: stack.thread.owns_gil,
                frames,
            }
        })
        .collect();
    Ok(ProcessDump {
        pid,
        command_line: target.command_line().to_owned(),
        python_version: target.python_version().to_owned(),
        threads,
    })
}
