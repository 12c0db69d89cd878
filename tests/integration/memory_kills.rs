//! An OOM kill with its climb: a Pool worker of `fixtures/pool_loses_worker.py --how climb`
//! climbs at 50 MB/s in `grow_cache` inside a memory cgroup limited to 256 MiB until the
//! kernel's OOM killer ends it (a real kill, as in `hang_causes`), and the pool's parent then
//! waits forever for the task it held. `watch` and `attach` follow the job at once: the hang
//! report's `processes_ended` entry and the recording's summary both give the worker's climb
//! and the function it ran.

use crate::common;
use crate::hang_causes::{Go, MemoryCgroup};
use crate::hang_diagnosis::{reports, watch_command, HANG_AFTER_SECS, RUN_TIMEOUT};
use crate::memory::{findings, memory_of, pid_of};
use crate::watch_gpu::{free_port, scrape};

use std::fs;
use std::thread;
use std::time::{Duration, Instant};

use common::*;
use serde_json::Value;

const LIMIT: u64 = 256 << 20;
const MB_PER_S: f64 = 50.0;
/// How long `attach` records: the wait for GO, the climb (about 5 s) and the kill.
const ATTACH_SECS: &str = "14";

#[test]
fn an_oom_killed_worker_has_its_climb_and_function_in_the_hang_report_and_the_summary() {
    let _serial = serial();
    let Some(cgroup) = MemoryCgroup::limited(LIMIT) else {
        return;
    };
    let go = Go::new("climb");
    let rate = MB_PER_S.to_string();
    let fixture = Fixture::start(
        "pool_loses_worker.py",
        &["--how", "climb", go.arg(), "--grow-mb-per-s", &rate],
    );
    let ready = fixture.ready_json();
    let (pid, worker) = (
        pid_of(&ready["pid"], "pid"),
        pid_of(&ready["worker"], "worker"),
    );
    cgroup.add_tree(pid);
    let watch_out = OutDir::new();
    let port = free_port();
    let addr = format!("127.0.0.1:{port}");
    let mut watching = spawn_stackscope(watch_command(
        pid,
        &watch_out,
        &["--subprocesses", "--metrics-addr", &addr],
    ));
    let attach_out = OutDir::new();
    let pid_arg = pid.to_string();
    let attaching = spawn_stackscope(stackscope(&[
        "attach",
        "--pid",
        &pid_arg,
        "--duration",
        ATTACH_SECS,
        "--gpu",
        "off",
        "-o",
        attach_out.arg(),
    ]));
    wait_until_read(port, &[pid, worker]);
    // A second of flat memory before the climb, for both to read.
    thread::sleep(Duration::from_secs(1));
    go.go();
    let found = wait_for_report_naming(
        &mut watching,
        &watch_out.out,
        worker,
        Instant::now() + Duration::from_secs(HANG_AFTER_SECS + 30),
    );
    watching.signal("INT");
    let watched = watching.finish(RUN_TIMEOUT);
    let txt = found.unwrap_or_else(|| panic!("no hang report\n{}", watched.describe()));
    watched.assert_success();
    assert_report_has_the_climb(&txt, worker);
    let attached = attaching.finish(Duration::from_secs(60));
    attached.assert_success();
    assert_summary_has_the_climb(&attach_out.summary(), worker, &attached);
    drop(fixture);
    drop(cgroup);
}

/// Waits until `watch`'s metrics page lists every pid of `pids` (it has read them).
fn wait_until_read(port: u16, pids: &[u32]) {
    let deadline = Instant::now() + Duration::from_secs(30);
    let all_read = |page: &str| {
        pids.iter()
            .all(|p| page.contains(&format!("stackscope_hung{{pid=\"{p}\"")))
    };
    while !scrape(port).is_some_and(|page| all_read(&page)) {
        assert!(Instant::now() < deadline, "watch never read {pids:?}");
        thread::sleep(Duration::from_millis(100));
    }
}

/// The first hang report of `dir` whose `processes_ended` names `pid` (one written before it
/// ended, where the job looked stuck a moment, is not this one); `None` past `deadline` or
/// once `watch` ended.
fn wait_for_report_naming(
    running: &mut Running,
    dir: &std::path::Path,
    pid: u32,
    deadline: Instant,
) -> Option<std::path::PathBuf> {
    let names = |txt: &std::path::PathBuf| {
        fs::read_to_string(txt.with_extension("json"))
            .ok()
            .and_then(|json| serde_json::from_str::<Value>(&json).ok())
            .is_some_and(|json| {
                json["processes_ended"]
                    .as_array()
                    .is_some_and(|e| e.iter().any(|p| p["pid"] == pid))
            })
    };
    loop {
        if let Some(txt) = reports(dir).into_iter().find(names) {
            return Some(txt);
        }
        if Instant::now() > deadline || matches!(running.child.try_wait(), Ok(Some(_))) {
            return None;
        }
        thread::sleep(Duration::from_millis(50));
    }
}

/// The hang report: the worker OOM-killed, with its memory's climb and `grow_cache`.
fn assert_report_has_the_climb(txt: &std::path::Path, worker: u32) {
    let text = fs::read_to_string(txt).expect("report text");
    let json: Value =
        serde_json::from_str(&fs::read_to_string(txt.with_extension("json")).expect("report json"))
            .expect("report JSON");
    let entry = json["processes_ended"]
        .as_array()
        .and_then(|e| e.iter().find(|p| p["pid"] == worker))
        .unwrap_or_else(|| panic!("{worker} not in processes_ended: {json:#}"));
    assert_eq!(entry["how"], "oom_killed", "{entry:#}");
    let memory = &entry["memory"];
    let (first, last, peak) = (
        num(&memory["rss_first"], "rss_first"),
        num(&memory["rss_last"], "rss_last"),
        num(&memory["rss_peak"], "rss_peak"),
    );
    // It climbed most of the way to the limit (its siblings and parent hold the rest).
    assert!(
        last - first >= 0.5 * LIMIT as f64 && peak >= last,
        "{memory:#}"
    );
    let rate = num(&memory["growth_bytes_per_s"], "growth_bytes_per_s");
    assert!(
        (rate - MB_PER_S * 1e6).abs() <= 0.15 * MB_PER_S * 1e6,
        "{rate} B/s, not {MB_PER_S} MB/s: {memory:#}"
    );
    let readings = memory["readings"].as_array().expect("readings");
    assert!(readings.len() >= 20, "{memory:#}");
    let last_reading = &readings[readings.len() - 1];
    assert_eq!(last_reading[1], memory["rss_last"], "{memory:#}");
    let climb_secs =
        num(&memory["secs"], "secs") - num(&memory["climb_from_secs"], "climb_from_secs");
    assert!((3.0..=8.0).contains(&climb_secs), "{memory:#}");
    let ran = &memory["ran"][0];
    assert!(
        ran["function"]
            .as_str()
            .is_some_and(|f| f.starts_with("grow_cache (pool_loses_worker.py:"))
            && num(&ran["share"], "share") >= 0.8,
        "{memory:#}"
    );
    let line = text
        .lines()
        .skip_while(|l| !l.contains(&format!("pid {worker} ended: oom_killed")))
        .nth(1)
        .unwrap_or_default();
    assert!(
        line.starts_with("  its memory: ") && line.contains("while it ran grow_cache ("),
        "{text}"
    );
}

/// The summary: the worker OOM-killed, its climb and `grow_cache`.
fn assert_summary_has_the_climb(summary: &Value, worker: u32, run: &Run) {
    let ended = summary["processes_ended"]
        .as_array()
        .and_then(|e| e.iter().find(|p| p["pid"] == worker))
        .unwrap_or_else(|| panic!("{worker} not in processes_ended: {summary:#}"));
    assert_eq!(ended["how"], "oom_killed", "{summary:#}");
    let memory = memory_of(summary);
    let killed = findings(memory, "oom_killed");
    let context = format!("{memory:#}\n{}", run.describe());
    let finding = killed
        .iter()
        .find(|f| f["pid"] == worker)
        .unwrap_or_else(|| panic!("no oom_killed finding for {worker}: {context}"));
    let grew = num(&finding["to_bytes"], "to_bytes") - num(&finding["from_bytes"], "from_bytes");
    assert!(grew >= 0.5 * LIMIT as f64, "{context}");
    assert!(
        finding["top_function"]
            .as_str()
            .is_some_and(|f| f.starts_with("grow_cache (pool_loses_worker.py:")),
        "{context}"
    );
    assert!(
        finding["text"]
            .as_str()
            .is_some_and(|t| t.contains("OOM") && t.contains("grow_cache")),
        "{context}"
    );
    assert!(
        run.stdout.contains(&format!("pid {worker}")) && run.stdout.contains("grow_cache"),
        "the terminal names the kill: {context}"
    );
}
