//! A Python fixture process for the tests (the workspace's, `stackscope-testkit`): threads
//! blocked on a lock, killed on Drop.

#![allow(dead_code)]

use std::time::{Duration, Instant};

/// Holds a lock in the main thread forever; `worker` -> `wait_for_lock` blocks on it.
/// `deep` recurses through `map()` (each level a C call that re-enters the evaluation loop)
/// before blocking the same way, for a stack of a few dozen native frames. On "select" from
/// stdin, the main thread imports `select` (a shared library not loaded before) and blocks in
/// `select.select`.
pub const FIXTURE: &str = r#"
import os, sys, threading, time

lock = threading.Lock()
lock.acquire()

def wait_for_lock():
    lock.acquire()

def worker():
    wait_for_lock()

def deep(n):
    if n == 0:
        wait_for_lock()
        return [0]
    return list(map(deep, [n - 1]))

blocked = threading.Thread(target=worker, name="blocked", daemon=True)
blocked.start()
deep_thread = threading.Thread(target=deep, args=(6,), name="deep", daemon=True)
deep_thread.start()
while blocked.native_id is None or deep_thread.native_id is None:
    time.sleep(0.001)
print("ready", os.getpid(), blocked.native_id, deep_thread.native_id, flush=True)

def wait_in_select():
    import select
    print("selecting", flush=True)
    select.select([], [], [], 1000)

for line in sys.stdin:
    if line.strip() == "select":
        wait_in_select()
"#;

/// [`FIXTURE`] running, with a pipe to its stdin; killed on Drop.
pub struct Fixture {
    process: stackscope_testkit::python::Fixture,
    /// The interpreter's own pid (python3 may be a shim that execs it).
    pub pid: u32,
    pub blocked_tid: u32,
    pub deep_tid: u32,
}

impl Fixture {
    pub fn start() -> Fixture {
        let process = stackscope_testkit::python::Fixture::code(FIXTURE)
            .stdin()
            .start();
        let line = process.wait_ready();
        let fields: Vec<&str> = line.split_whitespace().collect();
        assert_eq!(fields.first(), Some(&"ready"), "fixture said {line:?}");
        Fixture {
            pid: process.pid,
            blocked_tid: fields[2].parse().expect("tid"),
            deep_tid: fields[3].parse().expect("tid"),
            process,
        }
    }

    /// The fixture's next line of output (within 20 s, a loaded machine).
    pub fn read_line(&mut self) -> String {
        self.process.read_line(Duration::from_secs(20))
    }

    pub fn send(&mut self, line: &str) {
        self.process.send(line);
    }

    /// Whether any thread of the fixture is stopped or traced.
    pub fn is_stopped_or_traced(&self) -> bool {
        let tasks = std::fs::read_dir(format!("/proc/{}/task", self.pid)).expect("tasks");
        for task in tasks {
            let path = task.expect("task").path();
            let stat = std::fs::read_to_string(path.join("stat")).unwrap_or_default();
            let state = stat.rsplit(") ").next().and_then(|s| s.chars().next());
            if matches!(state, Some('t' | 'T')) {
                return true;
            }
            let status = std::fs::read_to_string(path.join("status")).unwrap_or_default();
            let tracer = status
                .lines()
                .find_map(|l| l.strip_prefix("TracerPid:"))
                .map(str::trim);
            if tracer.is_some_and(|t| t != "0") {
                return true;
            }
        }
        false
    }
}

/// Retries `attempt` until it returns `Some` or `timeout` passes.
pub fn eventually<T>(timeout: Duration, mut attempt: impl FnMut() -> Option<T>) -> Option<T> {
    let deadline = Instant::now() + timeout;
    loop {
        if let Some(value) = attempt() {
            return Some(value);
        }
        if Instant::now() >= deadline {
            return None;
        }
        std::thread::sleep(Duration::from_millis(20));
    }
}
