//! Hang diagnosis (issue 5): grouped dumps of identical threads, stragglers
//! named first, `dump --subprocesses` over a process tree, `dump --native`
//! under the Python frames, and `watch` writing a hang report by itself.
//!
//! Tests whose fixtures spin (a straggler, a working job) or that time a
//! report take `serial()`, so that on a 2-core machine they do not slow each
//! other past the deadlines.

use crate::common;

use common::*;
use serde_json::Value;
use std::collections::BTreeSet;
use std::fs;
use std::path::{Path, PathBuf};
use std::thread;
use std::time::{Duration, Instant};

pub(crate) const RUN_TIMEOUT: Duration = Duration::from_secs(30);
/// A dump of up to five processes (a debug build, a loaded 2-core machine);
/// tests/integration/dump.rs holds a single process to "well under a second".
const DUMP_LIMIT: Duration = Duration::from_secs(10);
/// Native function names one of which a thread blocked on a
/// `threading.Lock` has under its Python frame.
const LOCK_WAIT_NATIVE: [&str; 5] = [
    "futex",
    "sem_wait",
    "pthread_cond",
    "PyThread_acquire_lock",
    "lock_PyThread",
];

// ---------------------------------------------------------------- the text dump

/// One thread, or one group of threads with the same stack, of a text dump.
#[derive(Debug, Clone)]
struct Group {
    /// The header line as printed.
    header: String,
    /// How many threads share the stack (1 for a `Thread ...` block).
    count: usize,
    /// The threads' names, as listed.
    names: Vec<String>,
    /// For `N threads in K processes: NAME [PID], ...`: the pids listed.
    pids: Vec<u32>,
    /// For a `Thread TID "NAME"` block: the OS thread id.
    os_tid: Option<u64>,
    /// The text in the last parentheses of the header (idle, waiting on a lock, ...).
    status: String,
    /// The process section the block is printed in.
    process: Option<u32>,
    /// Frames, innermost first, as printed (4-space indent, trimmed).
    frames: Vec<String>,
    /// Each frame's locals (8-space indent, trimmed).
    locals: Vec<Vec<String>>,
}

impl Group {
    fn parsed_frames(&self) -> Vec<Frame> {
        self.frames.iter().map(|f| Frame::parse(f)).collect()
    }

    fn has_frame(&self, function: &str, file: &str, line: u32) -> bool {
        self.parsed_frames()
            .iter()
            .any(|f| f.is(function, file) && f.line == Some(line))
    }

    /// Index of the first frame (innermost first) that is `function` in `file`.
    fn frame_index(&self, function: &str, file: &str) -> Option<usize> {
        self.parsed_frames()
            .iter()
            .position(|f| f.is(function, file))
    }
}

/// One `Process PID[ (child of PPID)]: CMD` section header.
#[derive(Debug, Clone)]
struct ProcessHeader {
    pid: u32,
    parent: Option<u32>,
    command: String,
}

#[derive(Debug)]
struct Dump {
    text: String,
    stragglers: Vec<String>,
    processes: Vec<ProcessHeader>,
    groups: Vec<Group>,
}

impl Dump {
    fn parse(text: &str) -> Dump {
        let mut dump = Dump {
            text: text.to_string(),
            stragglers: Vec::new(),
            processes: Vec::new(),
            groups: Vec::new(),
        };
        let mut current: Option<u32> = None;
        for line in text.lines() {
            if line.trim().is_empty() {
                continue;
            }
            if let Some(local) = line.strip_prefix("        ") {
                if let Some(group) = dump.groups.last_mut() {
                    if let Some(locals) = group.locals.last_mut() {
                        locals.push(local.trim().to_string());
                    }
                }
            } else if let Some(frame) = line.strip_prefix("    ") {
                if let Some(group) = dump.groups.last_mut() {
                    group.frames.push(frame.trim().to_string());
                    group.locals.push(Vec::new());
                }
            } else if line.starts_with("Straggler:") {
                dump.stragglers.push(line.to_string());
            } else if let Some(process) = parse_process_header(line) {
                current = Some(process.pid);
                dump.processes.push(process);
            } else if let Some(mut group) = parse_group_header(line) {
                group.process = current;
                dump.groups.push(group);
            }
        }
        dump
    }

    /// The first block that lists a thread named `name`.
    fn group_of(&self, name: &str) -> &Group {
        self.groups
            .iter()
            .find(|g| g.names.iter().any(|n| n == name))
            .unwrap_or_else(|| panic!("no thread {name:?} in the dump:\n{}", self.text))
    }

    /// The blocks of a process: printed in its section, or listing its pid.
    fn groups_of_process(&self, pid: u32) -> Vec<&Group> {
        self.groups
            .iter()
            .filter(|g| {
                if g.pids.is_empty() {
                    g.process == Some(pid)
                } else {
                    g.pids.contains(&pid)
                }
            })
            .collect()
    }

    fn process(&self, pid: u32) -> &ProcessHeader {
        self.processes
            .iter()
            .find(|p| p.pid == pid)
            .unwrap_or_else(|| panic!("no Process {pid} section in the dump:\n{}", self.text))
    }

    fn first_line(&self) -> &str {
        self.text
            .lines()
            .find(|l| !l.trim().is_empty())
            .unwrap_or_default()
    }
}

/// `Process PID: CMD` or `Process PID (child of PPID): CMD`.
fn parse_process_header(line: &str) -> Option<ProcessHeader> {
    let rest = line.strip_prefix("Process ")?;
    let (head, command) = rest.split_once(": ")?;
    let (pid, parent) = match head.split_once(" (child of ") {
        Some((pid, parent)) => (pid, Some(parent.strip_suffix(')')?.parse().ok()?)),
        None => (head, None),
    };
    Some(ProcessHeader {
        pid: pid.parse().ok()?,
        parent,
        command: command.to_string(),
    })
}

/// `Thread TID "NAME" (status)`, `N threads: a, b (status)` or
/// `N threads in K processes: NAME [PID], NAME [PID] (status)`.
fn parse_group_header(line: &str) -> Option<Group> {
    let (head, status) = line.rsplit_once(" (")?;
    let status = status.strip_suffix(')')?.to_string();
    let mut group = Group {
        header: line.to_string(),
        count: 1,
        names: Vec::new(),
        pids: Vec::new(),
        os_tid: None,
        status,
        process: None,
        frames: Vec::new(),
        locals: Vec::new(),
    };
    if let Some(rest) = head.strip_prefix("Thread ") {
        let (tid, name) = rest.split_once(' ')?;
        group.os_tid = Some(tid.parse().ok()?);
        group
            .names
            .push(name.strip_prefix('"')?.strip_suffix('"')?.to_string());
        return Some(group);
    }
    let (count, rest) = head.split_once(" threads")?;
    group.count = count.parse().ok()?;
    let (_, list) = rest.split_once(": ")?;
    for member in list.split(", ") {
        match member.rsplit_once(" [") {
            Some((name, pid)) => {
                group.names.push(name.to_string());
                group.pids.push(pid.strip_suffix(']')?.parse().ok()?);
            }
            None => group.names.push(member.to_string()),
        }
    }
    Some(group)
}

// ---------------------------------------------------------------- running things

fn dump_run(pid: u32, extra: &[&str]) -> Run {
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

fn dump_text(pid: u32, extra: &[&str]) -> Dump {
    Dump::parse(&dump_run(pid, extra).stdout)
}

fn dump_json(pid: u32, extra: &[&str]) -> Value {
    let mut args = vec!["--json"];
    args.extend_from_slice(extra);
    let run = dump_run(pid, &args);
    serde_json::from_str(&run.stdout)
        .unwrap_or_else(|e| panic!("dump --json is not JSON ({e})\n{}", run.describe()))
}

pub(crate) fn ready_u32(value: &Value, what: &str) -> u32 {
    value
        .as_u64()
        .unwrap_or_else(|| panic!("{what} should be a pid in the ready file, got {value}"))
        as u32
}

/// Kills the given pids on drop (a fixture's children end with their parent,
/// this is a second line of defence).
struct KillOnDrop(Vec<u32>);

impl Drop for KillOnDrop {
    fn drop(&mut self) {
        for pid in &self.0 {
            let _ = std::process::Command::new("kill")
                .args(["-KILL", &pid.to_string()])
                .stderr(std::process::Stdio::null())
                .status();
        }
    }
}

fn json_process(doc: &Value, pid: u32) -> &Value {
    doc["processes"]
        .as_array()
        .unwrap_or_else(|| panic!("no processes array in {doc:#}"))
        .iter()
        .find(|p| p["pid"].as_u64() == Some(pid as u64))
        .unwrap_or_else(|| panic!("no process {pid} in {doc:#}"))
}

fn json_functions(thread: &Value) -> Vec<String> {
    thread["frames"]
        .as_array()
        .map(|frames| {
            frames
                .iter()
                .map(|f| f["function"].as_str().unwrap_or_default().to_string())
                .collect()
        })
        .unwrap_or_default()
}

fn pool_names() -> Vec<String> {
    (0..8).map(|i| format!("pool-{i}")).collect()
}

// ---------------------------------------------------------------- grouping

#[test]
fn dump_prints_eight_identical_threads_as_one_group() {
    let fixture = Fixture::start("thread_pool.py", &[]);
    let pid = ready_u32(&fixture.ready_json()["pid"], "pid");
    let source = fixture_source("thread_pool.py");
    let wait_line = marker_line(&source, "pool-wait");
    let dump = dump_text(pid, &[]);
    let text = &dump.text;

    assert!(
        dump.stragglers.is_empty(),
        "no straggler among eight identical threads:\n{text}"
    );
    let group = dump.group_of("pool-0");
    assert_eq!(group.count, 8, "eight threads in the group:\n{text}");
    assert!(
        group.header.starts_with("8 threads: "),
        "group header: {:?}\n{text}",
        group.header
    );
    let names: BTreeSet<String> = group.names.iter().cloned().collect();
    let expected: BTreeSet<String> = pool_names().into_iter().collect();
    assert_eq!(names, expected, "the group lists all eight names:\n{text}");
    assert_eq!(group.names.len(), 8, "each name once:\n{text}");
    assert!(
        group.status.starts_with("idle"),
        "the pool waits, so idle: {}",
        group.header
    );
    assert!(
        group.has_frame("pool_wait", "thread_pool.py", wait_line),
        "the group waits in pool_wait (thread_pool.py:{wait_line}):\n{text}"
    );
    let pool_wait_lines = text
        .lines()
        .filter(|l| Frame::parse(l).is("pool_wait", "thread_pool.py"))
        .count();
    assert_eq!(
        pool_wait_lines, 1,
        "pool_wait's frame is printed once for the group:\n{text}"
    );
    // No pool thread is printed on its own, and no other block lists one.
    for name in pool_names() {
        let blocks = dump
            .groups
            .iter()
            .filter(|g| g.names.contains(&name))
            .count();
        assert_eq!(blocks, 1, "{name} is in exactly one block:\n{text}");
    }

    let main = dump.group_of("MainThread");
    assert_eq!(main.count, 1, "MainThread on its own:\n{text}");
    assert_eq!(main.os_tid, Some(pid as u64), "{}", main.header);
    assert!(
        main.frame_index("thread_pool_main", "thread_pool.py")
            .is_some(),
        "MainThread in thread_pool_main:\n{text}"
    );
    assert!(
        main.frame_index("pool_wait", "thread_pool.py").is_none(),
        "MainThread does not wait in the pool:\n{text}"
    );
    assert!(main.status.starts_with("idle"), "{}", main.header);
    assert_eq!(
        dump.groups.len(),
        2,
        "two blocks: the pool and main:\n{text}"
    );

    // The JSON is per thread: all nine threads, the pool ones in pool_wait.
    let doc = dump_json(pid, &[]);
    let threads = doc["threads"].as_array().expect("threads array");
    assert_eq!(threads.len(), 9, "{doc:#}");
    for name in pool_names() {
        let t = threads
            .iter()
            .find(|t| t["name"] == name.as_str())
            .unwrap_or_else(|| panic!("no thread {name} in {doc:#}"));
        assert!(
            json_functions(t).iter().any(|f| f == "pool_wait"),
            "{name} in pool_wait: {t:#}"
        );
    }
    assert_not_stopped(pid);
}

#[test]
fn dump_names_the_straggling_thread_first() {
    let _serial = serial();
    let fixture = Fixture::start("thread_pool.py", &["--straggler"]);
    let ready = fixture.ready_json();
    let pid = ready_u32(&ready["pid"], "pid");
    assert_eq!(ready["straggler"], "pool-5", "{ready}");
    let source = fixture_source("thread_pool.py");
    let straggle_line = marker_line(&source, "pool-straggle");
    let wait_line = marker_line(&source, "pool-wait");
    let dump = dump_text(pid, &[]);
    let text = &dump.text;

    let first = dump.first_line();
    assert!(
        first.starts_with("Straggler:"),
        "the first line names the straggler:\n{text}"
    );
    assert!(
        first.contains("\"pool-5\"") && first.contains("pool_straggle"),
        "the straggler line names pool-5 and pool_straggle: {first:?}"
    );
    assert!(
        first.contains(&format!("pool_straggle (thread_pool.py:{straggle_line})")),
        "the straggler line gives pool_straggle's line: {first:?}"
    );
    assert!(
        first.contains(&pid.to_string()),
        "the straggler line names the process: {first:?}"
    );
    assert_eq!(dump.stragglers.len(), 1, "one straggler:\n{text}");

    let group = dump.group_of("pool-0");
    assert_eq!(group.count, 7, "seven threads wait together:\n{text}");
    assert!(group.header.starts_with("7 threads: "), "{}", group.header);
    let names: BTreeSet<String> = group.names.iter().cloned().collect();
    let expected: BTreeSet<String> = pool_names().into_iter().filter(|n| n != "pool-5").collect();
    assert_eq!(names, expected, "all but pool-5 in the group:\n{text}");
    assert!(
        group.has_frame("pool_wait", "thread_pool.py", wait_line),
        "{text}"
    );

    let straggler = dump.group_of("pool-5");
    assert_eq!(straggler.count, 1, "pool-5 on its own:\n{text}");
    let innermost = straggler.parsed_frames().first().cloned();
    assert!(
        innermost.as_ref().is_some_and(
            |f| f.is("pool_straggle", "thread_pool.py") && f.line == Some(straggle_line)
        ),
        "pool-5 spins in pool_straggle (thread_pool.py:{straggle_line}), got {innermost:?}\n{text}"
    );
    assert!(
        straggler.status.starts_with("active"),
        "a spinning thread is active: {}",
        straggler.header
    );

    // With --subprocesses the JSON lists the straggler too.
    let doc = dump_json(pid, &["--subprocesses"]);
    let stragglers = doc["stragglers"].as_array().expect("stragglers array");
    assert_eq!(stragglers.len(), 1, "{doc:#}");
    assert_eq!(stragglers[0]["pid"].as_u64(), Some(pid as u64), "{doc:#}");
    assert_eq!(stragglers[0]["thread"], "pool-5", "{doc:#}");
    assert!(
        stragglers[0]["location"]
            .as_str()
            .is_some_and(|l| l.contains("pool_straggle")),
        "{doc:#}"
    );
    assert_running_and_progressing(pid);
}

// ---------------------------------------------------------------- process trees

fn dump_subprocesses_shows_the_tree(method: &str) {
    let fixture = Fixture::start("mp_tree.py", &["--method", method]);
    let ready = fixture.ready_json();
    let parent = ready_u32(&ready["pid"], "pid");
    let event_child = ready_u32(
        &ready["children"]["child_waits_on_event"],
        "child_waits_on_event",
    );
    let select_child = ready_u32(
        &ready["children"]["child_sleeps_in_select"],
        "child_sleeps_in_select",
    );
    let _guard = KillOnDrop(vec![event_child, select_child]);
    let source = fixture_source("mp_tree.py");
    let dump = dump_text(parent, &["--subprocesses"]);
    let text = &dump.text;

    let root = dump.process(parent);
    assert_eq!(root.parent, None, "the root is no one's child:\n{text}");
    assert!(root.command.contains("mp_tree.py"), "{text}");
    assert!(
        dump.groups_of_process(parent)
            .iter()
            .any(|g| g.frame_index("mp_tree_main", "mp_tree.py").is_some()),
        "the parent's thread is in mp_tree_main:\n{text}"
    );

    for (child, function, marker) in [
        (event_child, "child_waits_on_event", "child-event"),
        (select_child, "child_sleeps_in_select", "child-select"),
    ] {
        let header = dump.process(child);
        assert_eq!(
            header.parent,
            Some(parent),
            "Process {child} (child of {parent}):\n{text}"
        );
        let line = marker_line(&source, marker);
        let groups = dump.groups_of_process(child);
        assert_eq!(groups.len(), 1, "one thread in child {child}:\n{text}");
        let frames = groups[0].parsed_frames();
        let in_fixture = frames
            .iter()
            .find(|f| f.in_file("mp_tree.py"))
            .unwrap_or_else(|| panic!("child {child} has no mp_tree.py frame:\n{text}"));
        assert!(
            in_fixture.function == function && in_fixture.line == Some(line),
            "child {child} blocks in {function} (mp_tree.py:{line}), got {in_fixture:?}\n{text}"
        );
        assert!(
            groups[0].status.starts_with("idle"),
            "a blocked child is idle: {}",
            groups[0].header
        );
    }
    if method == "fork" {
        assert_eq!(
            dump.processes.len(),
            3,
            "the parent and its two children:\n{text}"
        );
    }
    assert!(
        dump.stragglers.is_empty(),
        "two different children are no stragglers:\n{text}"
    );

    let doc = dump_json(parent, &["--subprocesses"]);
    json_process(&doc, parent);
    for (child, function) in [
        (event_child, "child_waits_on_event"),
        (select_child, "child_sleeps_in_select"),
    ] {
        let p = json_process(&doc, child);
        assert_eq!(
            p["parent_pid"].as_u64(),
            Some(parent as u64),
            "parent_pid of {child}: {p:#}"
        );
        let threads = p["threads"].as_array().expect("threads");
        assert!(
            threads
                .iter()
                .any(|t| json_functions(t).iter().any(|f| f == function)),
            "child {child} in {function}: {p:#}"
        );
    }
    if method == "fork" {
        assert_eq!(doc["processes"].as_array().map(|p| p.len()), Some(3));
    }
    assert!(
        doc["stragglers"].as_array().is_some_and(|s| s.is_empty()),
        "{doc:#}"
    );

    for pid in [parent, event_child, select_child] {
        assert_not_stopped(pid);
    }
}

#[test]
fn dump_subprocesses_shows_a_forked_tree() {
    dump_subprocesses_shows_the_tree("fork");
}

#[test]
fn dump_subprocesses_shows_a_spawned_tree() {
    dump_subprocesses_shows_the_tree("spawn");
}

#[test]
fn dump_subprocesses_names_the_straggling_rank_first() {
    let _serial = serial();
    let fixture = Fixture::start("ranks.py", &[]);
    let ready = fixture.ready_json();
    let launcher = ready_u32(&ready["pid"], "pid");
    let straggler = ready_u32(&ready["straggler"], "straggler");
    let waiting: BTreeSet<u32> = ready["waiting"]
        .as_array()
        .expect("waiting pids")
        .iter()
        .map(|p| ready_u32(p, "waiting"))
        .collect();
    let ranks: Vec<u32> = ready["ranks"]
        .as_array()
        .expect("rank pids")
        .iter()
        .map(|p| ready_u32(p, "rank"))
        .collect();
    let _guard = KillOnDrop(ranks.clone());
    let source = fixture_source("ranks.py");
    let slow_line = marker_line(&source, "slow-rank");
    let wait_line = marker_line(&source, "all-reduce");
    let dump = dump_text(launcher, &["--subprocesses"]);
    let text = &dump.text;

    let first = dump.first_line();
    assert!(
        first.starts_with("Straggler:"),
        "the first line names the straggler:\n{text}"
    );
    assert!(
        first.contains(&format!("Process {straggler} "))
            && first.contains(&format!("slow_rank_compute (ranks.py:{slow_line})")),
        "the straggler line names process {straggler} and slow_rank_compute (ranks.py:{slow_line}): {first:?}"
    );
    assert_eq!(dump.stragglers.len(), 1, "one straggler:\n{text}");
    for pid in &waiting {
        assert!(
            !first.contains(&format!("Process {pid} ")),
            "a waiting rank is no straggler: {first:?}"
        );
    }

    let group = dump
        .groups
        .iter()
        .find(|g| !g.pids.is_empty() && g.pids.iter().any(|p| waiting.contains(p)))
        .unwrap_or_else(|| panic!("no group across processes:\n{text}"));
    assert!(
        group.header.starts_with("3 threads in 3 processes: "),
        "the waiting ranks are one group: {:?}\n{text}",
        group.header
    );
    let pids: BTreeSet<u32> = group.pids.iter().copied().collect();
    assert_eq!(pids, waiting, "the group lists the waiting ranks:\n{text}");
    assert!(
        group.has_frame("all_reduce_wait", "ranks.py", wait_line),
        "the group waits in all_reduce_wait (ranks.py:{wait_line}):\n{text}"
    );
    let strag = dump.groups_of_process(straggler);
    assert_eq!(strag.len(), 1, "the straggler's own block:\n{text}");
    assert!(
        strag[0]
            .parsed_frames()
            .first()
            .is_some_and(|f| f.is("slow_rank_compute", "ranks.py")),
        "the straggler spins in slow_rank_compute:\n{text}"
    );
    for pid in ranks.iter().chain([&launcher]) {
        dump.process(*pid);
    }
    for pid in &ranks {
        assert_eq!(dump.process(*pid).parent, Some(launcher), "{text}");
    }

    let doc = dump_json(launcher, &["--subprocesses"]);
    let stragglers = doc["stragglers"].as_array().expect("stragglers array");
    let listed: Vec<Option<u64>> = stragglers.iter().map(|s| s["pid"].as_u64()).collect();
    assert_eq!(
        listed,
        vec![Some(straggler as u64)],
        "exactly the straggler: {doc:#}"
    );
    assert!(
        stragglers[0]["location"]
            .as_str()
            .is_some_and(|l| l.contains("slow_rank_compute")),
        "{doc:#}"
    );
    assert!(
        stragglers[0]["thread"].is_null(),
        "a process straggles: {doc:#}"
    );
    assert_eq!(doc["processes"].as_array().map(|p| p.len()), Some(5));

    assert_not_stopped(launcher);
    for pid in &waiting {
        assert_not_stopped(*pid);
    }
    assert_running_and_progressing(straggler);
}

// ---------------------------------------------------------------- native frames

#[test]
fn dump_native_shows_the_lock_wait_under_the_python_frame() {
    let fixture = Fixture::start("deadlock.py", &[]);
    let pid = ready_u32(&fixture.ready_json()["pid"], "pid");
    let source = fixture_source("deadlock.py");
    let text = dump_run(pid, &["--native"]).stdout;
    let dump = Dump::parse(&text);

    for (name, function) in [
        ("deadlock-a", "deadlock_a_body"),
        ("deadlock-b", "deadlock_b_body"),
    ] {
        let line = marker_line(&source, name);
        let group = dump.group_of(name);
        let frames = group.parsed_frames();
        let python = frames
            .iter()
            .position(|f| f.is(function, "deadlock.py") && f.line == Some(line))
            .unwrap_or_else(|| {
                panic!("{name} has no {function} (deadlock.py:{line}) frame:\n{text}")
            });
        let native = group
            .frames
            .iter()
            .position(|f| LOCK_WAIT_NATIVE.iter().any(|n| f.contains(n)));
        assert!(
            native.is_some_and(|n| n < python),
            "{name}: a native lock-wait frame ({LOCK_WAIT_NATIVE:?}) should come before \
             (inside) {function} (deadlock.py:{line}); native at {native:?}, Python at {python}:\n{text}"
        );
    }
    assert_not_stopped(pid);

    let doc = dump_json(pid, &["--native"]);
    let thread = doc["threads"]
        .as_array()
        .expect("threads array")
        .iter()
        .find(|t| t["name"] == "deadlock-a")
        .unwrap_or_else(|| panic!("no deadlock-a in {doc:#}"));
    let frames = thread["frames"].as_array().expect("frames");
    let line = marker_line(&source, "deadlock-a") as u64;
    let python = frames
        .iter()
        .position(|f| f["function"] == "deadlock_a_body" && f["line"].as_u64() == Some(line))
        .unwrap_or_else(|| panic!("no deadlock_a_body frame at line {line}: {thread:#}"));
    assert_ne!(
        frames[python]["native"],
        Value::Bool(true),
        "a Python frame is not native: {thread:#}"
    );
    let native = frames.iter().position(|f| {
        f["native"] == Value::Bool(true)
            && f["function"]
                .as_str()
                .is_some_and(|name| LOCK_WAIT_NATIVE.iter().any(|n| name.contains(n)))
    });
    assert!(
        native.is_some_and(|n| n < python),
        "deadlock-a: a frame with \"native\": true naming the lock wait should come before \
         the Python frame (at {python}); found at {native:?}: {thread:#}"
    );
    assert_eq!(doc["threads"].as_array().map(|t| t.len()), Some(4));
    assert_not_stopped(pid);
}

// ---------------------------------------------------------------- watch

pub(crate) const HANG_AFTER_SECS: u64 = 2;
/// A hang report of five processes with native frames: generous, since a
/// debug build symbolizes each process's libraries anew.
const TREE_REPORT_TIMEOUT: Duration = Duration::from_secs(60);
const WORK_SECS: u64 = 2;

pub(crate) fn watch_command(pid: u32, out: &OutDir, extra: &[&str]) -> std::process::Command {
    let pid = pid.to_string();
    let hang_after = HANG_AFTER_SECS.to_string();
    let mut args = vec![
        "watch",
        "--pid",
        &pid,
        "--hang-after",
        &hang_after,
        "--gpu",
        "off",
        "-o",
        out.arg(),
    ];
    args.extend_from_slice(extra);
    stackscope(&args)
}

/// The hang reports (`hang-*.txt`) in `dir`, sorted.
pub(crate) fn reports(dir: &Path) -> Vec<PathBuf> {
    let mut found: Vec<PathBuf> = fs::read_dir(dir)
        .map(|entries| {
            entries
                .flatten()
                .map(|e| e.path())
                .filter(|p| {
                    p.file_name()
                        .and_then(|n| n.to_str())
                        .is_some_and(|n| n.starts_with("hang-") && n.ends_with(".txt"))
                })
                .collect()
        })
        .unwrap_or_default();
    found.sort();
    found
}

/// Polls until `dir` holds a hang report whose .json is there too, or
/// `running` ends, or the deadline passes. Gives the report's .txt path.
pub(crate) fn wait_for_report(
    running: &mut Running,
    dir: &Path,
    deadline: Instant,
) -> Option<PathBuf> {
    loop {
        if let Some(txt) = reports(dir).into_iter().next() {
            if txt.with_extension("json").exists() {
                return Some(txt);
            }
        }
        if Instant::now() > deadline {
            return None;
        }
        if let Ok(Some(_)) = running.child.try_wait() {
            return None;
        }
        thread::sleep(Duration::from_millis(50));
    }
}

pub(crate) fn looks_hung_lines(stdout: &str) -> Vec<&str> {
    stdout
        .lines()
        .filter(|l| l.contains("looks hung"))
        .collect()
}

#[test]
fn watch_writes_one_report_naming_where_it_hangs() {
    let _serial = serial();
    let fixture = Fixture::start("hangs_later.py", &["--work-secs", &WORK_SECS.to_string()]);
    let pid = ready_u32(&fixture.ready_json()["pid"], "pid");
    let source = fixture_source("hangs_later.py");
    let line = marker_line(&source, "stuck-here");
    let out = OutDir::new();
    let mut running = spawn_stackscope(watch_command(pid, &out, &[]));
    let started = Instant::now();
    let limit = Duration::from_secs(HANG_AFTER_SECS + WORK_SECS + 5);

    let found = wait_for_report(&mut running, &out.out, started + limit);
    let Some(txt) = found else {
        let _ = running.child.kill();
        let run = running.finish(RUN_TIMEOUT);
        panic!(
            "no hang report in {} within {limit:?}\n{}",
            out.out.display(),
            run.describe()
        );
    };
    let detected = started.elapsed();

    let text = fs::read_to_string(&txt).expect("report text");
    assert!(
        text.contains(&format!("stuck_here (hangs_later.py:{line})")),
        "the report names stuck_here (hangs_later.py:{line}):\n{text}"
    );
    let dump = Dump::parse(&text);
    let main = dump.group_of("MainThread");
    // The innermost Python frame (native frames, if any, come before it).
    let frames = main.parsed_frames();
    let python = frames
        .iter()
        .position(|f| f.file.ends_with(".py"))
        .unwrap_or_else(|| panic!("MainThread has no Python frame:\n{text}"));
    assert!(
        frames[python].is("stuck_here", "hangs_later.py") && frames[python].line == Some(line),
        "MainThread's innermost Python frame is stuck_here (hangs_later.py:{line}):\n{text}"
    );
    assert!(
        main.locals[python]
            .iter()
            .any(|l| l == "marker = 'stuck-here-local'" || l == "marker = \"stuck-here-local\""),
        "the report has stuck_here's locals:\n{text}"
    );
    assert!(
        main.frame_index("work_step", "hangs_later.py").is_none(),
        "the report shows the hang, not the work:\n{text}"
    );

    let json_path = txt.with_extension("json");
    let json_text = fs::read_to_string(&json_path).expect("report json");
    let doc: Value = serde_json::from_str(&json_text)
        .unwrap_or_else(|e| panic!("{} is not JSON ({e}):\n{json_text}", json_path.display()));
    assert_eq!(doc["pid"].as_u64(), Some(pid as u64), "{doc:#}");
    assert_eq!(
        doc["hang_after_secs"].as_f64(),
        Some(HANG_AFTER_SECS as f64),
        "{doc:#}"
    );
    assert!(
        doc["unchanged_secs"]
            .as_f64()
            .is_some_and(|s| s >= HANG_AFTER_SECS as f64),
        "{doc:#}"
    );
    assert!(doc["gpu_idle"].is_null(), "--gpu off: {doc:#}");
    let threads = doc["processes"][0]["threads"]
        .as_array()
        .unwrap_or_else(|| panic!("processes[0].threads in {doc:#}"));
    let stuck = threads
        .iter()
        .find(|t| {
            let innermost_python = t["frames"]
                .as_array()
                .and_then(|frames| frames.iter().find(|f| f["native"] != Value::Bool(true)));
            innermost_python.is_some_and(|f| {
                f["function"] == "stuck_here" && f["line"].as_u64() == Some(line as u64)
            })
        })
        .unwrap_or_else(|| {
            panic!("no thread whose innermost Python frame is stuck_here:{line}: {doc:#}")
        });
    assert_eq!(stuck["name"], "MainThread", "{stuck:#}");

    // It stays hung: no second report for a few more seconds.
    thread::sleep(Duration::from_secs(HANG_AFTER_SECS + 2));
    assert!(
        running.child.try_wait().ok().flatten().is_none(),
        "watch keeps watching after a report"
    );
    running.signal("INT");
    let run = running.finish(RUN_TIMEOUT);
    run.assert_success();
    run.assert_no_panic();
    let hung = looks_hung_lines(&run.stdout);
    assert_eq!(hung.len(), 1, "one report per hang\n{}", run.describe());
    let expected = format!("stackscope: process {pid} looks hung");
    assert!(
        hung[0].starts_with(&expected) && hung[0].ends_with(&format!("report {}", txt.display())),
        "the line names the process and the report {}\n{}",
        txt.display(),
        run.describe()
    );
    assert_eq!(
        reports(&out.out),
        vec![txt.clone()],
        "one report file while the process stays hung"
    );
    assert!(
        detected <= limit,
        "report after {detected:?}, limit {limit:?}"
    );
    assert_not_stopped(pid);
}

/// Watches a process that keeps working for `secs` seconds: no report, no
/// "looks hung" line, and SIGINT ends watch with 0.
fn assert_no_report_while_working(pid: u32, extra: &[&str], secs: u64) {
    let out = OutDir::new();
    let mut running = spawn_stackscope(watch_command(pid, &out, extra));
    let found = wait_for_report(
        &mut running,
        &out.out,
        Instant::now() + Duration::from_secs(secs),
    );
    let still_running = running.child.try_wait().ok().flatten().is_none();
    running.signal("INT");
    let run = running.finish(RUN_TIMEOUT);
    assert!(
        found.is_none(),
        "a report for a job that keeps working: {:?}\n{}\n{}",
        found,
        found
            .as_ref()
            .and_then(|p| fs::read_to_string(p).ok())
            .unwrap_or_default(),
        run.describe()
    );
    assert!(still_running, "watch ended early\n{}", run.describe());
    run.assert_success();
    run.assert_no_panic();
    assert!(
        looks_hung_lines(&run.stdout).is_empty(),
        "no 'looks hung' line\n{}",
        run.describe()
    );
    assert!(reports(&out.out).is_empty(), "no report file");
    assert_running_and_progressing(pid);
}

#[test]
fn watch_writes_no_report_while_the_job_keeps_working() {
    let _serial = serial();
    // Its stack changes every 100 ms tick, so any two 1 Hz samples differ.
    let fixture = Fixture::start("hangs_later.py", &["--work-secs", "inf"]);
    let pid = ready_u32(&fixture.ready_json()["pid"], "pid");
    assert_no_report_while_working(pid, &[], 3 * HANG_AFTER_SECS);
}

#[test]
fn watch_writes_no_report_for_a_training_loop() {
    let _serial = serial();
    // train_sim alternates load_batch (60 ms) and train_step (40 ms), each
    // mostly on a few lines: at 1 Hz, three samples in a row land on the same
    // stack by chance often enough to make --hang-after 2 flaky. At 7 Hz the
    // samples' phases within the 100 ms step cover both functions in any 2 s.
    let fixture = Fixture::start("train_sim.py", &[]);
    let text = fs::read_to_string(&fixture.ready_path).expect("ready file");
    let pid: u32 = text
        .trim()
        .parse()
        .unwrap_or_else(|_| panic!("train_sim's ready file is not a pid: {text:?}"));
    assert_no_report_while_working(pid, &["--rate", "7"], 3 * HANG_AFTER_SECS);
}

#[test]
fn watch_report_has_native_frames_under_the_hang() {
    let _serial = serial();
    let fixture = Fixture::start("hangs_later.py", &["--work-secs", "0"]);
    let pid = ready_u32(&fixture.ready_json()["pid"], "pid");
    let source = fixture_source("hangs_later.py");
    let line = marker_line(&source, "stuck-here");
    let out = OutDir::new();
    let mut running = spawn_stackscope(watch_command(pid, &out, &[]));
    let deadline = Instant::now() + Duration::from_secs(HANG_AFTER_SECS + 5);
    let found = wait_for_report(&mut running, &out.out, deadline);
    running.signal("INT");
    let run = running.finish(RUN_TIMEOUT);
    let txt = found.unwrap_or_else(|| panic!("no hang report\n{}", run.describe()));
    let text = fs::read_to_string(&txt).expect("report text");
    let dump = Dump::parse(&text);
    let main = dump.group_of("MainThread");
    let python = main
        .parsed_frames()
        .iter()
        .position(|f| f.is("stuck_here", "hangs_later.py") && f.line == Some(line))
        .unwrap_or_else(|| panic!("no stuck_here (hangs_later.py:{line}):\n{text}"));
    let native = main
        .frames
        .iter()
        .position(|f| LOCK_WAIT_NATIVE.iter().any(|n| f.contains(n)));
    assert!(
        native.is_some_and(|n| n < python),
        "the hang report shows the native lock wait ({LOCK_WAIT_NATIVE:?}) under stuck_here:\n{text}"
    );
    run.assert_success();
}

#[test]
fn watch_subprocesses_report_names_the_straggling_rank_first() {
    let _serial = serial();
    // The waiting ranks block and the straggler spins on one line: the whole
    // tree's stacks stand still, as in a distributed job stuck in a collective.
    let fixture = Fixture::start("ranks.py", &[]);
    let ready = fixture.ready_json();
    let launcher = ready_u32(&ready["pid"], "pid");
    let straggler = ready_u32(&ready["straggler"], "straggler");
    let ranks: Vec<u32> = ready["ranks"]
        .as_array()
        .expect("rank pids")
        .iter()
        .map(|p| ready_u32(p, "rank"))
        .collect();
    let _guard = KillOnDrop(ranks.clone());
    let line = marker_line(&fixture_source("ranks.py"), "slow-rank");
    let out = OutDir::new();
    let mut running = spawn_stackscope(watch_command(launcher, &out, &["--subprocesses"]));
    let deadline = Instant::now() + TREE_REPORT_TIMEOUT;
    let found = wait_for_report(&mut running, &out.out, deadline);
    running.signal("INT");
    let run = running.finish(RUN_TIMEOUT);
    let txt = found.unwrap_or_else(|| panic!("no hang report\n{}", run.describe()));
    run.assert_success();

    let text = fs::read_to_string(&txt).expect("report text");
    let dump = Dump::parse(&text);
    let straggler_line = dump
        .stragglers
        .first()
        .unwrap_or_else(|| panic!("the report names no straggler:\n{text}"));
    assert!(
        straggler_line.contains(&format!("Process {straggler} "))
            && straggler_line.contains(&format!("slow_rank_compute (ranks.py:{line})")),
        "{straggler_line:?}\n{text}"
    );
    let first_block = text
        .find("Straggler:")
        .zip(text.find("Process "))
        .is_some_and(|(s, p)| s < p);
    assert!(
        first_block,
        "the straggler comes before the processes:\n{text}"
    );
    for pid in ranks.iter().chain([&launcher]) {
        dump.process(*pid);
    }

    let json_path = txt.with_extension("json");
    let doc: Value = serde_json::from_str(&fs::read_to_string(&json_path).expect("report json"))
        .unwrap_or_else(|e| panic!("{} is not JSON ({e})", json_path.display()));
    let listed: Vec<Option<u64>> = doc["stragglers"]
        .as_array()
        .expect("stragglers array")
        .iter()
        .map(|s| s["pid"].as_u64())
        .collect();
    assert_eq!(listed, vec![Some(straggler as u64)], "{doc:#}");
    assert_eq!(
        doc["processes"].as_array().map(|p| p.len()),
        Some(5),
        "{doc:#}"
    );
    for pid in ranks.iter().chain([&launcher]) {
        assert_not_stopped(*pid);
    }
}

// ---------------------------------------------------------------- reports that are safe to keep

/// The secrets secrets_job.py holds in its stuck frame, and a local that is none.
const API_TOKEN: &str = "tok-123-9f8e7d";
const PASSWORD: &str = "hunter2-pw-5c4b3a";
const NOT_SECRET: &str = "db-7.internal";
/// A secret inside a dict local with an innocent name (`config["api_key"]`).
const DICT_SECRET: &str = "sk-dict-4e5f6a";

fn mode(path: &Path) -> u32 {
    use std::os::unix::fs::PermissionsExt;
    fs::metadata(path)
        .unwrap_or_else(|e| panic!("{}: {e}", path.display()))
        .permissions()
        .mode()
        & 0o777
}

/// Every local of every frame of a JSON dump (a process, or a report's `processes`), by name.
fn json_locals(doc: &Value) -> Vec<(String, Value)> {
    let processes: Vec<&Value> = match doc["processes"].as_array() {
        Some(list) => list.iter().collect(),
        None => vec![doc],
    };
    processes
        .iter()
        .flat_map(|p| p["threads"].as_array().into_iter().flatten())
        .flat_map(|t| t["frames"].as_array().into_iter().flatten())
        .flat_map(|f| f["locals"].as_array().into_iter().flatten())
        .map(|l| {
            (
                l["name"].as_str().unwrap_or_default().to_owned(),
                l["repr"].clone(),
            )
        })
        .collect()
}

fn json_local(doc: &Value, name: &str) -> Value {
    json_locals(doc)
        .into_iter()
        .find(|(n, _)| n == name)
        .map(|(_, repr)| repr)
        .unwrap_or_else(|| panic!("no local {name} in {doc:#}"))
}

/// Asserts a text or JSON output shows the secrets' names but not their values (or, with
/// `shown`, their values).
fn assert_secrets(output: &str, shown: bool, what: &str) {
    for secret in [API_TOKEN, PASSWORD, DICT_SECRET] {
        assert_eq!(
            output.contains(secret),
            shown,
            "{what}: {secret} {}:\n{output}",
            if shown { "shown" } else { "hidden" }
        );
    }
    assert!(
        output.contains(NOT_SECRET),
        "{what}: other locals stay:\n{output}"
    );
    assert_eq!(
        output.contains("<redacted>"),
        !shown,
        "{what}: hidden values read <redacted>:\n{output}"
    );
}

/// Watches secrets_job.py until its report; gives the report's .txt and the output directory.
fn watch_secrets_job(extra: &[&str]) -> (PathBuf, OutDir) {
    let _serial = serial();
    let fixture = Fixture::start("secrets_job.py", &[]);
    let pid = ready_u32(&fixture.ready_json()["pid"], "pid");
    let out = OutDir::new();
    let mut running = spawn_stackscope(watch_command(pid, &out, extra));
    let deadline = Instant::now() + Duration::from_secs(HANG_AFTER_SECS + 20);
    let found = wait_for_report(&mut running, &out.out, deadline);
    running.signal("INT");
    let run = running.finish(RUN_TIMEOUT);
    let txt = found.unwrap_or_else(|| panic!("no hang report\n{}", run.describe()));
    run.assert_success();
    (txt, out)
}

#[test]
fn watch_report_hides_secret_locals_and_is_owner_only() {
    let (txt, out) = watch_secrets_job(&[]);
    let text = fs::read_to_string(&txt).expect("report text");
    let line = marker_line(&fixture_source("secrets_job.py"), "secrets-stuck");
    assert!(
        text.contains(&format!("login (secrets_job.py:{line})")),
        "{text}"
    );
    assert_secrets(&text, false, "the report's text");
    assert!(text.contains("password = <redacted>"), "{text}");
    assert!(text.contains("api_token = <redacted>"), "{text}");
    assert!(
        text.contains(r#"config = {"host": "db-7.internal", "api_key": <redacted>}"#),
        "{text}"
    );
    let json_path = txt.with_extension("json");
    let json = fs::read_to_string(&json_path).expect("report json");
    assert_secrets(&json, false, "the report's JSON");
    let doc: Value = serde_json::from_str(&json).expect("report JSON");
    assert_eq!(json_local(&doc, "api_token"), "<redacted>");
    assert_eq!(json_local(&doc, "password"), "<redacted>");
    // Owner-only: the files 0600, the directory watch made 0700.
    assert_eq!(mode(&txt), 0o600, "{}", txt.display());
    assert_eq!(mode(&json_path), 0o600, "{}", json_path.display());
    assert_eq!(mode(&out.out), 0o700, "{}", out.out.display());
}

#[test]
fn watch_show_secrets_keeps_them_in_the_report() {
    let (txt, _out) = watch_secrets_job(&["--show-secrets"]);
    let text = fs::read_to_string(&txt).expect("report text");
    assert_secrets(&text, true, "the report's text with --show-secrets");
    let json = fs::read_to_string(txt.with_extension("json")).expect("report json");
    assert_secrets(&json, true, "the report's JSON with --show-secrets");
    assert_eq!(mode(&txt), 0o600, "{}", txt.display());
}

#[test]
fn dump_locals_hides_secret_locals_unless_shown() {
    let fixture = Fixture::start("secrets_job.py", &[]);
    let pid = ready_u32(&fixture.ready_json()["pid"], "pid");
    let text = dump_run(pid, &["--locals"]).stdout;
    assert_secrets(&text, false, "dump --locals");
    assert!(text.contains("password = <redacted>"), "{text}");
    let json = dump_run(pid, &["--locals", "--json"]).stdout;
    assert_secrets(&json, false, "dump --locals --json");
    let doc: Value = serde_json::from_str(&json).expect("dump JSON");
    assert_eq!(json_local(&doc, "api_token"), "<redacted>");
    assert_eq!(json_local(&doc, "password"), "<redacted>");
    assert_eq!(
        json_local(&doc, "config"),
        r#"{"host": "db-7.internal", "api_key": <redacted>}"#
    );

    let text = dump_run(pid, &["--locals", "--show-secrets"]).stdout;
    assert_secrets(&text, true, "dump --locals --show-secrets");
    let json = dump_run(pid, &["--locals", "--json", "--show-secrets"]).stdout;
    assert_secrets(&json, true, "dump --locals --json --show-secrets");
    assert_not_stopped(pid);
}

#[test]
fn watch_keeps_only_the_newest_reports() {
    let _serial = serial();
    // 1 s of work, 4 s stuck, three times: three hangs, each its own report.
    let fixture = Fixture::start(
        "hangs_repeatedly.py",
        &["--work-secs", "1", "--stuck-secs", "4", "--cycles", "3"],
    );
    let pid = ready_u32(&fixture.ready_json()["pid"], "pid");
    let out = OutDir::new();
    let pid_arg = pid.to_string();
    let mut running = spawn_stackscope(stackscope(&[
        "watch",
        "--pid",
        &pid_arg,
        "--hang-after",
        "1.5",
        "--gpu",
        "off",
        "--keep-reports",
        "2",
        "-o",
        out.arg(),
    ]));
    // The fixture ends after its third cycle (about 15 s), and watch with it.
    let run = {
        let deadline = Instant::now() + Duration::from_secs(60);
        while running.child.try_wait().ok().flatten().is_none() && Instant::now() < deadline {
            thread::sleep(Duration::from_millis(200));
        }
        if running.child.try_wait().ok().flatten().is_none() {
            running.signal("INT");
        }
        running.finish(RUN_TIMEOUT)
    };
    run.assert_success();
    run.assert_no_panic();
    let hung = looks_hung_lines(&run.stdout);
    assert_eq!(hung.len(), 3, "three hangs\n{}", run.describe());
    let kept = reports(&out.out);
    assert_eq!(
        kept.len(),
        2,
        "the newest 2 reports kept\n{}",
        run.describe()
    );
    // The two kept are the last two written, each with its .json; the first is gone.
    for (line, txt) in hung[1..].iter().zip(&kept) {
        assert!(
            line.ends_with(&format!("report {}", txt.display())),
            "{line} / {}",
            txt.display()
        );
        assert!(txt.with_extension("json").exists(), "{}", txt.display());
    }
    let first = hung[0].rsplit("report ").next().expect("a path");
    assert!(!Path::new(first).exists(), "{first} removed");
    assert!(
        !Path::new(first).with_extension("json").exists(),
        "{first}'s JSON removed"
    );
    let names: Vec<String> = fs::read_dir(&out.out)
        .expect("out dir")
        .flatten()
        .map(|e| e.file_name().to_string_lossy().into_owned())
        .collect();
    assert_eq!(names.len(), 4, "two pairs and nothing else: {names:?}");
}
