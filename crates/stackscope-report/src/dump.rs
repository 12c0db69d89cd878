//! The dump as a person reads it, and as JSON: what the stacks say at a glance first
//! ([`DumpNotes`]: processes whose every thread waits on a lock, workers that replaced one
//! that ended; then missing ranks and stragglers), then each process with its threads, threads
//! that share one stack printed once.

use std::io::Write;

use serde::Serialize;
use stackscope_aggregate::{
    find_stragglers, group_threads, helper_kind, LateStart, LockedProcess, MissingRanks, Straggler,
    ThreadGroup,
};
use stackscope_event::{ProcessDump, ThreadDump};

use crate::ReportError;

/// What a dump says beyond the stacks, found by the caller (they take reads of their own: the
/// locks' owners, the processes' start times).
#[derive(Debug, Default)]
pub struct DumpNotes {
    /// Processes whose every thread waits on a lock and none runs.
    pub locked: Vec<LockedProcess>,
    /// Workers that started long after their siblings.
    pub late: Vec<LateStart>,
}

impl DumpNotes {
    /// Each note as a line of its own.
    fn write<W: Write>(&self, w: &mut W) -> Result<(), ReportError> {
        for locked in &self.locked {
            writeln!(w, "{}", locked.sentence())?;
        }
        for late in &self.late {
            writeln!(w, "{}.", capitalized(&late.sentence()))?;
        }
        if !self.locked.is_empty() || !self.late.is_empty() {
            writeln!(w)?;
        }
        Ok(())
    }
}

fn capitalized(text: &str) -> String {
    let mut chars = text.chars();
    chars.next().map_or_else(String::new, |first| {
        first.to_uppercase().chain(chars).collect()
    })
}

/// Writes the dump of one process or of a process tree, its notes first.
pub fn write_dump_text<W: Write>(
    processes: &[ProcessDump],
    notes: &DumpNotes,
    mut w: W,
) -> Result<(), ReportError> {
    notes.write(&mut w)?;
    if let Some(missing) = missing_ranks(processes) {
        writeln!(
            w,
            "Missing: {}: no process here has it (gone, or on another node)\n",
            missing.sentence()
        )?;
    }
    let stragglers = find_stragglers(processes);
    for s in &stragglers {
        writeln!(w, "{}", describe_straggler(s))?;
    }
    if !stragglers.is_empty() {
        writeln!(w)?;
    }
    let groups = group_threads(processes);
    for (i, process) in processes.iter().enumerate() {
        if i > 0 {
            writeln!(w)?;
        }
        // `Process 5124`, `Process rank 6 (pid 5124)`, and in a container
        // `Process 5124 (1 in its namespace)`, `Process rank 6 (pid 5124, 1 in its namespace)`.
        let name = match (process.rank.rank, process.ns_pid) {
            (Some(rank), Some(own)) => {
                format!(
                    "Process rank {rank} (pid {}, {own} in its namespace)",
                    process.pid
                )
            }
            (Some(_), None) => format!("Process {}", process.display_name()),
            (None, Some(own)) => format!("Process {} ({own} in its namespace)", process.pid),
            (None, None) => format!("Process {}", process.pid),
        };
        // One line whatever the command line holds (a newline in an argument).
        let command_line = one_line(&process.command_line);
        match process.parent_pid {
            Some(parent) => writeln!(w, "{name} (child of {parent}): {command_line}")?,
            None => writeln!(w, "{name}: {command_line}")?,
        }
        if process.python_version.is_empty() && process.threads.is_empty() {
            writeln!(w, "Not Python (a launcher: its Python processes follow)")?;
        } else {
            writeln!(w, "Python v{}", process.python_version)?;
        }
        if let Some(kind) = helper_kind(process) {
            writeln!(w, "Helper process: {kind} (not compared with its siblings)")?;
        }
        let here = groups
            .iter()
            .filter(|g| g.members.first().is_some_and(|m| m.pid == process.pid));
        for group in here {
            writeln!(w)?;
            write_group(group, &mut w)?;
        }
    }
    Ok(())
}

/// Control characters (a newline in a command-line argument) shown escaped, so that one
/// header stays one line.
fn one_line(text: &str) -> String {
    text.escape_debug()
        .to_string()
        .replace("\\\"", "\"")
        .replace("\\'", "'")
}

fn describe_straggler(s: &Straggler) -> String {
    let who = match &s.thread {
        Some(thread) => format!(
            "Thread \"{thread}\" of {}",
            stackscope_event::process_name(s.pid, s.rank)
        ),
        None if s.rank.is_some() => format!(
            "Process {} ({})",
            stackscope_event::process_name(s.pid, s.rank),
            one_line(&s.command_line)
        ),
        None => format!("Process {} ({})", s.pid, one_line(&s.command_line)),
    };
    format!(
        "Straggler: {who} is at {}, while {} of its {} peers are at {}",
        s.location, s.together, s.peers, s.peers_location
    )
}

fn write_group<W: Write>(group: &ThreadGroup<'_>, w: &mut W) -> Result<(), ReportError> {
    let thread = group.representative;
    let status = status(thread);
    if let [only] = group.members.as_slice() {
        let id = match (only.os_thread_id, thread.ns_thread_id) {
            (Some(tid), Some(own)) => format!("{tid} ({own} in its namespace)"),
            (Some(tid), None) => tid.to_string(),
            (None, _) => format!("{:#x}", thread.python_thread_id),
        };
        match thread.name.as_deref() {
            Some(name) => writeln!(w, "Thread {id} \"{}\" ({status})", one_line(name))?,
            None => writeln!(w, "Thread {id} ({status})")?,
        }
    } else {
        let pids = group.pids();
        let names: Vec<String> = group
            .members
            .iter()
            .map(|m| {
                if pids.len() > 1 && m.rank.is_some() {
                    format!(
                        "{} [{}]",
                        m.name,
                        stackscope_event::process_name(m.pid, m.rank)
                    )
                } else if pids.len() > 1 {
                    format!("{} [{}]", m.name, m.pid)
                } else {
                    m.name.clone()
                }
            })
            .collect();
        let across = if pids.len() > 1 {
            format!(" in {} processes", pids.len())
        } else {
            String::new()
        };
        writeln!(
            w,
            "{} threads{across}: {} ({status})",
            group.members.len(),
            names.join(", ")
        )?;
    }
    for frame in &thread.frames {
        writeln!(w, "    {}", frame.label())?;
        // Locals differ between the members of a group; the first member's stand for it.
        for local in frame.locals.iter().flatten() {
            let repr = local.repr.as_deref().unwrap_or("?");
            writeln!(w, "        {} = {}", local.name, repr)?;
        }
    }
    Ok(())
}

/// `idle, waiting on a lock` or `active, running, holds GIL`.
fn status(thread: &ThreadDump) -> String {
    let mut status = String::from(if thread.active { "active" } else { "idle" });
    let state = thread.state.describe();
    if thread.state != stackscope_event::ThreadState::Unknown {
        status.push_str(", ");
        status.push_str(state);
    }
    if thread.owns_gil {
        status.push_str(", holds GIL");
    }
    status
}

/// Ranks missing from a tree of ranks: said where two ranked processes at least are there (one
/// rank alone on its node is no evidence that the others are gone).
fn missing_ranks(processes: &[ProcessDump]) -> Option<MissingRanks> {
    MissingRanks::of(processes.iter().map(|p| &p.rank), 2)
}

/// The JSON of a process tree: every process, the stragglers found among them, the ranks
/// missing from it, and the notes.
#[derive(Serialize)]
struct TreeJson<'a> {
    processes: &'a [ProcessDump],
    stragglers: Vec<Straggler>,
    #[serde(skip_serializing_if = "Option::is_none")]
    missing_ranks: Option<MissingRanks>,
    #[serde(skip_serializing_if = "<[_]>::is_empty")]
    all_waiting_on_locks: &'a [LockedProcess],
    #[serde(skip_serializing_if = "<[_]>::is_empty")]
    late_starts: &'a [LateStart],
}

/// The JSON of one process: the process, and whether all its threads wait on locks.
#[derive(Serialize)]
struct ProcessJson<'a> {
    #[serde(flatten)]
    process: &'a ProcessDump,
    #[serde(skip_serializing_if = "Option::is_none")]
    all_waiting_on_locks: Option<&'a LockedProcess>,
}

/// One process: the process itself as JSON; several: `{"processes": [...], "stragglers": [...]}`.
pub fn write_dump_json<W: Write>(
    processes: &[ProcessDump],
    notes: &DumpNotes,
    tree: bool,
    mut w: W,
) -> Result<(), ReportError> {
    match (tree, processes) {
        (false, [one]) => serde_json::to_writer_pretty(
            &mut w,
            &ProcessJson {
                process: one,
                all_waiting_on_locks: notes.locked.iter().find(|l| l.pid == one.pid),
            },
        )?,
        _ => serde_json::to_writer_pretty(
            &mut w,
            &TreeJson {
                processes,
                stragglers: find_stragglers(processes),
                missing_ranks: missing_ranks(processes),
                all_waiting_on_locks: &notes.locked,
                late_starts: &notes.late,
            },
        )?,
    }
    writeln!(w)?;
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;
    use stackscope_event::{LocalVariable, ThreadState};
    use stackscope_testkit::dumps;

    fn thread(name: &str, tid: u64, function: &str, line: u32) -> ThreadDump {
        dumps::thread(
            name,
            tid,
            ThreadState::WaitingOnLock,
            vec![dumps::frame(function, "job.py", line)],
        )
    }

    fn text(processes: &[ProcessDump]) -> String {
        let mut out = Vec::new();
        write_dump_text(processes, &DumpNotes::default(), &mut out).expect("write");
        String::from_utf8(out).expect("utf8")
    }

    #[test]
    fn one_thread_prints_its_state_frames_and_locals() {
        let mut t = thread("loader-0", 43, "wait_for_batch", 12);
        t.owns_gil = true;
        t.frames[0].locals = Some(vec![LocalVariable {
            name: "batch".into(),
            repr: Some("3".into()),
            arg: true,
        }]);
        let dump = [dumps::process(42, "python3 job.py", vec![t])];
        assert_eq!(
            text(&dump),
            "Process 42: python3 job.py\nPython v3.11.7\n\n\
             Thread 43 \"loader-0\" (idle, waiting on a lock, holds GIL)\n    \
             wait_for_batch (job.py:12)\n        batch = 3\n"
        );
    }

    #[test]
    fn a_process_in_a_container_shows_its_own_ids_beside_ours() {
        let mut t = thread("spinner", 5124, "spin", 7);
        t.ns_thread_id = Some(42);
        let mut dump = [ProcessDump {
            ns_pid: Some(1),
            ..dumps::process(5120, "python3 job.py", vec![t])
        }];
        let out = text(&dump);
        assert!(
            out.starts_with("Process 5120 (1 in its namespace): python3 job.py\n"),
            "{out}"
        );
        assert!(
            out.contains("Thread 5124 (42 in its namespace) \"spinner\" (idle"),
            "{out}"
        );
        dump[0].rank.rank = Some(6);
        assert!(
            text(&dump).starts_with("Process rank 6 (pid 5120, 1 in its namespace): "),
            "{out}"
        );
    }

    #[test]
    fn identical_threads_print_once_and_a_straggler_comes_first() {
        let mut threads: Vec<ThreadDump> = (0..7)
            .map(|i| thread(&format!("pool-{i}"), 100 + i, "get", 5))
            .collect();
        threads.push(thread("pool-7", 107, "compute", 30));
        let dump = [dumps::process(1, "python3 pool.py", threads)];
        let out = text(&dump);
        let first = out.lines().next().expect("a line");
        assert_eq!(
            first,
            "Straggler: Thread \"pool-7\" of process 1 is at compute (job.py:30), while 7 of its 8 peers are at get (job.py:5)"
        );
        assert!(out.contains(
            "7 threads: pool-0, pool-1, pool-2, pool-3, pool-4, pool-5, pool-6 (idle, waiting on a lock)\n    get (job.py:5)\n"
        ), "{out}");
        assert_eq!(out.matches("get (job.py:5)").count(), 2, "{out}");
    }

    fn notes(pid: u32) -> DumpNotes {
        DumpNotes {
            locked: vec![LockedProcess {
                pid,
                threads: 2,
                waits: vec![stackscope_aggregate::HeldBy {
                    thread: "MainThread".into(),
                    held_by: vec!["ring-1".into()],
                }],
            }],
            late: vec![LateStart {
                pid: 9,
                parent: pid,
                started: "2024-01-01T08:57:31+00:00".into(),
                secs_after_siblings: 41.0,
                siblings: vec![7, 8],
                clock: "08:57:31".into(),
            }],
        }
    }

    #[test]
    fn the_notes_come_first_in_the_text_and_in_the_json() {
        let dump = [dumps::process(
            1,
            "python3 a.py",
            vec![thread("MainThread", 1, "main", 3)],
        )];
        let mut out = Vec::new();
        write_dump_text(&dump, &notes(1), &mut out).expect("write");
        let out = String::from_utf8(out).expect("utf8");
        let lines: Vec<&str> = out.lines().collect();
        assert!(
            lines[0].starts_with(
                "All 2 threads of process 1 wait on locks and none runs: a \
                 deadlock if it lasts, which `watch` confirms. MainThread waits on an RLock held \
                 by ring-1."
            ),
            "{out}"
        );
        assert!(
            lines[1].starts_with("Worker pid 9 started 41 s after its 2 siblings (at 08:57:31)"),
            "{out}"
        );
        assert_eq!((lines[2], lines[3]), ("", "Process 1: python3 a.py"));
        let mut single = Vec::new();
        write_dump_json(&dump, &notes(1), false, &mut single).expect("json");
        let v: serde_json::Value = serde_json::from_slice(&single).expect("parses");
        assert_eq!(v["pid"], 1);
        assert_eq!(
            v["all_waiting_on_locks"]["waits"][0]["held_by"][0],
            "ring-1"
        );
        let mut tree = Vec::new();
        write_dump_json(&dump, &notes(1), true, &mut tree).expect("json");
        let v: serde_json::Value = serde_json::from_slice(&tree).expect("parses");
        assert_eq!(v["late_starts"][0]["pid"], 9);
        assert_eq!(v["all_waiting_on_locks"][0]["threads"], 2);
    }

    #[test]
    fn tree_json_lists_processes_and_stragglers() {
        let dump = [dumps::process(
            1,
            "python3 a.py",
            vec![thread("MainThread", 1, "main", 3)],
        )];
        let mut out = Vec::new();
        write_dump_json(&dump, &DumpNotes::default(), true, &mut out).expect("json");
        let v: serde_json::Value = serde_json::from_slice(&out).expect("parses");
        assert_eq!(v["processes"][0]["pid"], 1);
        assert_eq!(v["processes"][0]["threads"][0]["state"], "waiting_on_lock");
        assert!(v["stragglers"].as_array().is_some_and(|s| s.is_empty()));
        let mut single = Vec::new();
        write_dump_json(&dump, &DumpNotes::default(), false, &mut single).expect("json");
        let v: serde_json::Value = serde_json::from_slice(&single).expect("parses");
        assert_eq!(v["pid"], 1);
    }
}
