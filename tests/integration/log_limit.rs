//! `--log-max-size` and `--log-max-age`: an open-ended recording keeps its sample log bounded,
//! in segments whose oldest are deleted, says so in summary.json, and `report` rebuilds what
//! was kept; without them the log is one samples.log as ever.

use crate::common;

use common::*;
use std::fs;
use std::path::{Path, PathBuf};
use std::time::Duration;

use stackscope_samplelog::{log_files, LOG_FILE_NAME};

const RUN_TIMEOUT: Duration = Duration::from_secs(60);
/// The smallest limit the command line takes: a few segments of one 16 KiB block each.
const LIMIT: u64 = 64 * 1024;

/// The files of the recording's sample log, oldest first, and their sizes.
fn log_sizes(dir: &Path) -> Vec<(PathBuf, u64)> {
    log_files(&dir.join(LOG_FILE_NAME))
        .into_iter()
        .map(|file| {
            let len = fs::metadata(&file)
                .unwrap_or_else(|e| panic!("{}: {e}", file.display()))
                .len();
            (file, len)
        })
        .collect()
}

/// Whether a stack of `folded` names `function`.
fn names(folded: &Folded, function: &str) -> bool {
    folded.stacks.iter().any(|s| s.has_function(function))
}

#[test]
fn a_size_limit_keeps_the_newest_segments_and_report_reads_them() {
    let _serial = serial();
    // Nine threads sampled at 1000 Hz: about 40 KiB a second of log, many times the limit.
    let fixture = Fixture::start("thread_pool.py", &["--straggler"]);
    let pid = fixture.ready_json()["pid"].to_string();
    let out = OutDir::new();
    let run = run_stackscope(
        &[
            "attach",
            "--pid",
            &pid,
            "-o",
            out.arg(),
            "--duration",
            "5",
            "--rate",
            "1000",
            "--log-max-size",
            "64K",
        ],
        RUN_TIMEOUT,
    );
    run.assert_success();
    run.assert_no_panic();

    // The log's files: the limit, but for the segment being written.
    let files = log_sizes(&out.out);
    let total: u64 = files.iter().map(|(_, len)| len).sum();
    let largest = files.iter().map(|(_, len)| *len).max().unwrap_or(0);
    assert!(
        files.len() > 1,
        "the log was not split into segments: {files:?}\n{}",
        run.describe()
    );
    assert!(
        total <= LIMIT + largest,
        "{total} bytes in {files:?}, over {LIMIT} plus a segment"
    );
    assert_eq!(
        files.last().map(|(f, _)| f.clone()),
        Some(out.out.join(LOG_FILE_NAME)),
        "samples.log is the segment written last"
    );

    // summary.json says what the log kept and what was deleted.
    let summary = out.summary();
    let log = &summary["samples_log"];
    assert_eq!(log["max_size_bytes"], LIMIT, "{log:#}");
    assert!(log["max_age_secs"].is_null(), "{log:#}");
    assert_eq!(log["segments"], files.len() as u64, "{log:#}");
    assert_eq!(log["bytes"], total, "{log:#}");
    let dropped = log["dropped_segments"].as_u64().expect("dropped_segments");
    assert!(dropped > 0, "nothing deleted: {log:#}\n{}", run.describe());
    assert!(
        log["dropped_bytes"].as_u64().is_some_and(|b| b > 0),
        "{log:#}"
    );
    let kept_from = log["first_kept_secs"].as_f64().expect("first_kept_secs");
    assert!(kept_from > 0.0 && kept_from < 5.5, "{log:#}");
    // The recording's own profile covers all of it, whatever the log kept.
    assert!(names(&out.folded(), "pool_straggle"));
    assert!(run.stdout.contains("Sample log: "), "{}", run.describe());

    // `report` reads the segments kept, oldest first, and says once where they start.
    let report = out.tmp.path().join("report");
    let run = run_stackscope(
        &["report", out.arg(), "-o", report.to_str().expect("utf-8")],
        RUN_TIMEOUT,
    );
    run.assert_success();
    run.assert_no_panic();
    let said = format!("{}{}", run.stdout, run.stderr);
    assert_eq!(
        said.matches("the sample log's first kept segment").count(),
        1,
        "{}",
        run.describe()
    );
    assert!(
        said.contains(&format!("this report starts at {kept_from:.1} s")),
        "{}",
        run.describe()
    );
    let folded = Folded::read(&report.join("stacks.folded"));
    assert!(
        names(&folded, "pool_straggle"),
        "the report names the fixture's busy function:\n{}",
        folded.excerpt()
    );
    assert!(folded.total() > 0);
    let rebuilt = read_summary(&report);
    assert!(
        rebuilt["notices"].as_array().is_some_and(|n| n
            .iter()
            .any(|n| n.as_str().is_some_and(|n| n.contains("first kept segment")))),
        "{rebuilt:#}"
    );
    // A window before what was kept has nothing to rebuild.
    let early = out.tmp.path().join("early");
    let run = run_stackscope(
        &[
            "report",
            out.arg(),
            "-o",
            early.to_str().expect("utf-8"),
            "--to",
            &format!("{}", kept_from / 2.0),
        ],
        RUN_TIMEOUT,
    );
    run.assert_error(1);
    run.assert_stderr_contains("first kept segment");
}

#[test]
fn without_limits_the_log_is_one_samples_log() {
    let _serial = serial();
    let (_fixture, out) = attach_cpu_split(&["--duration", "1"], RUN_TIMEOUT);
    let names: Vec<String> = fs::read_dir(&out.out)
        .expect("out dir")
        .map(|e| e.expect("entry").file_name().to_string_lossy().into_owned())
        .filter(|n| n.starts_with("samples.log"))
        .collect();
    assert_eq!(names, ["samples.log"]);
    let log = &out.summary()["samples_log"];
    assert!(log["max_size_bytes"].is_null(), "{log:#}");
    assert!(log["max_age_secs"].is_null(), "{log:#}");
    assert_eq!(log["segments"], 1, "{log:#}");
    assert_eq!(log["dropped_segments"], 0, "{log:#}");
    assert!(log["first_kept_secs"].is_null(), "{log:#}");
    let len = fs::metadata(out.out.join(LOG_FILE_NAME))
        .expect("log")
        .len();
    assert_eq!(log["bytes"], len, "{log:#}");
}

#[test]
fn bad_limits_are_usage_errors() {
    for (flag, value) in [
        ("--log-max-size", "1K"),
        ("--log-max-size", "lots"),
        ("--log-max-age", "0"),
        ("--log-max-age", "6w"),
    ] {
        let run = run_stackscope(&["attach", "--pid", "1", flag, value], RUN_TIMEOUT);
        run.assert_usage_error();
        run.assert_stderr_contains(flag);
    }
}
