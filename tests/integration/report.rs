//! `stackscope report DIR`: rebuild every output from the recording's
//! samples.log, for the whole recording or a window of it.

use crate::common;

use common::*;
use std::fs;
use std::path::{Path, PathBuf};
use std::time::Duration;

const RUN_TIMEOUT: Duration = Duration::from_secs(60);

/// Records cpu_split.py for `seconds` with `attach --duration`.
fn record_cpu_split(seconds: &str) -> (Fixture, OutDir) {
    let (fixture, out) = attach_cpu_split(&["--duration", seconds, "--rate", "100"], RUN_TIMEOUT);
    assert!(
        out.out.join("samples.log").is_file(),
        "no samples.log in the recording: {:?}",
        fs::read_dir(&out.out)
            .map(|d| d
                .flatten()
                .map(|e| e.file_name().to_string_lossy().into_owned())
                .collect::<Vec<_>>())
            .unwrap_or_default()
    );
    (fixture, out)
}

/// `stackscope report DIR -o OUT EXTRA...`; gives OUT.
fn report(dir: &Path, name: &str, extra: &[&str]) -> PathBuf {
    let target = dir.parent().expect("parent").join(name);
    let mut args = vec![
        "report",
        dir.to_str().expect("utf-8"),
        "-o",
        target.to_str().expect("utf-8"),
    ];
    args.extend_from_slice(extra);
    let run = run_stackscope(&args, RUN_TIMEOUT);
    run.assert_success();
    run.assert_no_panic();
    target
}

#[test]
fn report_whole_window_matches_the_recording_and_halves_add_up() {
    let _serial = serial();
    let (_fixture, out) = record_cpu_split("4");
    let (recorded_summary, recorded) = assert_complete_outputs(&out.out);
    let whole_total = recorded.total();
    assert!(whole_total > 100, "{whole_total} samples in 4 s at 100 Hz");

    // The whole recording: the same stacks with the same counts.
    let a = report(&out.out, "whole", &[]);
    let (a_summary, a_folded) = assert_complete_outputs(&a);
    assert_eq!(
        stack_counts(&a_folded),
        stack_counts(&recorded),
        "report over the whole recording should give the recorded stacks.folded:\n\
         --- recorded ---\n{}\n--- report ---\n{}",
        recorded.excerpt(),
        a_folded.excerpt()
    );
    assert_eq!(summary_samples(&a_summary), whole_total);
    assert_eq!(a_summary["pid"], recorded_summary["pid"]);
    let svg = fs::read_to_string(a.join("flamegraph.svg")).expect("svg");
    assert!(
        svg.contains("hot_heavy"),
        "the rebuilt flamegraph names hot_heavy"
    );

    // Explicitly the whole window: the same again.
    let a2 = report(&out.out, "whole-explicit", &["--from", "0", "--to", "1000"]);
    let a2_folded = Folded::read(&a2.join("stacks.folded"));
    assert_eq!(stack_counts(&a2_folded), stack_counts(&recorded));

    // The first two seconds: about half.
    let b = report(&out.out, "first-half", &["--from", "0", "--to", "2"]);
    let (b_summary, b_folded) = assert_complete_outputs(&b);
    let b_total = b_folded.total();
    let share = b_total as f64 / whole_total as f64;
    assert!(
        (0.25..=0.75).contains(&share),
        "--from 0 --to 2 of a 4 s recording has {b_total} of {whole_total} samples ({share:.2})"
    );
    assert!(
        b_folded.thread_function_total("MainThread", "hot_heavy") > 0,
        "{}",
        b_folded.excerpt()
    );
    assert_eq!(summary_samples(&b_summary), b_total);

    // The rest: together the two windows are the whole recording.
    let c = report(&out.out, "second-half", &["--from", "2"]);
    let (_, c_folded) = assert_complete_outputs(&c);
    let c_total = c_folded.total();
    assert!(c_total > 0, "--from 2 gives no samples");
    assert_eq!(
        b_total + c_total,
        whole_total,
        "--to 2 ({b_total}) and --from 2 ({c_total}) should add up to the whole ({whole_total})"
    );
    // Stack by stack, too.
    let mut sum = stack_counts(&b_folded);
    for (stack, count) in stack_counts(&c_folded) {
        *sum.entry(stack).or_insert(0) += count;
    }
    assert_eq!(
        sum,
        stack_counts(&recorded),
        "the two halves, stack by stack"
    );

    // The recording itself is untouched by reports.
    let again = Folded::read(&out.out.join("stacks.folded"));
    assert_eq!(stack_counts(&again), stack_counts(&recorded));
}

#[test]
fn report_without_output_writes_inside_the_recording() {
    let _serial = serial();
    let (_fixture, out) = record_cpu_split("1");
    let (_, recorded) = assert_complete_outputs(&out.out);
    let run = run_stackscope(&["report", out.arg()], RUN_TIMEOUT);
    run.assert_success();
    run.assert_no_panic();
    let dirs: Vec<PathBuf> = fs::read_dir(&out.out)
        .expect("recording dir")
        .flatten()
        .filter(|e| e.path().is_dir())
        .filter(|e| e.file_name().to_string_lossy().starts_with("report-"))
        .map(|e| e.path())
        .collect();
    assert_eq!(
        dirs.len(),
        1,
        "one report-... directory expected in the recording\n{}",
        run.describe()
    );
    let name = dirs[0]
        .file_name()
        .expect("name")
        .to_string_lossy()
        .into_owned();
    assert!(
        run.stdout.contains(&name) || run.stderr.contains(&name),
        "the report should say where it wrote ({name})\n{}",
        run.describe()
    );
    let (_, folded) = assert_complete_outputs(&dirs[0]);
    assert_eq!(stack_counts(&folded), stack_counts(&recorded));
}

#[test]
fn report_of_a_directory_without_a_log_is_an_error() {
    let empty = tempfile::tempdir().expect("temp dir");
    let out = empty.path().join("out");
    let run = run_stackscope(
        &[
            "report",
            empty.path().to_str().expect("utf-8"),
            "-o",
            out.to_str().expect("utf-8"),
        ],
        RUN_TIMEOUT,
    );
    run.assert_error(1);
    run.assert_stderr_contains("samples.log");

    let missing = empty.path().join("no-such-recording");
    let run = run_stackscope(&["report", missing.to_str().expect("utf-8")], RUN_TIMEOUT);
    run.assert_error(1);
}

#[test]
fn report_with_from_after_to_is_a_usage_error() {
    let _serial = serial();
    let (_fixture, out) = record_cpu_split("1");
    let target = out.tmp.path().join("backwards");
    let run = run_stackscope(
        &[
            "report",
            out.arg(),
            "-o",
            target.to_str().expect("utf-8"),
            "--from",
            "3",
            "--to",
            "1",
        ],
        RUN_TIMEOUT,
    );
    run.assert_no_panic();
    // --from after --to is bad usage.
    run.assert_error(2);
}

/// The whole percent after `marker` in `text` (`mean utilization 31%` gives 31).
fn percent_after(text: &str, marker: &str) -> Option<u64> {
    let at = text.find(marker)? + marker.len();
    let digits: String = text[at..]
        .chars()
        .take_while(char::is_ascii_digit)
        .collect();
    text[at + digits.len()..]
        .starts_with('%')
        .then(|| digits.parse().ok())?
}

/// A window inside a real job's start-up, where the trainer imports its modules from inside
/// its `main` (the H100 recording's first 10 s): an import is start-up work, not the loop's
/// data, though importlib's frames are named for loading (`_find_and_load`, `_load_unlocked`).
/// The imports are most of the trainer's samples there, and count as its own Python; the one
/// wait for the first batch does not make `main` the loop's loader.
#[test]
fn a_window_in_start_up_reads_imports_as_the_jobs_own_work() {
    let tmp = tempfile::tempdir().expect("temp dir");
    let recording = copy_recording("dataloader-2-workers-record", tmp.path());
    let out = tmp.path().join("start-up");
    let run = run_stackscope(
        &[
            "report",
            recording.to_str().expect("utf-8"),
            "-o",
            out.to_str().expect("utf-8"),
            "--from",
            "0",
            "--to",
            "10",
        ],
        RUN_TIMEOUT,
    );
    run.assert_success();
    let summary = read_summary(&out);
    let step = &summary["gpu"]["step"];
    let part = |name: &str| num(&step[name], name);
    let own = part("python") + part("other_wait");
    assert!(
        own > 0.5 && part("inline_load") < 0.05,
        "imports read as the loop's data: {step}\n{}",
        run.stdout
    );
    // `main` holds every sample but the module's own imports, and waits once for its first
    // batch: a call that made one hand-off is not the loop's loader.
    assert!(
        part("input_wait") < 0.1,
        "main read as a loader: {step}\n{}",
        run.stdout
    );
    // Nor is the window input-bound or loading inline: the job is starting.
    let verdict = &summary["gpu"]["verdict"];
    let class = verdict["class"].as_str().unwrap_or_default();
    assert!(
        !["input_pipeline", "inline_loading"].contains(&class),
        "{verdict}"
    );
}

/// One mean utilization per device per window: the terminal's "GPU mean utilization" line, the
/// verdict, summary.json (the device's and the devices') and report.html's data say the same
/// number, on windows of a real recording whose start-up the verdict leaves out.
#[test]
fn a_window_has_one_mean_utilization() {
    let tmp = tempfile::tempdir().expect("temp dir");
    let recording = copy_recording("dataloader-2-workers-record", tmp.path());
    for window in [
        &["--from", "2", "--to", "5"][..],
        &["--from", "15", "--to", "30"],
        &[],
    ] {
        let out = tmp.path().join(format!("report{}", window.join("")));
        let mut args = vec![
            "report",
            recording.to_str().expect("utf-8"),
            "-o",
            out.to_str().expect("utf-8"),
        ];
        args.extend_from_slice(window);
        let run = run_stackscope(&args, RUN_TIMEOUT);
        run.assert_success();
        let line = |start: &str| {
            run.stdout
                .lines()
                .find(|l| l.starts_with(start))
                .unwrap_or_else(|| panic!("no {start:?} line\n{}", run.describe()))
        };
        let terminal = percent_after(line("GPU mean utilization:"), "HBM3) ");
        let verdict = line("Verdict:");
        let said = percent_after(verdict, "mean utilization ")
            .or_else(|| percent_after(verdict, "(mean "));
        let summary = read_summary(&out);
        let mean = num(&summary["gpu"]["mean_utilization"], "gpu.mean_utilization");
        let device = num(
            &summary["gpu"]["devices"][0]["mean_utilization"],
            "devices[0].mean_utilization",
        );
        let html = fs::read_to_string(out.join("report.html")).expect("report.html");
        let page = crate::common::browser::page_data(&html)["mean_utilization"].as_f64();
        assert_eq!(device, mean, "{window:?}: one device, one mean");
        assert_eq!(page, Some(mean), "{window:?}: the page's data");
        let whole = Some(mean.round() as u64);
        assert_eq!(terminal, whole, "{window:?}: {mean}\n{}", run.stdout);
        assert_eq!(said, whole, "{window:?}: {mean}\n{}", run.stdout);
    }
}
