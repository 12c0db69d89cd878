//! `attach` and `dump` on every CPython here (`python3`, and 3.10 to 3.15: pyenv's, else 3.14 and
//! 3.15 from the Debian unstable root of `scripts/sid-root`):
//! our own reader reads them (summary.json says so), sleeping threads are left out of the
//! profile by the one idle rule, and `dump`, with `--locals` and `--native` too, shows the
//! same stacks (locals and native frames: py-spy's reader up to 3.12, ours from 3.13).
//! A version that is not installed is skipped with one line.

use crate::common;

use std::path::{Path, PathBuf};
use std::time::Duration;

use common::{run_stackscope, Fixture, OutDir};
use stackscope_testkit::python::{interpreters_of, VERSIONS};

const TIMEOUT: Duration = Duration::from_secs(120);

/// The interpreter of each version: pyenv's newest patch release, else the Debian root's.
fn interpreters() -> Vec<(String, PathBuf)> {
    interpreters_of(&VERSIONS)
}

/// The fixture under one interpreter, killed on Drop.
struct Target(Fixture);

impl Target {
    fn start(python: &Path) -> Target {
        Target(
            Fixture::script("versions_target.py")
                .python(python)
                .timeout(Duration::from_secs(30))
                .start(),
        )
    }

    fn pid(&self) -> String {
        self.0.pid.to_string()
    }
}

#[test]
fn every_installed_version_is_read_by_our_reader_without_its_sleepers() {
    let _serial = common::serial();
    let pythons = interpreters();
    let ran: Vec<&String> = pythons.iter().map(|(v, _)| v).collect();
    eprintln!("versions: {ran:?}");
    for (minor, python) in &pythons {
        let target = Target::start(python);
        let out = OutDir::new();
        attach_for_two_seconds(&target.pid(), &[], &out);
        let summary = out.summary();
        assert_eq!(summary["reader"], "stackscope", "{minor}: {summary:#}");
        let version = summary["python_version"].as_str().unwrap_or("");
        assert!(version.starts_with(minor.as_str()), "{minor}: {version}");
        let folded = out.folded();
        let busy = folded.thread_total("busy");
        let total = folded.total();
        assert!(busy >= 60, "{minor}: busy thread in {busy} samples");
        // Sleepers wake twice a second, each time for a moment (longer on a loaded
        // machine): a few samples each, where 3.10 read by py-spy gave each as many as the
        // busy thread.
        for i in 0..3 {
            let sleeper = folded.thread_total(&format!("sleeper-{i}"));
            assert!(
                sleeper * 10 <= busy,
                "{minor}: sleeper-{i} in {sleeper} samples, busy in {busy} of {total}\n{}",
                folded.excerpt()
            );
        }
        let deepest = deepest_down(&folded);
        assert_eq!(deepest, 31, "{minor}: down() frames on the busy stack");
        assert_native_profile(minor, &target);

        for extra in [&[][..], &["--locals"], &["--native"]] {
            let mut args = vec!["dump", "--pid"];
            let pid = target.pid();
            args.push(&pid);
            args.extend_from_slice(extra);
            // A sleeper reads as running for the moment it wakes (long on a loaded machine):
            // a dump may catch one; three in a row do not.
            let mut text = String::new();
            for _ in 0..3 {
                let run = run_stackscope(&args, TIMEOUT);
                run.assert_success();
                text = run.stdout.clone();
                let sleepers_idle = (0..3).all(|i| {
                    text.lines()
                        .find(|l| l.contains(&format!("sleeper-{i}")))
                        .is_some_and(|l| l.contains("idle"))
                });
                if sleepers_idle {
                    break;
                }
            }
            let text = &text;
            let busy = text
                .lines()
                .find(|l| l.starts_with("Thread ") && l.contains("\"busy\""))
                .unwrap_or_else(|| panic!("{minor}: no busy thread in\n{text}"));
            assert!(busy.contains("active"), "{minor}: {busy}");
            // Alone (`Thread TID "sleeper-0" (idle, ...)`) or grouped with the others
            // (`3 threads: sleeper-0, ... (idle, ...)`).
            for i in 0..3 {
                let sleeper = text
                    .lines()
                    .find(|l| l.contains(&format!("sleeper-{i}")))
                    .unwrap_or_else(|| panic!("{minor}: no sleeper-{i} in\n{text}"));
                assert!(sleeper.contains("idle"), "{minor}: {sleeper}");
            }
            assert!(text.contains("hot"), "{minor}:\n{text}");
            if extra == ["--locals"] {
                assert!(
                    text.lines().any(|l| l.trim() == "n = 7"),
                    "{minor}: no local n = 7 with --locals:\n{text}"
                );
                // A secret inside a dict is hidden, by either reader.
                assert!(
                    text.contains(r#""password": <redacted>"#) && !text.contains("pw-in-a-dict"),
                    "{minor}: the dict's secret shown:\n{text}"
                );
            }
            if extra == ["--native"] {
                // The sleepers' native frames: the C library's sleep (a select before 3.11).
                assert!(
                    text.lines()
                        .any(|l| l.contains("nanosleep") || l.contains("select (")),
                    "{minor}: no native sleep with --native:\n{text}"
                );
                assert!(
                    !text.contains(" = "),
                    "{minor}: locals without --locals\n{text}"
                );
            }
        }
    }
}

/// The most down() frames of a stack of the busy thread: 31 in every whole one.
fn deepest_down(folded: &common::Folded) -> usize {
    folded
        .of_thread("busy")
        .map(|s| {
            s.frames
                .iter()
                .filter(|f| f.function.ends_with("down"))
                .count()
        })
        .max()
        .unwrap_or(0)
}

/// `attach --pid PID --duration 2 --rate 100 --gpu off` with `extra`, into `out`; it succeeds.
fn attach_for_two_seconds(pid: &str, extra: &[&str], out: &OutDir) {
    let mut args = vec![
        "attach",
        "--pid",
        pid,
        "--duration",
        "2",
        "--rate",
        "100",
        "--gpu",
        "off",
    ];
    args.extend_from_slice(extra);
    args.extend(["-o", out.arg()]);
    run_stackscope(&args, TIMEOUT).assert_success();
}

/// `attach --native`: our reader reads it from 3.11 (the walk tells where each call of the
/// eval loop entered; py-spy's reader before), the busy stack keeps its 31 Python frames, and
/// a sleeper's Python frames have the C library's sleep below them.
fn assert_native_profile(minor: &str, target: &Target) {
    let out = OutDir::new();
    let pid = target.pid();
    attach_for_two_seconds(&pid, &["--idle", "--native"], &out);
    let summary = out.summary();
    let reader = if minor == "3.10" {
        "py-spy"
    } else {
        "stackscope"
    };
    assert_eq!(summary["reader"], reader, "{minor}: --native: {summary:#}");
    let folded = out.folded();
    let deepest = deepest_down(&folded);
    assert_eq!(
        deepest,
        31,
        "{minor}: --native: down() frames\n{}",
        folded.excerpt()
    );
    let asleep_in_c = folded.of_thread("sleeper-0").any(|s| {
        let at = s
            .frames
            .iter()
            .position(|f| f.function.ends_with("sleeper"));
        at.is_some_and(|i| {
            s.frames[i + 1..]
                .iter()
                .any(|f| f.function.contains("nanosleep") || f.function.contains("select"))
        })
    });
    assert!(
        asleep_in_c,
        "{minor}: --native: no C sleep below sleeper()\n{}",
        folded.excerpt()
    );
}

/// A version only our reader reads (3.15, which py-spy's does not) gets the full hang report
/// from `watch`: locals and native frames, read by our reader's deep read.
#[test]
fn watch_reports_a_hang_on_315_with_locals() {
    let python = match stackscope_testkit::python::sid_python("3.15") {
        Ok(python) => python,
        Err(why) => {
            eprintln!("skipped: Python 3.15: {why}");
            return;
        }
    };
    let fixture = Fixture::script("deadlock.py").python(&python).start();
    let out = OutDir::new();
    let pid = fixture.ready_json()["pid"]
        .as_u64()
        .expect("pid")
        .to_string();
    let mut cmd =
        common::stackscope(&["watch", "--pid", &pid, "--hang-after", "1", "-o", out.arg()]);
    cmd.arg("--gpu").arg("off");
    let running = common::spawn_stackscope(cmd);
    let report = common::wait_until(Duration::from_secs(30), "a hang report", || {
        std::fs::read_dir(&out.out)
            .ok()?
            .filter_map(Result::ok)
            .map(|e| e.path())
            .find(|p| p.extension().is_some_and(|x| x == "txt"))
    });
    let run = common::stop_bounded(running);
    let text = std::fs::read_to_string(&report).expect("report");
    assert!(text.contains("Python v3.15"), "{text}");
    assert!(text.contains("queue_waiter_body (deadlock.py:"), "{text}");
    assert!(
        text.lines()
            .any(|l| l.trim() == "marker = \"queue-waiter-local\""),
        "{text}"
    );
    assert!(
        !run.stderr.contains("no locals or native frames"),
        "{}",
        run.describe()
    );
}
