//! Exports other tools read: `stackscope export DIR --format pprof|speedscope|perfetto` and
//! `record --format`, checked against the recording's own folded stacks, against Go's pprof,
//! speedscope's published schema, and, for the Perfetto trace, slice nesting and the GPU
//! counter under the training loop's phases (fake NVML driven by the fixture).
//!
//! The speedscope schema is vendored from the npm package `speedscope` 1.25.0
//! (`dist/release/file-format-schema.json`) at `tests/data/speedscope-file-format-schema.json`.

use crate::common;

use std::collections::BTreeMap;
use std::io::Read;
use std::path::Path;
use std::process::Command;
use std::time::Duration;

use common::*;
use prost::Message;
use serde_json::Value;
use stackscope_report::pprof_proto::Profile;

const RUN_TIMEOUT: Duration = Duration::from_secs(90);
const RATE_HZ: f64 = 100.0;

// ------------------------------------------------------------------ pprof

fn read_pprof(path: &Path) -> Profile {
    let bytes = std::fs::read(path).unwrap_or_else(|e| panic!("{}: {e}", path.display()));
    let mut raw = Vec::new();
    flate2::read::GzDecoder::new(bytes.as_slice())
        .read_to_end(&mut raw)
        .expect("profile.pb.gz is gzip");
    Profile::decode(raw.as_slice()).expect("profile.pb.gz holds a perftools.profiles.Profile")
}

fn string(profile: &Profile, index: i64) -> &str {
    &profile.string_table[index as usize]
}

/// The label `key` of a sample.
fn label<'a>(
    profile: &'a Profile,
    sample: &stackscope_report::pprof_proto::Sample,
    key: &str,
) -> &'a str {
    sample
        .label
        .iter()
        .find(|l| string(profile, l.key) == key)
        .map(|l| string(profile, l.str))
        .unwrap_or_else(|| panic!("a sample without the label {key}"))
}

/// The profile as folded lines (`thread;outer;...;inner` -> count), optionally only the
/// samples with `gpu_state` equal to `gpu`: what stacks.folded holds.
fn pprof_folded(profile: &Profile, gpu: Option<&str>) -> BTreeMap<String, u64> {
    let functions: BTreeMap<u64, _> = profile.function.iter().map(|f| (f.id, f)).collect();
    let locations: BTreeMap<u64, String> = profile
        .location
        .iter()
        .map(|l| {
            let line = &l.line[0];
            let f = functions[&line.function_id];
            let (name, file) = (string(profile, f.name), string(profile, f.filename));
            let text = if line.line > 0 {
                format!("{name} ({file}:{})", line.line)
            } else {
                format!("{name} ({file})")
            };
            (l.id, text)
        })
        .collect();
    let mut out = BTreeMap::new();
    for sample in &profile.sample {
        if gpu.is_some_and(|g| label(profile, sample, "gpu_state") != g) {
            continue;
        }
        let mut parts = vec![label(profile, sample, "thread").to_owned()];
        parts.extend(
            sample
                .location_id
                .iter()
                .rev()
                .map(|id| locations[id].clone()),
        );
        *out.entry(parts.join(";")).or_default() += sample.value[0] as u64;
    }
    out
}

/// The folded stacks without their process roots: pprof carries the process as its `pid`
/// label, not as a frame.
fn folded_map(folded: &Folded) -> BTreeMap<String, u64> {
    let mut out = BTreeMap::new();
    for s in &folded.stacks {
        let stack = s.raw.rsplit_once(' ').expect("count").0;
        let stack = match &s.process {
            Some(root) => stack
                .strip_prefix(root.as_str())
                .and_then(|r| r.strip_prefix(';')),
            None => Some(stack),
        };
        let stack = stack.expect("a stack below its process root").to_owned();
        *out.entry(stack).or_default() += s.count;
    }
    out
}

fn check_pprof_against_folded(profile: &Profile, dir: &Path) {
    let folded = Folded::read(&dir.join("stacks.folded"));
    assert_eq!(
        pprof_folded(profile, None),
        folded_map(&folded),
        "the pprof samples are not those of stacks.folded"
    );
    let types: Vec<(&str, &str)> = profile
        .sample_type
        .iter()
        .map(|t| (string(profile, t.r#type), string(profile, t.unit)))
        .collect();
    assert_eq!(types, [("samples", "count"), ("cpu", "nanoseconds")]);
    let period = (1e9 / RATE_HZ) as i64;
    assert_eq!(profile.period, period);
    for sample in &profile.sample {
        assert_eq!(
            sample.value[1],
            sample.value[0] * period,
            "cpu = count x period"
        );
        for key in ["thread_id", "pid"] {
            assert!(!label(profile, sample, key).is_empty(), "empty {key} label");
        }
    }
    assert!(
        profile.time_nanos > 1_600_000_000_000_000_000,
        "time_nanos {}",
        profile.time_nanos
    );
    assert!(profile.duration_nanos > 0);
}

/// Samples of stacks with at least one frame: Go's pprof leaves out samples without a
/// location (a thread sampled with no Python frame, at its very start or end).
fn total_with_frames(folded: &Folded) -> u64 {
    folded
        .stacks
        .iter()
        .filter(|s| !s.frames.is_empty())
        .map(|s| s.count)
        .sum()
}

/// `go tool pprof -raw` and `-tags` read the file: totals, files and lines, labels.
fn check_with_go_pprof(path: &Path, folded_total: u64, expect_tags: &[&str]) {
    if Command::new("go").arg("version").output().is_err() {
        eprintln!("skipping the go tool pprof checks: no `go` (Debian: apt-get install golang-go)");
        return;
    }
    let go = |flag: &str| {
        let out = Command::new("go")
            .args(["tool", "pprof", flag])
            .arg(path)
            .env("HOME", std::env::temp_dir())
            .output()
            .expect("go runs");
        assert!(
            out.status.success(),
            "go tool pprof {flag} failed: {}",
            String::from_utf8_lossy(&out.stderr)
        );
        String::from_utf8_lossy(&out.stdout).into_owned()
    };
    let raw = go("-raw");
    let samples = raw
        .split("Samples:")
        .nth(1)
        .and_then(|s| s.split("Locations").next())
        .expect("-raw prints Samples and Locations");
    let total: u64 = samples
        .lines()
        .filter_map(|l| l.split_whitespace().next()?.parse::<u64>().ok())
        .sum();
    assert_eq!(
        total, folded_total,
        "go tool pprof -raw sample total\n{raw}"
    );
    let locations = raw.split("Locations").nth(1).unwrap_or_default();
    assert!(
        locations
            .lines()
            .any(|l| l.contains(" train_sim.py:") || l.contains(" named_threads.py:")),
        "no file:line in -raw's locations\n{locations}"
    );
    let tags = go("-tags");
    for needle in expect_tags {
        assert!(tags.contains(needle), "-tags lacks {needle}\n{tags}");
    }
}

// ------------------------------------------------------------------ speedscope

fn read_json(path: &Path) -> Value {
    let text = std::fs::read_to_string(path).unwrap_or_else(|e| panic!("{}: {e}", path.display()));
    serde_json::from_str(&text).unwrap_or_else(|e| panic!("{} is not JSON: {e}", path.display()))
}

fn check_speedscope_schema(file: &Value) {
    let schema = read_json(&repo_root().join("tests/data/speedscope-file-format-schema.json"));
    let validator = jsonschema::validator_for(&schema).expect("the schema compiles");
    let errors: Vec<String> = validator
        .iter_errors(file)
        .take(5)
        .map(|e| format!("{e} at {}", e.instance_path()))
        .collect();
    assert!(errors.is_empty(), "not valid speedscope: {errors:#?}");
}

/// Per profile name, its samples as folded lines (`thread;frames`, counts from the weights).
fn speedscope_folded(file: &Value, thread_of: impl Fn(&str) -> String) -> BTreeMap<String, u64> {
    let frames: Vec<String> = file["shared"]["frames"]
        .as_array()
        .expect("frames")
        .iter()
        .map(|f| match f["line"].as_u64() {
            Some(line) => format!("{} ({}:{line})", str_of(&f["name"]), str_of(&f["file"])),
            None => format!("{} ({})", str_of(&f["name"]), str_of(&f["file"])),
        })
        .collect();
    let mut out = BTreeMap::new();
    for profile in file["profiles"].as_array().expect("profiles") {
        assert_eq!(profile["type"], "sampled");
        assert_eq!(profile["unit"], "seconds");
        let thread = thread_of(str_of(&profile["name"]));
        let samples = profile["samples"].as_array().expect("samples");
        let weights = profile["weights"].as_array().expect("weights");
        assert_eq!(samples.len(), weights.len());
        let mut total = 0.0;
        for (stack, weight) in samples.iter().zip(weights) {
            let weight = weight.as_f64().expect("weight");
            total += weight;
            let mut parts = vec![thread.clone()];
            parts.extend(
                stack
                    .as_array()
                    .expect("stack")
                    .iter()
                    .map(|i| frames[i.as_u64().expect("index") as usize].clone()),
            );
            *out.entry(parts.join(";")).or_default() += (weight * RATE_HZ).round() as u64;
        }
        let end = profile["endValue"].as_f64().expect("endValue");
        assert!(
            (end - total).abs() < 1e-6,
            "endValue {end}, weights {total}"
        );
    }
    out
}

fn str_of(v: &Value) -> &str {
    v.as_str().unwrap_or_default()
}

/// `Thread 1234 "worker-1"` -> `worker-1`.
fn py_spy_thread_name(profile_name: &str) -> String {
    profile_name
        .split_once('"')
        .map(|(_, rest)| rest.trim_end_matches('"').to_owned())
        .unwrap_or_default()
}

// ------------------------------------------------------------------ perfetto

#[derive(Debug, Clone)]
struct Slice {
    name: String,
    ts: f64,
    end: f64,
    samples: u64,
    depth: usize,
}

/// Every thread's slices, checked to nest: a slice starts inside its parent and ends within
/// it. Gives the slices by thread id, with their depth.
fn perfetto_slices(trace: &Value) -> BTreeMap<u64, Vec<Slice>> {
    let mut by_thread: BTreeMap<u64, Vec<Slice>> = BTreeMap::new();
    for e in trace["traceEvents"].as_array().expect("traceEvents") {
        // The GIL's slices are on tracks of their own (`gil_slices`).
        if e["ph"] != "X" || e["cat"] == "gil" {
            continue;
        }
        let ts = e["ts"].as_f64().expect("ts");
        by_thread
            .entry(e["tid"].as_u64().expect("tid"))
            .or_default()
            .push(Slice {
                name: str_of(&e["name"]).to_owned(),
                ts,
                end: ts + e["dur"].as_f64().expect("dur"),
                samples: e["args"]["samples"].as_u64().expect("args.samples"),
                depth: 0,
            });
    }
    const EPS: f64 = 1e-3;
    for (tid, slices) in by_thread.iter_mut() {
        slices.sort_by(|a, b| a.ts.total_cmp(&b.ts).then(b.end.total_cmp(&a.end)));
        let mut open: Vec<f64> = Vec::new();
        for s in slices.iter_mut() {
            while open
                .last()
                .is_some_and(|&end| end <= s.ts + EPS && end < s.end - EPS)
            {
                open.pop();
            }
            if let Some(&parent_end) = open.last() {
                assert!(
                    s.end <= parent_end + EPS,
                    "thread {tid}: slice {} [{}, {}] overlaps its parent's end {parent_end}",
                    s.name,
                    s.ts,
                    s.end
                );
            }
            s.depth = open.len();
            open.push(s.end);
        }
    }
    by_thread
}

/// One GIL slice: `GIL held` or `GIL wait`, and in a wait the thread that held the GIL.
#[derive(Debug, Clone)]
struct GilSlice {
    name: String,
    ts: f64,
    end: f64,
    samples: u64,
    holder: Option<String>,
}

/// The GIL slices by the name of their track (`<thread name> GIL`), checked to lie on tracks
/// apart from every stack slice's and never to overlap on one track.
fn gil_slices(trace: &Value) -> BTreeMap<String, Vec<GilSlice>> {
    let events = trace["traceEvents"].as_array().expect("traceEvents");
    let track_names: BTreeMap<u64, &str> = events
        .iter()
        .filter(|e| e["name"] == "thread_name")
        .map(|e| (e["tid"].as_u64().expect("tid"), str_of(&e["args"]["name"])))
        .collect();
    let stack_tids: std::collections::BTreeSet<u64> = perfetto_slices(trace).into_keys().collect();
    let mut by_tid: BTreeMap<u64, Vec<GilSlice>> = BTreeMap::new();
    for e in events
        .iter()
        .filter(|e| e["ph"] == "X" && e["cat"] == "gil")
    {
        let tid = e["tid"].as_u64().expect("tid");
        assert!(
            !stack_tids.contains(&tid),
            "GIL slices on a stack track: {e}"
        );
        let ts = e["ts"].as_f64().expect("ts");
        by_tid.entry(tid).or_default().push(GilSlice {
            name: str_of(&e["name"]).to_owned(),
            ts,
            end: ts + e["dur"].as_f64().expect("dur"),
            samples: e["args"]["samples"].as_u64().expect("args.samples"),
            holder: e["args"]["holder"].as_str().map(str::to_owned),
        });
    }
    by_tid
        .into_iter()
        .map(|(tid, mut slices)| {
            slices.sort_by(|a, b| a.ts.total_cmp(&b.ts));
            for pair in slices.windows(2) {
                assert!(
                    pair[0].end <= pair[1].ts + 1e-3,
                    "GIL slices overlap on track {tid}: {pair:?}"
                );
            }
            let name = track_names.get(&tid).copied().unwrap_or_default();
            (name.to_owned(), slices)
        })
        .collect()
}

// ------------------------------------------------------------------ the tests

/// The training loop under the fake GPU, recorded with `--format` for all three exports.
#[test]
fn training_loop_exports_match_the_recording_and_put_the_gpu_under_the_code() {
    let _serial = serial();
    let out = OutDir::new();
    let phase_file = out.tmp.path().join("gpu-state");
    std::fs::write(&phase_file, "0").expect("phase file");
    let script = format!(
        r#"{{"devices":[{{"name":"Fake H100","utilization":{{"file":"{}"}}}}],"sample_period_ms":20}}"#,
        phase_file.display()
    );
    let mut cmd = stackscope(&[
        "record",
        "-o",
        out.arg(),
        "--format",
        "pprof,speedscope,perfetto",
        "--flush-interval",
        "2",
        "--nvml-lib",
    ]);
    cmd.arg(fake_nvml())
        .arg("--")
        .arg("python3")
        .arg(fixture_path("train_sim.py"))
        .args(["--seconds", "6", "--step-ms", "1000", "--gpu-file"])
        .arg(&phase_file)
        .env("STACKSCOPE_FAKE_NVML", &script);
    let mut running = spawn_stackscope(cmd);
    // `--format` writes the exports at every checkpoint too, not only at the end.
    let mut seen_while_running = false;
    let deadline = std::time::Instant::now() + RUN_TIMEOUT;
    while std::time::Instant::now() < deadline {
        if matches!(running.child.try_wait(), Ok(Some(_))) {
            break;
        }
        if out.out.join("trace.json").is_file() && out.out.join("profile.pb.gz").is_file() {
            seen_while_running = matches!(running.child.try_wait(), Ok(None));
            break;
        }
        std::thread::sleep(Duration::from_millis(50));
    }
    let run = running.finish(RUN_TIMEOUT);
    run.assert_success();
    assert!(
        seen_while_running,
        "no checkpoint export while recording\n{}",
        run.describe()
    );
    let dir = &out.out;
    let folded = out.folded();
    assert!(folded.total() > 150, "too few samples\n{}", run.describe());

    // pprof: exactly the folded stacks, the GPU split as the flamegraphs split it.
    let profile = read_pprof(&dir.join("profile.pb.gz"));
    check_pprof_against_folded(&profile, dir);
    for (state, file) in [
        ("idle", "stacks-gpu-idle.folded"),
        ("busy", "stacks-gpu-busy.folded"),
    ] {
        let expected = folded_map(&Folded::read(&dir.join(file)));
        assert!(!expected.is_empty(), "no GPU-{state} samples");
        assert_eq!(
            pprof_folded(&profile, Some(state)),
            expected,
            "gpu_state={state}"
        );
    }
    check_with_go_pprof(
        &dir.join("profile.pb.gz"),
        total_with_frames(&folded),
        &[
            "gpu_state",
            "idle",
            "busy",
            "thread",
            "MainThread",
            "thread_id",
            "pid",
        ],
    );

    // speedscope: valid, and the samples of stacks.folded.
    let speedscope = read_json(&dir.join("profile.speedscope.json"));
    check_speedscope_schema(&speedscope);
    assert_eq!(
        speedscope_folded(&speedscope, py_spy_thread_name),
        folded_map(&folded)
    );

    // Perfetto: slices nest and add up; the counter is the CSV's; low under load_batch.
    let trace = read_json(&dir.join("trace.json"));
    let slices = perfetto_slices(&trace);
    assert_eq!(slices.len(), 1, "one thread");
    let main = slices.values().next().expect("a thread");
    let outermost: u64 = main
        .iter()
        .filter(|s| s.depth == 0)
        .map(|s| s.samples)
        .sum();
    assert_eq!(
        outermost,
        total_with_frames(&folded),
        "outermost slices' samples"
    );
    check_gpu_counter_matches_csv(&trace, dir);
    check_counter_under_phases(&trace, main);
}

fn check_gpu_counter_matches_csv(trace: &Value, dir: &Path) {
    let csv = std::fs::read_to_string(dir.join("gpu-timeline.csv")).expect("gpu-timeline.csv");
    // A poll that found no new sample in the driver's ring has no utilization: an empty cell in
    // the CSV, a counter without the value in the trace.
    let rows: Vec<(f64, Option<f64>)> = csv
        .lines()
        .skip(1)
        .map(|l| {
            let cells: Vec<&str> = l.split(',').collect();
            let utilization =
                (!cells[2].is_empty()).then(|| cells[2].parse().expect("utilization"));
            (cells[0].parse().expect("time"), utilization)
        })
        .collect();
    assert!(
        rows.iter().filter(|r| r.1.is_some()).count() * 2 > rows.len(),
        "most readings have a utilization"
    );
    let counters: Vec<(f64, Option<f64>)> = gpu_counters(trace)
        .map(|e| {
            assert_eq!(e["name"], "GPU 0 (Fake H100)");
            (
                e["ts"].as_f64().expect("ts"),
                e["args"]["utilization"].as_f64(),
            )
        })
        .collect();
    assert_eq!(counters.len(), rows.len(), "one counter value per CSV row");
    for (i, (&(ts, value), &(_, csv_value))) in counters.iter().zip(&rows).enumerate() {
        assert_eq!(value, csv_value, "counter {i}");
        // Each value is placed where the interval it describes begins: the previous reading.
        let expected = rows[i.saturating_sub(1)].0 * 1e6;
        assert!(
            (ts - expected).abs() < 2.0,
            "counter {i} at {ts} us, expected {expected}"
        );
    }
}

/// The GPU's counter events; the memory counters (`memory rss`...) are tracks of their own.
fn gpu_counters(trace: &Value) -> impl Iterator<Item = &Value> {
    trace["traceEvents"]
        .as_array()
        .expect("events")
        .iter()
        .filter(|e| e["ph"] == "C" && e["name"].as_str().is_some_and(|n| n.starts_with("GPU ")))
}

/// The utilization in effect over each load_batch / train_step slice, sampled at the
/// counter's steps: low under the data phase, high under compute.
fn check_counter_under_phases(trace: &Value, slices: &[Slice]) {
    let mut steps: Vec<(f64, f64)> = gpu_counters(trace)
        .filter_map(|e| {
            Some((
                e["ts"].as_f64().expect("ts"),
                e["args"]["utilization"].as_f64()?,
            ))
        })
        .collect();
    steps.sort_by(|a, b| a.0.total_cmp(&b.0));
    let value_at = |t: f64| {
        steps
            .iter()
            .take_while(|(ts, _)| *ts <= t)
            .last()
            .map(|&(_, u)| u)
    };
    for (phase, low) in [("load_batch", true), ("train_step", false)] {
        let mut matching = 0;
        let mut all = 0;
        for s in slices
            .iter()
            .filter(|s| s.name == phase && s.end - s.ts > 300_000.0)
        {
            // The middle of the slice: the edges are where the phases switch.
            for k in 1..10 {
                let t = s.ts + (s.end - s.ts) * k as f64 / 10.0;
                if let Some(u) = value_at(t) {
                    all += 1;
                    if (u < 30.0) == low {
                        matching += 1;
                    }
                }
            }
        }
        assert!(
            all >= 9,
            "too few {phase} slices with GPU data ({all} points)"
        );
        assert!(
            matching as f64 >= 0.9 * all as f64,
            "{phase}: GPU {} at only {matching} of {all} points",
            if low { "low" } else { "high" }
        );
    }
}

/// `stackscope export` of a multi-threaded recording (idle threads kept), whole and windows.
#[test]
fn export_command_writes_each_format_for_the_whole_recording_and_for_windows() {
    let _serial = serial();
    let fixture = Fixture::start("named_threads.py", &[]);
    let ready = fixture.ready_json();
    let pid = ready["pid"].as_u64().expect("pid").to_string();
    let out = OutDir::new();
    run_stackscope(
        &[
            "attach",
            "--pid",
            &pid,
            "-o",
            out.arg(),
            "--duration",
            "3",
            "--idle",
            "--gpu",
            "off",
        ],
        RUN_TIMEOUT,
    )
    .assert_success();
    drop(fixture);
    let dir = out.out.to_str().expect("utf-8").to_owned();
    let folded = out.folded();
    assert!(folded.threads().len() >= 3, "{:?}", folded.threads());

    // Whole recording, default file names in DIR.
    for format in ["pprof", "speedscope", "perfetto"] {
        let run = run_stackscope(&["export", &dir, "--format", format], RUN_TIMEOUT);
        run.assert_success();
    }
    let profile = read_pprof(&out.out.join("profile.pb.gz"));
    check_pprof_against_folded(&profile, &out.out);
    for sample in &profile.sample {
        assert_eq!(
            label(&profile, sample, "gpu_state"),
            "unknown",
            "no GPU: unknown"
        );
        assert_eq!(label(&profile, sample, "pid"), pid);
    }
    check_with_go_pprof(
        &out.out.join("profile.pb.gz"),
        total_with_frames(&folded),
        &["worker-1", "loader-0", "MainThread"],
    );

    let speedscope = read_json(&out.out.join("profile.speedscope.json"));
    check_speedscope_schema(&speedscope);
    let names: Vec<&str> = speedscope["profiles"]
        .as_array()
        .expect("profiles")
        .iter()
        .map(|p| str_of(&p["name"]))
        .collect();
    for thread in ["worker-1", "loader-0"] {
        let tid = ready["threads"][thread]["native_id"]
            .as_u64()
            .expect("native_id");
        // Under its process, as the recording follows the job's process tree.
        let name = format!("Thread {tid} \"{thread}\"");
        assert!(
            names.iter().any(|n| n.ends_with(&format!(" {name}"))),
            "no profile {name} in {names:?}"
        );
    }
    assert_eq!(
        speedscope_folded(&speedscope, py_spy_thread_name),
        folded_map(&folded)
    );

    let trace = read_json(&out.out.join("trace.json"));
    let slices = perfetto_slices(&trace);
    for (thread, total) in folded.threads() {
        let tid = ready["threads"][&thread]["native_id"].as_u64();
        let Some(tid) = tid else { continue };
        let outermost: u64 = slices.get(&tid).map_or(0, |s| {
            s.iter().filter(|s| s.depth == 0).map(|s| s.samples).sum()
        });
        let with_frames: u64 = folded
            .of_thread(&thread)
            .filter(|s| !s.frames.is_empty())
            .map(|s| s.count)
            .sum();
        assert!(
            with_frames + 2 >= total,
            "{thread}: {with_frames} of {total}"
        );
        assert_eq!(
            outermost, with_frames,
            "thread {thread}: outermost slices' samples"
        );
    }
    let thread_names: Vec<&str> = trace["traceEvents"]
        .as_array()
        .expect("events")
        .iter()
        .filter(|e| e["name"] == "thread_name")
        .map(|e| str_of(&e["args"]["name"]))
        .collect();
    assert!(thread_names.contains(&"worker-1"), "{thread_names:?}");

    // A window: exactly the samples of `report` over the same window.
    let tmp = out.tmp.path();
    let report_dir = tmp.join("window-report");
    run_stackscope(
        &[
            "report",
            &dir,
            "--from",
            "1",
            "--to",
            "2.5",
            "-o",
            report_dir.to_str().expect("utf-8"),
        ],
        RUN_TIMEOUT,
    )
    .assert_success();
    let window = Folded::read(&report_dir.join("stacks.folded"));
    assert!(
        window.total() > 0 && window.total() < folded.total(),
        "window {} of {}",
        window.total(),
        folded.total()
    );
    let mut files = Vec::new();
    for (format, name) in [
        ("pprof", "w.pb.gz"),
        ("speedscope", "w.speedscope.json"),
        ("perfetto", "w.json"),
    ] {
        let file = tmp.join(name);
        files.push(file.clone());
        let run = run_stackscope(
            &[
                "export",
                &dir,
                "--format",
                format,
                "--from",
                "1",
                "--to",
                "2.5",
                "-o",
                file.to_str().expect("utf-8"),
            ],
            RUN_TIMEOUT,
        );
        run.assert_success();
    }
    let window_profile = read_pprof(&files[0]);
    assert_eq!(pprof_folded(&window_profile, None), folded_map(&window));
    assert!((window_profile.duration_nanos - 1_500_000_000).abs() < 1_000);
    assert_eq!(
        speedscope_folded(&read_json(&files[1]), py_spy_thread_name),
        folded_map(&window)
    );
    let window_slices = perfetto_slices(&read_json(&files[2]));
    let outermost: u64 = window_slices
        .values()
        .flatten()
        .filter(|s| s.depth == 0)
        .map(|s| s.samples)
        .sum();
    assert_eq!(outermost, total_with_frames(&window));
    for s in window_slices.values().flatten() {
        assert!(
            s.ts >= 1e6 - 1.0 && s.ts < 2.5e6,
            "slice {} at {} us, outside the window",
            s.name,
            s.ts
        );
    }
}

#[test]
fn an_unknown_format_is_a_usage_error() {
    let out = OutDir::new();
    let run = run_stackscope(&["export", out.arg(), "--format", "svg"], RUN_TIMEOUT);
    run.assert_error(2);
    run.assert_stderr_contains("pprof, speedscope or perfetto");
}

/// A loop whose Python between steps waits for the GIL a helper thread spinning in pure Python
/// holds (`shape_job.py --helper spin`, a "metrics" thread): the Perfetto trace carries each
/// thread's GIL as slices on a track of its own, the helper's holds and the loop's waits, each
/// wait naming the helper.
#[test]
fn the_perfetto_trace_carries_who_held_the_gil_and_who_waited_for_it() {
    let _serial = serial();
    let out = OutDir::new();
    let ready = out.tmp.path().join("ready");
    let mut cmd = stackscope(&[
        "record",
        "-o",
        out.arg(),
        "--format",
        "perfetto",
        "--gpu",
        "off",
        "--",
        "python3",
    ]);
    cmd.arg(fixture_path("shape_job.py"))
        .arg(&ready)
        .args(["--seconds", "4"])
        .args(common::shape_jobs::GIL_BOUND);
    let run = run_with_timeout(cmd, RUN_TIMEOUT);
    run.assert_success();
    let trace = read_json(&out.out.join("trace.json"));
    // The stack slices still nest, on the threads' own tracks.
    assert!(!perfetto_slices(&trace).is_empty(), "no stack slices");
    let gil = gil_slices(&trace);
    let samples = |track: &str, name: &str| -> u64 {
        gil.get(track).map_or(0, |slices| {
            slices
                .iter()
                .filter(|s| s.name == name)
                .map(|s| s.samples)
                .sum()
        })
    };
    let tracks: Vec<&String> = gil.keys().collect();
    // At 100 Hz over about 4 s, the helper holds the GIL most of the time.
    let held = samples("metrics GIL", "GIL held");
    assert!(
        held >= 50,
        "metrics held the GIL {held} samples; tracks {tracks:?}"
    );
    let waited = samples("MainThread GIL", "GIL wait");
    assert!(
        waited >= 10,
        "the loop waited for the GIL {waited} samples; tracks {tracks:?}\n{}",
        run.describe()
    );
    let waits = gil.get("MainThread GIL").map_or(&[][..], Vec::as_slice);
    let by_metrics: u64 = waits
        .iter()
        .filter(|s| s.name == "GIL wait" && s.holder.as_deref() == Some("metrics"))
        .map(|s| s.samples)
        .sum();
    assert!(
        by_metrics * 10 >= waited * 9,
        "the loop's waits name the metrics thread as the holder: {by_metrics} of {waited}"
    );
}
