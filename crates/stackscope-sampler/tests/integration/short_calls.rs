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

/// The share of `READS` reads, a few milliseconds apart, whose spinning thread has `leaf` on
/// top; each read with the process stopped by the test (`process`), or while it runs.
fn leaf_share(target: &mut PythonTarget, process: Option<&remoteprocess::Process>) -> f64 {
    let mut on_top = 0;
    for _ in 0..READS {
        let lock = process.map(|p| p.lock().expect("stop the fixture"));
        let stacks = target.read_stacks().expect("read");
        drop(lock);
        let spinning = stacks
            .iter()
            .find(|s| s.frames.iter().any(|f| &*f.function == "spin"))
            .expect("the spinning thread");
        on_top += usize::from(
            spinning
                .frames
                .first()
                .is_some_and(|f| &*f.function == "leaf"),
        );
        std::thread::sleep(Duration::from_millis(2));
    }
    on_top as f64 / READS as f64
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
        let _finding = leaf_share(&mut target, None);
        let live = leaf_share(&mut target, None);
        let process = remoteprocess::Process::new(fixture.pid as remoteprocess::Pid).expect("open");
        let stopped = leaf_share(&mut target, Some(&process));
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
        // The stops that prove stacks are few: at most one a thread every quarter second.
        assert!(audit.proving_stops <= 12, "{python}: {audit:?}");
        drop(target);
        assert!(
            !stackscope_sampler::procfs::is_stopped(fixture.pid),
            "{python}: left running"
        );
    }
}
