//! `top` and `summary.json` agree exactly on one run: the same event stream, replayed through
//! the recording's aggregator and through `top`'s table, gives the same GPU-idle samples, the
//! same samples per thread and the same own and total samples per function.
//!
//! The stream is built the way a live run delivers it: stacks first, GPU readings late (the
//! poller drains the driver's ring every 500 ms), two devices whose mean decides, one of which
//! stops reporting for a while (so samples wait out the hold limit), idle threads, sampling
//! errors, recursion and GPM SM activity.

use std::collections::BTreeMap;

use stackscope_aggregate::top::{TopModel, ViewOptions};
use stackscope_aggregate::{AggregateConfig, Aggregator, RecordingMeta, HOLD_LIMIT_NANOS};
use stackscope_event::{Event, GpuSample, SampleError, SampleErrorKind, Timestamp};
use stackscope_testkit::events::{self, MS};

const PID: u32 = 4242;

/// A small deterministic generator: the stream must be the same on every run.
struct Lcg(u64);

impl Lcg {
    fn next(&mut self, below: u64) -> u64 {
        self.0 = self
            .0
            .wrapping_mul(6_364_136_223_846_793_005)
            .wrapping_add(1_442_695_040_888_963_407);
        (self.0 >> 33) % below
    }
}

fn stack(time: u64, thread: u64, active: bool, frames: &[(&str, &str, u32)]) -> Event {
    let name = format!("worker-{thread}");
    let info = events::thread(thread, Some(100 + thread), Some(&name), active);
    events::stack(Timestamp(time), PID, &info, frames)
}

fn reading(time: u64, device: u32, utilization: f32, sm_active: Option<f32>) -> GpuSample {
    GpuSample {
        sm_active,
        ..events::gpu(Timestamp(time), device, utilization)
    }
}

/// Whether `time` falls in a data-loading phase: the first 2 s of every 4.
fn loading_at(time: u64) -> bool {
    (time / (2_000 * MS)) & 1 == 0
}

/// 20 s at 100 Hz of three threads, with the GPU readings of two devices handed over in
/// batches every 500 ms, after the stacks they cover.
fn run_events() -> Vec<Event> {
    let mut rng = Lcg(7);
    let mut events = Vec::new();
    let mut readings: Vec<GpuSample> = Vec::new();
    let end = 20_000 * MS;
    // Device readings, about six a second each, utilization by phase: 2 s of data loading
    // (device 0 at 5%) then 2 s of training (90%). Device 1 sits near 40% and stops reporting
    // from 10 s to 18 s.
    let mut t = 0;
    while t <= end + 1_000 * MS {
        t += 150 * MS + rng.next(40) * MS;
        let loading = loading_at(t);
        let u0 = if loading { 5.0 } else { 90.0 };
        // Some busy stretches run small kernels: low SM activity against utilization.
        let second_of_three = (t / (1_000 * MS)) % 3;
        let sm = (!loading && second_of_three == 0).then_some(20.0);
        readings.push(reading(t, 0, u0, sm.or(Some(85.0))));
        if !(10_000 * MS..18_000 * MS).contains(&t) {
            let u1 = 30.0 + rng.next(20) as f32;
            readings.push(reading(t + rng.next(30) * MS, 1, u1, None));
        }
    }
    readings.sort_by_key(|r| r.time);
    let mut delivered = 0;
    let mut next_drain = 500 * MS;
    let mut time = 0;
    while time < end {
        time += 10 * MS;
        let loading = loading_at(time);
        let main: &[(&str, &str, u32)] = if loading {
            &[
                ("decode", "data.py", 40),
                ("load_batch", "data.py", 12),
                ("loop", "train.py", 7),
            ]
        } else if rng.next(4) == 0 {
            &[
                ("walk", "model.py", 30),
                ("walk", "model.py", 30),
                ("train_step", "train.py", 20),
                ("loop", "train.py", 8),
            ]
        } else {
            &[("train_step", "train.py", 21), ("loop", "train.py", 8)]
        };
        events.push(stack(time, 1, true, main));
        let loader_active = rng.next(3) != 0;
        events.push(stack(
            time,
            2,
            loader_active,
            &[("read", "io.py", 5), ("prefetch", "data.py", 60)],
        ));
        events.push(stack(time, 3, false, &[("wait", "threading.py", 320)]));
        if rng.next(50) == 0 {
            events.push(Event::SampleError(SampleError {
                time: Timestamp(time),
                pid: PID,
                kind: SampleErrorKind::TornRead,
                message: "torn".into(),
            }));
        }
        // The poller's drain: the readings taken up to a little before now.
        if time >= next_drain {
            next_drain += 500 * MS;
            let upto = time.saturating_sub(rng.next(300) * MS);
            while readings.get(delivered).is_some_and(|r| r.time.0 <= upto) {
                events.push(Event::Gpu(readings[delivered].clone()));
                delivered += 1;
            }
        }
    }
    events.extend(readings[delivered..].iter().cloned().map(Event::Gpu));
    events
}

/// Each thread's GIL shares: the same reads, resolved by the one rule, in both.
fn assert_gil_agrees(top: &TopModel, summary: &stackscope_aggregate::Summary) {
    let gil = summary.gil.as_ref().expect("the GIL's summary");
    let top_gil = top.thread_gil();
    for thread in &gil.threads {
        let counts = top_gil
            .iter()
            .find(|t| t.thread.pid == thread.pid && t.thread.id == thread.python_thread_id)
            .map(|t| t.all)
            .unwrap_or_else(|| panic!("top has no GIL for {}", thread.thread));
        assert!(
            (counts.holds() - thread.holds).abs() < 1e-9
                && (counts.waits() - thread.waits).abs() < 1e-9,
            "{}: top {counts:?}, summary {thread:?}",
            thread.thread
        );
    }
    // The loader waits for the GIL where it also reads; the thread asleep in `wait` never does.
    let waits = |name: &str| {
        gil.threads
            .iter()
            .find(|t| t.thread == name)
            .map(|t| t.waits)
    };
    assert!(waits("worker-2").is_some_and(|w| w > 0.05), "{gil:?}");
    assert!(waits("worker-3").is_none_or(|w| w == 0.0), "{gil:?}");
}

fn assert_agree(events: &[Event], include_idle: bool) {
    let config = AggregateConfig {
        include_idle,
        ..AggregateConfig::default()
    };
    let mut aggregator = Aggregator::new(config, Timestamp(0));
    let mut top = TopModel::new(30.0, true);
    for (i, event) in events.iter().enumerate() {
        aggregator.handle(event.clone());
        top.handle(event.clone());
        // `top` rolls its interval over now and then; the since-start counts must not care.
        if i % 997 == 0 {
            top.end_interval();
        }
    }
    aggregator.finish();
    top.flush();
    let summary = aggregator.summary(&RecordingMeta::default());
    let options = ViewOptions {
        include_idle,
        ..ViewOptions::default()
    };
    let totals = top.totals(&options);
    let gpu = summary.gpu.as_ref().expect("GPU section");

    assert_eq!(totals.all_samples, summary.samples);
    assert_eq!(totals.gpu_idle_samples, gpu.samples_gpu_idle);
    assert!(
        gpu.samples_gpu_idle > 500 && gpu.samples_gpu_busy > 500,
        "the stream has both GPU states: {gpu:?}"
    );

    let summary_threads: BTreeMap<(u32, u64), u64> = summary
        .threads
        .iter()
        .filter(|t| t.samples > 0)
        .map(|t| ((t.pid, t.python_thread_id), t.samples))
        .collect();
    let top_threads: BTreeMap<(u32, u64), u64> = top
        .thread_samples(&options)
        .into_iter()
        .filter(|&(_, n)| n > 0)
        .map(|(t, n)| ((t.pid, t.id), n))
        .collect();
    assert_eq!(top_threads, summary_threads);
    assert_eq!(summary_threads.len(), if include_idle { 3 } else { 2 });
    assert_gil_agrees(&top, &summary);

    let rows = top.rows(&options);
    let row = |function: &str, file: &str| {
        rows.iter()
            .find(|r| &*r.function == function && &*r.file == file)
            .unwrap_or_else(|| panic!("no row {function} ({file})"))
    };
    let functions = &summary.top_functions;
    assert_eq!(
        functions.by_total.len(),
        rows.len(),
        "every function is listed"
    );
    for stat in functions.by_self.iter().chain(&functions.by_total) {
        let counts = row(&stat.function, &stat.file).counts;
        assert_eq!(
            (counts.own, counts.total),
            (stat.self_samples, stat.total_samples),
            "{}",
            stat.function
        );
    }
    assert!(!gpu.top_idle_functions.is_empty());
    for stat in &gpu.top_idle_functions {
        let counts = row(&stat.function, &stat.file).counts;
        assert_eq!(counts.gpu_idle, stat.total_samples, "{}", stat.function);
    }
}

#[test]
fn top_and_the_summary_count_the_same_samples_gpu_idle_per_thread_and_per_function() {
    let events = run_events();
    // The stream exercises the hold limit: device 1 is silent for longer than it.
    const { assert!(8_000 * MS > HOLD_LIMIT_NANOS) };
    assert_agree(&events, false);
    assert_agree(&events, true);
}
