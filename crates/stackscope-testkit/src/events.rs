//! Builders of the events the sampler sends, for tests that feed an aggregator, a report or a
//! sample log by hand. Times are `Timestamp`s (see [`ms`]); frames are given innermost first, as
//! the sampler sends them, as `(function, file, line)`.

use stackscope_event::{
    Event, Frame, GpuSample, ProcessEvent, ProcessEventKind, SampleError, SampleErrorKind,
    StackSample, ThreadInfo, Timestamp,
};

pub const MS: u64 = 1_000_000;
pub const SEC: u64 = 1_000_000_000;

/// `t` milliseconds after the clock's zero.
pub fn ms(t: u64) -> Timestamp {
    Timestamp(t * MS)
}

/// A thread: Python id, OS id and name as given; it holds the GIL when it is active.
pub fn thread(
    python_thread_id: u64,
    os_thread_id: Option<u64>,
    name: Option<&str>,
    active: bool,
) -> ThreadInfo {
    ThreadInfo {
        os_thread_id,
        python_thread_id,
        name: name.map(Into::into),
        active,
        owns_gil: active,
    }
}

/// Python frames, innermost first.
pub fn frames(frames: &[(&str, &str, u32)]) -> Vec<Frame> {
    frames
        .iter()
        .map(|&(function, file, line)| Frame::python(function, file, line))
        .collect()
}

/// One thread's stack at `time`, of Python frames (innermost first).
pub fn stack(
    time: Timestamp,
    pid: u32,
    thread: &ThreadInfo,
    python: &[(&str, &str, u32)],
) -> Event {
    stack_of(time, pid, thread.clone(), frames(python))
}

/// One thread's stack at `time`, of any frames.
pub fn stack_of(time: Timestamp, pid: u32, thread: ThreadInfo, frames: Vec<Frame>) -> Event {
    Event::Stack(StackSample {
        time,
        pid,
        thread,
        frames: frames.into(),
    })
}

/// A GPU reading with only its utilization; set more with struct update syntax
/// (`GpuSample { power_watts: Some(250.0), ..gpu(t, 0, 96.0) }`).
pub fn gpu(time: Timestamp, device: u32, utilization: f32) -> GpuSample {
    GpuSample {
        time,
        device,
        utilization: Some(utilization),
        ..GpuSample::default()
    }
}

/// [`gpu`] as an event.
pub fn gpu_event(time: Timestamp, device: u32, utilization: f32) -> Event {
    Event::Gpu(gpu(time, device, utilization))
}

/// A process coming under (or leaving) the sampler's watch.
/// A memory reading of `pid` with its resident memory alone (as between `smaps_rollup` reads).
pub fn rss_event(time: Timestamp, pid: u32, bytes: u64) -> Event {
    Event::Memory(stackscope_event::MemorySample {
        time,
        pid,
        rss_bytes: bytes,
        ..Default::default()
    })
}

/// A GPU reading listing `pids` with a compute context (`None`: the driver cannot list them) and
/// each `(pid, bytes)` of `memory` as a process's GPU memory.
pub fn gpu_memory_event(
    time: Timestamp,
    device: u32,
    pids: Option<Vec<u32>>,
    memory: &[(u32, u64)],
) -> Event {
    Event::Gpu(GpuSample {
        time,
        device,
        compute_pids: pids,
        process_memory: memory
            .iter()
            .map(|&(pid, bytes)| stackscope_event::ProcessGpuMemory { pid, bytes })
            .collect(),
        ..GpuSample::default()
    })
}

pub fn process(time: Timestamp, pid: u32, command_line: &str, kind: ProcessEventKind) -> Event {
    Event::Process(ProcessEvent {
        time,
        pid,
        command_line: command_line.to_owned(),
        kind,
        rank: Default::default(),
        how: None,
    })
}

/// A failed sampling attempt.
pub fn sample_error(time: Timestamp, pid: u32, kind: SampleErrorKind, message: &str) -> Event {
    Event::SampleError(SampleError {
        time,
        pid,
        kind,
        message: message.to_owned(),
    })
}

/// When an event happened.
pub fn event_time(event: &Event) -> Timestamp {
    event.time()
}

/// Events compare by their `Debug` form (`Event` has no `PartialEq`).
pub fn same(a: &Event, b: &Event) -> bool {
    format!("{a:?}") == format!("{b:?}")
}
