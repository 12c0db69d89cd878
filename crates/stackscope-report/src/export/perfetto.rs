//! A Chrome trace (JSON trace event format), which Perfetto (ui.perfetto.dev) and
//! chrome://tracing open: per thread, nested complete slices (`"ph":"X"`) built from
//! consecutive samples that share frames; per GPU a counter track (`"ph":"C"`) with its
//! utilization, memory and power, in the target's process so that it sits under its threads;
//! per process its memory (`memory rss`, and `memory private`, `memory shared`, `memory swap`
//! where read, `memory GPU N` for its memory on each GPU), and in the target's process the
//! job's memory cgroup (`memory cgroup usage`, `limit`, `oom_kills`). Memory is in MiB, as the
//! GPU's is.
//!
//! Times are microseconds since the recording's start (the zero of `--from`/`--to`), on the
//! one clock the samples and GPU readings share. A sample stands for one sampling period. A
//! function's slice lasts while consecutive samples of its thread keep it (and every function
//! above it) on the stack, whichever line of it runs (`args.line` is the line it began at); it
//! ends where the thread was seen idle (a sample left out, without `--idle`) or was not sampled
//! for a second (and ten periods). Each slice's `args.samples` counts its samples, so the outermost slices of a
//! thread add up to the thread's samples in `stacks.folded` (but for samples with no frame at
//! all, a thread caught at its very start or end, which no slice can show).
//!
//! A GPU reading at time T describes the interval since the device's previous reading, so its
//! counter value is placed at that previous reading's time: a dip then lies under the slices
//! of the code that ran while the GPU idled, not one reading late. Memory readings are instants:
//! each is placed at its own time.
//!
//! The GIL: per thread, slices `GIL held` (consecutive samples in which it held the GIL) and
//! `GIL wait` (in which it waited for the GIL another thread of its process held; `args.holder`
//! names that thread), as the one GIL rule decides each sample from its whole read (the
//! trace's [`SampleTrace::gil_tracks`]). They go on a track of their own beside the thread's,
//! named `<thread name> GIL`: a GIL run starts and ends anywhere inside the stack's slices, so
//! on the thread's own track it would break their nesting. Chrome's JSON format has no other
//! way to give a thread a second track that Perfetto shows by it (async slices are laid out per
//! process, by name), so the track is a thread of its own, with an id apart from every OS
//! thread's: `GIL_TID_BASE` plus the thread's id (Linux thread ids are below 2^22; Perfetto
//! reads ids as 32 bits). A GIL slice lasts from its first sample to one period after its last,
//! and ends where the next one begins.

use std::collections::{BTreeMap, BTreeSet, HashMap};
use std::io::Write;

use serde_json::{json, Map, Value};
use stackscope_aggregate::{GilState, SampleTrace, TraceThread};
use stackscope_event::{CgroupSample, GpuSample, MemorySample, Timestamp};

use super::ExportInfo;
use crate::ReportError;

/// Longest command line shown as a process's name.
const PROCESS_NAME_CHARS: usize = 100;
const MIB: f64 = 1024.0 * 1024.0;
/// The counter event of a process's memory: Perfetto names each of its tracks by the event's
/// name and the argument's (`memory rss`).
const MEMORY_COUNTER: &str = "memory";
/// The counter event of the job's memory cgroup (`memory cgroup usage`).
const CGROUP_COUNTER: &str = "memory cgroup";
/// Without a sample for this long (and at least ten periods), a thread's slices end even though
/// it was never seen idle: the target was stopped, or the sampler stalled on a loaded machine.
const GAP_NANOS: u64 = 1_000_000_000;
const GAP_PERIODS: u64 = 10;
/// The GIL track of a thread goes by this plus the thread's id: above every Linux thread id
/// (`pid_max` is at most 2^22) and within the 32 bits Perfetto reads.
const GIL_TID_BASE: u64 = 1 << 30;
/// The GIL slices' names and category.
const GIL_HELD: &str = "GIL held";
const GIL_WAIT: &str = "GIL wait";
const GIL_CATEGORY: &str = "gil";

/// Writes the trace as Chrome trace event JSON: the processes' and threads' names, the
/// threads' slices, then the GPUs' counters.
pub fn write_perfetto<W: Write>(
    trace: &SampleTrace,
    info: &ExportInfo<'_>,
    w: W,
) -> Result<(), ReportError> {
    let mut events = Events::start(w)?;
    write_names(trace, info, &mut events)?;
    write_slices(trace, info, &mut events)?;
    write_gil_slices(trace, info, &mut events)?;
    write_gpu_counters(trace, info, &mut events)?;
    write_memory_counters(trace, &mut events)?;
    write_gpu_memory_counters(trace, &mut events)?;
    write_cgroup_counters(trace, info, &mut events)?;
    events.finish()
}

/// The `traceEvents` array, written one event at a time.
struct Events<W: Write> {
    w: W,
    first: bool,
}

impl<W: Write> Events<W> {
    fn start(mut w: W) -> Result<Events<W>, ReportError> {
        w.write_all(b"{\"displayTimeUnit\":\"ms\",\"traceEvents\":[")?;
        Ok(Events { w, first: true })
    }

    fn emit(&mut self, event: Value) -> Result<(), ReportError> {
        self.w.write_all(if self.first { b"\n" } else { b",\n" })?;
        self.first = false;
        serde_json::to_writer(&mut self.w, &event)?;
        Ok(())
    }

    fn finish(mut self) -> Result<(), ReportError> {
        self.w.write_all(b"\n]}\n")?;
        self.w.flush()?;
        Ok(())
    }
}

/// A name per process (its rank and command line) and per thread.
fn write_names<W: Write>(
    trace: &SampleTrace,
    info: &ExportInfo<'_>,
    events: &mut Events<W>,
) -> Result<(), ReportError> {
    let mut pids: BTreeSet<u32> = trace.threads().iter().map(|t| t.pid).collect();
    pids.insert(info.meta.pid);
    // A process whose memory was read but none of whose threads was kept still gets a name.
    pids.extend(trace.memory_readings().iter().map(|m| m.pid));
    for &pid in &pids {
        let command = if pid == info.meta.pid {
            Some(info.meta.command_line.as_str())
        } else {
            trace.command_line(pid)
        };
        let command = match command.filter(|c| !c.is_empty()) {
            Some(c) => shorten(c, PROCESS_NAME_CHARS),
            None => "python".to_owned(),
        };
        // Perfetto shows the pid beside the name; a launcher's rank is what people look for.
        let name = match trace.rank(pid) {
            Some(rank) => format!("rank {rank}: {command}"),
            None => command,
        };
        events.emit(
            json!({"name": "process_name", "ph": "M", "pid": pid, "tid": 0,
                           "args": {"name": name}}),
        )?;
    }
    for thread in trace.threads() {
        events.emit(
            json!({"name": "thread_name", "ph": "M", "pid": thread.pid, "tid": tid(thread),
                   "args": {"name": thread.name}}),
        )?;
    }
    Ok(())
}

/// Every thread's slices, as complete events.
fn write_slices<W: Write>(
    trace: &SampleTrace,
    info: &ExportInfo<'_>,
    events: &mut Events<W>,
) -> Result<(), ReportError> {
    let start = trace.start();
    let period_ns = (info.period_secs() * 1e9) as u64;
    let functions = function_of_frames(trace);
    for thread in trace.threads() {
        for slice in slices(trace, &functions, thread, period_ns) {
            let frame = &trace.frames()[slice.frame as usize];
            let mut args = Map::new();
            args.insert("file".into(), json!(&*frame.file));
            if frame.line > 0 {
                args.insert("line".into(), json!(frame.line));
            }
            args.insert("samples".into(), json!(slice.samples));
            events.emit(json!({"name": &*frame.function,
                       "cat": if frame.native { "native" } else { "python" },
                       "ph": "X", "ts": micros(slice.start, start),
                       "dur": (slice.end.0.saturating_sub(slice.start.0)) as f64 / 1e3,
                       "pid": thread.pid, "tid": tid(thread), "args": args}))?;
        }
    }
    Ok(())
}

/// Every thread's GIL runs as slices on its GIL track, named first.
fn write_gil_slices<W: Write>(
    trace: &SampleTrace,
    info: &ExportInfo<'_>,
    events: &mut Events<W>,
) -> Result<(), ReportError> {
    let start = trace.start();
    let period_ns = (info.period_secs() * 1e9) as u64;
    let tracks = trace.gil_tracks();
    for track in tracks.iter().filter(|t| !t.runs.is_empty()) {
        let gil_tid = gil_tid(track.os_thread_id.unwrap_or(track.python_thread_id));
        events.emit(
            json!({"name": "thread_name", "ph": "M", "pid": track.pid, "tid": gil_tid,
                   "args": {"name": format!("{} GIL", track.name)}}),
        )?;
        let mut runs = track.runs.iter().peekable();
        while let Some(run) = runs.next() {
            // A sample stands for one period; the next run's start cuts it short, so that the
            // track's slices never overlap.
            let mut end = run.end.0.saturating_add(period_ns);
            if let Some(next) = runs.peek() {
                end = end.min(next.start.0);
            }
            let mut args = Map::new();
            args.insert("samples".into(), json!(run.samples));
            let name = if run.state == GilState::Held {
                GIL_HELD
            } else {
                GIL_WAIT
            };
            if let Some(holder) = run.holder.and_then(|h| tracks.get(h as usize)) {
                args.insert("holder".into(), json!(holder.name));
            }
            events.emit(json!({"name": name, "cat": GIL_CATEGORY, "ph": "X",
                       "ts": micros(run.start, start),
                       "dur": end.saturating_sub(run.start.0) as f64 / 1e3,
                       "pid": track.pid, "tid": gil_tid, "args": args}))?;
        }
    }
    Ok(())
}

/// The id of the GIL track of the thread whose own track goes by `tid`.
fn gil_tid(tid: u64) -> u64 {
    GIL_TID_BASE + tid % GIL_TID_BASE
}

/// Each GPU reading as a counter event, placed at the start of the interval it describes.
fn write_gpu_counters<W: Write>(
    trace: &SampleTrace,
    info: &ExportInfo<'_>,
    events: &mut Events<W>,
) -> Result<(), ReportError> {
    let start = trace.start();
    // Readings arrive a little out of order (the driver's ring beside the poll's own); in time
    // order, as gpu-timeline.csv lists them.
    let mut readings: Vec<&GpuSample> = trace.gpu_readings().iter().collect();
    readings.sort_by_key(|r| r.time);
    let mut previous: BTreeMap<u32, Timestamp> = BTreeMap::new();
    for reading in readings {
        let at = previous
            .insert(reading.device, reading.time)
            .unwrap_or(reading.time);
        let args = counter_args(reading);
        if args.is_empty() {
            continue;
        }
        events.emit(json!({"name": info.gpu_name(reading.device), "ph": "C",
                   "ts": micros(at, start), "pid": info.meta.pid, "tid": 0, "args": args}))?;
    }
    Ok(())
}

/// Each process's memory readings as counters in that process, in time order.
fn write_memory_counters<W: Write>(
    trace: &SampleTrace,
    events: &mut Events<W>,
) -> Result<(), ReportError> {
    let start = trace.start();
    let mut readings: Vec<&MemorySample> = trace.memory_readings().iter().collect();
    readings.sort_by_key(|r| (r.time, r.pid));
    for r in readings {
        let mut args = Map::new();
        args.insert("rss".into(), json!(mib(r.rss_bytes)));
        for (name, value) in [
            ("private", r.private_bytes),
            ("shared", r.shared_bytes),
            ("swap", r.swap_bytes),
        ] {
            if let Some(bytes) = value {
                args.insert(name.into(), json!(mib(bytes)));
            }
        }
        events.emit(
            json!({"name": MEMORY_COUNTER, "ph": "C", "ts": micros(r.time, start),
                   "pid": r.pid, "tid": 0, "args": args}),
        )?;
    }
    Ok(())
}

/// Each process's memory on each GPU, from the GPU readings that say it, as a counter in that
/// process: `memory GPU 0`. A process a device listed before and no longer lists holds
/// nothing there: its counter drops to 0.
fn write_gpu_memory_counters<W: Write>(
    trace: &SampleTrace,
    events: &mut Events<W>,
) -> Result<(), ReportError> {
    let start = trace.start();
    let mut readings: Vec<&GpuSample> = trace
        .gpu_readings()
        .iter()
        .filter(|r| says_gpu_memory(r))
        .collect();
    readings.sort_by_key(|r| (r.time, r.device));
    // The pids each device had memory for at its previous reading.
    let mut listed: BTreeMap<u32, BTreeSet<u32>> = BTreeMap::new();
    for reading in readings {
        let key = format!("GPU {}", reading.device);
        let now: BTreeMap<u32, u64> = reading
            .process_memory
            .iter()
            .map(|p| (p.pid, p.bytes))
            .collect();
        // Listed without its memory: not gone, its memory not said this time.
        let still_listed = |pid: &u32| {
            now.contains_key(pid)
                || reading
                    .compute_pids
                    .as_ref()
                    .is_some_and(|pids| pids.contains(pid))
        };
        let before = listed.entry(reading.device).or_default();
        let gone: Vec<(u32, u64)> = before
            .iter()
            .filter(|pid| !still_listed(pid))
            .map(|&pid| (pid, 0))
            .collect();
        before.retain(|pid| still_listed(pid));
        before.extend(now.keys().copied());
        for (pid, bytes) in now.into_iter().chain(gone) {
            events.emit(json!({"name": MEMORY_COUNTER, "ph": "C",
                       "ts": micros(reading.time, start), "pid": pid, "tid": 0,
                       "args": {key.as_str(): mib(bytes)}}))?;
        }
    }
    Ok(())
}

/// Whether a GPU reading says its processes' memory: it lists some, or the device has no
/// compute process at all. An empty list beside listed pids is a driver that does not say.
fn says_gpu_memory(reading: &GpuSample) -> bool {
    !reading.process_memory.is_empty() || reading.compute_pids.as_ref().is_some_and(Vec::is_empty)
}

/// The job's memory cgroup as a counter in the target's process: usage, limit (where there
/// is one) and the OOM kills it counted.
fn write_cgroup_counters<W: Write>(
    trace: &SampleTrace,
    info: &ExportInfo<'_>,
    events: &mut Events<W>,
) -> Result<(), ReportError> {
    let start = trace.start();
    let mut readings: Vec<&CgroupSample> = trace.cgroup_readings().iter().collect();
    readings.sort_by_key(|r| r.time);
    for r in readings {
        let mut args = Map::new();
        args.insert("usage".into(), json!(mib(r.usage_bytes)));
        if let Some(limit) = r.limit_bytes {
            args.insert("limit".into(), json!(mib(limit)));
        }
        if let Some(kills) = r.oom_kills {
            args.insert("oom_kills".into(), json!(kills));
        }
        events.emit(
            json!({"name": CGROUP_COUNTER, "ph": "C", "ts": micros(r.time, start),
                   "pid": info.meta.pid, "tid": 0, "args": args}),
        )?;
    }
    Ok(())
}

/// Bytes in MiB, to a tenth.
fn mib(bytes: u64) -> f64 {
    (bytes as f64 / MIB * 10.0).round() / 10.0
}

/// A reading's counters, those it has.
fn counter_args(reading: &GpuSample) -> Map<String, Value> {
    let mut args = Map::new();
    if let Some(u) = reading.utilization {
        args.insert("utilization".into(), json!(u));
    }
    if let Some(bytes) = reading.memory_used_bytes {
        args.insert("memory".into(), json!(mib(bytes)));
    }
    if let Some(watts) = reading.power_watts {
        args.insert("power".into(), json!(watts));
    }
    // GPM (Hopper and later): a GPU "busy" by utilization with idle SMs shows here.
    if let Some(sm) = reading.sm_active {
        args.insert("sm_active".into(), json!(sm));
    }
    args
}

/// The id a thread's track goes by: its OS id, else Python's.
fn tid(thread: &TraceThread) -> u64 {
    thread.os_thread_id.unwrap_or(thread.python_thread_id)
}

fn micros(time: Timestamp, start: Timestamp) -> f64 {
    let ns = time.0 as f64 - start.0 as f64;
    (ns / 1e3 * 1e3).round() / 1e3
}

fn shorten(s: &str, max: usize) -> String {
    match s.char_indices().nth(max) {
        Some((at, _)) => format!("{}...", &s[..at]),
        None => s.to_owned(),
    }
}

/// One frame's stay on a thread's stack.
#[derive(Debug, Clone, Copy, PartialEq)]
pub(crate) struct Slice {
    pub frame: u32,
    pub depth: usize,
    pub start: Timestamp,
    pub end: Timestamp,
    pub samples: u64,
}

/// For each frame, the function it runs (name, file, native): slices follow functions, not
/// lines, so that a loop stepping through the lines of one function is one slice.
pub(crate) fn function_of_frames(trace: &SampleTrace) -> Vec<u32> {
    let mut ids: HashMap<(&str, &str, bool), u32> = HashMap::new();
    trace
        .frames()
        .iter()
        .map(|f| {
            let next = ids.len() as u32;
            *ids.entry((&*f.function, &*f.file, f.native))
                .or_insert(next)
        })
        .collect()
}

/// A thread's slices, sorted by start and, at one start, outermost first (the order in which
/// trace viewers nest slices that start together). A slice's frame is the one it began with.
pub(crate) fn slices(
    trace: &SampleTrace,
    functions: &[u32],
    thread: &TraceThread,
    period_ns: u64,
) -> Vec<Slice> {
    let mut out = Vec::new();
    let mut open: Vec<Slice> = Vec::new();
    let mut finish: Option<Timestamp> = None;
    let gap_ns = (GAP_PERIODS * period_ns).max(GAP_NANOS);
    let close = |open: &mut Vec<Slice>, keep: usize, at: Timestamp, out: &mut Vec<Slice>| {
        while open.len() > keep {
            if let Some(mut slice) = open.pop() {
                slice.end = at.max(slice.start);
                out.push(slice);
            }
        }
    };
    for run in &thread.runs {
        let stack = &trace.stacks()[run.stack as usize];
        let keep = match finish {
            // Sampled again without being seen idle, and soon enough that the sampler only
            // fell behind: functions shared with the last stack go on.
            Some(end) if !run.resumed && run.start.0 <= end.0 + gap_ns => {
                let shared = open
                    .iter()
                    .zip(stack.iter())
                    .take_while(|(o, &f)| functions[o.frame as usize] == functions[f as usize])
                    .count();
                close(&mut open, shared, run.start, &mut out);
                shared
            }
            Some(end) => {
                // A sampler catching up after falling behind reads again sooner than a period:
                // the last slices end where the next begin, so that they never overlap.
                close(&mut open, 0, end.min(run.start), &mut out);
                0
            }
            None => 0,
        };
        for (depth, &frame) in stack.iter().enumerate().skip(keep) {
            open.push(Slice {
                frame,
                depth,
                start: run.start,
                end: run.start,
                samples: 0,
            });
        }
        for slice in &mut open {
            slice.samples += run.samples;
        }
        finish = Some(Timestamp(run.end.0 + period_ns));
    }
    if let Some(end) = finish {
        close(&mut open, 0, end, &mut out);
    }
    out.sort_by_key(|s| (s.start, s.depth));
    out
}
