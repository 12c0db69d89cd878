//! Tests of the aggregator as the binary drives it: events in, folded lines and summary out.

use stackscope_event::{
    Event, Frame, ProcessEvent, ProcessEventKind, SampleError, SampleErrorKind, StackSample,
    ThreadInfo, Timestamp,
};

use stackscope_testkit::events;

use crate::{AggregateConfig, Aggregator, RecordingMeta, StackView, VerdictClass};

const MS: u64 = 1_000_000;

fn thread(name: Option<&str>, id: u64, active: bool) -> ThreadInfo {
    events::thread(id, Some(1000 + id), name, active)
}

fn stack(time_ms: u64, thread: &ThreadInfo, frames: &[(&str, &str, u32)]) -> Event {
    events::stack(events::ms(time_ms), 42, thread, frames)
}

fn gpu(time_ms: u64, device: u32, utilization: f32) -> Event {
    events::gpu_event(events::ms(time_ms), device, utilization)
}

fn no_gpu() -> AggregateConfig {
    AggregateConfig {
        gpu_enabled: false,
        ..AggregateConfig::default()
    }
}

#[test]
fn folded_lines_are_root_first_with_the_thread_as_root() {
    let mut agg = Aggregator::new(no_gpu(), Timestamp(0));
    let main = thread(Some("MainThread"), 1, true);
    let worker = thread(None, 2, true);
    let frames = [
        ("inner", "m.py", 3),
        ("outer", "m.py", 10),
        ("<module>", "m.py", 20),
    ];
    agg.handle(stack(1, &main, &frames));
    agg.handle(stack(2, &main, &frames));
    agg.handle(stack(3, &worker, &[("spin", "w.py", 5)]));
    agg.finish();
    assert_eq!(
        agg.folded(StackView::All),
        vec![
            (
                "MainThread;<module> (m.py:20);outer (m.py:10);inner (m.py:3)".to_owned(),
                2
            ),
            ("thread 1002;spin (w.py:5)".to_owned(), 1),
        ]
    );
}

#[test]
fn idle_threads_are_skipped_unless_asked_for() {
    let sleeper = thread(Some("sleeper"), 3, false);
    let busy = thread(Some("busy"), 4, true);
    let mut agg = Aggregator::new(no_gpu(), Timestamp(0));
    for t in 0..5 {
        agg.handle(stack(t, &sleeper, &[("wait", "t.py", 1)]));
        agg.handle(stack(t, &busy, &[("work", "t.py", 2)]));
    }
    assert_eq!(agg.samples(), 5);
    assert_eq!(agg.idle_samples_skipped(), 5);
    assert_eq!(
        agg.folded(StackView::All),
        vec![("busy;work (t.py:2)".to_owned(), 5)]
    );
    let summary = agg.summary(&RecordingMeta::default());
    let names: Vec<(&str, u64)> = summary
        .threads
        .iter()
        .map(|t| (t.name.as_str(), t.samples))
        .collect();
    assert_eq!(names, vec![("busy", 5), ("sleeper", 0)]);

    let mut agg = Aggregator::new(
        AggregateConfig {
            include_idle: true,
            ..no_gpu()
        },
        Timestamp(0),
    );
    for t in 0..5 {
        agg.handle(stack(t, &sleeper, &[("wait", "t.py", 1)]));
    }
    assert_eq!(agg.samples(), 5);
    assert_eq!(agg.idle_samples_skipped(), 0);
}

#[test]
fn memory_grows_with_distinct_stacks_not_samples() {
    let main = thread(Some("MainThread"), 1, true);
    let mut agg = Aggregator::new(no_gpu(), Timestamp(0));
    for t in 0..10_000 {
        let line = 1 + (t % 3) as u32;
        agg.handle(stack(t, &main, &[("f", "a.py", line), ("main", "a.py", 9)]));
    }
    assert_eq!(agg.distinct_stacks(), 3);
    let counts: Vec<u64> = agg.folded(StackView::All).iter().map(|l| l.1).collect();
    assert_eq!(counts, vec![3334, 3333, 3333]);
}

#[test]
fn errors_are_counted_by_kind() {
    let mut agg = Aggregator::new(no_gpu(), Timestamp(0));
    for kind in [
        SampleErrorKind::TornRead,
        SampleErrorKind::TornRead,
        SampleErrorKind::ThreadGone,
        SampleErrorKind::Other,
    ] {
        agg.handle(Event::SampleError(SampleError {
            time: Timestamp(1),
            pid: 42,
            kind,
            message: String::new(),
        }));
    }
    let e = agg.summary(&RecordingMeta::default()).errors;
    assert_eq!((e.total, e.torn_read, e.thread_gone, e.other), (4, 2, 1, 1));
}

#[test]
fn summary_carries_meta_and_has_no_gpu_section_without_gpu_data() {
    let main = thread(Some("MainThread"), 1, true);
    let mut agg = Aggregator::new(AggregateConfig::default(), Timestamp(0));
    agg.handle(stack(1, &main, &[("f", "a.py", 1)]));
    agg.finish();
    let meta = RecordingMeta {
        pid: 42,
        ticks: 7,
        dropped: 2,
        target_exited: true,
        exit_status: Some(0),
        ..RecordingMeta::default()
    };
    let s = agg.summary(&meta);
    assert_eq!((s.pid, s.ticks, s.dropped, s.samples), (42, 7, 2, 1));
    assert_eq!(s.exit_status, Some(0));
    assert!(s.gpu.is_none());
    assert_eq!(s.top_functions.by_self[0].function, "f");
}

#[test]
fn late_gpu_data_tags_the_samples_it_covers() {
    let main = thread(Some("MainThread"), 1, true);
    let mut agg = Aggregator::new(AggregateConfig::default(), Timestamp(0));
    agg.handle(gpu(0, 0, 90.0));
    // The stacks arrive before the readings that cover them, as with NVML's ring.
    agg.handle(stack(50, &main, &[("load", "d.py", 1)]));
    agg.handle(stack(150, &main, &[("step", "m.py", 2)]));
    assert_eq!(agg.pending_gpu_tagging(), 2);
    assert!(agg.folded(StackView::GpuIdle).is_empty());
    agg.handle(gpu(100, 0, 5.0));
    agg.handle(gpu(200, 0, 95.0));
    assert_eq!(agg.pending_gpu_tagging(), 0);
    assert_eq!(
        agg.folded(StackView::GpuIdle),
        vec![("MainThread;load (d.py:1)".to_owned(), 1)]
    );
    assert_eq!(
        agg.folded(StackView::GpuBusy),
        vec![("MainThread;step (m.py:2)".to_owned(), 1)]
    );
}

#[test]
fn two_devices_use_their_mean() {
    let main = thread(Some("MainThread"), 1, true);
    let mut agg = Aggregator::new(AggregateConfig::default(), Timestamp(0));
    agg.expect_gpu_devices(&[0, 1]);
    agg.handle(stack(10, &main, &[("a", "x.py", 1)]));
    agg.handle(gpu(20, 0, 0.0));
    assert_eq!(
        agg.pending_gpu_tagging(),
        1,
        "device 1 has not reported yet"
    );
    agg.handle(gpu(25, 1, 50.0));
    // Mean 25 < 30: idle, although device 1 alone is busy.
    assert_eq!(agg.folded(StackView::GpuIdle).len(), 1);
    agg.handle(stack(30, &main, &[("b", "x.py", 1)]));
    agg.handle(gpu(40, 0, 20.0));
    agg.handle(gpu(40, 1, 50.0));
    assert_eq!(
        agg.folded(StackView::GpuBusy),
        vec![("MainThread;b (x.py:1)".to_owned(), 1)]
    );
    let gpu = agg
        .summary(&RecordingMeta::default())
        .gpu
        .expect("gpu section");
    assert_eq!(gpu.devices.len(), 2);
    assert_eq!((gpu.samples_gpu_idle, gpu.samples_gpu_busy), (1, 1));
}

#[test]
fn gpu_disabled_holds_nothing_back() {
    let main = thread(Some("MainThread"), 1, true);
    let mut agg = Aggregator::new(no_gpu(), Timestamp(0));
    agg.handle(stack(10, &main, &[("a", "x.py", 1)]));
    assert_eq!(agg.pending_gpu_tagging(), 0);
    assert!(agg.folded(StackView::GpuIdle).is_empty());
    assert!(agg.folded(StackView::GpuBusy).is_empty());
    assert_eq!(agg.folded(StackView::All).len(), 1);
}

#[test]
fn finish_tags_what_is_left() {
    let main = thread(Some("MainThread"), 1, true);
    let mut agg = Aggregator::new(AggregateConfig::default(), Timestamp(0));
    agg.handle(gpu(100, 0, 10.0));
    agg.handle(stack(400, &main, &[("tail", "x.py", 1)]));
    assert_eq!(agg.pending_gpu_tagging(), 1);
    agg.finish();
    assert_eq!(agg.pending_gpu_tagging(), 0);
    assert_eq!(
        agg.folded(StackView::GpuIdle).len(),
        1,
        "nearest earlier reading"
    );
}

/// A simulated training loop: 2 s loading data with the GPU idle, 2 s computing with it busy.
fn training_loop(cycles: u64, idle_pct: f32, busy_pct: f32) -> Aggregator {
    let main = thread(Some("MainThread"), 1, true);
    let mut agg = Aggregator::new(AggregateConfig::default(), Timestamp(0));
    let period_ms = 4_000;
    let mut next_gpu_poll = 500;
    let mut gpu_ring = Vec::new();
    for t in (0..cycles * period_ms).step_by(10) {
        let loading = t % period_ms < period_ms / 2;
        if t % 160 == 0 {
            // The driver's reading at t covers the 160 ms before it.
            gpu_ring.push(gpu(t, 0, if loading { idle_pct } else { busy_pct }));
        }
        let frames: &[(&str, &str, u32)] = if loading {
            &[("load_batch", "train.py", 12), ("main", "train.py", 40)]
        } else {
            &[("train_step", "train.py", 25), ("main", "train.py", 41)]
        };
        agg.handle(stack(t, &main, frames));
        if t == next_gpu_poll {
            for event in gpu_ring.drain(..) {
                agg.handle(event);
            }
            next_gpu_poll += 500;
        }
    }
    for event in gpu_ring.drain(..) {
        agg.handle(event);
    }
    agg.finish();
    agg
}

#[test]
fn training_loop_splits_by_gpu_state_and_gets_a_verdict() {
    let agg = training_loop(8, 3.0, 97.0);
    let gpu = agg
        .summary(&RecordingMeta::default())
        .gpu
        .expect("gpu section");
    let idle_top = &gpu.top_idle_functions[0];
    assert_eq!(idle_top.function, "load_batch");
    assert!(idle_top.self_share > 0.9, "{idle_top:?}");
    assert_eq!(gpu.top_busy_functions[0].function, "train_step");
    assert!(gpu.top_busy_functions[0].self_share > 0.9);
    let period = gpu.oscillation_period_secs.expect("oscillates");
    assert!((period - 4.0).abs() < 0.2, "period {period}");
    let mean = gpu.mean_utilization.expect("mean");
    assert!((mean - 50.0).abs() < 3.0, "mean {mean}");
    // The loop loads its batch itself half its time: inline loading, in TensorBoard's words.
    assert_eq!(gpu.verdict.class, VerdictClass::InlineLoading);
    let step = gpu.step.expect("a step");
    assert!((step.inline_load - 0.5).abs() < 0.05, "{step:?}");
    assert!((step.python - 0.5).abs() < 0.05, "{step:?}");
    assert!(
        gpu.verdict.text.contains("highly input-bound"),
        "{}",
        gpu.verdict.text
    );
    assert!(
        gpu.verdict
            .text
            .contains("loads at load_batch (train.py:12), computing"),
        "{}",
        gpu.verdict.text
    );
    assert_eq!(
        gpu.samples_gpu_idle + gpu.samples_gpu_busy + gpu.samples_gpu_unknown,
        agg.samples()
    );
}

#[test]
fn a_mostly_idle_gpu_fed_inline_is_inline_loading() {
    let agg = training_loop(5, 2.0, 40.0);
    let gpu = agg
        .summary(&RecordingMeta::default())
        .gpu
        .expect("gpu section");
    assert_eq!(gpu.verdict.class, VerdictClass::InlineLoading);
    assert!(
        gpu.verdict.text.contains("load_batch"),
        "{}",
        gpu.verdict.text
    );
}

#[test]
fn busy_gpu_is_the_bottleneck() {
    let agg = training_loop(5, 88.0, 99.0);
    let gpu = agg
        .summary(&RecordingMeta::default())
        .gpu
        .expect("gpu section");
    assert_eq!(gpu.verdict.class, VerdictClass::GpuBound);
    assert_eq!(
        gpu.oscillation_period_secs, None,
        "swings less than 15 points"
    );
    assert_eq!(gpu.samples_gpu_idle, 0);
}

fn stack_in(pid: u32, time_ms: u64, thread: &ThreadInfo, function: &str) -> Event {
    Event::Stack(StackSample {
        time: Timestamp(time_ms * MS),
        pid,
        thread: thread.clone(),
        frames: vec![Frame::python(function, "p.py", 1)].into(),
    })
}

fn process(time_ms: u64, pid: u32, command_line: &str, kind: ProcessEventKind) -> Event {
    Event::Process(ProcessEvent {
        time: Timestamp(time_ms * MS),
        pid,
        command_line: command_line.to_owned(),
        kind,
        rank: Default::default(),
        how: None,
    })
}

#[test]
fn process_roots_keep_equal_thread_names_apart() {
    let config = AggregateConfig {
        process_root: true,
        ..no_gpu()
    };
    let mut agg = Aggregator::new(config, Timestamp(0));
    let main = thread(Some("MainThread"), 1, true);
    agg.handle(process(
        0,
        10,
        "python train.py",
        ProcessEventKind::Attached,
    ));
    agg.handle(stack_in(10, 1, &main, "step"));
    // The worker appears after the start, its command line with a ';' and a newline.
    agg.handle(process(
        5,
        11,
        "python -c a;b\nc",
        ProcessEventKind::Attached,
    ));
    agg.handle(stack_in(11, 6, &main, "step"));
    agg.handle(stack_in(11, 7, &main, "step"));
    agg.handle(process(9, 11, "", ProcessEventKind::Exited));
    // A process never announced still gets a root.
    agg.handle(stack_in(12, 10, &main, "step"));
    agg.finish();
    assert_eq!(
        agg.folded(StackView::All),
        vec![
            (
                "process 10 python train.py;MainThread;step (p.py:1)".to_owned(),
                1
            ),
            (
                "process 11 python -c a:b c;MainThread;step (p.py:1)".to_owned(),
                2
            ),
            ("process 12;MainThread;step (p.py:1)".to_owned(), 1),
        ]
    );
    let summary = agg.summary(&RecordingMeta::default());
    let threads: Vec<(u32, &str, u64)> = summary
        .threads
        .iter()
        .map(|t| (t.pid, t.name.as_str(), t.samples))
        .collect();
    assert_eq!(
        threads,
        vec![
            (11, "MainThread", 2),
            (10, "MainThread", 1),
            (12, "MainThread", 1)
        ]
    );
    let processes: Vec<(u32, u64, bool, Option<f64>)> = summary
        .processes
        .iter()
        .map(|p| (p.pid, p.samples, p.exited, p.exited_secs))
        .collect();
    assert_eq!(
        processes,
        vec![
            (11, 2, true, Some(0.009)),
            (10, 1, false, None),
            (12, 1, false, None)
        ]
    );
    assert_eq!(summary.processes[1].command_line, "python train.py");
    assert_eq!(summary.processes[1].attached_secs, Some(0.0));
}

#[test]
fn without_process_roots_there_is_no_process_list() {
    let mut agg = Aggregator::new(no_gpu(), Timestamp(0));
    let main = thread(Some("MainThread"), 1, true);
    agg.handle(process(
        0,
        10,
        "python train.py",
        ProcessEventKind::Attached,
    ));
    agg.handle(stack_in(10, 1, &main, "step"));
    assert_eq!(
        agg.folded(StackView::All),
        vec![("MainThread;step (p.py:1)".to_owned(), 1)]
    );
    let summary = agg.summary(&RecordingMeta::default());
    assert!(summary.processes.is_empty());
    assert!(summary.caps_reached.is_empty());
    assert_eq!(agg.processes_tracked(), 0);
}

#[test]
fn caps_reached_are_named_and_totals_stay_right() {
    let limits = crate::Limits {
        max_stacks: 32,
        max_frames: 20,
        max_thread_roots: 5,
        max_threads: 8,
        ..crate::Limits::default()
    };
    let mut agg = Aggregator::with_limits(no_gpu(), Timestamp(0), limits);
    for i in 0..1_000u64 {
        let t = thread(None, i / 10, true);
        // Ever-new combinations of a few frames, and now and then a frame never seen.
        let line = i as u32;
        let mut frames = vec![("f", "gen.py", line % 10), ("g", "gen.py", line / 10 % 10)];
        if i % 7 == 0 {
            frames.push(("h", "gen.py", line));
        }
        agg.handle(stack(i, &t, &frames));
    }
    assert!(agg.distinct_stacks() <= 32);
    assert!(agg.distinct_frames() <= 20);
    assert!(agg.thread_roots() <= 5);
    assert!(agg.threads_tracked() <= 8);
    let summary = agg.summary(&RecordingMeta::default());
    let threads: u64 = summary.threads.iter().map(|t| t.samples).sum();
    let folded: u64 = agg.folded(StackView::All).iter().map(|l| l.1).sum();
    assert_eq!((summary.samples, threads, folded), (1_000, 1_000, 1_000));
    assert_eq!(summary.caps_reached.len(), 4, "{:?}", summary.caps_reached);
    assert!(summary.caps_reached[0].starts_with("distinct stacks capped at 32: "));
    assert!(summary.caps_reached[1].starts_with("distinct frames capped at 20: "));
    assert!(summary.caps_reached[2].starts_with("distinct thread names capped at 5: "));
    assert!(summary.caps_reached[3].starts_with("threads tracked capped at 8: "));
}
