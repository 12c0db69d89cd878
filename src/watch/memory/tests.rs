use super::*;
use stackscope_event::{FileOrigin, MemorySample, ThreadInfo};

const SEC: u64 = 1_000_000_000;
const MS: u64 = 1_000_000;

fn reading(pid: u32, nanos: u64, rss: u64) -> Event {
    Event::Memory(MemorySample {
        time: Timestamp(nanos),
        pid,
        rss_bytes: rss,
        ..MemorySample::default()
    })
}

fn stack(active: bool, frames: &[(&str, u32)]) -> ThreadStack {
    stack_in("job.py", active, frames)
}

fn stack_in(file: &str, active: bool, frames: &[(&str, u32)]) -> ThreadStack {
    ThreadStack {
        thread: ThreadInfo {
            os_thread_id: Some(1),
            python_thread_id: 1,
            name: None,
            active,
            owns_gil: active,
        },
        ns_thread_id: None,
        frames: frames
            .iter()
            .map(|&(function, line)| Frame::python(function, file, line))
            .collect(),
        raw: None,
    }
}

/// Readings every 100 ms for `secs` from `start`, `rss(t)` bytes at `t` seconds.
fn readings(
    history: &mut MemoryHistory,
    pid: u32,
    start: u64,
    secs: u64,
    rss: impl Fn(f64) -> u64,
) {
    for i in 0..secs * 10 {
        let t = start + i * 100 * MS;
        history.observe(&reading(pid, t, rss((t - start) as f64 / 1e9)));
    }
}

#[test]
fn a_steady_climb_gives_its_readings_rate_and_function() {
    let mut history = MemoryHistory::default();
    readings(&mut history, 7, SEC, 8, |t| 10_000_000 + (t * 50e6) as u64);
    // Three reads a second: the main thread in grow_cache (on one line or the other), a helper
    // thread asleep, which does not count while another works.
    for i in 0..24u64 {
        let line = if i % 3 == 0 { 11 } else { 12 };
        let stacks = [
            stack(true, &[("grow_cache", line), ("main", 40)]),
            stack(false, &[("wait", 3), ("run", 9)]),
        ];
        history.read(7, Timestamp(SEC + i * 333 * MS), &stacks);
    }
    history.vanished(7);
    let climb = history.climb(7).expect("a climb");
    assert_eq!(climb.rss_first, 10_000_000);
    assert_eq!(climb.rss_last, 10_000_000 + (7.9 * 50e6) as u64);
    assert_eq!(climb.rss_peak, climb.rss_last);
    assert_eq!(climb.secs, 7.9);
    assert_eq!(climb.climb_from_secs, 0.0);
    assert!((climb.growth_bytes_per_s - 50e6).abs() < 1e4, "{climb:?}");
    assert_eq!(climb.readings.len(), REPORT_POINTS);
    assert_eq!(climb.readings[0], (0.0, 10_000_000));
    assert_eq!(climb.readings.last(), Some(&(7.9, climb.rss_last)));
    assert_eq!(
        climb.ran,
        vec![Ran {
            function: "grow_cache (job.py:12)".into(),
            share: 1.0
        }]
    );
    let json = serde_json::to_value(&climb).expect("json");
    assert_eq!(json["readings"][0], serde_json::json!([0.0, 10_000_000]));
    assert_eq!(json["ran"][0]["function"], "grow_cache (job.py:12)");
    assert_eq!(
        climb.sentence(),
        "10 MB → 405 MB (peak 405 MB) over 7.9 s, 50 MB/s over the last 7.9 s, while it ran \
         grow_cache (job.py:12) 100%"
    );
}

#[test]
fn growth_is_charged_to_what_ran_while_memory_grew_not_before() {
    let mut history = MemoryHistory::default();
    // Flat for 4 s in `serve`, then 1 s of growth in `load_all`: the reads of `serve` outnumber
    // those of `load_all` four to one, and get none of the growth.
    readings(&mut history, 3, 0, 5, |t| {
        if t < 4.0 {
            100_000_000
        } else {
            100_000_000 + ((t - 4.0) * 200e6) as u64
        }
    });
    for i in 0..10u64 {
        let function = if i < 8 { "serve" } else { "load_all" };
        history.read(
            3,
            Timestamp(i * 500 * MS + 250 * MS),
            &[stack(true, &[(function, 5)])],
        );
    }
    let climb = history.climb(3).expect("a climb");
    assert_eq!(climb.ran[0].function, "load_all (job.py:5)");
    assert!(climb.ran[0].share > 0.9, "{:?}", climb.ran);
    // Where nothing grew, what ran by the reads.
    let mut flat = MemoryHistory::default();
    readings(&mut flat, 4, 0, 2, |_| 50_000_000);
    flat.read(4, Timestamp(500 * MS), &[stack(false, &[("sleep_a", 1)])]);
    flat.read(4, Timestamp(SEC), &[stack(false, &[("sleep_a", 1)])]);
    flat.read(4, Timestamp(1500 * MS), &[stack(false, &[("sleep_b", 1)])]);
    let climb = flat.climb(4).expect("a climb");
    assert_eq!(climb.growth_bytes_per_s, 0.0);
    let shares: Vec<(&str, f64)> = climb
        .ran
        .iter()
        .map(|r| (&r.function[..], r.share))
        .collect();
    assert_eq!(
        shares,
        vec![("sleep_a (job.py:1)", 0.667), ("sleep_b (job.py:1)", 0.333)]
    );
}

#[test]
fn one_reading_is_no_climb() {
    let mut history = MemoryHistory::default();
    assert!(history.climb(1).is_none());
    history.observe(&reading(1, SEC, 5));
    assert!(history.climb(1).is_none());
    history.observe(&reading(1, 2 * SEC, 6));
    assert!(history.climb(1).is_some());
}

#[test]
fn what_is_kept_is_bounded() {
    let mut history = MemoryHistory::default();
    // An hour at 10 Hz: at most MAX_READINGS, the last one kept.
    readings(&mut history, 1, 0, 3600, |t| (t * 1e6) as u64);
    let kept = &history.processes[&1];
    assert!(kept.readings.len() <= MAX_READINGS);
    assert_eq!(
        kept.readings.back().map(|r| r.0),
        Some(Timestamp(35_999 * 100 * MS))
    );
    // Pruned to the last five minutes.
    history.prune(Timestamp(3600 * SEC));
    let first = history.processes[&1].readings.front().map(|r| r.0 .0);
    assert!(first.is_some_and(|t| t >= 3300 * SEC), "{first:?}");
    // A process nothing named for five minutes is forgotten, one that ended is kept.
    history.observe(&reading(2, 0, 1));
    history.observe(&reading(3, 0, 1));
    history.vanished(3);
    history.prune(Timestamp(3600 * SEC));
    assert!(!history.processes.contains_key(&2));
    assert!(history.processes.contains_key(&3));
    // Of the ended, the last MAX_ENDED.
    for pid in 100..100 + MAX_ENDED as u32 {
        history.observe(&reading(pid, 0, 1));
        history.vanished(pid);
    }
    assert!(!history.processes.contains_key(&3));
    assert!(history.processes.contains_key(&100));
    // A pid that ended and appears again is a new process.
    history.appeared(100);
    assert!(!history.processes.contains_key(&100));
}

#[test]
fn thinning_keeps_the_first_and_last_points() {
    let points: Vec<u32> = (0..1000).collect();
    let thinned = thin(&points, 60);
    assert_eq!(thinned.len(), 60);
    assert_eq!((thinned[0], thinned[59]), (0, 999));
    assert!(thinned.windows(2).all(|w| w[0] < w[1]));
    assert_eq!(thin(&points[..10], 60).len(), 10);
}

#[test]
fn the_rate_is_that_of_the_climb_not_of_the_flat_minutes_before() {
    let mut history = MemoryHistory::default();
    // Flat at 80 MB for 30 s, then 40 MB/s for 5 s (to 280 MB), then killed.
    readings(&mut history, 9, 0, 35, |t| {
        80_000_000 + (t - 30.0).max(0.0).mul_add(40e6, 0.0) as u64
    });
    let climb = history.climb(9).expect("a climb");
    assert_eq!(climb.rss_first, 80_000_000);
    assert!((climb.growth_bytes_per_s - 40e6).abs() < 0.5e6, "{climb:?}");
    assert!((29.9..=30.5).contains(&climb.climb_from_secs), "{climb:?}");
    // Flat all along: no climb, the slope of it all.
    let mut flat = MemoryHistory::default();
    readings(&mut flat, 1, 0, 5, |_| 10_000_000);
    let climb = flat.climb(1).expect("readings");
    assert_eq!(
        (climb.climb_from_secs, climb.growth_bytes_per_s),
        (0.0, 0.0)
    );
    // Freed, then climbing again: from the trough.
    let mut again = MemoryHistory::default();
    readings(&mut again, 2, 0, 10, |t| {
        if t < 5.0 {
            100_000_000 + (t * 20e6) as u64
        } else {
            20_000_000 + ((t - 5.0) * 10e6) as u64
        }
    });
    let climb = again.climb(2).expect("readings");
    assert_eq!(climb.climb_from_secs, 5.0);
    assert!((climb.growth_bytes_per_s - 10e6).abs() < 0.1e6, "{climb:?}");
}

#[test]
fn a_stack_is_at_its_innermost_frame_of_the_jobs_code() {
    let mut history = MemoryHistory::default();
    readings(&mut history, 5, 0, 2, |t| (t * 100e6) as u64);
    // The job's grow_cache under a standard library helper: grow_cache's time; a thread only in
    // the standard library: its innermost frame; native frames never.
    let mut in_helper = stack_in("json/encoder.py", true, &[("iterencode", 7)]);
    let mut frames = in_helper.frames.to_vec();
    frames.insert(
        0,
        Frame {
            native: true,
            origin: FileOrigin::Native,
            ..Frame::python("PyObject_Malloc", "libpython3.11.so", 0)
        },
    );
    frames.push(Frame::python("grow_cache", "job.py", 20));
    in_helper.frames = frames.into();
    let only_stdlib = stack_in("threading.py", true, &[("wait", 3), ("run", 9)]);
    history.read(5, Timestamp(500 * MS), &[in_helper]);
    history.read(5, Timestamp(1500 * MS), &[only_stdlib]);
    let climb = history.climb(5).expect("a climb");
    let ran: Vec<&str> = climb.ran.iter().map(|r| &r.function[..]).collect();
    assert_eq!(ran, vec!["grow_cache (job.py:20)", "wait (threading.py:3)"]);
}
