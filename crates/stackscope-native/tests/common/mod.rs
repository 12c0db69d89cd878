//! A Python fixture process for the tests: threads blocked on a lock, killed on Drop.

#![allow(dead_code)]

use std::io::{BufRead, BufReader, Write};
use std::process::{Child, ChildStdin, ChildStdout, Command, Stdio};
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

pub struct Fixture {
    child: Child,
    stdin: ChildStdin,
    /// Kept open for the child's life: closing it would kill the child with BrokenPipe at its
    /// next print.
    stdout: BufReader<ChildStdout>,
    /// The interpreter's own pid (python3 may be a shim that execs it).
    pub pid: u32,
    pub blocked_tid: u32,
    pub deep_tid: u32,
}

impl Fixture {
    pub fn start() -> Fixture {
        let mut child = Command::new("python3")
            .arg("-c")
            .arg(FIXTURE)
            .stdin(Stdio::piped())
            .stdout(Stdio::piped())
            .spawn()
            .expect("python3 starts");
        let stdin = child.stdin.take().expect("stdin piped");
        let stdout = BufReader::new(child.stdout.take().expect("stdout piped"));
        let mut fixture = Fixture {
            child,
            stdin,
            stdout,
            pid: 0,
            blocked_tid: 0,
            deep_tid: 0,
        };
        let line = fixture.read_line();
        let fields: Vec<&str> = line.split_whitespace().collect();
        assert_eq!(fields.first(), Some(&"ready"), "fixture said {line:?}");
        fixture.pid = fields[1].parse().expect("pid");
        fixture.blocked_tid = fields[2].parse().expect("tid");
        fixture.deep_tid = fields[3].parse().expect("tid");
        fixture
    }

    pub fn read_line(&mut self) -> String {
        let mut line = String::new();
        self.stdout.read_line(&mut line).expect("fixture output");
        line
    }

    pub fn send(&mut self, line: &str) {
        writeln!(self.stdin, "{line}").expect("fixture input");
        self.stdin.flush().expect("fixture input");
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

impl Drop for Fixture {
    fn drop(&mut self) {
        if self.pid != 0 && self.pid != self.child.id() {
            let pid = nix::unistd::Pid::from_raw(self.pid as i32);
            let _ = nix::sys::signal::kill(pid, nix::sys::signal::Signal::SIGKILL);
        }
        let _ = self.child.kill();
        let _ = self.child.wait();
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
