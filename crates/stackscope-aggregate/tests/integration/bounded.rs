//! Memory that does not grow with the recording: millions of samples from churning threads and
//! processes, ever-new stacks and frames, and hours of GPU readings; every table stays under its
//! cap while every total stays right.

use std::sync::Arc;

use stackscope_aggregate::{
    AggregateConfig, Aggregator, Limits, RecordingMeta, StackView, Summary, OTHER_PROCESSES,
    STACK_TABLE_FULL,
};
use stackscope_event::{
    Event, Frame, GpuSample, ProcessEvent, ProcessEventKind, StackSample, ThreadInfo, Timestamp,
};

const MS: u64 = 1_000_000;

fn frame(function: &Arc<str>, file: &Arc<str>, line: u32) -> Frame {
    Frame {
        function: function.clone(),
        file: file.clone(),
        line,
        native: false,
        origin: stackscope_event::FileOrigin::Job,
    }
}

fn thread(id: u64) -> ThreadInfo {
    // What churning threads look like: every name new.
    let name = format!("Thread-{id} (worker)");
    stackscope_testkit::events::thread(id, Some(id), Some(&name), true)
}

fn gpu(time: u64, utilization: f32) -> Event {
    stackscope_testkit::events::gpu_event(Timestamp(time), 0, utilization)
}

fn folded_total(agg: &Aggregator, view: StackView) -> u64 {
    agg.folded(view).iter().map(|(_, n)| n).sum()
}

fn assert_totals(agg: &Aggregator, summary: &Summary, samples: u64) {
    assert_eq!(summary.samples, samples);
    assert_eq!(folded_total(agg, StackView::All), samples);
    let threads: u64 = summary.threads.iter().map(|t| t.samples).sum();
    assert_eq!(
        threads, samples,
        "thread samples add up, folded ones included"
    );
}

#[test]
fn churning_threads_and_ever_new_stacks_stay_under_the_default_caps() {
    let limits = Limits::default();
    let mut agg = Aggregator::new(AggregateConfig::default(), Timestamp(0));
    let file: Arc<str> = Arc::from("gen.py");
    let pool: Vec<Frame> = (0..1_000)
        .map(|i| frame(&Arc::from(format!("f{i}")), &file, 1))
        .collect();
    let fresh: Arc<str> = Arc::from("fresh");
    let samples = 2_000_000u64;
    let mut sizes_at_half = None;
    for i in 0..samples {
        // A new thread every 20 samples: 100,000 threads, each with a new name.
        let thread = thread(i / 20);
        // A never-seen frame on top of an ever-new combination of known ones.
        let frames = vec![
            frame(&fresh, &file, i as u32),
            pool[(i % 1_000) as usize].clone(),
            pool[((i / 1_000) % 1_000) as usize].clone(),
            pool[(i / 1_000_000) as usize].clone(),
        ];
        let time = i * MS;
        agg.handle(Event::Stack(StackSample {
            time: Timestamp(time),
            pid: 1,
            thread,
            frames: frames.into(),
        }));
        if i % 10 == 9 {
            // A reading every 10 ms, square wave: 50% busy.
            agg.handle(gpu(time, if (i / 2_000) % 2 == 0 { 10.0 } else { 90.0 }));
        }
        assert!(agg.pending_gpu_tagging() < 100);
        if i == samples / 2 {
            sizes_at_half = Some((agg.distinct_stacks(), agg.distinct_frames()));
        }
    }
    agg.finish();

    assert!(agg.distinct_stacks() <= limits.max_stacks);
    assert!(agg.distinct_frames() <= limits.max_frames);
    assert!(agg.distinct_functions() <= limits.max_frames);
    assert!(agg.thread_roots() <= limits.max_thread_roots);
    assert!(agg.threads_tracked() <= limits.max_threads);
    assert!(agg.gpu_points(0) <= limits.max_gpu_points);
    assert!(agg.gpu_timeline().len() <= limits.max_gpu_points);
    assert!(
        agg.gpu_readings_held() < 1_000,
        "{}",
        agg.gpu_readings_held()
    );
    assert_eq!(agg.gpu_readings(0), samples / 10);
    assert_eq!(
        sizes_at_half,
        Some((agg.distinct_stacks(), agg.distinct_frames())),
        "no growth once the caps are reached"
    );

    let summary = agg.summary(&RecordingMeta::default());
    assert_totals(&agg, &summary, samples);
    // The threads that ended are one kind of thread, each let go: no thread cap is reached.
    // Kept apart: the threads of the last second (20 ms each, 1 ms a read), not yet seen ending.
    assert!(summary.threads.len() <= 60, "{}", summary.threads.len());
    assert_eq!(summary.threads[0].name, "thread pool worker");
    assert!(summary.threads[0].samples > samples * 99 / 100);
    // Those of the first second, before the first one was seen ending, keep a root each,
    // relabelled as the kind; later ones are the kind's from their first sample.
    assert!(agg.thread_roots() <= 60, "{}", agg.thread_roots());
    assert!(agg.released().threads >= 100_000 - 60);
    let gpu = summary.gpu.as_ref().expect("gpu section");
    assert_eq!(
        gpu.samples_gpu_idle + gpu.samples_gpu_busy + gpu.samples_gpu_unknown,
        samples
    );
    let mean = gpu.mean_utilization.expect("mean");
    assert!((mean - 50.0).abs() < 0.1, "{mean}");
    assert_eq!(gpu.devices[0].samples, samples / 10);

    let caps = summary.caps_reached.join("\n");
    assert!(!caps.contains("thread"), "{caps}");
    for expected in [
        "distinct stacks capped at 200000",
        "distinct frames capped at 100000",
        "GPU timeline in memory capped at 20000 points per device",
    ] {
        assert!(caps.contains(expected), "{expected} not in\n{caps}");
    }
    assert!(
        agg.folded(StackView::All)
            .iter()
            .any(|(line, _)| line.ends_with(STACK_TABLE_FULL)),
        "new stacks past the cap are counted"
    );
}

#[test]
fn churning_processes_stay_under_their_cap() {
    let limits = Limits {
        max_processes: 50,
        max_threads: 100,
        ..Limits::default()
    };
    // Kept apart, so that the cap is what bounds them (like processes are one group).
    let config = AggregateConfig {
        gpu_enabled: false,
        process_root: true,
        processes_apart: true,
        ..AggregateConfig::default()
    };
    let mut agg = Aggregator::with_limits(config, Timestamp(0), limits);
    let main = ThreadInfo {
        os_thread_id: Some(1),
        python_thread_id: 1,
        name: Some("MainThread".into()),
        active: true,
        owns_gil: true,
    };
    let work = [Frame::python("load", "worker.py", 3)];
    let mut samples = 0u64;
    // A DataLoader re-creating its workers: 10,000 short-lived processes.
    for pid in 100..10_100u32 {
        let time = Timestamp(u64::from(pid) * MS);
        agg.handle(Event::Process(ProcessEvent {
            time,
            pid,
            command_line: format!("python -c worker {pid}"),
            kind: ProcessEventKind::Attached,
            rank: Default::default(),
            how: None,
        }));
        for _ in 0..3 {
            agg.handle(Event::Stack(StackSample {
                time,
                pid,
                thread: main.clone(),
                frames: work.to_vec().into(),
            }));
            samples += 1;
        }
        agg.handle(Event::Process(ProcessEvent {
            time,
            pid,
            command_line: String::new(),
            kind: ProcessEventKind::Exited,
            rank: Default::default(),
            how: None,
        }));
        assert!(agg.processes_tracked() <= 50);
        assert!(agg.process_roots() <= 50);
        assert!(agg.threads_tracked() <= 100);
    }
    agg.finish();
    let summary = agg.summary(&RecordingMeta::default());
    assert_totals(&agg, &summary, samples);
    assert!(summary.processes.len() <= 51);
    let processes: u64 = summary.processes.iter().map(|p| p.samples).sum();
    assert_eq!(processes, samples);
    let other = summary.processes.last().expect("processes");
    assert_eq!(
        (other.command_line.as_str(), other.exited),
        (OTHER_PROCESSES, true)
    );
    let lines = agg.folded(StackView::All);
    assert_eq!(lines.len(), 51, "50 process roots, then one for the rest");
    assert!(
        lines
            .iter()
            .any(|(line, _)| line.starts_with(OTHER_PROCESSES)),
        "{lines:?}"
    );
    let caps = summary.caps_reached.join("\n");
    assert!(
        caps.contains("distinct process roots capped at 50"),
        "{caps}"
    );
    assert!(caps.contains("processes tracked capped at 50"), "{caps}");
}

#[test]
fn hours_of_gpu_readings_keep_their_mean_and_rhythm() {
    let limits = Limits::default();
    let mut agg = Aggregator::new(
        AggregateConfig {
            gpu_enabled: true,
            ..AggregateConfig::default()
        },
        Timestamp(0),
    );
    // Six readings a second for three hours: a 4 s training loop, idle for the first 1.5 s of
    // each cycle. 64,800 readings per device, against 20,000 points kept.
    let step = 1_000 / 6;
    let readings = 3 * 3_600 * 6u64;
    for k in 1..=readings {
        let t = k * step * MS;
        let idle = (t % (4_000 * MS)) < 1_500 * MS;
        for device in 0..2 {
            agg.handle(Event::Gpu(GpuSample {
                time: Timestamp(t + u64::from(device)),
                device,
                utilization: Some(if idle { 5.0 } else { 95.0 }),
                memory_used_bytes: Some(1 << 30),
                ..GpuSample::default()
            }));
        }
    }
    agg.finish();
    for device in 0..2 {
        assert!(agg.gpu_points(device) <= limits.max_gpu_points);
        assert_eq!(agg.gpu_readings(device), readings);
    }
    let summary = agg.summary(&RecordingMeta::default());
    let gpu = summary.gpu.expect("gpu section");
    let exact = (1.5 * 5.0 + 2.5 * 95.0) / 4.0;
    let mean = gpu.mean_utilization.expect("mean");
    assert!((mean - exact).abs() < 0.5, "{mean} against {exact}");
    let idle = gpu.idle_share.expect("idle share");
    assert!((idle - 1.5 / 4.0).abs() < 0.02, "{idle}");
    let period = gpu.oscillation_period_secs.expect("periodic");
    assert!((period - 4.0).abs() < 0.2, "{period}");
    let device = &gpu.devices[0];
    assert_eq!(device.samples, readings);
    assert_eq!((device.p50, device.max), (Some(95.0), Some(95.0)));
    assert_eq!(device.mean_memory_used_mib, Some(1024.0));
    assert!(summary
        .caps_reached
        .iter()
        .any(|c| c.contains("GPU timeline")));
}
