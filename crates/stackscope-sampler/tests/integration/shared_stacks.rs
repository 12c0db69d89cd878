//! A thread found where it was is handed on with the very stack of its last sample (one
//! shared `Frames`), so that the aggregator and the sample log tell it by a pointer instead of
//! comparing or hashing its frames: with many sleeping threads that comparison was most of
//! what a thread cost the consumer (docs/performance.md, "What a sleeping thread costs"). A
//! busy thread back at a stack it had lately is handed that stack too.

use std::collections::HashMap;
use std::sync::{Arc, MutexGuard};
use std::time::Duration;

use crate::common::Fixture;
use stackscope_event::Frames;
use stackscope_sampler::{PythonTarget, TargetOptions};

const FIXTURE: &str = include_str!("../../../../fixtures/idle_threads.py");
/// Threads of the fixture that wait for good without running any Python.
const WAITING: [&str; 4] = ["event_waiter", "queue_getter", "pipe_reader", "lock_waiter"];

/// The fixture started and attached with our reader, the serial guard first (these tests
/// count what they read, so they run alone); dropped in reverse, the guard last.
fn attached() -> (MutexGuard<'static, ()>, Fixture, PythonTarget) {
    let serial = crate::common::serial();
    let fixture = Fixture::start_code("python3", FIXTURE);
    let target = PythonTarget::attach(fixture.pid, &TargetOptions::default()).expect("attach");
    assert_eq!(target.reader(), "stackscope");
    (serial, fixture, target)
}

#[test]
fn a_waiting_thread_gets_the_same_shared_stack_each_sample() {
    let (_serial, _fixture, mut target) = attached();
    let mut last: HashMap<String, Frames> = HashMap::new();
    // Per waiting thread: (pairs of samples in a row with the same stack, of those the same
    // shared one).
    let mut pairs: HashMap<String, (u32, u32)> = HashMap::new();
    let mut reads = 0;
    while reads < 40 {
        let Ok(stacks) = target.read_stacks() else {
            continue;
        };
        reads += 1;
        for s in stacks {
            let Some(name) = s.thread.name.as_deref().filter(|n| WAITING.contains(n)) else {
                continue;
            };
            assert!(
                s.frames.iter().any(|f| f.function.contains(name)),
                "{name}: {:?}",
                s.frames
            );
            if let Some(before) = last.get(name) {
                let p = pairs.entry(name.to_owned()).or_default();
                if **before == *s.frames {
                    p.0 += 1;
                    p.1 += u32::from(Arc::ptr_eq(before, &s.frames));
                }
            }
            last.insert(name.to_owned(), s.frames);
        }
        std::thread::sleep(Duration::from_millis(10));
    }
    eprintln!("{reads} reads: {pairs:?}");
    for name in WAITING {
        let (same, shared) = pairs.get(name).copied().unwrap_or_default();
        // They never move: every pair but those around the first reads (before a thread has
        // a proof to stand on) is the same stack, and handed on shared.
        assert!(same >= 35, "{name}: {same} of 39 pairs the same stack");
        assert!(
            shared + 3 >= same,
            "{name}: {shared} of {same} same stacks shared"
        );
    }
}

#[test]
fn a_busy_thread_back_at_a_stack_it_had_gets_that_very_stack() {
    let (_serial, _fixture, mut target) = attached();
    // The spinner runs Python all the time, on two lines of one loop: each of its stacks is
    // read afresh, and is nearly always one it had before.
    let mut had: Vec<Frames> = Vec::new();
    let (mut again, mut shared, mut reads) = (0, 0, 0);
    while reads < 60 {
        let Ok(stacks) = target.read_stacks() else {
            continue;
        };
        reads += 1;
        let Some(s) = stacks
            .into_iter()
            .find(|s| s.thread.name.as_deref() == Some("spinner"))
        else {
            continue;
        };
        assert!(
            s.frames.first().is_some_and(|f| &*f.function == "spinner"),
            "{:?}",
            s.frames
        );
        match had.iter().find(|h| ***h == *s.frames) {
            Some(before) => {
                again += 1;
                shared += u32::from(Arc::ptr_eq(before, &s.frames));
            }
            None => had.push(s.frames),
        }
        std::thread::sleep(Duration::from_millis(5));
    }
    eprintln!(
        "{reads} reads, {} distinct stacks: {again} seen before, {shared} shared",
        had.len()
    );
    assert!(had.len() <= 4, "{had:?}");
    assert!(again >= 50, "{again} of {reads} stacks seen before");
    assert!(shared + 2 >= again, "{shared} of {again} shared");
}
