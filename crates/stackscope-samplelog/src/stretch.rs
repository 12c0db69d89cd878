//! A recording stretched into a longer one of the same job: what a day of recording costs
//! whoever reads it is measured on a soak of minutes (`scripts/soak-stretch`).
//!
//! The events of a log are written again and again, one copy after the other on the clock.
//! What lived through the whole recording (the job's process and its long-lived threads: seen
//! in its first and its last tenth) is the same process and thread in every copy; everything
//! else (threads and processes that came and went) gets new ids in each copy, so the stretched
//! log churns as the job did, copies times over. A long-lived process is attached in the first
//! copy and exits in the last.

use std::collections::HashSet;
use std::path::Path;

use stackscope_event::{Event, ProcessEventKind, Timestamp};

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
}

/// What lived through the recording at `log`; `None` for one without events.
fn survey(log: &Path) -> Result<Option<Span>, LogError> {
    let read = |f: &mut dyn FnMut(&Event)| -> Result<(), LogError> {
        for event in SampleLogReader::open(log)? {
            f(&event?);
        }
        Ok(())
    };
    let (mut first, mut last) = (u64::MAX, 0u64);
    read(&mut |e| {
        first = first.min(e.time().0);
        last = last.max(e.time().0);
    })?;
    if first > last {
        return Ok(None);
    }
    let tenth = (last - first) / 10;
    let (mut early, mut late) = (Ids::default(), Ids::default());
    read(&mut |e| {
        let t = e.time().0;
        if t <= first + tenth {
            early.note(e);
        }
        if t >= last - tenth {
            late.note(e);
        }
    })?;
    Ok(Some(Span {
        first,
        last,
        lasting_pids: early.pids.intersection(&late.pids).copied().collect(),
        lasting_threads: early.threads.intersection(&late.threads).copied().collect(),
    }))
}

#[derive(Default)]
struct Ids {
    pids: HashSet<u32>,
    threads: HashSet<(u32, u64)>,
}

impl Ids {
    fn note(&mut self, event: &Event) {
        if let Event::Stack(s) = event {
            self.pids.insert(s.pid);
            self.threads.insert((s.pid, s.thread.python_thread_id));
        }
    }
}

/// Writes `output/samples.log`: the events of `input/samples.log` `copies` times over, one
/// copy after the other on the clock (see the module's docs). Returns the events written.
pub fn stretch(input: &Path, output: &Path, copies: u32) -> Result<u64, LogError> {
    let log = input.join(LOG_FILE_NAME);
    let Some(span) = survey(&log)? else {
        return Ok(0);
    };
    let header = SampleLogReader::open(&log)?.header().clone();
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
    }
    writer.flush()?;
    Ok(written)
}

/// `event` as copy `copy` has it; `None` for the attach or exit of a long-lived process that
/// the copy does not repeat.
fn moved(mut event: Event, span: &Span, copy: u32, last_copy: bool, length: u64) -> Option<Event> {
    let shift = u64::from(copy) * length;
    let pid_of = |pid: u32| {
        if span.lasting_pids.contains(&pid) || pid >= PID_STEP {
            pid
        } else {
            pid + copy * PID_STEP
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
