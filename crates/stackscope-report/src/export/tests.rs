//! The writers on hand-made traces: exact slices, labels and names.

use stackscope_aggregate::{AggregateConfig, RecordingMeta, SampleTrace};
use stackscope_event::{
    CgroupSample, Event, Frame, GpuSample, MemorySample, ProcessGpuMemory, StackSample, ThreadInfo,
    Timestamp,
};
use stackscope_testkit::events::{self, MS};

use super::perfetto::{function_of_frames, slices};
use super::*;

fn sample(time_ms: u64, pid: u32, tid: u64, name: &str, frames: &[(&str, u32)]) -> Event {
    with_activity(sample_of(time_ms, pid, tid, name, frames), true)
}

fn with_activity(mut event: Event, active: bool) -> Event {
    if let Event::Stack(s) = &mut event {
        s.thread.active = active;
    }
    event
}

fn sample_of(time_ms: u64, pid: u32, tid: u64, name: &str, frames: &[(&str, u32)]) -> Event {
    let thread = events::thread(tid + 1000, Some(tid), Some(name), true);
    // Innermost first, as the sampler reads them.
    let frames = frames
        .iter()
        .rev()
        .map(|&(f, line)| Frame::python(f, "app.py", line))
        .collect();
    events::stack_of(events::ms(time_ms), pid, thread, frames)
}

fn meta() -> RecordingMeta {
    RecordingMeta {
        pid: 7,
        command_line: "python app.py".into(),
        rate_hz: 100.0,
        ..RecordingMeta::default()
    }
}

fn info(meta: &RecordingMeta) -> ExportInfo<'_> {
    ExportInfo {
        meta,
        time_nanos: 1_700_000_000_000_000_000,
        from_secs: 0.0,
        to_secs: 1.0,
    }
}

/// main -> a (10, 20 ms; a's line changes), main -> b (30 ms), a gap, main -> a (1.2 s),
/// seen idle (1.21 s), main -> a (1.22 s).
fn trace(process_root: bool) -> SampleTrace {
    let config = AggregateConfig {
        gpu_enabled: false,
        process_root,
        ..AggregateConfig::default()
    };
    let mut trace = SampleTrace::new(config, Timestamp(0));
    trace.handle(sample(10, 7, 70, "MainThread", &[("main", 1), ("a", 5)]));
    trace.handle(sample(20, 7, 70, "MainThread", &[("main", 1), ("a", 6)]));
    trace.handle(sample(30, 7, 70, "MainThread", &[("main", 2), ("b", 9)]));
    trace.handle(sample(1200, 7, 70, "MainThread", &[("main", 1), ("a", 5)]));
    let idle = sample(1210, 7, 70, "MainThread", &[("main", 1), ("sleep", 4)]);
    trace.handle(with_activity(idle, false));
    trace.handle(sample(1220, 7, 70, "MainThread", &[("main", 1), ("a", 5)]));
    trace.handle(sample(15, 8, 80, "worker", &[("w", 3)]));
    trace.finish();
    trace
}

#[test]
fn slices_follow_functions_and_end_at_gaps() {
    let trace = trace(false);
    let functions = function_of_frames(&trace);
    let got: Vec<(String, u64, u64, usize, u64)> =
        slices(&trace, &functions, &trace.threads()[0], 10 * MS)
            .iter()
            .map(|s| {
                let f = &trace.frames()[s.frame as usize];
                (
                    f.function.to_string(),
                    s.start.0 / MS,
                    s.end.0 / MS,
                    s.depth,
                    s.samples,
                )
            })
            .collect();
    assert_eq!(
        got,
        vec![
            // main goes on from 10 to 40 ms whatever its line; a lasts two samples, b one.
            ("main".into(), 10, 40, 0, 3),
            ("a".into(), 10, 30, 1, 2),
            ("b".into(), 30, 40, 1, 1),
            // 1.16 s without a sample: everything closed, opened again.
            ("main".into(), 1200, 1210, 0, 1),
            ("a".into(), 1200, 1210, 1, 1),
            // Seen idle in between: not one stretch of work, though the stacks are equal.
            ("main".into(), 1220, 1230, 0, 1),
            ("a".into(), 1220, 1230, 1, 1),
        ]
    );
}

#[test]
fn pprof_has_labels_locations_and_the_period() {
    let trace = trace(false);
    let meta = meta();
    let profile = build_profile(&trace, &info(&meta));
    let s = |i: i64| profile.string_table[i as usize].as_str();
    assert_eq!(s(0), "");
    assert_eq!(profile.period, 10_000_000);
    assert_eq!(profile.duration_nanos, 1_000_000_000);
    let total: i64 = profile.sample.iter().map(|x| x.value[0]).sum();
    assert_eq!(total, 6);
    let worker = profile
        .sample
        .iter()
        .find(|x| x.label.iter().any(|l| s(l.str) == "worker"))
        .expect("the worker's sample");
    let labels: Vec<(&str, &str)> = worker.label.iter().map(|l| (s(l.key), s(l.str))).collect();
    assert_eq!(
        labels,
        [
            ("thread", "worker"),
            ("thread_id", "80"),
            ("pid", "8"),
            ("gpu_state", "unknown")
        ]
    );
    assert_eq!(worker.value, [1, 10_000_000]);
    // One function per (name, file), a location per line.
    let names: Vec<&str> = profile.function.iter().map(|f| s(f.name)).collect();
    assert_eq!(names, ["main", "a", "b", "w"]);
    assert_eq!(profile.location.len(), 6);
}

#[test]
fn native_frames_are_functions_of_their_own() {
    let config = AggregateConfig {
        gpu_enabled: false,
        ..AggregateConfig::default()
    };
    let mut trace = SampleTrace::new(config, Timestamp(0));
    let native = Frame {
        native: true,
        origin: stackscope_event::FileOrigin::Native,
        ..Frame::python("step", "libtorch.so", 0)
    };
    trace.handle(Event::Stack(StackSample {
        time: Timestamp(MS),
        pid: 7,
        thread: ThreadInfo {
            os_thread_id: Some(70),
            python_thread_id: 1,
            name: None,
            active: true,
            owns_gil: true,
        },
        frames: vec![native, Frame::python("step", "libtorch.so", 0)].into(),
    }));
    trace.finish();
    let meta = meta();
    let profile = build_profile(&trace, &info(&meta));
    assert_eq!(profile.function.len(), 2, "a native and a Python function");
    assert_eq!(profile.sample[0].location_id.len(), 2);
    let thread = profile.sample[0]
        .label
        .iter()
        .find(|l| profile.string_table[l.key as usize] == "thread")
        .map(|l| profile.string_table[l.str as usize].as_str());
    assert_eq!(
        thread,
        Some("thread 70"),
        "named as the flamegraphs name it"
    );
}

#[test]
fn speedscope_names_threads_as_py_spy_does() {
    let meta = meta();
    for (process_root, expected) in [
        (false, ["Thread 70 \"MainThread\"", "Thread 80 \"worker\""]),
        (
            true,
            [
                "Process 7 Thread 70 \"MainThread\"",
                "Process 8 Thread 80 \"worker\"",
            ],
        ),
    ] {
        let mut out = Vec::new();
        write_speedscope(&trace(process_root), &info(&meta), &mut out).expect("written");
        let file: serde_json::Value = serde_json::from_slice(&out).expect("JSON");
        let names: Vec<&str> = file["profiles"]
            .as_array()
            .expect("profiles")
            .iter()
            .map(|p| p["name"].as_str().unwrap_or_default())
            .collect();
        assert_eq!(names, expected);
        // MainThread: a, a(line 6), b, a, a: consecutive equal stacks only are merged.
        let main = &file["profiles"][0];
        assert_eq!(main["samples"].as_array().map(Vec::len), Some(4));
        assert_eq!(main["weights"][3].as_f64(), Some(0.02));
        assert_eq!(main["endValue"].as_f64(), Some(0.05));
    }
}

#[test]
fn gpu_counters_sit_where_their_interval_begins() {
    let config = AggregateConfig::default();
    let mut trace = SampleTrace::new(config, Timestamp(0));
    for (t, u) in [(100, 80.0), (300, 10.0), (200, 50.0)] {
        trace.handle(Event::Gpu(GpuSample {
            time: Timestamp(t * MS),
            device: 0,
            utilization: Some(u),
            power_watts: Some(300.0),
            ..GpuSample::default()
        }));
    }
    trace.finish();
    let meta = meta();
    let mut out = Vec::new();
    write_perfetto(&trace, &info(&meta), &mut out).expect("written");
    let file: serde_json::Value = serde_json::from_slice(&out).expect("JSON");
    let counters: Vec<(f64, f64)> = file["traceEvents"]
        .as_array()
        .expect("events")
        .iter()
        .filter(|e| e["ph"] == "C")
        .map(|e| {
            assert_eq!(e["name"], "GPU 0");
            assert_eq!(e["args"]["power"], 300.0);
            (
                e["ts"].as_f64().unwrap_or_default(),
                e["args"]["utilization"].as_f64().unwrap_or_default(),
            )
        })
        .collect();
    // In time order; 50% describes (100, 200] ms, so it starts at 100 ms.
    assert_eq!(
        counters,
        [(100_000.0, 80.0), (100_000.0, 50.0), (200_000.0, 10.0)]
    );
}

/// The trace's counter events, as (name, pid, ts in ms, args).
fn counters(trace: &SampleTrace) -> Vec<(String, u64, f64, serde_json::Value)> {
    let meta = meta();
    let mut out = Vec::new();
    write_perfetto(trace, &info(&meta), &mut out).expect("written");
    let file: serde_json::Value = serde_json::from_slice(&out).expect("JSON");
    file["traceEvents"]
        .as_array()
        .expect("events")
        .iter()
        .filter(|e| e["ph"] == "C")
        .map(|e| {
            (
                e["name"].as_str().unwrap_or_default().to_owned(),
                e["pid"].as_u64().unwrap_or_default(),
                e["ts"].as_f64().unwrap_or_default() / 1e3,
                e["args"].clone(),
            )
        })
        .collect()
}

const MIB: u64 = 1 << 20;

#[test]
fn memory_counters_are_each_processs_and_the_cgroups() {
    let config = AggregateConfig::default();
    let mut trace = SampleTrace::new(config, Timestamp(0));
    let memory = |t: u64, pid: u32, rss: u64, private: Option<u64>| {
        Event::Memory(MemorySample {
            time: Timestamp(t * MS),
            pid,
            rss_bytes: rss * MIB,
            private_bytes: private.map(|p| p * MIB),
            shared_bytes: private.map(|_| 10 * MIB),
            swap_bytes: None,
        })
    };
    // Out of order, as their producer's batches interleave.
    trace.handle(memory(200, 8, 300, None));
    trace.handle(memory(100, 7, 1024, Some(900)));
    trace.handle(memory(100, 8, 250, None));
    trace.handle(Event::Cgroup(CgroupSample {
        time: Timestamp(150 * MS),
        usage_bytes: 1536 * MIB,
        limit_bytes: Some(4096 * MIB),
        oom_kills: Some(0),
    }));
    trace.handle(Event::Cgroup(CgroupSample {
        time: Timestamp(250 * MS),
        usage_bytes: 1600 * MIB + MIB / 2,
        limit_bytes: None,
        oom_kills: None,
    }));
    trace.finish();
    let got = counters(&trace);
    assert_eq!(
        got,
        [
            (
                "memory".to_owned(),
                7,
                100.0,
                serde_json::json!({"rss": 1024.0, "private": 900.0, "shared": 10.0})
            ),
            (
                "memory".to_owned(),
                8,
                100.0,
                serde_json::json!({"rss": 250.0})
            ),
            (
                "memory".to_owned(),
                8,
                200.0,
                serde_json::json!({"rss": 300.0})
            ),
            // The cgroup sits in the target's process, its limit where there is one.
            (
                "memory cgroup".to_owned(),
                7,
                150.0,
                serde_json::json!({"usage": 1536.0, "limit": 4096.0, "oom_kills": 0})
            ),
            (
                "memory cgroup".to_owned(),
                7,
                250.0,
                serde_json::json!({"usage": 1600.5})
            ),
        ]
    );
    // A process with memory and no sampled thread is named all the same.
    let meta = meta();
    let mut out = Vec::new();
    write_perfetto(&trace, &info(&meta), &mut out).expect("written");
    let file: serde_json::Value = serde_json::from_slice(&out).expect("JSON");
    let named: Vec<u64> = file["traceEvents"]
        .as_array()
        .expect("events")
        .iter()
        .filter(|e| e["name"] == "process_name")
        .filter_map(|e| e["pid"].as_u64())
        .collect();
    assert_eq!(named, [7, 8]);
}

#[test]
fn gpu_memory_counters_are_per_process_and_device() {
    let config = AggregateConfig::default();
    let mut trace = SampleTrace::new(config, Timestamp(0));
    let reading = |t: u64, device: u32, pids: Option<Vec<u32>>, memory: &[(u32, u64)]| {
        Event::Gpu(GpuSample {
            time: Timestamp(t * MS),
            device,
            utilization: Some(50.0),
            compute_pids: pids,
            process_memory: memory
                .iter()
                .map(|&(pid, mib)| ProcessGpuMemory {
                    pid,
                    bytes: mib * MIB,
                })
                .collect(),
            ..GpuSample::default()
        })
    };
    trace.handle(reading(100, 0, Some(vec![7, 8]), &[(7, 2048), (8, 512)]));
    trace.handle(reading(100, 1, Some(vec![7]), &[(7, 100)]));
    // A reading of the driver's ring that says nothing of processes.
    trace.handle(reading(150, 0, None, &[]));
    // Pid 8 left device 0.
    trace.handle(reading(200, 0, Some(vec![7]), &[(7, 3072)]));
    // Listed, its memory not said: not gone.
    trace.handle(reading(250, 1, Some(vec![7]), &[]));
    // Nothing on device 1 any more.
    trace.handle(reading(300, 1, Some(vec![]), &[]));
    trace.finish();
    let got: Vec<(u64, f64, serde_json::Value)> = counters(&trace)
        .into_iter()
        .filter(|c| c.0 == "memory")
        .map(|(_, pid, ts, args)| (pid, ts, args))
        .collect();
    assert_eq!(
        got,
        [
            (7, 100.0, serde_json::json!({"GPU 0": 2048.0})),
            (8, 100.0, serde_json::json!({"GPU 0": 512.0})),
            (7, 100.0, serde_json::json!({"GPU 1": 100.0})),
            (7, 200.0, serde_json::json!({"GPU 0": 3072.0})),
            (8, 200.0, serde_json::json!({"GPU 0": 0.0})),
            (7, 300.0, serde_json::json!({"GPU 1": 0.0})),
        ]
    );
}

/// A recording's memory readings go through its sample log into a window's export: those in
/// the window, at their times.
#[test]
fn a_windows_memory_counters_come_from_the_sample_log() {
    use stackscope_samplelog::{SampleLogWriter, Window};
    let dir = tempfile::tempdir().expect("a directory");
    let header = stackscope_testkit::synthetic::header(false, true);
    let start = header.start.0;
    let mut writer = SampleLogWriter::create(dir.path(), &header).expect("a log");
    for tenth in 0..50u64 {
        let time = Timestamp(start + tenth * 100 * MS);
        writer
            .append(&sample_of(
                time.0 / MS,
                4242,
                1,
                "MainThread",
                &[("main", 1)],
            ))
            .expect("appended");
        writer
            .append(&Event::Memory(MemorySample {
                time,
                pid: 4242,
                rss_bytes: (100 + tenth) * MIB,
                ..MemorySample::default()
            }))
            .expect("appended");
        writer
            .append(&Event::Cgroup(CgroupSample {
                time,
                usage_bytes: (200 + tenth) * MIB,
                limit_bytes: Some(1024 * MIB),
                oom_kills: None,
            }))
            .expect("appended");
    }
    writer.flush().expect("flushed");
    let options = crate::RebuildOptions {
        window: Window::new(Some(1.0), Some(2.0)),
        idle_below: None,
        include_idle: None,
        processes_apart: false,
        threads_apart: false,
    };
    let read = crate::read_trace(dir.path(), &options).expect("read");
    let rss: Vec<(f64, f64)> = counters(&read.sink)
        .into_iter()
        .filter(|c| c.0 == "memory")
        .map(|(_, _, ms, args)| (ms, args["rss"].as_f64().unwrap_or_default()))
        .collect();
    let expected: Vec<(f64, f64)> = (10..20)
        .map(|t| (t as f64 * 100.0, 100.0 + t as f64))
        .collect();
    assert_eq!(rss, expected);
    let cgroup = counters(&read.sink)
        .into_iter()
        .filter(|c| c.0 == "memory cgroup")
        .count();
    assert_eq!(cgroup, 10);
}

#[test]
fn formats_parse_by_name() {
    assert_eq!("pprof".parse(), Ok(ExportFormat::Pprof));
    assert_eq!(ExportFormat::Perfetto.file_name(), "trace.json");
    assert!("svg".parse::<ExportFormat>().is_err());
}

/// A GIL slice as (tid, name, start ms, length ms, samples, holder).
type GilSliceRow<'a> = (u64, &'a str, f64, f64, u64, Option<&'a str>);

/// A sample of `tid` (process 7, "main" or "metrics") that holds the GIL, or not.
fn gil_sample(time_ms: u64, tid: u64, name: &str, active: bool, owns_gil: bool) -> Event {
    let mut event = sample(time_ms, 7, tid, name, &[("main", 1), ("step", 2)]);
    if let Event::Stack(s) = &mut event {
        s.thread.active = active;
        s.thread.owns_gil = owns_gil;
    }
    event
}

#[test]
fn the_gil_is_a_track_of_slices_beside_each_threads_own() {
    let config = AggregateConfig {
        gpu_enabled: false,
        ..AggregateConfig::default()
    };
    let mut trace = SampleTrace::new(config, Timestamp(0));
    // Both run their step at 0 ms without the GIL (a wait there is then one for the GIL); main
    // waits (read before the holder) at 10-30 ms while metrics holds; at 40 ms main holds and
    // metrics waits.
    trace.handle(gil_sample(0, 70, "main", true, false));
    trace.handle(gil_sample(0, 80, "metrics", true, false));
    for t in [10, 20, 30] {
        trace.handle(gil_sample(t, 70, "main", false, false));
        trace.handle(gil_sample(t, 80, "metrics", true, true));
    }
    trace.handle(gil_sample(40, 70, "main", true, true));
    trace.handle(gil_sample(40, 80, "metrics", false, false));
    trace.finish();
    let meta = meta();
    let mut out = Vec::new();
    write_perfetto(&trace, &info(&meta), &mut out).expect("written");
    let file: serde_json::Value = serde_json::from_slice(&out).expect("JSON");
    let events = file["traceEvents"].as_array().expect("events");
    let track_name = |tid: u64| {
        events
            .iter()
            .find(|e| e["name"] == "thread_name" && e["tid"] == tid)
            .map(|e| e["args"]["name"].as_str().unwrap_or_default().to_owned())
    };
    // Each thread's GIL track is a thread of its own, apart from its stack slices' track.
    let (main_gil, metrics_gil) = ((1 << 30) + 70, (1 << 30) + 80);
    assert_eq!(track_name(main_gil).as_deref(), Some("main GIL"));
    assert_eq!(track_name(metrics_gil).as_deref(), Some("metrics GIL"));
    assert_eq!(track_name(70).as_deref(), Some("main"));
    let gil: Vec<GilSliceRow> = events
        .iter()
        .filter(|e| e["cat"] == "gil")
        .map(|e| {
            assert_eq!(e["ph"], "X");
            assert_eq!(e["pid"], 7);
            (
                e["tid"].as_u64().unwrap_or_default(),
                e["name"].as_str().unwrap_or_default(),
                e["ts"].as_f64().unwrap_or_default() / 1e3,
                e["dur"].as_f64().unwrap_or_default() / 1e3,
                e["args"]["samples"].as_u64().unwrap_or_default(),
                e["args"]["holder"].as_str(),
            )
        })
        .collect();
    assert_eq!(
        gil,
        vec![
            // The wait ends where the hold begins: one track's slices never overlap.
            (main_gil, "GIL wait", 10.0, 30.0, 3, Some("metrics")),
            (main_gil, "GIL held", 40.0, 10.0, 1, None),
            (metrics_gil, "GIL held", 10.0, 30.0, 3, None),
            (metrics_gil, "GIL wait", 40.0, 10.0, 1, Some("main")),
        ]
    );
    // The stack slices stay on the threads' own tracks: main's two active samples, apart.
    let main_stack: Vec<(&str, f64)> = events
        .iter()
        .filter(|e| e["ph"] == "X" && e["tid"] == 70)
        .map(|e| {
            let name = e["name"].as_str().unwrap_or_default();
            (name, e["ts"].as_f64().unwrap_or_default() / 1e3)
        })
        .collect();
    assert_eq!(
        main_stack,
        [("main", 0.0), ("step", 0.0), ("main", 40.0), ("step", 40.0)]
    );
}
