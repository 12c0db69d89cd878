//! A log kept within a size or an age: written in segments that each decode on their own, the
//! oldest deleted, read back whole oldest first; without limits, one file as before.

// Helpers outside #[test] functions unwrap too: a test fails loudly on any error.
#![allow(clippy::unwrap_used)]

use crate::common;

use std::path::{Path, PathBuf};
use std::time::Duration;

use common::{header, same, Typical, MS, SEC, START};
use stackscope_event::{Event, ProcessEventKind, Timestamp};
use stackscope_samplelog::{
    log_files, segment_file_name, InternLimits, LogEnd, LogLimits, SampleLogReader,
    SampleLogWriter, SegmentStats, LOG_FILE_NAME,
};
use stackscope_testkit::events;

fn by_size(max_bytes: u64) -> LogLimits {
    LogLimits {
        max_bytes: Some(max_bytes),
        max_age: None,
    }
}

/// Writes `events` with `limits`, a checkpoint every 60 s of events; gives the writer's
/// account of its segments.
fn write(dir: &Path, limits: LogLimits, events: &[Event]) -> SegmentStats {
    let mut writer =
        SampleLogWriter::create_with(dir, &header(false, true), InternLimits::default(), limits)
            .unwrap();
    let mut next_flush = START + 60 * SEC;
    for event in events {
        writer.append(event).unwrap();
        if event.time().as_nanos() >= next_flush {
            writer.flush().unwrap();
            next_flush += 60 * SEC;
        }
    }
    writer.flush().unwrap();
    writer.segments()
}

fn read(path: &Path) -> (SampleLogReader, Vec<Event>) {
    read_all(SampleLogReader::open(path).unwrap())
}

fn read_alone(path: &Path) -> (SampleLogReader, Vec<Event>) {
    read_all(SampleLogReader::open_segment(path).unwrap())
}

fn read_all(mut reader: SampleLogReader) -> (SampleLogReader, Vec<Event>) {
    let events: Vec<Event> = reader.by_ref().map(|e| e.unwrap()).collect();
    (reader, events)
}

fn files_in(dir: &Path) -> Vec<String> {
    let mut names: Vec<String> = std::fs::read_dir(dir)
        .unwrap()
        .map(|e| e.unwrap().file_name().to_string_lossy().into_owned())
        .collect();
    names.sort();
    names
}

fn total_bytes(files: &[PathBuf]) -> u64 {
    files
        .iter()
        .map(|f| std::fs::metadata(f).unwrap().len())
        .sum()
}

fn attach(time: u64, pid: u32) -> Event {
    events::process(
        Timestamp(time),
        pid,
        &format!("python worker.py --id {pid}"),
        ProcessEventKind::Attached,
    )
}

fn exit(time: u64, pid: u32) -> Event {
    events::process(
        Timestamp(time),
        pid,
        &format!("python worker.py --id {pid}"),
        ProcessEventKind::Exited,
    )
}

/// The whole log read back is the recording from the first event of the oldest segment kept
/// on, after the attach events that segment repeats.
fn assert_tail_of(read: &[Event], written: &[Event], repeated: usize) {
    let tail = read.len() - repeated;
    let from = written.len() - tail;
    for (i, (a, b)) in read[repeated..].iter().zip(&written[from..]).enumerate() {
        assert!(same(a, b), "event {i} of the tail: {a:?} != {b:?}");
    }
    for event in &read[..repeated] {
        assert!(
            matches!(event, Event::Process(p) if p.kind == ProcessEventKind::Attached),
            "{event:?}"
        );
    }
}

#[test]
fn without_limits_the_log_is_one_file_byte_for_byte_as_create_writes_it() {
    let events: Vec<Event> = Typical::new(60, 3).collect();
    let plain = tempfile::tempdir().unwrap();
    let mut writer = SampleLogWriter::create(plain.path(), &header(false, true)).unwrap();
    for event in &events {
        writer.append(event).unwrap();
    }
    writer.flush().unwrap();
    assert_eq!(writer.segments().segments, 1);
    assert_eq!(writer.segments().dropped_segments, 0);
    drop(writer);
    let unlimited = tempfile::tempdir().unwrap();
    let stats = write(unlimited.path(), LogLimits::NONE, &events);
    assert_eq!(files_in(unlimited.path()), [LOG_FILE_NAME]);
    let plain_bytes = std::fs::read(plain.path().join(LOG_FILE_NAME)).unwrap();
    let unlimited_bytes = std::fs::read(unlimited.path().join(LOG_FILE_NAME)).unwrap();
    // Checkpoints cut blocks elsewhere: compare what a reader gets, then the bytes of the same
    // appends and flushes.
    let (reader, back) = read(&unlimited.path().join(LOG_FILE_NAME));
    assert_eq!(reader.files(), 1);
    assert_eq!(reader.first_segment(), None);
    assert_eq!(reader.kept_from(), None);
    assert_eq!(back.len(), events.len());
    assert_eq!(
        stats,
        SegmentStats {
            segments: 1,
            bytes: unlimited_bytes.len() as u64,
            dropped_segments: 0,
            dropped_bytes: 0,
            first_kept: None,
        }
    );
    let again = tempfile::tempdir().unwrap();
    let mut writer = SampleLogWriter::create_with(
        again.path(),
        &header(false, true),
        InternLimits::default(),
        LogLimits::NONE,
    )
    .unwrap();
    for event in &events {
        writer.append(event).unwrap();
    }
    writer.flush().unwrap();
    drop(writer);
    assert_eq!(
        std::fs::read(again.path().join(LOG_FILE_NAME)).unwrap(),
        plain_bytes
    );
}

#[test]
fn segments_roll_over_and_each_decodes_on_its_own() {
    let dir = tempfile::tempdir().unwrap();
    let events: Vec<Event> = Typical::new(300, 5).collect();
    // Big enough to keep everything: segments without drops.
    let limits = by_size(64 << 20);
    let limits = LogLimits {
        max_age: Some(Duration::from_secs(400)),
        ..limits
    };
    let stats = write(dir.path(), limits, &events);
    let files = log_files(&dir.path().join(LOG_FILE_NAME));
    assert!(files.len() >= 4, "{:?}", files_in(dir.path()));
    assert_eq!(stats.segments, files.len() as u64);
    assert_eq!(stats.dropped_segments, 0);
    assert_eq!(stats.first_kept, None);
    assert_eq!(stats.bytes, total_bytes(&files));
    for (i, file) in files.iter().take(files.len() - 1).enumerate() {
        assert_eq!(file, &dir.path().join(segment_file_name(i as u64 + 1)));
    }
    // Each segment alone: every event decodes, none lost, the process named in each.
    let mut alone = Vec::new();
    for file in &files {
        let (reader, events) = read_alone(file);
        assert_eq!(reader.end(), Some(&LogEnd::Complete), "{}", file.display());
        assert_eq!(reader.damage().blocks, 0);
        assert_eq!(reader.damage().lost_events, 0, "{}", file.display());
        assert!(
            matches!(&events[0], Event::Process(p) if p.pid == 4242),
            "{} opens with {:?}",
            file.display(),
            events[0]
        );
        alone.push(events);
    }
    // Together: the recording exactly, the repeated attach events skipped.
    let (reader, whole) = read(&dir.path().join(LOG_FILE_NAME));
    assert_eq!(reader.files(), files.len());
    assert_eq!(reader.kept_from(), None);
    assert_eq!(reader.first_segment().map(|s| s.index), Some(1));
    assert_eq!(reader.end(), Some(&LogEnd::Complete));
    assert_eq!(whole.len(), events.len());
    assert_tail_of(&whole, &events, 0);
    let segments_alone: usize = alone.iter().map(Vec::len).sum();
    assert_eq!(segments_alone, events.len() + files.len() - 1);
}

#[test]
fn the_oldest_segments_are_dropped_by_size() {
    let dir = tempfile::tempdir().unwrap();
    let events: Vec<Event> = Typical::new(300, 7).collect();
    let limits = by_size(256 << 10);
    let segment = limits.segment_bytes();
    let stats = write(dir.path(), limits, &events);
    let files = log_files(&dir.path().join(LOG_FILE_NAME));
    let total = total_bytes(&files);
    assert!(stats.dropped_segments > 0, "{stats:?}");
    assert!(stats.dropped_bytes > 0);
    assert_eq!(stats.bytes, total);
    assert_eq!(stats.segments, files.len() as u64);
    // Within the limit, but for the segment being written (which a block may take past its
    // size).
    assert!(
        total <= (256 << 10) + segment + 2 * 16 * 1024,
        "{total} bytes in {} files",
        files.len()
    );
    // The oldest went: the numbers kept follow those dropped.
    assert_eq!(
        files[0],
        dir.path()
            .join(segment_file_name(stats.dropped_segments + 1)),
        "{files:?}"
    );
    let (reader, whole) = read(&dir.path().join(LOG_FILE_NAME));
    assert_eq!(reader.end(), Some(&LogEnd::Complete));
    assert_eq!(reader.damage().blocks, 0);
    let first = reader.first_segment().unwrap();
    assert_eq!(first.index, stats.dropped_segments + 1);
    assert_eq!(reader.kept_from(), stats.first_kept);
    let kept_from = reader.kept_from().unwrap();
    assert!(kept_from.as_nanos() > START + 10 * SEC, "{kept_from:?}");
    // The process attached before what is kept is still named, by the copy its segment opens
    // with; the rest is the end of the recording as it was written.
    assert!(matches!(&whole[0], Event::Process(p) if p.pid == 4242 && p.time == Timestamp(START)));
    assert_tail_of(&whole, &events, 1);
    assert!(whole.len() < events.len());
}

#[test]
fn the_oldest_segments_are_dropped_by_age() {
    let dir = tempfile::tempdir().unwrap();
    let events: Vec<Event> = Typical::new(300, 9).collect();
    let max_age = Duration::from_secs(60);
    let limits = LogLimits {
        max_bytes: None,
        max_age: Some(max_age),
    };
    let span = limits.segment_span().unwrap();
    let stats = write(dir.path(), limits, &events);
    assert!(stats.dropped_segments > 0, "{stats:?}");
    let (reader, whole) = read(&dir.path().join(LOG_FILE_NAME));
    let last = events.iter().map(|e| e.time().as_nanos()).max().unwrap();
    let kept_from = reader.kept_from().unwrap();
    assert_eq!(Some(kept_from), stats.first_kept);
    let kept_secs = (last - kept_from.as_nanos()) as f64 / 1e9;
    // What is kept reaches back the age limit, and not much beyond it: the oldest segment
    // kept spans a share of it, and blocks close every few seconds.
    assert!(
        kept_secs >= max_age.as_secs_f64() - 5.0,
        "kept {kept_secs:.1} s"
    );
    assert!(
        kept_secs <= (max_age + 2 * span).as_secs_f64() + 5.0,
        "kept {kept_secs:.1} s"
    );
    assert_tail_of(&whole, &events, 1);
}

#[test]
fn a_segment_repeats_the_attach_events_of_the_processes_alive_only() {
    let dir = tempfile::tempdir().unwrap();
    let stack = events::frames(&[("step", "train.py", 3)]);
    let mut written = vec![attach(START, 100), attach(START, 101), attach(START, 102)];
    // Samples enough for several segments of the smallest size, a process ending and one
    // starting on the way.
    for tick in 1..40_000u64 {
        let time = START + tick * 10 * MS;
        if tick == 2_000 {
            written.push(exit(time, 101));
        }
        if tick == 3_000 {
            written.push(attach(time, 103));
        }
        let pid = [100, 102][(tick % 2) as usize];
        let thread = events::thread(
            u64::from(pid),
            Some(u64::from(pid)),
            Some("MainThread"),
            true,
        );
        written.push(events::stack_of(
            Timestamp(time),
            pid,
            thread,
            stack.clone(),
        ));
    }
    let stats = write(dir.path(), by_size(64 << 10), &written);
    assert!(stats.dropped_segments > 0, "{stats:?}");
    let log = dir.path().join(LOG_FILE_NAME);
    // The newest segment alone names the processes alive: not the one that ended.
    let files = log_files(&log);
    let (_, newest) = read_alone(&files[files.len() - 2]);
    let attached: Vec<u32> = newest
        .iter()
        .take_while(|e| matches!(e, Event::Process(_)))
        .map(|e| match e {
            Event::Process(p) => p.pid,
            _ => 0,
        })
        .collect();
    assert_eq!(attached, [100, 102, 103]);
    // Read whole, each process is attached once.
    let (reader, whole) = read(&log);
    assert!(reader.kept_from().is_some());
    let attaches = whole
        .iter()
        .filter(|e| matches!(e, Event::Process(p) if p.kind == ProcessEventKind::Attached))
        .count();
    assert_eq!(attaches, 3, "the copies are skipped");
    assert_tail_of(&whole, &written, 3);
}

#[test]
fn a_new_recording_removes_the_segments_an_old_one_left() {
    let dir = tempfile::tempdir().unwrap();
    let old: Vec<Event> = Typical::new(120, 1).collect();
    write(dir.path(), by_size(64 << 10), &old);
    assert!(files_in(dir.path()).len() > 1);
    let new: Vec<Event> = Typical::new(10, 2).collect();
    write(dir.path(), LogLimits::NONE, &new);
    assert_eq!(files_in(dir.path()), [LOG_FILE_NAME]);
    let (_, back) = read(&dir.path().join(LOG_FILE_NAME));
    assert_eq!(back.len(), new.len());
}

#[test]
fn a_damaged_segment_is_skipped_and_the_next_read() {
    let dir = tempfile::tempdir().unwrap();
    let events: Vec<Event> = Typical::new(120, 4).collect();
    write(
        dir.path(),
        LogLimits {
            max_bytes: Some(64 << 20),
            max_age: Some(Duration::from_secs(80)),
        },
        &events,
    );
    let log = dir.path().join(LOG_FILE_NAME);
    let files = log_files(&log);
    assert!(files.len() >= 4, "{files:?}");
    // The second segment cut short, the third not there at all.
    let second = std::fs::read(&files[1]).unwrap();
    std::fs::write(&files[1], &second[..second.len() - 100]).unwrap();
    std::fs::write(&files[2], b"not a log").unwrap();
    let (reader, whole) = read(&log);
    assert_eq!(reader.end(), Some(&LogEnd::Complete));
    assert_eq!(reader.damage().blocks, 2, "{:?}", reader.damage());
    assert!(whole.len() < events.len());
    // The newest segment was read, to the last event.
    assert!(same(whole.last().unwrap(), events.last().unwrap()));
}
