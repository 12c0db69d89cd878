//! Hangs said why: a busy thread is not stuck, a recording that froze late is, and a job that
//! hangs because one of its processes vanished gets a report naming the process, how it
//! ended and when (`processes_ended`, `cause`); a plain deadlock is `deadlock`.

use crate::common;
use crate::hang_diagnosis::{
    looks_hung_lines, ready_u32, reports, wait_for_report, watch_command, HANG_AFTER_SECS,
    RUN_TIMEOUT,
};

use crate::watch_gpu::{free_port, scrape};

use common::*;
use serde_json::Value;
use std::fs;
use std::thread;
use std::time::{Duration, Instant};

// ---------------------------------------------------------------- busy is not stuck

/// `while True: zlib.compress(data, 9)`: one frozen line, always on a CPU.
#[test]
fn a_zlib_compress_loop_is_busy_not_stuck() {
    let _serial = serial();
    let fixture = Fixture::start("busy_compress.py", &[]);
    let pid = ready_u32(&fixture.ready_json()["pid"], "pid");
    let line = marker_line(&fixture_source("busy_compress.py"), "compress");
    // watch: no report in three times --hang-after.
    let out = OutDir::new();
    let mut running = spawn_stackscope(watch_command(pid, &out, &[]));
    let found = wait_for_report(
        &mut running,
        &out.out,
        Instant::now() + Duration::from_secs(3 * HANG_AFTER_SECS),
    );
    running.signal("INT");
    let run = running.finish(RUN_TIMEOUT);
    run.assert_success();
    assert!(
        found.is_none() && looks_hung_lines(&run.stdout).is_empty(),
        "a report for a job that keeps compressing: {:?}\n{}",
        found.and_then(|p| fs::read_to_string(p).ok()),
        run.describe()
    );
    assert!(reports(&out.out).is_empty());
    // attach: its stack is the same line all along, and the summary says nothing of stuck.
    let out = OutDir::new();
    let pid_arg = pid.to_string();
    let run = run_stackscope(
        &[
            "attach",
            "--pid",
            &pid_arg,
            "--duration",
            "5",
            "--gpu",
            "off",
            "-o",
            out.arg(),
        ],
        RUN_TIMEOUT,
    );
    run.assert_success();
    assert!(
        !run.stdout.contains("Stuck") && !run.stderr.contains("Stuck"),
        "{}",
        run.describe()
    );
    let summary = out.summary();
    assert!(summary["stuck"].is_null(), "{summary:#}");
    let folded = out.folded();
    assert!(
        folded.stacks.iter().any(|s| s
            .innermost()
            .is_some_and(|f| f.line == Some(line) && f.function == "pack")),
        "the compress line is where it is:\n{}",
        folded.excerpt()
    );
}

/// Worked 3 s, then froze (blocked on a lock) for 33 s of a 36 s recording: stuck.
#[test]
fn a_recording_that_moved_then_froze_for_its_last_30_s_is_stuck() {
    let _serial = serial();
    let fixture = Fixture::start("hangs_later.py", &["--work-secs", "3"]);
    let pid = ready_u32(&fixture.ready_json()["pid"], "pid").to_string();
    let out = OutDir::new();
    let run = run_stackscope(
        &[
            "attach",
            "--pid",
            &pid,
            "--duration",
            "36",
            "--rate",
            "20",
            "--gpu",
            "off",
            "-o",
            out.arg(),
        ],
        Duration::from_secs(80),
    );
    run.assert_success();
    let summary = out.summary();
    let stuck = &summary["stuck"];
    assert_eq!(stuck["whole_recording"], false, "{summary:#}");
    let unchanged = stuck["unchanged_secs"].as_f64().unwrap_or(0.0);
    assert!((30.0..=34.0).contains(&unchanged), "{summary:#}");
    let line = marker_line(&fixture_source("hangs_later.py"), "stuck-here");
    assert_eq!(
        stuck["threads"][0]["frame"],
        format!("stuck_here (hangs_later.py:{line})"),
        "{summary:#}"
    );
}

// ---------------------------------------------------------------- a process vanished

/// What `watch` wrote about a hang: the report's text and JSON.
struct Report {
    text: String,
    json: Value,
}

/// Watches `pid` until every pid of `followed` is read (the metrics page lists it), then runs
/// `act` (the death) and waits for the hang report.
fn watch_through(pid: u32, followed: &[u32], act: impl FnOnce()) -> Report {
    let out = OutDir::new();
    let port = free_port();
    let addr = format!("127.0.0.1:{port}");
    let mut running = spawn_stackscope(watch_command(
        pid,
        &out,
        &["--subprocesses", "--metrics-addr", &addr],
    ));
    let deadline = Instant::now() + Duration::from_secs(30);
    let all_read = |page: &str| {
        followed
            .iter()
            .all(|p| page.contains(&format!("stackscope_hung{{pid=\"{p}\"")))
    };
    while !scrape(port).is_some_and(|page| all_read(&page)) {
        assert!(Instant::now() < deadline, "watch never read {followed:?}");
        thread::sleep(Duration::from_millis(100));
    }
    act();
    let found = wait_for_report(
        &mut running,
        &out.out,
        Instant::now() + Duration::from_secs(HANG_AFTER_SECS + 30),
    );
    running.signal("INT");
    let run = running.finish(RUN_TIMEOUT);
    let txt = found.unwrap_or_else(|| panic!("no hang report\n{}", run.describe()));
    run.assert_success();
    let text = fs::read_to_string(&txt).expect("report text");
    let json = fs::read_to_string(txt.with_extension("json")).expect("report json");
    Report {
        text,
        json: serde_json::from_str(&json).expect("report JSON"),
    }
}

/// A `GO` file for a fixture to wait on, removed on Drop.
pub(crate) struct Go(std::path::PathBuf);

impl Go {
    pub(crate) fn new(what: &str) -> Go {
        Go(std::env::temp_dir().join(format!(
            "stackscope-go-{what}-{}-{:?}",
            std::process::id(),
            Instant::now()
        )))
    }

    pub(crate) fn arg(&self) -> &str {
        self.0.to_str().expect("utf-8 temp path")
    }

    pub(crate) fn go(&self) {
        fs::write(&self.0, "go").expect("write GO");
    }
}

impl Drop for Go {
    fn drop(&mut self) {
        let _ = fs::remove_file(&self.0);
    }
}

/// The pool job whose worker dies by `how`; gives the report and the dead worker's pid.
fn pool_job_report(how: &str, cgroup: Option<&MemoryCgroup>) -> (Report, u32) {
    let go = Go::new(how);
    let fixture = Fixture::start("pool_loses_worker.py", &["--how", how, go.arg()]);
    let ready = fixture.ready_json();
    let pid = ready_u32(&ready["pid"], "pid");
    let worker = ready_u32(&ready["worker"], "worker");
    if let Some(cg) = cgroup {
        cg.add_tree(pid);
    }
    let report = watch_through(pid, &[pid, worker], || go.go());
    (report, worker)
}

/// Asserts the report names the vanished worker, how it ended, and the replacement.
fn assert_worker_vanished(report: &Report, worker: u32, how: &str, words: &str) {
    let (text, json) = (&report.text, &report.json);
    let line = marker_line(&fixture_source("pool_loses_worker.py"), "pool-map");
    let first = text.lines().next().unwrap_or_default();
    assert!(
        first.starts_with(&format!(
            "Stuck in Pool.map (pool_loses_worker.py:{line}) since "
        )),
        "{text}"
    );
    assert!(
        first.contains(&format!("worker pid {worker} vanished ({words}")),
        "{text}"
    );
    assert!(first.ends_with(": the task it held is lost."), "{text}");
    let cause = &json["cause"];
    assert_eq!(cause["kind"], "process_vanished", "{json:#}");
    assert_eq!(cause["pid"], worker, "{json:#}");
    assert_eq!(cause["how"], how, "{json:#}");
    assert!(cause["replaced_by"].as_u64().is_some(), "{json:#}");
    let ended = json["processes_ended"].as_array().expect("processes_ended");
    let entry = ended
        .iter()
        .find(|p| p["pid"] == worker)
        .unwrap_or_else(|| panic!("{worker} not in processes_ended: {json:#}"));
    assert_eq!(entry["how"], how);
    assert_eq!(entry["role"], "worker");
    for field in ["started", "ended"] {
        assert!(
            entry[field].as_str().is_some_and(|t| t.contains('T')),
            "{entry}"
        );
    }
}

#[test]
fn a_pool_worker_killed_by_sigkill_is_named_in_the_hang_report() {
    let _serial = serial();
    let (report, worker) = pool_job_report("kill", None);
    assert_worker_vanished(&report, worker, "killed by SIGKILL", "killed by SIGKILL");
}

#[test]
fn a_pool_worker_that_raises_and_exits_1_is_named_in_the_hang_report() {
    let _serial = serial();
    let (report, worker) = pool_job_report("exit1", None);
    assert_worker_vanished(&report, worker, "exited 1", "exited with status 1");
}

/// A memory cgroup made for one test (v1 here, else v2), removed on Drop.
pub(crate) struct MemoryCgroup {
    dir: std::path::PathBuf,
}

impl MemoryCgroup {
    /// A group limited to `limit` bytes; `None` (said in one line) where neither hierarchy
    /// lets us make one.
    pub(crate) fn limited(limit: u64) -> Option<MemoryCgroup> {
        let name = format!("stackscope-test-{}", std::process::id());
        let v1 = std::path::Path::new("/sys/fs/cgroup/memory");
        let v2 = std::path::Path::new("/sys/fs/cgroup");
        let v2_memory = fs::read_to_string(v2.join("cgroup.controllers"))
            .is_ok_and(|c| c.split_whitespace().any(|c| c == "memory"));
        let (dir, limit_file) = if v1.join("memory.limit_in_bytes").exists() {
            (v1.join(&name), "memory.limit_in_bytes")
        } else if v2_memory {
            (v2.join(&name), "memory.max")
        } else {
            eprintln!("skipped: no memory cgroup (v1 or v2) to make here");
            return None;
        };
        if let Err(e) = fs::create_dir(&dir) {
            eprintln!(
                "skipped: cannot make a memory cgroup at {}: {e}",
                dir.display()
            );
            return None;
        }
        let cg = MemoryCgroup { dir };
        fs::write(cg.dir.join(limit_file), limit.to_string()).expect("set the limit");
        Some(cg)
    }

    /// Moves `pid` and its descendants into the group.
    pub(crate) fn add_tree(&self, pid: u32) {
        let mut all = vec![pid];
        let mut i = 0;
        while i < all.len() {
            let children = fs::read_to_string(format!("/proc/{}/task/{}/children", all[i], all[i]))
                .unwrap_or_default();
            all.extend(
                children
                    .split_whitespace()
                    .filter_map(|p| p.parse::<u32>().ok()),
            );
            i += 1;
        }
        for p in all {
            fs::write(self.dir.join("cgroup.procs"), p.to_string()).expect("move into the cgroup");
        }
    }
}

impl Drop for MemoryCgroup {
    fn drop(&mut self) {
        // Its processes (the fixture's) are killed first by the fixture's Drop; a group with
        // processes left cannot be removed, so wait a moment for them to go.
        for _ in 0..50 {
            if fs::remove_dir(&self.dir).is_ok() {
                return;
            }
            thread::sleep(Duration::from_millis(100));
        }
    }
}

#[test]
fn a_pool_worker_killed_by_the_oom_killer_is_named_in_the_hang_report() {
    let _serial = serial();
    let Some(cgroup) = MemoryCgroup::limited(256 << 20) else {
        return;
    };
    let (report, worker) = pool_job_report("oom", Some(&cgroup));
    assert_worker_vanished(&report, worker, "oom_killed", "killed by the OOM killer: ");
    drop(cgroup);
}

/// Three ranks (RANK, LOCAL_RANK, WORLD_SIZE=3) in a collective stand-in; rank 1 killed.
#[test]
fn a_rank_killed_mid_collective_is_named_missing_with_its_peers_frame() {
    let _serial = serial();
    let fixture = Fixture::start("ranks_lose_one.py", &[]);
    let ready = fixture.ready_json();
    let pid = ready_u32(&ready["pid"], "pid");
    let rank = |r: &str| ready_u32(&ready["ranks"][r], "rank");
    let (r0, r1, r2) = (rank("0"), rank("1"), rank("2"));
    let report = watch_through(pid, &[r0, r1, r2], || send_signal(r1, "KILL"));
    let line = marker_line(&fixture_source("ranks_lose_one.py"), "all-reduce");
    let first = report.text.lines().next().unwrap_or_default();
    assert!(
        first.contains(&format!("rank 1 (pid {r1}) is gone (killed by SIGKILL at "))
            && first.ends_with(&format!(
                "); ranks 0 and 2 wait in all_reduce (ranks_lose_one.py:{line})."
            )),
        "{}",
        report.text
    );
    let cause = &report.json["cause"];
    assert_eq!(cause["kind"], "process_vanished", "{:#}", report.json);
    assert_eq!(cause["rank"], 1);
    assert_eq!(cause["role"], "rank 1");
    assert_eq!(cause["peers"]["ranks"], serde_json::json!([0, 2]));
    assert!(report.json["processes_ended"].as_array().is_some_and(|e| e
        .iter()
        .any(|p| p["pid"] == r1 && p["how"] == "killed by SIGKILL")));
}

/// A plain deadlock: `deadlock`, and nothing said about processes.
#[test]
fn a_plain_deadlock_is_a_deadlock() {
    let _serial = serial();
    let fixture = Fixture::start("deadlock.py", &[]);
    let pid = ready_u32(&fixture.ready_json()["pid"], "pid");
    let report = watch_through(pid, &[pid], || {});
    let cause = &report.json["cause"];
    assert_eq!(cause["kind"], "deadlock", "{:#}", report.json);
    let frames: Vec<&str> = cause["threads"]
        .as_array()
        .expect("threads")
        .iter()
        .filter_map(|t| t["frame"].as_str())
        .collect();
    let source = fixture_source("deadlock.py");
    for name in ["deadlock-a", "deadlock-b"] {
        let line = marker_line(&source, name);
        assert!(
            frames
                .iter()
                .any(|f| f.ends_with(&format!("(deadlock.py:{line})"))),
            "{name}: {frames:?}"
        );
    }
    assert_eq!(report.json["processes_ended"], serde_json::json!([]));
    let first = report.text.lines().next().unwrap_or_default();
    assert!(first.contains("a deadlock"), "{}", report.text);
    assert!(!report.text.contains("vanished"), "{}", report.text);
}

/// `record --subprocesses`: the tree's history reaches `summary.json`'s `processes_ended`.
#[test]
fn record_keeps_how_a_worker_ended_in_the_summary() {
    let _serial = serial();
    let go = Go::new("record");
    let out = OutDir::new();
    let ready = out.tmp.path().join("ready");
    let port = free_port();
    let addr = format!("127.0.0.1:{port}");
    let fixture = repo_root().join("fixtures/pool_loses_worker.py");
    let (ready_arg, fixture_arg) = (
        ready.to_str().expect("utf-8"),
        fixture.to_str().expect("utf-8"),
    );
    let running = spawn_stackscope(stackscope(&[
        "record",
        "--subprocesses",
        "--gpu",
        "off",
        "--duration",
        "10",
        "--metrics-addr",
        &addr,
        "-o",
        out.arg(),
        "--",
        "python3",
        fixture_arg,
        ready_arg,
        "--how",
        "kill",
        go.arg(),
    ]));
    let deadline = Instant::now() + Duration::from_secs(30);
    while !ready.exists() {
        assert!(Instant::now() < deadline, "the job never got ready");
        thread::sleep(Duration::from_millis(50));
    }
    let said: Value =
        serde_json::from_str(&fs::read_to_string(&ready).expect("ready")).expect("ready JSON");
    let worker = ready_u32(&said["worker"], "worker");
    let read = format!("stackscope_hung{{pid=\"{worker}\"");
    while !scrape(port).is_some_and(|page| page.contains(&read)) {
        assert!(Instant::now() < deadline, "record never read the worker");
        thread::sleep(Duration::from_millis(100));
    }
    go.go();
    let run = running.finish(Duration::from_secs(40));
    // --duration ends the hung job (SIGINT, then SIGKILL when a pool does not end): record's
    // status is 0, or the job's own, 130 or 137.
    assert!(
        matches!(run.code(), Some(0 | 130 | 137)),
        "{}",
        run.describe()
    );
    run.assert_no_panic();
    let summary = out.summary();
    let ended = summary["processes_ended"]
        .as_array()
        .unwrap_or_else(|| panic!("no processes_ended: {summary:#}"));
    let entry = ended
        .iter()
        .find(|p| p["pid"] == worker)
        .unwrap_or_else(|| panic!("{worker} not in processes_ended: {summary:#}"));
    assert_eq!(entry["how"], "killed by SIGKILL", "{entry}");
    assert_eq!(entry["role"], "worker", "{entry}");
    assert!(
        entry["ended"].as_str().is_some_and(|t| t.contains('T')),
        "{entry}"
    );
}
