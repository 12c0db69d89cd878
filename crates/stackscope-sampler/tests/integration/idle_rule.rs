//! The one idle rule on every interpreter: threads waiting (time.sleep, Event.wait,
//! Queue.get, a pipe read, a socket recv, select, a lock) are idle; a thread spinning in
//! Python and threads in C calls that released the GIL (zlib, hashlib on a big buffer) are
//! busy. Whichever reader reads the version: ours (3.10 and later), py-spy's (3.9, and 3.10 to
//! 3.12 when locals are asked for).

use crate::common;

use std::collections::HashMap;
use std::time::{Duration, Instant};

use common::{pythons, pythons_of, Fixture, VERSIONS};
use stackscope_sampler::{PythonTarget, TargetOptions};

const FIXTURE: &str = include_str!("../../../../fixtures/idle_threads.py");
const IDLE: [&str; 8] = [
    "MainThread",
    "sleeper",
    "event_waiter",
    "queue_getter",
    "pipe_reader",
    "socket_reader",
    "selector",
    "lock_waiter",
];
const BUSY: [&str; 3] = ["spinner", "compressor", "hasher"];

#[test]
fn waiting_threads_are_idle_and_working_ones_busy_on_every_version() {
    let _serial = crate::common::serial();
    let mut versions = vec!["3.9"];
    versions.extend(VERSIONS);
    for python in pythons_of(&versions) {
        check(&python, &TargetOptions::default());
    }
}

/// With locals asked for (`dump --locals`, the hang report) under the same rule: every read
/// stops the process, and the reader is py-spy's up to 3.12, ours (its deep read) from 3.13.
#[test]
fn the_same_rule_holds_with_locals() {
    let _serial = crate::common::serial();
    for python in pythons() {
        let options = TargetOptions {
            locals: true,
            ..TargetOptions::default()
        };
        check(&python, &options);
    }
}

fn check(python: &str, options: &TargetOptions) {
    let fixture = Fixture::start_code(python, FIXTURE);
    let mut target = PythonTarget::attach(fixture.pid, options).expect("attach");
    // Counts of (active, seen) per thread name.
    let mut seen: HashMap<String, (u32, u32)> = HashMap::new();
    let deadline = Instant::now() + Duration::from_secs(3);
    let mut reads = 0;
    while Instant::now() < deadline || reads < 40 {
        if let Ok(stacks) = target.read_stacks() {
            reads += 1;
            tally(&mut seen, stacks);
        }
        std::thread::sleep(Duration::from_millis(20));
    }
    let reader = target.reader();
    eprintln!(
        "{python} ({}, reader {reader}): {reads} reads, (active, seen) {seen:?}",
        target.python_version(),
    );
    // A read that stops the whole process (py-spy's reader, any read with locals) wakes
    // waiting threads for a moment: on a loaded machine one can still be runnable at the
    // next read.
    let most = if reader == "py-spy" || options.locals {
        5
    } else {
        10
    };
    for name in IDLE {
        let (active, n) = seen.get(name).copied().unwrap_or_default();
        assert!(n >= 20, "{python}: thread {name} seen {n} times");
        assert!(
            active * most <= n,
            "{python} ({reader}): waiting thread {name} active in {active} of {n} reads"
        );
    }
    // A working thread shares the GIL with two others on two cores: while it waits for the GIL
    // it sleeps in the OS, and is rightly idle then. A third of the reads still sets it far
    // apart from the waiting threads (at most a tenth).
    for name in BUSY {
        let (active, n) = seen.get(name).copied().unwrap_or_default();
        assert!(n >= 20, "{python}: thread {name} seen {n} times");
        assert!(
            active * 3 >= n,
            "{python} ({reader}): working thread {name} active in only {active} of {n} reads"
        );
    }
}

/// The GIL's last holder asleep: every thread of this fixture sleeps, the one that ran Python
/// last among them. With locals every read stops the process, so no read brackets the GIL
/// and the holder the reader expects stays the one it found at attach: that thread's state
/// must be read before the stop like any other's, not left to a moment after the read when
/// every thread reads as stopped (it read as unknown, hence busy, in every read).
#[test]
fn the_gil_s_last_holder_asleep_is_idle_with_locals() {
    const LAST_TO_RUN: &str = r#"
import os, threading, time

go = threading.Event()

def last_to_run():
    go.wait()
    print("ready", os.getpid(), flush=True)
    while True:
        time.sleep(3600)

threading.Thread(target=last_to_run, name="last_to_run", daemon=True).start()
go.set()
while True:
    time.sleep(3600)
"#;
    let _serial = crate::common::serial();
    let options = TargetOptions {
        locals: true,
        ..TargetOptions::default()
    };
    for python in pythons() {
        let fixture = Fixture::start_code(&python, LAST_TO_RUN);
        let mut target = PythonTarget::attach(fixture.pid, &options).expect("attach");
        let mut seen: HashMap<String, (u32, u32)> = HashMap::new();
        for _ in 0..30 {
            tally(&mut seen, target.read_stacks().expect("read"));
            std::thread::sleep(Duration::from_millis(10));
        }
        let reader = target.reader();
        eprintln!("{python} (reader {reader}): (active, seen) {seen:?}");
        for name in ["MainThread", "last_to_run"] {
            let (active, n) = seen.get(name).copied().unwrap_or_default();
            assert_eq!(n, 30, "{python}: thread {name} seen {n} times");
            // A stop wakes a sleeper for a moment; on a loaded machine it may still be
            // runnable at the next read now and then, never in most reads.
            assert!(
                active * 5 <= n,
                "{python} ({reader}): sleeping thread {name} active in {active} of {n} reads"
            );
        }
    }
}

/// Counts each thread of a read in `seen` by name: (reads that called it active, reads).
fn tally(seen: &mut HashMap<String, (u32, u32)>, stacks: Vec<stackscope_sampler::ThreadStack>) {
    for s in stacks {
        let name = s.thread.name.as_deref().unwrap_or_default().to_owned();
        let e = seen.entry(name).or_default();
        e.0 += u32::from(s.thread.active);
        e.1 += 1;
    }
}
