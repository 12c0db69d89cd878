//! Days-long recordings: checkpoints every --flush-interval and on SIGUSR1,
//! SIGINT/SIGTERM/kill -9 mid-recording, the target exiting or being stopped
//! by someone else, and a target that churns threads.
//!
//! (tests/integration/attach.rs covers a plain SIGINT/SIGTERM; tests/integration/errors.rs a target
//! exiting without checkpoints; tests/integration/record.rs `record` ended by SIGINT.)

use crate::common;

use common::*;
use std::collections::HashMap;
use std::fs;
use std::path::Path;
use std::time::{Duration, Instant};

/// Long enough for startup and a few checkpoints on a loaded 2-core machine.
const WAIT: Duration = Duration::from_secs(20);
const FINISH: Duration = Duration::from_secs(20);

fn attach_running(pid: u32, out: &OutDir, extra: &[&str]) -> Running {
    let pid = pid.to_string();
    let mut args = vec!["attach", "--pid", &pid, "-o", out.arg()];
    args.extend_from_slice(extra);
    spawn_stackscope(stackscope(&args))
}

/// Waits until stackscope has created its output directory: by then it has
/// attached and installed its signal handlers.
fn wait_started(running: Running, out: &OutDir) -> Running {
    let dir = out.out.clone();
    wait_while_running(running, WAIT, "the output directory", || {
        dir.is_dir().then_some(())
    })
    .0
}

fn samples_log_len(dir: &Path) -> u64 {
    fs::metadata(dir.join("samples.log"))
        .map(|m| m.len())
        .unwrap_or(0)
}

// ---------------------------------------------------------------- SIGUSR1

#[test]
fn sigusr1_writes_a_checkpoint_and_recording_goes_on() {
    let _serial = serial();
    let fixture = Fixture::start("cpu_split.py", &[]);
    let pid = fixture.ready_pid();
    let out = OutDir::new();
    let running = attach_running(pid, &out, &["--flush-interval", "3600", "--rate", "100"]);
    let running = wait_started(running, &out);
    // Nothing is written before the first interval (an hour) unless asked.
    std::thread::sleep(Duration::from_millis(1000));
    let before = fs::read_to_string(out.out.join("summary.json")).unwrap_or_default();

    running.signal("USR1");
    let (mut running, first) =
        wait_while_running(running, WAIT, "summary.json after SIGUSR1", || {
            fs::read_to_string(out.out.join("summary.json"))
                .ok()
                .filter(|t| *t != before)
                .and_then(|_| try_read_summary(&out.out))
        });
    let first_samples = summary_samples(&first);
    assert!(
        first_samples > 0,
        "the checkpoint after ~1 s at 100 Hz has no samples: {first:#}"
    );
    assert!(
        running.child.try_wait().expect("try_wait").is_none(),
        "stackscope ended after SIGUSR1; it should go on recording"
    );
    // No other checkpoint can come within the hour: the files are one
    // consistent set.
    let (summary, folded) = assert_complete_outputs(&out.out);
    assert_eq!(summary_samples(&summary), first_samples);
    assert!(
        folded.thread_function_total("MainThread", "hot_heavy") > 0,
        "{}",
        folded.excerpt()
    );
    assert_eq!(summary["target_exited"], serde_json::json!(false));
    assert_not_stopped(pid);

    // Keep recording, then ask again: more samples.
    let first_text = fs::read_to_string(out.out.join("summary.json")).expect("summary");
    std::thread::sleep(Duration::from_millis(1000));
    running.signal("USR1");
    let (running, second) = wait_while_running(running, WAIT, "a second checkpoint", || {
        fs::read_to_string(out.out.join("summary.json"))
            .ok()
            .filter(|t| *t != first_text)
            .and_then(|_| try_read_summary(&out.out))
    });
    let second_samples = summary_samples(&second);
    assert!(
        second_samples > first_samples,
        "second checkpoint has {second_samples} samples, the first {first_samples}"
    );
    let (_, folded) = assert_complete_outputs(&out.out);
    assert_eq!(folded.total(), second_samples);

    running.signal("INT");
    let run = running.finish(FINISH);
    run.assert_success();
    run.assert_no_panic();
    run.assert_stderr_contains("checkpoint written to");
    let (last, _) = assert_complete_outputs(&out.out);
    assert!(
        summary_samples(&last) >= second_samples,
        "final {} < second checkpoint {second_samples}",
        summary_samples(&last)
    );
    assert!(
        temp_files(&out.out).is_empty(),
        "temporary files left after a clean end: {:?}",
        temp_files(&out.out)
    );
    assert_running_and_progressing(pid);
}

// ---------------------------------------------------------------- periodic checkpoints + signals

/// With checkpoints every second, a signal arriving mid-recording still ends
/// it with exit 0 and one whole, consistent set of files holding at least
/// what the last checkpoint held.
fn signal_after_checkpoints(signal: &str) {
    let _serial = serial();
    let fixture = Fixture::start("cpu_split.py", &[]);
    let pid = fixture.ready_pid();
    let out = OutDir::new();
    let running = attach_running(pid, &out, &["--flush-interval", "1"]);
    let (running, first) = wait_while_running(running, WAIT, "a first checkpoint", || {
        try_read_summary(&out.out).filter(|s| summary_samples(s) > 0)
    });
    let first_text = fs::read_to_string(out.out.join("summary.json")).expect("summary");
    // A second periodic checkpoint, without any signal.
    let (running, (_, second)) = wait_while_running(running, WAIT, "a second checkpoint", || {
        fs::read_to_string(out.out.join("summary.json"))
            .ok()
            .filter(|t| *t != first_text)
            .map(|t| {
                let json: serde_json::Value = serde_json::from_str(&t).expect("summary JSON");
                (t, json)
            })
    });
    assert!(
        summary_samples(&second) > summary_samples(&first),
        "checkpoints every second should grow: {} then {}",
        summary_samples(&first),
        summary_samples(&second)
    );
    running.signal(signal);
    let run = running.finish(FINISH);
    run.assert_success();
    run.assert_no_panic();
    let (summary, folded) = assert_complete_outputs(&out.out);
    assert!(
        summary_samples(&summary) >= summary_samples(&second),
        "final {} < last checkpoint {}",
        summary_samples(&summary),
        summary_samples(&second)
    );
    assert!(
        folded.thread_function_total("MainThread", "hot_heavy") > 0,
        "{}",
        folded.excerpt()
    );
    assert_eq!(summary["target_exited"], serde_json::json!(false));
    assert!(summary["exit_status"].is_null(), "exit_status for attach");
    assert!(
        temp_files(&out.out).is_empty(),
        "temporary files left after SIG{signal}: {:?}",
        temp_files(&out.out)
    );
    assert!(
        samples_log_len(&out.out) > 0,
        "samples.log missing or empty after SIG{signal}"
    );
    assert_running_and_progressing(pid);
}

#[test]
fn sigint_between_checkpoints_writes_consistent_outputs() {
    signal_after_checkpoints("INT");
}

#[test]
fn sigterm_between_checkpoints_writes_consistent_outputs() {
    signal_after_checkpoints("TERM");
}

// ---------------------------------------------------------------- kill -9

#[test]
fn kill_9_after_a_checkpoint_leaves_it_whole_and_the_target_running() {
    let _serial = serial();
    let fixture = Fixture::start("cpu_split.py", &[]);
    let pid = fixture.ready_pid();
    let out = OutDir::new();
    let running = attach_running(pid, &out, &["--flush-interval", "1"]);
    let (running, _) = wait_while_running(running, WAIT, "a first checkpoint", || {
        try_read_summary(&out.out).filter(|s| summary_samples(s) > 0)
    });
    let first_text = fs::read_to_string(out.out.join("summary.json")).expect("summary");
    // summary.json is written last: right after a new one appears the
    // checkpoint is whole, and the next is about a second away.
    let (running, checkpoint) = wait_while_running(running, WAIT, "one more checkpoint", || {
        fs::read_to_string(out.out.join("summary.json"))
            .ok()
            .filter(|t| *t != first_text)
            .map(|t| serde_json::from_str::<serde_json::Value>(&t).expect("summary JSON"))
    });
    running.signal("KILL");
    let killed_at = Instant::now();
    let run = running.finish(FINISH);
    assert_eq!(
        run.code(),
        None,
        "stackscope should have died of SIGKILL\n{}",
        run.describe()
    );
    let checkpoint_samples = summary_samples(&checkpoint);
    assert!(checkpoint_samples > 0);

    // The target runs on: never left stopped, checked over half a second.
    while killed_at.elapsed() < Duration::from_millis(500) {
        assert_not_stopped(pid);
    }
    assert_running_and_progressing(pid);

    // The last checkpoint is whole.
    let (summary, folded) = assert_complete_outputs(&out.out);
    assert!(
        summary_samples(&summary) >= checkpoint_samples,
        "summary.json after kill -9 has {} samples, the checkpoint seen had {checkpoint_samples}",
        summary_samples(&summary)
    );
    assert!(
        folded.thread_function_total("MainThread", "hot_heavy") > 0,
        "{}",
        folded.excerpt()
    );
    // Files under their real names are whole (checked above); a temporary
    // file may be left, but only under a name no reader would take for output.
    for entry in fs::read_dir(&out.out).expect("output dir").flatten() {
        let name = entry.file_name().to_string_lossy().into_owned();
        if is_temp_name(&name) {
            continue;
        }
        if name.ends_with(".json") {
            let text = fs::read_to_string(entry.path()).expect("json file");
            serde_json::from_str::<serde_json::Value>(&text)
                .unwrap_or_else(|e| panic!("{name} after kill -9 is not JSON ({e})"));
        }
        if name.ends_with(".svg") {
            let text = fs::read_to_string(entry.path()).expect("svg file");
            assert!(
                text.trim_end().ends_with("</svg>"),
                "{name} after kill -9 is cut short"
            );
        }
        if name.ends_with(".folded") {
            Folded::read(&entry.path());
        }
    }

    // The sample log of the killed recording can be read back: at least the
    // checkpoint's samples (it is flushed at checkpoints), and not much more
    // than what was sampled until the kill.
    assert!(
        samples_log_len(&out.out) > 0,
        "samples.log missing or empty after kill -9"
    );
    let rebuilt = out.tmp.path().join("rebuilt");
    let report = run_stackscope(
        &["report", out.arg(), "-o", rebuilt.to_str().expect("utf-8")],
        Duration::from_secs(60),
    );
    report.assert_success();
    report.assert_no_panic();
    let (rebuilt_summary, rebuilt_folded) = assert_complete_outputs(&rebuilt);
    let total = rebuilt_folded.total();
    assert!(
        total >= checkpoint_samples,
        "report of the killed recording has {total} samples, the checkpoint {checkpoint_samples}"
    );
    let duration = num(&checkpoint["duration_secs"], "duration_secs");
    assert!(
        (total as f64) <= checkpoint_samples as f64 + 100.0 * 3.0 + 0.2 * 100.0 * duration,
        "report of the killed recording has {total} samples, far more than the checkpoint's \
         {checkpoint_samples} at {duration} s"
    );
    assert!(
        rebuilt_folded.thread_function_total("MainThread", "hot_heavy") > 0,
        "{}",
        rebuilt_folded.excerpt()
    );
    assert_eq!(
        rebuilt_summary["pid"].as_u64(),
        Some(pid as u64),
        "{rebuilt_summary:#}"
    );
}

// ---------------------------------------------------------------- the target exits

#[test]
fn record_target_exiting_between_checkpoints() {
    let _serial = serial();
    let out = OutDir::new();
    let ready = out.tmp.path().join("ready");
    let _child = KillOnDrop::new(&ready, "exits_soon.py");
    let mut cmd = stackscope(&["record", "-o", out.arg(), "--flush-interval", "1", "--"]);
    cmd.arg("python3")
        .arg(fixture_path("exits_soon.py"))
        .arg(&ready)
        .args(["2.5", "7"])
        .env("PYTHONDONTWRITEBYTECODE", "1");
    let running = spawn_stackscope(cmd);
    // A checkpoint while the child still runs.
    let (running, checkpoint) = wait_while_running(running, WAIT, "a checkpoint", || {
        try_read_summary(&out.out).filter(|s| summary_samples(s) > 0)
    });
    assert_eq!(
        checkpoint["target_exited"],
        serde_json::json!(false),
        "a checkpoint while the child runs: {checkpoint:#}"
    );
    let run = finish_bounded(running, Duration::from_secs(30));
    run.assert_no_panic();
    assert_eq!(
        run.code(),
        Some(7),
        "the recorded command exiting (status 7) ends the recording normally, and record \
         exits 7 as it did\n{}",
        run.describe()
    );
    let pid = wait_for_pid_file(&ready, Duration::from_secs(1));
    assert!(!process_exists(pid), "the child {pid} is still there");
    let (summary, folded) = assert_complete_outputs(&out.out);
    assert_eq!(
        summary["target_exited"],
        serde_json::json!(true),
        "{summary:#}"
    );
    assert_eq!(summary["exit_status"].as_i64(), Some(7), "{summary:#}");
    assert!(summary_samples(&summary) >= summary_samples(&checkpoint));
    assert!(
        folded.thread_function_total("MainThread", "spin_until_exit") > 0,
        "{}",
        folded.excerpt()
    );
    assert!(
        temp_files(&out.out).is_empty(),
        "temporary files left: {:?}",
        temp_files(&out.out)
    );
}

#[test]
fn attach_target_exiting_between_checkpoints() {
    let _serial = serial();
    // cpu_split runs 2.5 s in all, then exits 0.
    let fixture = Fixture::start("cpu_split.py", &["2.5"]);
    let pid = fixture.ready_pid();
    let out = OutDir::new();
    let running = attach_running(pid, &out, &["--flush-interval", "1"]);
    let (running, checkpoint) = wait_while_running(running, WAIT, "a checkpoint", || {
        try_read_summary(&out.out).filter(|s| summary_samples(s) > 0)
    });
    let run = running.finish(Duration::from_secs(30));
    run.assert_success();
    run.assert_no_panic();
    let (summary, folded) = assert_complete_outputs(&out.out);
    assert_eq!(
        summary["target_exited"],
        serde_json::json!(true),
        "{summary:#}"
    );
    assert!(summary["exit_status"].is_null(), "attach cannot know it");
    assert!(summary_samples(&summary) >= summary_samples(&checkpoint));
    assert!(
        folded.thread_function_total("MainThread", "hot_heavy") > 0,
        "{}",
        folded.excerpt()
    );
    assert!(
        temp_files(&out.out).is_empty(),
        "temporary files left: {:?}",
        temp_files(&out.out)
    );
}

// ---------------------------------------------------------------- record + SIGTERM

#[test]
fn record_sigterm_ends_the_child_and_writes_outputs() {
    let _serial = serial();
    let out = OutDir::new();
    let ready = out.tmp.path().join("ready");
    let _child = KillOnDrop::new(&ready, "cpu_split.py");
    let mut cmd = stackscope(&["record", "-o", out.arg(), "--flush-interval", "1", "--"]);
    cmd.arg("python3")
        .arg(fixture_path("cpu_split.py"))
        .arg(&ready)
        .env("PYTHONDONTWRITEBYTECODE", "1");
    let running = spawn_stackscope(cmd);
    let (running, _) = wait_while_running(running, WAIT, "a checkpoint", || {
        try_read_summary(&out.out).filter(|s| summary_samples(s) > 0)
    });
    let pid = wait_for_pid_file(&ready, Duration::from_secs(1));
    running.signal("TERM");
    let run = finish_bounded(running, FINISH);
    run.assert_no_panic();
    let deadline = Instant::now() + Duration::from_secs(5);
    while process_exists(pid) {
        if Instant::now() > deadline {
            kill_quietly(pid);
            panic!(
                "record left its child {pid} running after SIGTERM\n{}",
                run.describe()
            );
        }
        std::thread::sleep(Duration::from_millis(20));
    }
    run.assert_record_terminated();
    let (_, folded) = assert_complete_outputs(&out.out);
    assert!(
        folded.thread_function_total("MainThread", "hot_heavy") > 0,
        "{}",
        folded.excerpt()
    );
}

// ---------------------------------------------------------------- stopped by someone else

#[test]
fn target_stopped_by_sigstop_is_left_stopped_and_reported() {
    let _serial = serial();
    let fixture = Fixture::start("cpu_split.py", &[]);
    let pid = fixture.ready_pid();
    let out = OutDir::new();
    let running = attach_running(pid, &out, &["--flush-interval", "1"]);
    let (running, _) = wait_while_running(running, WAIT, "a checkpoint with samples", || {
        try_read_summary(&out.out).filter(|s| summary_samples(s) > 0)
    });

    send_signal(pid, "STOP");
    let stopped_at = Instant::now();
    wait_until(Duration::from_secs(5), "the target to stop", || {
        (state_of(pid) == Some('T')).then_some(())
    });
    let ticks = cpu_ticks(pid).expect("cpu ticks");
    // For about a second (two checkpoints) the target must stay stopped:
    // stackscope may look at it but never resume it.
    let text = fs::read_to_string(out.out.join("summary.json")).expect("summary");
    let (running, (text, during_a)) =
        wait_while_running(running, WAIT, "a checkpoint while stopped", || {
            assert!(
                matches!(state_of(pid), Some('T' | 't')),
                "the SIGSTOPped target was resumed: state {:?}",
                state_of(pid)
            );
            fs::read_to_string(out.out.join("summary.json"))
                .ok()
                .filter(|t| *t != text)
                .map(|t| {
                    let json: serde_json::Value = serde_json::from_str(&t).expect("JSON");
                    (t, json)
                })
        });
    let (running, during_b) =
        wait_while_running(running, WAIT, "another checkpoint while stopped", || {
            assert!(
                matches!(state_of(pid), Some('T' | 't')),
                "the SIGSTOPped target was resumed: state {:?}",
                state_of(pid)
            );
            fs::read_to_string(out.out.join("summary.json"))
                .ok()
                .filter(|t| *t != text)
                .map(|t| serde_json::from_str::<serde_json::Value>(&t).expect("JSON"))
        });
    while stopped_at.elapsed() < Duration::from_millis(1000) {
        std::thread::sleep(Duration::from_millis(50));
    }
    assert_eq!(
        state_of(pid),
        Some('T'),
        "the target should still be stopped after ~1 s"
    );
    assert_eq!(
        cpu_ticks(pid),
        Some(ticks),
        "the stopped target used CPU: it was resumed"
    );
    // Not sampled while stopped: between two checkpoints a second apart
    // the sample count did not move (allow one sample in flight).
    let (a, b) = (summary_samples(&during_a), summary_samples(&during_b));
    assert!(
        b <= a + 1,
        "samples grew from {a} to {b} while the target was stopped"
    );

    send_signal(pid, "CONT");
    let (running, _) = wait_while_running(running, WAIT, "samples after SIGCONT", || {
        try_read_summary(&out.out).filter(|s| summary_samples(s) > b + 20)
    });
    running.signal("INT");
    let run = running.finish(FINISH);
    run.assert_success();
    run.assert_no_panic();
    run.assert_stderr_contains(&format!("process {pid} is stopped"));
    run.assert_stderr_contains("sampling resumed");
    let (summary, _) = assert_complete_outputs(&out.out);
    let notices = summary["notices"].to_string().to_lowercase();
    assert!(
        notices.contains("stopped"),
        "summary notices should mention the stop: {}",
        summary["notices"]
    );
    assert_eq!(summary["target_exited"], serde_json::json!(false));
    assert_running_and_progressing(pid);
}

// ---------------------------------------------------------------- thread churn

#[test]
fn thread_churn_is_recorded_with_bounded_tables() {
    let _serial = serial();
    let fixture = Fixture::start("thread_churn.py", &["--functions", "300"]);
    let pid = fixture.ready_pid();
    let out = OutDir::new();
    let run = run_stackscope(
        &[
            "attach",
            "--pid",
            &pid.to_string(),
            "-o",
            out.arg(),
            "--duration",
            "5",
            "--rate",
            "100",
            "--flush-interval",
            "1",
        ],
        Duration::from_secs(60),
    );
    run.assert_success();
    run.assert_no_panic();
    let (summary, folded) = assert_complete_outputs(&out.out);
    let excerpt = folded.excerpt();

    let main = folded.thread_function_total("MainThread", "churn_main");
    assert!(main > 0, "churn_main on MainThread:\n{excerpt}");
    // The churn threads are one pool, `thread pool churn-N`, once one was seen ending.
    let churn: u64 = folded
        .threads()
        .into_iter()
        .filter(|(t, _)| t.starts_with("churn-") || t == "thread pool churn-N")
        .map(|(_, n)| n)
        .sum();
    assert!(
        churn >= 10 && folded.thread_total("thread pool churn-N") > 0,
        "only {churn} samples of churn threads in 5 s, or no churn-N:\n{excerpt}"
    );
    let generated = folded
        .stacks
        .iter()
        .filter(|s| s.frames.iter().any(|f| f.function.starts_with("f_")))
        .count();
    assert!(
        generated > 0,
        "no generated f_N function in the churn threads' stacks:\n{excerpt}"
    );

    // Errors (threads gone mid-read) are counted, not fatal.
    num(&summary["errors"]["total"], "errors.total");
    num(&summary["errors"]["thread_gone"], "errors.thread_gone");
    assert_eq!(summary["target_exited"], serde_json::json!(false));

    // The thread table is bounded: either it holds what was seen (a few
    // hundred here), or it says a cap was reached.
    let threads = summary["threads"].as_array().expect("threads");
    let caps = summary["caps_reached"].to_string().to_lowercase();
    assert!(
        threads.len() <= 10_001 || caps.contains("thread"),
        "{} threads listed and no thread cap reported",
        threads.len()
    );
    assert!(
        threads.iter().any(|t| t["name"] == "MainThread"),
        "MainThread in summary threads"
    );
    assert_running_and_progressing(pid);
}

/// Python reuses a thread's ident (its pthread_t) for the next thread, so a
/// profiler that caches names by ident labels new threads with old names. A
/// churn-N thread lives a few milliseconds, so at 100 Hz no churn-N name may
/// collect more samples than its life allows, in stacks.folded or in the
/// summary's thread list. The fixture logs each life as the wall time from just
/// before the thread's start to just after its join: on a loaded machine a
/// thread can sit preempted for tens of milliseconds and be sampled all along,
/// while a stale name collects samples of the threads after it, past its life.
#[test]
fn thread_churn_names_each_short_thread_by_its_own_name() {
    let _serial = serial();
    // One spawner, the main thread asleep: one churn thread at a time, each
    // working 1 to 5 ms (measured: alive under 10 ms on an idle machine),
    // about 300 a second.
    let out = OutDir::new();
    let life_log = out.tmp.path().join("lives.txt");
    let fixture = Fixture::start(
        "thread_churn.py",
        &[
            "--spawners",
            "1",
            "--min-ms",
            "1",
            "--max-ms",
            "5",
            "--main-sleeps",
            "--life-log",
            life_log.to_str().expect("utf-8 temp path"),
        ],
    );
    let pid = fixture.ready_pid();
    let run = run_stackscope(
        &[
            "attach",
            "--pid",
            &pid.to_string(),
            "-o",
            out.arg(),
            "--duration",
            "3",
            "--rate",
            "100",
        ],
        Duration::from_secs(60),
    );
    run.assert_success();
    run.assert_no_panic();
    let (summary, folded) = assert_complete_outputs(&out.out);
    let excerpt = folded.excerpt();
    // Once one was seen ending, the churn threads are their pool, `thread pool churn-N`: those started
    // before keep their own names, which must not be stale.
    let churn: Vec<(String, u64)> = folded
        .threads()
        .into_iter()
        .filter(|(name, _)| name.starts_with("churn-") && name != "churn-N")
        .collect();
    // A thread whose ident was just reused is shown by its OS id until its own name is read.
    let sampled: u64 = folded
        .threads()
        .into_iter()
        .filter(|(name, _)| name.starts_with("churn-") || name.starts_with("thread "))
        .map(|(_, n)| n)
        .sum();
    assert!(
        sampled >= 5,
        "only {sampled} samples of short-lived threads:\n{excerpt}"
    );
    // The last thread sampled may still be joining: its life is logged once it is.
    let names: Vec<&str> = churn.iter().map(|(name, _)| name.as_str()).collect();
    let lives = churn_lives(&life_log, &names);
    let short = lives.values().filter(|ms| **ms < 10.0).count();
    assert!(
        short * 2 >= lives.len(),
        "most churn threads should live under 10 ms, {short} of {} did: {lives:?}",
        lives.len()
    );
    // One tick at a random instant of each 10 ms period: a life of L ms spans at
    // most floor(L / 10) + 2 ticks.
    let allowed = |name: &str| lives.get(name).map_or(0, |ms| (ms / 10.0) as u64 + 2);
    let mut worst: Vec<(&str, u64, u64)> = churn
        .iter()
        .map(|(name, n)| (name.as_str(), *n, allowed(name)))
        .filter(|(_, n, allowed)| n > allowed)
        .collect();
    worst.sort_by_key(|(_, n, _)| std::cmp::Reverse(*n));
    assert!(
        worst.is_empty(),
        "short-lived threads with more samples than their life allows (stale names of \
         reused thread idents?), as (name, samples, allowed): {:?}\nlives: {:?}\n{excerpt}",
        &worst[..worst.len().min(10)],
        worst
            .iter()
            .map(|(name, ..)| (name, lives.get(*name)))
            .collect::<Vec<_>>()
    );
    for t in summary["threads"].as_array().expect("threads") {
        let name = t["name"].as_str().unwrap_or_default();
        if name.starts_with("churn-") && name != "churn-N" {
            let samples = num(&t["samples"], "samples") as u64;
            assert!(
                samples <= allowed(name),
                "summary lists {name} with {samples} samples, more than its life ({:?} ms) \
                 allows (stacks.folded has {}): {t}",
                lives.get(name),
                folded.thread_total(name)
            );
        }
    }
    assert_running_and_progressing(pid);
}

/// Each churn thread's life in ms, from the fixture's `--life-log`, once every one of
/// `names` is there.
fn churn_lives(log: &Path, names: &[&str]) -> HashMap<String, f64> {
    let what = format!("a life logged for each of {names:?} in {}", log.display());
    wait_until(Duration::from_secs(10), &what, || {
        let text = fs::read_to_string(log).unwrap_or_default();
        let lives: HashMap<String, f64> = text
            .lines()
            .filter_map(|line| {
                let (name, ms) = line.split_once(' ')?;
                Some((name.to_owned(), ms.parse().ok()?))
            })
            .collect();
        names
            .iter()
            .all(|n| lives.contains_key(*n))
            .then_some(lives)
    })
}

/// `record` learns its command's exit status however the command's exit
/// meets the sampler: while a sample holds it stopped or between samples.
/// (A sampler that waits on the stopped command can reap its exit first.)
/// A high rate makes the first more likely; a few rounds make it certain.
#[test]
fn record_exit_status_is_never_lost() {
    let _serial = serial();
    for round in 0..4 {
        let out = OutDir::new();
        let ready = out.tmp.path().join("ready");
        let _child = KillOnDrop::new(&ready, "exits_soon.py");
        let mut cmd = stackscope(&["record", "-o", out.arg(), "--rate", "1000", "--"]);
        cmd.arg("python3")
            .arg(fixture_path("exits_soon.py"))
            .arg(&ready)
            .args(["0.5", "5"])
            .env("PYTHONDONTWRITEBYTECODE", "1");
        let run = finish_bounded(spawn_stackscope(cmd), Duration::from_secs(60));
        run.assert_no_panic();
        assert_eq!(run.code(), Some(5), "round {round}\n{}", run.describe());
        let summary = read_summary(&out.out);
        assert_eq!(
            summary["exit_status"].as_i64(),
            Some(5),
            "round {round}: the exit status was lost\n{}\n{summary:#}",
            run.describe()
        );
        let secs = num(&summary["duration_secs"], "duration_secs");
        assert!(
            secs < 3.0,
            "round {round}: a 0.5 s command recorded as {secs} s (waiting for an exit status \
             that was reaped elsewhere?)"
        );
        assert!(
            run.elapsed < Duration::from_secs(8),
            "round {round}: record took {:?} for a 0.5 s command",
            run.elapsed
        );
    }
}
