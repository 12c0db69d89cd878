//! Our reader on running processes (nobody stops them but the reader itself, when it must):
//! every stack it reports is one the thread really had.
//!
//! The fixture's threads only ever have stacks of known shapes, with known lines for every
//! frame that is not the innermost, while they call and return as fast as Python can: a torn
//! read (frames from two different instants) shows as a shape or a line no real stack has.

use std::time::{Duration, Instant};

use stackscope_sampler::{procfs, PythonTarget, SampleFailure, TargetOptions, ThreadStack};

use crate::common;
use common::{pythons, Fixture};

const SHAPES: &str = include_str!(concat!(
    env!("CARGO_MANIFEST_DIR"),
    "/../../fixtures/consistency_shapes.py"
));

/// The line of the fixture source that carries `marker`.
fn line_of(marker: &str) -> u32 {
    SHAPES
        .lines()
        .position(|l| l.contains(marker))
        .map(|i| i as u32 + 1)
        .unwrap_or_else(|| panic!("no {marker}"))
}

/// Why `stack` is not a stack its thread can have, if it is not.
fn shape_error(stack: &ThreadStack) -> Option<String> {
    let name = stack
        .thread
        .name
        .as_deref()
        .filter(|n| ["steady", "churn", "gen"].contains(n))?;
    // Outermost first from here on; names without their qualifying part (3.10 has none).
    let frames: Vec<(&str, u32)> = stack
        .frames
        .iter()
        .rev()
        .map(|f| (f.function.rsplit('.').next().unwrap_or(&f.function), f.line))
        .collect();
    let bootstrap = ["_bootstrap", "_bootstrap_inner", "run"];
    if frames.len() < 4 || frames[..3].iter().map(|f| f.0).ne(bootstrap) {
        return Some(format!("not under the thread bootstrap: {frames:?}"));
    }
    let rest = &frames[3..];
    let innermost = rest.len() - 1;
    let bad = |why: &str| Some(format!("{why}: {rest:?}"));
    match name {
        "steady" => {
            let depth = 21;
            if rest.len() < depth + 2 || rest[0].0 != "<lambda>" {
                return bad("short");
            }
            for (i, f) in rest[1..=depth].iter().enumerate() {
                if f.0 != "steady" || (i < depth - 1 && f.1 != line_of("STEADY_CALL")) {
                    return bad("steady frames");
                }
            }
            let spin = rest[depth + 1];
            if spin.0 != "spin_calls" {
                return bad("no spin_calls");
            }
            match rest.len() - (depth + 2) {
                0 => None,
                1 => {
                    let leaf = rest[depth + 2].0;
                    let line = spin.1;
                    let ok = (leaf == "leaf_a" && line == line_of("SPIN_A"))
                        || (leaf == "leaf_b" && line == line_of("SPIN_B"));
                    (!ok).then(|| format!("{leaf} called from line {line}: {rest:?}"))
                }
                _ => bad("too deep"),
            }
        }
        "churn" => {
            if rest[0].0 != "churn" {
                return bad("no churn");
            }
            let recs = rest[1..].iter().take_while(|f| f.0 == "rec").count();
            if recs > 40 {
                return bad("too many rec");
            }
            let after = &rest[1 + recs..];
            if recs > 0 && rest[0].1 != line_of("CHURN_CALL") {
                return bad("churn not at its call");
            }
            for (i, f) in rest[1..=recs].iter().enumerate() {
                let is_last = 1 + i == innermost;
                if !is_last && f.1 != line_of("REC_CALL") && f.1 != line_of("REC_LEAF") {
                    return bad("rec not at a call");
                }
            }
            match after {
                [] => None,
                [("leaf_a", _)] if recs > 0 && rest[recs].1 == line_of("REC_LEAF") => None,
                _ => bad("unexpected frames after rec"),
            }
        }
        "gen" => {
            let names: Vec<&str> = rest.iter().map(|f| f.0).collect();
            let ok = match names.as_slice() {
                ["generator"] => true,
                ["generator", "g"] => rest[0].1 == line_of("GEN_LOOP"),
                ["generator", "g", "leaf_a"] => {
                    rest[0].1 == line_of("GEN_LOOP") && rest[1].1 == line_of("GEN_LEAF")
                }
                _ => false,
            };
            (!ok).then(|| format!("{rest:?}"))
        }
        _ => None,
    }
}

#[test]
fn stacks_read_while_the_threads_run_are_stacks_they_had() {
    shapes_hold(SHAPES);
}

/// The same among 60 sleeping threads, whose OS states and stacks the reader reuses while
/// their Python state does not change: the running threads' stacks stay whole.
#[test]
fn stacks_stay_whole_among_many_sleeping_threads() {
    let sleepers = "for i in range(60):\n    \
                    threading.Thread(target=time.sleep, args=(3600,), daemon=True).start()\n\
                    print(\"ready\"";
    shapes_hold(&SHAPES.replacen("print(\"ready\"", sleepers, 1));
}

/// How long each interpreter is read: 4 s, or `STACKSCOPE_CONSISTENCY_SECS` to count torn
/// reads over a longer run (docs/performance.md's figures for the holder's copies), with
/// `STACKSCOPE_CONSISTENCY_PYTHON` (a part of the interpreter's path) to read only one.
fn run_length() -> (Duration, Option<String>) {
    let secs = std::env::var("STACKSCOPE_CONSISTENCY_SECS")
        .ok()
        .and_then(|v| v.parse().ok())
        .unwrap_or(4);
    let only = std::env::var("STACKSCOPE_CONSISTENCY_PYTHON").ok();
    (Duration::from_secs(secs), only)
}

fn shapes_hold(code: &str) {
    let with_sleepers = code.contains("range(60)");
    let _serial = crate::common::serial();
    let (length, only) = run_length();
    let chosen = |p: &String| only.as_ref().is_none_or(|o| p.contains(o.as_str()));
    for python in pythons().into_iter().filter(chosen) {
        let fixture = Fixture::start_code(&python, code);
        let mut target =
            PythonTarget::attach(fixture.pid, &TargetOptions::default()).expect("attach");
        assert_eq!(target.reader(), "stackscope", "{python}");
        // 3.12 keeps the current frame in a register through a tight generator loop and
        // clears a suspended generator frame's link before storing the new current frame:
        // a thread stopped there has in memory a generator frame with no caller. py-spy reads
        // that too (about 7% of samples of this fixture's generator thread, measured); our
        // reader stops such a thread again a few times, which makes it rarer.
        let py312 = target.python_version().starts_with("3.12");
        let deadline = Instant::now() + length;
        let (mut reads, mut errors, mut checked) = (0, 0, 0);
        let mut torn: Vec<String> = Vec::new();
        let (mut gen_reads, mut bare_generator, mut sleepers) = (0, 0, 0);
        let mut seen_leaf = false;
        while Instant::now() < deadline {
            reads += 1;
            let stacks = match target.read_stacks() {
                Ok(s) => s,
                Err(e) => {
                    errors += 1;
                    eprintln!("{python}: read failed: {e}");
                    continue;
                }
            };
            for stack in &stacks {
                if stack.thread.name.as_deref() == Some("gen") {
                    gen_reads += 1;
                    let bare = stack.frames.len() == 1
                        && &*stack.frames[0].function == "generator.<locals>.g";
                    if py312 && bare {
                        bare_generator += 1;
                        continue;
                    }
                }
                // A sleeper (`Thread.run` calling `time.sleep`, which is C) has three frames,
                // whether read or reused.
                let sleeper = stack
                    .thread
                    .name
                    .as_deref()
                    .is_some_and(|n| n.contains("(sleep)"));
                if sleeper {
                    let functions: Vec<&str> = stack
                        .frames
                        .iter()
                        .map(|f| f.function.rsplit('.').next().unwrap_or(&f.function))
                        .collect();
                    assert_eq!(
                        functions,
                        ["run", "_bootstrap_inner", "_bootstrap"],
                        "{python}"
                    );
                    sleepers += 1;
                }
                if let Some(why) = shape_error(stack) {
                    torn.push(format!("thread {:?}: {why}", stack.thread.name));
                    continue;
                }
                checked += 1;
                seen_leaf |= stack
                    .frames
                    .first()
                    .is_some_and(|f| f.function.starts_with("leaf_"));
            }
        }
        eprintln!(
            "{python}: {reads} reads, {checked} stacks checked, {errors} errors, \
             {bare_generator} of {gen_reads} generator-thread reads a bare generator frame, \
             {} torn",
            torn.len()
        );
        assert!(
            torn.is_empty(),
            "{python}: {} of {reads} reads gave a stack its thread never had, the first: {}",
            torn.len(),
            torn[0]
        );
        assert!(
            bare_generator * 20 <= gen_reads,
            "{python}: {bare_generator} of {gen_reads}"
        );
        assert!(reads > 100, "{python}: only {reads} reads");
        assert_eq!(errors, 0, "{python}: a consistent read must never fail");
        assert!(
            seen_leaf,
            "{python}: the threads were caught inside their calls"
        );
        let audit = target.idle_audit().expect("our reader");
        // 3.11+: stacks kept on a sound read's word, without later copies, were among those
        // whose shapes were checked above (3.10's frames are always checked).
        eprintln!(
            "{python}: {} stacks kept on a sound read's word, {} tries missed, {} kept with \
             a returned callee on top, {} proving stops",
            audit.vouched, audit.vouch_misses, audit.returned_kept, audit.proving_stops
        );
        if !target.python_version().starts_with("3.10") {
            assert!(audit.vouched > 0, "{python}: {audit:?}");
        }
        if with_sleepers {
            eprintln!("{python}: {sleepers} sleeper stacks, {audit:?}");
            assert!(
                sleepers >= 60 * reads / 2,
                "{python}: {sleepers} sleeper stacks"
            );
            assert!(audit.unchanged > 0, "{python}: {audit:?}");
        }
        drop(target);
        assert!(!procfs::is_stopped(fixture.pid), "{python}: left running");
    }
}

const COME_AND_GO: &str = r#"
import os, threading, time

def short_life(i):
    x = 0
    for _ in range(2000 + (i % 7) * 500):
        x += 1

def spawner():
    i = 0
    while True:
        ts = [threading.Thread(target=short_life, args=(i + k,), name=f"short-{i + k}") for k in range(3)]
        for t in ts:
            t.start()
        for t in ts:
            t.join()
        i += 3

threading.Thread(target=spawner, name="spawner", daemon=True).start()
time.sleep(0.2)
print("ready", os.getpid(), flush=True)
while True:
    time.sleep(1)
"#;

fn minor_of(python: &str) -> String {
    let out = std::process::Command::new(python)
        .args(["-c", "import sys; print('%d.%d' % sys.version_info[:2])"])
        .output()
        .expect("python runs");
    String::from_utf8_lossy(&out.stdout).trim().to_owned()
}

#[test]
fn threads_that_come_and_go_are_followed() {
    for python in pythons() {
        let fixture = Fixture::start_code(&python, COME_AND_GO);
        let mut target =
            PythonTarget::attach(fixture.pid, &TargetOptions::default()).expect("attach");
        let deadline = Instant::now() + Duration::from_secs(3);
        let (mut reads, mut failed, mut short_named) = (0, 0, 0);
        let (mut stacks_seen, mut no_os_id) = (0, 0);
        let mut why_failed = std::collections::BTreeMap::<String, usize>::new();
        while Instant::now() < deadline {
            reads += 1;
            match target.read_stacks() {
                Ok(stacks) => {
                    short_named += stacks
                        .iter()
                        .filter(|s| {
                            s.thread
                                .name
                                .as_deref()
                                .is_some_and(|n| n.starts_with("short-"))
                        })
                        .count();
                    // 3.10 records no OS id: it is read from the thread's `struct pthread`,
                    // where the kernel sets it as the thread starts and clears it as it
                    // ends; a short-lived thread caught at either end may have none.
                    stacks_seen += stacks.len();
                    no_os_id += stacks
                        .iter()
                        .filter(|s| s.thread.os_thread_id.is_none())
                        .count();
                }
                Err(SampleFailure::Transient { message, .. }) => {
                    failed += 1;
                    *why_failed.entry(message).or_insert(0) += 1;
                }
                Err(e) => panic!("{python}: {e}"),
            }
        }
        eprintln!(
            "{python}: {reads} reads, {failed} failed, {short_named} short-lived threads \
             named, {no_os_id} of {stacks_seen} stacks without an OS thread id; failures: \
             {why_failed:?}"
        );
        let most = if minor_of(&python) == "3.10" { 2 } else { 0 };
        assert!(
            no_os_id * 100 <= stacks_seen * most,
            "{python}: {no_os_id} of {stacks_seen} stacks have no OS thread id"
        );
        assert!(reads > 100, "{python}");
        // A read may fail when a thread exits in the middle of it; most must not.
        assert!(
            failed * 20 <= reads,
            "{python}: {failed} of {reads} reads failed"
        );
        assert!(short_named > 0, "{python}: new threads get their names");
        drop(target);
        assert!(!procfs::is_stopped(fixture.pid), "{python}: left running");
    }
}

const TOGGLER: &str = r#"
import os, threading, time

def in_a():
    time.sleep(0.03)

def in_b():
    time.sleep(0.03)

def toggler():
    while True:
        in_a()
        in_b()

def spin():
    x = 0
    while True:
        x += 1

def sleeper():
    time.sleep(3600)

threading.Thread(target=spin, name="busy", daemon=True).start()
threading.Thread(target=toggler, name="toggler", daemon=True).start()
for i in range(20):
    threading.Thread(target=sleeper, name=f"sleeper-{i}", daemon=True).start()
time.sleep(0.3)
print("ready", os.getpid(), flush=True)
while True:
    time.sleep(3600)
"#;

/// Sleeping threads are taken as where they were without being read while the GIL shows
/// that none of them ran; one that wakes every 30 ms to sleep in another function is seen in
/// each, about as often as it switches: never kept where it was for the 100 ms that a
/// sleeping thread's OS state is trusted.
#[test]
fn a_sleeper_that_moves_is_seen_moving_among_still_ones() {
    let _serial = crate::common::serial();
    for python in pythons() {
        let fixture = Fixture::start_code(&python, TOGGLER);
        let mut target =
            PythonTarget::attach(fixture.pid, &TargetOptions::default()).expect("attach");
        let started = Instant::now();
        let (mut reads, mut switches, mut sleeper_stacks) = (0, 0, 0);
        let mut last: Option<String> = None;
        while started.elapsed() < Duration::from_secs(3) {
            let Ok(stacks) = target.read_stacks() else {
                continue;
            };
            reads += 1;
            for stack in &stacks {
                let name = stack.thread.name.as_deref().unwrap_or("");
                let functions: Vec<&str> = stack.frames.iter().map(|f| &*f.function).collect();
                if name.starts_with("sleeper-") {
                    sleeper_stacks += 1;
                    assert_eq!(
                        functions.first().copied(),
                        Some("sleeper"),
                        "{python}: {name} read as {functions:?}"
                    );
                }
                if name == "toggler" {
                    let now = functions.first().map(|f| f.to_string());
                    assert!(
                        matches!(now.as_deref(), Some("in_a" | "in_b" | "toggler")),
                        "{python}: toggler read as {functions:?}"
                    );
                    if now.as_deref() != Some("toggler") {
                        if last.is_some() && now != last {
                            switches += 1;
                        }
                        last = now;
                    }
                }
            }
        }
        let elapsed = started.elapsed().as_secs_f64();
        eprintln!(
            "{python}: {reads} reads, {sleeper_stacks} sleeper stacks, the toggler seen \
             switching {switches} times in {elapsed:.1} s (it switches every 30 ms)"
        );
        assert!(reads > 300, "{python}: only {reads} reads");
        // Every 30 ms is 100 in 3 s; a thread kept where it was for 100 ms at a time would
        // be seen switching at most 30 times.
        assert!(
            switches as f64 >= 15.0 * elapsed,
            "{python}: the toggler was seen switching {switches} times in {elapsed:.1} s"
        );
        drop(target);
        assert!(!procfs::is_stopped(fixture.pid), "{python}: left running");
    }
}
