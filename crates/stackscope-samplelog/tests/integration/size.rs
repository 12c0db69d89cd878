//! What the log costs on disk: bytes per repeated sample and MB per hour of a typical target.

// Helpers outside #[test] functions unwrap too: a test fails loudly on any error.
#![allow(clippy::unwrap_used)]

use crate::common;

use std::sync::Arc;

use common::{header, stacks, Typical, MS, START};
use stackscope_event::{Event, Frame, ThreadInfo, Timestamp};
use stackscope_samplelog::SampleLogWriter;
use stackscope_testkit::events;

fn sample(time: u64, thread: u64, frames: &[Frame]) -> Event {
    let name = format!("thread-{thread}");
    let info = ThreadInfo {
        owns_gil: thread == 0,
        ..events::thread(thread, Some(4242 + thread), Some(&name), true)
    };
    events::stack_of(Timestamp(time), 4242, info, frames.to_vec())
}

/// Bytes the log grew by per sample after the first, once flushed.
fn bytes_per_repeat(threads: u64, ticks: u64) -> f64 {
    let dir = tempfile::tempdir().unwrap();
    let stack = &stacks(1, 20)[0];
    let mut writer = SampleLogWriter::create(dir.path(), &header(false, false)).unwrap();
    for thread in 0..threads {
        writer.append(&sample(START, thread, stack)).unwrap();
    }
    writer.flush().unwrap();
    let after_first = writer.bytes_written();
    for tick in 1..=ticks {
        // 100 Hz, one instant per tick at a varying point of the period.
        let time = START + tick * 10 * MS + (tick * 7_919_333) % (10 * MS);
        for thread in 0..threads {
            writer.append(&sample(time, thread, stack)).unwrap();
        }
    }
    writer.flush().unwrap();
    (writer.bytes_written() - after_first) as f64 / (ticks * threads) as f64
}

#[test]
fn a_repeated_stack_costs_under_ten_bytes_a_sample() {
    let one_thread = bytes_per_repeat(1, 20_000);
    let four_threads = bytes_per_repeat(4, 5_000);
    eprintln!("repeated 20-frame stack: {one_thread:.2} B/sample (1 thread), {four_threads:.2} B/sample (4 threads)");
    assert!(one_thread < 10.0, "{one_thread} bytes a sample");
    assert!(four_threads < 10.0, "{four_threads} bytes a sample");
    // Threads sampled at the same instant share the time: a 1-byte delta.
    assert!(four_threads < one_thread);
}

struct Measured {
    events: u64,
    samples: u64,
    gpu: u64,
    bytes: u64,
    secs: u64,
}

fn measure_typical(secs: u64) -> Measured {
    let dir = tempfile::tempdir().unwrap();
    measure_typical_in(dir.path(), secs)
}

fn measure_typical_in(dir: &std::path::Path, secs: u64) -> Measured {
    let mut writer = SampleLogWriter::create(dir, &header(false, true)).unwrap();
    let (mut samples, mut gpu) = (0, 0);
    for (i, event) in Typical::new(secs, 11).enumerate() {
        match &event {
            Event::Stack(_) => samples += 1,
            Event::Gpu(_) => gpu += 1,
            _ => {}
        }
        writer.append(&event).unwrap();
        // A checkpoint every 60 s of samples (400 a second).
        if i % 24_000 == 23_999 {
            writer.flush().unwrap();
        }
    }
    writer.flush().unwrap();
    let bytes = std::fs::metadata(writer.path()).unwrap().len();
    assert_eq!(bytes, writer.bytes_written());
    Measured {
        events: writer.stats().events,
        samples,
        gpu,
        bytes,
        secs,
    }
}

fn report(m: &Measured) -> f64 {
    let per_hour = m.bytes as f64 * 3600.0 / m.secs as f64 / 1e6;
    eprintln!(
        "typical target (4 threads at 100 Hz, 50 distinct 20-frame stacks, GPU at 6/s), {} s: \
         {} stack samples, {} GPU samples, {} bytes: {:.2} B per stack sample (all included), \
         {:.1} MB per hour",
        m.secs,
        m.samples,
        m.gpu,
        m.bytes,
        m.bytes as f64 / m.samples as f64,
        per_hour
    );
    per_hour
}

#[test]
fn a_typical_target_costs_a_few_megabytes_an_hour() {
    let m = measure_typical(300);
    assert_eq!(m.samples, 300 * 100 * 4);
    let per_hour = report(&m);
    assert!(per_hour < 20.0, "{per_hour} MB per hour");
    assert!(m.bytes as f64 / (m.samples as f64) < 10.0);
}

/// The full hour, written and measured: `cargo test --release -p stackscope-samplelog --test
/// integration size:: -- --ignored`.
#[test]
#[ignore = "writes a full hour; slow in debug builds"]
fn a_typical_hour_measured_in_full() {
    let dir = tempfile::tempdir().unwrap();
    let started = std::time::Instant::now();
    let m = measure_typical_in(dir.path(), 3600);
    let wrote = started.elapsed();
    let per_hour = report(&m);
    assert!(per_hour < 20.0, "{per_hour} MB per hour");
    let started = std::time::Instant::now();
    let mut reader = stackscope_samplelog::SampleLogReader::open(
        &dir.path().join(stackscope_samplelog::LOG_FILE_NAME),
    )
    .unwrap();
    let mut events = 0u64;
    let mut samples = 0u64;
    for event in reader.by_ref() {
        events += 1;
        samples += u64::from(matches!(event.unwrap(), Event::Stack(_)));
    }
    eprintln!(
        "generating and writing the hour took {:.1} s; reading it back {:.1} s for {events} \
         events",
        wrote.as_secs_f64(),
        started.elapsed().as_secs_f64(),
    );
    assert_eq!(reader.end(), Some(&stackscope_samplelog::LogEnd::Complete));
    assert_eq!(events, m.events);
    assert_eq!(samples, m.samples);
}

#[test]
fn a_native_and_a_python_frame_of_one_name_stay_distinct() {
    let dir = tempfile::tempdir().unwrap();
    let python = Frame::python("f", "x.so", 0);
    let native = Frame {
        native: true,
        origin: stackscope_event::FileOrigin::Native,
        ..python.clone()
    };
    let mut writer = SampleLogWriter::create(dir.path(), &header(true, false)).unwrap();
    writer
        .append(&sample(START, 0, std::slice::from_ref(&python)))
        .unwrap();
    writer
        .append(&sample(START, 0, std::slice::from_ref(&native)))
        .unwrap();
    writer.flush().unwrap();
    let reader = stackscope_samplelog::SampleLogReader::open(writer.path()).unwrap();
    let frames: Vec<Frame> = reader
        .map(|e| match e.unwrap() {
            Event::Stack(s) => s.frames[0].clone(),
            other => panic!("{other:?}"),
        })
        .collect();
    assert_eq!(frames, vec![python, native]);
    assert!(Arc::ptr_eq(&frames[0].function, &frames[1].function));
}
