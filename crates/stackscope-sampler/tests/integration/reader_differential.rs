//! Our stack reader against py-spy's, on the same stopped processes: every thread must read
//! the same (function, file, line) frames, thread ids, names and GIL holder.
//!
//! Each fixture is stopped by the test itself (a ptrace stop of every thread, the way py-spy
//! stops a process), both readers read it, and it is resumed; several times, so that spinning
//! threads are caught at different instructions. Run against every interpreter the fast
//! reader reads that is installed here: `python3` and each of 3.10 to 3.15 (pyenv's, else 3.14
//! and 3.15 from the Debian unstable root of `scripts/sid-root`).

use std::time::Duration;

use py_spy::config::{Config, LineNo, LockingStrategy};
use py_spy::PythonSpy;
use stackscope_sampler::{IdleAudit, PythonTarget, TargetOptions};

use crate::common;
use common::{pythons, Fixture};

type Thread = (
    u64,
    Option<String>,
    Option<u64>,
    bool,
    Vec<(String, String, u32)>,
);

fn ours(target: &mut PythonTarget) -> Vec<Thread> {
    let mut threads: Vec<Thread> = target
        .read_stacks()
        .expect("our reader reads the stopped process")
        .into_iter()
        .map(|s| {
            let frames = s
                .frames
                .iter()
                .map(|f| (f.function.to_string(), f.file.to_string(), f.line))
                .collect();
            (
                s.thread.python_thread_id,
                s.thread.name.as_deref().map(str::to_owned),
                s.thread.os_thread_id,
                s.thread.owns_gil,
                frames,
            )
        })
        .collect();
    threads.sort_by_key(|t| t.0);
    threads
}

fn theirs(spy: &mut PythonSpy) -> Vec<Thread> {
    let mut threads: Vec<Thread> = spy
        .get_stack_traces()
        .expect("py-spy reads the stopped process")
        .into_iter()
        .map(|t| {
            let frames = t
                .frames
                .iter()
                .map(|f| {
                    let file = f
                        .short_filename
                        .clone()
                        .unwrap_or_else(|| f.filename.clone());
                    (f.name.clone(), file, u32::try_from(f.line).unwrap_or(0))
                })
                .collect();
            (
                t.thread_id,
                t.thread_name,
                t.os_thread_id,
                t.owns_gil,
                frames,
            )
        })
        .collect();
    threads.sort_by_key(|t| t.0);
    threads
}

/// Stops the fixture `rounds` times and compares both readers each time; answers every
/// reading, for fixture-specific checks.
/// Compares the readers `rounds` times; answers our readings and our reader's counters.
fn compare(python: &str, code: &str, rounds: usize) -> (Vec<Vec<Thread>>, IdleAudit) {
    let fixture = Fixture::start_code(python, code);
    let config = Config {
        // The test holds the stop itself.
        blocking: LockingStrategy::NonBlocking,
        lineno: LineNo::LastInstruction,
        collect_thread_names: true,
        ..Config::default()
    };
    let mut spy = PythonSpy::new(fixture.pid as py_spy::Pid, &config).expect("py-spy attaches");
    let mut target = PythonTarget::attach(fixture.pid, &TargetOptions::default()).expect("attach");
    assert_eq!(
        target.reader(),
        "stackscope",
        "{python} ({}) must be read by our own reader",
        target.python_version()
    );
    eprintln!("comparing on {python} (Python {})", target.python_version());
    let process = remoteprocess::Process::new(fixture.pid as remoteprocess::Pid).expect("open");
    let mut readings = Vec::new();
    for round in 0..rounds {
        // A read while it runs first, as a recording reads: sleeping threads read as asleep
        // there, so that in the stopped read after it (within 100 ms) the reader takes them
        // as still and reads only what proves they did not move.
        let _ = target.read_stacks();
        let stop = process.lock().expect("stop the fixture");
        let a = ours(&mut target);
        let b = theirs(&mut spy);
        drop(stop);
        assert_eq!(a.len(), b.len(), "{python} round {round}: thread count");
        for (x, y) in a.iter().zip(&b) {
            // py-spy (without its unwinder) has no OS thread id for 3.10 and older; ours
            // must then be one of the process's threads.
            let mut y = y.clone();
            if y.2.is_none() {
                let tid = x.2.expect("our reader finds the OS thread id");
                assert!(
                    std::path::Path::new(&format!("/proc/{}/task/{tid}", fixture.pid)).exists(),
                    "{python}: {tid} is not a thread of the fixture"
                );
                y.2 = x.2;
            }
            assert_eq!(x, &y, "{python} round {round}: thread {:#x} differs", x.0);
        }
        readings.push(a);
        std::thread::sleep(Duration::from_millis(30));
    }
    let audit = target.idle_audit().expect("our reader");
    eprintln!("{python}: {audit:?}");
    (readings, audit)
}

const SHAPES: &str = r#"
import asyncio, os, sys, threading, time

N = 13
ready = threading.Barrier(N + 1)

def spin():
    x = 0
    while True:
        x += 1

def idle():
    while True:
        time.sleep(0.01)

def deep(n):
    if n == 0:
        ready.wait()
        idle()
    return deep(n - 1)

def deep_spin(n):
    if n == 0:
        ready.wait()
        spin()
    return deep_spin(n - 1)

class Outer:
    class Inner:
        def method(self):
            ready.wait()
            idle()

    @classmethod
    def klass(cls):
        ready.wait()
        spin()

def inner_gen():
    ready.wait()
    while True:
        time.sleep(0.01)
        yield 1

def gen():
    yield from inner_gen()

def consume():
    for _ in gen():
        pass

async def coro_leaf():
    ready.wait()
    idle()

async def coro_mid():
    await coro_leaf()

def run_async():
    asyncio.run(coro_mid())

def grüße():
    ready.wait()
    idle()

def 関数():
    ready.wait()
    idle()

def closure():
    def inner():
        return [(ready.wait(), idle()) for _ in range(1)]
    return inner()

def key_func(x):
    ready.wait()
    idle()

def via_c():
    sorted([1], key=key_func)

class Init:
    def __init__(self):
        ready.wait()
        idle()

exec(compile("def from_exec():\n    ready.wait()\n    idle()\n", "<generated>", "exec"))

targets = [
    (lambda: deep(700), "deep"),
    (lambda: deep_spin(40), "deep-spin"),
    (lambda: Outer.Inner().method(), "method"),
    (Outer.klass, "classmethod"),
    (consume, "generator"),
    (run_async, "coroutine"),
    (grüße, "latin"),
    (関数, "wide"),
    (closure, "closure"),
    (via_c, "via-c"),
    (Init, "init"),
    (from_exec, "exec"),
    (lambda: (ready.wait(), spin()), "lambda"),
]
assert len(targets) == N
for fn, name in targets:
    threading.Thread(target=fn, name=name, daemon=True).start()
ready.wait()
time.sleep(0.3)
print("ready", os.getpid(), flush=True)
while True:
    time.sleep(1)
"#;

#[test]
fn both_readers_agree_on_every_shape_of_stack() {
    for python in pythons() {
        let threads = compare(&python, SHAPES, 8).0.pop().expect("a reading");
        // Before 3.11 code objects have no qualified name: the last part is the name.
        let has = |thread: &str, function: &str| {
            let name = function.rsplit('.').next().unwrap_or(function);
            threads.iter().any(|t| {
                t.1.as_deref() == Some(thread) && t.4.iter().any(|f| f.0 == function || f.0 == name)
            })
        };
        assert!(has("method", "Outer.Inner.method"), "{python}");
        assert!(has("classmethod", "Outer.klass"), "{python}");
        assert!(has("generator", "inner_gen"), "{python}");
        assert!(has("coroutine", "coro_leaf"), "{python}");
        assert!(has("latin", "grüße"), "{python}");
        assert!(has("wide", "関数"), "{python}");
        assert!(has("closure", "closure.<locals>.inner"), "{python}");
        assert!(has("via-c", "key_func"), "{python}");
        assert!(has("init", "Init.__init__"), "{python}");
        assert!(has("exec", "from_exec"), "{python}");
        let deep = threads
            .iter()
            .find(|t| t.1.as_deref() == Some("deep"))
            .expect("deep thread");
        assert!(deep.4.len() > 700, "{python}: {} frames", deep.4.len());
    }
}

const MANY: &str = r#"
import os, threading, time

N = 63
ready = threading.Barrier(N + 1)
stop = threading.Event()

def level(n, spin):
    if n == 0:
        ready.wait()
        if spin:
            x = 0
            while True:
                x += 1
        stop.wait()
    return level(n - 1, spin)

for i in range(N):
    threading.Thread(target=level, args=(i % 9, i % 12 == 0), name=f"w{i}", daemon=True).start()
ready.wait()
time.sleep(0.3)
print("ready", os.getpid(), flush=True)
stop.wait()
"#;

#[test]
fn both_readers_agree_on_many_threads() {
    for python in pythons() {
        let (mut readings, audit) = compare(&python, MANY, 6);
        let threads = readings.pop().expect("a reading");
        // 64 threads: most asleep, whose OS states and stacks the reader reuses.
        assert_eq!(threads.len(), 64, "{python}");
        assert!(
            audit.unchanged > 0,
            "{python}: no still thread was read for its proof alone: {audit:?}"
        );
        assert!(
            threads.iter().filter(|t| t.3).count() <= 1,
            "{python}: one GIL holder"
        );
    }
}

/// Code made at run time, over and over: code objects are freed and new ones take their
/// addresses, with other names, files and lines. The cache must notice every time.
const CODE_CHURN: &str = r#"
import os, threading, time

ready = threading.Event()

def churn():
    i = 0
    while True:
        src = "\n" * (i % 5) + (
            "def gen_%d(n):\n"
            "    total = 0\n"
            "    for k in range(n):\n"
            "        total += k\n"
            "    return total\n" % (i % 13)
        )
        ns = {}
        exec(compile(src, "<gen-%d>" % (i % 7), "exec"), ns)
        ns["gen_%d" % (i % 13)](5000)
        i += 1
        if i == 100:
            ready.set()

threading.Thread(target=churn, name="churn", daemon=True).start()
ready.wait()
print("ready", os.getpid(), flush=True)
while True:
    time.sleep(1)
"#;

#[test]
fn both_readers_agree_while_code_objects_come_and_go() {
    for python in pythons() {
        let (readings, _) = compare(&python, CODE_CHURN, 40);
        // The thread was caught inside the generated functions, not only between them.
        let inside = readings
            .iter()
            .flatten()
            .filter(|t| t.1.as_deref() == Some("churn"))
            .filter(|t| t.4.iter().any(|f| f.0.starts_with("gen_")))
            .count();
        assert!(
            inside >= 5,
            "{python}: caught inside generated code {inside} times"
        );
    }
}

/// Code made at run time, one function at a time: each freed before the next is made, which
/// then most often takes the freed object's address, under another name and file. The
/// thread waits inside each while it is read.
const CODE_AT_ONE_ADDRESS: &str = r#"
import os, sys

def hold():
    sys.stdin.readline()

def make(i):
    ns = {"hold": hold}
    src = "\n" * (i % 3) + "def gen_%d():\n    hold()\n" % (i % 10)
    exec(compile(src, "<gen-%d>" % i, "exec"), ns)
    # Popped: a function left in its own globals is a cycle, freed only by the collector.
    return ns.pop("gen_%d" % (i % 10))

print("ready", os.getpid(), flush=True)
i = 0
while True:
    f = make(i)
    print("in", i, id(f.__code__), flush=True)
    f()
    del f
    i += 1
"#;

/// The generated frame on the main thread's stack, once the thread is in it.
fn generated_frame(target: &mut PythonTarget) -> (String, String, u32) {
    let deadline = std::time::Instant::now() + Duration::from_secs(5);
    loop {
        let stacks = target.read_stacks().expect("our reader reads the fixture");
        let found = stacks.iter().flat_map(|s| s.frames.iter()).find_map(|f| {
            f.function
                .starts_with("gen_")
                .then(|| (f.function.to_string(), f.file.to_string(), f.line))
        });
        if let Some(frame) = found {
            return frame;
        }
        assert!(std::time::Instant::now() < deadline, "never inside gen_");
        std::thread::sleep(Duration::from_millis(2));
    }
}

#[test]
fn code_made_at_run_time_is_named_anew_at_a_reused_address() {
    for python in pythons() {
        let mut fixture = Fixture::code(CODE_AT_ONE_ADDRESS)
            .python(&python)
            .stdin()
            .start();
        let mut target =
            PythonTarget::attach(fixture.pid, &TargetOptions::default()).expect("attach");
        let mut addresses = std::collections::HashSet::new();
        let mut reused = 0;
        for _ in 0..12 {
            let line = fixture.read_line(Duration::from_secs(10));
            let words: Vec<&str> = line.split_whitespace().collect();
            let (i, address): (usize, u64) = match words.as_slice() {
                ["in", i, a] => (i.parse().expect("i"), a.parse().expect("address")),
                _ => panic!("{python}: unexpected line {line:?}"),
            };
            reused += usize::from(!addresses.insert(address));
            // Read twice: the second read finds the code object known and found good.
            for _ in 0..2 {
                let (function, file, line) = generated_frame(&mut target);
                let want = (
                    format!("gen_{}", i % 10),
                    format!("<gen-{i}>"),
                    2 + (i % 3) as u32,
                );
                assert_eq!((function, file, line), want, "{python}: function {i}");
            }
            fixture.send("next");
        }
        // Else this test would not test what it says.
        assert!(
            reused >= 3,
            "{python}: an address was reused {reused} times of 12"
        );
    }
}
