//! A recording's `stuck`: the hang rule over a whole recording. A job that moved, then froze
//! for its last 30 s (or last quarter) is stuck; a thread that keeps using CPU under one frozen
//! line is working, however long the line stays.

use std::sync::Arc;

use stackscope_event::{Event, Frame, StackSample, ThreadInfo, Timestamp};

use crate::{AggregateConfig, Aggregator, RecordingMeta};

const SEC: u64 = 1_000_000_000;
const TICK: u64 = SEC / 10;

fn sample(time: u64, line: u32, running: bool, holds_gil: bool) -> Event {
    Event::Stack(StackSample {
        time: Timestamp(time),
        pid: 9,
        thread: ThreadInfo {
            os_thread_id: Some(9),
            python_thread_id: 1,
            name: Some("MainThread".into()),
            active: running,
            owns_gil: holds_gil,
        },
        frames: vec![Frame {
            function: Arc::from("step"),
            file: Arc::from("job.py"),
            line,
            native: false,
        }]
        .into(),
    })
}

/// Ten reads a second for `secs`: moving (a new line each read) for `moving_secs`, then on one
/// line, `running` (in a C call that released the GIL, or with `gil` spinning in Python) or
/// blocked.
fn recording(secs: u64, moving_secs: u64, running: bool) -> Option<crate::Stuck> {
    recording_with(secs, moving_secs, running, false)
}

fn recording_with(secs: u64, moving_secs: u64, running: bool, gil: bool) -> Option<crate::Stuck> {
    let mut agg = Aggregator::new(
        AggregateConfig {
            gpu_enabled: false,
            ..AggregateConfig::default()
        },
        Timestamp(0),
    );
    for t in 0..=secs * SEC / TICK {
        let time = t * TICK;
        let moving = time < moving_secs * SEC;
        let line = if moving { 10 + (t % 50) as u32 } else { 5 };
        agg.handle(sample(time, line, moving || running, moving || gil));
    }
    agg.summary(&RecordingMeta::default()).stuck
}

#[test]
fn worked_3_s_then_froze_33_s_of_36_is_stuck() {
    let stuck = recording(36, 3, false).expect("stuck");
    assert!(!stuck.whole_recording);
    assert!((stuck.unchanged_secs - 33.0).abs() < 0.2, "{stuck:?}");
    assert_eq!(stuck.threads[0].frame, "step (job.py:5)");
    // Frozen for less than its last 30 s: no verdict of stuck.
    assert!(recording(36, 8, false).is_none());
}

#[test]
fn a_thread_running_under_one_frozen_line_is_working_not_stuck() {
    assert!(recording(36, 3, true).is_none(), "compressing on one line");
    assert!(
        recording(8, 0, true).is_none(),
        "the whole recording on one line"
    );
    assert!(
        recording(8, 0, false).is_some(),
        "blocked the whole recording"
    );
}
