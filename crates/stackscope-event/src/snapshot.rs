//! A process read once, every thread at one instant: what `dump` prints and `watch` saves.
//!
//! The sampler produces these, the aggregate groups them, the report writes them; the types
//! live here so that each of those sees them without depending on the others.

use serde::{Deserialize, Serialize};

use crate::RankInfo;

/// One process, every thread read at one instant.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct ProcessDump {
    /// The pid as stackscope sees it (the host's, for a process in a container).
    pub pid: u32,
    /// The process's pid in its own PID namespace (a container), where it differs from `pid`.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub ns_pid: Option<u32>,
    /// The parent, when the dump covers a process tree.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub parent_pid: Option<u32>,
    pub command_line: String,
    pub python_version: String,
    /// Its rank, when a launcher started it: `rank`, `local_rank`, `world_size`, `group_rank`.
    #[serde(flatten)]
    pub rank: RankInfo,
    /// The machine it runs on, as the dumping stackscope saw it.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub host: Option<String>,
    pub threads: Vec<ThreadDump>,
}

impl ProcessDump {
    /// `rank 6 (pid 5124)`, or `process 5124` without a rank.
    pub fn display_name(&self) -> String {
        crate::process_name(self.pid, self.rank.rank)
    }
}

#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct ThreadDump {
    pub name: Option<String>,
    /// The OS thread id as stackscope sees it (the host's, for a process in a container).
    pub os_thread_id: Option<u64>,
    /// The thread's id in its own PID namespace (what the process itself, and CPython's
    /// `threading.get_native_id()`, call it), where it differs from `os_thread_id`.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub ns_thread_id: Option<u64>,
    pub python_thread_id: u64,
    /// Whether it was running Python code (not sleeping or blocked).
    pub active: bool,
    pub owns_gil: bool,
    /// What the thread was doing, from the OS and the interpreter.
    #[serde(default)]
    pub state: ThreadState,
    /// Innermost first.
    pub frames: Vec<FrameDump>,
}

impl ThreadDump {
    /// The name to show: Python's, else the OS id.
    pub fn display_name(&self) -> String {
        match (&self.name, self.os_thread_id) {
            (Some(name), _) => name.clone(),
            (None, Some(tid)) => format!("thread {tid}"),
            (None, None) => format!("thread {:#x}", self.python_thread_id),
        }
    }
}

#[derive(Debug, Clone, PartialEq, Eq, Hash, Serialize, Deserialize)]
pub struct FrameDump {
    pub function: String,
    pub file: String,
    pub line: u32,
    /// A C/C++ frame rather than a Python one.
    #[serde(default, skip_serializing_if = "std::ops::Not::not")]
    pub native: bool,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub locals: Option<Vec<LocalVariable>>,
    /// The file's absolute path, as the interpreter has it (`file` is the short name), when
    /// it was read.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub path: Option<String>,
}

impl FrameDump {
    /// `function (file:line)`, or `function (file)` without a line.
    pub fn label(&self) -> String {
        if self.line > 0 {
            format!("{} ({}:{})", self.function, self.file, self.line)
        } else {
            format!("{} ({})", self.function, self.file)
        }
    }
}

#[derive(Debug, Clone, PartialEq, Eq, Hash, Serialize, Deserialize)]
pub struct LocalVariable {
    pub name: String,
    /// The value's repr, cut short; `None` when it could not be read.
    pub repr: Option<String>,
    /// Whether it is one of the function's arguments.
    pub arg: bool,
}

/// What a thread was doing when it was read, as precisely as the OS and the interpreter tell.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Hash, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum ThreadState {
    /// On a CPU or ready to run.
    Running,
    /// Blocked in a futex while another thread holds the GIL it wants.
    WaitingForGil,
    /// Blocked in a futex: a lock, a condition, a semaphore, a queue.
    WaitingOnLock,
    /// Blocked reading or polling a file, pipe or socket.
    WaitingOnIo,
    /// In a sleep call, or blocked in some other system call.
    Sleeping,
    /// Stopped by a signal or a debugger.
    Stopped,
    #[default]
    Unknown,
}

impl ThreadState {
    pub fn describe(self) -> &'static str {
        match self {
            ThreadState::Running => "running",
            ThreadState::WaitingForGil => "waiting for the GIL",
            ThreadState::WaitingOnLock => "waiting on a lock",
            ThreadState::WaitingOnIo => "waiting on I/O",
            ThreadState::Sleeping => "sleeping",
            ThreadState::Stopped => "stopped",
            ThreadState::Unknown => "state unknown",
        }
    }
}
