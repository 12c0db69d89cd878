//! The comparison on recordings made up from their figures: which verdict each kind of change
//! gets, that shares (not counts) are compared, and that stacks match across pids and lines.

use serde_json::json;

use super::*;

/// A recording's figures: `busy` the GPU's busy share, `input` the loop's input wait (the rest
/// of the step is its Python), `bottleneck` its verdict's.
#[derive(Clone, Copy)]
struct Figures {
    secs: f64,
    rate: f64,
    busy: Option<f64>,
    input: f64,
    input_bound: bool,
}

impl Default for Figures {
    fn default() -> Self {
        Figures {
            secs: 20.0,
            rate: 100.0,
            busy: Some(0.4),
            input: 0.55,
            input_bound: true,
        }
    }
}

fn summary(f: Figures, pid: u32) -> Summary {
    let samples = (f.secs * f.rate) as u64;
    let gpu = f.busy.map(|busy| {
        let (class, if_fixed) = if f.input_bound {
            (
                "input_pipeline",
                json!({"bottleneck": "input_pipeline", "share": f.input,
                       "speedup_up_to": 1.0 / (1.0 - f.input), "workers_now": 2,
                       "workers_needed": 5, "cpus_usable": 16.0}),
            )
        } else {
            ("gpu_bound", json!(null))
        };
        json!({
            "devices": [{"index": 0, "name": "NVIDIA H100", "uuid": "GPU-1", "samples": 100,
                         "mean_utilization": busy * 100.0, "p50": null, "p90": null,
                         "p99": null, "min": null, "max": null, "idle_share": 1.0 - busy,
                         "mean_memory_used_mib": null, "memory_total_mib": null,
                         "mean_power_watts": null}],
            "idle_below": 30.0, "mean_utilization": busy * 100.0, "idle_share": 1.0 - busy,
            "oscillation_period_secs": null,
            "step": {"input_wait": f.input, "inline_load": 0.0, "gpu_wait": 0.0,
                     "python": 1.0 - f.input, "gil_wait": 0.0, "other_wait": 0.0},
            "if_fixed": if_fixed,
            "samples_gpu_idle": 0, "samples_gpu_busy": 0, "samples_gpu_unknown": 0,
            "top_idle_functions": [], "top_busy_functions": [],
            "verdict": {"class": class, "text": "..."}
        })
    });
    serde_json::from_value(json!({
        "pid": pid, "command_line": "python3 train.py", "python_version": "3.12.3",
        "started_at": "", "duration_secs": f.secs, "rate_hz": f.rate, "ticks": samples,
        "samples": samples, "idle_samples_skipped": 0,
        "errors": {"total": 0, "torn_read": 0, "thread_gone": 0, "other": 0},
        "dropped": 0, "late_ticks": 0, "max_lateness_ms": 0.0, "target_exited": false,
        "exit_status": null, "threads": [], "top_functions": {"by_self": [], "by_total": []},
        "notices": [], "gpu": gpu, "gpu_unavailable": null
    }))
    .expect("a summary")
}

fn input(f: Figures, pid: u32, folded: &[(&str, f64)]) -> CompareInput {
    let summary = summary(f, pid);
    let samples = summary.samples as f64;
    CompareInput {
        label: format!("run{pid}"),
        dir: format!("run{pid}"),
        from_secs: 0.0,
        to_secs: f.secs,
        include_idle: true,
        native: false,
        folded: folded
            .iter()
            .map(|(s, share)| {
                (
                    s.replace("PID", &pid.to_string()),
                    (share * samples).round() as u64,
                )
            })
            .collect(),
        gpu_readings: (f.secs * 6.0) as u64,
        summary,
    }
}

const LOOP: &[(&str, f64)] = &[
    (
        "process PID python3 t.py;MainThread;main (t.py:10);get (queue.py:80)",
        0.5,
    ),
    (
        "process PID python3 t.py;MainThread;main (t.py:11);step (t.py:30)",
        0.5,
    ),
];

fn compared(before: Figures, after: Figures) -> Comparison {
    compare(
        &input(before, 100, LOOP),
        &input(after, 200, LOOP),
        CompareOptions::default(),
    )
}

#[test]
fn more_gpu_work_and_less_input_wait_helped_as_predicted() {
    let after = Figures {
        busy: Some(0.9),
        input: 0.02,
        input_bound: false,
        ..Figures::default()
    };
    let c = compared(Figures::default(), after);
    assert_eq!(
        c.change.verdict.class,
        ChangeClass::Helped,
        "{:?}",
        c.change
    );
    let text = &c.change.verdict.text;
    assert!(text.contains("rose 2.2x (busy 40% → 90%)"), "{text}");
    assert!(
        text.contains("no longer waits for its input (55% → 2%)"),
        "{text}"
    );
    assert!(
        text.contains("it is now GPU-bound, as predicted (up to 2.2x)"),
        "{text}"
    );
    assert!(!c.change.worse);
    let ratio = c.gpu.as_ref().and_then(|g| g.busy_ratio).unwrap_or(0.0);
    assert!((ratio - 2.25).abs() < 1e-9, "{ratio}");
}

#[test]
fn the_same_figures_at_another_rate_and_length_are_no_change() {
    let after = Figures {
        secs: 600.0,
        rate: 1000.0,
        ..Figures::default()
    };
    let c = compared(Figures::default(), after);
    assert_eq!(
        c.change.verdict.class,
        ChangeClass::NoChange,
        "{:?}",
        c.change
    );
    assert!(
        c.functions.iter().all(|f| !f.share.moved),
        "{:?}",
        c.functions
    );
    assert!(!c.change.worse);
}

#[test]
fn less_gpu_work_is_worse_and_fails_the_check() {
    let after = Figures {
        busy: Some(0.15),
        input: 0.8,
        ..Figures::default()
    };
    let c = compared(Figures::default(), after);
    assert_eq!(c.change.verdict.class, ChangeClass::Worse, "{:?}", c.change);
    assert!(c.change.worse);
    assert!(c
        .change
        .verdict
        .text
        .starts_with("Worse: the GPU's work per second fell"));
}

#[test]
fn a_smaller_bottleneck_with_unmoved_gpu_work_is_mixed() {
    let after = Figures {
        input: 0.2,
        ..Figures::default()
    };
    let c = compared(Figures::default(), after);
    assert_eq!(c.change.verdict.class, ChangeClass::Mixed, "{:?}", c.change);
    assert!(
        c.change.verdict.text.contains("did not move"),
        "{}",
        c.change.verdict.text
    );
}

#[test]
fn a_small_change_within_noise_is_not_called_one() {
    let after = Figures {
        busy: Some(0.43),
        input: 0.52,
        ..Figures::default()
    };
    let c = compared(Figures::default(), after);
    assert_eq!(
        c.change.verdict.class,
        ChangeClass::NoChange,
        "{:?}",
        c.change
    );
    let busy = &c.gpu.as_ref().expect("gpu").busy_share;
    assert!(!busy.moved && busy.noise > busy.change.abs(), "{busy:?}");
}

#[test]
fn without_gpu_data_moved_code_is_said_but_not_judged() {
    let cpu = Figures {
        busy: None,
        ..Figures::default()
    };
    let before = input(
        cpu,
        1,
        &[
            ("MainThread;f (a.py:3)", 0.7),
            ("MainThread;g (a.py:9)", 0.3),
        ],
    );
    // Every line moved, the cost moved from f to g.
    let after = input(
        cpu,
        2,
        &[
            ("MainThread;f (a.py:13)", 0.4),
            ("MainThread;g (a.py:19)", 0.6),
        ],
    );
    let c = compare(&before, &after, CompareOptions::default());
    assert_eq!(c.change.verdict.class, ChangeClass::Mixed, "{:?}", c.change);
    let f = c
        .functions
        .iter()
        .find(|f| f.function == "f")
        .expect("f matched");
    assert!(
        f.share.fell() && (f.share.change + 0.3).abs() < 0.01,
        "{f:?}"
    );
    assert!(
        c.change.verdict.text.contains("g (a.py) 30% → 60%"),
        "{}",
        c.change.verdict.text
    );
    assert!(c.gpu.is_none() && !c.change.worse);
    // Matched by line, f's lines of the two runs are other frames.
    let by_line = compare(
        &before,
        &after,
        CompareOptions {
            frames: FrameMatch::Line,
        },
    );
    assert!(by_line
        .functions
        .iter()
        .any(|f| f.function == "f" && f.file == "a.py:13"));
}

#[test]
fn stacks_match_across_pids_and_vanish_into_their_own_share() {
    let before = input(Figures::default(), 100, LOOP);
    let after = input(
        Figures::default(),
        200,
        &[(
            "process PID python3 t.py;MainThread;main (t.py:11);step (t.py:30)",
            1.0,
        )],
    );
    let stacks = diff_stacks(&before, &after, CompareOptions::default());
    assert_eq!(stacks.len(), 2, "{stacks:?}");
    let step = stacks.iter().find(|s| s.after > 0.0).expect("matched");
    assert_eq!(
        step.frames,
        [
            "recorded process",
            "MainThread",
            "main (t.py)",
            "step (t.py)"
        ]
    );
    assert_eq!((step.before, step.after), (0.5, 1.0));
    let gone = stacks.iter().find(|s| s.after == 0.0).expect("vanished");
    assert_eq!(gone.before, 0.5);
}

/// Shapes generated from parameters, tuned on none of them: for every length, rate and busy
/// share, the same figures are no change and a fall or rise of the GPU's work by a third or
/// more (over 30 s or longer) is worse or helped.
#[test]
fn generated_shapes_read_by_direction_and_size() {
    for secs in [30.0, 75.0, 600.0] {
        for rate in [20.0, 100.0, 997.0] {
            for busy in [0.1, 0.25, 0.45, 0.6] {
                let base = Figures {
                    secs,
                    rate,
                    busy: Some(busy),
                    input: 0.9 - busy,
                    input_bound: true,
                };
                let other_rate = Figures {
                    rate: rate * 3.0,
                    secs: secs * 0.7,
                    ..base
                };
                let same = compared(base, other_rate);
                assert_eq!(
                    same.change.verdict.class,
                    ChangeClass::NoChange,
                    "{secs} {rate} {busy}"
                );
                let faster = Figures {
                    busy: Some(busy + 0.35),
                    input: (0.9 - busy - 0.35).max(0.0),
                    ..base
                };
                let up = compared(base, faster);
                assert_eq!(
                    up.change.verdict.class,
                    ChangeClass::Helped,
                    "{secs} {rate} {busy}"
                );
                let down = compared(faster, base);
                assert_eq!(
                    down.change.verdict.class,
                    ChangeClass::Worse,
                    "{secs} {rate} {busy}"
                );
                assert!(down.change.worse && !up.change.worse);
            }
        }
    }
}
