//! Each process's GPU memory, through the fake NVML (`--nvml-lib`): a job of two flat processes
//! (`fixtures/memory_growth_job.py --workers 1 --grower -1`), the worker listed on a device
//! whose used memory climbs (`memory_used_mib_per_s`), the parent on another whose memory
//! stays: the worker gets a `gpu_growth` finding, the parent none. And `--memory-rate 0`: no
//! memory in the summary, no memory outputs.

use crate::common;
use crate::memory::{findings, memory_of, names_pid, pid_of, process_entry, timeline};

use std::time::Duration;

use common::*;

const RUN_TIMEOUT: Duration = Duration::from_secs(60);
const MIB: f64 = 1024.0 * 1024.0;

/// A flat job of a parent and one worker, left running.
fn flat_job() -> (Fixture, u32, u32) {
    let fixture = Fixture::start(
        "memory_growth_job.py",
        &["--workers", "1", "--grower", "-1"],
    );
    let ready = fixture.ready_json();
    let worker = ready["workers"]
        .get(0)
        .map(|w| pid_of(w, "worker"))
        .unwrap_or_else(|| panic!("no worker in {ready}"));
    (fixture, pid_of(&ready["pid"], "pid"), worker)
}

#[test]
fn a_process_whose_gpu_memory_climbs_is_named() {
    let _serial = serial();
    let (_fixture, parent, worker) = flat_job();
    let script = format!(
        r#"{{"devices":[{{"name":"Climbing","memory_used_mib":1000,"memory_used_mib_per_s":200,"processes":[{worker}]}},{{"name":"Flat","memory_used_mib":2000,"processes":[{parent}]}}],"sample_period_ms":50}}"#
    );
    let out = OutDir::new();
    let pid = parent.to_string();
    let mut cmd = stackscope(&["attach", "--pid", &pid, "--duration", "6", "-o", out.arg()]);
    cmd.arg("--nvml-lib")
        .arg(fake_nvml())
        .env("STACKSCOPE_FAKE_NVML", &script);
    let run = run_with_timeout(cmd, RUN_TIMEOUT);
    run.assert_success();
    let summary = out.summary();
    let memory = memory_of(&summary);
    let context = format!("{memory:#}\n{}", run.describe());
    let climbing = findings(memory, "gpu_growth");
    assert!(
        climbing.len() == 1 && climbing[0]["pid"] == worker,
        "one gpu_growth finding, the worker's ({worker}): {context}"
    );
    // About 200 MiB a second (the fake's clock starts at its init, before the first reading).
    let rate = num(&climbing[0]["growth_bytes_per_s"], "growth_bytes_per_s");
    assert!(
        (rate - 200.0 * MIB).abs() <= 0.2 * 200.0 * MIB,
        "{rate} B/s: {context}"
    );
    let verdict = memory["verdict"].as_array().expect("verdict");
    assert!(
        !verdict.iter().any(|f| names_pid(f, parent)),
        "the parent's GPU memory stayed at 2000 MiB: {context}"
    );
    let peak = |pid| {
        num(
            &process_entry(memory, pid)["gpu_memory_peak"],
            "gpu_memory_peak",
        )
    };
    assert_eq!(peak(parent), 2000.0 * MIB, "{context}");
    assert!(peak(worker) >= 1800.0 * MIB, "{context}");
    // The timeline's gpu_memory column climbs for the worker.
    let (_, rows) = timeline(&out.out);
    let gpu: Vec<f64> = rows
        .get(&worker)
        .map(|r| r.iter().filter_map(|c| c[7].parse().ok()).collect())
        .unwrap_or_default();
    assert!(
        gpu.len() >= 10 && gpu.last() > gpu.first(),
        "the worker's gpu_memory in the timeline: {gpu:?}"
    );
}

#[test]
fn memory_rate_0_writes_no_memory() {
    let (_fixture, parent, _) = flat_job();
    let out = OutDir::new();
    let pid = parent.to_string();
    let run = run_stackscope(
        &[
            "attach",
            "--pid",
            &pid,
            "--duration",
            "2",
            "--gpu",
            "off",
            "--memory-rate",
            "0",
            "-o",
            out.arg(),
        ],
        RUN_TIMEOUT,
    );
    run.assert_success();
    let summary = out.summary();
    assert!(
        summary.get("memory").is_none_or(|m| m.is_null()),
        "{summary:#}"
    );
    for file in ["memory-timeline.csv", "stacks-memory-growth.folded"] {
        assert!(!out.out.join(file).exists(), "{file} with --memory-rate 0");
    }
    assert!(summary_samples(&summary) > 0, "{summary:#}");
}
