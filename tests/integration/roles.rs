//! The verdict read by roles, end to end: simulated training jobs (pure Python, `fixtures/*_job.py`)
//! drive the fake NVML through a file while the real binary records them without `--idle`,
//! and the real H100 recordings in `tests/data/recordings/` are replayed through `report`.
//! Each checks what `summary.json`'s `gpu` section says: the verdict's class, the trainer's
//! frame and what it waits in, the feeders, the cycle and the start-up.

use crate::common;

use std::path::Path;
use std::time::Duration;

use common::*;
use serde_json::Value;

const RUN_TIMEOUT: Duration = Duration::from_secs(90);

/// The GPU section of a run's summary.json.
fn gpu_of(out: &OutDir, run: &Run) -> Value {
    let summary = out.summary();
    let gpu = summary["gpu"].clone();
    assert!(gpu.is_object(), "no GPU section\n{}", run.describe());
    gpu
}

/// The fake NVML script whose utilization follows `file`, read every 100 ms; its compute
/// processes are the pids in `pids_file`, or none.
fn fake_script(file: &Path, pids_file: Option<&Path>) -> String {
    let processes = pids_file.map_or(String::new(), |p| {
        format!(r#","processes":{{"file":"{}"}}"#, p.display())
    });
    format!(
        r#"{{"devices":[{{"name":"Fake H100","utilization":{{"file":"{}"}}{processes}}}],"sample_period_ms":100}}"#,
        file.display()
    )
}

/// `record --subprocesses` (no `--idle`) of `fixture` under the fake NVML.
fn record_job(out: &OutDir, fixture: &str, seconds: &str, args: &[&str]) -> Run {
    record_listing(out, fixture, seconds, args, None)
}

/// As [`record_job`], the fake NVML listing the pids of `pids_file` with a compute context.
fn record_listing(
    out: &OutDir,
    fixture: &str,
    seconds: &str,
    args: &[&str],
    pids_file: Option<&Path>,
) -> Run {
    let gpu_file = out.tmp.path().join("gpu-util");
    std::fs::write(&gpu_file, "3").expect("gpu file");
    let ready = out.tmp.path().join("ready");
    let mut cmd = stackscope(&["record", "--subprocesses", "-o", out.arg(), "--nvml-lib"]);
    cmd.arg(fake_library("fake-nvml"))
        .arg("--")
        .arg("python3")
        .arg(fixture_path(fixture))
        .arg(&ready)
        .arg("--gpu-file")
        .arg(&gpu_file)
        .args(["--seconds", seconds])
        .args(args)
        .env("STACKSCOPE_FAKE_NVML", fake_script(&gpu_file, pids_file));
    run_with_timeout(cmd, RUN_TIMEOUT)
}

/// The line of the first line of `fixture` that contains `text`.
fn line_of(fixture: &str, text: &str) -> u32 {
    let source = fixture_source(fixture);
    let found = source
        .lines()
        .position(|l| l.contains(text))
        .unwrap_or_else(|| panic!("{text:?} not in {fixture}"));
    found as u32 + 1
}

fn text(v: &Value) -> &str {
    v.as_str().unwrap_or("")
}

fn within(value: f64, truth: f64, share: f64) -> bool {
    (value - truth).abs() <= share * truth
}

/// How far a burst's busy time may be off by sampling alone: the fake NVML is read every 100 ms,
/// so each edge of a burst can land a sample early or late (on a loaded machine, both).
const BUSY_SAMPLING_SLACK_SECS: f64 = 0.2;

fn assert_cycle(gpu: &Value, period: f64, busy: f64, tolerance: f64) {
    let cycle = &gpu["cycle"];
    let got_period = num(&cycle["period_secs"], "cycle.period_secs");
    let got_busy = num(&cycle["busy_secs"], "cycle.busy_secs");
    let busy_ok = (got_busy - busy).abs() <= (tolerance * busy).max(BUSY_SAMPLING_SLACK_SECS);
    assert!(
        within(got_period, period, tolerance) && busy_ok,
        "cycle {cycle} against busy {busy} s every {period} s"
    );
    assert!(num(&cycle["cycles"], "cycle.cycles") >= 2.0, "{cycle}");
}

#[test]
fn a_loop_fed_by_busy_workers_is_an_input_pipeline() {
    let _serial = serial();
    let out = OutDir::new();
    let run = record_job(&out, "feeder_job.py", "10", &["--period", "2.0"]);
    run.assert_success();
    let gpu = gpu_of(&out, &run);
    let verdict = &gpu["verdict"];
    assert_eq!(text(&verdict["class"]), "input_pipeline", "{verdict}");

    let trainer = &gpu["while_idle"]["trainer"];
    let wait_line = line_of("feeder_job.py", "return self.batches.get(");
    assert_eq!(
        text(&trainer["frame"]),
        format!("BatchLoader.__next__ (feeder_job.py:{wait_line})"),
        "{trainer}"
    );
    assert!(
        text(&trainer["waiting_in"]).starts_with("Queue.get (multiprocessing/queues.py:"),
        "{trainer}"
    );
    assert!(num(&trainer["share"], "trainer share") > 0.6, "{trainer}");

    let feeders = gpu["while_idle"]["feeders"].as_array().expect("feeders");
    assert_eq!(feeders.len(), 1, "{feeders:?}");
    let workers = &feeders[0];
    assert_eq!(text(&workers["role"]), "worker", "{workers}");
    assert_eq!(
        workers["pids"].as_array().map(Vec::len),
        Some(2),
        "{workers}"
    );
    assert!(num(&workers["busy_share"], "busy share") > 0.7, "{workers}");
    assert!(
        text(&workers["function"]).starts_with("augment_pixels (feeder_job.py:"),
        "{workers}"
    );
    assert!(num(&workers["share"], "feeder share") > 0.7, "{workers}");

    // The GPU: 0.6 s at 97% every 2 s, after a start-up of about one period (the first batch).
    assert_cycle(&gpu, 2.0, 0.6 * 0.97, 0.25);
    let startup = num(&gpu["startup_secs"], "startup_secs");
    assert!((1.0..4.0).contains(&startup), "start-up {startup} s");
    let words = text(&verdict["text"]);
    assert!(words.contains(text(&trainer["frame"])), "{words}");
    assert!(words.contains("augment_pixels (feeder_job.py:"), "{words}");
    assert!(words.contains("start-up"), "{words}");
}

#[test]
fn the_trainer_is_in_the_process_nvml_lists() {
    let _serial = serial();
    let out = OutDir::new();
    let pids_file = out.tmp.path().join("compute-pids");
    let pids_arg = pids_file.to_string_lossy().into_owned();
    let run = record_listing(
        &out,
        "launcher_job.py",
        "8",
        &["--pids-file", &pids_arg],
        Some(&pids_file),
    );
    run.assert_success();
    let listed: u32 = std::fs::read_to_string(&pids_file)
        .expect("the trainer's pid")
        .trim()
        .parse()
        .expect("a pid");
    let summary = out.summary();
    let roles = summary["roles"].as_array().expect("roles");
    let trainer = roles
        .iter()
        .find(|r| r["role"] == "trainer")
        .unwrap_or_else(|| panic!("no trainer in {roles:?}"));
    // The launcher spins in rhythm with the GPU and changes with it more than the trainer
    // does; only the process list tells them apart.
    assert_eq!(
        trainer["pid"].as_u64(),
        Some(u64::from(listed)),
        "{roles:?}"
    );
    assert_eq!(text(&trainer["thread"]), "MainThread", "{trainer}");
    // The launcher started the trainer: it does not feed it, whatever it does meanwhile.
    let launcher = roles
        .iter()
        .find(|r| r["pid"].as_u64() != Some(u64::from(listed)))
        .unwrap_or_else(|| panic!("no launcher in {roles:?}"));
    assert_eq!(text(&launcher["role"]), "helper", "{roles:?}");
    let frame = text(&summary["gpu"]["while_idle"]["trainer"]["frame"]);
    assert!(frame.starts_with("train (launcher_job.py:"), "{frame}");
}

#[test]
fn attach_to_a_running_feeder_job_leaves_no_start_up_out() {
    let _serial = serial();
    let out = OutDir::new();
    let gpu_file = out.tmp.path().join("gpu-util");
    std::fs::write(&gpu_file, "3").expect("gpu file");
    let gpu_arg = gpu_file.display().to_string();
    let job = Fixture::start(
        "feeder_job.py",
        &["--gpu-file", &gpu_arg, "--seconds", "30"],
    );
    let pid = job.pid;
    let mut cmd = stackscope(&[
        "attach",
        "--pid",
        &pid.to_string(),
        "--subprocesses",
        "--duration",
        "8",
        "-o",
        out.arg(),
        "--nvml-lib",
    ]);
    cmd.arg(fake_library("fake-nvml"))
        .env("STACKSCOPE_FAKE_NVML", fake_script(&gpu_file, None));
    let run = run_with_timeout(cmd, RUN_TIMEOUT);
    run.assert_success();
    let gpu = gpu_of(&out, &run);
    assert_eq!(num(&gpu["startup_secs"], "startup_secs"), 0.0);
    assert_eq!(
        text(&gpu["verdict"]["class"]),
        "input_pipeline",
        "{}",
        gpu["verdict"]
    );
    assert_cycle(&gpu, 2.0, 0.6 * 0.97, 0.25);
}

#[test]
fn data_loaded_in_the_loop_itself_is_inline_loading() {
    let _serial = serial();
    let out = OutDir::new();
    let run = record_job(&out, "inline_job.py", "8", &["--step", "0.2"]);
    run.assert_success();
    let gpu = gpu_of(&out, &run);
    assert_eq!(
        text(&gpu["verdict"]["class"]),
        "inline_loading",
        "{}",
        gpu["verdict"]
    );
    let trainer = &gpu["while_idle"]["trainer"];
    let read = format!(
        "read_sample (inline_job.py:{})",
        marker_line(&fixture_source("inline_job.py"), "read-sample")
    );
    let decode = format!(
        "decode_sample (inline_job.py:{})",
        marker_line(&fixture_source("inline_job.py"), "decode-sample")
    );
    let frame = text(&trainer["frame"]);
    assert!(frame == read || frame == decode, "{trainer}");
    // time.sleep and a pure-Python loop: no library call below the job's frame.
    assert!(trainer["waiting_in"].is_null(), "{trainer}");
    assert_eq!(
        gpu["while_idle"]["feeders"].as_array().map(Vec::len),
        Some(0)
    );
    let words = text(&gpu["verdict"]["text"]);
    assert!(words.contains(&read) || words.contains(&decode), "{words}");
    assert!(words.contains("highly input-bound"), "{words}");
    // Loading 16 x 50 ms against a 0.2 s step: about 80% of the loop's time.
    let step = &gpu["step"];
    let inline = num(&step["inline_load"], "inline_load");
    assert!((0.7..=0.9).contains(&inline), "{step}");
}

#[test]
fn a_periodic_checkpoint_is_a_stall_in_save_checkpoint() {
    let _serial = serial();
    let out = OutDir::new();
    // 8 steps of 0.25 s (GPU busy), then a 1 s checkpoint (GPU idle): every 3 s, ~66% busy.
    let args = ["--step", "0.25", "--every", "8", "--save", "1.0"];
    let run = record_job(&out, "checkpoint_job.py", "11", &args);
    run.assert_success();
    let gpu = gpu_of(&out, &run);
    assert_eq!(
        text(&gpu["verdict"]["class"]),
        "periodic_stall",
        "{}",
        gpu["verdict"]
    );
    let trainer = &gpu["while_idle"]["trainer"];
    assert!(
        text(&trainer["frame"]).starts_with("serialize_state (checkpoint_job.py:"),
        "{trainer}"
    );
    assert!(num(&trainer["share"], "trainer share") > 0.8, "{trainer}");
    let cycle = &gpu["cycle"];
    assert!(
        within(num(&cycle["period_secs"], "period"), 3.0, 0.2),
        "{cycle}"
    );
    assert!(
        within(num(&cycle["idle_secs"], "idle"), 1.0, 0.35),
        "{cycle}"
    );
}

#[test]
fn a_gpu_bound_loop_does_not_blame_its_workers() {
    let _serial = serial();
    let out = OutDir::new();
    let run = record_job(&out, "gpu_bound_job.py", "6", &[]);
    run.assert_success();
    let gpu = gpu_of(&out, &run);
    assert_eq!(
        text(&gpu["verdict"]["class"]),
        "gpu_bound",
        "{}",
        gpu["verdict"]
    );
    assert!(gpu["cycle"].is_null(), "{}", gpu["cycle"]);
    // The workers wait in Queue.put: nothing the GPU waits for. (The GPU idles a moment at the
    // job's end, while it stops its workers, so they may be listed; never as busy, never blamed.)
    for feeders in gpu["while_idle"]["feeders"].as_array().expect("feeders") {
        assert!(num(&feeders["busy_share"], "busy share") < 0.6, "{feeders}");
    }
    let words = text(&gpu["verdict"]["text"]);
    assert!(!words.contains("input pipeline"), "{words}");
    let roles = out.summary()["roles"].clone();
    let trainer: Vec<&Value> = roles
        .as_array()
        .expect("roles")
        .iter()
        .filter(|r| r["role"] == "trainer")
        .collect();
    assert_eq!(trainer.len(), 1, "{roles}");
    assert_eq!(text(&trainer[0]["label"]), "trainer (MainThread)");
}

// ------------------------------------------------- the real recordings, replayed

/// `report` of a copy of one of the recordings in tests/data/recordings.
fn replay(name: &str) -> (OutDir, Value) {
    let out = OutDir::new();
    let copy = copy_recording(name, out.tmp.path());
    let copy_arg = copy.display().to_string();
    let run = run_stackscope(&["report", &copy_arg, "-o", out.arg()], RUN_TIMEOUT);
    run.assert_success();
    let gpu = out.summary()["gpu"].clone();
    assert!(gpu.is_object(), "no GPU section\n{}", run.describe());
    (out, gpu)
}

/// The step of a two-worker recording: mostly waiting for batches, and what more workers buy
/// (12 workers were measured GPU-bound).
fn assert_two_worker_step(gpu: &Value) {
    let step = &gpu["step"];
    let sum: f64 = [
        "input_wait",
        "inline_load",
        "gpu_wait",
        "python",
        "gil_wait",
        "other_wait",
    ]
    .iter()
    .map(|k| num(&step[*k], k))
    .sum();
    assert!((sum - 1.0).abs() < 1e-6, "{step}");
    assert!(num(&step["input_wait"], "input_wait") > 0.5, "{step}");
    let fixed = &gpu["if_fixed"];
    assert_eq!(text(&fixed["bottleneck"]), "input_pipeline", "{fixed}");
    assert_eq!(fixed["workers_now"].as_u64(), Some(2), "{fixed}");
    let needed = fixed["workers_needed"].as_u64().expect("workers_needed");
    assert!((6..=12).contains(&needed), "{fixed}");
    assert!(
        num(&fixed["speedup_up_to"], "speedup_up_to") > 2.0,
        "{fixed}"
    );
    let words = text(&gpu["verdict"]["text"]);
    assert!(words.contains("highly input-bound"), "{words}");
    assert!(
        words.contains(&format!("about {needed} workers would keep up")),
        "{words}"
    );
}

fn assert_dataloader_story(gpu: &Value) {
    let trainer = &gpu["while_idle"]["trainer"];
    assert_eq!(text(&trainer["frame"]), "main (train.py:136)", "{trainer}");
    assert!(
        text(&trainer["waiting_in"])
            .starts_with("_BaseDataLoaderIter.__next__ (torch/utils/data/dataloader.py:"),
        "{trainer}"
    );
    let feeders = &gpu["while_idle"]["feeders"][0];
    assert_eq!(text(&feeders["role"]), "dataloader_worker", "{feeders}");
    assert_eq!(
        feeders["pids"].as_array().map(Vec::len),
        Some(2),
        "{feeders}"
    );
    assert!(
        text(&feeders["function"]).starts_with("augment_pixels (train.py:56)"),
        "{feeders}"
    );
    assert!(num(&feeders["share"], "feeder share") > 0.9, "{feeders}");
    assert!(num(&feeders["busy_share"], "busy share") > 0.9, "{feeders}");
    assert_eq!(
        text(&gpu["verdict"]["class"]),
        "input_pipeline",
        "{}",
        gpu["verdict"]
    );
    let words = text(&gpu["verdict"]["text"]);
    assert!(words.contains("main (train.py:136)"), "{words}");
    assert!(words.contains("augment_pixels (train.py:56)"), "{words}");
    assert!(!words.contains("ForkProcess._Popen"), "{words}");
}

/// Recorded with `--idle`: the helper threads' waits are in the log and must not drown the
/// trainer. The README's truth: bursts of ~1.1 s starting every ~4.6 s.
#[test]
fn the_two_worker_recording_with_idle_threads_tells_the_dataloader_story() {
    let (_out, gpu) = replay("dataloader-2-workers-idle");
    assert_dataloader_story(&gpu);
    assert_two_worker_step(&gpu);
    assert!(
        num(&gpu["while_idle"]["trainer"]["share"], "share") > 0.95,
        "{}",
        gpu["while_idle"]
    );
    assert_cycle(&gpu, 4.6, 1.1, 0.2);
    assert_eq!(num(&gpu["startup_secs"], "startup_secs"), 0.0);
}

/// `record` with default options (idle threads left out of the profile): the trainer's waits
/// are still read, start-up is left out. The README's truth: bursts of ~1.2 s every ~4.9 s from
/// 14.9 s on; start-up over between 9.7 and 14.9 s.
#[test]
fn the_recorded_two_worker_job_leaves_its_start_up_out() {
    let (_out, gpu) = replay("dataloader-2-workers-record");
    assert_dataloader_story(&gpu);
    assert_two_worker_step(&gpu);
    assert_cycle(&gpu, 4.9, 1.2, 0.2);
    let startup = num(&gpu["startup_secs"], "startup_secs");
    assert!((9.7..=15.0).contains(&startup), "start-up {startup} s");
    assert!(
        gpu["startup_functions"]
            .as_array()
            .is_some_and(|f| !f.is_empty()),
        "{}",
        gpu["startup_functions"]
    );
    let words = text(&gpu["verdict"]["text"]);
    assert!(words.contains("start-up"), "{words}");
}

/// Twelve workers keep the GPU busy: no cycle, no input-pipeline verdict.
#[test]
fn the_twelve_worker_recording_is_not_an_input_pipeline() {
    let (_out, gpu) = replay("dataloader-12-workers-idle");
    let class = text(&gpu["verdict"]["class"]).to_owned();
    assert!(
        class != "input_pipeline" && class != "starved",
        "{}",
        gpu["verdict"]
    );
    assert!(gpu["cycle"].is_null(), "{}", gpu["cycle"]);
    assert_eq!(
        gpu["while_idle"]["feeders"][0]["pids"]
            .as_array()
            .map(Vec::len),
        Some(12)
    );
}

/// A job stuck in one GPU kernel (utilization 99-100%, SM activity ~1%, Python waiting in
/// `evaluate`): stuck, not launch-bound.
#[test]
fn the_kernel_hang_recording_is_stuck_not_launch_bound() {
    let (out, gpu) = replay("gpu-kernel-hang");
    let verdict = &gpu["verdict"];
    assert_eq!(text(&verdict["class"]), "stuck", "{verdict}");
    let words = text(&verdict["text"]);
    assert!(words.contains("evaluate (stuck.py:21)"), "{words}");
    assert!(
        words.contains("stuck in a kernel or a collective"),
        "{words}"
    );
    assert!(!words.contains("launch-bound"), "{words}");
    let stuck = &out.summary()["stuck"];
    assert_eq!(stuck["whole_recording"], true, "{stuck}");
    assert!(num(&stuck["unchanged_secs"], "unchanged") > 7.0, "{stuck}");
}
