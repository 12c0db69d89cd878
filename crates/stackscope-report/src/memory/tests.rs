//! The memory outputs over a synthetic job fed to a real aggregator: a trainer that stays flat
//! and a worker whose resident memory grows 50 MB a second in `augment` for the second half of
//! a 10 s recording, in a memory cgroup with a 4 GB limit.

use stackscope_aggregate::{
    AggregateConfig, Aggregator, MemoryFinding, MemoryFindingKind, MemorySummary, RecordingMeta,
    StackView,
};
use stackscope_event::{CgroupSample, Event, MemorySample, ThreadInfo, Timestamp};
use stackscope_testkit::events::{self, ms};

use super::*;

pub(crate) const TRAINER: u32 = 4300;
pub(crate) const WORKER: u32 = 4321;
/// The worker's resident memory before it grows, and how much it grows each 100 ms reading.
pub(crate) const WORKER_RSS: u64 = 115_000_000;
pub(crate) const STEP_GROWTH: u64 = 5_000_000;
pub(crate) const TRAINER_RSS: u64 = 900_000_000;
pub(crate) const LIMIT: u64 = 4_000_000_000;
/// When the worker starts to grow, in milliseconds, and the recording's end.
pub(crate) const GROWS_FROM_MS: u64 = 5_000;
pub(crate) const END_MS: u64 = 10_000;
/// What the worker grew: 5 MB at each of the 50 readings from 5.1 s to 10 s.
pub(crate) const WORKER_GROWTH: u64 = 50 * STEP_GROWTH;

fn main_thread() -> ThreadInfo {
    events::thread(1, Some(1), Some("MainThread"), true)
}

/// The worker's resident memory at `t` ms.
fn worker_rss(t: u64) -> u64 {
    WORKER_RSS + t.saturating_sub(GROWS_FROM_MS) / 100 * STEP_GROWTH
}

/// The events of one 100 ms tick starting at `t` ms: each process's reading and the cgroup's
/// at `t`, then ten stacks of each process 5 ms off the readings, so that no stack falls on
/// an interval's edge.
fn tick(t: u64) -> Vec<Event> {
    let rss = worker_rss(t);
    // smaps_rollup at a lower rate: every half second.
    let smaps = t.is_multiple_of(500);
    let mut out = vec![
        Event::Memory(MemorySample {
            time: ms(t),
            pid: TRAINER,
            rss_bytes: TRAINER_RSS,
            ..MemorySample::default()
        }),
        Event::Memory(MemorySample {
            time: ms(t),
            pid: WORKER,
            rss_bytes: rss,
            private_bytes: smaps.then_some(rss - 20_000_000),
            shared_bytes: smaps.then_some(20_000_000),
            swap_bytes: smaps.then_some(0),
        }),
        Event::Cgroup(CgroupSample {
            time: ms(t),
            usage_bytes: TRAINER_RSS + rss,
            limit_bytes: Some(LIMIT),
            oom_kills: Some(0),
        }),
    ];
    if t == END_MS {
        return out;
    }
    let thread = main_thread();
    for k in 0..10 {
        let at = ms(t + 5 + k * 10);
        out.push(events::stack(
            at,
            TRAINER,
            &thread,
            &[("train_step", "train.py", 30), ("main", "train.py", 10)],
        ));
        let inner = if t >= GROWS_FROM_MS {
            ("augment", "worker.py", 40)
        } else {
            ("fetch", "worker.py", 20)
        };
        out.push(events::stack(
            at,
            WORKER,
            &thread,
            &[inner, ("worker_loop", "worker.py", 5)],
        ));
    }
    out
}

pub(crate) fn meta() -> RecordingMeta {
    RecordingMeta {
        pid: TRAINER,
        rank: Default::default(),
        host: None,
        command_line: "python3 train.py".to_owned(),
        python_version: "3.11.7".to_owned(),
        reader: "stackscope".to_owned(),
        started_at: String::new(),
        duration_secs: END_MS as f64 / 1000.0,
        rate_hz: 100.0,
        ticks: 0,
        dropped: 0,
        late_ticks: 0,
        max_lateness_ms: 0.0,
        target_exited: true,
        exit_status: Some(0),
        exit_signal: None,
        gpu_devices: Vec::new(),
        gpu_unavailable: None,
        notices: Vec::new(),
        cpus_usable: None,
    }
}

/// Kept stacks only, no GPU: the memory outputs alone.
fn config() -> AggregateConfig {
    AggregateConfig {
        include_idle: false,
        idle_below: 30.0,
        gpu_enabled: false,
        process_root: false,
        leave_out_startup: false,
        processes_apart: false,
        threads_apart: false,
    }
}

/// The synthetic job's aggregate, finished.
pub(crate) fn growing_job() -> Aggregator {
    let mut agg = Aggregator::new(config(), Timestamp(0));
    for t in (0..=END_MS).step_by(100) {
        for event in tick(t) {
            agg.handle(event);
        }
    }
    agg.finish();
    agg
}

/// A memory summary with one finding, as the verdict would say it.
pub(crate) fn summary_with_finding(text: &str) -> MemorySummary {
    MemorySummary {
        verdict: vec![MemoryFinding {
            kind: MemoryFindingKind::Leak,
            pid: WORKER,
            role: "worker".to_owned(),
            pids: vec![WORKER],
            growth_bytes_per_s: 50e6,
            from_bytes: WORKER_RSS,
            to_bytes: WORKER_RSS + WORKER_GROWTH,
            secs: 5.0,
            top_function: Some("augment (worker.py:40)".to_owned()),
            top_function_share: Some(1.0),
            secs_to_limit: Some(60.0),
            text: text.to_owned(),
        }],
        ..MemorySummary::default()
    }
}

#[test]
fn growth_is_folded_as_stacks_folded_renders_the_stack_weighted_in_bytes() {
    let agg = growing_job();
    let mut out = Vec::new();
    write_memory_growth_folded(agg.stack_table(), &agg.memory_growth(), &mut out).expect("write");
    let text = String::from_utf8(out).expect("utf8");
    let lines: Vec<&str> = text.lines().collect();
    // The one stack that ran while the worker grew, as stacks.folded has it.
    let augment = agg
        .folded(StackView::All)
        .into_iter()
        .map(|(stack, _)| stack)
        .filter(|stack| stack.ends_with("augment (worker.py:40)"))
        .collect::<Vec<_>>();
    assert_eq!(augment.len(), 1, "{augment:?}");
    assert_eq!(lines, [format!("{} {WORKER_GROWTH}", augment[0])]);
}

#[test]
fn growth_lines_merge_alike_stacks_and_leave_out_nothing_grown() {
    let agg = growing_job();
    let stacks = agg.stack_table().stacks().len() as u32;
    assert!(stacks >= 2);
    let first = agg
        .stack_table()
        .folded_stack(&agg.stack_table().stacks()[0]);
    // The same stack twice merges; a stack of no growth and an unknown id are left out.
    let growth = [(0, 7), (1, 0), (0, 3), (stacks + 10, 99)];
    let lines = memory_growth_lines(agg.stack_table(), &growth);
    assert_eq!(lines, [(first, 10)]);
}

#[test]
fn memory_timeline_has_a_row_per_reading_of_each_process() {
    let agg = growing_job();
    let points = agg.memory_points();
    let mut out = Vec::new();
    write_memory_timeline_csv(&points, &mut out).expect("csv");
    let text = String::from_utf8(out).expect("utf8");
    let rows: Vec<Vec<&str>> = text
        .lines()
        .skip(1)
        .map(|l| l.split(',').collect())
        .collect();
    // 101 readings of each of the two processes, 0 s to 10 s.
    assert_eq!(rows.len(), 202, "{text}");
    let worker: Vec<&Vec<&str>> = rows.iter().filter(|r| r[1] == "4321").collect();
    assert_eq!(worker.len(), 101);
    assert_eq!(worker[0][0], "0.000000");
    assert_eq!(worker[0][3], WORKER_RSS.to_string());
    // The first reading read smaps_rollup too; the next did not.
    assert_eq!(worker[0][4..7], ["95000000", "20000000", "0"]);
    assert_eq!(worker[1][4..7], ["", "", ""]);
    let last = worker[100];
    assert_eq!(last[0], "10.000000");
    assert_eq!(last[3], (WORKER_RSS + WORKER_GROWTH).to_string());
    assert!(rows
        .iter()
        .filter(|r| r[1] == "4300")
        .all(|r| r[3] == TRAINER_RSS.to_string()));
}

#[test]
fn the_printed_summary_has_one_line_per_memory_finding() {
    let text = "pid 4321 (worker) grew 50 MB/s for 5 s (115 MB → 365 MB)";
    let memory = summary_with_finding(text);
    let mut out = Vec::new();
    write_memory_text(Some(&memory), &mut out).expect("text");
    assert_eq!(
        String::from_utf8(out).expect("utf8"),
        format!("Memory: {text}\n")
    );
    let mut flat = Vec::new();
    write_memory_text(Some(&MemorySummary::default()), &mut flat).expect("text");
    write_memory_text(None, &mut flat).expect("text");
    assert!(flat.is_empty(), "nothing to say when memory was flat");
}

#[test]
fn an_output_directory_with_memory_holds_both_files_and_the_summary_names_them() {
    let agg = growing_job();
    let dir = tempfile::tempdir().expect("temp dir");
    let written = crate::write_outputs(dir.path(), &agg, &meta()).expect("outputs");
    let csv = std::fs::read_to_string(dir.path().join("memory-timeline.csv")).expect("csv");
    assert_eq!(csv.lines().next(), Some(MEMORY_CSV_HEADER));
    assert_eq!(csv.lines().count(), 1 + 202);
    let folded = std::fs::read_to_string(dir.path().join("stacks-memory-growth.folded"))
        .expect("growth folded");
    assert!(
        folded.ends_with(&format!("augment (worker.py:40) {WORKER_GROWTH}\n")),
        "{folded}"
    );
    let mut text = Vec::new();
    crate::write_text_summary(&written.summary, dir.path(), &mut text).expect("text");
    let text = String::from_utf8(text).expect("utf8");
    assert!(
        text.contains("report.html, memory-timeline.csv, stacks-memory-growth.folded"),
        "{text}"
    );
}

#[test]
fn flat_memory_writes_an_empty_growth_file() {
    let mut agg = Aggregator::new(config(), Timestamp(0));
    let thread = main_thread();
    for t in (0..2_000).step_by(100) {
        agg.handle(Event::Memory(MemorySample {
            time: ms(t),
            pid: TRAINER,
            rss_bytes: TRAINER_RSS,
            ..MemorySample::default()
        }));
        agg.handle(events::stack(
            ms(t + 5),
            TRAINER,
            &thread,
            &[("main", "train.py", 1)],
        ));
    }
    agg.finish();
    let dir = tempfile::tempdir().expect("temp dir");
    crate::write_outputs(dir.path(), &agg, &meta()).expect("outputs");
    let folded = std::fs::read_to_string(dir.path().join("stacks-memory-growth.folded"))
        .expect("growth folded");
    assert_eq!(folded, "");
    assert!(dir.path().join("memory-timeline.csv").is_file());
}

#[test]
fn a_process_s_gpu_memory_is_in_its_rows_after_the_gpu_reading() {
    let mut agg = Aggregator::new(config(), Timestamp(0));
    let reading = |t: u64| {
        Event::Memory(MemorySample {
            time: ms(t),
            pid: TRAINER,
            rss_bytes: TRAINER_RSS,
            ..MemorySample::default()
        })
    };
    agg.handle(reading(0));
    // The poller lists the processes with a context on the device, then their memory.
    agg.handle(Event::Gpu(stackscope_event::GpuSample {
        compute_pids: Some(vec![TRAINER]),
        process_memory: vec![stackscope_event::ProcessGpuMemory {
            pid: TRAINER,
            bytes: 2 << 30,
        }],
        ..events::gpu(ms(50), 0, 90.0)
    }));
    agg.handle(reading(100));
    agg.finish();
    let mut out = Vec::new();
    write_memory_timeline_csv(&agg.memory_points(), &mut out).expect("csv");
    let text = String::from_utf8(out).expect("utf8");
    let rows: Vec<&str> = text.lines().skip(1).collect();
    assert_eq!(rows.len(), 2, "{text}");
    assert!(rows[0].ends_with(",,,,"), "no GPU reading yet: {}", rows[0]);
    assert!(rows[1].ends_with(",,,,2147483648"), "{}", rows[1]);
}
