//! A thread-per-request server read as what it is: the standard library's threaded HTTP server
//! (`fixtures/web_server.py`), whose handler waits on a slow backend (`slow_backend`, a sleep)
//! and renders a page, under concurrent requests from a client outside its tree.
//!
//! - Its request threads, each living a fraction of a second, are one pool: one root in
//!   `stacks.folded`, one entry in `summary.json` with how many threads it had and how many at
//!   a time, one lane on the page drawn as tall as the share of them alive.
//! - Without `--idle`, the waits left out outnumber the samples kept: the terminal and the
//!   summary say they wait in `slow_backend` and that `--idle` counts that time.
//! - With `--idle`, `slow_backend`'s share of the pool's samples is the share of the request
//!   threads' lives the server itself measured in it, within 10 points.
//!
//! Shapes are generated from parameters (concurrency, backend wait), one not tuned on.

use crate::common;

use std::path::Path;
use std::time::Duration;

use common::*;
use serde_json::Value;

const RUN_TIMEOUT: Duration = Duration::from_secs(90);
const POOL: &str = "thread pool process_request_thread";
/// How far `slow_backend`'s share may be from the server's own measure.
const SHARE_POINTS: f64 = 0.10;

/// A server under `concurrency` clients at once, its handler waiting `backend_ms` per request.
struct Server {
    _fixture: Fixture,
    _client: WebClient,
    pid: u32,
    stats: std::path::PathBuf,
    _dir: tempfile::TempDir,
}

impl Server {
    fn start(concurrency: u32, backend_ms: u32) -> Server {
        let dir = tempfile::tempdir().expect("temp dir");
        let stats = dir.path().join("stats.json");
        let stats_arg = stats.to_str().expect("utf-8 path").to_owned();
        let fixture = Fixture::start(
            "web_server.py",
            &[
                "--seconds",
                "60",
                "--concurrency",
                &concurrency.to_string(),
                "--backend-ms",
                &backend_ms.to_string(),
                "--rows",
                "400",
                "--stats",
                &stats_arg,
            ],
        );
        let ready = fixture.ready_json();
        let client = WebClient(ready["client"].as_u64().map(|p| p as u32));
        let pid = ready["pid"].as_u64().expect("the server's pid") as u32;
        Server {
            _fixture: fixture,
            _client: client,
            pid,
            stats,
            _dir: dir,
        }
    }

    /// The server's own measure so far: (request threads' lives, time in slow_backend), s.
    fn measure(&self) -> (f64, f64) {
        let text = std::fs::read_to_string(&self.stats).unwrap_or_default();
        let v: Value = serde_json::from_str(&text).unwrap_or(Value::Null);
        (
            v["thread_seconds"].as_f64().unwrap_or(0.0),
            v["backend_seconds"].as_f64().unwrap_or(0.0),
        )
    }

    /// Waits for the server's next measure (written every second).
    fn next_measure(&self) -> (f64, f64) {
        let before = self.measure();
        let deadline = std::time::Instant::now() + Duration::from_secs(5);
        loop {
            let now = self.measure();
            if now != before || std::time::Instant::now() > deadline {
                return now;
            }
            std::thread::sleep(Duration::from_millis(50));
        }
    }

    fn attach(&self, out: &OutDir, extra: &[&str]) -> Run {
        let pid = self.pid.to_string();
        let mut args = vec![
            "attach",
            "--pid",
            &pid,
            "--duration",
            "8",
            "--gpu",
            "off",
            "-o",
        ];
        args.push(out.arg());
        args.extend_from_slice(extra);
        let run = run_stackscope(&args, RUN_TIMEOUT);
        run.assert_success();
        run
    }
}

/// Samples of the pool's root, and of them those in `function`.
fn pool_samples(folded: &Folded, function: &str) -> (u64, u64) {
    let pool = folded.of_thread(POOL);
    pool.fold((0, 0), |(all, there), s| {
        (
            all + s.count,
            there + s.count * u64::from(s.has_function(function)),
        )
    })
}

fn pool_entry(summary: &Value) -> Value {
    summary["threads"]
        .as_array()
        .and_then(|t| t.iter().find(|t| t["name"] == POOL))
        .cloned()
        .unwrap_or_else(|| panic!("no entry {POOL}: {}", summary["threads"]))
}

fn check_pool_without_idle(concurrency: u32, backend_ms: u32) {
    let server = Server::start(concurrency, backend_ms);
    let out = OutDir::new();
    let run = server.attach(&out, &[]);
    let case = format!("{concurrency} at once, {backend_ms} ms backend");
    let folded = out.folded();
    // One root for the request threads: only one still alive at the end that started before
    // the first ended (the pool is known from then on) may keep its own.
    let threads = folded.threads();
    let own: Vec<(&String, &u64)> = threads
        .iter()
        .filter(|(t, _)| t.starts_with("Thread-"))
        .collect();
    let own_samples: u64 = own.iter().map(|(_, n)| **n).sum();
    assert!(
        own.len() <= 2 && own_samples * 10 <= folded.thread_total(POOL),
        "{case}: request threads apart: {own:?}"
    );
    let summary = out.summary();
    let pool = pool_entry(&summary);
    let threads = pool["threads"].as_u64().unwrap_or(0);
    let at_a_time = pool["at_a_time"].as_u64().unwrap_or(0);
    assert!(threads >= 10, "{case}: {pool}");
    assert!(
        (2..=u64::from(concurrency) + 3).contains(&at_a_time),
        "{case}: {pool}"
    );
    // The waits left out are named, and where they wait.
    let waits = &summary["waits_left_out"];
    let at = waits["at"].as_str().unwrap_or_default();
    assert!(
        at.starts_with("slow_backend (web_server.py:"),
        "{case}: {waits}"
    );
    assert!(
        run.stdout.contains("--idle counts that time") && run.stdout.contains("slow_backend"),
        "{case}: {}",
        run.describe()
    );
    assert!(run.stdout.contains(&format!("{POOL}: ")), "{}", run.stdout);
    // The page's lane of the pool knows how many were alive at once.
    let page = std::fs::read_to_string(Path::new(out.arg()).join("report.html")).expect("page");
    assert!(
        page.contains(&format!("\"name\":\"{POOL}\"")),
        "no lane of the pool"
    );
    assert!(page.contains("\"at_a_time\":"), "no lane of many threads");
}

#[test]
fn request_threads_are_one_pool_and_their_waits_are_named() {
    let _serial = serial();
    for &(concurrency, backend_ms) in &[(6, 200), (3, 120)] {
        check_pool_without_idle(concurrency, backend_ms);
    }
}

#[test]
fn with_idle_the_backend_takes_the_share_the_server_measures() {
    let _serial = serial();
    for &(concurrency, backend_ms) in &[(4, 200), (8, 60)] {
        let server = Server::start(concurrency, backend_ms);
        let out = OutDir::new();
        let before = server.next_measure();
        server.attach(&out, &["--idle"]);
        let after = server.measure();
        let lives = after.0 - before.0;
        let backend = after.1 - before.1;
        assert!(
            lives > 1.0,
            "the server measured nothing: {before:?} {after:?}"
        );
        let expected = backend / lives;
        let (all, there) = pool_samples(&out.folded(), "slow_backend");
        assert!(all > 100, "{all} samples of the pool");
        let share = there as f64 / all as f64;
        assert!(
            (share - expected).abs() <= SHARE_POINTS,
            "{concurrency} at once, {backend_ms} ms: slow_backend {share:.2} of the pool's \
             samples, the server measured {expected:.2}"
        );
    }
}

#[test]
fn threads_apart_keeps_each_request_thread() {
    let _serial = serial();
    let server = Server::start(4, 100);
    let out = OutDir::new();
    server.attach(&out, &["--threads-apart"]);
    let folded = out.folded();
    let own = folded
        .threads()
        .keys()
        .filter(|t| t.starts_with("Thread-") && t.ends_with("(process_request_thread)"))
        .count();
    assert!(own >= 10, "{own} request threads of their own");
    assert_eq!(folded.thread_total(POOL), 0);
}
