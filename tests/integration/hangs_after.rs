//! Hangs seen after the fact: `watch` started on a job that already looks stuck says since
//! when it watched and what it can still infer of what it did not see (a pool worker that
//! started long after its siblings replaced one that ended); `dump` says when every thread of
//! a process waits on a lock and none runs, and who holds the locks where an RLock records it.

use crate::common;
use crate::hang_diagnosis::{ready_u32, wait_for_report, watch_command, RUN_TIMEOUT};

use common::*;
use serde_json::Value;
use std::fs;
use std::path::Path;
use std::thread;
use std::time::{Duration, Instant};

/// Waits until thread `tid` of `pid` has ended: a fixture's ready writer, whose end would
/// otherwise be a change of the job's stacks.
fn wait_thread_gone(pid: u32, tid: u32) {
    let deadline = Instant::now() + Duration::from_secs(10);
    while Path::new(&format!("/proc/{pid}/task/{tid}")).exists() {
        assert!(
            Instant::now() < deadline,
            "thread {tid} of {pid} never ended"
        );
        thread::sleep(Duration::from_millis(20));
    }
}

/// A started fixture whose ready writer has ended, and what its ready file said.
fn settled(fixture: &Fixture) -> Value {
    let ready = fixture.ready_json();
    let pid = ready_u32(&ready["pid"], "pid");
    wait_thread_gone(pid, ready_u32(&ready["writer"], "writer"));
    ready
}

// ---------------------------------------------------------------- a pool that lost a worker

/// A hang report of up to seven processes, each dumped with native frames and locals: generous,
/// since a debug build symbolizes each process's libraries anew, on a machine others load too.
const REPORT_WITHIN: Duration = Duration::from_secs(90);

/// What `watch` wrote of a hang: the report's text and JSON.
fn watch_report(pid: u32) -> (String, Value) {
    let out = OutDir::new();
    let mut running = spawn_stackscope(watch_command(pid, &out, &[]));
    let found = wait_for_report(&mut running, &out.out, Instant::now() + REPORT_WITHIN);
    running.signal("INT");
    let run = running.finish(RUN_TIMEOUT);
    let txt = found.unwrap_or_else(|| panic!("no hang report\n{}", run.describe()));
    run.assert_success();
    let text = fs::read_to_string(&txt).expect("report text");
    let json = fs::read_to_string(txt.with_extension("json")).expect("report json");
    (text, serde_json::from_str(&json).expect("report JSON"))
}

/// A pool of `workers` whose worker was killed before `watch` started: the report says since
/// when it watched, and names the worker that started long after its siblings.
fn a_pool_that_lost_a_worker_before_the_watch(workers: usize) {
    let _serial = serial();
    let count = workers.to_string();
    let fixture = Fixture::start(
        "pool_lost_before.py",
        &["--workers", &count, "--after", "3"],
    );
    let ready = settled(&fixture);
    let pid = ready_u32(&ready["pid"], "pid");
    let replacement = ready_u32(&ready["replacement"], "replacement");
    let (text, json) = watch_report(pid);
    let line = marker_line(&fixture_source("pool_lost_before.py"), "pool-map");
    let first = text.lines().next().unwrap_or_default();
    assert!(
        first.starts_with(&format!(
            "Stuck in Pool.map (pool_lost_before.py:{line}) since "
        )),
        "{text}"
    );
    let siblings = format!(" s after its {} siblings (at ", workers - 1);
    assert!(
        first.contains(&format!("; worker pid {replacement} started "))
            && first.contains(&siblings),
        "{text}"
    );
    assert!(
        first.ends_with(
            "it replaced a worker that ended then, and the task that worker held may be lost."
        ),
        "{text}"
    );
    let since = json["watching_since"].as_str().expect("watching_since");
    let clock = since.get(11..19).expect("an RFC 3339 time");
    assert!(
        text.contains(&format!(
            "\nwatching since {clock}; what happened before is unknown\n"
        )),
        "{text}"
    );
    let cause = &json["cause"];
    assert_eq!(cause["kind"], "worker_replaced", "{json:#}");
    assert_eq!(cause["pid"], replacement, "{json:#}");
    assert_eq!(cause["parent"], pid, "{json:#}");
    assert_eq!(
        cause["siblings"].as_array().map(Vec::len),
        Some(workers - 1),
        "{json:#}"
    );
    assert_eq!(json["replaced_before_watching"][0]["pid"], replacement);
    assert!(json["frozen_before_watching"].is_boolean(), "{json:#}");
    assert_eq!(json["processes_ended"], serde_json::json!([]), "{json:#}");
}

#[test]
fn watch_of_a_pool_of_3_that_lost_a_worker_before_it_began_names_the_replacement() {
    a_pool_that_lost_a_worker_before_the_watch(3);
}

#[test]
fn watch_of_a_pool_of_6_that_lost_a_worker_before_it_began_names_the_replacement() {
    a_pool_that_lost_a_worker_before_the_watch(6);
}

/// `dump` of the same tree says it too; the workers that started together are not named.
#[test]
fn dump_names_the_worker_that_started_long_after_its_siblings() {
    let _serial = serial();
    let fixture = Fixture::start("pool_lost_before.py", &["--workers", "3", "--after", "3"]);
    let ready = settled(&fixture);
    let pid = ready_u32(&ready["pid"], "pid").to_string();
    let replacement = ready_u32(&ready["replacement"], "replacement");
    let run = run_stackscope(&["dump", "--pid", &pid], RUN_TIMEOUT);
    run.assert_success();
    let first = run.stdout.lines().next().unwrap_or_default();
    assert!(
        first.starts_with(&format!("Worker pid {replacement} started "))
            && first.contains(" s after its 2 siblings (at "),
        "{}",
        run.stdout
    );
    assert_eq!(run.stdout.matches(" started ").count(), 1, "{}", run.stdout);
    let run = run_stackscope(&["dump", "--pid", &pid, "--json"], RUN_TIMEOUT);
    run.assert_success();
    let doc: Value = serde_json::from_str(&run.stdout).expect("dump JSON");
    assert_eq!(doc["late_starts"][0]["pid"], replacement, "{doc:#}");
    assert_eq!(doc["late_starts"].as_array().map(Vec::len), Some(1));
}

// ---------------------------------------------------------------- every thread on a lock

/// `dump` of a ring of `threads` threads, each holding its lock and waiting on the next one's
/// (`extra`: the fixture's options beside these).
fn dump_of_a_ring(threads: usize, kind: &str, extra: &[&str]) -> (Value, String) {
    let count = threads.to_string();
    let mut args = vec!["--threads", &count, "--kind", kind];
    args.extend_from_slice(extra);
    let fixture = Fixture::start("lock_ring.py", &args);
    let ready = settled(&fixture);
    let pid = ready_u32(&ready["pid"], "pid");
    let run = run_stackscope(&["dump", "--pid", &pid.to_string()], RUN_TIMEOUT);
    run.assert_success();
    (ready, run.stdout)
}

/// The ring's thread names in order: thread i waits on the lock thread i + 1 holds.
fn ring_names(threads: usize) -> Vec<String> {
    (0..threads)
        .map(|i| match i {
            0 => "MainThread".to_owned(),
            i => format!("ring-{i}"),
        })
        .collect()
}

fn a_ring_of_rlocks(threads: usize) {
    let (ready, out) = dump_of_a_ring(threads, "rlock", &[]);
    let pid = ready_u32(&ready["pid"], "pid");
    let first = out.lines().next().unwrap_or_default();
    assert!(
        first.starts_with(&format!(
            "All {threads} threads of process {pid} wait on locks and none runs: a deadlock if \
             it lasts, which `watch` confirms. "
        )),
        "{out}"
    );
    let names = ring_names(threads);
    for (i, name) in names.iter().enumerate() {
        let holder = &names[(i + 1) % threads];
        let said = [
            format!("{name} waits on an RLock held by {holder}"),
            format!("{name} on one held by {holder}"),
        ];
        assert!(
            said.iter()
                .any(|s| first.contains(&format!("{s};")) || first.contains(&format!("{s}."))),
            "{name} should wait on {holder}'s RLock: {out}"
        );
    }
}

#[test]
fn dump_of_two_threads_deadlocked_on_rlocks_says_so_and_who_holds_them() {
    a_ring_of_rlocks(2);
}

#[test]
fn dump_of_three_threads_in_a_ring_of_rlocks_says_so_and_who_holds_them() {
    a_ring_of_rlocks(3);
}

/// A `threading.Lock` records no owner: the line says what is known.
#[test]
fn dump_of_threads_deadlocked_on_plain_locks_says_the_owners_are_not_known() {
    let (ready, out) = dump_of_a_ring(2, "lock", &[]);
    let pid = ready_u32(&ready["pid"], "pid");
    let first = out.lines().next().unwrap_or_default();
    assert_eq!(
        first,
        format!(
            "All 2 threads of process {pid} wait on locks and none runs: a deadlock if it \
             lasts, which `watch` confirms. Who holds the locks is not known: only a \
             threading.RLock records its owner, read where the waiting frame holds it in a \
             variable."
        ),
        "{out}"
    );
}

/// Waits with a time limit end by themselves: no line.
#[test]
fn dump_of_threads_waiting_on_locks_with_a_time_limit_says_nothing_of_a_deadlock() {
    let (_, out) = dump_of_a_ring(2, "rlock", &["--timeout", "600"]);
    assert!(!out.contains("none runs"), "{out}");
    assert!(out.contains("(idle, waiting on a lock)"), "{out}");
}

/// A process with a sleeping thread beside its deadlocked ones: not every thread waits on a
/// lock, and the dump says nothing of one.
#[test]
fn dump_of_a_process_with_a_sleeping_thread_says_nothing_of_locks() {
    let fixture = Fixture::start("deadlock.py", &[]);
    let pid = ready_u32(&fixture.ready_json()["pid"], "pid").to_string();
    let run = run_stackscope(&["dump", "--pid", &pid], RUN_TIMEOUT);
    run.assert_success();
    assert!(
        run.stdout.contains(&format!("Process {pid}: ")) && !run.stdout.contains("none runs"),
        "{}",
        run.stdout
    );
}

/// `watch` confirms it: the hang report's cause is a deadlock, each thread with the holder of
/// the RLock it waits on.
#[test]
fn watch_confirms_the_deadlock_of_a_ring_of_rlocks_with_their_holders() {
    let _serial = serial();
    let fixture = Fixture::start("lock_ring.py", &["--threads", "2"]);
    let ready = settled(&fixture);
    let pid = ready_u32(&ready["pid"], "pid");
    let (text, json) = watch_report(pid);
    let cause = &json["cause"];
    assert_eq!(cause["kind"], "deadlock", "{json:#}");
    let held_by = |thread: &str| -> Vec<Value> {
        cause["threads"]
            .as_array()
            .and_then(|t| t.iter().find(|t| t["thread"] == thread))
            .and_then(|t| t["held_by"].as_array().cloned())
            .unwrap_or_default()
    };
    assert_eq!(held_by("MainThread"), vec!["ring-1"], "{json:#}");
    assert_eq!(held_by("ring-1"), vec!["MainThread"], "{json:#}");
    let first = text.lines().next().unwrap_or_default();
    assert!(first.contains(", on an RLock held by ring-1"), "{text}");
}
