//! A thread is one entry in the summary and one root in the folded stacks, whatever the order
//! in which its name and its samples arrive, and whether its Python id is reused.

use std::sync::Arc;

use stackscope_event::{Event, Frame, StackSample, ThreadInfo, Timestamp};

use crate::{AggregateConfig, Aggregator, RecordingMeta, StackView};

fn info(name: Option<&str>, ident: u64, tid: u64) -> ThreadInfo {
    ThreadInfo {
        os_thread_id: Some(tid),
        python_thread_id: ident,
        name: name.map(Into::into),
        active: true,
        owns_gil: true,
    }
}

fn sample(time: u64, thread: &ThreadInfo, function: &str) -> Event {
    Event::Stack(StackSample {
        time: Timestamp(time),
        pid: 9,
        thread: thread.clone(),
        frames: vec![Frame {
            function: Arc::from(function),
            file: Arc::from("job.py"),
            line: 3,
            native: false,
            origin: stackscope_event::FileOrigin::Job,
        }]
        .into(),
    })
}

fn aggregator(process_root: bool) -> Aggregator {
    Aggregator::new(
        AggregateConfig {
            gpu_enabled: false,
            process_root,
            ..AggregateConfig::default()
        },
        Timestamp(0),
    )
}

#[test]
fn samples_before_the_name_was_read_are_under_the_name() {
    for process_root in [false, true] {
        let mut agg = aggregator(process_root);
        let unnamed = info(None, 0x7f00, 2561);
        let named = info(Some("MainThread"), 0x7f00, 2561);
        for t in 0..94 {
            agg.handle(sample(t, &unnamed, "work"));
        }
        for t in 94..199 {
            agg.handle(sample(t, &named, "work"));
        }
        let folded = agg.folded(StackView::All);
        assert_eq!(folded.len(), 1, "{folded:?}");
        assert!(folded[0].0.contains("MainThread;work"), "{folded:?}");
        assert!(!folded[0].0.contains("thread 2561"), "{folded:?}");
        assert_eq!(folded[0].1, 199);
        let summary = agg.summary(&RecordingMeta::default());
        assert_eq!(summary.threads.len(), 1, "{:?}", summary.threads);
        assert_eq!(summary.threads[0].name, "MainThread");
        assert_eq!(summary.threads[0].samples, 199);
    }
}

#[test]
fn a_sample_without_its_name_after_it_was_known_keeps_the_name() {
    let mut agg = aggregator(false);
    agg.handle(sample(1, &info(Some("loader"), 5, 50), "f"));
    agg.handle(sample(2, &info(None, 5, 50), "f"));
    let folded = agg.folded(StackView::All);
    assert_eq!(folded, vec![("loader;f (job.py:3)".to_owned(), 2)]);
    let summary = agg.summary(&RecordingMeta::default());
    assert_eq!(summary.threads[0].name, "loader");
}

#[test]
fn threads_that_reuse_a_python_id_are_separate_entries() {
    let mut agg = aggregator(false);
    let mut t = 0;
    for (i, tid) in (19..=23).zip(300..) {
        let thread = info(Some(&format!("Thread-{i}")), 0x7f55, tid);
        for _ in 0..(i - 18) {
            agg.handle(sample(t, &thread, "short_task"));
            t += 1;
        }
    }
    let summary = agg.summary(&RecordingMeta::default());
    let mut names: Vec<(String, u64)> = summary
        .threads
        .iter()
        .map(|t| (t.name.clone(), t.samples))
        .collect();
    names.sort();
    let expected: Vec<(String, u64)> = (19..=23).map(|i| (format!("Thread-{i}"), i - 18)).collect();
    assert_eq!(names, expected);
    // The folded stacks agree: one root per thread, the same counts.
    let folded = agg.folded(StackView::All);
    for (name, count) in &expected {
        let line = format!("{name};short_task (job.py:3)");
        assert!(folded.contains(&(line, *count)), "{folded:?}");
    }
}

/// The sampler hands on one shared name per thread, and the aggregator then keeps the
/// thread's root and lane from its sample before: a rename (a new shared name) must still
/// move later samples to the new root and rename the lane, and samples of threads past the
/// cap on roots must still be counted one by one.
#[test]
fn shared_names_keep_roots_and_lanes_right_through_renames_and_past_the_cap() {
    let limits = crate::Limits {
        max_thread_roots: 2,
        ..crate::Limits::default()
    };
    let mut agg = Aggregator::with_limits(
        AggregateConfig {
            gpu_enabled: false,
            ..AggregateConfig::default()
        },
        Timestamp(0),
        limits,
    );
    let first = info(Some("worker"), 1, 10);
    let renamed = info(Some("worker-renamed"), 1, 10);
    // Past the cap of two roots: `late` goes to `[other threads]`, each of its samples counted.
    let late = info(Some("late"), 3, 30);
    let mut t = 0;
    for (thread, n) in [(&first, 5), (&renamed, 7), (&first, 2), (&late, 4)] {
        for _ in 0..n {
            agg.handle(sample(t, thread, "f"));
            t += 1;
        }
    }
    let mut folded = agg.folded(StackView::All);
    folded.sort();
    assert_eq!(
        folded,
        vec![
            ("[other threads];f (job.py:3)".to_owned(), 4),
            ("worker-renamed;f (job.py:3)".to_owned(), 7),
            ("worker;f (job.py:3)".to_owned(), 7),
        ]
    );
    assert_eq!(agg.stack_table().overflow().thread_root_samples, 4);
    let lanes: Vec<(String, u64)> = agg
        .time_buckets()
        .lanes()
        .iter()
        .map(|l| (l.name.clone(), l.active))
        .collect();
    assert_eq!(
        lanes,
        vec![("worker".to_owned(), 14), ("late".to_owned(), 4)]
    );
}
