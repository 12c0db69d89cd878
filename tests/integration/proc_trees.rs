//! Process trees as launchers make them (issue 12): a launcher that is not Python, the tree a
//! recording started and must end, helper processes beside workers, a process whose leader
//! thread exited, thread names that arrive late, reused thread ids, and the dump's small print.
//!
//! Every `record` run here (as everywhere in the suite) is checked afterwards for processes it
//! left behind (tests/integration/common/leftovers.rs).

use crate::common;

use common::*;
use std::fs;
use std::os::unix::process::CommandExt;
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::time::Duration;

const WAIT: Duration = Duration::from_secs(30);
const FINISH: Duration = Duration::from_secs(30);

/// `sh fixtures/launcher.sh READY DELAY FIXTURE ARGS...` in a process group of its own,
/// killed as a group on drop.
struct ShellLauncher {
    child: Child,
    ready: PathBuf,
    _dir: tempfile::TempDir,
}

impl ShellLauncher {
    fn start(delay: &str, fixture: &str, args: &[&str]) -> ShellLauncher {
        let dir = tempfile::tempdir().expect("temp dir");
        let ready = dir.path().join("ready");
        let child = Command::new("sh")
            .arg(fixture_path("launcher.sh"))
            .arg(&ready)
            .arg(delay)
            .arg(fixture)
            .args(args)
            .env("PYTHONDONTWRITEBYTECODE", "1")
            .stdin(Stdio::null())
            .stdout(Stdio::null())
            .stderr(Stdio::null())
            .process_group(0)
            .spawn()
            .expect("sh launcher.sh");
        ShellLauncher {
            child,
            ready,
            _dir: dir,
        }
    }

    fn pid(&self) -> u32 {
        self.child.id()
    }

    /// The pid of the Python process the script started, once it is ready.
    fn python_pid(&self) -> u32 {
        wait_for_pid_file(&self.ready, WAIT)
    }
}

impl Drop for ShellLauncher {
    fn drop(&mut self) {
        let _ = Command::new("kill")
            .arg("-KILL")
            .arg("--")
            .arg(format!("-{}", self.child.id()))
            .status();
        let _ = self.child.wait();
    }
}

fn process_entry(summary: &serde_json::Value, pid: u32) -> Option<&serde_json::Value> {
    summary["processes"]
        .as_array()?
        .iter()
        .find(|p| p["pid"].as_u64() == Some(u64::from(pid)))
}

fn samples_under_process(folded: &Folded, pid: u32, function: &str) -> u64 {
    folded
        .stacks
        .iter()
        .filter(|s| s.process.as_deref().and_then(process_root_pid) == Some(pid))
        .filter(|s| s.has_function(function))
        .map(|s| s.count)
        .sum()
}

// ------------------------------------------------------------------ 1: launchers

#[test]
fn record_subprocesses_follows_python_started_late_by_a_shell_script() {
    follows_python_started_late_by_a_shell_script(Some);
}

/// In a PID namespace of its own the kernel's process events name other pids than the ones
/// stackscope sees, so its finder walks the tree on the clock alone: it still finds the child.
#[test]
fn record_subprocesses_in_a_pid_namespace_finds_children_on_the_clock() {
    follows_python_started_late_by_a_shell_script(|cmd| in_pid_namespace(&cmd));
}

fn follows_python_started_late_by_a_shell_script(wrap: impl Fn(Command) -> Option<Command>) {
    let _serial = serial();
    let out = OutDir::new();
    let ready = out.tmp.path().join("ready");
    let mut cmd = stackscope(&[
        "record",
        "--subprocesses",
        "--duration",
        "6",
        "-o",
        out.arg(),
        "--",
        "sh",
    ]);
    cmd.arg(fixture_path("launcher.sh"))
        .arg(&ready)
        .arg("1")
        .arg("cpu_split.py")
        .env("PYTHONDONTWRITEBYTECODE", "1");
    let Some(cmd) = wrap(cmd) else {
        return;
    };
    let run = run_with_timeout(cmd, FINISH);
    // --duration ended the recording as asked: 0, whatever the shell made of its SIGINT.
    run.assert_duration_ended();
    run.assert_stderr_contains("not Python");
    let python = wait_for_pid_file(&ready, Duration::from_secs(1));
    let (summary, folded) = assert_complete_outputs(&out.out);
    let hot = samples_under_process(&folded, python, "hot_heavy");
    assert!(
        hot > 10,
        "the Python child {python} of the shell script should be sampled (hot_heavy):\n{}",
        folded.excerpt()
    );
    let root = num(&summary["pid"], "pid") as u32;
    assert_ne!(root, python);
    let shell = process_entry(&summary, root)
        .unwrap_or_else(|| panic!("the shell root in processes: {}", summary["processes"]));
    assert_eq!(shell["samples"].as_u64(), Some(0), "{shell}");
    assert!(
        shell["command_line"]
            .as_str()
            .is_some_and(|c| c.contains("launcher.sh")),
        "{shell}"
    );
    assert_eq!(summary["python_version"], "", "the root runs no Python");
}

#[test]
fn attach_and_dump_accept_a_shell_launcher_with_subprocesses() {
    let _serial = serial();
    let launcher = ShellLauncher::start("0.5", "cpu_split.py", &[]);
    let python = launcher.python_pid();
    let sh = launcher.pid().to_string();

    // With --no-subprocesses: the same clear error, now pointing at the Python below.
    let run = run_stackscope(&["dump", "--pid", &sh, "--no-subprocesses"], WAIT);
    run.assert_error(1);
    run.assert_stderr_contains("is not a Python process");
    run.assert_stderr_contains(&format!("pid {python}"));
    run.assert_stderr_contains("leave out --no-subprocesses");

    // By default, as with --subprocesses: the tree.
    let run = run_stackscope(&["dump", "--pid", &sh], WAIT);
    run.assert_success();
    assert!(run.stdout.contains("hot_"), "{}", run.describe());
    let run = run_stackscope(&["dump", "--pid", &sh, "--subprocesses"], WAIT);
    run.assert_success();
    assert!(
        run.stdout.contains(&format!("Process {sh}: sh "))
            && run.stdout.contains("Not Python")
            && run
                .stdout
                .contains(&format!("Process {python} (child of {sh})")),
        "{}",
        run.describe()
    );
    let run = run_stackscope(&["dump", "--pid", &sh, "--subprocesses", "--json"], WAIT);
    run.assert_success();
    let json: serde_json::Value = serde_json::from_str(&run.stdout).expect("dump JSON");
    let processes = json["processes"].as_array().expect("processes");
    assert_eq!(processes[0]["pid"].as_u64(), Some(launcher.pid().into()));
    assert_eq!(processes[0]["threads"].as_array().map(Vec::len), Some(0));
    assert!(processes
        .iter()
        .any(|p| p["pid"].as_u64() == Some(python.into())));

    let out = OutDir::new();
    let run = run_stackscope(
        &[
            "attach",
            "--pid",
            &sh,
            "--subprocesses",
            "--duration",
            "3",
            "-o",
            out.arg(),
        ],
        FINISH,
    );
    run.assert_success();
    let (summary, folded) = assert_complete_outputs(&out.out);
    assert!(
        samples_under_process(&folded, python, "hot_heavy") > 0,
        "{}",
        folded.excerpt()
    );
    assert!(process_entry(&summary, launcher.pid()).is_some());
    assert_eq!(summary["target_exited"], serde_json::json!(false));
    assert_not_stopped(python);
}

#[test]
fn record_no_subprocesses_of_a_shell_fails_and_leaves_nothing_running() {
    let _serial = serial();
    let out = OutDir::new();
    let ready = out.tmp.path().join("ready");
    let mut cmd = stackscope(&["record", "--no-subprocesses", "-o", out.arg(), "--", "sh"]);
    cmd.arg(fixture_path("launcher.sh"))
        .arg(&ready)
        .arg("0.2")
        .arg("cpu_split.py");
    // The check that nothing is left runs inside run_with_timeout.
    let run = run_with_timeout(cmd, FINISH);
    run.assert_no_panic();
    // stackscope's failure, not the shell's: `record`'s own status.
    assert_eq!(run.code(), Some(125), "{}", run.describe());
    run.assert_stderr_contains("is not a Python process");
    run.assert_stderr_contains("leave out --no-subprocesses");
    let python = wait_for_pid_file(&ready, Duration::from_secs(1));
    assert!(!process_exists(python), "the Python job {python} was left");
}

// ------------------------------------------------------------------ 2: ending the tree

/// The pool's processes, from its ready file: main, workers, resource tracker.
fn pool_pids(ready: &Path) -> Vec<u32> {
    let text = wait_until(WAIT, "the pool's ready file", || {
        fs::read_to_string(ready).ok().filter(|t| !t.is_empty())
    });
    let json: serde_json::Value = serde_json::from_str(&text).expect("ready JSON");
    let mut pids = vec![num(&json["pid"], "pid") as u32];
    for w in json["workers"].as_array().expect("workers") {
        pids.push(num(w, "worker") as u32);
    }
    if let Some(tracker) = json["tracker"].as_u64() {
        pids.push(tracker as u32);
    }
    pids
}

fn check_pool_ended(run: &Run, out: &OutDir, pids: &[u32]) {
    for &pid in pids {
        assert!(
            !process_exists(pid),
            "pool process {pid} outlived the recording\n{}",
            run.describe()
        );
    }
    let summary = out.summary();
    // The console and the summary tell the same ending.
    run.assert_stderr_contains("SIGINT to its process group");
    assert_eq!(
        summary["target_exited"],
        serde_json::json!(true),
        "{summary:#}"
    );
    match (
        summary["exit_status"].as_i64(),
        summary["exit_signal"].as_i64(),
    ) {
        (Some(code), None) => run.assert_stderr_contains(&format!("exited with status {code}")),
        (None, Some(signal)) => run.assert_stderr_contains(&format!("ended by signal {signal}")),
        other => panic!("exit_status / exit_signal {other:?}: {summary:#}"),
    }
    // duration_secs is the time sampled: about ticks / rate, not the time ending took after.
    let duration = num(&summary["duration_secs"], "duration_secs");
    assert!(
        duration < run.elapsed.as_secs_f64(),
        "duration {duration} vs the run's {:?}",
        run.elapsed
    );
}

#[test]
fn record_duration_ends_a_spawn_pool_workers_and_resource_tracker_included() {
    let _serial = serial();
    let out = OutDir::new();
    let ready = out.tmp.path().join("ready");
    let mut cmd = stackscope(&[
        "record",
        "--subprocesses",
        "--duration",
        "8",
        "-o",
        out.arg(),
        "--",
        "python3",
    ]);
    cmd.arg(fixture_path("spawn_pool.py"))
        .arg(&ready)
        .env("PYTHONDONTWRITEBYTECODE", "1");
    let running = spawn_stackscope(cmd);
    // A loaded machine may take seconds to start three interpreters: the pool must be up
    // before the duration ends for the test to say anything about its workers.
    let (running, _) = wait_while_running(running, WAIT, "the pool's ready file", || {
        fs::read_to_string(&ready).ok().filter(|t| !t.is_empty())
    });
    let pids = pool_pids(&ready);
    assert_eq!(pids.len(), 5, "main, three workers, the tracker: {pids:?}");
    let run = finish_bounded(running, FINISH);
    run.assert_duration_ended();
    check_pool_ended(&run, &out, &pids);
    let duration = num(&out.summary()["duration_secs"], "duration_secs");
    assert!(
        (7.5..10.0).contains(&duration),
        "--duration 8 sampled for {duration} s"
    );
}

#[test]
fn record_sigterm_ends_a_spawn_pool() {
    let _serial = serial();
    let out = OutDir::new();
    let ready = out.tmp.path().join("ready");
    let mut cmd = stackscope(&[
        "record",
        "--subprocesses",
        "--flush-interval",
        "1",
        "-o",
        out.arg(),
        "--",
        "python3",
    ]);
    cmd.arg(fixture_path("spawn_pool.py"))
        .arg(&ready)
        .env("PYTHONDONTWRITEBYTECODE", "1");
    let running = spawn_stackscope(cmd);
    let pids = pool_pids(&ready);
    let (running, _) = wait_while_running(running, WAIT, "a checkpoint with samples", || {
        try_read_summary(&out.out).filter(|s| summary_samples(s) > 0)
    });
    running.signal("TERM");
    let run = finish_bounded(running, FINISH);
    run.assert_record_terminated();
    check_pool_ended(&run, &out, &pids);
}

// ------------------------------------------------------------------ 3: helpers

#[test]
fn dump_of_a_spawn_pool_names_no_helper_as_a_straggler() {
    let _serial = serial();
    let fixture = Fixture::spawn("spawn_pool.py", &[]);
    let text = fixture.wait_ready();
    let json: serde_json::Value = serde_json::from_str(&text).expect("ready JSON");
    let Some(tracker) = json["tracker"].as_u64() else {
        panic!("the spawn pool has no resource tracker: {text}");
    };
    let pid = fixture.pid.to_string();
    // The workers reach their wait a moment after they said they started.
    let run = wait_until(WAIT, "all three workers in feed_worker", || {
        let run = run_stackscope(&["dump", "--pid", &pid, "--subprocesses"], WAIT);
        (run.code() == Some(0) && run.stdout.contains("3 threads in 3 processes: MainThread"))
            .then_some(run)
    });
    assert!(
        !run.stdout.contains("Straggler"),
        "no straggler among identical workers and a helper:\n{}",
        run.stdout
    );
    assert!(
        run.stdout
            .contains("Helper process: multiprocessing resource tracker"),
        "{}",
        run.stdout
    );
    let run = run_stackscope(&["dump", "--pid", &pid, "--subprocesses", "--json"], WAIT);
    run.assert_success();
    let dump: serde_json::Value = serde_json::from_str(&run.stdout).expect("dump JSON");
    assert_eq!(dump["stragglers"], serde_json::json!([]), "{}", run.stdout);
    assert!(dump["processes"]
        .as_array()
        .expect("processes")
        .iter()
        .any(|p| p["pid"].as_u64() == Some(tracker)));
}

// ------------------------------------------------------------------ 4: leader exited

#[test]
fn a_process_whose_main_thread_exited_is_read_through_its_live_threads() {
    let _serial = serial();
    let fixture = Fixture::start("leader_exits.py", &[]);
    let pid = fixture.pid;
    assert_eq!(
        proc_state(Path::new(&format!("/proc/{pid}/stat"))),
        Some('Z'),
        "the leader thread should be a zombie"
    );
    let run = run_stackscope(&["dump", "--pid", &pid.to_string()], WAIT);
    run.assert_success();
    assert!(
        run.stdout.contains("\"orphan-worker\"") && run.stdout.contains("orphan_worker_loop"),
        "{}",
        run.describe()
    );
    let out = OutDir::new();
    let run = run_stackscope(
        &[
            "attach",
            "--pid",
            &pid.to_string(),
            "--duration",
            "2",
            "-o",
            out.arg(),
        ],
        FINISH,
    );
    run.assert_success();
    let folded = out.folded();
    assert!(
        folded.thread_function_total("orphan-worker", "orphan_worker_loop") > 10,
        "{}",
        folded.excerpt()
    );
    assert_eq!(out.summary()["target_exited"], serde_json::json!(false));
    for tid in fs::read_dir(format!("/proc/{pid}/task"))
        .expect("tasks")
        .flatten()
    {
        let stat = tid.path().join("stat");
        assert_ne!(
            proc_state(&stat),
            Some('t'),
            "{} left stopped",
            stat.display()
        );
        assert_ne!(
            proc_state(&stat),
            Some('T'),
            "{} left stopped",
            stat.display()
        );
    }
}

// ------------------------------------------------------------------ 5 and 6: thread names

#[test]
fn a_thread_named_after_its_first_samples_has_all_its_samples_under_its_name() {
    let _serial = serial();
    let tmp = tempfile::tempdir().expect("temp dir");
    let trigger = tmp.path().join("trigger");
    let fixture = Fixture::start("late_name.py", &[trigger.to_str().expect("utf-8")]);
    let tid = num(&fixture.ready_json()["tid"], "tid") as u64;
    let out = OutDir::new();
    let running = spawn_stackscope(stackscope(&[
        "attach",
        "--pid",
        &fixture.pid.to_string(),
        "--flush-interval",
        "1",
        "-o",
        out.arg(),
    ]));
    let (running, _) = wait_while_running(running, WAIT, "samples of the unnamed thread", || {
        try_read_summary(&out.out).filter(|s| summary_samples(s) > 30)
    });
    fs::write(&trigger, "go").expect("trigger");
    let named = fixture.dir.path().join("named");
    let (running, _) = wait_while_running(running, WAIT, "the thread's name", || {
        fs::metadata(&named).ok()
    });
    let seen = summary_samples(&read_summary(&out.out));
    let (running, _) = wait_while_running(running, WAIT, "samples after naming", || {
        try_read_summary(&out.out).filter(|s| summary_samples(s) > seen + 30)
    });
    running.signal("INT");
    let run = finish_bounded(running, FINISH);
    run.assert_success();
    let (summary, folded) = assert_complete_outputs(&out.out);
    let excerpt = folded.excerpt();
    assert!(
        folded.thread_total(&format!("thread {tid}")) == 0,
        "samples left under `thread {tid}`:\n{excerpt}"
    );
    assert!(
        folded.thread_function_total("late-named", "late_phase_one") > 0
            && folded.thread_function_total("late-named", "late_phase_two") > 0,
        "both phases under the name:\n{excerpt}"
    );
    let entries: Vec<&serde_json::Value> = summary["threads"]
        .as_array()
        .expect("threads")
        .iter()
        .filter(|t| t["os_thread_id"].as_u64() == Some(tid))
        .collect();
    assert_eq!(entries.len(), 1, "{}", summary["threads"]);
    assert_eq!(entries[0]["name"], "late-named");
    assert_eq!(
        entries[0]["samples"].as_u64(),
        Some(folded.thread_total("late-named"))
    );
}

#[test]
fn threads_that_reuse_a_python_thread_id_are_never_one_entry() {
    let _serial = serial();
    let tmp = tempfile::tempdir().expect("temp dir");
    let trigger = tmp.path().join("trigger");
    let fixture = Fixture::start("ident_reuse.py", &[trigger.to_str().expect("utf-8")]);
    let out = OutDir::new();
    let running = spawn_stackscope(stackscope(&[
        "attach",
        "--pid",
        &fixture.pid.to_string(),
        "--flush-interval",
        "1",
        "-o",
        out.arg(),
    ]));
    let (running, _) = wait_while_running(running, WAIT, "a first checkpoint", || {
        try_read_summary(&out.out)
    });
    fs::write(&trigger, "go").expect("trigger");
    let done = fixture.dir.path().join("done");
    let (running, text) =
        wait_while_running(running, Duration::from_secs(60), "the threads", || {
            fs::read_to_string(&done).ok().filter(|t| !t.is_empty())
        });
    running.signal("INT");
    let run = finish_bounded(running, FINISH);
    run.assert_success();
    let done: serde_json::Value = serde_json::from_str(&text).expect("done JSON");
    let idents = done["idents"].as_array().expect("idents");
    let (summary, folded) = assert_complete_outputs(&out.out);
    if idents.iter().any(|i| *i != idents[0]) {
        println!("note: the interpreter did not reuse a thread id here: {done}");
    }
    // Threads of one kind that ended are folded into the pool (`thread pool short-N`) once one was seen
    // ending; those not yet seen ending keep an entry each. No entry holds two of them: each
    // name has at most one entry, with exactly its folded samples.
    let threads = summary["threads"].as_array().expect("threads");
    let mut named = 0;
    for name in (1..=5)
        .map(|i| format!("short-{i}"))
        .chain(["thread pool short-N".to_owned()])
    {
        let entries: Vec<&serde_json::Value> = threads
            .iter()
            .filter(|t| t["name"] == name.as_str())
            .collect();
        assert!(entries.len() <= 1, "{name}: {}", summary["threads"]);
        let Some(entry) = entries.first() else {
            continue;
        };
        let samples = entry["samples"].as_u64().unwrap_or(0);
        assert!(samples > 0, "{name}: {}", summary["threads"]);
        assert_eq!(
            samples,
            folded.thread_total(&name),
            "{name} in summary.json vs stacks.folded:\n{}",
            folded.excerpt()
        );
        named += samples;
    }
    let all: u64 = folded
        .threads()
        .iter()
        .filter(|(name, _)| name.starts_with("short-") || name.starts_with("thread pool short-"))
        .map(|(_, n)| n)
        .sum();
    assert_eq!(named, all, "every short thread's samples, once");
}

// ------------------------------------------------------------------ 7: the dump's print

#[test]
fn dump_prints_unnamed_threads_newlines_paths_and_an_idle_event_loop_plainly() {
    let _serial = serial();
    let fixture = Fixture::start("small_items.py", &["two\nlines"]);
    let ready = fixture.ready_json();
    let unnamed = num(&ready["unnamed_tid"], "unnamed_tid") as u64;
    let pid = fixture.pid.to_string();
    let run = run_stackscope(&["dump", "--pid", &pid], WAIT);
    run.assert_success();
    let text = &run.stdout;
    assert!(
        !text.contains("\"\""),
        "an unnamed thread printed as \"\":\n{text}"
    );
    assert!(
        text.lines()
            .any(|l| l.starts_with(&format!("Thread {unnamed} ("))),
        "{text}"
    );
    let header = text.lines().next().unwrap_or("");
    assert!(
        header.starts_with(&format!("Process {pid}: ")) && header.ends_with("two\\nlines"),
        "the header is one line: {header:?}\n{text}"
    );
    assert!(!text.lines().any(|l| l == "lines"), "{text}");
    let event_loop = text
        .lines()
        .find(|l| l.contains("\"event-loop\""))
        .unwrap_or_else(|| panic!("no event-loop thread:\n{text}"));
    assert!(
        event_loop.contains("idle") && !event_loop.contains("running"),
        "an event loop waiting in select: {event_loop}"
    );

    let run = run_stackscope(&["dump", "--pid", &pid, "--json"], WAIT);
    run.assert_success();
    let dump: serde_json::Value = serde_json::from_str(&run.stdout).expect("dump JSON");
    let threads = dump["threads"].as_array().expect("threads");
    let unnamed_thread = threads
        .iter()
        .find(|t| t["os_thread_id"].as_u64() == Some(unnamed))
        .expect("the unnamed thread");
    assert!(unnamed_thread["name"].is_null());
    let frame = &unnamed_thread["frames"][0];
    assert_eq!(frame["file"], "small_items.py");
    let expected = fixture_path("small_items.py");
    assert_eq!(
        frame["path"].as_str().map(Path::new),
        Some(expected.as_path()),
        "{frame}"
    );
    assert!(dump["command_line"]
        .as_str()
        .is_some_and(|c| c.ends_with("two\nlines")));
}

#[test]
fn watch_subprocesses_of_a_shell_launcher_reports_the_hang_below_it() {
    let _serial = serial();
    let launcher = ShellLauncher::start("0.2", "hangs_later.py", &["--work-secs", "0"]);
    let text = wait_until(WAIT, "the fixture's ready file", || {
        fs::read_to_string(&launcher.ready)
            .ok()
            .filter(|t| !t.is_empty())
    });
    let ready: serde_json::Value = serde_json::from_str(&text).expect("ready JSON");
    let python = num(&ready["pid"], "pid") as u32;
    let out = OutDir::new();
    let running = spawn_stackscope(stackscope(&[
        "watch",
        "--pid",
        &launcher.pid().to_string(),
        "--subprocesses",
        "--hang-after",
        "2",
        "--gpu",
        "off",
        "-o",
        out.arg(),
    ]));
    let (running, report) =
        wait_while_running(running, Duration::from_secs(60), "a hang report", || {
            let entries = fs::read_dir(&out.out).ok()?;
            let txt = entries
                .flatten()
                .map(|e| e.path())
                .find(|p| p.extension().is_some_and(|e| e == "txt"))?;
            txt.with_extension("json").exists().then_some(txt)
        });
    running.signal("INT");
    let run = finish_bounded(running, FINISH);
    run.assert_success();
    let text = fs::read_to_string(&report).expect("report");
    assert!(
        text.contains("stuck_here") && text.contains(&format!("Process {python} (child of")),
        "the hang is in the Python child {python}:\n{text}"
    );
    assert!(text.contains("Not Python"), "{text}");
    assert_not_stopped(python);
}
