//! Unwinding real Python processes: a thread blocked on a lock, a deep stack, a library loaded
//! after the unwinder was made, a thread that does not exist.

mod common;

use std::time::{Duration, Instant};

use common::{eventually, Fixture};
use py_spy::config::LockingStrategy;
use py_spy::{Config, PythonSpy};
use stackscope_native::{merge, NativeError, NativeFrame, NativeStack, NativeUnwinder};

const PATIENCE: Duration = Duration::from_secs(20);

fn spy(pid: u32) -> PythonSpy {
    let config = Config {
        // The test stops the process itself, for the native unwind and this read together.
        blocking: LockingStrategy::NonBlocking,
        ..Config::default()
    };
    eventually(PATIENCE, || {
        PythonSpy::new(pid as py_spy::Pid, &config).ok()
    })
    .expect("py-spy finds the interpreter")
}

/// Stops the whole process from this thread, unwinds `tid` and reads its Python frames, and
/// resumes the process (the lock's Drop) before returning, panicking or not.
fn sample(
    pid: u32,
    unwinder: &mut NativeUnwinder,
    spy: &mut PythonSpy,
    tid: u32,
) -> (NativeStack, Vec<py_spy::Frame>) {
    let process = remoteprocess::Process::new(pid as remoteprocess::Pid).expect("process");
    let _stopped = process.lock().expect("stop the process");
    let native = unwinder.unwind(tid).expect("unwind");
    let traces = spy.get_stack_traces().expect("python stacks");
    let python = traces
        .into_iter()
        .find(|t| t.os_thread_id == Some(u64::from(tid)))
        .map(|t| t.frames)
        .unwrap_or_default();
    (native, python)
}

fn has_function(frames: &[NativeFrame], names: &[&str]) -> Option<usize> {
    frames.iter().position(|f| {
        f.function
            .as_deref()
            .is_some_and(|name| names.iter().any(|n| name.contains(n)))
    })
}

const CPYTHON_LOCK: &[&str] = &["PyThread_acquire_lock_timed", "lock_PyThread_acquire_lock"];
/// The libc side of a lock wait (names where libc has symbols for them).
const LIBC_WAIT: &[&str] = &[
    "futex",
    "sem_wait",
    "sem_clockwait",
    "sem_timedwait",
    "pthread_cond",
];

fn describe(native: &NativeStack) -> String {
    let mut text: Vec<String> = native.frames.iter().map(NativeFrame::label).collect();
    if let Some(why) = &native.truncated {
        text.push(format!("(truncated: {why})"));
    }
    text.join("\n  ")
}

/// Whether the innermost native frames of `native` are a libc wait under CPython's lock code.
fn waits_on_lock(native: &NativeStack) -> bool {
    let Some(lock) = has_function(&native.frames, CPYTHON_LOCK) else {
        return false;
    };
    native.frames[..lock].iter().any(|f| {
        f.module_name().starts_with("libc")
            && (f.function.is_none() || has_function(std::slice::from_ref(f), LIBC_WAIT).is_some())
    })
}

#[test]
fn a_lock_wait_shows_its_native_frames_under_the_python_frames() {
    let fixture = Fixture::start();
    let mut unwinder = NativeUnwinder::new(fixture.pid).expect("unwinder");
    let mut spy = spy(fixture.pid);

    let (native, python) = eventually(PATIENCE, || {
        let (native, python) = sample(fixture.pid, &mut unwinder, &mut spy, fixture.blocked_tid);
        (waits_on_lock(&native) && !python.is_empty()).then_some((native, python))
    })
    .expect("the blocked thread is seen waiting on the lock");
    assert!(!fixture.is_stopped_or_traced(), "the process was resumed");

    let stack = describe(&native);
    let wait = has_function(&native.frames, LIBC_WAIT);
    let lock = has_function(&native.frames, CPYTHON_LOCK).expect("CPython lock frame");
    assert!(
        wait.is_some_and(|w| w < lock) || native.frames[0].module_name().starts_with("libc"),
        "a libc wait innermost:\n  {stack}"
    );
    assert!(
        has_function(&native.frames, &["_PyEval_EvalFrameDefault"]).is_some(),
        "the evaluation loop is reached:\n  {stack}"
    );
    assert!(
        native.truncated.is_none(),
        "unwound to the thread's start:\n  {stack}"
    );

    let merged = merge(&python, &native.frames);
    let labels: Vec<String> = merged.frames.iter().map(|f| f.label()).collect();
    let position = |name: &str| {
        merged
            .frames
            .iter()
            .position(|f| !f.native && f.function.as_ref() == name)
            .unwrap_or_else(|| panic!("{name} in the merged stack:\n  {}", labels.join("\n  ")))
    };
    let caller = position("wait_for_lock");
    let native_lock = merged
        .frames
        .iter()
        .position(|f| f.native && CPYTHON_LOCK.iter().any(|n| f.function.as_ref() == *n))
        .expect("the CPython lock frame survives the merge");
    assert_eq!(labels.len(), merged.frames.len());
    assert!(
        merged.frames[..caller].iter().all(|f| f.native) && native_lock < caller,
        "the native wait is under (inner of) the Python caller:\n  {}",
        labels.join("\n  ")
    );
    assert!(merged.frames[0].native, "innermost is native");
    assert!(
        caller < position("worker") && position("worker") < position("Thread.run"),
        "Python frames in call order:\n  {}",
        labels.join("\n  ")
    );
    assert!(merged.aligned, "{}", labels.join("\n  "));
    assert!(
        !merged
            .frames
            .iter()
            .any(|f| f.native && f.function.as_ref() == "_PyEval_EvalFrameDefault"),
        "evaluation loops are replaced by Python frames"
    );
    eprintln!(
        "merged stack of the blocked thread:\n  {}",
        labels.join("\n  ")
    );
}

#[test]
fn a_thread_that_does_not_exist_is_a_clear_error() {
    let fixture = Fixture::start();
    let mut unwinder = NativeUnwinder::new(fixture.pid).expect("unwinder");
    let missing = 0x3fff_fff0;
    let err = unwinder.unwind(missing).expect_err("no such thread");
    assert!(
        matches!(err, NativeError::ThreadGone { tid, .. } if tid == missing),
        "{err}"
    );
    assert!(err.to_string().contains("gone"), "{err}");

    // A real thread that nobody stopped: the caller forgot to stop it.
    let err = unwinder
        .unwind(fixture.blocked_tid)
        .expect_err("not stopped");
    assert!(matches!(err, NativeError::NotStopped { .. }), "{err}");
    assert!(!fixture.is_stopped_or_traced());
}

#[test]
fn a_second_unwind_reuses_modules_and_symbols() {
    let fixture = Fixture::start();
    let mut unwinder = NativeUnwinder::new(fixture.pid).expect("unwinder");
    let mut spy = spy(fixture.pid);
    eventually(PATIENCE, || {
        let (native, _) = sample(fixture.pid, &mut unwinder, &mut spy, fixture.blocked_tid);
        waits_on_lock(&native).then_some(())
    })
    .expect("the blocked thread waits");

    // Twice in one stop, so that the thread cannot move in between.
    let process = remoteprocess::Process::new(fixture.pid as remoteprocess::Pid).expect("process");
    let stopped = process.lock().expect("stop");
    let first = unwinder.unwind(fixture.blocked_tid).expect("unwind");
    let before = unwinder.stats();
    let second = unwinder.unwind(fixture.blocked_tid).expect("unwind");
    let after = unwinder.stats();
    drop(stopped);

    assert_eq!(second.frames, first.frames);
    assert_eq!(
        after.images_loaded, before.images_loaded,
        "no module reloaded"
    );
    assert_eq!(after.map_reads, before.map_reads, "the map is not re-read");
    assert_eq!(
        after.symbolized, before.symbolized,
        "every address came from the cache"
    );
    assert_eq!(after.unwinds, before.unwinds + 1);
    assert!(
        after.stack_reads - before.stack_reads <= 1,
        "one read of the stack: {} reads",
        after.stack_reads - before.stack_reads
    );
    assert!(!fixture.is_stopped_or_traced());
}

#[test]
fn a_library_loaded_later_is_found_and_symbolized() {
    let mut fixture = Fixture::start();
    let mut unwinder = NativeUnwinder::new(fixture.pid).expect("unwinder");
    let mut spy = spy(fixture.pid);
    let loaded_before = unwinder.stats().images_loaded;
    fixture.send("select");
    assert_eq!(fixture.read_line().trim(), "selecting");

    let main_tid = fixture.pid;
    let (native, python) = eventually(PATIENCE, || {
        let (native, python) = sample(fixture.pid, &mut unwinder, &mut spy, main_tid);
        native
            .frames
            .iter()
            .any(|f| f.module_name().starts_with("select."))
            .then_some((native, python))
    })
    .expect("the main thread waits in select.select");
    assert!(
        unwinder.stats().images_loaded > loaded_before,
        "select's library loaded"
    );
    let stack = describe(&native);
    assert!(
        has_function(&native.frames, &["select_select"]).is_some(),
        "the extension's function is named:\n  {stack}"
    );
    let merged = merge(&python, &native.frames);
    let labels: Vec<String> = merged.frames.iter().map(|f| f.label()).collect();
    let select = labels.iter().position(|l| l.starts_with("select_select"));
    let caller = labels.iter().position(|l| l.starts_with("wait_in_select "));
    assert!(
        select.is_some() && caller.is_some() && select < caller,
        "the extension frame under its Python caller:\n  {}",
        labels.join("\n  ")
    );
}

#[test]
fn every_reentry_of_the_evaluation_loop_gets_its_own_python_frames() {
    let fixture = Fixture::start();
    let mut unwinder = NativeUnwinder::new(fixture.pid).expect("unwinder");
    let mut spy = spy(fixture.pid);
    let (native, python) = eventually(PATIENCE, || {
        let (native, python) = sample(fixture.pid, &mut unwinder, &mut spy, fixture.deep_tid);
        (waits_on_lock(&native) && !python.is_empty()).then_some((native, python))
    })
    .expect("the deep thread waits");
    let evals = native
        .frames
        .iter()
        .filter(|f| f.function.as_deref() == Some("_PyEval_EvalFrameDefault"))
        .count();
    // The thread's bootstrap (`_bootstrap` .. `run`) in one loop; `run` calls deep(6) with
    // `*args`, through C (`do_call_core`), so another; deep(5) .. deep(0) are called back
    // from C by `map()`, one loop each.
    assert_eq!(evals, 8, "{}", describe(&native));
    let merged = merge(&python, &native.frames);
    let labels: Vec<String> = merged.frames.iter().map(|f| f.label()).collect();
    assert!(merged.aligned, "{}", labels.join("\n  "));
    let python_names: Vec<&str> = merged
        .frames
        .iter()
        .filter(|f| !f.native)
        .map(|f| f.function.as_ref())
        .collect();
    let expected: Vec<&str> = python.iter().map(|f| f.name.as_str()).collect();
    assert_eq!(python_names, expected, "every Python frame once, in order");
    assert_eq!(python_names.iter().filter(|n| **n == "deep").count(), 7);
    assert!(merged.frames[0].native);
    eprintln!(
        "merged stack of the deep thread:\n  {}",
        labels.join("\n  ")
    );
}

#[test]
fn unwind_cost_of_a_deep_stack() {
    let fixture = Fixture::start();
    let mut unwinder = NativeUnwinder::new(fixture.pid).expect("unwinder");
    let mut spy = spy(fixture.pid);
    eventually(PATIENCE, || {
        let (native, _) = sample(fixture.pid, &mut unwinder, &mut spy, fixture.deep_tid);
        waits_on_lock(&native).then_some(())
    })
    .expect("the deep thread waits");

    let process = remoteprocess::Process::new(fixture.pid as remoteprocess::Pid).expect("process");
    let stopped = process.lock().expect("stop");
    let rounds = 200;
    let start = Instant::now();
    let mut frames = 0;
    for _ in 0..rounds {
        frames = unwinder
            .unwind(fixture.deep_tid)
            .expect("unwind")
            .frames
            .len();
    }
    let warm = start.elapsed() / rounds;
    let reads_before = unwinder.stats().stack_reads;
    unwinder.unwind(fixture.deep_tid).expect("unwind");
    let reads = unwinder.stats().stack_reads - reads_before;
    let start = Instant::now();
    for _ in 0..rounds {
        unwinder.registers(fixture.deep_tid).expect("registers");
    }
    let registers = start.elapsed() / rounds;
    drop(stopped);
    assert!(!fixture.is_stopped_or_traced());

    // A cold unwinder: module map, images, symbols all read afresh.
    let start = Instant::now();
    let mut cold_unwinder = NativeUnwinder::new(fixture.pid).expect("unwinder");
    let made = start.elapsed();
    let stopped = process.lock().expect("stop");
    let start = Instant::now();
    let cold_frames = cold_unwinder
        .unwind(fixture.deep_tid)
        .expect("unwind")
        .frames
        .len();
    let first = start.elapsed();
    // The shallower thread, for a stack of about thirty frames.
    let start = Instant::now();
    let mut shallow_frames = 0;
    for _ in 0..rounds {
        shallow_frames = unwinder
            .unwind(fixture.blocked_tid)
            .expect("unwind")
            .frames
            .len();
    }
    let shallow = start.elapsed() / rounds;
    drop(stopped);

    assert!(frames >= 25, "a deep stack: {frames} frames");
    assert_eq!(cold_frames, frames);
    eprintln!(
        "unwind of {frames} native frames: {warm:?} warm (cached; of which reading the \
         registers {registers:?}; {reads} stack read(s)); {shallow_frames} frames: {shallow:?} \
         warm; cold: new unwinder (map, images) {made:?}, first unwind (symbols) {first:?}"
    );
    assert!(
        warm < Duration::from_millis(50),
        "warm unwind took {warm:?}"
    );
}
