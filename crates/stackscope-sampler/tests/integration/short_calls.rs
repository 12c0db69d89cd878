//! A short call made in a loop gets its share of a running thread's samples, read live as
//! read with the process stopped (what py-spy reads).
//!
//! The GIL's holder is read while it runs: its current-frame pointer first, its frames a
//! moment later, and later copies that keep a stack only if its innermost frame stays through
//! them. A call shorter than that has often returned by the time its frame is copied; unless
//! the reader keeps the frame the pointer named (`fast/proof/vouch.rs`), its time goes to its
//! caller.

use std::time::Duration;

use crate::common::{self, pythons, Fixture};
use stackscope_sampler::{PythonTarget, TargetOptions};

/// The main thread calls a one-line function in a loop, with as much work of its own beside.
const FIXTURE: &str = r#"
import os

def leaf(x):
    return (x * 7 + 3) % 1000003

def spin():
    x = 0
    while True:
        x = leaf(x)
        x = (x * 5 + 1) % 999983

print("ready", os.getpid(), flush=True)
spin()
"#;

/// Reads per measure: at a share near a third, two standard deviations are 0.055.
const READS: usize = 300;

/// A loop of `callees` short functions called in turn, each doing `work` operations and,
/// `nested` deep, calling the next level's function from inside.
fn shape(callees: usize, work: usize, nested: usize) -> String {
    let mut code = String::from("import os\n\n");
    let ops: String = (0..work).map(|i| format!(" * {} + {}", 3 + i, i)).collect();
    for c in 0..callees {
        for level in (0..nested).rev() {
            let inner = if level + 1 < nested {
                format!("f{c}_{}(x)", level + 1)
            } else {
                "x".to_owned()
            };
            code += &format!("def f{c}_{level}(x):\n    return ({inner}{ops}) % 1000003\n\n");
        }
    }
    code += "def spin():\n    x = 0\n    while True:\n";
    for c in 0..callees {
        code += &format!("        x = f{c}_0(x)\n");
    }
    code +=
        "        x = (x * 5 + 1) % 999983\n\nprint(\"ready\", os.getpid(), flush=True)\nspin()\n";
    code
}

/// Each function's share of reads as the innermost frame of a thread.
type Shares = std::collections::BTreeMap<String, f64>;

/// Each function's share of `READS` reads, a few milliseconds apart, as the innermost frame of
/// the spinning thread; each read with the process stopped by the test (`process`), or while
/// it runs.
///
/// A read counts only when the thread ran since the last one counted: on a loaded machine the
/// fixture waits for a CPU for milliseconds at a time, and reads in such a wait all see the
/// one moment it was preempted at, which would weigh that moment as many.
fn shares(target: &mut PythonTarget, process: Option<&remoteprocess::Process>) -> Shares {
    let mut counts = std::collections::BTreeMap::<String, usize>::new();
    let pid = target.pid();
    let mut ran = CpuTime::of(pid);
    let mut counted = 0;
    for _ in 0..READS * 4 {
        if counted == READS {
            break;
        }
        std::thread::sleep(Duration::from_millis(2));
        if !ran.moved() {
            continue;
        }
        let lock = process.map(|p| p.lock().expect("stop the fixture"));
        let stacks = target.read_stacks().expect("read");
        drop(lock);
        let spinning = stacks
            .iter()
            .find(|s| s.frames.iter().any(|f| &*f.function == "spin"))
            .expect("the spinning thread");
        let top = spinning
            .frames
            .first()
            .map(|f| f.function.to_string())
            .unwrap_or_default();
        *counts.entry(top).or_default() += 1;
        counted += 1;
    }
    assert!(
        counted * 2 > READS,
        "the fixture ran before only {counted} reads"
    );
    counts
        .into_iter()
        .map(|(k, v)| (k, v as f64 / counted as f64))
        .collect()
}

/// A thread's time on a CPU (`/proc/PID/task/TID/schedstat`), to tell whether it ran between
/// two reads.
struct CpuTime {
    path: String,
    last: u64,
}

impl CpuTime {
    /// The main thread of `pid` (the fixtures spin on it).
    fn of(pid: u32) -> Self {
        let path = format!("/proc/{pid}/task/{pid}/schedstat");
        let last = Self::read(&path);
        CpuTime { path, last }
    }

    fn read(path: &str) -> u64 {
        let text = std::fs::read_to_string(path).expect("the fixture's schedstat");
        text.split_whitespace()
            .next()
            .and_then(|n| n.parse().ok())
            .expect("schedstat's first field")
    }

    /// Whether the thread ran since the last call that said so.
    fn moved(&mut self) -> bool {
        let now = Self::read(&self.path);
        let moved = now != self.last;
        self.last = now;
        moved
    }
}

/// Reads a while first, as a recording does: the stacks with short calls on top are found
/// and proven (by stops now and then) in its first seconds.
fn find_stacks(target: &mut PythonTarget) {
    for _ in 0..FINDING_ROUNDS {
        shares(target, None);
    }
}

/// Rounds of `READS` reads (about 0.8 s each) read before the shares are measured.
const FINDING_ROUNDS: usize = 3;

/// Loops of short calls of other shapes (several callees in turn, calls nested, more work a
/// call), from parameters: the share of samples with some callee on top, read live, matches
/// the share read stopped, on `python3` and on 3.14 (whose returned frames have no code
/// object left); and so does each function's own share where the loop makes one call.
///
/// Of callees called in turn, the one whose frame the copy holds (the latest called) has the
/// sample (docs/performance.md): there only their sum is held.
#[test]
fn short_calls_of_many_shapes_get_their_share() {
    let _serial = common::serial();
    let mut interpreters = vec!["python3".to_owned()];
    interpreters.extend(common::pythons_of(&["3.14"]).into_iter().skip(1));
    // (callees, work, nested): the last two not among those the reader was tuned on.
    let shapes = [
        (2, 1, 1),
        (1, 1, 2),
        (3, 2, 1),
        (1, 6, 1),
        (2, 3, 2),
        (1, 2, 3),
    ];
    for python in &interpreters {
        for (callees, work, nested) in shapes {
            let fixture = Fixture::start_code(python, &shape(callees, work, nested));
            let mut target =
                PythonTarget::attach(fixture.pid, &TargetOptions::default()).expect("attach");
            find_stacks(&mut target);
            let live = shares(&mut target, None);
            let process =
                remoteprocess::Process::new(fixture.pid as remoteprocess::Pid).expect("open");
            let stopped = shares(&mut target, Some(&process));
            let what = format!("{python} {callees} callees, {work} ops, {nested} deep");
            let audit = target.idle_audit().expect("our reader");
            eprintln!(
                "{what}: live {live:.2?}, stopped {stopped:.2?} ({} kept with a returned \
                 callee on top, {} on a sound read's word, {} proving stops)",
                audit.returned_kept, audit.vouched, audit.proving_stops
            );
            let called = |s: &Shares| 1.0 - s.get("spin").copied().unwrap_or(0.0);
            let (l, st) = (called(&live), called(&stopped));
            assert!(st > 0.2, "{what}: the callees' share stopped is {st:.2}");
            assert!(
                l > st * 0.6 && l < st * 1.5,
                "{what}: callees on top in {l:.2} of live reads against {st:.2} stopped"
            );
            if callees > 1 {
                continue;
            }
            // A share near a fifth, of 300 reads, is known to about 0.023 either way: the
            // bounds are three standard deviations of the difference away.
            for (function, &st) in stopped.iter().filter(|(_, &v)| v >= 0.2) {
                let l = live.get(function).copied().unwrap_or(0.0);
                assert!(
                    l > st * 0.5 && l < st * 1.6,
                    "{what}: {function} on top in {l:.2} of live reads against {st:.2} stopped"
                );
            }
        }
    }
}

#[test]
fn a_short_call_gets_its_share_of_a_running_threads_samples() {
    let _serial = common::serial();
    for python in pythons() {
        let fixture = Fixture::start_code(&python, FIXTURE);
        let mut target =
            PythonTarget::attach(fixture.pid, &TargetOptions::default()).expect("attach");
        // Live reads first, as a recording's: stopped ones would prove the stacks the live
        // ones keep. The first of them find the stacks and prove them (by stops now and then).
        let leaf = |s: Shares| s.get("leaf").copied().unwrap_or(0.0);
        find_stacks(&mut target);
        let live = leaf(shares(&mut target, None));
        let process = remoteprocess::Process::new(fixture.pid as remoteprocess::Pid).expect("open");
        let stopped = leaf(shares(&mut target, Some(&process)));
        let audit = target.idle_audit().expect("our reader");
        eprintln!(
            "{python}: leaf on top in {live:.2} of live reads, {stopped:.2} of stopped ones \
             ({} kept with a returned callee on top, {} proving stops)",
            audit.returned_kept, audit.proving_stops
        );
        assert!(
            stopped > 0.15,
            "{python}: the fixture spends {stopped:.2} in leaf"
        );
        assert!(
            live > stopped * 0.6 && live < stopped * 1.5,
            "{python}: leaf on top in {live:.2} of live reads against {stopped:.2} stopped"
        );
        // The stops that prove stacks are few. A proving is at most six stops; provings
        // begin at most a quarter second apart, and twice as far apart after each that proved
        // nothing new: over these 3 s of reads, six provings where the loop's stacks are
        // proven within the first second, a couple more on a loaded machine where they take
        // longer (41 stops seen in CI), against 300 stops were they not spaced.
        assert!(audit.proving_stops <= 48, "{python}: {audit:?}");
        drop(target);
        assert!(
            !stackscope_sampler::procfs::is_stopped(fixture.pid),
            "{python}: left running"
        );
    }
}
