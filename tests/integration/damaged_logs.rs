//! `report` and `export` of a recording whose samples.log was cut short (as a crash leaves it),
//! damaged by a flipped bit, or emptied: they read what can be read, say on stderr which span
//! that is and how many blocks were damaged, and a log that gives nothing is an error.

use crate::common;

use common::*;
use std::fs;
use std::path::{Path, PathBuf};
use std::time::Duration;

const RUN_TIMEOUT: Duration = Duration::from_secs(60);
/// samples.log's prefix: magic and format version.
const PREFIX_LEN: usize = 10;

/// `attach --duration 3` of cpu_split, flushing the log every 0.4 s: a log of several blocks.
fn recording() -> OutDir {
    let (_fixture, out) =
        attach_cpu_split(&["--duration", "3", "--flush-interval", "0.4"], RUN_TIMEOUT);
    out
}

/// Each block of a sample log as (offset, length with its head), the header's first.
fn blocks(log: &[u8]) -> Vec<(usize, usize)> {
    let mut out = Vec::new();
    let mut at = PREFIX_LEN;
    while at + 8 <= log.len() {
        let len = u32::from_le_bytes([log[at], log[at + 1], log[at + 2], log[at + 3]]) as usize;
        out.push((at, 8 + len));
        at += 8 + len;
    }
    assert_eq!(at, log.len(), "the recording's log is whole");
    out
}

/// A copy of the recording in `into/name` with `log` as its samples.log.
fn with_log(recording: &Path, into: &Path, name: &str, log: &[u8]) -> PathBuf {
    let dir = into.join(name);
    fs::create_dir_all(&dir).expect("copy dir");
    fs::copy(recording.join("summary.json"), dir.join("summary.json")).expect("summary");
    fs::write(dir.join("samples.log"), log).expect("log");
    dir
}

fn report(dir: &Path) -> Run {
    let out = dir.join("report");
    run_stackscope(
        &[
            "report",
            dir.to_str().expect("utf-8"),
            "-o",
            out.to_str().expect("utf-8"),
        ],
        RUN_TIMEOUT,
    )
}

fn export(dir: &Path) -> Run {
    let file = dir.join("profile.speedscope.json");
    run_stackscope(
        &[
            "export",
            dir.to_str().expect("utf-8"),
            "--format",
            "speedscope",
            "-o",
            file.to_str().expect("utf-8"),
        ],
        RUN_TIMEOUT,
    )
}

/// The seconds in "read 0.0 to S s;" on stderr.
fn read_to(run: &Run) -> f64 {
    let line = run
        .stderr
        .lines()
        .find(|l| l.starts_with("stackscope: read 0.0 to "))
        .unwrap_or_else(|| panic!("no 'read 0.0 to' line\n{}", run.describe()));
    line["stackscope: read 0.0 to ".len()..]
        .split(' ')
        .next()
        .and_then(|s| s.parse().ok())
        .unwrap_or_else(|| panic!("{line}"))
}

#[test]
fn a_log_cut_short_reads_to_its_last_whole_block_and_says_so() {
    let _serial = serial();
    let recorded = recording();
    let log = fs::read(recorded.out.join("samples.log")).expect("log");
    let blocks = blocks(&log);
    assert!(blocks.len() >= 5, "{} blocks", blocks.len());
    let whole_samples = summary_samples(&recorded.summary());
    let whole_secs = num(&recorded.summary()["duration_secs"], "duration_secs");
    let tmp = tempfile::tempdir().expect("temp dir");
    // Cut in half, inside the last block, and just past the first block of events.
    let (second, last) = (blocks[2], blocks[blocks.len() - 1]);
    for (name, cut) in [
        ("half", log.len() / 2),
        ("last", last.0 + last.1 / 2),
        ("second", second.0 + 3),
    ] {
        let dir = with_log(&recorded.out, tmp.path(), name, &log[..cut]);
        let run = report(&dir);
        run.assert_success();
        run.assert_stderr_contains("the log is incomplete after that");
        let to = read_to(&run);
        assert!(
            to > 0.0 && to < whole_secs,
            "{name}: read to {to} of {whole_secs} s"
        );
        // The window is what was read, not the recording's length from its summary.
        run.assert_stderr_contains(&format!("stackscope: 0.0 to {to:.1} s of the recording"));
        let samples = summary_samples(&read_summary(&dir.join("report")));
        assert!(
            samples > 0 && samples < whole_samples,
            "{name}: {samples} of {whole_samples} samples"
        );
        let run = export(&dir);
        run.assert_success();
        assert_eq!(read_to(&run), to, "{name}: export reads what report reads");
    }
    // Nothing but the header, or less: nothing to read is an error, not an empty profile.
    for (name, cut) in [
        ("first-block-cut", blocks[1].0 + blocks[1].1 / 2),
        ("header-only", blocks[1].0),
        ("emptied", 0),
    ] {
        let dir = with_log(&recorded.out, tmp.path(), name, &log[..cut]);
        for run in [report(&dir), export(&dir)] {
            run.assert_error(1);
            assert_eq!(run.stderr.lines().count(), 1, "{name}\n{}", run.describe());
        }
        assert!(!dir.join("profile.speedscope.json").exists(), "{name}");
    }
}

#[test]
fn a_flipped_bit_in_an_early_block_loses_that_block_only() {
    let _serial = serial();
    let recorded = recording();
    let log = fs::read(recorded.out.join("samples.log")).expect("log");
    let blocks = blocks(&log);
    let whole = recorded.folded().total();
    let whole_secs = num(&recorded.summary()["duration_secs"], "duration_secs");
    let tmp = tempfile::tempdir().expect("temp dir");
    // The first block of events: it defines the stacks every later block uses.
    let mut damaged = log.clone();
    let first = blocks[1];
    damaged[first.0 + first.1 / 2] ^= 0x08;
    let dir = with_log(&recorded.out, tmp.path(), "flipped", &damaged);
    let run = report(&dir);
    run.assert_success();
    run.assert_stderr_contains(&format!("1 damaged block skipped ({} bytes)", first.1));
    assert!(
        !run.stderr.contains("incomplete") && !run.stderr.contains("later events"),
        "only the damaged block is lost\n{}",
        run.describe()
    );
    assert!(
        (read_to(&run) - whole_secs).abs() < 1.0,
        "{}",
        run.describe()
    );
    let folded = Folded::read(&dir.join("report/stacks.folded"));
    let read = folded.total();
    assert!(
        read < whole && read * 10 >= whole * 6,
        "{read} of {whole} samples read past one damaged block of {}",
        blocks.len()
    );
    assert!(folded.thread_function_total("MainThread", "hot_heavy") > 0);
    let run = export(&dir);
    run.assert_success();
    run.assert_stderr_contains("1 damaged block skipped");
}
