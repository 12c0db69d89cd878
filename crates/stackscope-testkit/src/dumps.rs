//! Builders of the dumps `stackscope dump` writes and `merge` reads (`ProcessDump`,
//! `ThreadDump`, `FrameDump`), for the tests of their writers and readers. What a builder does
//! not take is empty (`None`, no rank, no locals); a test sets the rest with struct update
//! syntax: `ProcessDump { ns_pid: Some(1), ..process(5120, "python3 job.py", threads) }`.

use stackscope_event::{FrameDump, ProcessDump, ThreadDump, ThreadState};

/// The Python version the dumps say they read.
pub const PYTHON_VERSION: &str = "3.11.7";

/// A Python frame, without locals.
pub fn frame(function: &str, file: &str, line: u32) -> FrameDump {
    FrameDump {
        function: function.to_owned(),
        file: file.to_owned(),
        line,
        native: false,
        locals: None,
        path: None,
    }
}

/// A named thread whose OS and Python ids are both `tid`, idle and without the GIL, its frames
/// innermost first.
pub fn thread(name: &str, tid: u64, state: ThreadState, frames: Vec<FrameDump>) -> ThreadDump {
    ThreadDump {
        name: Some(name.to_owned()),
        os_thread_id: Some(tid),
        ns_thread_id: None,
        python_thread_id: tid,
        active: false,
        owns_gil: false,
        state,
        frames,
    }
}

/// A process of [`PYTHON_VERSION`] without a rank, a parent or a host.
pub fn process(pid: u32, command_line: &str, threads: Vec<ThreadDump>) -> ProcessDump {
    ProcessDump {
        pid,
        ns_pid: None,
        parent_pid: None,
        command_line: command_line.to_owned(),
        python_version: PYTHON_VERSION.to_owned(),
        rank: Default::default(),
        host: None,
        threads,
    }
}
