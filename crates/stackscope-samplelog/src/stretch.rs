//! A recording stretched into a longer one of the same job: what a day of recording costs
//! whoever reads it is measured on a soak of minutes (`scripts/soak-stretch`).
//!
//! The events of a log are written again and again, one copy after the other on the clock.
//! What lived through the whole recording is the same process and thread in every copy: the
//! recorded process, a process there from the first tenth that never exited, a thread with
//! the same name in the first and the last tenth. Everything else (threads and processes that
//! came and went, pids and thread ids reused) gets new ids in each copy, so the stretched log
//! churns as the job did, copies times over. A long-lived process is attached in the first
//! copy and exits in the last; one that came and was still there at a copy's end exits there.

use std::collections::{HashMap, HashSet};
use std::path::Path;
use std::sync::Arc;

use stackscope_event::{Event, ProcessEvent, ProcessEventKind, RankInfo, Timestamp};

use crate::{LogError, SampleLogReader, SampleLogWriter, LOG_FILE_NAME};

/// Pids of a copy are moved by this much, above any pid the kernel gives (`pid_max` is at
/// most 2^22) and below the pids of groups of like processes (2^30).
const PID_STEP: u32 = 1 << 22;
/// Thread ids of a copy are moved by this much, into bits no thread id uses.
const THREAD_STEP: u64 = 1 << 48;
/// The most copies: their pids stay below the pids of groups.
pub const MAX_COPIES: u32 = 255;

/// What lived through the recording, and how long the recording is.
struct Span {
    first: u64,
    last: u64,
    lasting_pids: HashSet<u32>,
    lasting_threads: HashSet<(u32, u64)>,
    /// Processes that came and were still there at the end: each copy but the last ends them,
    /// as the next copy starts others in their place.
    alive_at_end: Vec<u32>,
}

/// What the survey learns of one pid. Pids are reused over a long recording (`pid_max` is
/// often 32,768): a pid that exited at some point is not one process throughout.
#[derive(Default)]
struct PidSeen {
    first: u64,
    exited: bool,
    /// Whether its last process event is an attach.
    attached_last: bool,
}

/// What the survey learns of one thread: when it was first and last seen, with its name then.
struct ThreadSeen {
    first: (u64, Option<Arc<str>>),
    last: (u64, Option<Arc<str>>),
}

/// What lived through the recording at `log`, in one read of it; `None` for one without events.
fn survey(log: &Path, root: u32) -> Result<Option<Span>, LogError> {
    let (mut first, mut last) = (u64::MAX, 0u64);
    let mut pids: HashMap<u32, PidSeen> = HashMap::new();
    let mut threads: HashMap<(u32, u64), ThreadSeen> = HashMap::new();
    for event in SampleLogReader::open(log)? {
        let e = event?;
        let t = e.time().0;
        first = first.min(t);
        last = last.max(t);
        match &e {
            Event::Stack(s) => {
                pids.entry(s.pid).or_insert_with(|| PidSeen {
                    first: t,
                    ..PidSeen::default()
                });
                let now = (t, s.thread.name.clone());
                threads
                    .entry((s.pid, s.thread.python_thread_id))
                    .and_modify(|seen| seen.last = now.clone())
                    .or_insert_with(|| ThreadSeen {
                        first: now.clone(),
                        last: now,
                    });
            }
            Event::Process(p) => {
                let seen = pids.entry(p.pid).or_insert_with(|| PidSeen {
                    first: t,
                    ..PidSeen::default()
                });
                seen.exited |= p.kind == ProcessEventKind::Exited;
                seen.attached_last = p.kind == ProcessEventKind::Attached;
            }
            _ => {}
        }
    }
    if first > last {
        return Ok(None);
    }
    let tenth = (last - first) / 10;
    let lasting_pids: HashSet<u32> = pids
        .iter()
        .filter(|(&pid, seen)| pid == root || (!seen.exited && seen.first <= first + tenth))
        .map(|(&pid, _)| pid)
        .collect();
    let alive_at_end = pids
        .iter()
        .filter(|(pid, seen)| seen.attached_last && !lasting_pids.contains(pid))
        .map(|(&pid, _)| pid)
        .collect();
    // A thread id is reused too: seen in the first and the last tenth under the same name, it
    // is one thread throughout.
    let lasting_threads = threads
        .into_iter()
        .filter(|(_, seen)| {
            seen.first.0 <= first + tenth
                && seen.last.0 >= last - tenth
                && seen.first.1 == seen.last.1
        })
        .map(|(thread, _)| thread)
        .collect();
    Ok(Some(Span {
        first,
        last,
        lasting_pids,
        lasting_threads,
        alive_at_end,
    }))
}

/// Writes `output/samples.log`: the events of `input/samples.log` `copies` times over, one
/// copy after the other on the clock (see the module's docs). Returns the events written.
pub fn stretch(input: &Path, output: &Path, copies: u32) -> Result<u64, LogError> {
    let log = input.join(LOG_FILE_NAME);
    let header = SampleLogReader::open(&log)?.header().clone();
    let Some(span) = survey(&log, header.pid)? else {
        return Ok(0);
    };
    std::fs::create_dir_all(output).map_err(|source| LogError::Create {
        path: output.to_owned(),
        source,
    })?;
    let mut writer = SampleLogWriter::create(output, &header)?;
    // A copy starts a tick after the last ended.
    let length = span.last - span.first + 10_000_000;
    let mut written = 0;
    for copy in 0..copies {
        for event in SampleLogReader::open(&log)? {
            let event = event?;
            let last_copy = copy + 1 == copies;
            if let Some(event) = moved(event, &span, copy, last_copy, length) {
                writer.append(&event)?;
                written += 1;
            }
        }
        if copy + 1 < copies {
            let end = Timestamp(span.last + u64::from(copy) * length + 1);
            for &pid in &span.alive_at_end {
                writer.append(&ended(pid, copy, end))?;
                written += 1;
            }
        }
    }
    writer.flush()?;
    Ok(written)
}

/// The exit of a process of copy `copy` that was still there at its end.
fn ended(pid: u32, copy: u32, time: Timestamp) -> Event {
    Event::Process(ProcessEvent {
        time,
        pid: moved_pid(pid, copy),
        command_line: String::new(),
        kind: ProcessEventKind::Exited,
        rank: RankInfo::default(),
        how: None,
    })
}

/// A pid that did not last, as copy `copy` has it.
fn moved_pid(pid: u32, copy: u32) -> u32 {
    if pid >= PID_STEP {
        pid
    } else {
        pid + copy * PID_STEP
    }
}

/// `event` as copy `copy` has it; `None` for the attach or exit of a long-lived process that
/// the copy does not repeat.
fn moved(mut event: Event, span: &Span, copy: u32, last_copy: bool, length: u64) -> Option<Event> {
    let shift = u64::from(copy) * length;
    let pid_of = |pid: u32| {
        if span.lasting_pids.contains(&pid) {
            pid
        } else {
            moved_pid(pid, copy)
        }
    };
    match &mut event {
        Event::Stack(s) => {
            s.time = Timestamp(s.time.0 + shift);
            if !span
                .lasting_threads
                .contains(&(s.pid, s.thread.python_thread_id))
            {
                let step = u64::from(copy) * THREAD_STEP;
                s.thread.python_thread_id += step;
                s.thread.os_thread_id = s.thread.os_thread_id.map(|t| t + step);
            }
            s.pid = pid_of(s.pid);
        }
        Event::SampleError(e) => {
            e.time = Timestamp(e.time.0 + shift);
            e.pid = pid_of(e.pid);
        }
        Event::Process(p) => {
            if span.lasting_pids.contains(&p.pid) {
                let keep = match p.kind {
                    ProcessEventKind::Exited => last_copy,
                    ProcessEventKind::Attached => copy == 0,
                };
                if !keep {
                    return None;
                }
            }
            p.time = Timestamp(p.time.0 + shift);
            p.pid = pid_of(p.pid);
        }
        Event::Memory(m) => {
            m.time = Timestamp(m.time.0 + shift);
            m.pid = pid_of(m.pid);
        }
        Event::Gpu(g) => g.time = Timestamp(g.time.0 + shift),
        Event::Cgroup(c) => c.time = Timestamp(c.time.0 + shift),
    }
    Some(event)
}
