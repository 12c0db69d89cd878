//! A recording stretched to copies of itself: what lasted stays one process and one thread,
//! what came and went comes and goes again with new ids, one copy after the other.

use std::collections::BTreeSet;

use stackscope_event::{Event, ProcessEventKind, ThreadInfo, Timestamp};
use stackscope_samplelog::stretch::stretch;
use stackscope_samplelog::{SampleLogReader, SampleLogWriter};
use stackscope_testkit::events;

use crate::common::*;

const MS: u64 = 1_000_000;
/// The recorded process (the header's pid).
const JOB: u32 = 4242;
const WORKER: u32 = 200;

fn process(time: u64, pid: u32, kind: ProcessEventKind) -> Event {
    events::process(Timestamp(time), pid, &format!("python3 job.py {pid}"), kind)
}

/// One second of a job: its main thread throughout; a short-lived thread in the middle; a
/// thread id used at the start and again at the end by another thread; a worker process that
/// starts and ends, and another with the same pid that starts near the end and is still there.
fn one_second() -> Vec<Event> {
    let frames = events::frames(&[("step", "job.py", 3)]);
    let main = events::thread(1, Some(JOB.into()), Some("MainThread"), true);
    let short = events::thread(7, Some(777), Some("request-7"), true);
    let reused_a = events::thread(9, Some(901), Some("request-a"), true);
    let reused_b = events::thread(9, Some(902), Some("request-b"), true);
    let worker = events::thread(1, Some(WORKER.into()), Some("MainThread"), true);
    let mut out = vec![process(START, JOB, ProcessEventKind::Attached)];
    let at = |tick: u64, pid: u32, thread: &ThreadInfo| {
        events::stack_of(
            Timestamp(START + tick * 10 * MS),
            pid,
            thread.clone(),
            frames.clone(),
        )
    };
    for tick in 0..100u64 {
        out.push(at(tick, JOB, &main));
        if (40..60).contains(&tick) {
            out.push(at(tick, JOB, &short));
        }
        if (2..5).contains(&tick) {
            out.push(at(tick, JOB, &reused_a));
        }
        if (95..99).contains(&tick) {
            out.push(at(tick, JOB, &reused_b));
        }
        if (5..30).contains(&tick) || tick >= 91 {
            out.push(at(tick, WORKER, &worker));
        }
    }
    out.push(process(START + 50 * MS, WORKER, ProcessEventKind::Attached));
    out.push(process(START + 305 * MS, WORKER, ProcessEventKind::Exited));
    out.push(process(
        START + 905 * MS,
        WORKER,
        ProcessEventKind::Attached,
    ));
    out.push(process(START + 995 * MS, JOB, ProcessEventKind::Exited));
    out.sort_by_key(Event::time);
    out
}

#[test]
fn a_stretched_recording_repeats_what_came_and_went_with_new_ids() {
    let dir = tempfile::tempdir().expect("tempdir");
    let (input, output) = (dir.path().join("in"), dir.path().join("out"));
    std::fs::create_dir_all(&input).expect("mkdir");
    let mut writer = SampleLogWriter::create(&input, &header(false, false)).expect("create");
    for event in one_second() {
        writer.append(&event).expect("append");
    }
    writer.flush().expect("flush");
    drop(writer);

    let written = stretch(&input, &output, 3).expect("stretch");
    let read: Vec<Event> = SampleLogReader::open(&output.join("samples.log"))
        .expect("open")
        .map(|e| e.expect("event"))
        .collect();
    assert_eq!(written, read.len() as u64);

    let mut threads = BTreeSet::new();
    let mut pids = BTreeSet::new();
    let mut job_events = Vec::new();
    let mut worker_exits = 0;
    for event in &read {
        match event {
            Event::Stack(s) => {
                threads.insert((s.pid, s.thread.python_thread_id));
                pids.insert(s.pid);
            }
            Event::Process(p) if p.pid == JOB => job_events.push(p.kind),
            Event::Process(p) if p.kind == ProcessEventKind::Exited => worker_exits += 1,
            _ => {}
        }
    }
    // The job and its main thread are one; the worker's pid, reused within the recording, is
    // a new pid in each copy.
    assert_eq!(pids.len(), 1 + 3, "{pids:?}");
    assert!(pids.contains(&JOB));
    // The short thread and the reused thread id, three each.
    assert_eq!(
        threads.iter().filter(|(pid, _)| *pid == JOB).count(),
        1 + 3 + 3,
        "{threads:?}"
    );
    assert_eq!(
        job_events,
        [ProcessEventKind::Attached, ProcessEventKind::Exited],
        "the job attaches once and exits once"
    );
    // Each copy's first worker exits; its second exits at the copy's end, but in the last.
    assert_eq!(worker_exits, 3 + 2);
    // The copies follow each other: three seconds of the main thread, in order.
    let main_times: Vec<u64> = read
        .iter()
        .filter_map(|e| match e {
            Event::Stack(s) if s.pid == JOB && s.thread.python_thread_id == 1 => Some(s.time.0),
            _ => None,
        })
        .collect();
    assert_eq!(main_times.len(), 300);
    assert!(main_times.windows(2).all(|w| w[0] < w[1]));
    assert!(main_times[299] - main_times[0] >= 2_900 * MS);
}
