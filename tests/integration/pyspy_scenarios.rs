//! py-spy's own integration scenarios (py-spy 0.4.3, `tests/integration_test.rs`), as
//! stackscope commands, where they cover something the rest of the suite does not. The
//! fixtures are stackscope's own, written to the same scenarios:
//!
//! | py-spy test                          | here                                              |
//! | ------------------------------------ | ------------------------------------------------- |
//! | test_subprocesses_zombiechild        | a_zombie_child_does_not_break_a_tree_dump         |
//! | test_dump_subprocesses_no_duplication| a_tree_dump_lists_each_process_and_thread_once    |
//! | test_thread_names_unnamed_threads    | threads_threading_does_not_know_have_no_name      |
//! | test_thread_names_late_import        | importing_threading_late_names_every_sample       |
//! | test_delayed_subprocess              | proc_trees: record_subprocesses_follows_python_started_late_by_a_shell_script |
//! | test_thread_reuse                    | proc_trees: threads_that_reuse_a_python_thread_id_are_separate_summary_entries |

use crate::common;

use common::*;
use std::collections::HashSet;
use std::fs;
use std::time::Duration;

const WAIT: Duration = Duration::from_secs(30);

#[test]
fn a_zombie_child_does_not_break_a_tree_dump() {
    let _serial = serial();
    let fixture = Fixture::start("zombie_child.py", &[]);
    let ready = fixture.ready_json();
    let zombie = num(&ready["zombie"], "zombie") as u64;
    let pid = fixture.pid.to_string();
    let run = run_stackscope(&["dump", "--pid", &pid, "--subprocesses", "--json"], WAIT);
    run.assert_success();
    let dump: serde_json::Value = serde_json::from_str(&run.stdout).expect("dump JSON");
    // A tree of one Python process prints as that process.
    let pids: Vec<u64> = match dump["processes"].as_array() {
        Some(processes) => processes.iter().filter_map(|p| p["pid"].as_u64()).collect(),
        None => dump["pid"].as_u64().into_iter().collect(),
    };
    assert_eq!(
        pids,
        vec![u64::from(fixture.pid)],
        "the zombie {zombie} runs nothing"
    );
    let run = run_stackscope(&["dump", "--pid", &pid, "--subprocesses"], WAIT);
    run.assert_success();
    assert!(run.stdout.contains("parent_sleeps"), "{}", run.describe());
}

#[test]
fn a_tree_dump_lists_each_process_and_thread_once() {
    let _serial = serial();
    let fixture = Fixture::start("mp_tree.py", &[]);
    let ready = fixture.ready_json();
    let run = run_stackscope(
        &[
            "dump",
            "--pid",
            &fixture.pid.to_string(),
            "--subprocesses",
            "--json",
        ],
        WAIT,
    );
    run.assert_success();
    let dump: serde_json::Value = serde_json::from_str(&run.stdout).expect("dump JSON");
    let processes = dump["processes"].as_array().expect("processes");
    let mut pids = HashSet::new();
    let mut threads = HashSet::new();
    for p in processes {
        let pid = p["pid"].as_u64().expect("pid");
        assert!(
            pids.insert(pid),
            "process {pid} listed twice:\n{}",
            run.stdout
        );
        for t in p["threads"].as_array().expect("threads") {
            let tid = t["os_thread_id"].as_u64().expect("os_thread_id");
            assert!(
                threads.insert(tid),
                "thread {tid} listed twice:\n{}",
                run.stdout
            );
        }
    }
    let mut expected: HashSet<u64> = ready["children"]
        .as_object()
        .expect("children")
        .values()
        .filter_map(serde_json::Value::as_u64)
        .collect();
    expected.insert(u64::from(fixture.pid));
    assert_eq!(pids, expected);
}

#[test]
fn threads_threading_does_not_know_have_no_name() {
    let _serial = serial();
    let fixture = Fixture::start("unnamed_threads.py", &[]);
    let run = run_stackscope(&["dump", "--pid", &fixture.pid.to_string(), "--json"], WAIT);
    run.assert_success();
    let dump: serde_json::Value = serde_json::from_str(&run.stdout).expect("dump JSON");
    let mut names: Vec<Option<String>> = dump["threads"]
        .as_array()
        .expect("threads")
        .iter()
        .map(|t| t["name"].as_str().map(str::to_owned))
        .collect();
    names.sort();
    let expected: Vec<Option<String>> = [
        None,
        None,
        Some("MainThread"),
        Some("NamedThread-0"),
        Some("NamedThread-1"),
        Some("NamedThread-2"),
    ]
    .into_iter()
    .map(|n| n.map(str::to_owned))
    .collect();
    assert_eq!(names, expected);
    // The text names the unnamed ones by their OS id, with no empty name.
    let run = run_stackscope(&["dump", "--pid", &fixture.pid.to_string()], WAIT);
    run.assert_success();
    assert!(!run.stdout.contains("\"\""), "{}", run.stdout);
}

#[test]
fn importing_threading_late_names_every_sample() {
    let _serial = serial();
    let tmp = tempfile::tempdir().expect("temp dir");
    let trigger = tmp.path().join("trigger");
    let fixture = Fixture::start("late_import.py", &[trigger.to_str().expect("utf-8")]);
    let pid = fixture.pid;
    // Before threading is imported, py-spy gives the main thread no name; ours is the one
    // threading gives it when it is imported.
    let run = run_stackscope(&["dump", "--pid", &pid.to_string(), "--json"], WAIT);
    run.assert_success();
    let dump: serde_json::Value = serde_json::from_str(&run.stdout).expect("dump JSON");
    assert_eq!(dump["threads"][0]["name"], "MainThread", "{}", run.stdout);

    let out = OutDir::new();
    let running = spawn_stackscope(stackscope(&[
        "attach",
        "--pid",
        &pid.to_string(),
        "--flush-interval",
        "1",
        "-o",
        out.arg(),
    ]));
    let (running, _) = wait_while_running(running, WAIT, "samples before the import", || {
        try_read_summary(&out.out).filter(|s| summary_samples(s) > 30)
    });
    fs::write(&trigger, "go").expect("trigger");
    let imported = fixture.dir.path().join("imported");
    let (running, _) =
        wait_while_running(running, WAIT, "the import", || fs::metadata(&imported).ok());
    let seen = summary_samples(&read_summary(&out.out));
    let (running, _) = wait_while_running(running, WAIT, "samples after the import", || {
        try_read_summary(&out.out).filter(|s| summary_samples(s) > seen + 30)
    });
    running.signal("INT");
    let run = finish_bounded(running, Duration::from_secs(30));
    run.assert_success();
    let (summary, folded) = assert_complete_outputs(&out.out);
    // Where py-spy shows the thread twice (`thread N` before, `MainThread` after), every
    // sample is under the name once it is known.
    assert_eq!(
        folded.threads().keys().collect::<Vec<_>>(),
        vec!["MainThread"],
        "{}",
        folded.excerpt()
    );
    assert!(folded.thread_function_total("MainThread", "before_threading") > 0);
    assert!(folded.thread_function_total("MainThread", "after_threading") > 0);
    let threads = summary["threads"].as_array().expect("threads");
    assert_eq!(threads.len(), 1, "{}", summary["threads"]);
    assert_eq!(threads[0]["name"], "MainThread");
}

/// py-spy's `record` scenarios (a sleeping and a busy script, a bash launcher, `-X importtime`,
/// spawned workers, asyncio): `record --duration` ends each as asked, writes the recording
/// with the scenario's own function in it, and exits 0, as `py-spy record --duration` does.
#[test]
fn record_duration_ends_each_scenario_with_status_0() {
    let _serial = serial();
    let busy = "def busy():\n    while True:\n        sum(range(1000))\nbusy()\n";
    let sleeps =
        "import time\ndef sleeper():\n    while True:\n        time.sleep(0.05)\nsleeper()\n";
    let asyncio = "import asyncio\nasync def crunch():\n    while True:\n        \
                   sum(range(1000))\n        await asyncio.sleep(0)\nasyncio.run(crunch())\n";
    let tmp = tempfile::tempdir().expect("temp dir");
    let ready = tmp.path().join("ready");
    let pool = fixture_path("spawn_pool.py");
    let bash_line = format!("python3 -c '{busy}'");
    let scenarios: [(&str, Vec<&str>, &str); 6] = [
        (
            "a sleeping script",
            vec!["--idle", "--", "python3", "-c", sleeps],
            "sleeper",
        ),
        ("a busy script", vec!["--", "python3", "-c", busy], "busy"),
        (
            "a bash launcher",
            vec!["--", "bash", "-c", &bash_line],
            "busy",
        ),
        (
            "-X importtime",
            vec!["--", "python3", "-X", "importtime", "-c", busy],
            "busy",
        ),
        (
            "spawned workers",
            vec![
                "--idle",
                "--",
                "python3",
                pool.to_str().expect("utf-8"),
                ready.to_str().expect("utf-8"),
            ],
            "feed_worker",
        ),
        ("asyncio", vec!["--", "python3", "-c", asyncio], "crunch"),
    ];
    for (scenario, args, function) in scenarios {
        let out = OutDir::new();
        let mut cmd = stackscope(&["record", "--duration", "2", "--gpu", "off", "-o", out.arg()]);
        cmd.args(&args).env("PYTHONDONTWRITEBYTECODE", "1");
        let run = run_with_timeout(cmd, WAIT);
        run.assert_duration_ended();
        let folded = out.folded();
        assert!(
            folded.stacks.iter().any(|s| s.has_function(function)),
            "{scenario}: no {function} in the recording\n{}",
            folded.excerpt()
        );
        // The job is its process tree: the terminal and summary.json say how many processes
        // were followed (the pool: main, three workers, the resource tracker).
        let followed = num(&out.summary()["processes_followed"], "processes_followed") as u64;
        let least = if scenario == "spawned workers" { 4 } else { 1 };
        assert!(
            followed >= least,
            "{scenario}: {followed} processes followed"
        );
        assert!(
            run.stdout
                .contains(&format!("Processes followed: {followed}\n")),
            "{scenario}:\n{}",
            run.stdout
        );
    }
}
