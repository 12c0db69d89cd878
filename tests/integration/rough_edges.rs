//! A newcomer's first hour, where it used to catch: a pipe that closes early, a terminal that
//! reports no size, the end of `record --duration`, `attach` of a tree with no Python, the
//! options the docs show, `merge` of runs of one host, and the script that checks torn stacks.

use crate::common;

use common::*;
use std::collections::{BTreeMap, BTreeSet};
use std::fs;
use std::io::{BufRead, BufReader};
use std::path::Path;
use std::process::{Command, ExitStatus, Stdio};
use std::time::{Duration, Instant};

const RUN_TIMEOUT: Duration = Duration::from_secs(60);

/// Runs `cmd` with standard output and error on one pipe (`2>&1 | head -1`): reads its first
/// line, closes the pipe, and waits for the command. Gives its status and that line.
fn run_into_closed_pipe(mut cmd: Command) -> (ExitStatus, String) {
    let (reader, writer) = std::io::pipe().expect("pipe");
    let stderr = writer.try_clone().expect("clone the pipe");
    cmd.stdin(Stdio::null()).stdout(writer).stderr(stderr);
    let mut child = cmd.spawn().expect("start stackscope");
    // The command holds the pipe's writing end now; ours goes with `cmd`.
    drop(cmd);
    let mut first = String::new();
    BufReader::new(reader)
        .read_line(&mut first)
        .expect("the first line");
    let deadline = Instant::now() + RUN_TIMEOUT;
    loop {
        if let Some(status) = child.try_wait().expect("wait") {
            return (status, first);
        }
        if Instant::now() > deadline {
            let _ = child.kill();
            panic!("{first}: did not end within {RUN_TIMEOUT:?}");
        }
        std::thread::sleep(Duration::from_millis(20));
    }
}

#[test]
fn attach_into_a_pipe_closed_after_one_line_ends_quietly_with_its_recording_whole() {
    let _serial = serial();
    let fixture = Fixture::start("cpu_split.py", &[]);
    let out = OutDir::new();
    let pid = fixture.pid.to_string();
    let cmd = stackscope(&["attach", "--pid", &pid, "--duration", "2", "-o", out.arg()]);
    let (status, first) = run_into_closed_pipe(cmd);
    assert!(first.starts_with("stackscope: sampling process"), "{first}");
    assert_eq!(status.code(), Some(0), "{status:?} after {first}");
    let (summary, folded) = assert_complete_outputs(&out.out);
    assert!(folded.total() > 0, "{summary:#}");
}

#[test]
fn record_into_a_pipe_closed_after_one_line_ends_quietly_with_its_recording_whole() {
    let _serial = serial();
    let out = OutDir::new();
    let mut cmd = stackscope(&["record", "--duration", "2", "-o", out.arg(), "--"]);
    cmd.arg("python3")
        .arg(fixture_path("train_sim.py"))
        .args(["--seconds", "60"]);
    let marker = cmd
        .get_envs()
        .find(|(k, _)| *k == MARKER_VAR)
        .and_then(|(_, v)| v)
        .map(|v| v.to_string_lossy().into_owned())
        .expect("a record is marked");
    let (status, first) = run_into_closed_pipe(cmd);
    assert_nothing_left(&marker, &first);
    assert_eq!(status.code(), Some(0), "{status:?} after {first}");
    let (_, folded) = assert_complete_outputs(&out.out);
    assert!(folded.total() > 0, "{}", folded.excerpt());
}

#[test]
fn top_draws_on_a_terminal_that_reports_no_size() {
    let found = Command::new("script").arg("--version").output();
    assert!(
        found.is_ok_and(|o| o.status.success()),
        "this test needs util-linux's script"
    );
    let _serial = serial();
    let fixture = Fixture::start("cpu_split.py", &[]);
    // `script` with no terminal of its own opens one that says it is 0x0. `--foreground` keeps
    // `top` in the terminal's foreground group whatever shell `script` starts: a shell that does
    // not exec its last command leaves `timeout` free to make a group of its own, where `top`
    // is stopped (SIGTTOU) as soon as it sets raw mode.
    let top = format!(
        "timeout --foreground -k 3 -s TERM 6 {} top --pid {} --gpu off; true",
        bin(),
        fixture.pid
    );
    let mut cmd = Command::new("script");
    cmd.args(["-qc", &top, "/dev/null"])
        .env_remove("COLUMNS")
        .env_remove("LINES");
    let run = run_with_timeout(cmd, RUN_TIMEOUT);
    for drawn in ["stackscope top", "q quit", "hot_heavy"] {
        assert!(
            run.stdout.contains(drawn),
            "{drawn:?} not drawn\n{}",
            run.describe()
        );
    }
}

#[test]
fn record_says_it_stopped_the_command_at_the_end_of_duration() {
    let _serial = serial();
    let out = OutDir::new();
    let mut cmd = stackscope(&["record", "--duration", "2", "-o", out.arg(), "--"]);
    cmd.arg("python3")
        .arg(fixture_path("train_sim.py"))
        .args(["--seconds", "60"]);
    let run = run_with_timeout(cmd, RUN_TIMEOUT);
    run.assert_duration_ended();
    run.assert_stderr_contains(
        "stopping the command at the end of --duration: SIGINT to its process group",
    );
    run.assert_stderr_contains(
        "ended by signal 2 (SIGINT) after stackscope stopped it at the end of --duration",
    );
    let note = "stackscope stopped the command at the end of --duration: SIGINT to its process \
                group, as Ctrl-C would; it ended with signal 2 (SIGINT)";
    assert!(
        run.stdout.contains(&format!("note: {note}")),
        "{}",
        run.describe()
    );
    for own_end in [
        "the target ended by signal",
        "the command ended by a signal",
    ] {
        let said = format!("{}{}", run.stdout, run.stderr);
        assert!(!said.contains(own_end), "{own_end:?}\n{}", run.describe());
    }
    let summary = out.summary();
    assert!(
        summary["notices"]
            .as_array()
            .is_some_and(|n| n.iter().any(|n| n == note)),
        "{summary:#}"
    );
}

#[test]
fn attach_of_a_tree_with_no_python_says_so_and_exits_1() {
    let mut sleep = Command::new("sleep")
        .arg("60")
        .spawn()
        .expect("start sleep");
    let out = OutDir::new();
    let pid = sleep.id().to_string();
    let run = run_stackscope(
        &["attach", "--pid", &pid, "--duration", "1", "-o", out.arg()],
        RUN_TIMEOUT,
    );
    let _ = sleep.kill();
    let _ = sleep.wait();
    assert_eq!(run.code(), Some(1), "{}", run.describe());
    run.assert_no_panic();
    let last = run.stderr.lines().last().unwrap_or_default();
    assert!(
        last.starts_with(&format!(
            "stackscope: process {pid} (sleep 60) is not a Python process"
        )) && last.contains("no Python process ran below it")
            && last.contains("no stack was sampled"),
        "{}",
        run.describe()
    );
}

/// The options each command's `--help` lists.
fn listed_options() -> BTreeMap<String, BTreeSet<String>> {
    let commands = [
        "attach", "record", "dump", "watch", "report", "export", "top", "demo", "merge", "compare",
    ];
    commands
        .iter()
        .map(|&command| {
            let run = run_stackscope(&[command, "--help"], RUN_TIMEOUT);
            run.assert_success();
            (command.to_owned(), options_in(&run.stdout))
        })
        .collect()
}

/// The `--long` options a text names.
fn options_in(text: &str) -> BTreeSet<String> {
    text.split(|c: char| !(c.is_ascii_alphanumeric() || c == '-'))
        .filter(|w| w.starts_with("--") && w.len() > 2)
        .map(str::to_owned)
        .collect()
}

/// Each `stackscope COMMAND ... --option` of `text`, by line: the command and its options, up
/// to the end of the command (a pipe, `;`, a quote, a backquote, or `--` before a command).
fn invocations(text: &str) -> Vec<(usize, String, BTreeSet<String>)> {
    let mut found = Vec::new();
    for (number, line) in text.lines().enumerate() {
        for (at, _) in line.match_indices("stackscope ") {
            if line[..at].ends_with(|c: char| c.is_alphanumeric() || "_-./".contains(c)) {
                continue;
            }
            let rest = &line[at + "stackscope ".len()..];
            let command: String = rest.chars().take_while(char::is_ascii_lowercase).collect();
            let end = rest
                .find(['|', ';', '`', '\'', '"', '>'])
                .unwrap_or(rest.len());
            let args = rest[..end].split(" -- ").next().unwrap_or_default();
            found.push((number + 1, command, options_in(args)));
        }
    }
    found
}

#[test]
fn the_docs_and_every_help_use_only_options_their_command_lists() {
    let listed = listed_options();
    let mut texts: Vec<(String, String)> = vec![];
    let docs = repo_root().join("docs");
    let mut paths = vec![repo_root().join("README.md")];
    paths.extend(
        fs::read_dir(&docs)
            .expect("docs/")
            .flatten()
            .map(|e| e.path())
            .filter(|p| p.extension().is_some_and(|e| e == "md")),
    );
    for path in paths {
        let text = fs::read_to_string(&path).expect("a document");
        texts.push((path.display().to_string(), text));
    }
    for command in listed.keys() {
        let run = run_stackscope(&[command, "--help"], RUN_TIMEOUT);
        texts.push((format!("stackscope {command} --help"), run.stdout));
    }
    let mut problems = Vec::new();
    for (name, text) in &texts {
        for (line, command, options) in invocations(text) {
            let Some(known) = listed.get(&command) else {
                continue;
            };
            for option in options.difference(known) {
                if option != "--help" && option != "--version" {
                    problems.push(format!("{name}:{line}: {command} {option}"));
                }
            }
        }
    }
    assert!(
        problems.is_empty(),
        "options a command's --help does not list:\n{}",
        problems.join("\n")
    );
}

#[test]
fn invocations_are_read_up_to_the_end_of_the_command() {
    let line = "srun sh -c 'stackscope dump --pid 1 --json > d.json'; stackscope record --rate 9 \
                -- python3 t.py --seconds 5 | tee log; target/stackscope attach --x";
    let found = invocations(line);
    let set = |o: &[&str]| o.iter().map(|s| s.to_string()).collect::<BTreeSet<_>>();
    assert_eq!(
        found,
        vec![
            (1, "dump".to_owned(), set(&["--pid", "--json"])),
            (1, "record".to_owned(), set(&["--rate"])),
        ]
    );
}

/// A recording directory as `merge` reads it: `summary.json` and `stacks.folded`.
fn recording(dir: &Path, pid: u32, started_at: &str, function: &str) {
    fs::create_dir_all(dir).expect("recording dir");
    let summary = serde_json::json!({
        "pid": pid, "host": "box", "started_at": started_at, "duration_secs": 60.0,
        "processes": [],
    });
    fs::write(dir.join("summary.json"), summary.to_string()).expect("summary.json");
    let folded = format!(
        "process {pid} python train.py;MainThread;main (train.py:1);{function} (train.py:9) 900\n\
         process {pid} python train.py;MainThread;main (train.py:1);log (train.py:20) 100\n"
    );
    fs::write(dir.join("stacks.folded"), folded).expect("stacks.folded");
}

#[test]
fn merge_of_runs_of_one_host_points_at_compare_and_names_no_odd_run() {
    let tmp = tempfile::tempdir().expect("tempdir");
    let runs = [
        ("before", 100, "2026-01-01T10:00:00+00:00", "step"),
        ("again", 200, "2026-01-01T10:05:00+00:00", "step"),
        ("after", 300, "2026-01-01T10:10:00+00:00", "load"),
    ];
    let mut args = vec!["merge".to_owned()];
    for (name, pid, started_at, function) in runs {
        let dir = tmp.path().join(name);
        recording(&dir, pid, started_at, function);
        args.push(dir.display().to_string());
    }
    let merged = tmp.path().join("merged");
    args.extend(["-o".to_owned(), merged.display().to_string()]);
    let args: Vec<&str> = args.iter().map(String::as_str).collect();
    let run = run_stackscope(&args, RUN_TIMEOUT);
    run.assert_success();
    assert!(
        run.stdout
            .contains("runs of one host (box), one after another")
            && run.stdout.contains("`stackscope compare BEFORE AFTER`"),
        "{}",
        run.describe()
    );
    assert!(!run.stdout.contains("from its peers"), "{}", run.describe());
    let summary = read_summary(&merged);
    assert_eq!(summary["runs_of_one_host"], "box", "{summary:#}");
    assert!(summary["most_different"].is_null(), "{summary:#}");
}

#[test]
fn check_shapes_folded_reads_stacks_rooted_at_their_process() {
    let source = fixture_source("consistency_shapes.py");
    let line = |marker: &str| {
        let at = source.lines().position(|l| l.contains(marker));
        at.map(|i| i + 1)
            .unwrap_or_else(|| panic!("no {marker} in the fixture"))
    };
    let (steady, spin_a) = (line("# STEADY_CALL"), line("# SPIN_A"));
    let mut stack = vec!["steady".to_owned()];
    stack.extend((0..20).map(|_| format!("steady (consistency_shapes.py:{steady})")));
    stack.push(format!("steady (consistency_shapes.py:{})", steady - 1));
    stack.push(format!("spin_calls (consistency_shapes.py:{spin_a})"));
    stack.push("leaf_a (consistency_shapes.py:9)".to_owned());
    let thread_rooted = stack.join(";");
    let tmp = tempfile::tempdir().expect("tempdir");
    let folded = tmp.path().join("stacks.folded");
    let text = format!(
        "process 4242 python3 consistency_shapes.py;{thread_rooted} 7\n{thread_rooted} 3\n\
         process 4242 python3 consistency_shapes.py;churn;rec (consistency_shapes.py:28) 5\n"
    );
    fs::write(&folded, text).expect("folded");
    let out = Command::new(repo_root().join("scripts/check-shapes-folded"))
        .arg(&folded)
        .output()
        .expect("run the script");
    let said = String::from_utf8_lossy(&out.stdout);
    assert_eq!(said.trim(), "steady stacks: 10 whole, 0 torn");
    assert!(out.status.success(), "{said}");
}
