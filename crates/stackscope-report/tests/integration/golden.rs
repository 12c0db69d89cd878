//! Golden files: the folded profiles, summary JSON and GPU CSV of a fixed recording.
//!
//! Set `STACKSCOPE_BLESS=1` to rewrite the files under `tests/golden/` after an intended change;
//! review the diff before committing it.

use crate::common;

use std::fs;
use std::path::PathBuf;

use stackscope_aggregate::StackView;
use stackscope_report::{write_folded, write_gpu_timeline_csv, write_summary_json};

fn check_golden(name: &str, actual: &[u8]) {
    let path = PathBuf::from(env!("CARGO_MANIFEST_DIR"))
        .join("tests/golden")
        .join(name);
    if std::env::var_os("STACKSCOPE_BLESS").is_some_and(|v| v == "1") {
        fs::write(&path, actual).expect("bless golden file");
        return;
    }
    let expected = fs::read(&path).unwrap_or_else(|e| {
        panic!(
            "{}: {e}; run with STACKSCOPE_BLESS=1 to create it",
            path.display()
        )
    });
    let (expected, actual) = (
        String::from_utf8_lossy(&expected),
        String::from_utf8_lossy(actual),
    );
    assert!(
        expected == actual,
        "{} differs from the output; STACKSCOPE_BLESS=1 rewrites it.\n--- expected\n{expected}\n--- actual\n{actual}",
        path.display()
    );
}

#[test]
fn folded_profiles() {
    let (agg, _) = common::recording(true);
    for (view, name) in [
        (StackView::All, "stacks.folded"),
        (StackView::GpuIdle, "stacks-gpu-idle.folded"),
        (StackView::GpuBusy, "stacks-gpu-busy.folded"),
    ] {
        let mut out = Vec::new();
        write_folded(&agg.folded(view), &mut out).expect("folded");
        check_golden(name, &out);
    }
}

#[test]
fn summary_json() {
    let (agg, meta) = common::recording(true);
    let mut out = Vec::new();
    write_summary_json(&agg.summary(&meta), &mut out).expect("json");
    check_golden("summary.json", &out);
}

#[test]
fn summary_json_without_gpu() {
    let (agg, meta) = common::recording(false);
    let mut out = Vec::new();
    write_summary_json(&agg.summary(&meta), &mut out).expect("json");
    check_golden("summary-no-gpu.json", &out);
}

#[test]
fn process_roots() {
    let (agg, meta) = common::process_recording();
    let mut out = Vec::new();
    write_folded(&agg.folded(StackView::All), &mut out).expect("folded");
    check_golden("stacks-processes.folded", &out);
    let mut out = Vec::new();
    write_summary_json(&agg.summary(&meta), &mut out).expect("json");
    check_golden("summary-processes.json", &out);
}

#[test]
fn gpu_timeline_csv() {
    let (agg, _) = common::recording(true);
    let mut out = Vec::new();
    write_gpu_timeline_csv(agg.gpu_timeline(), agg.start(), &mut out).expect("csv");
    check_golden("gpu-timeline.csv", &out);
}
