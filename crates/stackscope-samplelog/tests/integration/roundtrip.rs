//! Every kind of event comes back from the log exactly as it went in.

// Helpers outside #[test] functions unwrap too: a test fails loudly on any error.
#![allow(clippy::unwrap_used)]

use crate::common;

use std::sync::Arc;

use common::{header, same, Typical, MS, START};
use stackscope_event::{
    Event, Frame, GpuSample, ProcessEvent, ProcessEventKind, SampleError, SampleErrorKind,
    ThreadInfo, Timestamp,
};
use stackscope_samplelog::{LogEnd, LogError, LogHeader, SampleLogReader, SampleLogWriter};
use stackscope_testkit::events;

fn write(dir: &std::path::Path, header: &LogHeader, events: &[Event]) -> SampleLogWriter {
    let mut writer = SampleLogWriter::create(dir, header).unwrap();
    for event in events {
        writer.append(event).unwrap();
    }
    writer.flush().unwrap();
    writer
}

fn read_all(dir: &std::path::Path) -> (LogHeader, Vec<Event>, LogEnd) {
    let mut reader = SampleLogReader::open(&dir.join("samples.log")).unwrap();
    let events: Vec<Event> = reader.by_ref().map(|e| e.unwrap()).collect();
    let end = reader.end().cloned().expect("read to the end");
    (reader.header().clone(), events, end)
}

fn stack(time: u64, pid: u32, thread: ThreadInfo, frames: Vec<Frame>) -> Event {
    events::stack_of(Timestamp(time), pid, thread, frames)
}

fn thread(tid: u64, os: Option<u64>, name: Option<&str>, active: bool, gil: bool) -> ThreadInfo {
    ThreadInfo {
        owns_gil: gil,
        ..events::thread(tid, os, name, active)
    }
}

fn every_kind() -> Vec<Event> {
    let a = Frame::python("train_step", "train.py", 42);
    let b = Frame::python("forward", "model.py", 7);
    let native = Frame {
        function: Arc::from("cudaLaunchKernel"),
        file: Arc::from("libcudart.so.12"),
        line: 0,
        native: true,
        origin: stackscope_event::FileOrigin::Native,
    };
    let unicode = Frame::python("données_λ", "/tmp/ünï/código.py", u32::MAX);
    let main = |active, gil| thread(1, Some(100), Some("MainThread"), active, gil);
    vec![
        Event::Process(ProcessEvent {
            time: Timestamp(START),
            pid: 4242,
            command_line: "python train.py".into(),
            kind: ProcessEventKind::Attached,
            rank: Default::default(),
            how: None,
        }),
        stack(
            START + MS,
            4242,
            main(true, true),
            vec![b.clone(), a.clone()],
        ),
        stack(
            START + MS,
            4242,
            main(true, false),
            vec![b.clone(), a.clone()],
        ),
        stack(START + 2 * MS, 4242, main(false, true), vec![a.clone()]),
        stack(START + 2 * MS, 4242, main(false, false), vec![]),
        // A thread with no name and no OS id, then the same Python id in another process.
        stack(
            START + 3 * MS,
            4242,
            thread(2, None, None, true, false),
            vec![native.clone()],
        ),
        stack(
            START + 3 * MS,
            777,
            thread(2, Some(9), Some("w"), true, false),
            vec![native.clone(), a.clone()],
        ),
        // The main thread renamed, then given no name.
        stack(
            START + 4 * MS,
            4242,
            thread(1, Some(100), Some("Renamed"), true, true),
            vec![unicode.clone(), b.clone()],
        ),
        stack(
            START + 4 * MS,
            4242,
            thread(1, Some(100), None, true, true),
            vec![unicode.clone()],
        ),
        // Times that go backwards, a lot and a little.
        stack(START - 10 * MS, 4242, main(true, true), vec![a.clone()]),
        stack(5, 4242, main(true, true), vec![a.clone()]),
        stack(u64::MAX, 4242, main(true, true), vec![a.clone()]),
        stack(0, 4242, main(true, true), vec![a.clone()]),
        Event::SampleError(SampleError {
            time: Timestamp(START + 5 * MS),
            pid: 4242,
            kind: SampleErrorKind::TornRead,
            message: "torn".into(),
        }),
        Event::SampleError(SampleError {
            time: Timestamp(START + 5 * MS),
            pid: 777,
            kind: SampleErrorKind::ThreadGone,
            message: "gone".into(),
        }),
        Event::SampleError(SampleError {
            time: Timestamp(START + 6 * MS),
            pid: 4242,
            kind: SampleErrorKind::Other,
            message: String::new(),
        }),
        Event::Gpu(GpuSample {
            time: Timestamp(START + 3 * MS),
            device: 1,
            utilization: Some(87.5),
            memory_utilization: Some(12.25),
            memory_used_bytes: Some(u64::MAX),
            memory_total_bytes: Some(85_899_345_920),
            power_watts: Some(301.7),
            sm_clock_mhz: Some(u32::MAX),
            throttle_reasons: Some(0x8000_0000_0000_0001),
            process_utilization: Some(f32::MIN_POSITIVE),
            sm_active: Some(23.5),
            sm_occupancy: None,
            tensor_active: Some(0.0),
            dram_bw: Some(100.0),
            compute_pids: Some(vec![4242, 4243]),
            process_memory: vec![stackscope_event::ProcessGpuMemory {
                pid: 4242,
                bytes: 7 << 30,
            }],
        }),
        // Memory readings, late and out of order as their producer sends them.
        Event::Memory(stackscope_event::MemorySample {
            time: Timestamp(START + 2 * MS),
            pid: 4242,
            rss_bytes: 1 << 30,
            private_bytes: Some(900 << 20),
            shared_bytes: Some(100 << 20),
            swap_bytes: Some(0),
        }),
        Event::Memory(stackscope_event::MemorySample {
            time: Timestamp(START + MS),
            pid: 777,
            rss_bytes: 0,
            ..Default::default()
        }),
        Event::Cgroup(stackscope_event::CgroupSample {
            time: Timestamp(START),
            usage_bytes: 3 << 30,
            limit_bytes: Some(4 << 30),
            oom_kills: Some(1),
        }),
        Event::Cgroup(stackscope_event::CgroupSample {
            time: Timestamp(u64::MAX),
            usage_bytes: u64::MAX,
            limit_bytes: None,
            oom_kills: None,
        }),
        // GPM readings alone (a device whose other metrics are unsupported).
        Event::Gpu(GpuSample {
            time: Timestamp(START + 4 * MS),
            device: 2,
            sm_occupancy: Some(7.25),
            ..GpuSample::default()
        }),
        Event::Gpu(GpuSample {
            time: Timestamp(START + MS),
            device: 0,
            ..GpuSample::default()
        }),
        Event::Gpu(GpuSample {
            time: Timestamp(START + 2 * MS),
            device: u32::MAX,
            utilization: Some(0.0),
            power_watts: Some(-0.0),
            ..GpuSample::default()
        }),
        Event::Process(ProcessEvent {
            time: Timestamp(START + 9 * MS),
            pid: 777,
            command_line: String::new(),
            kind: ProcessEventKind::Exited,
            rank: Default::default(),
            how: None,
        }),
        // How a process ended, each way the log keeps it.
        Event::Process(ProcessEvent {
            time: Timestamp(START + 10 * MS),
            pid: 778,
            command_line: "python worker.py".into(),
            kind: ProcessEventKind::Exited,
            rank: Default::default(),
            how: Some(stackscope_event::HowEnded::Killed(9)),
        }),
        Event::Process(ProcessEvent {
            time: Timestamp(START + 10 * MS),
            pid: 779,
            command_line: String::new(),
            kind: ProcessEventKind::Exited,
            rank: Default::default(),
            how: Some(stackscope_event::HowEnded::OomKilled(
                stackscope_event::OomEvidence::Cgroup(3),
            )),
        }),
        Event::Process(ProcessEvent {
            time: Timestamp(START + 11 * MS),
            pid: 780,
            command_line: String::new(),
            kind: ProcessEventKind::Exited,
            rank: Default::default(),
            how: Some(stackscope_event::HowEnded::Exited(1)),
        }),
    ]
}

#[test]
fn every_event_kind_round_trips() {
    let dir = tempfile::tempdir().unwrap();
    let mut h = header(true, true);
    h.expected_gpu_devices = vec![0, 3];
    let events = every_kind();
    write(dir.path(), &h, &events);
    let (read_header, read, end) = read_all(dir.path());
    assert_eq!(read_header, h);
    assert_eq!(end, LogEnd::Complete);
    assert_eq!(read.len(), events.len());
    for (i, (a, b)) in events.iter().zip(&read).enumerate() {
        assert!(same(a, b), "event {i}:\n wrote {a:?}\n read  {b:?}");
    }
}

#[test]
fn a_long_stream_round_trips_across_many_blocks() {
    let dir = tempfile::tempdir().unwrap();
    let events: Vec<Event> = Typical::new(60, 7).collect();
    let writer = write(dir.path(), &header(false, true), &events);
    assert!(
        writer.bytes_written() > 4 * stackscope_samplelog::BLOCK_TARGET as u64,
        "several blocks"
    );
    let (_, read, end) = read_all(dir.path());
    assert_eq!(end, LogEnd::Complete);
    assert_eq!(read.len(), events.len());
    assert!(events.iter().zip(&read).all(|(a, b)| same(a, b)));
}

#[test]
fn dropping_the_writer_writes_the_open_block() {
    let dir = tempfile::tempdir().unwrap();
    let events = every_kind();
    {
        let mut writer = SampleLogWriter::create(dir.path(), &header(true, true)).unwrap();
        for event in &events {
            writer.append(event).unwrap();
        }
        assert!(writer.bytes_pending() > 0);
    }
    let (_, read, _) = read_all(dir.path());
    assert_eq!(read.len(), events.len());
}

#[test]
fn long_strings_are_cut_not_refused() {
    let dir = tempfile::tempdir().unwrap();
    let long = "é".repeat(stackscope_samplelog::MAX_STRING_LEN);
    let event = stack(
        START,
        1,
        thread(1, None, Some(&long), true, true),
        vec![Frame::python(&long, "f.py", 1)],
    );
    write(dir.path(), &header(true, false), &[event]);
    let (_, read, _) = read_all(dir.path());
    let Event::Stack(sample) = &read[0] else {
        panic!("not a stack: {:?}", read[0]);
    };
    let function = &sample.frames[0].function;
    assert!(function.len() <= stackscope_samplelog::MAX_STRING_LEN);
    assert!(function.len() > stackscope_samplelog::MAX_STRING_LEN - 4);
    assert!(function.chars().all(|c| c == 'é'));
}

#[test]
fn what_is_not_a_log_is_refused_with_a_clear_error() {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("samples.log");
    std::fs::write(&path, b"flamegraph").unwrap();
    assert!(matches!(
        SampleLogReader::open(&path),
        Err(LogError::NotALog { .. })
    ));
    std::fs::write(&path, b"STKSC").unwrap();
    assert!(matches!(
        SampleLogReader::open(&path),
        Err(LogError::Header { .. })
    ));
    std::fs::write(&path, b"STKSCPLG\x09\x00").unwrap();
    let err = SampleLogReader::open(&path).unwrap_err();
    assert!(matches!(err, LogError::Version { found: 9, .. }), "{err}");
    std::fs::write(&path, b"").unwrap();
    assert!(matches!(
        SampleLogReader::open(&path),
        Err(LogError::Header { .. })
    ));
}

/// A thread's stack made of the very same frame objects as its last one is written from the
/// writer's memory of it; every other stack (a line moved, or equal frames made anew, or
/// another thread's) is looked up. What is read back is what was written, either way.
#[test]
fn unchanged_stacks_of_each_thread_round_trip() {
    let dir = tempfile::tempdir().unwrap();
    let frame = |f: &str, line| Frame::python(f, "work.py", line);
    let asleep = vec![frame("wait", 10), frame("run", 20)];
    let moved = vec![frame("wait", 11), frame("run", 20)];
    let anew = vec![frame("wait", 10), frame("run", 20)];
    let a = thread(1, Some(101), Some("a"), false, false);
    let b = thread(2, Some(102), Some("b"), true, true);
    let mut events = Vec::new();
    for (i, frames) in [&asleep, &asleep, &moved, &asleep, &anew, &asleep, &moved]
        .into_iter()
        .enumerate()
    {
        let t = START + i as u64 * 10 * MS;
        events.push(stack(t, 7, a.clone(), frames.clone()));
        // Another thread in between, with the same frames as the first's last but one.
        events.push(stack(
            t + MS,
            7,
            b.clone(),
            if i % 2 == 0 {
                moved.clone()
            } else {
                asleep.clone()
            },
        ));
    }
    write(dir.path(), &header(false, false), &events);
    let (_, read, end) = read_all(dir.path());
    assert_eq!(end, LogEnd::Complete);
    assert_eq!(read.len(), events.len());
    for (i, (a, b)) in events.iter().zip(&read).enumerate() {
        assert!(same(a, b), "event {i}:\n wrote {a:?}\n read  {b:?}");
    }
}
