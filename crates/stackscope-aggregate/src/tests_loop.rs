//! The loop read without GPU data, and GIL waits read whatever order a read's threads come in:
//! shapes generated from parameters, events in, summary out.

use stackscope_event::{Event, ProcessEventKind, ThreadInfo, Timestamp};
use stackscope_testkit::events;

use crate::{AggregateConfig, Aggregator, LoopFoundBy, RecordingMeta, Role, Summary, VerdictClass};

const MAIN: u32 = 40;

fn thread(id: u64, name: &str, active: bool, owns_gil: bool) -> ThreadInfo {
    ThreadInfo {
        owns_gil,
        ..events::thread(id, Some(1000 + id), Some(name), active)
    }
}

fn no_gpu() -> AggregateConfig {
    AggregateConfig {
        gpu_enabled: false,
        process_root: true,
        ..AggregateConfig::default()
    }
}

fn summary(mut agg: Aggregator) -> Summary {
    agg.finish();
    agg.summary(&RecordingMeta {
        pid: MAIN,
        cpus_usable: Some(16.0),
        ..RecordingMeta::default()
    })
}

/// A loop fed by `workers` worker processes (started by `multiprocessing`), sampled every
/// 10 ms for 20 s without GPU data: each 100 ms step it waits `wait_ms` in its queue's `get`,
/// then computes; a helper thread of its process sleeps throughout (listed first or last).
fn worker_fed(workers: u32, wait_ms: u64, helper_first: bool) -> Summary {
    let mut agg = Aggregator::new(no_gpu(), Timestamp(0));
    let pids: Vec<u32> = (0..workers).map(|w| MAIN + 1 + w).collect();
    for &pid in std::iter::once(&MAIN).chain(&pids) {
        agg.handle(events::process(
            events::ms(0),
            pid,
            "python3 train.py",
            ProcessEventKind::Attached,
        ));
    }
    for t in (0..20_000).step_by(10) {
        let waits = t % 100 < wait_ms;
        let frames: &[(&str, &str, u32)] = if waits {
            &[
                ("get", "multiprocessing/queues.py", 103),
                ("Loader.__next__", "train.py", 30),
                ("main", "train.py", 50),
            ]
        } else {
            &[("train_step", "train.py", 12), ("main", "train.py", 52)]
        };
        let main = events::stack(
            events::ms(t),
            MAIN,
            &thread(1, "MainThread", !waits, !waits),
            frames,
        );
        let helper = events::stack(
            events::ms(t),
            MAIN,
            &thread(2, "metrics", false, false),
            &[("wait", "threading.py", 300), ("log_loop", "train.py", 70)],
        );
        let (first, second) = if helper_first {
            (helper, main)
        } else {
            (main, helper)
        };
        agg.handle(first);
        agg.handle(second);
        for &pid in &pids {
            agg.handle(events::stack(
                events::ms(t),
                pid,
                &thread(1, "MainThread", true, true),
                &[
                    ("augment", "train.py", 80),
                    ("worker_loop", "train.py", 90),
                    ("_bootstrap", "multiprocessing/process.py", 314),
                ],
            ));
        }
    }
    summary(agg)
}

#[test]
fn without_gpu_data_the_loop_is_found_by_its_hand_offs() {
    for (workers, wait_ms, helper_first) in [(2, 60, false), (1, 30, true), (3, 80, true)] {
        let s = worker_fed(workers, wait_ms, helper_first);
        let context = format!("{workers} workers, {wait_ms} ms waits: {:?}", s.verdict);
        assert_eq!(s.loop_found_by, Some(LoopFoundBy::HandOffs), "{context}");
        let the_loop: Vec<(&str, u32)> = s
            .roles
            .iter()
            .filter(|r| r.role == Role::Trainer)
            .map(|r| (r.label.as_str(), r.pid))
            .collect();
        assert_eq!(the_loop, [("loop (MainThread)", MAIN)], "{context}");
        let workers_seen = s.roles.iter().filter(|r| r.role == Role::Worker).count();
        assert_eq!(workers_seen, workers as usize, "{context}");
        let step = s.step.expect("a step");
        let share = wait_ms as f64 / 100.0;
        assert!((step.input_wait - share).abs() < 0.02, "{step:?} {context}");
        assert_eq!(step.gpu_wait, 0.0);
        let verdict = s.verdict.expect("a verdict");
        assert_eq!(verdict.class, VerdictClass::InputPipeline, "{context}");
        assert!(verdict.text.contains("no GPU data"), "{}", verdict.text);
        // n pipelines keep up with steps (1 - share) as long: n / (1 - share) of them.
        let fixed = s.if_fixed.expect("if fixed");
        let needed = (f64::from(workers) / (1.0 - share) - 0.1).ceil() as u32;
        assert_eq!(fixed.workers_needed, Some(needed), "{fixed:?}");
        assert_eq!(s.feeders.len(), 1, "{:?}", s.feeders);
        assert!(s.gpu.is_none());
    }
}

#[test]
fn a_program_with_no_hand_off_has_no_loop() {
    let mut agg = Aggregator::new(no_gpu(), Timestamp(0));
    for t in (0..10_000).step_by(10) {
        let reads = t % 50 < 10;
        let frames: &[(&str, &str, u32)] = if reads {
            &[
                ("read", "pathlib.py", 1050),
                ("format_file", "fmt.py", 20),
                ("main", "fmt.py", 40),
            ]
        } else {
            &[
                ("tokenize", "fmt.py", 8),
                ("format_file", "fmt.py", 22),
                ("main", "fmt.py", 40),
            ]
        };
        agg.handle(events::stack(
            events::ms(t),
            MAIN,
            &thread(1, "MainThread", !reads, !reads),
            frames,
        ));
    }
    let s = summary(agg);
    assert!(s.roles.is_empty(), "{:?}", s.roles);
    assert_eq!((s.step, s.verdict, s.loop_found_by), (None, None, None));
}

/// A loop whose own Python (`python_ms` of each 100 ms step, the GPU idle) competes for the
/// GIL with `helpers` threads spinning in pure Python; then it waits 40 ms on the GPU. In each
/// read the threads come in the order given by `loop_first`. The loop holds the GIL a share
/// `1 / (helpers + 1)` of its Python and waits for it the rest.
fn gil_bound(helpers: u64, loop_first: bool) -> Summary {
    let mut agg = Aggregator::new(AggregateConfig::default(), Timestamp(0));
    for t in (0..20_000).step_by(10) {
        let in_python = t % 100 < 60;
        let turn = (t / 10) % (helpers + 1);
        if t % 100 == 0 {
            let value = if in_python { 3.0 } else { 97.0 };
            agg.handle(events::gpu_event(events::ms(t), 0, value));
            agg.handle(events::gpu_event(events::ms(t + 60), 0, 97.0));
        }
        let mut read: Vec<Event> = Vec::new();
        let loop_holds = in_python && turn == 0;
        let loop_frames: &[(&str, &str, u32)] = if in_python {
            &[("bookkeeping", "train.py", 20), ("main", "train.py", 40)]
        } else {
            &[
                ("synchronize", "torch/cuda/__init__.py", 800),
                ("main", "train.py", 41),
            ]
        };
        read.push(events::stack(
            events::ms(t),
            MAIN,
            &thread(1, "MainThread", loop_holds, loop_holds),
            loop_frames,
        ));
        for h in 0..helpers {
            let holds = if in_python { turn == h + 1 } else { h == 0 };
            read.push(events::stack(
                events::ms(t),
                MAIN,
                &thread(2 + h, &format!("metrics-{h}"), holds, holds),
                &[
                    ("spin", "train.py", 60),
                    ("spinning_helper", "train.py", 66),
                ],
            ));
        }
        if !loop_first {
            read.reverse();
        }
        for event in read {
            agg.handle(event);
        }
    }
    agg.finish();
    agg.summary(&RecordingMeta {
        pid: MAIN,
        ..RecordingMeta::default()
    })
}

#[test]
fn gil_waits_are_found_whatever_order_a_reads_threads_come_in() {
    for helpers in [1, 3] {
        let shares: Vec<f64> = [true, false]
            .into_iter()
            .map(|loop_first| {
                let s = gil_bound(helpers, loop_first);
                let step = s.step.expect("a step");
                let holder = s.step_gil_holder.expect("a holder");
                assert!(holder.thread.starts_with("metrics-"), "{holder:?}");
                assert_eq!(
                    s.verdict.map(|v| v.class),
                    Some(VerdictClass::GilContention),
                    "{step:?}"
                );
                let gil = s.gil.expect("the GIL's summary");
                let main = gil
                    .threads
                    .iter()
                    .find(|t| t.thread == "MainThread")
                    .expect("the loop's GIL");
                assert!(main.waits > 0.25, "{main:?}");
                step.gil_wait
            })
            .collect();
        // The Python is 60% of the step; the loop holds the GIL 1 / (helpers + 1) of it.
        let expected = 0.6 * helpers as f64 / (helpers + 1) as f64;
        for share in &shares {
            assert!(
                (share - expected).abs() < 0.05,
                "{shares:?} against {expected}"
            );
        }
    }
}
