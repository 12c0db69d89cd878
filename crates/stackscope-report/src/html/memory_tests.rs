//! Tests of report.html's memory: the chart's data, the growth in the buckets for any window,
//! the markup and the verdict's lines, and nothing of it without memory readings.

use stackscope_aggregate::{AggregateConfig, Aggregator, MemoryPoint};
use stackscope_event::Timestamp;
use stackscope_testkit::events::{self, ms};

use super::*;
use crate::html::{page_data, write_page, PageData};
use crate::memory::tests::{
    growing_job, meta, summary_with_finding, GROWS_FROM_MS, LIMIT, TRAINER, TRAINER_RSS, WORKER,
    WORKER_GROWTH, WORKER_RSS,
};

fn data_of(agg: &Aggregator) -> PageData {
    page_data(agg, &agg.summary(&meta()), &meta())
}

fn html_of(data: &PageData) -> String {
    let mut out = Vec::new();
    write_page(data, &mut out).expect("page");
    String::from_utf8(out).expect("utf8")
}

/// Bytes grown in the buckets starting in `[from, to)` seconds, by page stack.
fn grown(data: &PageData, from: f64, to: f64) -> Vec<(u64, u64)> {
    let mut by_stack: BTreeMap<u64, u64> = BTreeMap::new();
    for b in &data.buckets {
        let start = b.i as f64 * data.bucket_secs;
        if start >= from && start < to {
            for pair in b.g.chunks(2) {
                *by_stack.entry(pair[0]).or_default() += pair[1];
            }
        }
    }
    by_stack.into_iter().collect()
}

#[test]
fn a_line_per_process_and_the_cgroup_limit() {
    let data = data_of(&growing_job());
    let memory = data.memory.as_ref().expect("memory on the page");
    let pids: Vec<u32> = memory.processes.iter().map(|p| p.pid).collect();
    // The largest peak first: the trainer's 900 MB over the worker's 365 MB.
    assert_eq!(pids, [TRAINER, WORKER]);
    let worker = &memory.processes[1];
    assert!(
        worker.label.starts_with("pid 4321"),
        "the legend names the pid: {}",
        worker.label
    );
    assert!(
        worker.label.contains(&worker.role),
        "and its role: {}",
        worker.label
    );
    assert_eq!(worker.t.len(), 101);
    assert_eq!((worker.t[0], worker.t[100]), (0.0, 10.0));
    assert_eq!(worker.rss[0], WORKER_RSS);
    assert_eq!(worker.rss[100], WORKER_RSS + WORKER_GROWTH);
    assert!(memory.processes[0].rss.iter().all(|&r| r == TRAINER_RSS));
    let cgroup = memory.cgroup.as_ref().expect("the cgroup");
    assert_eq!(cgroup.limit, Some(LIMIT));
    assert_eq!(
        cgroup.usage.last(),
        Some(&(TRAINER_RSS + WORKER_RSS + WORKER_GROWTH))
    );
}

#[test]
fn each_window_holds_the_growth_of_its_buckets() {
    let data = data_of(&growing_job());
    let grows_from = GROWS_FROM_MS as f64 / 1000.0;
    // Nothing grew before the worker did.
    assert_eq!(grown(&data, 0.0, grows_from), []);
    let after = grown(&data, grows_from, f64::INFINITY);
    let total: u64 = after.iter().map(|&(_, b)| b).sum();
    assert_eq!(total, WORKER_GROWTH);
    for &(stack, _) in &after {
        let frames = &data.stacks[stack as usize];
        let inner = frames.last().map(|&f| data.frames[f as usize].as_str());
        assert_eq!(inner, Some("augment (worker.py:40)"));
    }
    // A window of one second of the growth: a fifth of it.
    let second: u64 = grown(&data, 6.0, 7.0).iter().map(|&(_, b)| b).sum();
    assert_eq!(second, WORKER_GROWTH / 5);
}

#[test]
fn the_page_has_the_memory_chart_the_growth_view_and_the_verdict() {
    let agg = growing_job();
    let mut summary = agg.summary(&meta());
    let text = "pid 4321 (worker) grew 50 MB/s for 5 s while it ran augment <worker.py:40>";
    summary.memory = Some(summary_with_finding(text));
    let html = html_of(&page_data(&agg, &summary, &meta()));
    for id in [
        "memory-chart",
        "memory-legend",
        "memory-growth",
        "memory-verdict",
    ] {
        assert!(html.contains(&format!("id=\"{id}\"")), "no #{id}");
    }
    // Under the GPU timeline, before the thread lanes; the growth after the flamegraph.
    let at = |needle: &str| html.find(needle).unwrap_or_else(|| panic!("no {needle}"));
    assert!(at("id=\"timeline\"") < at("id=\"memory-chart\""));
    assert!(at("id=\"memory-chart\"") < at("id=\"lanes\""));
    assert!(at("id=\"flamegraph\"") < at("id=\"memory-growth\""));
    // The verdict's line, escaped, beside the GPU verdict.
    assert!(at("id=\"verdict\"") < at("id=\"memory-verdict\""));
    assert!(html.contains(
        "<li><b>Memory:</b> pid 4321 (worker) grew 50 MB/s for 5 s while it ran augment \
         &lt;worker.py:40&gt;</li>"
    ));
    assert!(html.contains("var stackscopeMemory"), "memory.js embedded");
    let json = crate::html::script_json(&page_data(&agg, &summary, &meta())).expect("json");
    assert!(json.contains("\"memory\":{\"processes\":["), "{json:.200}");
    assert!(json.contains("\"g\":["), "growth in the buckets");
}

#[test]
fn no_memory_readings_no_memory_on_the_page() {
    let mut agg = Aggregator::new(AggregateConfig::default(), Timestamp(0));
    let thread = events::thread(1, Some(1), Some("MainThread"), true);
    for t in 0..100 {
        agg.handle(events::stack(
            ms(t * 10),
            42,
            &thread,
            &[("main", "a.py", 1)],
        ));
    }
    agg.finish();
    let data = data_of(&agg);
    assert!(data.memory.is_none());
    let html = html_of(&data);
    for id in ["memory-chart", "memory-growth", "memory-verdict"] {
        assert!(
            !html.contains(&format!("id=\"{id}\"")),
            "#{id} on a page without memory"
        );
    }
    let json = crate::html::script_json(&data).expect("json");
    for absent in ["\"g\":", "\"memory\":"] {
        assert!(
            !json.contains(absent),
            "{absent} in the data of a page without memory"
        );
    }
    // The script is there, and draws nothing of memory without its data.
    assert!(html.contains("if (!D.memory) return;"));
}

#[test]
fn a_long_recording_is_thinned_keeping_each_run_s_peak() {
    let points: Vec<MemoryPoint> = (0..10_000u64)
        .map(|i| MemoryPoint {
            secs: i as f64 * 0.1,
            pid: 7,
            role: "main".to_owned(),
            // One spike, in the middle of a run.
            rss: if i == 5_001 { 9_000 } else { 1_000 + i },
            private: None,
            shared: None,
            swap: None,
            gpu_memory: None,
        })
        .collect();
    let lines = process_lines(&points);
    assert_eq!(lines.len(), 1);
    let line = &lines[0];
    assert!(line.t.len() <= MAX_MEMORY_POINTS, "{} points", line.t.len());
    assert_eq!(line.t.len(), line.rss.len());
    // The last reading is the largest; the spike, in the middle of a run, is kept.
    assert_eq!(line.rss.iter().max(), Some(&10_999));
    assert!(line.rss.contains(&9_000), "the spike kept");
    // A point stands at its run's last reading.
    assert_eq!(line.t.last(), Some(&999.9));
    assert_eq!(line.label, "pid 7 · main");
}
