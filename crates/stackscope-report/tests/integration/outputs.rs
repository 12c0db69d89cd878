//! The whole output directory: which files, written atomically, with consistent content.

use crate::common;

use std::fs;

use stackscope_report::{write_outputs, write_text_summary};

fn names_in(dir: &std::path::Path) -> Vec<String> {
    let mut names: Vec<String> = fs::read_dir(dir)
        .expect("read dir")
        .map(|e| e.expect("entry").file_name().to_string_lossy().into_owned())
        .collect();
    names.sort();
    names
}

#[test]
fn gpu_recording_writes_every_file() {
    let dir = tempfile::tempdir().expect("tempdir");
    let (agg, meta) = common::recording(true);
    let written = write_outputs(dir.path(), &agg, &meta).expect("outputs");
    assert_eq!(
        names_in(dir.path()),
        vec![
            "flamegraph-gpu-busy.svg",
            "flamegraph-gpu-idle.svg",
            "flamegraph.svg",
            "gpu-timeline.csv",
            "gpu-timeline.svg",
            "report.html",
            "stacks-gpu-busy.folded",
            "stacks-gpu-idle.folded",
            "stacks.folded",
            "summary.json",
        ],
        "no temporary files left behind"
    );
    assert_eq!(written.paths.len(), 10);
    assert_eq!(
        written.paths.last().and_then(|p| p.file_name()),
        Some("summary.json".as_ref()),
        "summary written last"
    );

    let idle = fs::read_to_string(dir.path().join("flamegraph-gpu-idle.svg")).expect("svg");
    assert!(
        idle.contains("decode (data.py:7)"),
        "idle flamegraph names decode"
    );
    assert!(idle.contains("while the GPU was idle"));
    let folded = fs::read_to_string(dir.path().join("stacks.folded")).expect("folded");
    assert_eq!(folded.lines().count(), 3);

    let json: serde_json::Value =
        serde_json::from_str(&fs::read_to_string(dir.path().join("summary.json")).expect("json"))
            .expect("valid JSON");
    assert_eq!(json["samples"], 200);
    // The loop decodes its data itself half its time.
    assert_eq!(json["gpu"]["verdict"]["class"], "inline_loading");
    assert_eq!(json["gpu"]["if_fixed"]["bottleneck"], "inline_loading");
    assert_eq!(json["gpu"]["devices"][0]["uuid"], "GPU-0000");
    assert_eq!(written.summary.samples, 200);

    // A second flush replaces the files in place.
    write_outputs(dir.path(), &agg, &meta).expect("second flush");
    assert_eq!(names_in(dir.path()).len(), 10);
}

#[test]
fn recording_without_gpu_writes_the_four_files() {
    let dir = tempfile::tempdir().expect("tempdir");
    let (agg, meta) = common::recording(false);
    write_outputs(dir.path(), &agg, &meta).expect("outputs");
    assert_eq!(
        names_in(dir.path()),
        vec![
            "flamegraph.svg",
            "report.html",
            "stacks.folded",
            "summary.json"
        ]
    );
    let json: serde_json::Value =
        serde_json::from_str(&fs::read_to_string(dir.path().join("summary.json")).expect("json"))
            .expect("valid JSON");
    assert!(json["gpu"].is_null());
    assert_eq!(json["gpu_unavailable"], "--gpu off");

    let mut out = Vec::new();
    write_text_summary(&agg.summary(&meta), dir.path(), &mut out).expect("text");
    let text = String::from_utf8(out).expect("utf8");
    assert_eq!(
        text.lines().last(),
        Some("No GPU data: --gpu off"),
        "{text}"
    );
    assert!(!text.contains("gpu-timeline"), "{text}");
}

#[test]
fn missing_directory_is_an_error_naming_the_file() {
    let dir = tempfile::tempdir().expect("tempdir");
    let missing = dir.path().join("nope");
    let (agg, meta) = common::recording(false);
    let error = write_outputs(&missing, &agg, &meta).expect_err("no such directory");
    assert!(error.to_string().contains("nope"), "{error}");
}

#[test]
fn text_summary_says_what_matters_and_ends_with_the_verdict() {
    let (agg, meta) = common::recording(true);
    let summary = agg.summary(&meta);
    let mut out = Vec::new();
    write_text_summary(&summary, "out/run1".as_ref(), &mut out).expect("text");
    let text = String::from_utf8(out).expect("utf8");
    assert!(text.contains("200 samples of pid 4242"), "{text}");
    assert!(text.contains("Python 3.12.3"), "{text}");
    assert!(text.contains("40.0%   40.0%  decode (data.py)"), "{text}");
    assert!(text.contains("MainThread (160)"), "{text}");
    assert!(text.contains("sampling errors: 1"), "{text}");
    assert!(text.contains("dropped: 1"), "{text}");
    assert!(
        text.contains("Flamegraph: out/run1/flamegraph.svg"),
        "{text}"
    );
    assert!(
        text.contains("Files in out/run1: flamegraph.svg, stacks.folded"),
        "{text}"
    );
    assert!(text.contains("gpu-timeline.svg"), "{text}");
    assert!(text.contains("power readings are averaged"), "{text}");
    let last = text.lines().last().expect("lines");
    assert!(
        last.starts_with("Verdict: The training loop is highly input-bound"),
        "{last}"
    );
    assert!(last.contains("decode (data.py:"), "{last}");
    assert!(
        text.contains("The training loop's time: inline_load 50%, python 50%"),
        "{text}"
    );
}

#[test]
fn text_summary_lists_processes_and_caps() {
    let (agg, meta) = common::process_recording();
    let mut summary = agg.summary(&meta);
    assert!(summary.caps_reached.is_empty());
    summary
        .caps_reached
        .push("distinct stacks capped at 200000: 5 later samples of new stacks".to_owned());
    let mut out = Vec::new();
    write_text_summary(&summary, "out".as_ref(), &mut out).expect("text");
    let text = String::from_utf8(out).expect("utf8");
    assert!(
        text.contains(
            "Processes (samples): pid 4242 python3 train.py --epochs 1 (40), \
             pid 4300 /usr/bin/python3 -c from multiprocessing... (20, exited)"
        ),
        "{text}"
    );
    assert!(
        text.contains("cap reached: distinct stacks capped at 200000: 5 later"),
        "{text}"
    );
    // Both processes have a MainThread: two threads, not one.
    assert!(
        text.contains("Threads (samples): pid 4242 MainThread (40), pid 4300 MainThread (20)"),
        "{text}"
    );
}

#[test]
fn process_roots_lead_every_flamegraph_line() {
    let dir = tempfile::tempdir().expect("tempdir");
    let (agg, meta) = common::process_recording();
    write_outputs(dir.path(), &agg, &meta).expect("outputs");
    let folded = fs::read_to_string(dir.path().join("stacks.folded")).expect("folded");
    let lines: Vec<&str> = folded.lines().collect();
    assert_eq!(lines.len(), 2, "{folded}");
    assert!(
        lines[0].starts_with("process 4242 python3 train.py --epochs 1;MainThread;main"),
        "{folded}"
    );
    assert!(
        lines[1].starts_with("process 4300 /usr/bin/python3 -c from multiprocessing.spawn import"),
        "{folded}"
    );
    assert!(lines[1].contains("...;MainThread;_worker_loop"), "{folded}");
    let svg = fs::read_to_string(dir.path().join("flamegraph.svg")).expect("svg");
    assert!(
        svg.contains("process 4300"),
        "process roots in the flamegraph"
    );
    let json: serde_json::Value =
        serde_json::from_str(&fs::read_to_string(dir.path().join("summary.json")).expect("json"))
            .expect("valid JSON");
    assert_eq!(json["processes"][1]["pid"], 4300);
    assert_eq!(json["processes"][1]["exited"], true);
    assert_eq!(json["processes"][1]["samples"], 20);
    assert_eq!(json["caps_reached"], serde_json::json!([]));
}
