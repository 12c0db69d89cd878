//! `--native` stops only the threads that ran since their last unwind; the others are given
//! the stack that unwind merged (`target/native_kept.rs`). Checked on `fixtures/native_kept.py`:
//! a spinning thread, sleepers that never wake, and a waker that waits again at the very same
//! Python instruction in another system call each time, so a kept stack that outlived a
//! wake-up would show the wrong C function.

use std::time::{Duration, Instant};

use crate::common::Fixture;
use stackscope_sampler::{PythonTarget, ReaderTuning, TargetOptions, ThreadStack};

/// `fixtures/native_kept.py` with SLEEPERS and PERIOD, not reaped by a thread of the test:
/// its wait would take the stops of the threads this test stops.
fn start_fixture(python: &str, sleepers: &str, period: &str) -> Fixture {
    Fixture::script("native_kept.py")
        .python(python)
        .args(&[sleepers, period])
        .reap(false)
        .start()
}

/// Attaches with `--native`'s options, the audit as asked.
fn attach_native(pid: u32, audit: bool) -> PythonTarget {
    let options = TargetOptions {
        native: true,
        tuning: ReaderTuning {
            native_audit: audit,
            ..ReaderTuning::default()
        },
        ..TargetOptions::default()
    };
    PythonTarget::attach(pid, &options).expect("attach --native")
}

/// Samples `target` at about 100 Hz for `seconds`, handing each sample's stacks to `each`.
fn sample(target: &mut PythonTarget, seconds: u64, mut each: impl FnMut(&[ThreadStack])) {
    let deadline = Instant::now() + Duration::from_secs(seconds);
    while Instant::now() < deadline {
        if let Ok(stacks) = target.read_stacks() {
            each(&stacks);
        }
        std::thread::sleep(Duration::from_millis(10));
    }
}

fn named<'a>(stacks: &'a [ThreadStack], prefix: &str) -> impl Iterator<Item = &'a ThreadStack> {
    let prefix = prefix.to_owned();
    stacks.iter().filter(move |s| {
        s.thread
            .name
            .as_deref()
            .is_some_and(|n| n.starts_with(&prefix))
    })
}

fn has_native(stack: &ThreadStack, part: &str) -> bool {
    stack
        .frames
        .iter()
        .any(|f| f.native && f.function.contains(part))
}

fn has_python(stack: &ThreadStack, function: &str) -> bool {
    stack
        .frames
        .iter()
        .any(|f| !f.native && &*f.function == function)
}

/// Every other sample unwinds the kept threads anyway: a kept stack must never differ from
/// the fresh unwind of the same instant. On every version our reader reads with `--native`
/// (3.11's frames and the entry shims of 3.12 on).
#[test]
fn kept_native_stacks_match_a_fresh_unwind() {
    let _serial = crate::common::serial();
    for python in crate::common::pythons() {
        // The waker changes its wait about as often as it is sampled: a kept stack taken just
        // before a change is then often checked just after it.
        let fixture = start_fixture(&python, "3", "0.012");
        let mut target = attach_native(fixture.ready_pid(), true);
        if target.reader() != "stackscope" {
            eprintln!("{python}: skipped: not read by our reader with --native");
            continue;
        }
        sample(&mut target, 3, |_| {});
        let stats = target.idle_audit().expect("our reader").native;
        eprintln!("{python}: {stats:?}");
        // Sleepers and the main thread are kept between audits; the busy thread never is.
        assert!(stats.kept > 0, "{python}: {stats:?}");
        assert!(
            stats.audited >= 40,
            "{python}: too few audited kept stacks: {stats:?}"
        );
        assert_eq!(
            stats.audit_differed, 0,
            "{python}: kept stacks that a fresh unwind contradicts: {stats:?}"
        );
    }
}

/// Without the audit: the sleepers are not stopped, yet every sample shows them in the C
/// library's sleep below their Python frames; the waker shows whichever wait it is in.
#[test]
fn kept_native_stacks_show_the_c_frames_of_threads_not_stopped() {
    let _serial = crate::common::serial();
    let fixture = start_fixture("python3", "3", "0.03");
    let mut target = attach_native(fixture.ready_pid(), false);
    if target.reader() != "stackscope" {
        eprintln!("skipped: python3 is not read by our reader with --native");
        return;
    }
    let (mut sleepers, mut in_c_sleep) = (0u64, 0u64);
    let (mut waker_sleep, mut waker_select) = (0u64, 0u64);
    sample(&mut target, 3, |stacks| {
        for s in named(stacks, "nk-sleeper-") {
            sleepers += 1;
            if has_python(s, "sleep_forever") && has_native(s, "nanosleep") {
                in_c_sleep += 1;
            }
        }
        for s in named(stacks, "nk-waker") {
            waker_sleep += u64::from(has_native(s, "nanosleep"));
            waker_select += u64::from(has_native(s, "select"));
        }
    });
    let stats = target.idle_audit().expect("our reader").native;
    eprintln!(
        "{stats:?}; sleepers {in_c_sleep} of {sleepers}; waker {waker_sleep} / {waker_select}"
    );
    assert!(sleepers >= 150, "too few samples: {sleepers}");
    assert_eq!(in_c_sleep, sleepers, "sleepers shown without their C sleep");
    // Most sleeper samples are kept, not unwound: 3 sleepers, the main thread and the
    // waker between its wake-ups, against the busy thread's unwind every sample.
    assert!(stats.kept >= stats.unwound, "{stats:?}");
    // Both of the waker's waits are seen: its kept stack follows it from one to the other.
    assert!(
        waker_sleep > 0 && waker_select > 0,
        "waker: {waker_sleep} in sleep, {waker_select} in select"
    );
}
