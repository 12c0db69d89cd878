//! A target that makes endless distinct stacks, strings and threads: the writer's tables stay
//! within their limits, and the log stays readable.

// Helpers outside #[test] functions unwrap too: a test fails loudly on any error.
#![allow(clippy::unwrap_used)]

use crate::common;

use common::{header, same, MS, START};
use stackscope_event::{Event, Frame, StackSample, ThreadInfo, Timestamp};
use stackscope_samplelog::{InternLimits, SampleLogReader, SampleLogWriter};

fn flood(i: u64) -> Event {
    Event::Stack(StackSample {
        time: Timestamp(START + i * MS),
        pid: 1,
        thread: ThreadInfo {
            os_thread_id: Some(i),
            // Thread churn: a new thread every 3 samples.
            python_thread_id: i / 3,
            name: Some(format!("worker-{}", i / 3).into()),
            active: true,
            owns_gil: false,
        },
        frames: (0..8)
            .map(|d| {
                // Generated code: every stack has functions and files never seen before.
                Frame::python(&format!("gen_{i}_{d}"), &format!("<string-{}>", i % 97), d)
            })
            .collect(),
    })
}

#[test]
fn tables_stay_within_their_limits_under_a_flood() {
    let dir = tempfile::tempdir().unwrap();
    let limits = InternLimits {
        strings: 500,
        string_bytes: 8_000,
        frames: 400,
        stacks: 30,
        stack_frames: 200,
        threads: 20,
    };
    let mut writer =
        SampleLogWriter::create_with_limits(dir.path(), &header(true, false), limits).unwrap();
    let events: Vec<Event> = (0..5_000).map(flood).collect();
    for event in &events {
        writer.append(event).unwrap();
        let sizes = writer.table_sizes();
        // At most the limits, or one sample's worth after a reset.
        assert!(sizes.strings <= limits.strings.max(17), "{sizes:?}");
        assert!(sizes.string_bytes <= limits.string_bytes, "{sizes:?}");
        assert!(sizes.frames <= limits.frames, "{sizes:?}");
        assert!(sizes.stacks <= limits.stacks, "{sizes:?}");
        assert!(sizes.stack_frames <= limits.stack_frames, "{sizes:?}");
        assert!(sizes.threads <= limits.threads, "{sizes:?}");
    }
    writer.flush().unwrap();
    let stats = writer.stats();
    assert!(stats.resets > 100, "{stats:?}");
    assert_eq!(stats.events, 5_000);
    let mut reader = SampleLogReader::open(writer.path()).unwrap();
    let read: Vec<Event> = reader.by_ref().map(|e| e.unwrap()).collect();
    assert_eq!(read.len(), events.len());
    for (i, (a, b)) in events.iter().zip(&read).enumerate() {
        assert!(same(a, b), "event {i}");
    }
}

#[test]
fn the_default_limits_hold_a_flood_of_distinct_stacks() {
    let dir = tempfile::tempdir().unwrap();
    let mut writer = SampleLogWriter::create(dir.path(), &header(true, false)).unwrap();
    let limits = writer.limits();
    // 40 000 stacks of 8 new frames: 320 000 frames, past the default frame limit.
    for i in 0..40_000 {
        writer.append(&flood(i)).unwrap();
    }
    let sizes = writer.table_sizes();
    assert!(writer.stats().resets >= 1, "{:?}", writer.stats());
    assert!(sizes.frames <= limits.frames, "{sizes:?}");
    assert!(sizes.strings <= limits.strings, "{sizes:?}");
    writer.flush().unwrap();
    let mut count = 0;
    for event in SampleLogReader::open(writer.path()).unwrap() {
        event.unwrap();
        count += 1;
    }
    assert_eq!(count, 40_000);
}

#[test]
fn a_renamed_thread_is_written_again_and_read_renamed() {
    let dir = tempfile::tempdir().unwrap();
    let mut writer = SampleLogWriter::create(dir.path(), &header(true, false)).unwrap();
    let mut event = flood(0);
    writer.append(&event).unwrap();
    if let Event::Stack(s) = &mut event {
        s.thread.name = Some("renamed".into());
    }
    writer.append(&event).unwrap();
    writer.flush().unwrap();
    let names: Vec<Option<std::sync::Arc<str>>> = SampleLogReader::open(writer.path())
        .unwrap()
        .map(|e| match e.unwrap() {
            Event::Stack(s) => s.thread.name,
            other => panic!("{other:?}"),
        })
        .collect();
    assert_eq!(names, vec![Some("worker-0".into()), Some("renamed".into())]);
    assert_eq!(writer.table_sizes().threads, 1);
}
