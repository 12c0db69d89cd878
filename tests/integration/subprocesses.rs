//! `--subprocesses`: children created after stackscope attached are sampled,
//! each process a root frame (`process PID COMMAND`) of the flamegraph.

use crate::common;

use common::*;
use std::fs;
use std::path::{Path, PathBuf};
use std::time::Duration;

const WAIT: Duration = Duration::from_secs(30);
const FINISH: Duration = Duration::from_secs(20);

struct Files {
    trigger: PathBuf,
    child_pid: PathBuf,
    /// The child also ends by itself once its parent is gone; this is for a
    /// test that fails half-way.
    _child: KillOnDrop,
}

fn files(dir: &Path) -> Files {
    let child_pid = dir.join("child-pid");
    Files {
        trigger: dir.join("trigger"),
        _child: KillOnDrop::new(&child_pid, "python"),
        child_pid,
    }
}

fn checkpoint_with_samples(dir: &Path) -> Option<serde_json::Value> {
    try_read_summary(dir).filter(|s| summary_samples(s) > 0)
}

/// The entry of `pid` in the summary's "processes".
fn process_entry(summary: &serde_json::Value, pid: u32) -> Option<&serde_json::Value> {
    summary["processes"]
        .as_array()?
        .iter()
        .find(|p| p["pid"].as_u64() == Some(pid as u64))
}

/// Stops `running` once a checkpoint shows `child` with enough samples, and
/// checks the result: both processes are roots with their own functions.
/// `record` exits with its command's status: 130 after the SIGINT that ends it.
fn finish_and_check(running: Running, out: &OutDir, parent: u32, child: u32, record: bool) {
    // Until a checkpoint lists the child with some samples; past the wait,
    // stop anyway and let the checks below say what is missing.
    let (running, _) = poll_while_running(
        running,
        WAIT,
        &format!("a checkpoint with samples of the child {child} in \"processes\""),
        || {
            let summary = try_read_summary(&out.out)?;
            let samples = num(&process_entry(&summary, child)?["samples"], "samples");
            (samples >= 30.0).then_some(())
        },
    );
    running.signal("INT");
    let run = finish_bounded(running, FINISH);
    if record {
        run.assert_command_interrupted();
    } else {
        run.assert_success();
    }
    run.assert_no_panic();

    let (summary, folded) = assert_complete_outputs(&out.out);
    let excerpt = folded.excerpt();
    for stack in &folded.stacks {
        assert!(
            stack
                .process
                .as_deref()
                .and_then(process_root_pid)
                .is_some(),
            "following the tree, every stack is rooted at `process PID COMMAND`: {}",
            stack.raw
        );
    }
    let of = |pid: u32| {
        folded
            .stacks
            .iter()
            .filter(move |s| s.process.as_deref().and_then(process_root_pid) == Some(pid))
    };
    let child_busy: u64 = of(child)
        .filter(|s| s.has_function("child_busy_loop"))
        .map(|s| s.count)
        .sum();
    assert!(
        child_busy > 0,
        "the child {child} should be a root with child_busy_loop:\n{excerpt}"
    );
    let parent_loop: u64 = of(parent)
        .filter(|s| s.has_function("parent_loop"))
        .map(|s| s.count)
        .sum();
    assert!(
        parent_loop > 0,
        "the parent {parent} should be a root with parent_loop:\n{excerpt}"
    );
    assert!(
        !of(parent).any(|s| s.has_function("child_busy_loop")),
        "child_busy_loop under the parent's root:\n{excerpt}"
    );
    assert!(
        !of(child).any(|s| s.has_function("parent_loop")),
        "parent_loop under the child's root:\n{excerpt}"
    );
    // The thread comes right below the process root.
    assert!(
        of(child).all(|s| s.thread == "MainThread"),
        "the child's stacks should be `process ...;MainThread;...`:\n{excerpt}"
    );

    for pid in [parent, child] {
        let entry = process_entry(&summary, pid)
            .unwrap_or_else(|| panic!("pid {pid} in summary processes: {}", summary["processes"]));
        assert!(
            num(&entry["samples"], "samples") > 0.0,
            "process {pid}: {entry}"
        );
        let root_total: u64 = of(pid).map(|s| s.count).sum();
        assert_eq!(
            num(&entry["samples"], "samples") as u64,
            root_total,
            "samples of process {pid} in summary vs its root in stacks.folded"
        );
        assert!(entry["exited"].is_boolean(), "exited: {entry}");
        assert!(entry["command_line"].is_string(), "command_line: {entry}");
    }
    let parent_entry = process_entry(&summary, parent).expect("parent");
    assert!(
        parent_entry["command_line"]
            .as_str()
            .is_some_and(|c| c.contains("spawns_child.py")),
        "parent command_line: {parent_entry}"
    );
    assert_eq!(parent_entry["exited"], serde_json::json!(false));
}

fn attach_sees_child_created_after_attach(method: &str) {
    let _serial = serial();
    let tmp = tempfile::tempdir().expect("temp dir");
    let f = files(tmp.path());
    let fixture = Fixture::start(
        "spawns_child.py",
        &[
            f.trigger.to_str().expect("utf-8"),
            f.child_pid.to_str().expect("utf-8"),
            method,
        ],
    );
    let parent = fixture.ready_pid();
    let out = OutDir::new();
    let running = spawn_stackscope(stackscope(&[
        "attach",
        "--pid",
        &parent.to_string(),
        "-o",
        out.arg(),
        "--subprocesses",
        "--flush-interval",
        "1",
    ]));
    // Attached and sampling before the child exists.
    let (running, _) = wait_while_running(running, WAIT, "a first checkpoint", || {
        checkpoint_with_samples(&out.out)
    });
    assert!(
        !f.child_pid.exists(),
        "the child should not exist before the trigger"
    );
    fs::write(&f.trigger, "go").expect("trigger");
    let (running, child) = wait_while_running(running, WAIT, "the child's pid file", || {
        fs::read_to_string(&f.child_pid)
            .ok()?
            .trim()
            .parse::<u32>()
            .ok()
    });
    finish_and_check(running, &out, parent, child, false);
    assert_not_stopped(parent);
    assert_not_stopped(child);
}

#[test]
fn attach_subprocesses_sees_a_forked_child_created_after_attach() {
    attach_sees_child_created_after_attach("fork");
}

#[test]
fn attach_subprocesses_sees_a_spawned_child_created_after_attach() {
    attach_sees_child_created_after_attach("spawn");
}

#[test]
fn record_subprocesses_sees_a_child() {
    let _serial = serial();
    let out = OutDir::new();
    let f = files(out.tmp.path());
    let ready = out.tmp.path().join("ready");
    let _parent = KillOnDrop::new(&ready, "spawns_child.py");
    let mut cmd = stackscope(&[
        "record",
        "-o",
        out.arg(),
        "--subprocesses",
        "--flush-interval",
        "1",
        "--",
    ]);
    cmd.arg("python3")
        .arg(fixture_path("spawns_child.py"))
        .arg(&ready)
        .arg(&f.trigger)
        .arg(&f.child_pid)
        .env("PYTHONDONTWRITEBYTECODE", "1");
    let running = spawn_stackscope(cmd);
    let (running, _) = wait_while_running(running, WAIT, "a first checkpoint", || {
        checkpoint_with_samples(&out.out)
    });
    let parent = wait_for_pid_file(&ready, Duration::from_secs(5));
    fs::write(&f.trigger, "go").expect("trigger");
    let (running, child) = wait_while_running(running, WAIT, "the child's pid file", || {
        fs::read_to_string(&f.child_pid)
            .ok()?
            .trim()
            .parse::<u32>()
            .ok()
    });
    finish_and_check(running, &out, parent, child, true);
    // Ctrl-C ends the recorded command; its child follows its parent.
    let gone = |pid: u32| {
        wait_until(
            Duration::from_secs(5),
            &format!("process {pid} to end"),
            || (!process_exists(pid)).then_some(()),
        )
    };
    gone(parent);
    gone(child);
}

#[test]
fn no_subprocesses_leaves_the_child_unsampled() {
    let _serial = serial();
    let tmp = tempfile::tempdir().expect("temp dir");
    let f = files(tmp.path());
    let fixture = Fixture::start(
        "spawns_child.py",
        &[
            f.trigger.to_str().expect("utf-8"),
            f.child_pid.to_str().expect("utf-8"),
        ],
    );
    let parent = fixture.ready_pid();
    let out = OutDir::new();
    let running = spawn_stackscope(stackscope(&[
        "attach",
        "--pid",
        &parent.to_string(),
        "--no-subprocesses",
        "-o",
        out.arg(),
        "--flush-interval",
        "1",
    ]));
    let (running, _) = wait_while_running(running, WAIT, "a first checkpoint", || {
        checkpoint_with_samples(&out.out)
    });
    fs::write(&f.trigger, "go").expect("trigger");
    let (running, child) = wait_while_running(running, WAIT, "the child's pid file", || {
        fs::read_to_string(&f.child_pid)
            .ok()?
            .trim()
            .parse::<u32>()
            .ok()
    });
    // Two more checkpoints (over a second) while the child runs.
    let mut last = fs::read_to_string(out.out.join("summary.json")).expect("summary");
    let mut running = running;
    for _ in 0..2 {
        let (r, text) = wait_while_running(running, WAIT, "a checkpoint", || {
            fs::read_to_string(out.out.join("summary.json"))
                .ok()
                .filter(|t| *t != last)
        });
        running = r;
        last = text;
    }
    assert!(process_exists(child), "the child {child} should still run");
    running.signal("INT");
    let run = finish_bounded(running, FINISH);
    run.assert_success();
    run.assert_no_panic();
    let (summary, folded) = assert_complete_outputs(&out.out);
    let excerpt = folded.excerpt();
    assert!(
        !folded
            .stacks
            .iter()
            .any(|s| s.has_function("child_busy_loop")),
        "child_busy_loop sampled with --no-subprocesses:\n{excerpt}"
    );
    assert!(
        folded.thread_function_total("MainThread", "parent_loop") > 0,
        "the parent's MainThread in parent_loop (threads are the roots):\n{excerpt}"
    );
    assert!(
        process_entry(&summary, child).is_none(),
        "the child in summary processes with --no-subprocesses: {}",
        summary["processes"]
    );
    assert_eq!(summary["processes_followed"], 1, "{summary:#}");
    assert_not_stopped(parent);
    assert_not_stopped(child);
}
