//! `stackscope record -- COMMAND`: start a Python program and profile it until
//! it exits.

use crate::common;

use common::*;
use std::fs;
use std::time::Duration;

const RUN_TIMEOUT: Duration = Duration::from_secs(60);

/// `stackscope record -o OUT EXTRA... -- python3 fixtures/FIXTURE ARGS...`
fn record(out: &OutDir, extra: &[&str], fixture: &str, args: &[&str]) -> Run {
    let script = fixture_path(fixture);
    let mut cmd = stackscope(&["record", "-o", out.arg()]);
    cmd.args(extra)
        .arg("--")
        .arg("python3")
        .arg(&script)
        .args(args)
        .env("PYTHONDONTWRITEBYTECODE", "1");
    run_with_timeout(cmd, RUN_TIMEOUT)
}

#[test]
fn record_cpu_split_until_it_exits() {
    let _serial = serial();
    let out = OutDir::new();
    let ready = out.tmp.path().join("ready");
    let ready = ready.to_str().expect("utf-8");
    let run = record(&out, &["--rate", "100"], "cpu_split.py", &[ready, "2"]);
    run.assert_success();
    run.assert_no_panic();
    assert!(
        run.elapsed < Duration::from_secs(15),
        "record took {:?} for a 2 s program",
        run.elapsed
    );
    let pid: u32 = fs::read_to_string(ready)
        .expect("the child wrote its ready file")
        .trim()
        .parse()
        .expect("pid in ready file");
    assert!(!process_exists(pid), "the child {pid} is still there");

    let summary = out.summary();
    assert_eq!(
        summary["target_exited"],
        serde_json::json!(true),
        "{summary:#}"
    );
    assert_eq!(summary["exit_status"].as_i64(), Some(0), "{summary:#}");
    assert_eq!(summary["pid"].as_u64(), Some(pid as u64), "{summary:#}");
    let command_line = summary["command_line"].to_string();
    assert!(
        command_line.contains("cpu_split.py"),
        "command_line {command_line}"
    );

    let folded = out.folded();
    let excerpt = folded.excerpt();
    let main = folded.thread_total("MainThread") as f64;
    // About 2 s at 100 Hz, from the start of the program.
    assert!(
        (80.0..=260.0).contains(&main),
        "{main} samples for ~2 s at 100 Hz:\n{excerpt}"
    );
    let heavy = folded.thread_function_total("MainThread", "hot_heavy") as f64 / main;
    assert!(
        (0.5..=0.9).contains(&heavy),
        "hot_heavy share {heavy:.3}:\n{excerpt}"
    );
    assert_eq!(num(&summary["samples"], "samples") as u64, folded.total());
    for file in ["flamegraph.svg", "stacks.folded", "summary.json"] {
        assert!(out.out.join(file).is_file(), "{file} missing");
    }
}

/// A launcher that wraps a job in `record` sees the job's status: its exit status, or 128 + N
/// when signal N ended it; and the recording is written all the same.
#[test]
fn record_exits_with_the_command_status() {
    for (status, exit_status, exit_signal, code) in
        [("3", Some(3), None, 3), ("SIGTERM", None, Some(15), 143)]
    {
        let out = OutDir::new();
        let ready = out.tmp.path().join("ready");
        let ready = ready.to_str().expect("utf-8");
        let run = record(&out, &[], "exits_soon.py", &[ready, "1", status]);
        run.assert_no_panic();
        assert_eq!(run.code(), Some(code), "{status}\n{}", run.describe());
        let summary = out.summary();
        assert_eq!(
            summary["target_exited"],
            serde_json::json!(true),
            "{summary:#}"
        );
        assert_eq!(summary["exit_status"].as_i64(), exit_status, "{summary:#}");
        assert_eq!(summary["exit_signal"].as_i64(), exit_signal, "{summary:#}");
        let folded = out.folded();
        assert!(
            folded.thread_function_total("MainThread", "spin_until_exit") > 0,
            "{status}: {}",
            folded.excerpt()
        );
    }
}

/// A command that ends before any Python ran: its own status, with one line saying that
/// nothing was recorded; and stackscope's own failures apart from any command's.
#[test]
fn record_keeps_its_own_failures_apart_from_the_command_status() {
    let out = OutDir::new();
    let run = run_stackscope(
        &["record", "-o", out.arg(), "--", "sh", "-c", "exit 3"],
        RUN_TIMEOUT,
    );
    run.assert_error(3);
    run.assert_stderr_contains("nothing was recorded");
    let out_arg = out.out.join("o");
    let out_arg = out_arg.to_str().expect("utf-8");
    let not_executable = out.tmp.path().join("not-executable");
    fs::write(&not_executable, "#!/bin/sh\n").expect("write");
    let not_executable = not_executable.to_str().expect("utf-8");
    for (command, code) in [
        ("/nonexistent/stackscope-no-such-cmd", 127),
        (not_executable, 126),
    ] {
        let run = run_stackscope(&["record", "-o", out_arg, "--", command], RUN_TIMEOUT);
        run.assert_error(code);
        run.assert_stderr_contains(command);
    }
    let help = run_stackscope(&["record", "--help"], RUN_TIMEOUT);
    help.assert_success();
    for promise in ["128+N", "125", "126", "127"] {
        assert!(help.stdout.contains(promise), "{promise}\n{}", help.stdout);
    }
}

#[test]
fn record_train_sim_splits_loading_and_compute() {
    let _serial = serial();
    let out = OutDir::new();
    // --gpu off: no GPU section, whatever the machine has.
    let run = record(&out, &["--gpu", "off"], "train_sim.py", &["--seconds", "2"]);
    run.assert_success();
    let folded = out.folded();
    let excerpt = folded.excerpt();
    let main = folded.thread_total("MainThread") as f64;
    assert!(main > 50.0, "{main} samples:\n{excerpt}");
    let load = folded.thread_function_total("MainThread", "load_batch") as f64 / main;
    let step = folded.thread_function_total("MainThread", "train_step") as f64 / main;
    assert!(
        (0.45..=0.75).contains(&load),
        "load_batch share {load:.3}:\n{excerpt}"
    );
    assert!(
        (0.25..=0.55).contains(&step),
        "train_step share {step:.3}:\n{excerpt}"
    );
    let summary = out.summary();
    assert_eq!(summary["exit_status"].as_i64(), Some(0), "{summary:#}");
    assert!(
        summary["gpu"].is_null(),
        "gpu with --gpu off: {}",
        summary["gpu"]
    );
}

#[test]
fn record_sigint_ends_the_child_too() {
    let out = OutDir::new();
    let ready = out.tmp.path().join("ready");
    let mut cmd = stackscope(&["record", "-o", out.arg(), "--"]);
    cmd.arg("python3")
        .arg(fixture_path("cpu_split.py"))
        .arg(&ready)
        .env("PYTHONDONTWRITEBYTECODE", "1");
    let running = spawn_stackscope(cmd);
    let deadline = std::time::Instant::now() + READY_TIMEOUT;
    let pid: u32 = loop {
        if let Ok(text) = fs::read_to_string(&ready) {
            if let Ok(pid) = text.trim().parse() {
                break pid;
            }
        }
        assert!(
            std::time::Instant::now() < deadline,
            "the recorded child never became ready"
        );
        std::thread::sleep(Duration::from_millis(20));
    };
    std::thread::sleep(Duration::from_millis(1000));
    running.signal("INT");
    let run = running.finish(Duration::from_secs(15));
    run.assert_no_panic();
    // The child must be gone (or, at worst, a zombie about to be reaped).
    let deadline = std::time::Instant::now() + Duration::from_secs(5);
    while process_exists(pid) {
        if std::time::Instant::now() > deadline {
            send_signal(pid, "KILL");
            panic!(
                "record left its child {pid} running after SIGINT\n{}",
                run.describe()
            );
        }
        std::thread::sleep(Duration::from_millis(20));
    }
    // The status of the command, which the SIGINT that ends it ended.
    run.assert_command_interrupted();
    let folded = out.folded();
    assert!(
        folded.thread_function_total("MainThread", "hot_heavy") > 0,
        "{}",
        folded.excerpt()
    );
}
