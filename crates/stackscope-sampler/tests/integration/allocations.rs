//! What a steady sample allocates: after a 10 ms sleep every allocation is a cold walk through
//! the allocator's lists, so the reader keeps its scratch between samples and a steady sample
//! of one busy thread allocates little beyond what it hands over (docs/performance.md, "Cold
//! code"). A counting allocator counts the allocations of the calling thread only: the test
//! harness's other threads do not disturb the count.

use std::alloc::{GlobalAlloc, Layout, System};
use std::cell::Cell;
use std::time::{Duration, Instant};

use stackscope_sampler::{PythonTarget, SampleTimer, TargetOptions};

use crate::common::{pythons, Fixture};

struct Counting;

thread_local! {
    static ALLOCATIONS: Cell<u64> = const { Cell::new(0) };
}

// SAFETY: every call is passed to `System` as it came; the count is a thread-local `Cell`,
// which neither allocates nor blocks.
unsafe impl GlobalAlloc for Counting {
    unsafe fn alloc(&self, layout: Layout) -> *mut u8 {
        count();
        unsafe { System.alloc(layout) }
    }

    unsafe fn alloc_zeroed(&self, layout: Layout) -> *mut u8 {
        count();
        unsafe { System.alloc_zeroed(layout) }
    }

    unsafe fn realloc(&self, ptr: *mut u8, layout: Layout, new_size: usize) -> *mut u8 {
        count();
        unsafe { System.realloc(ptr, layout, new_size) }
    }

    unsafe fn dealloc(&self, ptr: *mut u8, layout: Layout) {
        unsafe { System.dealloc(ptr, layout) }
    }
}

fn count() {
    // A thread being torn down has no locals left; its allocations are not ours to count.
    let _ = ALLOCATIONS.try_with(|n| n.set(n.get() + 1));
}

fn allocations() -> u64 {
    ALLOCATIONS.with(Cell::get)
}

#[global_allocator]
static COUNTING: Counting = Counting;

/// One thread spinning 25 calls deep, two asleep, the main thread waiting: the 1-busy target
/// of `scripts/bench-overhead`.
const ONE_BUSY: &str = r#"
import threading, time
def leaf():
    x = 0
    for i in range(100):
        x += i
    return x
def deep(n):
    if n == 0:
        while True:
            leaf()
    return deep(n - 1)
def sleeper():
    while True:
        time.sleep(1)
threading.Thread(target=deep, args=(25,), name="busy", daemon=True).start()
for i in range(2):
    threading.Thread(target=sleeper, name="sleeper-%d" % i, daemon=True).start()
time.sleep(0.2)
print("ready", flush=True)
while True:
    time.sleep(1)
"#;

/// Allocations a steady sample may make, by the interpreter's minor version: the two lists of
/// threads it hands over (the reader's, and the target's) and the read's answer (each
/// thread's state and outcome). The read's plan, code identities, walks, names and frames are
/// filled in lists kept from the sample before; a stack the thread had before is handed over
/// again, not built anew. From 3.12 a thread's first frame lies outside its chunk (on the C
/// stack, or in the thread state): its range is planned, copied and remembered, three lists
/// more. 3.10's frames are objects of their own, read in rounds of a batch each.
fn most_per_sample(minor: u32) -> u64 {
    match minor {
        10 => 32,
        11 => 4,
        _ => 7,
    }
}

/// The median allocations of a steady sample of the 1-busy target run by `python`, and the
/// interpreter's minor version.
fn steady_allocations(python: &str) -> (u64, u32) {
    let fixture = Fixture::start_code(python, ONE_BUSY);
    let mut target = PythonTarget::attach(fixture.pid, &TargetOptions::default())
        .unwrap_or_else(|e| panic!("{python}: attach: {e}"));
    let minor = target
        .python_version()
        .split('.')
        .nth(1)
        .and_then(|m| m.parse().ok())
        .unwrap_or_else(|| panic!("{python}: version {}", target.python_version()));
    // At 100 Hz, as a recording reads: code objects are trusted, still threads taken on the
    // GIL's word, after the first second or so.
    let mut timer = SampleTimer::new(100.0);
    let warm_until = Instant::now() + Duration::from_secs(2);
    while timer.wait(Some(warm_until)).is_some() {
        target.read_stacks().expect("read");
    }
    let mut counts = Vec::new();
    let measure_until = Instant::now() + Duration::from_secs(1);
    while timer.wait(Some(measure_until)).is_some() {
        let before = allocations();
        let stacks = target.read_stacks().expect("read");
        counts.push(allocations() - before);
        assert!(
            stacks.iter().any(|s| s.frames.len() > 25),
            "{python}: the busy thread is not in the read"
        );
    }
    counts.sort_unstable();
    let median = counts[counts.len() / 2];
    eprintln!(
        "{python}: allocations a sample: median {median}, least {}, most {} over {} samples",
        counts[0],
        counts[counts.len() - 1],
        counts.len()
    );
    (median, minor)
}

#[test]
fn a_steady_sample_of_one_busy_thread_allocates_little_more_than_it_hands_over() {
    for python in pythons() {
        let (median, minor) = steady_allocations(&python);
        let most = most_per_sample(minor);
        assert!(
            median <= most,
            "{python}: a steady sample made {median} allocations (at most {most})"
        );
    }
}
