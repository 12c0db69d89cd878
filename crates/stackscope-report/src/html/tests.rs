//! Tests of report.html's data: buckets, windows, the difference view and the bound on size.

use stackscope_aggregate::{AggregateConfig, Aggregator, RecordingMeta, StackView};
use stackscope_event::{Event, Frame, GpuSample, ThreadInfo, Timestamp};
use stackscope_testkit::events::{self, MS};

use super::*;

fn main_thread(active: bool) -> ThreadInfo {
    events::thread(1, Some(1001), Some("MainThread"), active)
}

fn stack(time_ms: u64, outer_first: &[&str], active: bool) -> Event {
    let frames = outer_first
        .iter()
        .rev()
        .map(|f| Frame::python(f, "train.py", 1))
        .collect();
    events::stack_of(events::ms(time_ms), 42, main_thread(active), frames)
}

fn gpu(time_ms: u64, utilization: f32) -> Event {
    Event::Gpu(GpuSample {
        memory_used_bytes: Some(1 << 30),
        memory_total_bytes: Some(4 << 30),
        power_watts: Some(100.0),
        ..events::gpu(events::ms(time_ms), 0, utilization)
    })
}

fn meta() -> RecordingMeta {
    RecordingMeta {
        pid: 42,
        rank: Default::default(),
        host: None,
        command_line: "python3 train.py".to_owned(),
        python_version: "3.11.7".to_owned(),
        reader: "stackscope".to_owned(),
        started_at: String::new(),
        duration_secs: 10.0,
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

/// A loop of 10 s at 100 Hz: each second, 600 ms loading (GPU at 5%) then 400 ms computing
/// (GPU at 95%); both phases end in the shared `busy`.
fn training_loop() -> Aggregator {
    let mut agg = Aggregator::new(AggregateConfig::default(), Timestamp(0));
    for ms in (0..10_000u64).step_by(10) {
        let loading = ms % 1000 < 600;
        if ms % 100 == 0 {
            // A reading describes the time before it.
            let next = ms + 100;
            agg.handle(gpu(
                next,
                if next % 1000 <= 600 && next % 1000 != 0 {
                    5.0
                } else {
                    95.0
                },
            ));
        }
        let frames: &[&str] = if loading {
            &["main", "load_batch", "decode_images", "busy"]
        } else {
            &["main", "forward_backward", "busy"]
        };
        agg.handle(stack(ms, frames, true));
        // A second thread that sleeps: its lane is idle, it is not kept.
        if ms % 50 == 0 {
            let mut sleeper = stack(ms, &["worker", "wait"], false);
            if let Event::Stack(s) = &mut sleeper {
                s.thread.python_thread_id = 2;
                s.thread.name = Some("loader".into());
            }
            agg.handle(sleeper);
        }
    }
    agg.finish();
    agg
}

fn data_of(agg: &Aggregator) -> PageData {
    let summary = agg.summary(&meta());
    page_data(agg, &summary, &meta())
}

/// Sums `[idle, busy, unknown]` over the buckets starting in `[from, to)` seconds.
fn window(data: &PageData, from: f64, to: f64) -> [u64; 3] {
    let mut sums = [0u64; 3];
    for b in &data.buckets {
        let start = b.i as f64 * data.bucket_secs;
        if start >= from && start < to {
            for c in b.s.chunks(4) {
                sums[0] += c[1];
                sums[1] += c[2];
                sums[2] += c[3];
            }
        }
    }
    sums
}

#[test]
fn buckets_hold_every_kept_sample_and_each_window_exactly() {
    let agg = training_loop();
    let data = data_of(&agg);
    assert_eq!(data.bucket_secs, 0.125);
    let [idle, busy, unknown] = window(&data, 0.0, f64::INFINITY);
    assert_eq!(idle + busy + unknown, 1000, "every kept sample, once");
    assert_eq!(data.samples, 1000);
    // [2 s, 4 s) on bucket edges: exactly the samples taken then, 100 per second.
    let [i, b, u] = window(&data, 2.0, 4.0);
    assert_eq!(i + b + u, 200);
    // Loading is 60% of each second and its samples were tagged GPU idle.
    assert!((110..=130).contains(&i), "idle {i} busy {b}");
    // Lanes: the main thread active, the sleeper idle only.
    let main = data.lanes.iter().find(|l| l.name == "MainThread");
    let loader = data.lanes.iter().find(|l| l.name == "loader");
    assert_eq!(main.map(|l| (l.active, l.idle)), Some((1000, 0)));
    assert_eq!(loader.map(|l| (l.active, l.idle)), Some((0, 200)));
}

#[test]
fn idle_and_busy_counts_per_stack_match_the_folded_views() {
    let agg = training_loop();
    let data = data_of(&agg);
    let mut idle_by_leaf = std::collections::HashMap::<String, u64>::new();
    let mut busy_by_leaf = std::collections::HashMap::<String, u64>::new();
    for b in &data.buckets {
        for c in b.s.chunks(4) {
            let frames = &data.stacks[c[0] as usize];
            let path: Vec<&str> = frames
                .iter()
                .map(|&f| data.frames[f as usize].as_str())
                .collect();
            let key = path.join(";");
            *idle_by_leaf.entry(key.clone()).or_default() += c[1];
            *busy_by_leaf.entry(key).or_default() += c[2];
        }
    }
    for (view, sums) in [
        (StackView::GpuIdle, &idle_by_leaf),
        (StackView::GpuBusy, &busy_by_leaf),
    ] {
        for (line, count) in agg.folded(view) {
            assert_eq!(sums.get(&line), Some(&count), "{view:?} {line}");
        }
    }
    // The difference view's question: load_batch leans to the idle side, forward_backward
    // to the busy side.
    let share = |sums: &std::collections::HashMap<String, u64>, f: &str| {
        let total: u64 = sums.values().sum();
        let with: u64 = sums
            .iter()
            .filter(|(k, _)| k.contains(f))
            .map(|(_, v)| v)
            .sum();
        with as f64 / total as f64
    };
    assert!(share(&idle_by_leaf, "load_batch") > 0.9);
    assert!(share(&busy_by_leaf, "load_batch") < 0.1);
    assert!(share(&busy_by_leaf, "forward_backward") > 0.9);
    // The functions the page marks on the timeline: busy is one function under both phases.
    let busy_frames: Vec<usize> = data
        .frames
        .iter()
        .enumerate()
        .filter(|(_, l)| l.starts_with("busy "))
        .map(|(i, _)| i)
        .collect();
    assert_eq!(busy_frames.len(), 1, "{:?}", data.frames);
    let f = data.frame_functions[busy_frames[0]];
    assert_eq!(data.functions[f as usize], "busy (train.py)");
}

#[test]
fn the_verdict_and_path_are_in_the_page() {
    let agg = training_loop();
    let summary = agg.summary(&meta());
    let mut page = Vec::new();
    write_report_html(&agg, &summary, &meta(), &mut page).expect("written");
    let page = String::from_utf8(page).expect("utf-8");
    let path = summary
        .gpu
        .as_ref()
        .and_then(|g| g.idle_path.as_ref())
        .expect("a path");
    assert_eq!(path.label(), "load_batch → decode_images");
    assert!(
        page.contains("load_batch → decode_images"),
        "path in the page"
    );
    assert!(page.contains("id=\"selection-samples\">1000<"));
    assert!(page.contains("id=\"stackscope-data\""));
    // The loop's time as a bar beside the verdict: a segment per part, as wide as its share.
    let step = summary.gpu.as_ref().and_then(|g| g.step).expect("a step");
    let bar = &page[page.find("id=\"step-bar\"").expect("the step bar")..];
    let bar = &bar[..bar.find("</div>").expect("its end")];
    for (part, share) in step.parts().into_iter().filter(|(_, v)| *v >= 0.005) {
        let segment = format!("step-{part}\" style=\"width:{:.1}%\"", share * 100.0);
        assert!(bar.contains(&segment), "{segment} not in {bar}");
    }
    assert!(bar.contains("inline_load"), "{bar}");
    // Nothing outside the file: no external scripts, styles or links.
    for needle in ["<script src", "<link", "@import", "url(http", "src=\"http"] {
        assert!(!page.contains(needle), "{needle}");
    }
}

#[test]
fn text_from_the_target_cannot_end_the_data_script() {
    let mut agg = Aggregator::new(AggregateConfig::default(), Timestamp(0));
    agg.handle(stack(1, &["</script><script>alert(1)</script>"], true));
    agg.finish();
    let summary = agg.summary(&meta());
    let mut page = Vec::new();
    write_report_html(&agg, &summary, &meta(), &mut page).expect("written");
    let page = String::from_utf8(page).expect("utf-8");
    assert!(!page.contains("</script><script>alert"));
    assert!(page.contains("\\u003c/script>\\u003cscript>alert"));
}

#[test]
fn a_day_of_samples_stays_within_the_size_bound() {
    // A day at 100 Hz over 3 threads and 60 distinct stacks: only the buckets' number and
    // their entries matter for the size, and the aggregate bounds both.
    let mut agg = Aggregator::new(
        AggregateConfig {
            gpu_enabled: false,
            ..AggregateConfig::default()
        },
        Timestamp(0),
    );
    let names: Vec<String> = (0..20).map(|i| format!("function_{i}")).collect();
    let day_ms = 24 * 3600 * 1000u64;
    // Feeding 26 million samples through the aggregator takes a while in a debug build, so
    // one sample in 40 is fed, spread over the whole day: the buckets' shape is the same.
    for (n, ms) in (0..day_ms).step_by(400).enumerate() {
        for t in 0..3u64 {
            let mut e = stack(ms, &["main", &names[(n + t as usize) % 20]], true);
            if let Event::Stack(s) = &mut e {
                s.thread.python_thread_id = t;
                s.thread.name = Some(format!("thread-{t}").into());
            }
            agg.handle(e);
        }
    }
    agg.finish();
    let summary = agg.summary(&meta());
    let mut page = Vec::new();
    write_report_html(&agg, &summary, &meta(), &mut page).expect("written");
    let data = page_data(&agg, &summary, &meta());
    assert!(data.buckets.len() <= stackscope_aggregate::MAX_BUCKETS);
    assert!(data.bucket_secs >= 32.0, "{} s buckets", data.bucket_secs);
    let [_, _, unknown] = window(&data, 0.0, f64::INFINITY);
    assert_eq!(unknown, summary.samples);
    assert!(page.len() < 20 << 20, "{} bytes", page.len());
}

#[test]
fn sm_activity_is_a_series_beside_utilization() {
    let mut agg = Aggregator::new(AggregateConfig::default(), Timestamp(0));
    for (i, sm) in [(1u64, Some(40.0f32)), (2, None), (3, Some(2.0))] {
        agg.handle(Event::Gpu(GpuSample {
            time: Timestamp(i * 100 * MS),
            device: 0,
            utilization: Some(99.0),
            sm_active: sm,
            ..GpuSample::default()
        }));
    }
    agg.finish();
    let data = data_of(&agg);
    let gpu = &data.gpus[0];
    assert_eq!(gpu.sm_active, vec![Some(40.0), None, Some(2.0)]);
    assert_eq!(gpu.utilization, vec![Some(99.0); 3]);
}

/// Two recordings of the loop, on two hosts, the second started 1 s after the first.
#[test]
fn merged_recordings_join_into_one_page_with_a_root_per_rank() {
    use stackscope_aggregate::{merge_recordings, RecordingInput};
    let inputs: Vec<RecordingInput> = [(0, "node-a"), (1, "node-b")]
        .into_iter()
        .map(|(rank, host)| RecordingInput {
            host: host.to_owned(),
            pid: 42,
            rank: Some(rank),
            all: vec![("MainThread;busy (train.py:1)".to_owned(), 1000)],
            ..RecordingInput::default()
        })
        .collect();
    let merged = merge_recordings(&inputs);
    let parts: Vec<RankPage<'_>> = inputs
        .iter()
        .zip(["2026-01-01T00:00:00Z", "2026-01-01T00:00:01Z"])
        .map(|(input, started_at)| {
            let agg = training_loop();
            let meta = RecordingMeta {
                started_at: started_at.to_owned(),
                ..meta()
            };
            let summary = agg.summary(&meta);
            RankPage {
                input,
                page: page_data(&agg, &summary, &meta),
            }
        })
        .collect();
    let sources = vec!["a".into(), "b".into()];
    let data = merged_page_data(&parts, &merged, &sources);

    let roots: std::collections::BTreeSet<&str> = data
        .stacks
        .iter()
        .map(|s| data.frames[s[0] as usize].as_str())
        .collect();
    let expected = ["rank 0 on node-a (pid 42)", "rank 1 on node-b (pid 42)"];
    assert_eq!(roots.into_iter().collect::<Vec<_>>(), expected);
    // The thread comes under the rank root, unchanged.
    assert!(data
        .stacks
        .iter()
        .all(|s| data.frames[s[1] as usize] == "MainThread"));
    assert_eq!(data.samples, 2000);
    let [i, b, u] = window(&data, 0.0, f64::INFINITY);
    assert_eq!(i + b + u, 2000, "every sample of both, once");
    // Rank 1 started 1 s later: its 10 s end at 11 s, and the first second is rank 0's alone.
    assert!((data.duration_secs - 11.0).abs() < 1e-6);
    let [i, b, u] = window(&data, 0.0, 1.0);
    assert_eq!(i + b + u, 100);
    assert_eq!(window(&data, 10.0, 11.0).iter().sum::<u64>(), 100);
    let owners: Vec<Option<&str>> = data.gpus.iter().map(|g| g.owner.as_deref()).collect();
    assert_eq!(owners, [Some("rank 0 on node-a"), Some("rank 1 on node-b")]);
    assert!((data.gpus[1].t[0] - data.gpus[0].t[0] - 1.0).abs() < 1e-6);
    assert!(data.lanes[0].name.starts_with("rank 0 on node-a: "));

    let mut html = Vec::new();
    write_page(&data, &mut html).expect("page");
    let html = String::from_utf8(html).expect("utf-8");
    assert!(html.contains("<td id=\"target\">2 recordings merged, 2 ranks</td>"));
    assert!(
        html.contains("<tr><td>rank 1 on node-b (pid 42)</td><td class=\"num\">1000</td>"),
        "a row per rank"
    );
    // Two ranks: none is compared with its peers; both verdicts are the headline.
    let verdict = &html[html.find("id=\"verdict\"").expect("verdict")..];
    assert!(verdict.contains("rank 0 on node-a: ") && verdict.contains("rank 1 on node-b: "));
}
