//! `stackscope report`: rebuilding a recording from its log gives the recording's own profiles
//! over the whole window, and a partition of them over parts of it.

// Helpers outside #[test] functions unwrap too: a test fails loudly on any error.
#![allow(clippy::unwrap_used)]

use std::collections::BTreeMap;
use std::path::Path;

// The sample log's synthetic recordings: one definition, shared with its own tests.
use stackscope_aggregate::{Aggregator, GpuDeviceInfo, RecordingMeta, StackView};
use stackscope_event::{Event, Timestamp};
use stackscope_report::{aggregate_config, rebuild, RebuildError, RebuildOptions};
use stackscope_samplelog::{
    report_dir, LogEnd, LogHeader, SampleLogWriter, Window, GPU_COVER_SECS,
};
use stackscope_testkit::synthetic::{header, Typical, SEC, START};

const SECS: u64 = 60;

/// Records `events` as the binary does: each event to the aggregator and to the log.
fn record(dir: &Path, header: &LogHeader, events: impl Iterator<Item = Event>) -> Aggregator {
    let mut writer = SampleLogWriter::create(dir, header).unwrap();
    let mut agg = Aggregator::new(aggregate_config(header), header.start);
    for event in events {
        writer.append(&event).unwrap();
        agg.handle(event);
    }
    writer.flush().unwrap();
    agg.finish();
    agg
}

fn options(from: Option<f64>, to: Option<f64>) -> RebuildOptions {
    RebuildOptions {
        window: Window::new(from, to),
        ..RebuildOptions::default()
    }
}

fn counts(agg: &Aggregator, view: StackView) -> BTreeMap<String, u64> {
    agg.folded(view).into_iter().collect()
}

fn total(agg: &Aggregator, view: StackView) -> u64 {
    agg.folded(view).iter().map(|(_, n)| n).sum()
}

fn recording_meta() -> RecordingMeta {
    RecordingMeta {
        pid: 4242,
        rank: Default::default(),
        host: None,
        command_line: "python train.py --epochs 90".into(),
        python_version: "3.11.8".into(),
        reader: "stackscope".into(),
        started_at: "2024-05-01T10:00:00+00:00".into(),
        duration_secs: SECS as f64 + 0.5,
        rate_hz: 100.0,
        ticks: 12_003,
        dropped: 17,
        late_ticks: 5,
        max_lateness_ms: 3.5,
        target_exited: true,
        exit_status: Some(3),
        exit_signal: None,
        gpu_devices: vec![GpuDeviceInfo {
            index: 0,
            name: "NVIDIA H200".into(),
            uuid: "GPU-1234".into(),
        }],
        gpu_unavailable: None,
        notices: vec!["a notice of the recording".into()],
        cpus_usable: None,
    }
}

#[test]
fn the_whole_window_gives_the_recordings_own_profiles() {
    let dir = tempfile::tempdir().unwrap();
    let h = header(false, true);
    let recorded = record(dir.path(), &h, Typical::new(SECS, 21));
    let rebuilt = rebuild(dir.path(), &RebuildOptions::default()).unwrap();
    let agg = &rebuilt.sink;
    assert!(recorded.samples() > 0 && recorded.idle_samples_skipped() > 0);
    assert!(total(&recorded, StackView::GpuIdle) > 0 && total(&recorded, StackView::GpuBusy) > 0);
    for view in [StackView::All, StackView::GpuIdle, StackView::GpuBusy] {
        assert_eq!(agg.folded(view), recorded.folded(view), "{view:?}");
    }
    assert_eq!(agg.gpu_timeline(), recorded.gpu_timeline());
    assert_eq!(agg.samples(), recorded.samples());
    assert_eq!(agg.idle_samples_skipped(), recorded.idle_samples_skipped());
    assert_eq!(agg.errors(), recorded.errors());
    assert_eq!(agg.config(), recorded.config());
    assert_eq!(agg.start(), recorded.start());
    let meta = recording_meta();
    let (a, b) = (agg.summary(&meta), recorded.summary(&meta));
    assert_eq!(a.threads, b.threads);
    assert_eq!(a.top_functions, b.top_functions);
    assert_eq!(a.gpu, b.gpu);

    // No summary.json: the meta comes from the header alone.
    assert_eq!(rebuilt.meta.pid, 4242);
    assert_eq!(rebuilt.meta.python_version, "3.11.8");
    assert_eq!(rebuilt.meta.started_at, h.started_at);
    assert_eq!(rebuilt.meta.ticks, 0);
    assert!((rebuilt.meta.duration_secs - SECS as f64).abs() < 0.1);
    assert_eq!(rebuilt.log.end, Some(LogEnd::Complete));
    assert_eq!(rebuilt.events_used, rebuilt.events_read);
}

#[test]
fn halves_partition_the_whole_and_each_has_fewer_samples() {
    let dir = tempfile::tempdir().unwrap();
    let recorded = record(dir.path(), &header(false, true), Typical::new(SECS, 22));
    let half = SECS as f64 / 2.0;
    let first = rebuild(dir.path(), &options(None, Some(half))).unwrap();
    let second = rebuild(dir.path(), &options(Some(half), None)).unwrap();
    let (a, b) = (&first.sink, &second.sink);
    assert!(a.samples() < recorded.samples() && b.samples() < recorded.samples());
    assert!(a.samples() > recorded.samples() / 3);
    assert_eq!(a.samples() + b.samples(), recorded.samples());
    let mut sum = counts(a, StackView::All);
    for (stack, n) in counts(b, StackView::All) {
        *sum.entry(stack).or_default() += n;
    }
    assert_eq!(sum, counts(&recorded, StackView::All));
    assert!((first.meta.duration_secs - half).abs() < 1e-9);
    assert!((second.meta.duration_secs - half).abs() < 0.1);
    assert_eq!(second.from_secs, half);

    // The first half reads its window's GPU readings, plus the one that covers its end.
    let to = Timestamp(START + SECS * SEC / 2);
    let after: Vec<_> = a.gpu_timeline().iter().filter(|g| g.time >= to).collect();
    assert_eq!(after.len(), 1, "{after:?}");
    assert!(after[0].time.seconds_since(to) < GPU_COVER_SECS);
    assert_eq!(first.log.end, Some(LogEnd::Complete));

    // Reading stops well past a window's end.
    let early = rebuild(dir.path(), &options(None, Some(10.0))).unwrap();
    assert_eq!(early.log.end, None);
    // 40 s of 60 (the window and 30 s more), not all of them.
    assert!(early.events_read < 40 * 410, "{}", early.events_read);
    assert_eq!(early.to_secs, 10.0);
}

#[test]
fn a_window_in_the_middle_holds_only_its_samples() {
    let dir = tempfile::tempdir().unwrap();
    let recorded = record(dir.path(), &header(true, true), Typical::new(SECS, 23));
    let rebuilt = rebuild(dir.path(), &options(Some(30.0), Some(40.0))).unwrap();
    let samples = rebuilt.sink.samples();
    // 4 threads at 100 Hz for 10 s, every sample kept (include_idle).
    assert_eq!(samples, 4_000);
    assert!(samples < recorded.samples());
    let times = rebuilt.sink.gpu_timeline();
    assert!(times.iter().all(|g| {
        let t = g.time.seconds_since(Timestamp(START));
        (30.0..40.0 + GPU_COVER_SECS).contains(&t)
    }));
}

#[test]
fn idle_threads_and_the_threshold_can_be_changed_afterwards() {
    let dir = tempfile::tempdir().unwrap();
    let recorded = record(dir.path(), &header(false, true), Typical::new(30, 24));
    let with_idle = rebuild(
        dir.path(),
        &RebuildOptions {
            include_idle: Some(true),
            ..RebuildOptions::default()
        },
    )
    .unwrap();
    assert_eq!(
        with_idle.sink.samples(),
        recorded.samples() + recorded.idle_samples_skipped()
    );
    // Readings are 10% and 90%: below 95% everything is idle.
    let strict = rebuild(
        dir.path(),
        &RebuildOptions {
            idle_below: Some(95.0),
            ..RebuildOptions::default()
        },
    )
    .unwrap();
    assert_eq!(total(&strict.sink, StackView::GpuBusy), 0);
    assert!(total(&strict.sink, StackView::GpuIdle) > total(&recorded, StackView::GpuIdle));
    assert_eq!(strict.sink.config().idle_below, 95.0);
}

#[test]
fn the_recordings_summary_fills_in_what_the_log_does_not_say() {
    let dir = tempfile::tempdir().unwrap();
    let recorded = record(dir.path(), &header(false, true), Typical::new(SECS, 25));
    let meta = recording_meta();
    stackscope_report::write_outputs(dir.path(), &recorded, &meta).unwrap();

    let whole = rebuild(dir.path(), &RebuildOptions::default())
        .unwrap()
        .meta;
    assert_eq!(whole.ticks, 12_003);
    assert_eq!(whole.dropped, 17);
    assert_eq!(whole.late_ticks, 5);
    assert_eq!(whole.gpu_devices, meta.gpu_devices);
    assert!(whole.target_exited);
    assert_eq!(whole.exit_status, Some(3));
    assert_eq!(whole.duration_secs, meta.duration_secs);
    assert_eq!(whole.notices, meta.notices);

    let explicit = rebuild(dir.path(), &options(Some(0.0), Some(1e6)))
        .unwrap()
        .meta;
    assert_eq!(explicit.ticks, 12_003);
    assert!(explicit.target_exited);

    let first = rebuild(dir.path(), &options(Some(10.0), Some(40.0)))
        .unwrap()
        .meta;
    assert_eq!(first.ticks, 0);
    assert!(!first.target_exited);
    assert_eq!(first.exit_status, None);
    assert_eq!(first.duration_secs, 30.0);
    assert_eq!(first.started_at, "2024-05-01T10:00:10+00:00");
    assert_eq!(first.gpu_devices, meta.gpu_devices);
    assert!(
        first
            .notices
            .iter()
            .any(|n| n.contains("12003 ticks, 17 dropped")),
        "{:?}",
        first.notices
    );

    let last = rebuild(dir.path(), &options(Some(50.0), None))
        .unwrap()
        .meta;
    assert!(last.target_exited);
    assert_eq!(last.exit_status, Some(3));
}

#[test]
fn a_report_directory_of_the_whole_window_matches_the_recordings_files() {
    let dir = tempfile::tempdir().unwrap();
    let recorded = record(dir.path(), &header(false, true), Typical::new(60, 26));
    let meta = recording_meta();
    stackscope_report::write_outputs(dir.path(), &recorded, &meta).unwrap();
    let rebuilt = rebuild(dir.path(), &RebuildOptions::default()).unwrap();
    let out = report_dir(dir.path(), &Window::WHOLE);
    assert_eq!(out, dir.path().join("report-0-end"));
    std::fs::create_dir_all(&out).unwrap();
    stackscope_report::write_outputs(&out, &rebuilt.sink, &rebuilt.meta).unwrap();
    for name in [
        "stacks.folded",
        "stacks-gpu-idle.folded",
        "stacks-gpu-busy.folded",
        "gpu-timeline.csv",
    ] {
        let a = std::fs::read_to_string(dir.path().join(name)).unwrap();
        let b = std::fs::read_to_string(out.join(name)).unwrap();
        assert!(!a.is_empty());
        assert!(a == b, "{name} differs");
    }
    let old: serde_json::Value =
        serde_json::from_slice(&std::fs::read(dir.path().join("summary.json")).unwrap()).unwrap();
    let new: serde_json::Value =
        serde_json::from_slice(&std::fs::read(out.join("summary.json")).unwrap()).unwrap();
    for key in [
        "samples",
        "threads",
        "top_functions",
        "gpu",
        "ticks",
        "dropped",
        "errors",
    ] {
        assert_eq!(old[key], new[key], "{key}");
    }
}

#[test]
fn a_log_cut_short_rebuilds_what_it_holds_and_says_so() {
    let dir = tempfile::tempdir().unwrap();
    record(dir.path(), &header(false, true), Typical::new(30, 27));
    let path = dir.path().join("samples.log");
    let len = std::fs::metadata(&path).unwrap().len();
    let file = std::fs::OpenOptions::new().write(true).open(&path).unwrap();
    file.set_len(len - 100).unwrap();
    let rebuilt = rebuild(dir.path(), &RebuildOptions::default()).unwrap();
    assert!(rebuilt.sink.samples() > 0);
    assert!(matches!(rebuilt.log.end, Some(LogEnd::Torn { .. })));
    assert!(rebuilt
        .meta
        .notices
        .iter()
        .any(|n| n.contains("unfinished block")));
}

#[test]
fn bad_requests_are_clear_errors() {
    let dir = tempfile::tempdir().unwrap();
    assert!(matches!(
        rebuild(dir.path(), &RebuildOptions::default()),
        Err(RebuildError::NoLog { .. })
    ));
    record(dir.path(), &header(false, true), Typical::new(10, 28));
    let err = rebuild(dir.path(), &options(Some(20.0), None)).unwrap_err();
    assert!(matches!(err, RebuildError::Window(_)), "{err}");
    assert!(
        err.to_string().contains("past the recording's end"),
        "{err}"
    );
    let err = rebuild(dir.path(), &options(Some(5.0), Some(2.0))).unwrap_err();
    assert!(matches!(err, RebuildError::Window(_)), "{err}");
    // A window past the end of an early-stopping read is still a window: it holds nothing.
    let empty = rebuild(dir.path(), &options(Some(9.5), Some(100.0))).unwrap();
    assert!(empty.sink.samples() < 400);
}

#[test]
fn process_roots_are_rebuilt_as_recorded() {
    let dir = tempfile::tempdir().unwrap();
    let mut h = header(true, true);
    h.process_root = true;
    let recorded = record(dir.path(), &h, Typical::new(20, 29));
    let rebuilt = rebuild(dir.path(), &RebuildOptions::default()).unwrap();
    assert!(rebuilt.sink.config().process_root);
    let folded = rebuilt.sink.folded(StackView::All);
    assert!(!folded.is_empty());
    assert_eq!(folded, recorded.folded(StackView::All));
}

#[test]
fn a_window_names_process_roots_as_the_recording_does() {
    let dir = tempfile::tempdir().unwrap();
    let mut h = header(true, true);
    h.process_root = true;
    let recorded = record(dir.path(), &h, Typical::new(30, 30));
    let whole = counts(&recorded, StackView::All);
    assert!(whole
        .keys()
        .all(|stack| stack.starts_with("process 4242 python train.py")));
    // The attach event is at the start, before this window.
    let rebuilt = rebuild(dir.path(), &options(Some(10.0), Some(20.0))).unwrap();
    let window = counts(&rebuilt.sink, StackView::All);
    assert!(!window.is_empty());
    for (stack, n) in &window {
        assert!(whole.get(stack).is_some_and(|all| all >= n), "{stack}");
    }
    // The attach event, 4 threads at 100 Hz for 10 s, the error of tick 1497, and the GPU
    // readings at 10.0 s, 10.17 s ... 19.83 s, and the one at 20.0 s that covers the end.
    assert_eq!(rebuilt.events_used, 1 + 4_000 + 1 + 61);
}

/// `top` and the recording agree on a recorded run: the log's events, replayed into `top`'s
/// table, give the rebuilt summary's GPU-idle samples, samples per thread and per function.
#[test]
fn top_replayed_from_the_log_agrees_with_the_summary() {
    use stackscope_aggregate::top::{TopModel, ViewOptions};
    use stackscope_samplelog::SampleLogReader;

    let dir = tempfile::tempdir().unwrap();
    let h = header(false, true);
    record(dir.path(), &h, Typical::new(30, 31));
    let rebuilt = rebuild(dir.path(), &RebuildOptions::default()).unwrap();
    let summary = rebuilt.sink.summary(&recording_meta());

    let mut top = TopModel::new(h.idle_below, h.gpu_enabled);
    let reader = SampleLogReader::open(&dir.path().join(stackscope_samplelog::LOG_FILE_NAME));
    for event in reader.unwrap() {
        top.handle(event.unwrap());
    }
    top.flush();
    let options = ViewOptions::default();
    let totals = top.totals(&options);
    let gpu = summary.gpu.as_ref().unwrap();
    assert!(
        gpu.samples_gpu_idle > 0 && gpu.samples_gpu_busy > 0,
        "{gpu:?}"
    );
    assert_eq!(totals.all_samples, summary.samples);
    assert_eq!(totals.gpu_idle_samples, gpu.samples_gpu_idle);
    let threads: BTreeMap<u64, u64> = top
        .thread_samples(&options)
        .into_iter()
        .filter(|&(_, n)| n > 0)
        .map(|(t, n)| (t.id, n))
        .collect();
    let expected: BTreeMap<u64, u64> = summary
        .threads
        .iter()
        .filter(|t| t.samples > 0)
        .map(|t| (t.python_thread_id, t.samples))
        .collect();
    assert_eq!(threads, expected);
    let rows = top.rows(&options);
    for stat in summary
        .top_functions
        .by_self
        .iter()
        .chain(&summary.top_functions.by_total)
    {
        let row = rows
            .iter()
            .find(|r| *r.function == stat.function && *r.file == stat.file)
            .unwrap_or_else(|| panic!("no row {}", stat.function));
        assert_eq!(
            (row.counts.own, row.counts.total),
            (stat.self_samples, stat.total_samples),
            "{}",
            stat.function
        );
    }
    for stat in &gpu.top_idle_functions {
        let row = rows
            .iter()
            .find(|r| *r.function == stat.function && *r.file == stat.file)
            .unwrap_or_else(|| panic!("no row {}", stat.function));
        assert_eq!(row.counts.gpu_idle, stat.total_samples, "{}", stat.function);
    }
}

#[test]
fn a_log_whose_oldest_segments_were_deleted_rebuilds_from_the_first_kept() {
    let dir = tempfile::tempdir().unwrap();
    let header = header(false, true);
    let limits = stackscope_samplelog::LogLimits {
        max_bytes: Some(256 << 10),
        max_age: None,
    };
    let mut writer = SampleLogWriter::create_with(
        dir.path(),
        &header,
        stackscope_samplelog::InternLimits::default(),
        limits,
    )
    .unwrap();
    let mut whole = Aggregator::new(aggregate_config(&header), header.start);
    for event in Typical::new(300, 31) {
        writer.append(&event).unwrap();
        whole.handle(event);
    }
    writer.flush().unwrap();
    whole.finish();
    let stats = writer.segments();
    drop(writer);
    assert!(stats.dropped_segments > 0, "{stats:?}");
    let kept_from = stats.first_kept.unwrap().seconds_since(header.start);

    let rebuilt = rebuild(dir.path(), &RebuildOptions::default()).unwrap();
    assert_eq!(rebuilt.from_secs, kept_from);
    let dropped = rebuilt.log.dropped.unwrap();
    assert_eq!(dropped.segments, stats.dropped_segments);
    assert_eq!(dropped.kept_from_secs, kept_from);
    assert_eq!(
        rebuilt.log.problems(),
        None,
        "deleted segments are no damage"
    );
    let said: Vec<&String> = rebuilt
        .meta
        .notices
        .iter()
        .filter(|n| n.contains("first kept segment"))
        .collect();
    assert_eq!(said.len(), 1, "{:?}", rebuilt.meta.notices);
    assert!(
        said[0].contains(&format!("starts at {kept_from:.1} s")),
        "{said:?}"
    );
    // What was kept, and only that: fewer samples than the recording's own profile.
    let samples = rebuilt.sink.samples();
    assert!(samples > 0 && samples < whole.samples(), "{samples}");
    // The process, attached before what was kept, keeps its command.
    assert_eq!(
        rebuilt.sink.summary(&rebuilt.meta).command_line,
        "python train.py --epochs 90"
    );

    // A window inside what was kept is rebuilt; one before it has nothing to rebuild.
    let inside = rebuild(dir.path(), &options(Some(kept_from + 5.0), None)).unwrap();
    assert!(inside.sink.samples() > 0 && inside.sink.samples() < samples);
    let err = rebuild(dir.path(), &options(None, Some(kept_from / 2.0))).unwrap_err();
    assert!(matches!(err, RebuildError::Window(_)), "{err}");
    assert!(err.to_string().contains("first kept segment"), "{err}");
}
