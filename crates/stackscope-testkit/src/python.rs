//! Python fixture processes and the interpreters to run them on.
//!
//! A fixture says it is ready in one of two ways: it writes a ready file, whose path it gets as
//! its first argument (the scripts in `fixtures/`), or it prints a first line on stdout (the
//! inline `-c` programs of the reader tests, `ready PID ...`: the pid from the interpreter
//! itself, as `python3` may be a launcher that is not the interpreter). Either is waited for
//! with a deadline, and the test fails with the fixture's stderr when it exits first or is late.
//! A script fixture's exit is reaped in the background, as a real parent would, so a fixture
//! that exits leaves `/proc` instead of staying a zombie. A `-c` fixture is not: the reader tests
//! ptrace it from the test process itself, and a wait from another thread of the tracer would
//! take the ptrace stops meant for the tracer ([`FixtureBuilder::reap`]). Dropping a fixture
//! kills it (and the interpreter, when that is another process) and waits for it.

use std::ffi::OsString;
use std::fs;
use std::io::{BufRead, BufReader, Write};
use std::path::{Path, PathBuf};
use std::process::{Child, ChildStdin, Command, ExitStatus, Stdio};
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::mpsc::{self, Receiver, RecvTimeoutError};
use std::sync::{Arc, Mutex, MutexGuard, OnceLock};
use std::thread;
use std::time::{Duration, Instant};

use crate::cdylib::workspace_root;

/// How long a fixture may take to say it is ready (a loaded 2-core machine).
pub const READY_TIMEOUT: Duration = Duration::from_secs(20);

/// `fixtures/NAME` of the repository.
pub fn fixture_path(name: &str) -> PathBuf {
    workspace_root().join("fixtures").join(name)
}

/// A virtual environment of `python` in `dir/venv` (no pip: quick) with one installed package,
/// `fakeaug`, in its site-packages, whose `apply(fn, x)` calls back into the job; its
/// interpreter's path. A job's frames in it come from the job, the package and the base
/// interpreter's standard library.
pub fn venv_with_package(python: &str, dir: &Path) -> PathBuf {
    let venv = dir.join("venv");
    let status = Command::new(python)
        .args(["-m", "venv", "--without-pip"])
        .arg(&venv)
        .status()
        .expect("run python -m venv");
    assert!(status.success(), "{python} -m venv failed");
    let lib = fs::read_dir(venv.join("lib"))
        .expect("the venv's lib")
        .map(|e| e.expect("an entry").path())
        .find(|p| {
            p.file_name()
                .is_some_and(|n| n.to_string_lossy().starts_with("python"))
        })
        .expect("lib/pythonX.Y in the venv");
    let package = lib.join("site-packages").join("fakeaug");
    fs::create_dir_all(&package).expect("mkdir fakeaug");
    fs::write(
        package.join("__init__.py"),
        "def apply(fn, x):\n    return fn(x)\n",
    )
    .expect("write fakeaug");
    venv.join("bin").join("python")
}

/// What the fixture runs.
#[derive(Debug, Clone)]
enum Script {
    /// A script file: `python FILE READY ARGS...`.
    File(PathBuf),
    /// A program: `python -c CODE ARGS...`, ready when it prints its first line.
    Code(String),
}

/// How to start a fixture: [`Fixture::script`] or [`Fixture::code`], then [`start`] or
/// [`spawn`](FixtureBuilder::spawn).
///
/// [`start`]: FixtureBuilder::start
#[derive(Debug, Clone)]
pub struct FixtureBuilder {
    python: OsString,
    name: String,
    script: Script,
    args: Vec<OsString>,
    envs: Vec<(OsString, OsString)>,
    stdin: bool,
    timeout: Duration,
    reap: bool,
}

impl FixtureBuilder {
    /// The interpreter (`python3` unless told).
    pub fn python(mut self, python: impl Into<OsString>) -> Self {
        self.python = python.into();
        self
    }

    /// Arguments after the ready file (scripts) or after the program (`-c`).
    pub fn args<S: Into<OsString> + Clone>(mut self, args: &[S]) -> Self {
        self.args.extend(args.iter().cloned().map(Into::into));
        self
    }

    /// An environment variable of the fixture's.
    pub fn env(mut self, key: impl Into<OsString>, value: impl Into<OsString>) -> Self {
        self.envs.push((key.into(), value.into()));
        self
    }

    /// A pipe to the fixture's stdin, for [`Fixture::send`].
    pub fn stdin(mut self) -> Self {
        self.stdin = true;
        self
    }

    /// Whether a thread of the test reaps the fixture's exit as soon as it happens (the default
    /// for scripts, not for `-c` programs). Never for a fixture the test process ptraces itself:
    /// the reaping wait would take the tracee's stops.
    pub fn reap(mut self, reap: bool) -> Self {
        self.reap = reap;
        self
    }

    /// How long [`start`](FixtureBuilder::start) waits for the fixture to be ready.
    pub fn timeout(mut self, timeout: Duration) -> Self {
        self.timeout = timeout;
        self
    }

    /// Starts the fixture and waits until it is ready; a fixture whose ready line is
    /// `ready PID ...` gets that pid, the interpreter's own.
    pub fn start(self) -> Fixture {
        let mut fixture = self.spawn();
        let said = fixture.wait_ready();
        if fixture.lines.is_some() {
            let mut words = said.split_whitespace();
            if words.next() == Some("ready") {
                if let Some(pid) = words.next().and_then(|p| p.parse().ok()) {
                    fixture.pid = pid;
                }
            }
        }
        fixture
    }

    /// Starts the fixture without waiting for it to be ready.
    pub fn spawn(self) -> Fixture {
        let dir = tempfile::Builder::new()
            .prefix("stackscope-fixture-")
            .tempdir()
            .expect("temp dir");
        let ready_path = dir.path().join("ready");
        let stderr_path = dir.path().join("stderr");
        let stderr = fs::File::create(&stderr_path).expect("fixture stderr file");
        let mut cmd = Command::new(&self.python);
        match &self.script {
            Script::File(path) => cmd.arg(path).arg(&ready_path),
            Script::Code(code) => cmd.arg("-c").arg(code),
        };
        cmd.args(&self.args)
            .envs(self.envs.iter().map(|(k, v)| (k, v)))
            .env("PYTHONDONTWRITEBYTECODE", "1")
            .stdin(if self.stdin {
                Stdio::piped()
            } else {
                Stdio::null()
            })
            .stdout(match self.script {
                Script::File(_) => Stdio::null(),
                Script::Code(_) => Stdio::piped(),
            })
            .stderr(Stdio::from(stderr));
        let mut child = cmd.spawn().unwrap_or_else(|e| {
            panic!(
                "cannot start {} {}: {e}",
                self.python.to_string_lossy(),
                self.name
            )
        });
        let pid = child.id();
        let stdin = child.stdin.take();
        // Stdout stays open for the child's life (closing it would end the child with
        // BrokenPipe at its next print); its lines arrive on a channel, read with deadlines.
        let lines = child.stdout.take().map(stdout_lines);
        let child = Arc::new(Mutex::new(child));
        let exited = Arc::new(Mutex::new(None));
        let stop_reaper = Arc::new(AtomicBool::new(false));
        let reaper = self.reap.then(|| {
            let child = Arc::clone(&child);
            let exited = Arc::clone(&exited);
            let stop = Arc::clone(&stop_reaper);
            thread::spawn(move || {
                while !stop.load(Ordering::SeqCst) {
                    if let Ok(Some(status)) = lock(&child).try_wait() {
                        *lock(&exited) = Some(status);
                        return;
                    }
                    thread::sleep(Duration::from_millis(10));
                }
            })
        });
        Fixture {
            pid,
            name: self.name,
            child,
            exited,
            stop_reaper,
            reaper,
            stdin,
            lines,
            ready_line: OnceLock::new(),
            timeout: self.timeout,
            dir,
            ready_path,
            stderr_path,
        }
    }
}

/// The child's stdout lines, arriving on a channel from a thread of their own.
fn stdout_lines(stdout: std::process::ChildStdout) -> mpsc::Receiver<String> {
    let (send, receive) = mpsc::channel();
    thread::spawn(move || {
        for line in BufReader::new(stdout).lines() {
            let Ok(line) = line else { break };
            if send.send(line).is_err() {
                break;
            }
        }
    });
    receive
}

/// A running fixture process; see the module's documentation.
pub struct Fixture {
    /// The interpreter's pid (from its ready line, where it prints one).
    pub pid: u32,
    pub name: String,
    child: Arc<Mutex<Child>>,
    exited: Arc<Mutex<Option<ExitStatus>>>,
    stop_reaper: Arc<AtomicBool>,
    reaper: Option<thread::JoinHandle<()>>,
    stdin: Option<ChildStdin>,
    lines: Option<Receiver<String>>,
    ready_line: OnceLock<String>,
    timeout: Duration,
    /// A directory of the fixture's own, removed on Drop (its ready file and stderr are here).
    pub dir: tempfile::TempDir,
    pub ready_path: PathBuf,
    stderr_path: PathBuf,
}

impl Fixture {
    /// `python3 fixtures/NAME READY ARGS...`, to be started.
    pub fn script(name: &str) -> FixtureBuilder {
        FixtureBuilder {
            python: "python3".into(),
            name: name.to_owned(),
            script: Script::File(fixture_path(name)),
            args: Vec::new(),
            envs: Vec::new(),
            stdin: false,
            timeout: READY_TIMEOUT,
            reap: true,
        }
    }

    /// `python3 -c CODE`, ready when it prints its first line, to be started.
    pub fn code(code: &str) -> FixtureBuilder {
        let name = code.lines().find(|l| !l.trim().is_empty()).unwrap_or("-c");
        FixtureBuilder {
            python: "python3".into(),
            name: format!("-c {name:?}"),
            script: Script::Code(code.to_owned()),
            args: Vec::new(),
            envs: Vec::new(),
            stdin: false,
            timeout: READY_TIMEOUT,
            reap: false,
        }
    }

    /// Starts `python3 fixtures/NAME READY_FILE ARGS...` and waits until the fixture has
    /// written its ready file.
    pub fn start(name: &str, args: &[&str]) -> Fixture {
        Fixture::script(name).args(args).start()
    }

    /// Like [`start`](Fixture::start), without waiting for the ready file.
    pub fn spawn(name: &str, args: &[&str]) -> Fixture {
        Fixture::script(name).args(args).spawn()
    }

    /// Starts `PYTHON -m MODULE` from `fixtures/` (a `-c` program execs it, so the pid stays
    /// the fixture's) and waits for its first line, `ready PID ...`: a job laid out as a
    /// package, `fixtures/PACKAGE/`.
    pub fn start_module(python: &Path, module: &str) -> Fixture {
        let code = format!(
            "import os, sys\nos.chdir({:?})\nos.execv(sys.executable, [sys.executable, '-m', {module:?}])",
            fixture_path("").to_string_lossy()
        );
        Fixture::code(&code).python(python).start()
    }

    /// Starts `PYTHON -c CODE` and waits for its first line, `ready PID ...`.
    pub fn start_code(python: &str, code: &str) -> Fixture {
        Fixture::code(code).python(python).start()
    }

    /// Waits for the fixture to be ready; answers what it said (the ready file's content, or
    /// its first line). Panics with the fixture's stderr when it exits first or is late.
    pub fn wait_ready(&self) -> String {
        let deadline = Instant::now() + self.timeout;
        if self.lines.is_some() {
            return self
                .ready_line
                .get_or_init(|| {
                    self.read_line_until(deadline)
                        .unwrap_or_else(|why| self.not_ready(why))
                })
                .clone();
        }
        loop {
            if let Ok(text) = fs::read_to_string(&self.ready_path) {
                if !text.trim().is_empty() {
                    return text;
                }
            }
            if self.exit_status().is_some() {
                self.not_ready("exited");
            }
            if Instant::now() > deadline {
                self.not_ready("late");
            }
            thread::sleep(Duration::from_millis(20));
        }
    }

    fn not_ready(&self, why: &str) -> ! {
        match (why, self.exit_status()) {
            (_, Some(status)) => panic!(
                "fixture {} exited ({status}) before it was ready; stderr:\n{}",
                self.name,
                self.stderr()
            ),
            _ => panic!(
                "fixture {} not ready after {:?}; stderr:\n{}",
                self.name,
                self.timeout,
                self.stderr()
            ),
        }
    }

    /// The next line the fixture prints (`-c` fixtures), within `timeout`; panics with its
    /// stderr otherwise.
    pub fn read_line(&self, timeout: Duration) -> String {
        self.read_line_until(Instant::now() + timeout)
            .unwrap_or_else(|why| self.not_ready(why))
    }

    fn read_line_until(&self, deadline: Instant) -> Result<String, &'static str> {
        let lines = self
            .lines
            .as_ref()
            .expect("a -c fixture has its stdout read");
        let left = deadline.saturating_duration_since(Instant::now());
        match lines.recv_timeout(left) {
            Ok(line) => Ok(line),
            Err(RecvTimeoutError::Timeout) => Err("late"),
            Err(RecvTimeoutError::Disconnected) => {
                // Stdout closed: the fixture is exiting; let the reaper see it.
                let _ = self.wait_exit(Duration::from_secs(1));
                Err("exited")
            }
        }
    }

    /// Writes a line to the fixture's stdin (started with [`FixtureBuilder::stdin`]).
    pub fn send(&mut self, line: &str) {
        let stdin = self.stdin.as_mut().expect("fixture started with stdin()");
        writeln!(stdin, "{line}").expect("fixture input");
        stdin.flush().expect("fixture input");
    }

    /// The ready file's content parsed as JSON (fixtures that describe their threads).
    pub fn ready_json(&self) -> serde_json::Value {
        let text = fs::read_to_string(&self.ready_path).expect("ready file");
        serde_json::from_str(&text)
            .unwrap_or_else(|e| panic!("ready file of {} is not JSON ({e}): {text}", self.name))
    }

    /// The pid the fixture wrote into its ready file: the interpreter's own pid (`python3`
    /// may be a launcher that is not the process sampled).
    pub fn ready_pid(&self) -> u32 {
        let text = fs::read_to_string(&self.ready_path).expect("ready file");
        text.trim()
            .parse()
            .unwrap_or_else(|_| panic!("ready file of {} is not a pid: {text:?}", self.name))
    }

    /// OS thread id of the fixture thread with this Python name (from the JSON ready file).
    pub fn native_id(&self, thread_name: &str) -> u64 {
        self.ready_json()["threads"][thread_name]["native_id"]
            .as_u64()
            .unwrap_or_else(|| panic!("no thread {thread_name} in ready file"))
    }

    pub fn stderr(&self) -> String {
        fs::read_to_string(&self.stderr_path).unwrap_or_default()
    }

    /// The exit status once the fixture has exited (and been reaped). A fixture not reaped in
    /// the background is asked now (not while the test ptraces it).
    pub fn exit_status(&self) -> Option<ExitStatus> {
        if self.reaper.is_none() && lock(&self.exited).is_none() {
            if let Ok(Some(status)) = lock(&self.child).try_wait() {
                *lock(&self.exited) = Some(status);
            }
        }
        *lock(&self.exited)
    }

    /// Waits up to `timeout` for the fixture to exit by itself.
    pub fn wait_exit(&self, timeout: Duration) -> Option<ExitStatus> {
        let deadline = Instant::now() + timeout;
        while Instant::now() < deadline {
            if let Some(status) = self.exit_status() {
                return Some(status);
            }
            thread::sleep(Duration::from_millis(20));
        }
        self.exit_status()
    }
}

impl Drop for Fixture {
    fn drop(&mut self) {
        self.stop_reaper.store(true, Ordering::SeqCst);
        if let Some(reaper) = self.reaper.take() {
            let _ = reaper.join();
        }
        let mut child = lock(&self.child);
        if self.pid != child.id() {
            // The interpreter a launcher started; a fixture left ptrace-stopped still dies of
            // SIGKILL.
            let pid = nix::unistd::Pid::from_raw(self.pid as i32);
            let _ = nix::sys::signal::kill(pid, nix::sys::signal::Signal::SIGKILL);
        }
        if lock(&self.exited).is_none() {
            let _ = child.kill();
            let _ = child.wait();
        }
    }
}

fn lock<T>(m: &Mutex<T>) -> MutexGuard<'_, T> {
    m.lock().unwrap_or_else(|poisoned| poisoned.into_inner())
}

/// pyenv's root: `$PYENV_ROOT`, else what `pyenv root` says, else `~/.pyenv`.
pub fn pyenv_root() -> Option<PathBuf> {
    if let Some(root) = std::env::var_os("PYENV_ROOT") {
        return Some(root.into());
    }
    if let Ok(out) = Command::new("pyenv").arg("root").output() {
        let root = String::from_utf8_lossy(&out.stdout).trim().to_owned();
        if out.status.success() && !root.is_empty() {
            return Some(root.into());
        }
    }
    std::env::var_os("HOME").map(|h| Path::new(&h).join(".pyenv"))
}

/// The CPython minor versions the tests run on: pyenv's where it has them, else those of
/// [`SID_VERSIONS`] from the Debian unstable root ([`sid_root`]).
pub const VERSIONS: [&str; 6] = ["3.10", "3.11", "3.12", "3.13", "3.14", "3.15"];

/// The minor versions the Debian unstable root provides where pyenv lacks them.
pub const SID_VERSIONS: [&str; 2] = ["3.14", "3.15"];

/// pyenv's interpreter of each of `minors` (the newest patch release installed), as
/// `(minor, path)`; one printed line for each minor that is not installed.
pub fn pyenv_interpreters(minors: &[&str]) -> Vec<(String, PathBuf)> {
    let found = pyenv_found(minors);
    for &minor in minors {
        if !found.iter().any(|(m, _)| m == minor) {
            eprintln!("skipped: Python {minor} is not installed under pyenv");
        }
    }
    found
}

/// pyenv's newest patch release of each of `minors` that is installed, silently.
fn pyenv_found(minors: &[&str]) -> Vec<(String, PathBuf)> {
    let root = pyenv_root();
    let mut installed: Vec<String> = root
        .as_ref()
        .and_then(|r| fs::read_dir(r.join("versions")).ok())
        .map(|dir| {
            dir.flatten()
                .map(|e| e.file_name().to_string_lossy().into_owned())
                .collect()
        })
        .unwrap_or_default();
    installed.sort_by_key(|v| {
        v.split('.')
            .map(|p| p.parse::<u32>().unwrap_or(0))
            .collect::<Vec<_>>()
    });
    let mut out = Vec::new();
    for &minor in minors {
        let found = installed
            .iter()
            .rev()
            .filter(|v| v.strip_prefix(minor).is_some_and(|r| r.starts_with('.')))
            .filter_map(|v| {
                let p = root.as_ref()?.join("versions").join(v).join("bin/python3");
                p.exists().then_some(p)
            })
            .next();
        if let Some(p) = found {
            out.push((minor.to_owned(), p));
        }
    }
    out
}

/// The interpreter of each of `minors`, as `(minor, path)` in the order asked: pyenv's (the
/// newest patch release installed), else, for [`SID_VERSIONS`], the Debian unstable root's
/// wrapper ([`sid_python`]), which builds that root the first time. One printed line for each
/// minor that neither has, and one for all those the root was to give when it cannot be built
/// (`skipped: Python 3.14 and 3.15: the Debian root could not be built: WHY`).
pub fn interpreters_of(minors: &[&str]) -> Vec<(String, PathBuf)> {
    let mut found = pyenv_found(minors);
    let from_sid: Vec<&str> = minors
        .iter()
        .copied()
        .filter(|m| SID_VERSIONS.contains(m) && !found.iter().any(|(f, _)| f == m))
        .collect();
    for &minor in minors {
        if !found.iter().any(|(m, _)| m == minor) && !from_sid.contains(&minor) {
            eprintln!("skipped: Python {minor} is not installed under pyenv");
        }
    }
    if !from_sid.is_empty() {
        match sid_root() {
            Ok(bin) => found.extend(
                from_sid
                    .iter()
                    .map(|m| (m.to_string(), bin.join(format!("python{m}")))),
            ),
            Err(why) => eprintln!(
                "skipped: Python {}: the Debian root could not be built: {why}",
                from_sid.join(" and ")
            ),
        }
    }
    found.sort_by_key(|(m, _)| minors.iter().position(|x| x == m));
    found
}

/// The Debian unstable root's wrapper of Python `minor` (one of [`SID_VERSIONS`]), built the
/// first time it is asked for ([`sid_root`]); why not, when the root cannot be built.
pub fn sid_python(minor: &str) -> Result<PathBuf, String> {
    assert!(
        SID_VERSIONS.contains(&minor),
        "the Debian root has no {minor}"
    );
    Ok(sid_root()?.join(format!("python{minor}")))
}

/// The directory of the Debian unstable root's interpreter wrappers (`python3.14`,
/// `python3.15`), each used exactly like a python path: it keeps its pid and runs the
/// interpreter in a mount namespace of its own whose root is a Debian unstable root, where the
/// host's `/tmp`, `$TMPDIR` and this workspace are at the same paths (so fixtures and ready
/// files are where the test says). `scripts/sid-root` builds the root, once, in
/// `$STACKSCOPE_SID_ROOT` or `<workspace>/target/debian-sid-root` (mmdebstrap, as root, from
/// Debian's mirror: about 190 MB, 20 to 40 s), under a lock file, so that any number of test
/// threads and test binaries may ask at once; this runs it once per test process. Why not, in
/// one line, when it cannot be built (not root, no mmdebstrap, no network, or
/// `STACKSCOPE_SID_ROOT=off`).
pub fn sid_root() -> Result<PathBuf, String> {
    static ROOT: OnceLock<Result<PathBuf, String>> = OnceLock::new();
    ROOT.get_or_init(build_sid_root).clone()
}

fn build_sid_root() -> Result<PathBuf, String> {
    if std::env::var_os("STACKSCOPE_SID_ROOT").is_some_and(|v| v == "off") {
        return Err("STACKSCOPE_SID_ROOT=off".to_owned());
    }
    let script = workspace_root().join("scripts/sid-root");
    let out = Command::new("bash")
        .arg(&script)
        .stdin(Stdio::null())
        .output()
        .map_err(|e| format!("cannot run {}: {e}", script.display()))?;
    let stderr = String::from_utf8_lossy(&out.stderr);
    if !out.status.success() {
        let why = stderr
            .lines()
            .rev()
            .find(|l| !l.trim().is_empty())
            .unwrap_or("no reason given");
        return Err(format!("{why} ({})", out.status));
    }
    let bin = PathBuf::from(String::from_utf8_lossy(&out.stdout).trim());
    match SID_VERSIONS
        .iter()
        .map(|m| bin.join(format!("python{m}")))
        .find(|p| !p.exists())
    {
        Some(missing) => Err(format!("{} is missing after building", missing.display())),
        None => Ok(bin),
    }
}

/// The interpreters to test: `python3`, then the one of each of `minors` that pyenv or the
/// Debian unstable root gives ([`interpreters_of`]). Says which run.
pub fn interpreters(minors: &[&str]) -> Vec<String> {
    let mut out = vec!["python3".to_owned()];
    out.extend(
        interpreters_of(minors)
            .into_iter()
            .map(|(_, p)| p.to_string_lossy().into_owned()),
    );
    eprintln!("interpreters: {}", out.join(", "));
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Each wrapper of the Debian root runs its version, keeps the pid it was spawned with, runs
    /// in another root (the Debian one: stackscope reads it through /proc/PID/root), and sees
    /// the test's paths (a temp dir, the repository) where the test does.
    #[test]
    fn the_debian_root_wrappers_keep_the_pid_and_run_in_the_root() {
        for minor in SID_VERSIONS {
            let python = match sid_python(minor) {
                Ok(python) => python,
                Err(why) => {
                    eprintln!(
                        "skipped: Python {}: the Debian root could not be built: {why}",
                        SID_VERSIONS.join(" and ")
                    );
                    return;
                }
            };
            // A file of the repository copied into a temp dir: both are where the test sees
            // them.
            let dir = tempfile::tempdir().expect("temp dir");
            let copy = dir.path().join("copy");
            let code = "import os, sys\n\
                        open(sys.argv[1], 'w').write(open(sys.argv[2]).read())\n\
                        print('ready', os.getpid(), '%d.%d' % sys.version_info[:2], flush=True)\n\
                        sys.stdin.read()\n";
            let fixture = Fixture::code(code)
                .python(&python)
                .args(&[copy.clone(), fixture_path("versions_target.py")])
                .stdin()
                .spawn();
            let said = fixture.wait_ready();
            eprintln!("{}: {said}", python.display());
            assert_eq!(
                said,
                format!("ready {} {minor}", fixture.pid),
                "{minor}: the wrapper's pid is the interpreter's"
            );
            assert_eq!(
                fs::read_to_string(&copy).expect("the copy"),
                fs::read_to_string(fixture_path("versions_target.py")).expect("the fixture"),
                "{minor}"
            );
            let root = fs::read_link(format!("/proc/{}/root", fixture.pid)).expect("root");
            assert_ne!(root, Path::new("/"), "{minor}: runs in the Debian root");
            assert!(root.ends_with("root"), "{minor}: root {}", root.display());
        }
    }
}
