//! Bad input: one clear line, the right exit code, never a panic, never a
//! target left stopped. And a target exiting mid-recording is not an error.

use crate::common;

use common::*;
use std::fs;
use std::os::unix::fs::PermissionsExt;
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::time::Duration;

const RUN_TIMEOUT: Duration = Duration::from_secs(30);

/// A non-Python process (sleep), killed and reaped on drop.
struct Sleeper(Child);

impl Sleeper {
    fn start() -> Sleeper {
        Sleeper(
            Command::new("sleep")
                .arg("100")
                .stdin(Stdio::null())
                .stdout(Stdio::null())
                .stderr(Stdio::null())
                .spawn()
                .expect("sleep 100"),
        )
    }

    fn pid(&self) -> u32 {
        self.0.id()
    }
}

impl Drop for Sleeper {
    fn drop(&mut self) {
        let _ = self.0.kill();
        let _ = self.0.wait();
    }
}

#[test]
fn no_such_pid() {
    let pid = unused_pid().to_string();
    let out = OutDir::new();
    for args in [
        vec!["attach", "--pid", &pid, "-o", out.arg(), "--duration", "1"],
        vec!["dump", "--pid", &pid],
        vec!["dump", "--pid", &pid, "--json"],
    ] {
        let run = run_stackscope(&args, RUN_TIMEOUT);
        run.assert_error(1);
        run.assert_stderr_contains("no process with pid");
        run.assert_stderr_contains(&pid);
    }
}

#[test]
fn not_a_python_process() {
    let sleeper = Sleeper::start();
    let pid = sleeper.pid().to_string();
    // Let exec finish, so /proc/PID/exe is sleep, not this test binary.
    let deadline = std::time::Instant::now() + Duration::from_secs(5);
    while !exe_of(sleeper.pid()).ends_with("sleep") {
        assert!(std::time::Instant::now() < deadline, "sleep never exec'd");
        std::thread::sleep(Duration::from_millis(10));
    }
    let exe = exe_of(sleeper.pid());
    let out = OutDir::new();
    // attach follows the tree by default, and a launcher may start its Python later: only
    // --no-subprocesses refuses it at once. dump, which reads once, refuses a tree with no
    // Python either way.
    for args in [
        vec![
            "attach",
            "--pid",
            &pid,
            "-o",
            out.arg(),
            "--duration",
            "1",
            "--no-subprocesses",
        ],
        vec!["dump", "--pid", &pid, "--no-subprocesses"],
        vec!["dump", "--pid", &pid],
        vec!["dump", "--pid", &pid, "--json"],
    ] {
        let run = run_stackscope(&args, RUN_TIMEOUT);
        run.assert_error(1);
        run.assert_stderr_contains("not a python process");
        assert!(
            run.stderr.contains(&exe),
            "the message should name the executable {exe}\n{}",
            run.describe()
        );
        assert_not_stopped(sleeper.pid());
    }
}

fn is_root() -> bool {
    fs::read_to_string("/proc/self/status")
        .ok()
        .and_then(|s| {
            s.lines()
                .find(|l| l.starts_with("Uid:"))
                .map(|l| l.split_whitespace().nth(2) == Some("0"))
        })
        .unwrap_or(false)
}

fn find_setpriv() -> Option<PathBuf> {
    [
        "/usr/bin/setpriv",
        "/bin/setpriv",
        "/usr/sbin/setpriv",
        "/sbin/setpriv",
    ]
    .iter()
    .map(PathBuf::from)
    .find(|p| p.is_file())
}

fn chmod(path: &Path, mode: u32) {
    fs::set_permissions(path, fs::Permissions::from_mode(mode)).expect("chmod");
}

#[test]
fn not_permitted_to_trace() {
    if !is_root() {
        println!("skipped: needs root to run stackscope as an unprivileged user");
        return;
    }
    let Some(setpriv) = find_setpriv() else {
        println!("skipped: setpriv not found");
        return;
    };
    let fixture = Fixture::start("cpu_split.py", &[]);
    // A copy of the binary that user 65534 can run wherever the target dir is.
    let place = tempfile::tempdir().expect("temp dir");
    chmod(place.path(), 0o777);
    let exe = place.path().join("stackscope");
    fs::copy(bin(), &exe).expect("copy the binary");
    chmod(&exe, 0o755);
    let out = place.path().join("out");
    let pid = fixture.pid.to_string();
    for args in [
        vec!["dump", "--pid", &pid],
        vec![
            "attach",
            "--pid",
            &pid,
            "-o",
            out.to_str().expect("utf-8"),
            "--duration",
            "1",
        ],
    ] {
        let mut cmd = Command::new(&setpriv);
        cmd.args(["--reuid=65534", "--regid=65534", "--clear-groups"])
            .arg(&exe)
            .args(&args)
            .current_dir(place.path());
        let run = run_with_timeout(cmd, RUN_TIMEOUT);
        run.assert_error(1);
        run.assert_stderr_contains("permission");
        run.assert_stderr_contains("CAP_SYS_PTRACE");
        assert_running_and_progressing(fixture.pid);
    }
}

fn assert_unwritable_fails_fast(out: &str, what: &str) {
    let fixture = Fixture::start("cpu_split.py", &[]);
    let pid = fixture.pid.to_string();
    let run = run_stackscope(
        &["attach", "--pid", &pid, "-o", out, "--duration", "5"],
        RUN_TIMEOUT,
    );
    run.assert_error(1);
    run.assert_stderr_contains("cannot write");
    assert!(
        run.elapsed < Duration::from_secs(3),
        "{what}: should fail before sampling, took {:?}\n{}",
        run.elapsed,
        run.describe()
    );
    assert_running_and_progressing(fixture.pid);
}

#[test]
fn unwritable_output_dir_in_proc() {
    assert_unwritable_fails_fast("/proc/stackscope-test", "a dir under /proc");
}

#[test]
fn output_dir_under_a_regular_file() {
    let tmp = tempfile::tempdir().expect("temp dir");
    let file = tmp.path().join("plain-file");
    fs::write(&file, "not a directory").expect("write");
    let out = file.join("out");
    assert_unwritable_fails_fast(out.to_str().expect("utf-8"), "a dir under a file");
    assert_eq!(fs::read_to_string(&file).expect("read"), "not a directory");
}

#[test]
fn record_unwritable_output_dir() {
    let tmp = tempfile::tempdir().expect("temp dir");
    let ready = tmp.path().join("ready");
    let mut cmd = stackscope(&["record", "-o", "/proc/stackscope-test", "--"]);
    cmd.arg("python3")
        .arg(fixture_path("exits_soon.py"))
        .arg(&ready)
        .arg("1");
    let run = run_with_timeout(cmd, RUN_TIMEOUT);
    // stackscope's own failure, apart from any status of the command's.
    run.assert_error(125);
    run.assert_stderr_contains("cannot write");
}

#[test]
fn bad_rates_are_usage_errors() {
    let fixture = Fixture::start("cpu_split.py", &[]);
    let pid = fixture.pid.to_string();
    let out = OutDir::new();
    for rate in ["0", "100000", "abc", "-5"] {
        let rate_arg = format!("--rate={rate}");
        let run = run_stackscope(
            &[
                "attach",
                "--pid",
                &pid,
                "-o",
                out.arg(),
                "--duration",
                "1",
                &rate_arg,
            ],
            RUN_TIMEOUT,
        );
        assert_eq!(
            run.code(),
            Some(2),
            "--rate {rate} should be a usage error\n{}",
            run.describe()
        );
        run.assert_no_panic();
        run.assert_stderr_contains("rate");
        assert!(!out.out.exists(), "--rate {rate} wrote {:?}", out.out);
    }
    let run = run_stackscope(
        &["record", "--rate", "0", "--", "python3", "-c", "pass"],
        RUN_TIMEOUT,
    );
    assert_eq!(run.code(), Some(2), "record --rate 0\n{}", run.describe());
    run.assert_stderr_contains("rate");
    assert_not_stopped(fixture.pid);
}

#[test]
fn usage_errors_exit_2() {
    for (args, says) in [
        (vec!["attach"], "--pid"),
        (vec!["attach", "--pid", "notanumber"], "notanumber"),
        (vec!["dump"], "--pid"),
        (vec!["no-such-subcommand"], "no-such-subcommand"),
        (vec!["record"], "COMMAND"),
        (
            vec!["record", "--foo", "--", "python3"],
            "unexpected argument '--foo'",
        ),
        (vec!["watch", "--pid", "1", "--hang-after", "x"], "'x'"),
        (vec!["report"], "DIR"),
        (vec!["export", "dir", "--format", "svg"], "svg"),
        (vec!["top", "--pid", "1", "--rate=0"], "rate"),
        (vec!["merge"], "FILE|DIR"),
        (vec![], "name a command"),
    ] {
        let run = run_stackscope(&args, RUN_TIMEOUT);
        run.assert_usage_error();
        run.assert_stderr_contains(says);
        if let Some(command) = args.first().filter(|a| !a.contains("no-such")) {
            run.assert_stderr_contains(&format!("(try 'stackscope {command} --help')"));
        }
    }
    let run = run_stackscope(&["--version"], RUN_TIMEOUT);
    run.assert_success();
    assert!(run.stdout.starts_with("stackscope "), "{}", run.describe());
    let run = run_stackscope(&["attach", "--help"], RUN_TIMEOUT);
    run.assert_success();
    for option in ["--pid", "--duration", "--rate", "--idle", "-o"] {
        assert!(
            run.stdout.contains(option),
            "attach --help: {option}\n{}",
            run.stdout
        );
    }
}

#[test]
fn record_of_a_missing_command() {
    let out = OutDir::new();
    let run = run_stackscope(
        &[
            "record",
            "-o",
            out.arg(),
            "--",
            "/nonexistent/stackscope-no-such-cmd",
        ],
        RUN_TIMEOUT,
    );
    // As a shell says it.
    run.assert_error(127);
    run.assert_stderr_contains("/nonexistent/stackscope-no-such-cmd");
}

#[test]
fn target_exiting_mid_recording_is_not_an_error() {
    // cpu_split runs 1 s, then exits 0; stackscope would sample 5 s.
    let fixture = Fixture::start("cpu_split.py", &["1"]);
    let out = OutDir::new();
    let pid = fixture.pid.to_string();
    let run = run_stackscope(
        &["attach", "--pid", &pid, "-o", out.arg(), "--duration", "5"],
        RUN_TIMEOUT,
    );
    run.assert_success();
    run.assert_no_panic();
    assert!(
        run.elapsed < Duration::from_secs(4),
        "stackscope should notice the exit, took {:?}\n{}",
        run.elapsed,
        run.describe()
    );
    let status = fixture.wait_exit(Duration::from_secs(5));
    assert!(
        status.is_some_and(|s| s.success()),
        "the fixture should have exited 0 by itself: {status:?}"
    );
    let summary = out.summary();
    assert_eq!(
        summary["target_exited"],
        serde_json::json!(true),
        "{summary:#}"
    );
    assert!(num(&summary["samples"], "samples") > 0.0, "{summary:#}");
    let folded = out.folded();
    assert!(
        folded.thread_function_total("MainThread", "hot_heavy") > 0,
        "samples before the exit:\n{}",
        folded.excerpt()
    );
    assert_eq!(num(&summary["samples"], "samples") as u64, folded.total());
}

/// Each message a newcomer meets, one line that says what is wrong.
#[test]
fn newcomers_messages_are_one_line_each() {
    // `--rate -5` is a rate out of range, not an unknown option, with every command's --rate.
    for command in [
        vec!["attach", "--pid", "1"],
        vec!["top", "--pid", "1"],
        vec!["watch", "--pid", "1"],
    ] {
        let mut args = command.clone();
        args.extend(["--rate", "-5"]);
        let run = run_stackscope(&args, RUN_TIMEOUT);
        run.assert_usage_error();
        run.assert_stderr_contains("--rate must be between 0.1 and 10000");
    }
    let tmp = tempfile::tempdir().expect("temp dir");
    let file = tmp.path().join("plain-file");
    fs::write(&file, "x").expect("write");
    let file = file.to_str().expect("utf-8");
    // `-o FILE`: what is wrong, not "File exists (os error 17)"; demo says it before its loop.
    let fixture = Fixture::start("cpu_split.py", &[]);
    let pid = fixture.pid.to_string();
    for args in [
        vec!["attach", "--pid", &pid, "-o", file, "--duration", "5"],
        vec!["demo", "-o", file, "--seconds", "20"],
    ] {
        let run = run_stackscope(&args, RUN_TIMEOUT);
        run.assert_error(1);
        run.assert_stderr_contains(&format!("-o {file} is a file, not a directory"));
        assert_eq!(run.stderr.lines().count(), 1, "{}", run.describe());
        assert!(
            run.elapsed < Duration::from_secs(3),
            "{args:?}: should fail before it runs, took {:?}",
            run.elapsed
        );
    }
    // `report` and `export` of a directory that is not there.
    let missing = tmp.path().join("no-such-recording");
    let missing = missing.to_str().expect("utf-8");
    for args in [
        vec!["report", missing],
        vec!["export", missing, "--format", "pprof"],
    ] {
        let run = run_stackscope(&args, RUN_TIMEOUT);
        run.assert_error(1);
        run.assert_stderr_contains(&format!("no such directory: {missing}"));
        assert_eq!(run.stderr.lines().count(), 1, "{}", run.describe());
    }
}

/// `watch` needs no `--hang-after`: its default is the one hang threshold, 300 s, and its help
/// says so.
#[test]
fn watch_hang_after_defaults_to_the_one_threshold() {
    let help = run_stackscope(&["watch", "--help"], RUN_TIMEOUT);
    help.assert_success();
    let flat = help.stdout.split_whitespace().collect::<Vec<_>>().join(" ");
    assert!(
        flat.contains("--hang-after <SECS>") && flat.contains("[default: 300]"),
        "{}",
        help.stdout
    );
    let fixture = Fixture::start("cpu_split.py", &[]);
    let out = OutDir::new();
    let running = spawn_stackscope(stackscope(&[
        "watch",
        "--pid",
        &fixture.pid.to_string(),
        "--gpu",
        "off",
        "-o",
        out.arg(),
    ]));
    // The output directory is made just before the startup line: past it, Ctrl-C still
    // lets the line be printed (the signal only asks the loop to end).
    let (running, ()) = wait_while_running(running, RUN_TIMEOUT, "the output directory", || {
        out.out.is_dir().then_some(())
    });
    let run = stop_bounded(running);
    run.assert_success();
    let said = run
        .stderr
        .lines()
        .find(|l| l.contains("watching process"))
        .unwrap_or_else(|| panic!("no startup line\n{}", run.describe()));
    assert!(said.contains("for 300 s"), "{said}");
}
