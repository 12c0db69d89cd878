//! A small fixed recording shared by the report tests: two threads, recursion, an idle thread,
//! sampling errors, and one GPU alternating idle and busy.

use stackscope_aggregate::{AggregateConfig, Aggregator, GpuDeviceInfo, RecordingMeta};
use stackscope_event::{
    Event, GpuSample, ProcessEventKind, SampleErrorKind, ThreadInfo, Timestamp,
};
use stackscope_testkit::events;

pub const START: Timestamp = Timestamp(1_000_000_000);
const MS: u64 = 1_000_000;

fn thread(name: &str, id: u64, active: bool) -> ThreadInfo {
    events::thread(0x7f00 + id, Some(4000 + id), Some(name), active)
}

fn at(t_ms: u64) -> Timestamp {
    Timestamp(START.0 + t_ms * MS)
}

fn stack(t_ms: u64, thread: &ThreadInfo, frames: &[(&str, &str, u32)]) -> Event {
    events::stack(at(t_ms), 4242, thread, frames)
}

fn stack_of(pid: u32, t_ms: u64, thread: &ThreadInfo, frames: &[(&str, &str, u32)]) -> Event {
    events::stack(at(t_ms), pid, thread, frames)
}

fn gpu(t_ms: u64, utilization: f32) -> Event {
    Event::Gpu(GpuSample {
        memory_utilization: Some(utilization / 2.0),
        memory_used_bytes: Some(3 << 30),
        memory_total_bytes: Some(16 << 30),
        power_watts: Some(if utilization > 50.0 { 250.0 } else { 60.0 }),
        sm_clock_mhz: Some(1400),
        ..events::gpu(at(t_ms), 0, utilization)
    })
}

/// One second per phase: loading (GPU at 4%) then training (GPU at 96%), four times.
pub fn recording(with_gpu: bool) -> (Aggregator, RecordingMeta) {
    let main = thread("MainThread", 1, true);
    let loader = thread("loader;0", 2, true);
    let sleeper = thread("watchdog", 3, false);
    let mut agg = Aggregator::new(
        AggregateConfig {
            include_idle: false,
            idle_below: 30.0,
            gpu_enabled: with_gpu,
            process_root: false,
            leave_out_startup: false,
            processes_apart: false,
            threads_apart: false,
        },
        START,
    );
    let mut ring = Vec::new();
    for t in (0..8_000u64).step_by(50) {
        let loading = (t / 1_000) % 2 == 0;
        if with_gpu && t % 200 == 0 {
            ring.push(gpu(t + 200, if loading { 4.0 } else { 96.0 }));
        }
        if loading {
            agg.handle(stack(
                t,
                &main,
                &[
                    ("decode", "data.py", 7),
                    ("load_batch", "data.py", 20),
                    ("main", "train.py", 50),
                    ("<module>", "train.py", 60),
                ],
            ));
        } else {
            // Recursion: forward calls itself through a layer.
            agg.handle(stack(
                t,
                &main,
                &[
                    ("matmul", "model.py", 3),
                    ("forward", "model.py", 12),
                    ("forward", "model.py", 14),
                    ("train_step", "train.py", 30),
                    ("main", "train.py", 52),
                    ("<module>", "train.py", 60),
                ],
            ));
        }
        if t % 200 == 0 {
            agg.handle(stack(t, &loader, &[("prefetch", "data.py", 40)]));
        }
        agg.handle(stack(t, &sleeper, &[("sleep", "watch.py", 5)]));
        if t % 500 == 0 {
            // NVML's ring is drained twice a second, after the stacks it covers.
            for event in ring.drain(..) {
                agg.handle(event);
            }
        }
        if t == 1_000 {
            agg.handle(events::sample_error(
                START,
                4242,
                SampleErrorKind::TornRead,
                "torn",
            ));
        }
    }
    for event in ring.drain(..) {
        agg.handle(event);
    }
    agg.finish();
    let meta = RecordingMeta {
        pid: 4242,
        rank: Default::default(),
        host: None,
        command_line: "python3 train.py --epochs 1".to_owned(),
        python_version: "3.12.3".to_owned(),
        reader: "stackscope".to_owned(),
        started_at: "2025-01-02T03:04:05+00:00".to_owned(),
        duration_secs: 8.0,
        rate_hz: 20.0,
        ticks: 160,
        dropped: 1,
        late_ticks: 2,
        max_lateness_ms: 3.5,
        target_exited: true,
        exit_status: Some(0),
        exit_signal: None,
        gpu_devices: if with_gpu {
            vec![GpuDeviceInfo {
                index: 0,
                name: "Fake GPU".to_owned(),
                uuid: "GPU-0000".to_owned(),
            }]
        } else {
            Vec::new()
        },
        gpu_unavailable: (!with_gpu).then(|| "--gpu off".to_owned()),
        notices: vec!["power readings are averaged by the driver".to_owned()],
        cpus_usable: None,
    };
    (agg, meta)
}

fn process(t_ms: u64, pid: u32, command_line: &str, kind: ProcessEventKind) -> Event {
    events::process(at(t_ms), pid, command_line, kind)
}

/// The command line of a DataLoader worker, long and with a ';' in it.
pub const WORKER_COMMAND: &str = "/usr/bin/python3 -c from multiprocessing.spawn import \
spawn_main; spawn_main(tracker_fd=5, pipe_handle=7) --multiprocessing-fork";

/// `--subprocesses`: a trainer and a DataLoader worker that starts after a second and exits
/// after three, both with a thread named MainThread.
pub fn process_recording() -> (Aggregator, RecordingMeta) {
    let main = thread("MainThread", 1, true);
    let mut agg = Aggregator::new(
        AggregateConfig {
            include_idle: false,
            idle_below: 30.0,
            gpu_enabled: false,
            process_root: true,
            leave_out_startup: false,
            processes_apart: false,
            threads_apart: false,
        },
        START,
    );
    agg.handle(process(
        0,
        4242,
        "python3 train.py --epochs 1",
        ProcessEventKind::Attached,
    ));
    for t in (0..4_000u64).step_by(100) {
        agg.handle(stack_of(
            4242,
            t,
            &main,
            &[("train_step", "train.py", 30), ("main", "train.py", 52)],
        ));
        if t == 1_000 {
            agg.handle(process(t, 4300, WORKER_COMMAND, ProcessEventKind::Attached));
        }
        if (1_000..3_000).contains(&t) {
            agg.handle(stack_of(
                4300,
                t,
                &main,
                &[("decode", "data.py", 7), ("_worker_loop", "worker.py", 300)],
            ));
        }
        if t == 3_000 {
            agg.handle(process(t, 4300, "", ProcessEventKind::Exited));
        }
    }
    agg.finish();
    let meta = RecordingMeta {
        pid: 4242,
        command_line: "python3 train.py --epochs 1".to_owned(),
        python_version: "3.12.3".to_owned(),
        reader: "stackscope".to_owned(),
        started_at: "2025-01-02T03:04:05+00:00".to_owned(),
        duration_secs: 4.0,
        rate_hz: 10.0,
        ticks: 40,
        gpu_unavailable: Some("--gpu off".to_owned()),
        ..RecordingMeta::default()
    };
    (agg, meta)
}
