//! Tests of roles, `while_idle` and start-up as the aggregator sees them: events in, summary out.

use stackscope_event::{Event, ProcessEventKind, ThreadInfo, Timestamp};
use stackscope_testkit::events;

use crate::{AggregateConfig, Aggregator, RecordingMeta, Role, Summary, VerdictClass};

const TRAINER: u32 = 42;
const WORKER: u32 = 43;

fn main_thread(active: bool) -> ThreadInfo {
    events::thread(1, Some(1001), Some("MainThread"), active)
}

fn at(pid: u32, t: u64, active: bool, frames: &[(&str, &str, u32)]) -> Event {
    events::stack(events::ms(t), pid, &main_thread(active), frames)
}

/// A job as `record --subprocesses` sees it: `startup_ms` of imports with the GPU idle (and
/// one stray 160 ms reading at 76%), then `cycles` of 1 s of training (GPU at 97%) and 2 s
/// waiting for the next batch (GPU at 3%) while a worker process augments images throughout.
fn job(leave_out_startup: bool, startup_ms: u64, cycles: u64, busy_pct: f32) -> Aggregator {
    let config = AggregateConfig {
        leave_out_startup,
        process_root: true,
        ..AggregateConfig::default()
    };
    let mut agg = Aggregator::new(config, Timestamp(0));
    for (pid, command) in [(TRAINER, "python3 train.py"), (WORKER, "python3 train.py")] {
        agg.handle(events::process(
            events::ms(0),
            pid,
            command,
            ProcessEventKind::Attached,
        ));
    }
    let end = startup_ms + cycles * 3_000;
    let mut readings = Vec::new();
    for t in (0..end).step_by(10) {
        let training = t >= startup_ms && (t - startup_ms) % 3_000 < 1_000;
        if t % 160 == 0 {
            let stray = t.abs_diff(startup_ms / 2) < 80;
            let value = if training {
                busy_pct
            } else if stray {
                76.0
            } else {
                3.0
            };
            readings.push(events::gpu_event(events::ms(t + 160), 0, value));
        }
        let trainer = if t < startup_ms {
            at(
                TRAINER,
                t,
                true,
                &[("import_torch", "train.py", 3), ("<module>", "train.py", 1)],
            )
        } else if training {
            at(
                TRAINER,
                t,
                true,
                &[("train_step", "train.py", 20), ("main", "train.py", 41)],
            )
        } else {
            at(
                TRAINER,
                t,
                false,
                &[("get", "queue.py", 10), ("main", "train.py", 40)],
            )
        };
        agg.handle(trainer);
        if t >= startup_ms {
            let frames = [("augment", "train.py", 30), ("worker_loop", "train.py", 33)];
            agg.handle(at(WORKER, t, true, &frames));
        }
        if t % 500 == 0 {
            for r in readings.drain(..) {
                agg.handle(r);
            }
        }
    }
    for r in readings.drain(..) {
        agg.handle(r);
    }
    agg.finish();
    agg
}

fn summary(agg: &Aggregator) -> Summary {
    agg.summary(&RecordingMeta {
        pid: TRAINER,
        ..RecordingMeta::default()
    })
}

#[test]
fn a_waiting_trainer_and_its_busy_worker_without_idle_samples_kept() {
    let s = summary(&job(false, 0, 5, 97.0));
    let gpu = s.gpu.expect("gpu");
    let trainer = gpu.while_idle.trainer.expect("trainer");
    assert_eq!(trainer.pid, TRAINER);
    assert_eq!(trainer.frame, "main (train.py:40)");
    assert_eq!(trainer.waiting_in.as_deref(), Some("get (queue.py:10)"));
    assert!(trainer.share > 0.95, "{trainer:?}");
    let feeders = &gpu.while_idle.feeders;
    assert_eq!(feeders.len(), 1, "{feeders:?}");
    assert_eq!(feeders[0].role, Role::Worker);
    assert_eq!(feeders[0].pids, vec![WORKER]);
    assert_eq!(
        feeders[0].function.as_deref(),
        Some("augment (train.py:30)")
    );
    assert!(feeders[0].busy_share > 0.99);
    assert_eq!(
        gpu.verdict.class,
        VerdictClass::InputPipeline,
        "{:?}",
        gpu.verdict
    );
    // The trainer's waits are read, not shown: the profile holds what ran.
    assert!(s.idle_samples_skipped > 0);
    let labels: Vec<(&str, Role)> = s.roles.iter().map(|r| (r.label.as_str(), r.role)).collect();
    assert!(
        labels.contains(&("trainer (MainThread)", Role::Trainer)),
        "{labels:?}"
    );
    assert!(labels.contains(&("worker", Role::Worker)), "{labels:?}");
    // Its step: 2 s of every 3 waiting in the queue, 1 s launching work.
    let step = gpu.step.expect("a step");
    assert!((step.input_wait - 2.0 / 3.0).abs() < 0.02, "{step:?}");
    assert!((step.python - 1.0 / 3.0).abs() < 0.02, "{step:?}");
    // Amdahl: 3x faster fed in time; one worker per third of the step: 3 workers.
    let fixed = gpu.if_fixed.expect("if fixed");
    assert_eq!(fixed.bottleneck, "input_pipeline");
    assert!((fixed.speedup_up_to - 3.0).abs() < 0.2, "{fixed:?}");
    assert_eq!(fixed.workers_now, Some(1));
    assert_eq!(fixed.workers_needed, Some(3), "{fixed:?}");
}

/// A metrics thread spinning in pure Python, as busy while the GPU idles as while it works, is
/// a helper, however busy: the trainer is the thread whose stacks change with the GPU.
#[test]
fn a_helper_spinning_whatever_the_gpu_does_is_not_the_trainer() {
    let mut agg = Aggregator::new(AggregateConfig::default(), Timestamp(0));
    for t in (0..9_000u64).step_by(10) {
        let training = t % 3_000 < 1_000;
        if t % 160 == 0 {
            let value = if training { 97.0 } else { 3.0 };
            agg.handle(events::gpu_event(events::ms(t + 160), 0, value));
        }
        // The loop sleeps in `.item()` while the GPU works and loads while it idles.
        let frames: &[(&str, &str, u32)] = if training {
            &[("main", "train.py", 41)]
        } else {
            &[("read_batch", "train.py", 12), ("main", "train.py", 40)]
        };
        agg.handle(at(TRAINER, t, !training, frames));
        // It runs more while the loop sleeps (the GIL is free): it looks like the GPU's rhythm
        // by how much it runs, not by what it does.
        let running = training || t % 20 == 0;
        let metrics = events::thread(2, Some(1002), Some("metrics"), running);
        let spin = [("collect", "train.py", 70), ("run", "threading.py", 900)];
        agg.handle(events::stack(events::ms(t), TRAINER, &metrics, &spin));
    }
    agg.finish();
    let s = summary(&agg);
    let trainer = s.roles.iter().find(|r| r.role == Role::Trainer);
    assert_eq!(
        trainer.map(|t| t.thread.as_str()),
        Some("MainThread"),
        "{:?}",
        s.roles
    );
    let step = s.gpu.expect("gpu").step.expect("a step");
    // Waiting while the GPU works is waiting on the GPU; reading while it idles is loading.
    assert!((step.gpu_wait - 1.0 / 3.0).abs() < 0.05, "{step:?}");
    assert!((step.inline_load - 2.0 / 3.0).abs() < 0.05, "{step:?}");
}

/// Without GPU data there are no roles: threads are threads.
#[test]
fn without_gpu_data_there_are_no_roles() {
    let config = AggregateConfig {
        gpu_enabled: false,
        ..AggregateConfig::default()
    };
    let mut agg = Aggregator::new(config, Timestamp(0));
    for t in (0..2_000u64).step_by(10) {
        agg.handle(at(TRAINER, t, false, &[("main", "black.py", 3)]));
        let pool = events::thread(2, Some(1002), Some("ThreadPoolExecutor-0_0"), true);
        let work = [
            ("format_file", "black.py", 90),
            ("_worker", "concurrent/futures/thread.py", 83),
        ];
        agg.handle(events::stack(events::ms(t), TRAINER, &pool, &work));
    }
    agg.finish();
    assert!(summary(&agg).roles.is_empty());
}

#[test]
fn record_leaves_its_start_up_out() {
    let s = summary(&job(true, 6_000, 4, 97.0));
    let gpu = s.gpu.expect("gpu");
    assert!((gpu.startup_secs - 6.0).abs() < 0.3, "{}", gpu.startup_secs);
    assert_eq!(gpu.startup_functions[0].function, "import_torch");
    // The GPU-idle flamegraph shows start-up; the trainer's line leaves it out.
    assert!(gpu
        .top_idle_functions
        .iter()
        .any(|f| f.function == "import_torch"));
    let trainer = gpu.while_idle.trainer.expect("trainer");
    assert_eq!(trainer.frame, "main (train.py:40)");
    assert!(trainer.share > 0.95, "{trainer:?}");
    // 1 s at 97% and 2 s at 3% in each cycle: 34%, not diluted by 6 s of start-up.
    let mean = gpu.mean_utilization.expect("mean");
    assert!((mean - 34.3).abs() < 3.0, "mean {mean}");
    let cycle = gpu.cycle.expect("cycle");
    assert!((cycle.period_secs - 3.0).abs() < 0.2, "{cycle:?}");
    assert!(
        gpu.verdict.text.contains("The first 6."),
        "{}",
        gpu.verdict.text
    );
    // Every sample is still in the profile.
    let all: u64 = s.threads.iter().map(|t| t.samples).sum();
    assert_eq!(all, s.samples);
}

#[test]
fn attach_keeps_everything_and_a_gpu_never_busy_has_no_start_up() {
    let attached = summary(&job(false, 6_000, 4, 97.0)).gpu.expect("gpu");
    assert_eq!(attached.startup_secs, 0.0);
    assert!(attached
        .top_idle_functions
        .iter()
        .any(|f| f.function == "import_torch"));
    // A job that never keeps the GPU busy: nothing is start-up, everything counts.
    let starved = summary(&job(true, 6_000, 3, 10.0)).gpu.expect("gpu");
    assert_eq!(starved.startup_secs, 0.0);
    assert!(starved.startup_functions.is_empty());
    assert!(starved
        .top_idle_functions
        .iter()
        .any(|f| f.function == "import_torch"));
    assert!(starved.mean_utilization.expect("mean") < 10.0);
}

/// Data loaded inline on the main thread (running in both phases) while torch's autograd
/// engine, a native thread with no Python name, runs Python hooks only during the backward
/// pass: the trainer is the main thread, not the native one.
#[test]
fn a_native_thread_busy_only_with_the_gpu_is_not_the_trainer() {
    let mut agg = Aggregator::new(AggregateConfig::default(), Timestamp(0));
    for t in (0..9_000u64).step_by(10) {
        let training = t % 3_000 < 1_000;
        if t % 160 == 0 {
            let value = if training { 97.0 } else { 3.0 };
            agg.handle(events::gpu_event(events::ms(t + 160), 0, value));
        }
        let frames: &[(&str, &str, u32)] = if training {
            &[("train_step", "train.py", 20), ("main", "train.py", 41)]
        } else {
            &[("augment", "train.py", 30), ("main", "train.py", 40)]
        };
        agg.handle(at(TRAINER, t, true, frames));
        // The engine's thread runs a hook during the backward pass and waits otherwise.
        let engine = events::thread(2, Some(1010), None, training);
        let hook = [("backward_hook", "torch/autograd/function.py", 5)];
        agg.handle(events::stack(events::ms(t), TRAINER, &engine, &hook));
    }
    agg.finish();
    let s = summary(&agg);
    let trainer = s
        .roles
        .iter()
        .find(|r| r.role == Role::Trainer)
        .expect("trainer");
    assert_eq!(trainer.thread, "MainThread", "{:?}", s.roles);
    let gpu = s.gpu.expect("gpu");
    let line = gpu.while_idle.trainer.expect("trainer's line");
    assert_eq!(line.frame, "augment (train.py:30)");
    assert_eq!(line.waiting_in, None);
}
