//! `stackscope dump --pid`: every thread once, fast, the target left running.

use crate::common;

use common::*;
use serde_json::Value;
use std::time::Duration;

const RUN_TIMEOUT: Duration = Duration::from_secs(30);
/// "Well under a second"; asserted with room for a loaded 2-core machine.
const DUMP_LIMIT: Duration = Duration::from_secs(2);

/// One thread of the text dump.
#[derive(Debug)]
struct DumpThread {
    os_tid: u64,
    name: String,
    status: String,
    /// Innermost first, each with its locals (`name = repr` lines).
    frames: Vec<(Frame, Vec<String>)>,
    header: String,
}

/// Parses `Thread OS_TID "NAME" (active|idle[, holds GIL])` blocks with
/// frames indented 4 spaces and locals indented 8.
fn parse_dump(text: &str) -> Vec<DumpThread> {
    let mut threads: Vec<DumpThread> = Vec::new();
    for line in text.lines() {
        if let Some(rest) = line.strip_prefix("Thread ") {
            let (tid, rest) = rest
                .split_once(' ')
                .unwrap_or_else(|| panic!("bad thread line {line:?}"));
            let os_tid = tid
                .parse()
                .unwrap_or_else(|_| panic!("bad thread id in {line:?}"));
            let rest = rest
                .strip_prefix('"')
                .unwrap_or_else(|| panic!("thread name not quoted in {line:?}"));
            let (name, rest) = rest
                .rsplit_once('"')
                .unwrap_or_else(|| panic!("thread name not quoted in {line:?}"));
            let status = rest
                .trim()
                .strip_prefix('(')
                .and_then(|s| s.strip_suffix(')'))
                .unwrap_or_else(|| panic!("no (status) in {line:?}"))
                .to_string();
            threads.push(DumpThread {
                os_tid,
                name: name.to_string(),
                status,
                frames: Vec::new(),
                header: line.to_string(),
            });
        } else if let Some(local) = line.strip_prefix("        ") {
            if let Some(thread) = threads.last_mut() {
                if let Some(frame) = thread.frames.last_mut() {
                    frame.1.push(local.trim_end().to_string());
                }
            }
        } else if let Some(frame) = line.strip_prefix("    ") {
            if let Some(thread) = threads.last_mut() {
                thread.frames.push((Frame::parse(frame), Vec::new()));
            }
        }
    }
    threads
}

/// Whether `repr` shows the string `value`, quoted as Python does ('...')
/// or as py-spy does ("...").
fn is_str_repr(repr: &str, value: &str) -> bool {
    repr == format!("'{value}'") || repr == format!("\"{value}\"")
}

/// Whether a `--locals` line is `name = <repr of the string value>`.
fn local_is(line: &str, name: &str, value: &str) -> bool {
    line.trim()
        .strip_prefix(&format!("{name} = "))
        .is_some_and(|repr| is_str_repr(repr, value))
}

fn find<'a>(threads: &'a [DumpThread], name: &str, text: &str) -> &'a DumpThread {
    threads
        .iter()
        .find(|t| t.name == name)
        .unwrap_or_else(|| panic!("no thread {name:?} in the dump:\n{text}"))
}

fn dump(pid: u32, extra: &[&str]) -> Run {
    let pid = pid.to_string();
    let mut args = vec!["dump", "--pid", &pid];
    args.extend_from_slice(extra);
    let run = run_stackscope(&args, RUN_TIMEOUT);
    run.assert_success();
    run.assert_no_panic();
    assert!(
        run.elapsed < DUMP_LIMIT,
        "dump took {:?}\n{}",
        run.elapsed,
        run.describe()
    );
    run
}

#[test]
fn dump_names_deadlocked_threads_at_their_lines() {
    let fixture = Fixture::start("deadlock.py", &[]);
    let source = fixture_source("deadlock.py");
    let run = dump(fixture.pid, &[]);
    let text = &run.stdout;

    // Header: pid, command line, Python version.
    let header: String = text
        .lines()
        .take_while(|l| !l.starts_with("Thread "))
        .collect::<Vec<_>>()
        .join("\n");
    assert!(
        header.contains(&fixture.pid.to_string()),
        "pid in header:\n{text}"
    );
    assert!(
        header.contains("deadlock.py"),
        "command line in header:\n{text}"
    );
    assert!(header.contains("3."), "Python version in header:\n{text}");

    let threads = parse_dump(text);
    for (name, function) in [
        ("deadlock-a", "deadlock_a_body"),
        ("deadlock-b", "deadlock_b_body"),
    ] {
        let thread = find(&threads, name, text);
        let line = marker_line(&source, name);
        let (innermost, _) = thread
            .frames
            .first()
            .unwrap_or_else(|| panic!("{name} has no frames:\n{text}"));
        assert!(
            innermost.is(function, "deadlock.py") && innermost.line == Some(line),
            "{name}'s innermost frame should be {function} (deadlock.py:{line}), got {innermost:?}\n{text}"
        );
        assert!(
            thread.status.starts_with("idle"),
            "{name} is blocked, so idle: {}",
            thread.header
        );
        assert!(
            !thread.status.contains("GIL"),
            "{name} holds no GIL: {}",
            thread.header
        );
        assert_eq!(thread.os_tid, fixture.native_id(name), "os tid of {name}");
        // Outer frames: threading's run machinery, further out.
        assert!(
            thread
                .frames
                .iter()
                .skip(1)
                .any(|(f, _)| f.in_file("threading.py")),
            "{name} should show threading.py frames further out:\n{text}"
        );
    }

    // The queue waiter blocks inside queue.py/threading.py; its innermost
    // frame in the fixture is at the marker line.
    let waiter = find(&threads, "queue-waiter", text);
    let line = marker_line(&source, "queue-waiter");
    let (frame, _) = waiter
        .frames
        .iter()
        .find(|(f, _)| f.in_file("deadlock.py"))
        .unwrap_or_else(|| panic!("queue-waiter has no deadlock.py frame:\n{text}"));
    assert!(
        frame.function == "queue_waiter_body" && frame.line == Some(line),
        "queue-waiter should block in queue_waiter_body (deadlock.py:{line}), got {frame:?}\n{text}"
    );

    let main = find(&threads, "MainThread", text);
    assert_eq!(main.os_tid, fixture.pid as u64);
    assert!(
        main.frames
            .iter()
            .any(|(f, _)| f.is("deadlock_main", "deadlock.py")),
        "MainThread in deadlock_main:\n{text}"
    );
    assert!(main.status.starts_with("idle"), "{}", main.header);
    assert_eq!(threads.len(), 4, "four threads:\n{text}");

    // No locals without --locals.
    for t in &threads {
        for (f, locals) in &t.frames {
            assert!(
                locals.is_empty(),
                "locals without --locals at {f:?}:\n{text}"
            );
        }
    }

    assert_not_stopped(fixture.pid);
    // Dumping again sees the same thing: the threads were not disturbed.
    let again = dump(fixture.pid, &[]);
    let threads = parse_dump(&again.stdout);
    let a = find(&threads, "deadlock-a", &again.stdout);
    assert_eq!(a.frames[0].0.line, Some(marker_line(&source, "deadlock-a")));
    assert_not_stopped(fixture.pid);
}

#[test]
fn dump_locals_shows_known_values() {
    let fixture = Fixture::start("deadlock.py", &[]);
    let run = dump(fixture.pid, &["--locals"]);
    let text = &run.stdout;
    let threads = parse_dump(text);
    for (name, marker, count) in [
        ("deadlock-a", "deadlock-a-local", "count = 1"),
        ("deadlock-b", "deadlock-b-local", "count = 2"),
    ] {
        let thread = find(&threads, name, text);
        let (frame, locals) = &thread.frames[0];
        assert!(frame.function.ends_with("_body"), "{frame:?}\n{text}");
        assert!(
            locals.iter().any(|l| local_is(l, "marker", marker)),
            "{name}'s innermost frame should list marker = {marker:?}, got {locals:?}\n{text}"
        );
        assert!(
            locals.iter().any(|l| l.trim() == count),
            "{name}'s innermost frame should list {count:?}, got {locals:?}\n{text}"
        );
    }
    let waiter = find(&threads, "queue-waiter", text);
    let (_, locals) = waiter
        .frames
        .iter()
        .find(|(f, _)| f.function == "queue_waiter_body")
        .unwrap_or_else(|| panic!("queue_waiter_body frame:\n{text}"));
    assert!(
        locals
            .iter()
            .any(|l| local_is(l, "marker", "queue-waiter-local")),
        "{locals:?}\n{text}"
    );
    assert_not_stopped(fixture.pid);
}

fn json_thread<'a>(doc: &'a Value, name: &str) -> &'a Value {
    doc["threads"]
        .as_array()
        .expect("threads array")
        .iter()
        .find(|t| t["name"] == name)
        .unwrap_or_else(|| panic!("no thread {name} in {doc:#}"))
}

fn parse_json(run: &Run) -> Value {
    serde_json::from_str(&run.stdout)
        .unwrap_or_else(|e| panic!("dump --json is not JSON ({e})\n{}", run.describe()))
}

#[test]
fn dump_json_has_the_documented_fields() {
    let fixture = Fixture::start("deadlock.py", &[]);
    let source = fixture_source("deadlock.py");
    let run = dump(fixture.pid, &["--json"]);
    let doc = parse_json(&run);
    assert_eq!(doc["pid"].as_u64(), Some(fixture.pid as u64), "{doc:#}");
    assert!(
        doc["command_line"].to_string().contains("deadlock.py"),
        "{doc:#}"
    );
    let version = doc["python_version"].as_str().expect("python_version");
    assert!(version.starts_with("3."), "{version}");
    assert_eq!(
        doc["threads"].as_array().map(|t| t.len()),
        Some(4),
        "{doc:#}"
    );

    for (name, function) in [
        ("deadlock-a", "deadlock_a_body"),
        ("deadlock-b", "deadlock_b_body"),
    ] {
        let t = json_thread(&doc, name);
        assert_eq!(t["os_thread_id"].as_u64(), Some(fixture.native_id(name)));
        let ident = fixture.ready_json()["threads"][name]["ident"].as_u64();
        assert_eq!(
            t["python_thread_id"].as_u64(),
            ident,
            "python_thread_id of {name}"
        );
        assert_eq!(t["active"], Value::Bool(false), "{name} is blocked: {t:#}");
        assert_eq!(t["owns_gil"], Value::Bool(false), "{name}: {t:#}");
        let frame = &t["frames"][0];
        assert_eq!(frame["function"], function, "{t:#}");
        assert!(
            frame["file"]
                .as_str()
                .is_some_and(|f| f.ends_with("deadlock.py")),
            "{frame:#}"
        );
        assert_eq!(
            frame["line"].as_u64(),
            Some(marker_line(&source, name) as u64),
            "{frame:#}"
        );
        for f in t["frames"].as_array().expect("frames") {
            let locals = &f["locals"];
            assert!(
                locals.is_null() || locals.as_array().is_some_and(|l| l.is_empty()),
                "locals without --locals: {f:#}"
            );
        }
    }
    let main = json_thread(&doc, "MainThread");
    assert_eq!(main["os_thread_id"].as_u64(), Some(fixture.pid as u64));
    assert_not_stopped(fixture.pid);
}

#[test]
fn dump_json_locals() {
    let fixture = Fixture::start("deadlock.py", &[]);
    let run = dump(fixture.pid, &["--json", "--locals"]);
    let doc = parse_json(&run);
    let t = json_thread(&doc, "deadlock-a");
    let locals = t["frames"][0]["locals"].as_array().expect("locals array");
    let marker = locals
        .iter()
        .find(|l| l["name"] == "marker")
        .unwrap_or_else(|| panic!("no local marker: {locals:?}"));
    let repr = marker["repr"].as_str().expect("repr string");
    assert!(is_str_repr(repr, "deadlock-a-local"), "{marker:#}");
    assert_eq!(marker["arg"], Value::Bool(false), "{marker:#}");
    let count = locals
        .iter()
        .find(|l| l["name"] == "count")
        .unwrap_or_else(|| panic!("no local count: {locals:?}"));
    assert_eq!(count["repr"], "1");
    assert_not_stopped(fixture.pid);
}

#[test]
fn dump_busy_process_shows_active_threads() {
    let fixture = Fixture::start("named_threads.py", &[]);
    let run = dump(fixture.pid, &[]);
    let text = &run.stdout;
    let threads = parse_dump(text);
    for (name, function) in [("worker-1", "worker_spin"), ("loader-0", "load_items")] {
        let t = find(&threads, name, text);
        assert_eq!(t.os_tid, fixture.native_id(name), "{}", t.header);
        assert!(
            t.frames
                .iter()
                .any(|(f, _)| f.is(function, "named_threads.py")),
            "{name} in {function}:\n{text}"
        );
    }
    let main = find(&threads, "MainThread", text);
    assert!(
        main.status.starts_with("idle"),
        "main is joined: {}",
        main.header
    );
    // At most one thread holds the GIL.
    let holders = threads
        .iter()
        .filter(|t| t.status.contains("holds GIL"))
        .count();
    assert!(holders <= 1, "{holders} threads hold the GIL:\n{text}");
    assert_running_and_progressing(fixture.pid);
}

#[test]
fn dump_cpu_split_main_thread_is_active() {
    let fixture = Fixture::start("cpu_split.py", &[]);
    let run = dump(fixture.pid, &["--json"]);
    let doc = parse_json(&run);
    let main = json_thread(&doc, "MainThread");
    assert_eq!(
        main["active"],
        Value::Bool(true),
        "a spinning thread: {main:#}"
    );
    let functions: Vec<&str> = main["frames"]
        .as_array()
        .expect("frames")
        .iter()
        .filter_map(|f| f["function"].as_str())
        .collect();
    assert!(functions.contains(&"cpu_split_main"), "{functions:?}");
    assert_eq!(
        functions.last(),
        Some(&"<module>"),
        "outermost last: {functions:?}"
    );
    assert_running_and_progressing(fixture.pid);
}
