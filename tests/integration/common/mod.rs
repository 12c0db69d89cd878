//! Helpers shared by the integration tests: start Python fixtures, run the
//! real `stackscope` binary with a timeout, read what it wrote, and check that
//! a target was left running.

// Each test binary uses a different subset of these helpers.
#![allow(dead_code)]

pub mod browser;
mod leftovers;
pub mod shape_jobs;
pub use leftovers::*;
// The Python fixture process (ready file, deadline, killed on Drop) is the workspace's one.
pub use stackscope_testkit::python::{fixture_path, Fixture, READY_TIMEOUT};
// Tests that measure shares or rates, or keep CPUs busy, take it (one lock for the binary).
pub use stackscope_testkit::serial;

use std::collections::BTreeMap;
use std::fs;
use std::io::Read;
use std::path::{Path, PathBuf};
use std::process::{Child, Command, ExitStatus, Stdio};
use std::thread;
use std::time::{Duration, Instant};

/// Path of the binary under test.
pub fn bin() -> &'static str {
    env!("CARGO_BIN_EXE_stackscope")
}

pub fn repo_root() -> PathBuf {
    PathBuf::from(env!("CARGO_MANIFEST_DIR"))
}

pub fn fixture_source(name: &str) -> String {
    fs::read_to_string(fixture_path(name))
        .unwrap_or_else(|e| panic!("cannot read fixture {name}: {e}"))
}

/// What a finished run of a command gave.
#[derive(Debug)]
pub struct Run {
    pub status: ExitStatus,
    pub stdout: String,
    pub stderr: String,
    pub elapsed: Duration,
}

impl Run {
    pub fn code(&self) -> Option<i32> {
        self.status.code()
    }

    /// Everything worth printing when an assertion about the run fails.
    pub fn describe(&self) -> String {
        format!(
            "status: {:?}, elapsed: {:.2?}\n--- stdout ---\n{}\n--- stderr ---\n{}",
            self.status, self.elapsed, self.stdout, self.stderr
        )
    }

    pub fn assert_success(&self) {
        assert_eq!(self.code(), Some(0), "expected exit 0\n{}", self.describe());
    }

    /// One error line (or two: what is wrong and what to do) on stderr that
    /// starts with "stackscope: ", the given exit code, and no panic.
    pub fn assert_error(&self, code: i32) {
        assert_eq!(
            self.code(),
            Some(code),
            "expected exit {code}\n{}",
            self.describe()
        );
        self.assert_no_panic();
        let first = self.stderr.lines().find(|l| !l.trim().is_empty());
        assert!(
            first.is_some_and(|l| l.starts_with("stackscope: ")),
            "stderr should start with 'stackscope: '\n{}",
            self.describe()
        );
        let lines = self.stderr.lines().filter(|l| !l.trim().is_empty()).count();
        assert!(
            lines <= 3,
            "an error should be one or two lines on stderr, got {lines}\n{}",
            self.describe()
        );
    }

    /// A usage error: exactly one line on stderr, starting "stackscope: ", exit status 2.
    pub fn assert_usage_error(&self) {
        assert_eq!(self.code(), Some(2), "expected exit 2\n{}", self.describe());
        self.assert_no_panic();
        let lines: Vec<&str> = self.stderr.lines().collect();
        assert!(
            lines.len() == 1 && lines[0].starts_with("stackscope: "),
            "a usage error is one line starting 'stackscope: '\n{}",
            self.describe()
        );
    }

    /// `record` that Ctrl-C (SIGINT to stackscope) ended: 130, as a shell says.
    pub fn assert_command_interrupted(&self) {
        self.assert_record_status(130, "130 after Ctrl-C (SIGINT to stackscope)");
    }

    /// `record` that SIGTERM to stackscope ended: 143, as a shell says.
    pub fn assert_record_terminated(&self) {
        self.assert_record_status(143, "143 after SIGTERM to stackscope");
    }

    /// `record` that `--duration` ended as asked: 0, whatever the SIGINT that ended the
    /// command made of it.
    pub fn assert_duration_ended(&self) {
        self.assert_record_status(0, "0 when --duration ends the recording");
    }

    fn assert_record_status(&self, status: i32, why: &str) {
        assert_eq!(
            self.code(),
            Some(status),
            "record exits {why}\n{}",
            self.describe()
        );
        self.assert_no_panic();
    }

    pub fn assert_no_panic(&self) {
        assert!(
            !self.stderr.contains("panicked") && !self.stderr.contains("RUST_BACKTRACE"),
            "stackscope panicked\n{}",
            self.describe()
        );
    }

    /// Case-insensitive check that stderr contains `needle`.
    pub fn assert_stderr_contains(&self, needle: &str) {
        assert!(
            self.stderr.to_lowercase().contains(&needle.to_lowercase()),
            "stderr should contain {needle:?}\n{}",
            self.describe()
        );
    }
}

/// A copy in `into` of the real recording `name` of `tests/data/recordings` (what `report`,
/// `export` and `merge` read of it: its sample log and summary); gives the copy's directory.
pub fn copy_recording(name: &str, into: &Path) -> PathBuf {
    let copy = into.join(name);
    fs::create_dir_all(&copy).expect("copy dir");
    let source = repo_root().join("tests/data/recordings").join(name);
    for file in ["samples.log", "summary.json"] {
        fs::copy(source.join(file), copy.join(file)).expect("copy the recording");
    }
    copy
}

/// A `Command` for the binary under test.
/// A `record` is marked so that, once it has ended, the tests check that nothing it started is
/// left (see `leftovers`).
pub fn stackscope(args: &[&str]) -> Command {
    let mut cmd = Command::new(bin());
    cmd.args(args);
    mark_record(&mut cmd);
    cmd
}

/// `cmd` run in a PID and mount namespace of its own (`unshare`, root), with its environment;
/// None, with a line saying why, where that cannot be.
pub fn in_pid_namespace(cmd: &Command) -> Option<Command> {
    let root = std::fs::read_to_string("/proc/self/status").is_ok_and(|s| {
        s.lines()
            .find_map(|l| l.strip_prefix("Uid:"))
            .and_then(|ids| ids.split_whitespace().nth(1))
            == Some("0")
    });
    let works = root
        && Command::new("unshare")
            .args(["--pid", "--fork", "--mount", "--mount-proc", "true"])
            .stdout(Stdio::null())
            .stderr(Stdio::null())
            .status()
            .is_ok_and(|s| s.success());
    if !works {
        eprintln!("skipping: needs root and unshare --pid --mount");
        return None;
    }
    let mut wrapped = Command::new("unshare");
    wrapped
        .args(["--pid", "--fork", "--kill-child", "--mount", "--mount-proc"])
        .arg(cmd.get_program())
        .args(cmd.get_args());
    for (key, value) in cmd.get_envs() {
        match value {
            Some(v) => wrapped.env(key, v),
            None => wrapped.env_remove(key),
        };
    }
    Some(wrapped)
}

/// The marker of a `record` run, if `cmd` is one.
fn marker_of(cmd: &Command) -> Option<String> {
    cmd.get_envs()
        .find(|(k, _)| *k == MARKER_VAR)
        .and_then(|(_, v)| v)
        .map(|v| v.to_string_lossy().into_owned())
}

/// Runs `cmd` to completion, failing the test if it takes longer than
/// `timeout` (the process is then killed).
pub fn run_with_timeout(mut cmd: Command, timeout: Duration) -> Run {
    cmd.stdin(Stdio::null())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped());
    let start = Instant::now();
    let mut child = cmd
        .spawn()
        .unwrap_or_else(|e| panic!("cannot start {cmd:?}: {e}"));
    let out = read_in_background(child.stdout.take());
    let err = read_in_background(child.stderr.take());
    let status = wait_with_deadline(&mut child, timeout);
    let elapsed = start.elapsed();
    if let Some(marker) = marker_of(&cmd) {
        assert_nothing_left(&marker, &format!("{cmd:?}"));
    }
    let stdout = out.join().unwrap_or_default();
    let stderr = err.join().unwrap_or_default();
    match status {
        Some(status) => Run {
            status,
            stdout,
            stderr,
            elapsed,
        },
        None => panic!(
            "{cmd:?} did not finish within {timeout:?}\n--- stdout ---\n{stdout}\n--- stderr ---\n{stderr}"
        ),
    }
}

/// Runs the binary with `args`, with a timeout.
pub fn run_stackscope(args: &[&str], timeout: Duration) -> Run {
    run_with_timeout(stackscope(args), timeout)
}

/// `attach --pid PID -o OUT ARGS...` of a fresh `cpu_split.py` into a new output directory,
/// which must succeed; the fixture is handed back alive with the recording.
pub fn attach_cpu_split(args: &[&str], timeout: Duration) -> (Fixture, OutDir) {
    let fixture = Fixture::start("cpu_split.py", &[]);
    let pid = fixture.ready_pid().to_string();
    let out = OutDir::new();
    let mut all = vec!["attach", "--pid", &pid, "-o", out.arg()];
    all.extend_from_slice(args);
    run_stackscope(&all, timeout).assert_success();
    (fixture, out)
}

/// A started (not yet finished) run of the binary, for tests that signal it.
pub struct Running {
    pub child: Child,
    /// Set for a `record`: what its processes carry in their environment.
    marker: Option<String>,
    start: Instant,
    out: thread::JoinHandle<String>,
    err: thread::JoinHandle<String>,
}

pub fn spawn_stackscope(cmd: Command) -> Running {
    let mut cmd = cmd;
    cmd.stdin(Stdio::null())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped());
    let mut child = cmd
        .spawn()
        .unwrap_or_else(|e| panic!("cannot start {cmd:?}: {e}"));
    let out = read_in_background(child.stdout.take());
    let err = read_in_background(child.stderr.take());
    Running {
        child,
        marker: marker_of(&cmd),
        start: Instant::now(),
        out,
        err,
    }
}

impl Running {
    pub fn pid(&self) -> u32 {
        self.child.id()
    }

    pub fn signal(&self, signal: &str) {
        send_signal(self.pid(), signal);
    }

    /// Waits for the run to end; panics (after killing it) past `timeout`.
    pub fn finish(mut self, timeout: Duration) -> Run {
        let status = wait_with_deadline(&mut self.child, timeout);
        let elapsed = self.start.elapsed();
        if let Some(marker) = &self.marker {
            assert_nothing_left(marker, "a `stackscope record` run");
        }
        let stdout = self.out.join().unwrap_or_default();
        let stderr = self.err.join().unwrap_or_default();
        match status {
            Some(status) => Run {
                status,
                stdout,
                stderr,
                elapsed,
            },
            None => panic!(
                "stackscope did not finish within {timeout:?}\n--- stdout ---\n{stdout}\n--- stderr ---\n{stderr}"
            ),
        }
    }
}

fn read_in_background<R: Read + Send + 'static>(pipe: Option<R>) -> thread::JoinHandle<String> {
    thread::spawn(move || {
        let mut bytes = Vec::new();
        if let Some(mut pipe) = pipe {
            let _ = pipe.read_to_end(&mut bytes);
        }
        String::from_utf8_lossy(&bytes).into_owned()
    })
}

fn wait_with_deadline(child: &mut Child, timeout: Duration) -> Option<ExitStatus> {
    let deadline = Instant::now() + timeout;
    loop {
        match child.try_wait() {
            Ok(Some(status)) => return Some(status),
            Ok(None) => {}
            Err(e) => panic!("wait failed: {e}"),
        }
        if Instant::now() > deadline {
            let _ = child.kill();
            let _ = child.wait();
            return None;
        }
        thread::sleep(Duration::from_millis(10));
    }
}

/// Sends a signal by name ("INT", "TERM", ...) with kill(1).
pub fn send_signal(pid: u32, signal: &str) {
    let status = Command::new("kill")
        .arg(format!("-{signal}"))
        .arg(pid.to_string())
        .status()
        .expect("kill(1)");
    assert!(status.success(), "kill -{signal} {pid} failed");
}

// ---------------------------------------------------------------- outputs

/// A temp dir for stackscope's output; `out` is a not-yet-existing
/// subdirectory, so the binary must create it.
pub struct OutDir {
    pub tmp: tempfile::TempDir,
    pub out: PathBuf,
}

impl OutDir {
    pub fn new() -> OutDir {
        let tmp = tempfile::Builder::new()
            .prefix("stackscope-out-")
            .tempdir()
            .expect("temp dir");
        let out = tmp.path().join("out");
        OutDir { tmp, out }
    }

    pub fn arg(&self) -> &str {
        self.out.to_str().expect("utf-8 temp path")
    }

    pub fn folded(&self) -> Folded {
        Folded::read(&self.out.join("stacks.folded"))
    }

    pub fn summary(&self) -> serde_json::Value {
        read_summary(&self.out)
    }
}

pub fn read_summary(dir: &Path) -> serde_json::Value {
    let path = dir.join("summary.json");
    let text =
        fs::read_to_string(&path).unwrap_or_else(|e| panic!("cannot read {}: {e}", path.display()));
    serde_json::from_str(&text)
        .unwrap_or_else(|e| panic!("{} is not JSON ({e}):\n{text}", path.display()))
}

/// One frame of a folded stack or of a dump: `function (file:line)`.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Frame {
    pub function: String,
    pub file: String,
    pub line: Option<u32>,
}

impl Frame {
    /// Parses `function (file:line)`; a frame without the parenthesised
    /// location keeps the whole text as its function.
    pub fn parse(text: &str) -> Frame {
        let text = text.trim();
        if let Some((function, rest)) = text.rsplit_once(" (") {
            if let Some(location) = rest.strip_suffix(')') {
                let (file, line) = match location.rsplit_once(':') {
                    Some((file, line)) => match line.parse::<u32>() {
                        Ok(n) => (file.to_string(), Some(n)),
                        Err(_) => (location.to_string(), None),
                    },
                    None => (location.to_string(), None),
                };
                return Frame {
                    function: function.to_string(),
                    file,
                    line,
                };
            }
        }
        Frame {
            function: text.to_string(),
            file: String::new(),
            line: None,
        }
    }

    /// Whether the frame's file is `basename` (a full or shortened path).
    pub fn in_file(&self, basename: &str) -> bool {
        self.file == basename || self.file.ends_with(&format!("/{basename}"))
    }

    pub fn is(&self, function: &str, basename: &str) -> bool {
        self.function == function && self.in_file(basename)
    }
}

/// One line of stacks.folded: the process root (`process PID COMMAND`, when the recording
/// followed a process tree), the thread, and frames outermost first.
#[derive(Debug, Clone)]
pub struct Stack {
    pub process: Option<String>,
    pub thread: String,
    pub frames: Vec<Frame>,
    pub count: u64,
    pub raw: String,
}

impl Stack {
    pub fn innermost(&self) -> Option<&Frame> {
        self.frames.last()
    }

    pub fn has_function(&self, function: &str) -> bool {
        self.frames.iter().any(|f| f.function == function)
    }
}

/// The parsed content of a stacks.folded file.
#[derive(Debug, Clone)]
pub struct Folded {
    pub stacks: Vec<Stack>,
    pub text: String,
}

impl Folded {
    pub fn read(path: &Path) -> Folded {
        let text = fs::read_to_string(path)
            .unwrap_or_else(|e| panic!("cannot read {}: {e}", path.display()));
        Folded::parse(&text)
    }

    pub fn parse(text: &str) -> Folded {
        let mut stacks = Vec::new();
        for line in text.lines().filter(|l| !l.trim().is_empty()) {
            let (stack, count) = line
                .rsplit_once(' ')
                .unwrap_or_else(|| panic!("folded line without a count: {line:?}"));
            let count: u64 = count
                .parse()
                .unwrap_or_else(|_| panic!("folded line with a bad count: {line:?}"));
            let mut parts = stack.split(';').peekable();
            let process = parts
                .next_if(|root| process_root_pid(root).is_some() || is_group_root(root))
                .map(str::to_owned);
            let thread = parts.next().unwrap_or_default().to_string();
            let frames = parts.map(Frame::parse).collect();
            stacks.push(Stack {
                process,
                thread,
                frames,
                count,
                raw: line.to_string(),
            });
        }
        Folded {
            stacks,
            text: text.to_string(),
        }
    }

    pub fn total(&self) -> u64 {
        self.stacks.iter().map(|s| s.count).sum()
    }

    pub fn thread_total(&self, thread: &str) -> u64 {
        self.of_thread(thread).map(|s| s.count).sum()
    }

    pub fn of_thread<'a>(&'a self, thread: &'a str) -> impl Iterator<Item = &'a Stack> + 'a {
        self.stacks.iter().filter(move |s| s.thread == thread)
    }

    pub fn threads(&self) -> BTreeMap<String, u64> {
        let mut threads = BTreeMap::new();
        for s in &self.stacks {
            *threads.entry(s.thread.clone()).or_insert(0) += s.count;
        }
        threads
    }

    /// Samples of `thread` whose stack contains `function` anywhere.
    pub fn thread_function_total(&self, thread: &str, function: &str) -> u64 {
        self.of_thread(thread)
            .filter(|s| s.has_function(function))
            .map(|s| s.count)
            .sum()
    }

    /// A short excerpt for assertion messages.
    pub fn excerpt(&self) -> String {
        let mut lines: Vec<&Stack> = self.stacks.iter().collect();
        lines.sort_by_key(|s| std::cmp::Reverse(s.count));
        lines
            .iter()
            .take(25)
            .map(|s| s.raw.as_str())
            .collect::<Vec<_>>()
            .join("\n")
    }
}

// ---------------------------------------------------------------- sources

/// 1-based line numbers of `def NAME` and of the last line of its body
/// (found by indentation), in a fixture's source.
pub fn function_lines(source: &str, name: &str) -> (u32, u32) {
    let lines: Vec<&str> = source.lines().collect();
    let def = lines
        .iter()
        .position(|l| l.trim_start().starts_with(&format!("def {name}(")))
        .unwrap_or_else(|| panic!("no def {name} in source"));
    let indent = |l: &str| l.len() - l.trim_start().len();
    let def_indent = indent(lines[def]);
    let mut last = def;
    for (i, l) in lines.iter().enumerate().skip(def + 1) {
        if l.trim().is_empty() {
            continue;
        }
        if indent(l) <= def_indent {
            break;
        }
        last = i;
    }
    (def as u32 + 1, last as u32 + 1)
}

/// 1-based line number of the line ending with `# BLOCK: NAME`.
pub fn marker_line(source: &str, thread: &str) -> u32 {
    let marker = format!("# BLOCK: {thread}");
    let found: Vec<usize> = source
        .lines()
        .enumerate()
        .filter(|(_, l)| l.trim_end().ends_with(&marker))
        .map(|(i, _)| i + 1)
        .collect();
    assert_eq!(
        found.len(),
        1,
        "expected one {marker:?} line in the fixture"
    );
    found[0] as u32
}

// ---------------------------------------------------------------- targets

/// The state letter of /proc/PID/stat (or of a task's stat), if it exists.
pub fn proc_state(stat_path: &Path) -> Option<char> {
    let text = fs::read_to_string(stat_path).ok()?;
    let after = &text[text.rfind(')')? + 1..];
    after.split_whitespace().next()?.chars().next()
}

/// utime + stime (clock ticks) of a process.
pub fn cpu_ticks(pid: u32) -> Option<u64> {
    let text = fs::read_to_string(format!("/proc/{pid}/stat")).ok()?;
    let after = &text[text.rfind(')')? + 1..];
    let fields: Vec<&str> = after.split_whitespace().collect();
    // After the ')' the state is field 3 of stat(5); utime is 14, stime 15.
    let utime: u64 = fields.get(11)?.parse().ok()?;
    let stime: u64 = fields.get(12)?.parse().ok()?;
    Some(utime + stime)
}

pub fn process_exists(pid: u32) -> bool {
    matches!(proc_state(Path::new(&format!("/proc/{pid}/stat"))), Some(s) if s != 'Z' && s != 'X')
}

/// Panics unless the process and each of its threads exists and is not
/// stopped (state T) or traced (state t), and it can be signalled. Checked
/// a few times over 100 ms, since the state is a snapshot.
pub fn assert_not_stopped(pid: u32) {
    for _ in 0..5 {
        let state = proc_state(Path::new(&format!("/proc/{pid}/stat")));
        assert!(
            matches!(state, Some(s) if !matches!(s, 'T' | 't' | 'Z' | 'X')),
            "process {pid} is not running: state {state:?}"
        );
        let tasks = fs::read_dir(format!("/proc/{pid}/task")).expect("task dir");
        for task in tasks.flatten() {
            let state = proc_state(&task.path().join("stat"));
            assert!(
                !matches!(state, Some('T' | 't')),
                "thread {} of {pid} is left stopped (state {state:?})",
                task.file_name().to_string_lossy()
            );
        }
        thread::sleep(Duration::from_millis(20));
    }
    let status = Command::new("kill")
        .args(["-0", &pid.to_string()])
        .status()
        .expect("kill(1)");
    assert!(status.success(), "cannot signal process {pid}");
}

/// For a busy target: not stopped, and its CPU time keeps growing.
pub fn assert_running_and_progressing(pid: u32) {
    assert_not_stopped(pid);
    let before = cpu_ticks(pid).expect("cpu ticks");
    let deadline = Instant::now() + Duration::from_secs(3);
    loop {
        thread::sleep(Duration::from_millis(50));
        let now = cpu_ticks(pid).expect("cpu ticks");
        if now > before {
            return;
        }
        assert!(
            Instant::now() < deadline,
            "process {pid} made no progress in 3 s (cpu ticks stuck at {before})"
        );
    }
}

/// The executable of a process, as readlink /proc/PID/exe gives it.
pub fn exe_of(pid: u32) -> String {
    fs::read_link(format!("/proc/{pid}/exe"))
        .expect("readlink /proc/PID/exe")
        .to_string_lossy()
        .into_owned()
}

/// A pid with no process behind it.
pub fn unused_pid() -> u32 {
    let max: u32 = fs::read_to_string("/proc/sys/kernel/pid_max")
        .ok()
        .and_then(|s| s.trim().parse().ok())
        .unwrap_or(32768);
    (2..max)
        .rev()
        .find(|pid| !Path::new(&format!("/proc/{pid}")).exists())
        .expect("a free pid")
}

/// Number as f64 from a JSON value, with a readable panic.
pub fn num(v: &serde_json::Value, what: &str) -> f64 {
    v.as_f64()
        .unwrap_or_else(|| panic!("{what} should be a number, got {v}"))
}

// ---------------------------------------------------------------- long recordings

/// Polls `probe` every 20 ms until it gives a value; panics with `what`
/// after `timeout`.
pub fn wait_until<T>(timeout: Duration, what: &str, mut probe: impl FnMut() -> Option<T>) -> T {
    let deadline = Instant::now() + timeout;
    loop {
        if let Some(value) = probe() {
            return value;
        }
        assert!(
            Instant::now() < deadline,
            "timed out after {timeout:?} waiting for {what}"
        );
        thread::sleep(Duration::from_millis(20));
    }
}

/// Waits for a file holding a pid (a ready file, a child's pid file).
pub fn wait_for_pid_file(path: &Path, timeout: Duration) -> u32 {
    wait_until(timeout, &format!("a pid in {}", path.display()), || {
        fs::read_to_string(path).ok()?.trim().parse().ok()
    })
}

/// summary.json of `dir` if it is there; panics if it is there but not JSON
/// (it is written to a temporary name and renamed, so it is never half a file).
pub fn try_read_summary(dir: &Path) -> Option<serde_json::Value> {
    let path = dir.join("summary.json");
    let text = fs::read_to_string(&path).ok()?;
    Some(
        serde_json::from_str(&text)
            .unwrap_or_else(|e| panic!("{} is not JSON ({e}):\n{text}", path.display())),
    )
}

/// The summary's "samples".
pub fn summary_samples(summary: &serde_json::Value) -> u64 {
    num(&summary["samples"], "samples") as u64
}

/// Waits for a checkpoint whose summary has more than `more_than` samples.
pub fn wait_for_samples(dir: &Path, more_than: u64, timeout: Duration) -> serde_json::Value {
    wait_until(
        timeout,
        &format!(
            "{}/summary.json with more than {more_than} samples",
            dir.display()
        ),
        || try_read_summary(dir).filter(|s| summary_samples(s) > more_than),
    )
}

/// Waits for summary.json to be rewritten (its text differs from `previous`,
/// which its duration alone makes sure of); gives the new text and JSON.
pub fn wait_for_new_summary(
    dir: &Path,
    previous: &str,
    timeout: Duration,
) -> (String, serde_json::Value) {
    let path = dir.join("summary.json");
    let text = wait_until(timeout, "a new checkpoint of summary.json", || {
        fs::read_to_string(&path).ok().filter(|t| t != previous)
    });
    let json = serde_json::from_str(&text)
        .unwrap_or_else(|e| panic!("{} is not JSON ({e}):\n{text}", path.display()));
    (text, json)
}

/// Whether a file name is one of the temporary names a writer renames from
/// (`.NAME.PID.tmp` and the like): a reader would not mistake it for output.
pub fn is_temp_name(name: &str) -> bool {
    name.starts_with('.') || name.ends_with(".tmp") || name.contains(".tmp.")
}

/// The temporary files left in `dir`.
pub fn temp_files(dir: &Path) -> Vec<String> {
    fs::read_dir(dir)
        .map(|entries| {
            entries
                .flatten()
                .map(|e| e.file_name().to_string_lossy().into_owned())
                .filter(|n| is_temp_name(n))
                .collect()
        })
        .unwrap_or_default()
}

/// Checks that an output directory is whole and agrees with itself:
/// summary.json parses, stacks.folded parses and its total is the summary's
/// "samples" (and the threads' samples add up to it), flamegraph.svg is a
/// complete SVG. Gives the summary and the folded stacks.
pub fn assert_complete_outputs(dir: &Path) -> (serde_json::Value, Folded) {
    let summary = read_summary(dir);
    let folded = Folded::read(&dir.join("stacks.folded"));
    assert_eq!(
        summary_samples(&summary),
        folded.total(),
        "summary samples vs the sum of stacks.folded in {}:\n{}",
        dir.display(),
        folded.excerpt()
    );
    if let Some(threads) = summary["threads"].as_array() {
        let sum: u64 = threads
            .iter()
            .map(|t| num(&t["samples"], "thread samples") as u64)
            .sum();
        assert_eq!(
            sum,
            folded.total(),
            "the threads' samples in summary.json should add up to the total"
        );
    }
    let svg_path = dir.join("flamegraph.svg");
    let svg = fs::read_to_string(&svg_path)
        .unwrap_or_else(|e| panic!("cannot read {}: {e}", svg_path.display()));
    assert!(
        svg.contains("<svg") && svg.trim_end().ends_with("</svg>"),
        "{} is not a complete SVG ({} bytes, ends {:?})",
        svg_path.display(),
        svg.len(),
        &svg[svg.len().saturating_sub(80)..]
    );
    (summary, folded)
}

/// Per-stack counts of a folded file (stack text without the count).
pub fn stack_counts(folded: &Folded) -> BTreeMap<String, u64> {
    let mut counts = BTreeMap::new();
    for s in &folded.stacks {
        let key = s.raw.rsplit_once(' ').map(|(k, _)| k).unwrap_or(&s.raw);
        *counts.entry(key.to_string()).or_insert(0) += s.count;
    }
    counts
}

/// Whether a root is a group of like processes: `DataLoader workers (40 processes, 2 at a
/// time) python train.py`.
pub fn is_group_root(root: &str) -> bool {
    stackscope_aggregate::parse_group_label(root).is_some()
}

/// The pid of a `process PID COMMAND` root (the `thread` field of a stack
/// when processes are roots).
pub fn process_root_pid(root: &str) -> Option<u32> {
    root.strip_prefix("process ")?
        .split(' ')
        .next()?
        .parse()
        .ok()
}

/// The state letter of a process (R, S, T, ...), if it exists.
pub fn state_of(pid: u32) -> Option<char> {
    proc_state(Path::new(&format!("/proc/{pid}/stat")))
}

/// Resident set size of a process in KiB (VmRSS).
pub fn rss_kib(pid: u32) -> Option<u64> {
    let status = fs::read_to_string(format!("/proc/{pid}/status")).ok()?;
    let line = status.lines().find(|l| l.starts_with("VmRSS:"))?;
    line.split_whitespace().nth(1)?.parse().ok()
}

/// Kills `fixtures/web_server.py`'s client (a process outside the server's tree) on drop, if
/// it is still there and is the fixture's.
pub struct WebClient(pub Option<u32>);

impl Drop for WebClient {
    fn drop(&mut self) {
        if let Some(pid) = self.0 {
            let cmdline = fs::read(format!("/proc/{pid}/cmdline")).unwrap_or_default();
            if String::from_utf8_lossy(&cmdline).contains("web_server.py") {
                kill_quietly(pid);
            }
        }
    }
}

/// Kills a process by pid (SIGKILL) if it is there, ignoring errors: for
/// grandchildren a test started indirectly.
pub fn kill_quietly(pid: u32) {
    let _ = Command::new("kill")
        .args(["-KILL", &pid.to_string()])
        .stderr(Stdio::null())
        .status();
}

/// Polls `probe` every 20 ms while `running` runs, for at most `timeout`.
/// Gives the run back with the value, or with None past the timeout. Panics
/// with stackscope's output if it ends first.
pub fn poll_while_running<T>(
    mut running: Running,
    timeout: Duration,
    what: &str,
    mut probe: impl FnMut() -> Option<T>,
) -> (Running, Option<T>) {
    let deadline = Instant::now() + timeout;
    loop {
        if let Some(value) = probe() {
            return (running, Some(value));
        }
        if let Ok(Some(_)) = running.child.try_wait() {
            let run = finish_bounded(running, Duration::from_secs(5));
            panic!(
                "stackscope ended while waiting for {what}\n{}",
                run.describe()
            );
        }
        if Instant::now() > deadline {
            return (running, None);
        }
        thread::sleep(Duration::from_millis(20));
    }
}

/// Polls `probe` every 20 ms while `running` runs. Panics with stackscope's
/// output if it ends first, or (after stopping it) past `timeout`. Gives the
/// run back with the value.
pub fn wait_while_running<T>(
    running: Running,
    timeout: Duration,
    what: &str,
    probe: impl FnMut() -> Option<T>,
) -> (Running, T) {
    match poll_while_running(running, timeout, what, probe) {
        (running, Some(value)) => (running, value),
        (running, None) => {
            let run = stop_bounded(running);
            panic!(
                "timed out after {timeout:?} waiting for {what}\n{}",
                run.describe()
            );
        }
    }
}

/// Ends a run that went wrong: SIGINT (so that `record` can end its
/// command), then SIGKILL after 5 s; never blocks for long.
pub fn stop_bounded(running: Running) -> Run {
    running.signal("INT");
    finish_bounded(running, Duration::from_secs(5))
}

/// Like `Running::finish`, but kills the run past `timeout` instead of
/// panicking, and does not wait for ever for its output: a process it left
/// behind (a recorded command) may hold its stdout and stderr open.
pub fn finish_bounded(mut running: Running, timeout: Duration) -> Run {
    let status = match wait_with_deadline(&mut running.child, timeout) {
        Some(status) => status,
        None => running.child.wait().expect("wait"),
    };
    let elapsed = running.start.elapsed();
    if let Some(marker) = &running.marker {
        assert_nothing_left(marker, "a `stackscope record` run");
    }
    let deadline = Instant::now() + Duration::from_secs(5);
    while !(running.out.is_finished() && running.err.is_finished()) && Instant::now() < deadline {
        thread::sleep(Duration::from_millis(20));
    }
    let held = "(not read: still held open by a process left behind)".to_string();
    let stdout = if running.out.is_finished() {
        running.out.join().unwrap_or_default()
    } else {
        held.clone()
    };
    let stderr = if running.err.is_finished() {
        running.err.join().unwrap_or_default()
    } else {
        held
    };
    Run {
        status,
        stdout,
        stderr,
        elapsed,
    }
}

/// Kills, on drop, the process whose pid a file holds (a recorded command,
/// a fixture's child), if it is still there and its command line contains
/// `marker` (so that a reused pid is left alone).
pub struct KillOnDrop {
    pub pid_file: PathBuf,
    pub marker: String,
}

impl KillOnDrop {
    pub fn new(pid_file: &Path, marker: &str) -> KillOnDrop {
        KillOnDrop {
            pid_file: pid_file.to_owned(),
            marker: marker.to_string(),
        }
    }
}

impl Drop for KillOnDrop {
    fn drop(&mut self) {
        let Some(pid) = fs::read_to_string(&self.pid_file)
            .ok()
            .and_then(|t| t.trim().parse::<u32>().ok())
        else {
            return;
        };
        let cmdline = fs::read(format!("/proc/{pid}/cmdline")).unwrap_or_default();
        if String::from_utf8_lossy(&cmdline).contains(&self.marker) {
            kill_quietly(pid);
        }
    }
}

/// A fake driver library of the workspace (`fake-nvml`, `fake-nvml-minimal`), built beside
/// the binary under test when `cargo test --test integration` alone did not build it.
pub fn fake_library(package: &str) -> PathBuf {
    stackscope_testkit::cdylib::cdylib(package)
}

/// The fake NVML library (`crates/fake-nvml`), for `--nvml-lib`.
pub fn fake_nvml() -> PathBuf {
    fake_library("fake-nvml")
}
