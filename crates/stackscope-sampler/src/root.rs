//! The process a command names: a Python process, or, with `--subprocesses`, any process (a
//! shell script, `srun`, `mpirun`, a container entrypoint) whose Python descendants are
//! followed as they appear. Job launchers are rarely Python themselves.

use std::path::PathBuf;
use std::time::{Duration, Instant};

/// How long a command started by `record --subprocesses` that is not Python may take to exec
/// Python before it is taken as a launcher.
const EXEC_GRACE: Duration = Duration::from_secs(1);

use crate::error::AttachError;
use crate::procfs;
use crate::target::{PythonTarget, TargetOptions};

/// The root of what one command reads.
pub enum Root {
    Python(Box<PythonTarget>),
    /// Not Python: a process node without stacks, above the Python processes it starts.
    Other(OtherProcess),
}

/// A root process that runs no Python interpreter (a shell, a launcher).
#[derive(Debug, Clone)]
pub struct OtherProcess {
    pub pid: u32,
    pub command_line: String,
    pub exe: Option<PathBuf>,
}

impl OtherProcess {
    fn new(pid: u32) -> OtherProcess {
        let read_pid = crate::leader::reader_pid(pid);
        OtherProcess {
            pid,
            command_line: procfs::command_line(read_pid).unwrap_or_default(),
            exe: procfs::exe(read_pid).ok(),
        }
    }

    /// The executable's file name (`bash`, `srun`), for messages.
    pub fn program(&self) -> String {
        self.exe
            .as_ref()
            .and_then(|e| e.file_name())
            .map(|n| n.to_string_lossy().into_owned())
            .unwrap_or_else(|| "unknown executable".to_owned())
    }
}

impl From<PythonTarget> for Root {
    fn from(target: PythonTarget) -> Root {
        Root::Python(Box::new(target))
    }
}

impl Root {
    /// Attaches to `pid`. With `subprocesses`, a process that is not Python is accepted as a
    /// root without stacks; without, it is an error that suggests `--subprocesses` when the
    /// process has Python descendants.
    pub fn attach(
        pid: u32,
        options: &TargetOptions,
        subprocesses: bool,
    ) -> Result<Root, AttachError> {
        match PythonTarget::attach(pid, options) {
            Ok(target) => Ok(Root::Python(Box::new(target))),
            Err(AttachError::NotPython { .. }) if subprocesses => {
                Ok(Root::Other(OtherProcess::new(pid)))
            }
            Err(e) => Err(with_descendants_hint(e)),
        }
    }

    /// Attaches to a process just started (by `record`). With `subprocesses`, a process whose
    /// program is not Python is taken as it is at once (its Python children are found as they
    /// start, and the process itself is looked at again if it execs); otherwise its
    /// interpreter is waited for up to `timeout`.
    pub fn attach_when_ready(
        pid: u32,
        options: &TargetOptions,
        timeout: Duration,
        subprocesses: bool,
    ) -> Result<Root, AttachError> {
        if subprocesses {
            // A wrapper that execs Python at once (a pyenv shim, `exec python3` in a short
            // script) is given a moment to, so that the root is the Python process from the
            // start; a launcher that stays (bash running a job script, srun) is taken as it is.
            let deadline = Instant::now() + EXEC_GRACE.min(timeout);
            loop {
                match procfs::maps(pid) {
                    Ok(maps) if !maps.is_empty() && !procfs::maps_mention_python(&maps) => {
                        if Instant::now() >= deadline {
                            return Ok(Root::Other(OtherProcess::new(pid)));
                        }
                    }
                    _ => break,
                }
                std::thread::sleep(Duration::from_millis(10));
            }
        }
        PythonTarget::attach_when_ready(pid, options, timeout)
            .map(|target| Root::Python(Box::new(target)))
            .map_err(with_descendants_hint)
    }

    pub fn pid(&self) -> u32 {
        match self {
            Root::Python(t) => t.pid(),
            Root::Other(o) => o.pid,
        }
    }

    pub fn command_line(&self) -> &str {
        match self {
            Root::Python(t) => t.command_line(),
            Root::Other(o) => &o.command_line,
        }
    }

    /// The interpreter's version; `None` for a root that is not Python.
    pub fn python_version(&self) -> Option<&str> {
        match self {
            Root::Python(t) => Some(t.python_version()),
            Root::Other(_) => None,
        }
    }

    /// Which stack reader reads the root ([`PythonTarget::reader`]); empty when not Python.
    pub fn reader(&self) -> &'static str {
        match self {
            Root::Python(t) => t.reader(),
            Root::Other(_) => "",
        }
    }

    /// How to name the root in a message: `Python 3.11.7`, or `bash, not Python`.
    pub fn describe(&self) -> String {
        match self {
            Root::Python(t) => format!("Python {}", t.python_version()),
            Root::Other(o) => format!("{}, not Python", o.program()),
        }
    }
}

/// Python processes below `pid`, by what they map (no attaching).
pub fn python_descendants(pid: u32) -> Vec<u32> {
    procfs::descendants(pid)
        .into_iter()
        .filter(|&d| {
            procfs::maps(crate::leader::reader_pid(d))
                .is_ok_and(|m| procfs::maps_mention_python(&m))
        })
        .collect()
}

/// A "not Python" error about a process with Python descendants says to follow them.
fn with_descendants_hint(error: AttachError) -> AttachError {
    let AttachError::NotPython { pid, exe, .. } = error else {
        return error;
    };
    let found = python_descendants(pid);
    let hint = if found.is_empty() {
        String::new()
    } else {
        let shown: Vec<String> = found.iter().take(5).map(u32::to_string).collect();
        let more = if found.len() > 5 { ", ..." } else { "" };
        format!(
            "; Python runs below it (pid {}{more}): leave out --no-subprocesses to follow it",
            shown.join(", ")
        )
    };
    AttachError::NotPython { pid, exe, hint }
}
