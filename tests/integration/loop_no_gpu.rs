//! The loop read without GPU data: `record --gpu off`, and `record` where the NVML
//! library cannot be loaded. The loop is found by its hand-offs (a thread that again and again
//! takes work from other processes or threads, then computes): `summary.json` says
//! `loop_found_by: "hand_offs"`, names the loop `loop (MainThread)` and its feeders, and gives
//! the loop's step, a verdict and what fixing buys, from the loop's own time. The job
//! (`fixtures/shape_job.py`, no `--gpu-file`) measures its own step (`--stats`): `input_wait`
//! must be within 12 points of it, `workers_needed` within 30% of what its own times give.
//!
//! Programs with no hand-off (a code formatter going through a tree of files, a web server
//! answering requests) have no loop: no roles, no step.
//!
//! Every test measures shares, so each holds the serial lock; runs are short (8 s).

use crate::common;

use std::path::Path;
use std::time::Duration;

use common::shape_jobs::*;
use common::*;
use serde_json::Value;

const RUN_TIMEOUT: Duration = Duration::from_secs(90);
/// The step's parts may be this far from the job's own measure (shares of its wall time).
const STEP_POINTS: f64 = 0.12;
/// `workers_needed` may be this far from the job's own (a share of it).
const WORKERS_SHARE: f64 = 0.30;
/// What `--nvml-lib` names where the tests want NVML unreadable.
const NO_NVML: &str = "/nonexistent/libnvidia-ml.so.1";

/// How the recording goes without GPU data.
#[derive(Clone, Copy, Debug, PartialEq)]
enum NoGpu {
    /// `--gpu off`.
    Off,
    /// `--gpu auto` with an NVML library that cannot be loaded.
    NoNvml,
}

/// A loop that takes its batches from two workers, then reads six records itself, one after
/// another: its own loading is most of its step. The workers take about 650 ms a batch each, a
/// little more than two steps, so the loop waits a little in its hand-off every step (a
/// hand-off that never waits is never sampled: without it the loop is no loop, as a script
/// that only reads is none).
const INLINE: &[&str] = &[
    "--feed",
    "workers",
    "--workers",
    "2",
    "--reads",
    "1",
    "--read-ms",
    "640",
    "--decode-ms",
    "10",
    "--inline-reads",
    "6",
    "--inline-read-ms",
    "40",
    "--step-ms",
    "60",
];

/// A loop that mostly computes (150 ms of its own Python a step); its two workers take about
/// 340 ms a batch each, a little more than two steps, so the loop waits a little in its
/// hand-off every step (a hand-off that never waits is never sampled).
const COMPUTE: &[&str] = &[
    "--feed",
    "workers",
    "--workers",
    "2",
    "--reads",
    "1",
    "--read-ms",
    "330",
    "--decode-ms",
    "10",
    "--python-ms",
    "150",
    "--step-ms",
    "0",
];

/// Records `shape_job.py ARGS` without GPU data; the summary, the job's own `--stats` and
/// the run (its terminal output).
fn record(out: &OutDir, args: &[&str], how: NoGpu) -> (Value, Value, Run) {
    let ready = out.tmp.path().join("ready");
    let stats = out.tmp.path().join("stats.json");
    let mut cmd = stackscope(&["record", "-o", out.arg()]);
    match how {
        NoGpu::Off => cmd.args(["--gpu", "off"]),
        NoGpu::NoNvml => cmd.args(["--nvml-lib", NO_NVML]),
    };
    cmd.arg("--")
        .arg("python3")
        .arg(fixture_path("shape_job.py"))
        .arg(&ready)
        .args(["--seconds", "8", "--stats"])
        .arg(&stats)
        .args(args);
    let run = run_with_timeout(cmd, RUN_TIMEOUT);
    run.assert_success();
    let summary = out.summary();
    let stats = read_stats(&stats);
    (summary, stats, run)
}

/// The roles' labels of role `role`.
fn labels<'a>(summary: &'a Value, role: &str) -> Vec<&'a str> {
    summary["roles"]
        .as_array()
        .map(|roles| {
            roles
                .iter()
                .filter(|r| text(&r["role"]) == role)
                .map(|r| text(&r["label"]))
                .collect()
        })
        .unwrap_or_default()
}

/// Everything worth printing when a check of a loop fails.
fn context(summary: &Value, stats: &Value, run: &Run) -> String {
    format!(
        "loop_found_by {}\nroles {}\nstep {}\nverdict {}\nif_fixed {}\nfeeders {}\nown {stats}\n\
         --- terminal ---\n{}\n{}",
        summary["loop_found_by"],
        summary["roles"],
        summary["step"],
        summary["verdict"],
        summary["if_fixed"],
        summary["feeders"],
        run.stdout,
        run.stderr
    )
}

/// What every loop found without GPU data shows: found by its hand-offs, the main thread as
/// the loop, no GPU section and no GPU wait, the terminal saying there was no GPU data and
/// giving the loop's time; the verdict's class `class`.
fn check_loop(summary: &Value, stats: &Value, run: &Run, class: &str) {
    let context = context(summary, stats, run);
    assert!(summary["gpu"].is_null(), "a GPU section\n{context}");
    assert_eq!(text(&summary["loop_found_by"]), "hand_offs", "{context}");
    assert_eq!(
        labels(summary, "trainer"),
        ["loop (MainThread)"],
        "{context}"
    );
    let step = &summary["step"];
    assert!(step.is_object(), "no step\n{context}");
    let gpu_wait = step["gpu_wait"].as_f64().unwrap_or(0.0);
    assert_eq!(gpu_wait, 0.0, "a GPU wait without GPU data\n{context}");
    let parts = [
        "input_wait",
        "inline_load",
        "python",
        "gil_wait",
        "other_wait",
    ];
    let sum: f64 = parts.iter().map(|p| step[p].as_f64().unwrap_or(0.0)).sum();
    assert!(
        (sum - 1.0).abs() < 0.02,
        "the step sums to {sum}\n{context}"
    );
    assert_eq!(text(&summary["verdict"]["class"]), class, "{context}");
    let terminal = format!("{}\n{}", run.stdout, run.stderr);
    assert!(
        terminal.to_lowercase().contains("no gpu data"),
        "the terminal does not say there was no GPU data\n{context}"
    );
    assert!(
        terminal.contains("The loop's time:"),
        "the terminal does not give the loop's time\n{context}"
    );
    // The loop's thread appears in the GIL's account.
    let pid = summary["pid"].as_u64();
    let threads = summary["gil"]["threads"]
        .as_array()
        .cloned()
        .unwrap_or_default();
    assert!(
        threads
            .iter()
            .any(|t| t["pid"].as_u64() == pid && text(&t["thread"]) == "MainThread"),
        "the loop's thread is not in gil.threads: {}\n{context}",
        summary["gil"]
    );
}

/// The worker-fed loop: its workers are its feeders, its wait for input and the workers it
/// needs are the job's own.
fn worker_fed(how: NoGpu) {
    let _serial = serial();
    let out = OutDir::new();
    let (summary, stats, run) = record(&out, WORKER_FED, how);
    check_loop(&summary, &stats, &run, "input_pipeline");
    let context = context(&summary, &stats, &run);

    let workers: Vec<&Value> = summary["roles"]
        .as_array()
        .map(|roles| {
            roles
                .iter()
                .filter(|r| matches!(text(&r["role"]), "worker" | "dataloader_worker"))
                .collect()
        })
        .unwrap_or_default();
    let worker_pids: usize = workers
        .iter()
        .map(|r| r["pids"].as_array().map_or(1, |p| p.len()))
        .sum();
    assert_eq!(worker_pids, 2, "the two workers' roles\n{context}");

    let feeders = summary["feeders"].as_array().cloned().unwrap_or_default();
    assert_eq!(feeders.len(), 1, "{context}");
    assert_eq!(text(&feeders[0]["role"]), "worker", "{context}");
    assert_eq!(
        feeders[0]["pids"].as_array().map(|p| p.len()),
        Some(2),
        "{context}"
    );

    let got = num(&summary["step"]["input_wait"], "input_wait");
    let own = own_share(&stats, "input_wait");
    eprintln!("{how:?}: input_wait {got:.2}, the job's own {own:.2}");
    assert!(
        (got - own).abs() <= STEP_POINTS,
        "input_wait {got:.2} against the job's own {own:.2}\n{context}"
    );

    let fixed = &summary["if_fixed"];
    assert_eq!(text(&fixed["bottleneck"]), "input_pipeline", "{context}");
    let now = fixed["workers_now"].as_f64().expect("workers_now");
    assert_eq!(now, 2.0, "{context}");
    let own = own_workers_needed(&stats, now, "input_wait");
    let got = num(&fixed["workers_needed"], "workers_needed");
    eprintln!("{how:?}: workers_needed {got}, the job's own {own:.1}");
    assert!(
        (got - own).abs() <= WORKERS_SHARE * own.max(1.0) + 0.5,
        "workers_needed {got} against the job's own {own:.1}\n{context}"
    );
    assert!(
        num(&fixed["speedup_up_to"], "speedup_up_to") > 1.0,
        "{context}"
    );
    assert!(fixed["cpus_usable"].as_f64().is_some(), "{context}");
    // The verdict's text ends with what fixing buys.
    let words = text(&summary["verdict"]["text"]);
    assert!(!words.is_empty(), "{context}");
}

#[test]
fn a_worker_fed_loop_recorded_with_the_gpu_off() {
    worker_fed(NoGpu::Off);
}

#[test]
fn a_worker_fed_loop_where_nvml_cannot_be_loaded() {
    worker_fed(NoGpu::NoNvml);
}

#[test]
fn a_loop_that_loads_its_own_records_without_gpu_data() {
    let _serial = serial();
    let out = OutDir::new();
    let (summary, stats, run) = record(&out, INLINE, NoGpu::Off);
    check_loop(&summary, &stats, &run, "inline_loading");
    let context = context(&summary, &stats, &run);
    let got = num(&summary["step"]["inline_load"], "inline_load");
    let own = own_share(&stats, "inline_load");
    eprintln!("inline_load {got:.2}, the job's own {own:.2}");
    assert!(
        (got - own).abs() <= STEP_POINTS,
        "inline_load {got:.2} against the job's own {own:.2}\n{context}"
    );
    assert_eq!(
        text(&summary["if_fixed"]["bottleneck"]),
        "inline_loading",
        "{context}"
    );
}

#[test]
fn a_loop_that_mostly_computes_without_gpu_data() {
    let _serial = serial();
    let out = OutDir::new();
    let (summary, stats, run) = record(&out, COMPUTE, NoGpu::NoNvml);
    check_loop(&summary, &stats, &run, "compute_bound");
    let context = context(&summary, &stats, &run);
    let got = num(&summary["step"]["input_wait"], "input_wait");
    let own = own_share(&stats, "input_wait");
    eprintln!("input_wait {got:.2}, the job's own {own:.2}");
    assert!(
        (got - own).abs() <= STEP_POINTS,
        "input_wait {got:.2} against the job's own {own:.2}\n{context}"
    );
    let python = num(&summary["step"]["python"], "python");
    assert!(python > 0.5, "python {python:.2}\n{context}");
    assert_eq!(
        text(&summary["if_fixed"]["bottleneck"]),
        "compute",
        "{context}"
    );
}

/// `attach --duration 4 --gpu off` to a fixture that has no hand-off: no loop, no roles, no
/// step, and no verdict on a loop.
fn check_no_loop(pid: u32, what: &str) {
    let out = OutDir::new();
    let pid = pid.to_string();
    let run = run_stackscope(
        &[
            "attach",
            "--pid",
            &pid,
            "--duration",
            "4",
            "--gpu",
            "off",
            "-o",
            out.arg(),
        ],
        RUN_TIMEOUT,
    );
    run.assert_success();
    let summary = out.summary();
    let context = format!(
        "{what}: loop_found_by {}\nroles {}\nstep {}\nverdict {}\n{}",
        summary["loop_found_by"],
        summary["roles"],
        summary["step"],
        summary["verdict"],
        run.describe()
    );
    assert!(summary_samples(&summary) > 50, "{context}");
    assert!(summary["loop_found_by"].is_null(), "{context}");
    assert_eq!(summary["roles"], serde_json::json!([]), "{context}");
    assert!(summary["step"].is_null(), "{context}");
    assert!(summary["if_fixed"].is_null(), "{context}");
    assert!(!run.stdout.contains("The loop's time:"), "{context}");
}

#[test]
fn a_code_formatter_going_through_a_tree_of_files_has_no_loop() {
    let _serial = serial();
    let root = tempfile::Builder::new()
        .prefix("stackscope-format-tree-")
        .tempdir()
        .expect("temp dir");
    let root_arg = root.path().to_str().expect("utf-8 temp path");
    let fixture = Fixture::start("format_tree.py", &["--root", root_arg, "--seconds", "60"]);
    check_no_loop(fixture.ready_pid(), "format_tree.py");
}

#[test]
fn a_web_server_answering_requests_has_no_loop() {
    let _serial = serial();
    let fixture = Fixture::start("web_server.py", &["--seconds", "60"]);
    let ready = fixture.ready_json();
    let _client = WebClient(ready["client"].as_u64().map(|p| p as u32));
    let pid = ready["pid"].as_u64().expect("the server's pid") as u32;
    assert!(Path::new(&format!("/proc/{pid}")).exists());
    check_no_loop(pid, "web_server.py");
}
