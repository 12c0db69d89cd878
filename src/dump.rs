//! `stackscope dump`: every thread's stack, once, as text or JSON.

use std::io::Write;

use anyhow::Context;
use stackscope_sampler::{dump_process, ProcessDump, ThreadDump};

use crate::config::DumpConfig;

pub fn run(config: DumpConfig) -> anyhow::Result<()> {
    let dump = dump_process(config.pid, config.locals)?;
    let mut out = std::io::stdout().lock();
    if config.json {
        serde_json::to_writer_pretty(&mut out, &dump).context("cannot write the dump")?;
        writeln!(out)?;
    } else {
        write_text(&dump, &mut out).context("cannot write the dump")?;
    }
    Ok(())
}

/// The dump as a person reads it: a header, then each thread with its frames innermost first.
pub fn write_text<W: Write>(dump: &ProcessDump, out: &mut W) -> std::io::Result<()> {
    writeln!(out, "Process {}: {}", dump.pid, dump.command_line)?;
    writeln!(out, "Python v{}", dump.python_version)?;
    for thread in &dump.threads {
        writeln!(out)?;
        write_thread(thread, out)?;
    }
    Ok(())
}

fn write_thread<W: Write>(thread: &ThreadDump, out: &mut W) -> std::io::Result<()> {
    let id = match thread.os_thread_id {
        Some(tid) => tid.to_string(),
        None => format!("{:#x}", thread.python_thread_id),
    };
    let name = thread.name.as_deref().unwrap_or("");
    let mut state = String::from(if thread.active { "active" } else { "idle" });
    if thread.owns_gil {
        state.push_str(", holds GIL");
    }
    writeln!(out, "Thread {id} \"{name}\" ({state})")?;
    for frame in &thread.frames {
        writeln!(
            out,
            "    {} ({}:{})",
            frame.function, frame.file, frame.line
        )?;
        for local in frame.locals.iter().flatten() {
            let repr = local.repr.as_deref().unwrap_or("?");
            writeln!(out, "        {} = {}", local.name, repr)?;
        }
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;
    use stackscope_sampler::{FrameDump, LocalVariable};

    #[test]
    fn text_shows_state_frames_and_locals() {
        let dump = ProcessDump {
            pid: 42,
            command_line: "python3 job.py".into(),
            python_version: "3.11.7".into(),
            threads: vec![ThreadDump {
                name: Some("loader-0".into()),
                os_thread_id: Some(43),
                python_thread_id: 0x7f00,
                active: false,
                owns_gil: true,
                frames: vec![FrameDump {
                    function: "wait_for_batch".into(),
                    file: "job.py".into(),
                    line: 12,
                    locals: Some(vec![LocalVariable {
                        name: "batch".into(),
                        repr: Some("3".into()),
                        arg: true,
                    }]),
                }],
            }],
        };
        let mut out = Vec::new();
        write_text(&dump, &mut out).expect("write");
        let text = String::from_utf8(out).expect("utf8");
        assert_eq!(
            text,
            "Process 42: python3 job.py\nPython v3.11.7\n\n\
             Thread 43 \"loader-0\" (idle, holds GIL)\n    wait_for_batch (job.py:12)\n        batch = 3\n"
        );
    }
}
