//! GPU attribution end to end: the real binary loads the fake NVML library through
//! `--nvml-lib`, so the real nvml-wrapper path runs, and a Python fixture drives the fake GPU's
//! utilization from its own phases.

use crate::common;

use std::time::Duration;

use common::*;

const RUN_TIMEOUT: Duration = Duration::from_secs(60);

/// `record` of a fixture with the fake NVML scripted by `script`.
fn record_with_fake(script: &str, library: &str, out: &OutDir, fixture_args: &[&str]) -> Run {
    let lib = fake_library(library);
    let fixture = fixture_path("train_sim.py");
    let mut cmd = stackscope(&["record", "-o", out.arg(), "--nvml-lib"]);
    cmd.arg(&lib)
        .arg("--")
        .arg("python3")
        .arg(&fixture)
        .args(fixture_args)
        .env("STACKSCOPE_FAKE_NVML", script);
    run_with_timeout(cmd, RUN_TIMEOUT)
}

/// The share of a folded file's samples whose stack passes through `function`.
fn share_through(folded: &Folded, function: &str) -> f64 {
    let through: u64 = folded
        .stacks
        .iter()
        .filter(|s| s.has_function(function))
        .map(|s| s.count)
        .sum();
    through as f64 / folded.total().max(1) as f64
}

#[test]
fn gpu_idle_samples_are_the_data_phase_and_busy_samples_the_compute_phase() {
    let _serial = serial();
    let out = OutDir::new();
    let phase_file = out.tmp.path().join("gpu-state");
    std::fs::write(&phase_file, "0").expect("phase file");
    let script = format!(
        r#"{{"devices":[{{"name":"Fake H100","uuid":"GPU-fake-attr","utilization":{{"file":"{}"}}}}],"sample_period_ms":20}}"#,
        phase_file.display()
    );
    let phase_arg = phase_file.display().to_string();
    let run = record_with_fake(
        &script,
        "fake-nvml",
        &out,
        &[
            "--seconds",
            "6",
            "--step-ms",
            "1000",
            "--gpu-file",
            &phase_arg,
        ],
    );
    run.assert_success();

    let idle = Folded::read(&out.out.join("stacks-gpu-idle.folded"));
    let busy = Folded::read(&out.out.join("stacks-gpu-busy.folded"));
    assert!(
        idle.total() > 100,
        "too few GPU-idle samples\n{}",
        run.describe()
    );
    assert!(
        busy.total() > 70,
        "too few GPU-busy samples\n{}",
        run.describe()
    );
    let loading = share_through(&idle, "load_batch");
    let computing = share_through(&busy, "train_step");
    assert!(
        loading >= 0.85,
        "only {loading:.2} of GPU-idle samples in load_batch\n{}",
        idle.excerpt()
    );
    assert!(
        computing >= 0.85,
        "only {computing:.2} of GPU-busy samples in train_step\n{}",
        busy.excerpt()
    );

    let summary = out.summary();
    let gpu = &summary["gpu"];
    assert_eq!(gpu["devices"][0]["name"], "Fake H100", "{gpu:#}");
    assert_eq!(gpu["devices"][0]["uuid"], "GPU-fake-attr");
    // The loop loads 60% of each step and computes 40%.
    let mean = num(&gpu["mean_utilization"], "mean_utilization");
    assert!((25.0..=55.0).contains(&mean), "mean utilization {mean}");
    // Both phases end in the same innermost function (busy): the verdict names the call path
    // that sets the idle time apart instead.
    let path: Vec<&str> = gpu["idle_path"]["functions"]
        .as_array()
        .map(|a| a.iter().filter_map(|f| f["function"].as_str()).collect())
        .unwrap_or_default();
    assert_eq!(path, vec!["load_batch", "decode_images"], "{gpu:#}");
    let verdict = gpu["verdict"]["text"].as_str().expect("verdict text");
    assert!(verdict.contains("load_batch"), "{verdict}");
    assert!(
        run.stdout.contains("load_batch") && run.stdout.to_lowercase().contains("verdict"),
        "the printed summary ends with the verdict\n{}",
        run.describe()
    );

    // The timeline saw both phases, on the recording's clock (seconds since its start).
    let csv = std::fs::read_to_string(out.out.join("gpu-timeline.csv")).expect("csv");
    let rows: Vec<Vec<&str>> = csv
        .lines()
        .skip(1)
        .map(|l| l.split(',').collect())
        .collect();
    assert!(rows.len() > 100, "{} timeline rows", rows.len());
    assert!(rows.iter().any(|r| r[2] == "0") && rows.iter().any(|r| r[2] == "100"));
    let times: Vec<f64> = rows.iter().map(|r| r[0].parse().expect("time")).collect();
    assert!(times.windows(2).all(|w| w[0] <= w[1]), "times out of order");
    assert!(
        times[0] > -1.0 && *times.last().expect("rows") < 10.0,
        "{times:?}"
    );
    let svg = std::fs::read_to_string(out.out.join("gpu-timeline.svg")).expect("svg");
    assert!(svg.contains("<svg") && svg.contains("polyline") || svg.contains("path"));
    let idle_svg =
        std::fs::read_to_string(out.out.join("flamegraph-gpu-idle.svg")).expect("idle svg");
    assert!(idle_svg.contains("load_batch"));

    top_agrees_with_the_summary(&out, &summary);
}

/// `top` and `summary.json` agree exactly on a recorded run: the recording's sample log,
/// replayed through `top`'s table, gives the summary's GPU-idle samples, samples per thread
/// and own and total samples per function.
fn top_agrees_with_the_summary(out: &OutDir, summary: &serde_json::Value) {
    use stackscope_aggregate::top::{TopModel, ViewOptions};
    let log = out.out.join(stackscope_samplelog::LOG_FILE_NAME);
    let reader = stackscope_samplelog::SampleLogReader::open(&log).expect("sample log");
    let header = reader.header().clone();
    let mut top = TopModel::new(header.idle_below, header.gpu_enabled);
    for event in reader {
        top.handle(event.expect("a whole log"));
    }
    top.flush();
    let options = ViewOptions::default();
    let totals = top.totals(&options);
    let count = |v: &serde_json::Value| v.as_u64().unwrap_or_else(|| panic!("a count: {v}"));
    assert_eq!(totals.all_samples, count(&summary["samples"]));
    assert_eq!(
        totals.gpu_idle_samples,
        count(&summary["gpu"]["samples_gpu_idle"])
    );
    assert!(totals.gpu_idle_samples > 0);
    let mut threads: Vec<(u64, u64)> = top
        .thread_samples(&options)
        .into_iter()
        .filter(|&(_, n)| n > 0)
        .map(|(t, n)| (t.id, n))
        .collect();
    let mut expected: Vec<(u64, u64)> = summary["threads"]
        .as_array()
        .expect("threads")
        .iter()
        .map(|t| (count(&t["python_thread_id"]), count(&t["samples"])))
        .filter(|&(_, n)| n > 0)
        .collect();
    threads.sort_unstable();
    expected.sort_unstable();
    assert_eq!(threads, expected);
    let rows = top.rows(&options);
    for list in ["by_self", "by_total"] {
        for stat in summary["top_functions"][list].as_array().expect(list) {
            let row = rows
                .iter()
                .find(|r| *r.function == stat["function"] && *r.file == stat["file"])
                .unwrap_or_else(|| panic!("no row for {stat}"));
            assert_eq!(
                (row.counts.own, row.counts.total),
                (count(&stat["self_samples"]), count(&stat["total_samples"])),
                "{stat}"
            );
        }
    }
}

#[test]
fn without_an_nvml_library_the_recording_goes_on_and_says_why_once() {
    let out = OutDir::new();
    let fixture = fixture_path("train_sim.py");
    let mut cmd = stackscope(&[
        "record",
        "-o",
        out.arg(),
        "--nvml-lib",
        "/nonexistent/libnvidia-ml.so.1",
        "--",
        "python3",
    ]);
    cmd.arg(&fixture).args(["--seconds", "1"]);
    let run = run_with_timeout(cmd, RUN_TIMEOUT);
    run.assert_success();
    let mentions = run
        .stderr
        .lines()
        .filter(|l| l.contains("GPU data unavailable"))
        .count();
    assert_eq!(mentions, 1, "{}", run.describe());
    assert!(run.stderr.contains("/nonexistent/libnvidia-ml.so.1"));
    let summary = out.summary();
    assert!(summary["gpu"].is_null());
    assert!(summary["gpu_unavailable"]
        .as_str()
        .is_some_and(|s| s.contains("/nonexistent")));
    assert!(out.folded().total() > 0, "stacks are still recorded");
    assert!(!out.out.join("gpu-timeline.csv").exists());
    assert!(!out.out.join("stacks-gpu-idle.folded").exists());
}

#[test]
fn gpu_off_polls_nothing() {
    let out = OutDir::new();
    let fixture = fixture_path("train_sim.py");
    let lib = fake_library("fake-nvml");
    let mut cmd = stackscope(&["record", "-o", out.arg(), "--gpu", "off", "--nvml-lib"]);
    cmd.arg(&lib)
        .arg("--")
        .arg("python3")
        .arg(&fixture)
        .args(["--seconds", "1"]);
    let run = run_with_timeout(cmd, RUN_TIMEOUT);
    run.assert_success();
    assert!(out.summary()["gpu"].is_null());
    assert!(!out.out.join("gpu-timeline.csv").exists());
}

#[test]
fn a_library_missing_optional_calls_falls_back_with_one_notice_each() {
    let out = OutDir::new();
    let script = r#"{"devices":[{"utilization":70}],"sample_period_ms":20}"#;
    let run = record_with_fake(script, "fake-nvml-minimal", &out, &["--seconds", "2"]);
    run.assert_success();
    let summary = out.summary();
    let notices: Vec<&str> = summary["notices"]
        .as_array()
        .expect("notices")
        .iter()
        .filter_map(|n| n.as_str())
        .collect();
    let about = |what: &str| notices.iter().filter(|n| n.contains(what)).count();
    assert_eq!(about("nvmlDeviceGetSamples"), 1, "{notices:#?}");
    assert_eq!(about("nvmlDeviceGetPowerUsage"), 1, "{notices:#?}");
    // Utilization still arrives, from nvmlDeviceGetUtilizationRates.
    let device = &summary["gpu"]["devices"][0];
    assert_eq!(num(&device["mean_utilization"], "mean"), 70.0, "{device:#}");
    assert!(device["mean_power_watts"].is_null());
}

#[test]
fn not_supported_answers_turn_off_that_metric_only() {
    let out = OutDir::new();
    let script = r#"{"devices":[{"utilization":40,"power_w":300}],"unsupported":["power"],"sample_period_ms":20}"#;
    let run = record_with_fake(script, "fake-nvml", &out, &["--seconds", "2"]);
    run.assert_success();
    let summary = out.summary();
    let notices = summary["notices"].to_string();
    assert!(
        notices.contains("power") && notices.contains("NOT_SUPPORTED"),
        "{notices}"
    );
    let device = &summary["gpu"]["devices"][0];
    assert!(device["mean_power_watts"].is_null(), "{device:#}");
    assert_eq!(num(&device["mean_utilization"], "mean"), 40.0);
    let csv = std::fs::read_to_string(out.out.join("gpu-timeline.csv")).expect("csv");
    let header: Vec<&str> = csv.lines().next().expect("header").split(',').collect();
    let power = header
        .iter()
        .position(|h| *h == "power_w")
        .expect("power column");
    let memory = header
        .iter()
        .position(|h| *h == "memory_used_mib")
        .expect("memory");
    let rows: Vec<Vec<&str>> = csv
        .lines()
        .skip(1)
        .map(|l| l.split(',').collect())
        .collect();
    assert!(rows.iter().all(|r| r[power].is_empty()));
    assert!(
        rows.iter().any(|r| !r[memory].is_empty()),
        "memory is still read"
    );
}

#[test]
fn two_devices_are_both_reported() {
    let out = OutDir::new();
    let script = r#"{"devices":[{"name":"Alpha","utilization":10},{"name":"Beta","utilization":90}],"sample_period_ms":20}"#;
    let run = record_with_fake(script, "fake-nvml", &out, &["--seconds", "2"]);
    run.assert_success();
    let summary = out.summary();
    let devices = summary["gpu"]["devices"].as_array().expect("devices");
    let names: Vec<&str> = devices.iter().filter_map(|d| d["name"].as_str()).collect();
    assert_eq!(names, ["Alpha", "Beta"]);
    assert_eq!(num(&devices[0]["mean_utilization"], "alpha"), 10.0);
    assert_eq!(num(&devices[1]["mean_utilization"], "beta"), 90.0);
    // Stacks are tagged by the mean of the devices: 50%, busy.
    let mean = num(&summary["gpu"]["mean_utilization"], "mean");
    assert!((mean - 50.0).abs() < 1.0, "{mean}");
    let csv = std::fs::read_to_string(out.out.join("gpu-timeline.csv")).expect("csv");
    let devices_in_csv: std::collections::BTreeSet<&str> = csv
        .lines()
        .skip(1)
        .filter_map(|l| l.split(',').nth(1))
        .collect();
    assert_eq!(devices_in_csv.into_iter().collect::<Vec<_>>(), ["0", "1"]);
}

/// The column `name` of a timeline CSV, as text cells.
fn csv_column(csv: &str, name: &str) -> Vec<String> {
    let header: Vec<&str> = csv.lines().next().expect("header").split(',').collect();
    let at = header
        .iter()
        .position(|h| *h == name)
        .unwrap_or_else(|| panic!("no column {name} in {header:?}"));
    csv.lines()
        .skip(1)
        .map(|l| l.split(',').nth(at).unwrap_or_default().to_owned())
        .collect()
}

#[test]
fn gpm_sm_activity_low_while_busy_names_the_code_and_fills_the_columns() {
    let _serial = serial();
    let out = OutDir::new();
    let phase_file = out.tmp.path().join("gpu-state");
    std::fs::write(&phase_file, "0").expect("phase file");
    // Utilization says 100% throughout; GPM says the SMs idle while the fixture loads data
    // (its phase file reads 0) and are all busy while it computes (100).
    let script = format!(
        r#"{{"devices":[{{"name":"Fake H100","utilization":100,
            "gpm":{{"sm_active":{{"file":"{}"}},"sm_occupancy":35,"tensor_active":12,
                    "dram_bw":{{"file":"{}"}}}}}}],"sample_period_ms":20}}"#,
        phase_file.display(),
        phase_file.display()
    );
    let phase_arg = phase_file.display().to_string();
    let run = record_with_fake(
        &script,
        "fake-nvml",
        &out,
        &[
            "--seconds",
            "6",
            "--step-ms",
            "2000",
            "--gpu-file",
            &phase_arg,
        ],
    );
    run.assert_success();

    let summary = out.summary();
    let gpu = &summary["gpu"];
    let device = &gpu["devices"][0];
    let sm = num(&device["mean_sm_active_pct"], "mean_sm_active_pct");
    // The fixture loads 60% of each step: SM activity about 40%, below half of utilization.
    assert!((15.0..50.0).contains(&sm), "mean SM activity {sm}");
    let occupancy = num(&device["mean_sm_occupancy_pct"], "occupancy");
    assert!((occupancy - 35.0).abs() < 1e-6, "{occupancy}");
    let tensor = num(&device["mean_tensor_active_pct"], "tensor");
    assert!((tensor - 12.0).abs() < 1e-6, "{tensor}");
    assert!(device["mean_dram_bw_pct"].is_number(), "{device:#}");
    assert_eq!(num(&gpu["mean_utilization"], "mean"), 100.0);
    // Busy by utilization, yet not GPU-bound: the code behind the idle SMs is named.
    assert_eq!(gpu["verdict"]["class"], "low_sm_activity", "{gpu:#}");
    let verdict = gpu["verdict"]["text"].as_str().expect("verdict text");
    assert!(verdict.contains("load_batch"), "{verdict}");
    // Both phases end in the same innermost function (busy): the verdict names the call path
    // that sets the low-SM samples apart instead.
    let path: Vec<&str> = gpu["low_sm_path"]["functions"]
        .as_array()
        .map(|a| a.iter().filter_map(|f| f["function"].as_str()).collect())
        .unwrap_or_default();
    assert_eq!(path, vec!["load_batch", "decode_images"], "{gpu:#}");
    assert!(num(&gpu["samples_gpu_low_sm"], "low SM samples") > 50.0);

    // The timeline's new columns: one GPM reading per poll, both phases seen.
    let csv = std::fs::read_to_string(out.out.join("gpu-timeline.csv")).expect("csv");
    let sm_cells = csv_column(&csv, "sm_active_pct");
    let readings: Vec<&String> = sm_cells.iter().filter(|c| !c.is_empty()).collect();
    assert!(
        readings.len() >= 8,
        "{} SM activity readings",
        readings.len()
    );
    // Each reading is the mean over its poll interval: low in the loading phases, high in the
    // computing ones.
    let values: Vec<f64> = readings
        .iter()
        .map(|c| c.parse().expect("a number"))
        .collect();
    assert!(
        values.iter().any(|&v| v <= 10.0) && values.iter().any(|&v| v >= 60.0),
        "{values:?}"
    );
    assert!(
        sm_cells.iter().any(String::is_empty),
        "rows between polls leave it empty"
    );
    for (column, value) in [("sm_occupancy_pct", "35"), ("tensor_active_pct", "12")] {
        let cells = csv_column(&csv, column);
        assert!(cells.iter().filter(|c| !c.is_empty()).all(|c| c == value));
        assert_eq!(
            cells.iter().filter(|c| !c.is_empty()).count(),
            readings.len()
        );
    }
    assert_eq!(
        csv_column(&csv, "dram_bw_pct")
            .iter()
            .filter(|c| !c.is_empty())
            .count(),
        readings.len()
    );
    let svg = std::fs::read_to_string(out.out.join("gpu-timeline.svg")).expect("svg");
    assert!(svg.contains("GPU 0 SM activity %"));

    // `report` re-reads samples.log: the readings survive it.
    let again = out.tmp.path().join("again");
    let again_arg = again.display().to_string();
    let report = run_with_timeout(
        stackscope(&["report", out.arg(), "-o", &again_arg]),
        RUN_TIMEOUT,
    );
    report.assert_success();
    let csv = std::fs::read_to_string(again.join("gpu-timeline.csv")).expect("re-reported csv");
    assert_eq!(
        csv_column(&csv, "sm_active_pct")
            .iter()
            .filter(|c| !c.is_empty())
            .count(),
        readings.len()
    );
}
