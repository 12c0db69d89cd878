//! Memory readings in the log: every record comes back exactly, across blocks and resets, in
//! windows; a log without them is written byte for byte as before they existed.

// Helpers outside #[test] functions unwrap too: a test fails loudly on any error.
#![allow(clippy::unwrap_used)]

use std::collections::HashMap;
use std::path::Path;
use std::sync::Arc;

use stackscope_event::{
    CgroupSample, Event, Frame, GpuSample, MemorySample, ProcessEvent, ProcessEventKind,
    ProcessGpuMemory, SampleError, SampleErrorKind, StackSample, ThreadInfo, Timestamp,
};
use stackscope_samplelog::{
    feed_window, Damage, InternLimits, LogEnd, SampleLogReader, SampleLogWriter, Window,
    BLOCK_TARGET, LOG_FILE_NAME,
};

use crate::common::{header, same, MS, START};

/// A stream of every event kind the log kept before memory records: stacks of three threads
/// (a few stacks, renamed threads), errors, process events, GPU readings of each coding (plain,
/// with GPM, with compute pids), late and out of order, as a recording logs them.
fn stream_without_memory() -> Vec<Event> {
    let frames: Vec<Arc<[Frame]>> = (0..6)
        .map(|s| {
            (0..=s)
                .map(|d| Frame::python(&format!("f{s}_{d}"), &format!("m{d}.py"), 10 + d))
                .collect::<Vec<_>>()
                .into()
        })
        .collect();
    let mut events = vec![Event::Process(ProcessEvent {
        time: Timestamp(START),
        pid: 4242,
        command_line: "python train.py".into(),
        kind: ProcessEventKind::Attached,
        rank: Default::default(),
        how: None,
    })];
    for tick in 0..4000u64 {
        let time = START + tick * 10 * MS + (tick * 7_919_333) % (10 * MS);
        for t in 0..3u64 {
            let name = if tick > 2000 && t == 2 {
                "renamed"
            } else {
                "w"
            };
            events.push(Event::Stack(StackSample {
                time: Timestamp(time),
                pid: 4242 + t as u32,
                thread: ThreadInfo {
                    os_thread_id: Some(100 + t),
                    python_thread_id: t,
                    name: Some(format!("{name}{t}").into()),
                    active: (tick + t) % 3 != 0,
                    owns_gil: (tick + t) % 2 == 0,
                },
                frames: frames[((tick / 7 + t) % 6) as usize].clone(),
            }));
        }
        if tick % 500 == 250 {
            events.push(Event::SampleError(SampleError {
                time: Timestamp(time),
                pid: 4242,
                kind: SampleErrorKind::TornRead,
                message: format!("torn {tick}"),
            }));
        }
        if tick % 50 == 49 {
            // Five readings, half a second late, the last carrying what the poll adds.
            for k in 0..5u64 {
                let at = time - 500 * MS + k * 100 * MS;
                events.push(Event::Gpu(GpuSample {
                    time: Timestamp(at),
                    device: (k % 2) as u32,
                    utilization: Some((tick % 100) as f32),
                    memory_used_bytes: Some(30_000_000_000 + tick * 4096),
                    power_watts: Some(250.5),
                    sm_active: (k == 3).then_some(12.5),
                    compute_pids: (k == 4).then(|| vec![4242, 4243]),
                    ..GpuSample::default()
                }));
            }
        }
        if tick == 3000 {
            events.push(Event::Process(ProcessEvent {
                time: Timestamp(time),
                pid: 4244,
                command_line: String::new(),
                kind: ProcessEventKind::Exited,
                rank: Default::default(),
                how: Some(stackscope_event::HowEnded::Killed(9)),
            }));
        }
    }
    events
}

/// The bytes of a log of `events`, flushed every `flush_every` events.
fn log_bytes(events: &[Event], limits: InternLimits, flush_every: usize) -> Vec<u8> {
    let dir = tempfile::tempdir().unwrap();
    let mut writer =
        SampleLogWriter::create_with_limits(dir.path(), &header(false, true), limits).unwrap();
    for (i, event) in events.iter().enumerate() {
        writer.append(event).unwrap();
        if i % flush_every == flush_every - 1 {
            writer.flush().unwrap();
        }
    }
    writer.flush().unwrap();
    std::fs::read(writer.path()).unwrap()
}

/// Small tables: the stream resets them now and then.
fn small_limits() -> InternLimits {
    InternLimits {
        strings: 12,
        frames: 12,
        stacks: 4,
        ..InternLimits::default()
    }
}

#[test]
fn a_log_without_memory_is_written_as_before_byte_for_byte() {
    let events = stream_without_memory();
    // What format 3 wrote for these events before memory records existed.
    for (limits, flush_every, len, crc) in [
        (InternLimits::default(), 3_000, 70_217u64, 312_736_062u32),
        (small_limits(), 700, 1_055_092, 527_516_585),
    ] {
        let bytes = log_bytes(&events, limits, flush_every);
        let got = (bytes.len() as u64, crc32fast::hash(&bytes));
        assert_eq!(got, (len, crc), "the log's length and CRC-32");
    }
}

/// `stream_without_memory` with the memory poller's readings among its events as a recording
/// logs them: every 100 ms a batch (three processes, smaps fields every fifth reading, the
/// cgroup), sent 150 ms late; the GPU samples carry their processes' memory.
fn stream_with_memory() -> Vec<Event> {
    let mut out = Vec::new();
    let mut next_batch = START + 100 * MS;
    let mut reading = 0u64;
    for event in stream_without_memory() {
        let time = match &event {
            Event::Stack(s) => Some(s.time.0),
            _ => None,
        };
        let event = match event {
            Event::Gpu(mut gpu) if gpu.compute_pids.is_some() => {
                gpu.process_memory = vec![
                    ProcessGpuMemory {
                        pid: 4242,
                        bytes: (2 << 30) + gpu.time.0 % 1000 * 4096,
                    },
                    ProcessGpuMemory {
                        pid: 4243,
                        bytes: 300 << 20,
                    },
                ];
                Event::Gpu(gpu)
            }
            event => event,
        };
        out.push(event);
        while time.is_some_and(|t| t >= next_batch + 150 * MS) {
            out.extend(memory_batch(next_batch, reading));
            next_batch += 100 * MS;
            reading += 1;
        }
    }
    out
}

/// One poll of the memory poller at `at`: three processes (read a few microseconds apart),
/// then the cgroup.
fn memory_batch(at: u64, reading: u64) -> Vec<Event> {
    let smaps = reading.is_multiple_of(5);
    let mut batch: Vec<Event> = (0..3u32)
        .map(|p| {
            Event::Memory(MemorySample {
                time: Timestamp(at + u64::from(p) * 7_000),
                pid: 4242 + p,
                // The first process grows 1 MiB a reading.
                rss_bytes: (500 << 20) + u64::from(p == 0) * reading * (1 << 20),
                private_bytes: smaps.then_some(400 << 20),
                shared_bytes: (smaps && p > 0).then_some(100 << 20),
                swap_bytes: smaps.then_some(0),
            })
        })
        .collect();
    batch.push(Event::Cgroup(CgroupSample {
        time: Timestamp(at + 30_000),
        usage_bytes: (2 << 30) + reading * (1 << 20),
        limit_bytes: (!reading.is_multiple_of(3)).then_some(4 << 30),
        oom_kills: reading.is_multiple_of(2).then_some(reading / 100),
    }));
    batch
}

fn read_all(path: &Path) -> (Vec<Event>, LogEnd, Damage) {
    let mut reader = SampleLogReader::open(path).unwrap();
    let events: Vec<Event> = reader.by_ref().map(Result::unwrap).collect();
    (events, reader.end().cloned().unwrap(), reader.damage())
}

fn assert_same(wrote: &[Event], read: &[Event]) {
    assert_eq!(read.len(), wrote.len());
    for (i, (a, b)) in wrote.iter().zip(read).enumerate() {
        assert!(same(a, b), "event {i}:\n wrote {a:?}\n read  {b:?}");
    }
}

fn count_memory(events: &[Event]) -> (usize, usize) {
    let memory = events
        .iter()
        .filter(|e| matches!(e, Event::Memory(_)))
        .count();
    let cgroup = events
        .iter()
        .filter(|e| matches!(e, Event::Cgroup(_)))
        .count();
    (memory, cgroup)
}

#[test]
fn memory_readings_round_trip_across_many_blocks_and_resets() {
    let events = stream_with_memory();
    let (memory, cgroup) = count_memory(&events);
    assert!(memory > 1000 && cgroup > 300, "{memory} {cgroup}");
    for (limits, flush_every) in [
        (InternLimits::default(), 3_000),
        (small_limits(), 700),
        // A block at every few events: many blocks open on a memory record.
        (InternLimits::default(), 3),
    ] {
        let dir = tempfile::tempdir().unwrap();
        let bytes = log_bytes_in(dir.path(), &events, limits, flush_every);
        assert!(bytes > 4 * BLOCK_TARGET as u64, "several blocks");
        let (read, end, damage) = read_all(&dir.path().join(LOG_FILE_NAME));
        assert_eq!(end, LogEnd::Complete);
        assert_eq!(damage, Damage::default());
        assert_same(&events, &read);
    }
}

/// Writes `events` in `dir` as `log_bytes` does; returns the log's size.
fn log_bytes_in(dir: &Path, events: &[Event], limits: InternLimits, flush_every: usize) -> u64 {
    let mut writer =
        SampleLogWriter::create_with_limits(dir, &header(false, true), limits).unwrap();
    for (i, event) in events.iter().enumerate() {
        writer.append(event).unwrap();
        if i % flush_every == flush_every - 1 {
            writer.flush().unwrap();
        }
    }
    writer.flush().unwrap();
    writer.bytes_written()
}

#[test]
fn memory_readings_cost_a_few_bytes_each() {
    let dir = tempfile::tempdir().unwrap();
    let without = log_bytes(&stream_without_memory(), InternLimits::default(), 3_000).len();
    let events = stream_with_memory();
    let with = log_bytes_in(dir.path(), &events, InternLimits::default(), 3_000);
    let (memory, cgroup) = count_memory(&events);
    let per_reading = (with - without as u64) as f64 / (memory + cgroup) as f64;
    eprintln!("{per_reading:.2} bytes per memory or cgroup reading");
    // Tag, delta, pid, mask, RSS: about 11 bytes; the smaps fields every fifth reading, the
    // cgroup's limit, the GPU samples' process memory and a block's first (absolute) time on
    // top.
    assert!(per_reading < 16.0, "{per_reading}");
}

#[test]
fn a_damaged_block_among_memory_readings_is_skipped_and_the_next_reads_true_times() {
    let dir = tempfile::tempdir().unwrap();
    let events = stream_with_memory();
    log_bytes_in(dir.path(), &events, InternLimits::default(), 1_000);
    let path = dir.path().join(LOG_FILE_NAME);
    let mut bytes = std::fs::read(&path).unwrap();
    // A byte in the middle of the file: one block lost.
    let at = bytes.len() / 2;
    bytes[at] ^= 0x55;
    std::fs::write(&path, &bytes).unwrap();
    let (read, end, damage) = read_all(&path);
    assert_eq!(end, LogEnd::Complete);
    assert_eq!(damage.blocks, 1, "{damage:?}");
    assert!(read.len() < events.len());
    // What is read is what was written: the lost block's events are a run of the stream, and
    // every memory reading after it has its true time (the base starts again in each block).
    let lost_at = events
        .iter()
        .zip(&read)
        .position(|(a, b)| !same(a, b))
        .unwrap();
    let lost = events.len() - read.len();
    assert_same(&events[..lost_at], &read[..lost_at]);
    assert_same(&events[lost_at + lost..], &read[lost_at..]);
    assert!(count_memory(&read[lost_at..]).0 > 100);
}

#[test]
fn a_window_cuts_through_memory_readings() {
    let dir = tempfile::tempdir().unwrap();
    let events = stream_with_memory();
    log_bytes_in(dir.path(), &events, InternLimits::default(), 3_000);
    let path = dir.path().join(LOG_FILE_NAME);
    // 10 s to 20 s, each end between two processes' readings of one poll (7 us apart).
    let window = Window::new(Some(10.000_003), Some(20.000_010));
    let mut reader = SampleLogReader::open(&path).unwrap();
    let header = reader.header().clone();
    let mut fed = Vec::new();
    feed_window(&mut reader, &header, window, &HashMap::new(), &mut |e| {
        fed.push(e)
    })
    .unwrap();
    let secs = |e: &Event| e.time().seconds_since(header.start);
    let fed_memory: Vec<&Event> = fed
        .iter()
        .filter(|e| matches!(e, Event::Memory(_) | Event::Cgroup(_)))
        .collect();
    let expected: Vec<&Event> = events
        .iter()
        .filter(|e| matches!(e, Event::Memory(_) | Event::Cgroup(_)))
        .filter(|e| window.contains(secs(e)))
        .collect();
    // Every reading in the window, in the recorded order, and none outside it.
    assert_eq!(fed_memory.len(), expected.len());
    assert!(fed_memory.iter().zip(&expected).all(|(a, b)| same(a, b)));
    // The poll at 10 s is cut after its first process, the one at 20 s after its second.
    let pids = |events: &[&Event]| -> Vec<u32> {
        events
            .iter()
            .map(|e| match e {
                Event::Memory(m) => m.pid,
                _ => 0,
            })
            .collect()
    };
    assert_eq!(pids(&fed_memory[..3]), [4243, 4244, 0]);
    assert_eq!(pids(&fed_memory[fed_memory.len() - 2..]), [4242, 4243]);
    assert_eq!(fed_memory.len(), 3 + 99 * 4 + 2);
    // In the recorded order among the window's other events: the window's part of the
    // stream, exactly.
    let in_window = |events: Vec<&Event>| -> Vec<String> {
        events
            .into_iter()
            .filter(|e| window.contains(secs(e)))
            .map(|e| format!("{e:?}"))
            .collect()
    };
    assert_eq!(
        in_window(fed.iter().collect()),
        in_window(events.iter().collect())
    );
}
