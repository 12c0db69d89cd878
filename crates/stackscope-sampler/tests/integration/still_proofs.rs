//! A still thread is proven where it was by its thread state, its current-frame pointer and its
//! innermost frame's header (`fast/still.rs`). One move no proof sees: the thread came back to
//! wait at the same instruction of the same innermost frame, at the same address, under a
//! caller of the same size that is another function. Its proof then stands for the earlier
//! stack, but only for a while: past `still::PROOF_FOR` (4 s, and up to 2 s more) the thread is
//! read in full, and its stack is right again (docs/performance.md).

use std::time::{Duration, Instant};

use crate::common::Fixture;
use stackscope_sampler::{PythonTarget, TargetOptions};

/// A thread that waits in `handle_a`, then, on SIGUSR1, in `handle_b`: the same body, so the
/// same frame size, and under it `Event.wait` and `Condition.wait` at the same addresses,
/// waiting at the same instruction. A second thread spins, so that the switcher is not the
/// GIL's last holder (which the reader reads in full every sample).
const FIXTURE: &str = r#"
import os, signal, threading, time

first = threading.Event()
second = threading.Event()
moved = False

def handle_a(event):
    event.wait()

def handle_b(event):
    event.wait()

def run():
    while not moved:
        handle_a(first)
    handle_b(second)

def spin():
    n = 0
    while True:
        n += 1

def on_usr1(signum, frame):
    global moved
    moved = True
    first.set()

signal.signal(signal.SIGUSR1, on_usr1)
threading.Thread(target=run, name="switcher", daemon=True).start()
# The GIL's holder after the move, as in a training process: not the switcher.
threading.Thread(target=spin, name="spinner", daemon=True).start()
print("ready", os.getpid(), flush=True)
while True:
    time.sleep(3600)
"#;

/// The innermost function of the `switcher` thread's stack that is one of the two handlers.
fn handler(target: &mut PythonTarget) -> Option<String> {
    let stacks = target.read_stacks().ok()?;
    let switcher = stacks
        .iter()
        .find(|s| s.thread.name.as_deref() == Some("switcher"))?;
    switcher
        .frames
        .iter()
        .map(|f| &*f.function)
        .find(|f| f.ends_with("handle_a") || f.ends_with("handle_b"))
        .map(str::to_owned)
}

/// One interpreter's fixture, attached, and what its switcher was last seen in.
struct Run {
    python: String,
    fixture: Fixture,
    target: PythonTarget,
    seen_a: u32,
    moved_after: Option<Duration>,
}

/// On every interpreter at once (each run takes the proofs' lifetime): our reader, sampling
/// every 20 ms or so as a profiler does, sees the switcher in `handle_b` within the proofs'
/// lifetime of the move, however long a proof would have stood for `handle_a`.
#[test]
fn a_move_no_proof_sees_is_read_within_the_proofs_lifetime() {
    let _serial = crate::common::serial();
    let mut runs: Vec<Run> = crate::common::pythons()
        .into_iter()
        .map(|python| {
            let fixture = Fixture::start_code(&python, FIXTURE);
            let target = PythonTarget::attach(fixture.pid, &TargetOptions::default())
                .unwrap_or_else(|e| panic!("{python}: attach: {e}"));
            Run {
                python,
                fixture,
                target,
                seen_a: 0,
                moved_after: None,
            }
        })
        .collect();
    let deadline = Instant::now() + Duration::from_secs(20);
    while runs.iter().any(|r| r.seen_a < 20) && Instant::now() < deadline {
        for r in &mut runs {
            if let Some(h) = handler(&mut r.target) {
                assert!(
                    h.ends_with("handle_a"),
                    "{}: before the move: {h}",
                    r.python
                );
                r.seen_a += 1;
            }
        }
        std::thread::sleep(Duration::from_millis(20));
    }
    for r in &runs {
        assert!(
            r.seen_a >= 20,
            "{}: the switcher waiting in handle_a",
            r.python
        );
        if r.target.reader() != "stackscope" {
            eprintln!("{}: read by {}", r.python, r.target.reader());
        }
        nix::sys::signal::kill(
            nix::unistd::Pid::from_raw(r.fixture.pid as i32),
            nix::sys::signal::Signal::SIGUSR1,
        )
        .expect("SIGUSR1");
    }
    let moved_at = Instant::now();
    // 4 s, up to 2 s more, and slack for a loaded machine.
    let deadline = moved_at + Duration::from_secs(10);
    while runs.iter().any(|r| r.moved_after.is_none()) && Instant::now() < deadline {
        for r in runs.iter_mut().filter(|r| r.moved_after.is_none()) {
            if handler(&mut r.target).is_some_and(|h| h.ends_with("handle_b")) {
                r.moved_after = Some(moved_at.elapsed());
            }
        }
        std::thread::sleep(Duration::from_millis(20));
    }
    for r in &runs {
        eprintln!("{}: handle_b read after {:?}", r.python, r.moved_after);
    }
    for r in &runs {
        assert!(
            r.moved_after.is_some(),
            "{}: still in handle_a 10 s after the move",
            r.python
        );
    }
}

/// `code` started on `python` and attached, when our reader reads it (else None, said in one
/// line: these tests are about our reader's proofs).
fn attached(python: &str, code: &str) -> Option<(Fixture, PythonTarget)> {
    let fixture = Fixture::start_code(python, code);
    let target = PythonTarget::attach(fixture.pid, &TargetOptions::default())
        .unwrap_or_else(|e| panic!("{python}: attach: {e}"));
    if target.reader() != "stackscope" {
        eprintln!("{python}: read by {}, skipped", target.reader());
        return None;
    }
    Some((fixture, target))
}

/// A busy thread, sleepers asleep for good at a known depth, and a main thread that wakes
/// every 30 ms to run a little Python: each wake-up moves the GIL, so the sleepers may have run
/// as far as the GIL can tell, and are shown still by their switch rings instead.
const WAKER: &str = r#"
import os, threading, time

def spin():
    n = 0
    while True:
        n += 1

def nap(depth):
    if depth == 0:
        while True:
            time.sleep(3600)
    nap(depth - 1)

threading.Thread(target=spin, name="spinner", daemon=True).start()
for i in range(12):
    threading.Thread(target=nap, args=(4,), name="napper-%d" % i, daemon=True).start()
time.sleep(0.1)
print("ready", os.getpid(), flush=True)
ticks = 0
while True:
    time.sleep(0.03)
    ticks += 1
"#;

/// Sleepers taken as still on their switch rings' word after lost bets keep their stacks, in
/// every sample, on every interpreter.
#[test]
fn sleepers_shown_still_by_their_switch_rings_keep_their_stacks() {
    let _serial = crate::common::serial();
    for python in crate::common::pythons() {
        let Some((_fixture, mut target)) = attached(&python, WAKER) else {
            continue;
        };
        let (mut reads, mut nappers) = (0, 0);
        let deadline = Instant::now() + Duration::from_secs(2);
        while Instant::now() < deadline {
            let Ok(stacks) = target.read_stacks() else {
                continue;
            };
            reads += 1;
            for s in stacks.iter().filter(|s| {
                s.thread
                    .name
                    .as_deref()
                    .is_some_and(|n| n.starts_with("napper-"))
            }) {
                let naps = s
                    .frames
                    .iter()
                    .filter(|f| f.function.ends_with("nap"))
                    .count();
                assert_eq!(naps, 5, "{python}: {:?}", s.frames);
                nappers += 1;
            }
            std::thread::sleep(Duration::from_millis(10));
        }
        let audit = target.idle_audit().expect("our reader");
        eprintln!("{python}: {reads} reads, {nappers} napper stacks, {audit:?}");
        assert_eq!(nappers, reads * 12, "{python}: every napper in every read");
        assert!(audit.bets_lost >= 5, "{python}: {audit:?}");
        if audit.rings_refused > 0 {
            eprintln!("{python}: switch rings refused here (perf_event_open), not checked");
            continue;
        }
        assert!(audit.ring_proven > 0, "{python}: {audit:?}");
    }
}

/// Sleepers, a thread among them in the list that leaves on SIGUSR1, a busy thread, and a main
/// thread that wakes every 30 ms (so that bets are lost and the sleepers are shown still by
/// their switch rings).
const LEAVER: &str = r#"
import os, signal, threading, time

leave = threading.Event()

def spin():
    n = 0
    while True:
        n += 1

def nap():
    while True:
        time.sleep(3600)

def leaver():
    leave.wait()

for i in range(6):
    threading.Thread(target=nap, name="before-%d" % i, daemon=True).start()
threading.Thread(target=leaver, name="leaver", daemon=True).start()
for i in range(6):
    threading.Thread(target=nap, name="after-%d" % i, daemon=True).start()
threading.Thread(target=spin, name="spinner", daemon=True).start()
signal.signal(signal.SIGUSR1, lambda signum, frame: leave.set())
time.sleep(0.1)
print("ready", os.getpid(), flush=True)
while True:
    time.sleep(0.03)
"#;

/// A thread that leaves changes the link of the thread before it in the list, which does not
/// run: the list is read where it changed, and the thread is gone from the next samples.
#[test]
fn a_thread_that_leaves_among_sleepers_shown_still_is_gone_at_once() {
    let _serial = crate::common::serial();
    for python in crate::common::pythons() {
        let Some((fixture, mut target)) = attached(&python, LEAVER) else {
            continue;
        };
        let has_leaver = |target: &mut PythonTarget| {
            target.read_stacks().ok().map(|stacks| {
                stacks
                    .iter()
                    .any(|s| s.thread.name.as_deref() == Some("leaver"))
            })
        };
        // Long enough for bets to be lost and the rings to be opened and used.
        let deadline = Instant::now() + Duration::from_secs(1);
        while Instant::now() < deadline {
            assert_ne!(
                has_leaver(&mut target),
                Some(false),
                "{python}: leaver there"
            );
            std::thread::sleep(Duration::from_millis(10));
        }
        let before = target.idle_audit().expect("our reader");
        nix::sys::signal::kill(
            nix::unistd::Pid::from_raw(fixture.pid as i32),
            nix::sys::signal::Signal::SIGUSR1,
        )
        .expect("SIGUSR1");
        let left = Instant::now();
        let mut gone_after = None;
        while left.elapsed() < Duration::from_secs(3) {
            if has_leaver(&mut target) == Some(false) {
                gone_after = Some(left.elapsed());
                break;
            }
            std::thread::sleep(Duration::from_millis(10));
        }
        eprintln!("{python}: leaver gone after {gone_after:?}; before: {before:?}");
        // Gone within a few samples: its thread state is freed as it exits, well under a
        // proof's lifetime (4 s).
        assert!(
            gone_after.is_some_and(|d| d < Duration::from_millis(1500)),
            "{python}: leaver still read {:?} after it left",
            left.elapsed()
        );
        if before.rings_refused == 0 {
            assert!(before.ring_proven > 0, "{python}: {before:?}");
        }
    }
}
