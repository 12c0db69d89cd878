//! [`SampleTrace`]: every kept stack sample in time order, per thread, each tagged with the
//! GPU's state, for the exports that other tools read (pprof, speedscope, a Perfetto trace).
//!
//! The [`crate::Aggregator`] folds samples into counts and forgets when they were taken; the
//! exports need the order (speedscope's time-ordered view, Perfetto's slices) and each sample's
//! own labels. A trace keeps, per thread, runs of consecutive samples that share stack, thread
//! name and GPU state: a run costs the same as one sample, and a loop that sits in one place
//! costs one run. It applies the same rules as the aggregator so that an export adds up to the
//! recording's `stacks.folded`: idle threads' samples are left out unless `include_idle`, and
//! each sample is tagged by the same [`GpuTagger`], in the same order.
//!
//! Unlike the aggregator it has no caps: it is built for one export from a sample log and then
//! dropped, and its size is that of the window exported.
//!
//! Beside the stack runs, each thread's GIL ([`GilTrack`]): runs of consecutive samples in which
//! it held the GIL or waited for it, each sample's state decided from its whole read by the one
//! GIL rule ([`ReadGroups`], as the aggregator does). These count every sample, the idle
//! threads' too whatever `include_idle` says: a thread waiting for the GIL is asleep, and its
//! wait is what they show. Like the stack runs they merge consecutive samples, so a thread that
//! keeps one state costs one run.

use std::collections::{BTreeMap, HashMap, VecDeque};

use stackscope_event::{
    CgroupSample, Event, Frame, GpuSample, MemorySample, ProcessEventKind, StackSample, ThreadInfo,
    Timestamp,
};

use crate::fold::AggregateConfig;
use crate::gil::{frames_key, GilRead, GilSample, GilState, ReadGroups, RunsAt};
use crate::gpu::{GpuTag, GpuTagger};

/// Consecutive samples of one thread with the same stack, name and GPU state.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Run {
    /// The first sample's time.
    pub start: Timestamp,
    /// The last sample's time.
    pub end: Timestamp,
    pub samples: u64,
    /// Index into [`SampleTrace::stacks`].
    pub stack: u32,
    /// Index into [`SampleTrace::names`]: the thread's name at these samples.
    pub name: u32,
    /// The GPU's state at these samples, as utilization reads it
    /// ([`GpuTag::by_utilization`]: never `BusyLowSm`), as the flamegraphs split them.
    pub gpu: GpuTag,
    /// The thread was seen idle (a sample left out) since the previous run: the two are not
    /// one stretch of work, whatever their stacks.
    pub resumed: bool,
}

/// One thread of one process and its runs, in time order.
#[derive(Debug, Clone)]
pub struct TraceThread {
    pub pid: u32,
    pub python_thread_id: u64,
    /// The OS thread id, when it was ever read.
    pub os_thread_id: Option<u64>,
    /// The name shown for the thread at its latest sample.
    pub name: String,
    pub runs: Vec<Run>,
    /// Times of samples left out as idle, not yet placed between runs.
    idle: VecDeque<Timestamp>,
}

impl TraceThread {
    /// The thread id other tools show: the OS id, else Python's in hex (as py-spy does).
    pub fn display_id(&self) -> String {
        match self.os_thread_id {
            Some(tid) => tid.to_string(),
            None => format!("{:#X}", self.python_thread_id),
        }
    }

    pub fn samples(&self) -> u64 {
        self.runs.iter().map(|r| r.samples).sum()
    }
}

/// Idle sample times kept per thread until the next run is placed; past this the oldest go.
const MAX_IDLE_TIMES: usize = 10_000;
/// A thread not sampled for longer than this ends its GIL run: the target was stopped, or the
/// sampler stalled, and what the thread did meanwhile is not known (the Perfetto export ends
/// its stack slices at such a gap too).
const GIL_GAP_NANOS: u64 = 1_000_000_000;

/// Consecutive samples of one thread in which it held the GIL, or waited for it while the same
/// other thread held it.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct GilRun {
    /// The first sample's time.
    pub start: Timestamp,
    /// The last sample's time.
    pub end: Timestamp,
    pub samples: u64,
    /// [`GilState::Held`] or [`GilState::Waited`].
    pub state: GilState,
    /// In a wait, the thread that held the GIL: an index into [`SampleTrace::gil_tracks`].
    pub holder: Option<u32>,
}

/// One thread's GIL over the recording: its runs of holding the GIL and of waiting for it.
#[derive(Debug, Clone)]
pub struct GilTrack {
    pub pid: u32,
    pub python_thread_id: u64,
    /// The OS thread id, when it was ever read.
    pub os_thread_id: Option<u64>,
    /// The name shown for the thread at its latest sample.
    pub name: String,
    pub runs: Vec<GilRun>,
    /// The thread's latest sample, whatever its state: a run goes on only from its own last
    /// sample.
    last_sample: Option<Timestamp>,
}

impl GilTrack {
    fn new(pid: u32, python_thread_id: u64) -> GilTrack {
        GilTrack {
            pid,
            python_thread_id,
            os_thread_id: None,
            name: String::new(),
            runs: Vec::new(),
            last_sample: None,
        }
    }

    /// Adds a sample in `state`: it extends the last run when it follows that run's last
    /// sample in the same state (and holder), soon enough; else a hold or a wait starts one.
    fn add(&mut self, time: Timestamp, state: GilState, holder: Option<u32>) {
        let previous = self.last_sample.replace(time);
        if !matches!(state, GilState::Held | GilState::Waited) {
            return;
        }
        if let Some(last) = self.runs.last_mut() {
            let goes_on = previous == Some(last.end)
                && last.state == state
                && last.holder == holder
                && time.0.saturating_sub(last.end.0) <= GIL_GAP_NANOS;
            if goes_on {
                last.end = last.end.max(time);
                last.samples += 1;
                return;
            }
        }
        self.runs.push(GilRun {
            start: time,
            end: time,
            samples: 1,
            state,
            holder,
        });
    }
}

/// A thread of a process, as the GIL rule tells threads apart.
type GilKey = (u32, u64);

/// A sample waiting (in the tagger) for the GPU readings that cover it.
#[derive(Debug)]
struct Pending {
    time: Timestamp,
    thread: u32,
    stack: u32,
    name: u32,
}

/// Kept stack samples in time order per thread, with their GPU state, and every GPU, memory
/// and cgroup reading.
#[derive(Debug)]
pub struct SampleTrace {
    config: AggregateConfig,
    start: Timestamp,
    tagger: GpuTagger<Pending>,
    frames: Vec<Frame>,
    frame_ids: HashMap<Frame, u32>,
    stacks: Vec<Box<[u32]>>,
    stack_ids: HashMap<Box<[u32]>, u32>,
    names: Vec<String>,
    name_ids: HashMap<String, u32>,
    threads: Vec<TraceThread>,
    thread_ids: HashMap<(u32, u64), u32>,
    commands: BTreeMap<u32, String>,
    ranks: BTreeMap<u32, u32>,
    gpu: Vec<GpuSample>,
    /// Every memory reading, for the exports' counter tracks.
    memory: Vec<MemorySample>,
    cgroup: Vec<CgroupSample>,
    samples: u64,
    first: Option<Timestamp>,
    last: Option<Timestamp>,
    scratch: Vec<u32>,
    /// The samples of the latest read, held until it is complete (`gil/`).
    reads: ReadGroups<GilKey, ThreadInfo>,
    /// Where each thread runs, by its stack's hash: only there is a wait one for the GIL.
    runs_at: HashMap<GilKey, RunsAt<u64>>,
    gil_tracks: Vec<GilTrack>,
    gil_ids: HashMap<GilKey, u32>,
}

impl SampleTrace {
    pub fn new(config: AggregateConfig, start: Timestamp) -> SampleTrace {
        SampleTrace {
            tagger: GpuTagger::new(config.idle_below),
            config,
            start,
            frames: Vec::new(),
            frame_ids: HashMap::new(),
            stacks: Vec::new(),
            stack_ids: HashMap::new(),
            names: Vec::new(),
            name_ids: HashMap::new(),
            threads: Vec::new(),
            thread_ids: HashMap::new(),
            commands: BTreeMap::new(),
            ranks: BTreeMap::new(),
            gpu: Vec::new(),
            memory: Vec::new(),
            cgroup: Vec::new(),
            samples: 0,
            first: None,
            last: None,
            scratch: Vec::new(),
            reads: ReadGroups::default(),
            runs_at: HashMap::new(),
            gil_tracks: Vec::new(),
            gil_ids: HashMap::new(),
        }
    }

    /// As [`crate::Aggregator::expect_gpu_devices`]: samples also wait for these devices.
    pub fn expect_gpu_devices(&mut self, devices: &[u32]) {
        for &device in devices {
            self.tagger.expect_device(device);
        }
    }

    /// Takes one event, in the order the aggregator would.
    pub fn handle(&mut self, event: Event) {
        if !matches!(event, Event::Stack(_)) {
            // Any other event ends the read its samples came in, as in the aggregator.
            self.complete_read();
        }
        match event {
            Event::Stack(sample) => {
                self.hold_for_read(&sample);
                self.handle_stack(sample);
            }
            Event::SampleError(error) => self.tagger.observe(error.time),
            Event::Gpu(sample) => {
                self.tagger.add_gpu(&sample);
                self.gpu.push(sample);
            }
            Event::Memory(sample) => {
                self.tagger.observe(sample.time);
                self.memory.push(sample);
            }
            Event::Cgroup(sample) => {
                self.tagger.observe(sample.time);
                self.cgroup.push(sample);
            }
            Event::Process(process) => {
                if let Some(rank) = process.rank.rank {
                    self.ranks.insert(process.pid, rank);
                }
                if process.kind == ProcessEventKind::Attached || !process.command_line.is_empty() {
                    let command = self.commands.entry(process.pid).or_default();
                    if command.is_empty() || process.kind == ProcessEventKind::Attached {
                        *command = process.command_line;
                    }
                }
                self.tagger.observe(process.time);
            }
        }
        self.release();
    }

    /// Holds a sample's thread until its read is complete; the samples of the read before go
    /// to their threads' GIL runs.
    fn hold_for_read(&mut self, sample: &StackSample) {
        let thread = (sample.pid, sample.thread.python_thread_id);
        let runs_here = self
            .runs_at
            .entry(thread)
            .or_default()
            .observe(frames_key(&sample.frames), sample.thread.active);
        let gil = GilSample::of(sample, thread, runs_here);
        let (tracks, ids) = (&mut self.gil_tracks, &mut self.gil_ids);
        self.reads
            .push(gil, sample.thread.clone(), &mut |thread, s, read| {
                add_gil(tracks, ids, &thread, s, read)
            });
    }

    /// Ends the read held: another kind of event came, or the input ended.
    fn complete_read(&mut self) {
        let (tracks, ids) = (&mut self.gil_tracks, &mut self.gil_ids);
        self.reads
            .flush(&mut |thread, s, read| add_gil(tracks, ids, &thread, s, read));
    }

    fn handle_stack(&mut self, sample: StackSample) {
        if !(sample.thread.active || self.config.include_idle) {
            self.tagger.observe(sample.time);
            let key = (sample.pid, sample.thread.python_thread_id);
            if let Some(&id) = self.thread_ids.get(&key) {
                let idle = &mut self.threads[id as usize].idle;
                if idle.len() >= MAX_IDLE_TIMES {
                    idle.pop_front();
                }
                idle.push_back(sample.time);
            }
            return;
        }
        let display = sample.thread.display_name();
        let name = intern_name(&mut self.names, &mut self.name_ids, &display);
        let key = (sample.pid, sample.thread.python_thread_id);
        let thread = match self.thread_ids.get(&key) {
            Some(&id) => id,
            None => {
                let id = self.threads.len() as u32;
                self.threads.push(TraceThread {
                    pid: sample.pid,
                    python_thread_id: sample.thread.python_thread_id,
                    os_thread_id: None,
                    name: String::new(),
                    runs: Vec::new(),
                    idle: VecDeque::new(),
                });
                self.thread_ids.insert(key, id);
                id
            }
        };
        let entry = &mut self.threads[thread as usize];
        if entry.name != display {
            entry.name = display.into_owned();
        }
        if sample.thread.os_thread_id.is_some() {
            entry.os_thread_id = sample.thread.os_thread_id;
        }
        let stack = self.intern_stack(&sample.frames);
        self.samples += 1;
        self.first = Some(self.first.map_or(sample.time, |t| t.min(sample.time)));
        self.last = Some(self.last.map_or(sample.time, |t| t.max(sample.time)));
        let pending = Pending {
            time: sample.time,
            thread,
            stack,
            name,
        };
        if self.config.gpu_enabled {
            self.tagger.hold(sample.time, pending);
        } else {
            self.tagger.observe(sample.time);
            self.push_run(pending, GpuTag::Unknown);
        }
    }

    /// Interns a stack given innermost first, as the sampler reads it; stored outermost first.
    fn intern_stack(&mut self, frames: &[Frame]) -> u32 {
        let mut key = std::mem::take(&mut self.scratch);
        key.clear();
        for frame in frames.iter().rev() {
            let id = match self.frame_ids.get(frame) {
                Some(&id) => id,
                None => {
                    let id = self.frames.len() as u32;
                    self.frames.push(frame.clone());
                    self.frame_ids.insert(frame.clone(), id);
                    id
                }
            };
            key.push(id);
        }
        let id = match self.stack_ids.get(key.as_slice()) {
            Some(&id) => id,
            None => {
                let id = self.stacks.len() as u32;
                let boxed: Box<[u32]> = key.as_slice().into();
                self.stacks.push(boxed.clone());
                self.stack_ids.insert(boxed, id);
                id
            }
        };
        self.scratch = key;
        id
    }

    fn release(&mut self) {
        let mut tagged = Vec::new();
        self.tagger.release(|_, p, tag| tagged.push((p, tag)));
        self.apply(tagged);
    }

    fn apply(&mut self, tagged: Vec<(Pending, GpuTag)>) {
        for (pending, tag) in tagged {
            self.push_run(pending, tag.by_utilization());
        }
    }

    fn push_run(&mut self, p: Pending, gpu: GpuTag) {
        let thread = &mut self.threads[p.thread as usize];
        let last_end = thread.runs.last().map(|r| r.end);
        let mut resumed = false;
        while let Some(&idle) = thread.idle.front() {
            if idle >= p.time {
                break;
            }
            resumed |= last_end.is_some_and(|end| idle > end);
            thread.idle.pop_front();
        }
        let runs = &mut thread.runs;
        if let Some(last) = runs.last_mut() {
            if !resumed && last.stack == p.stack && last.name == p.name && last.gpu == gpu {
                last.end = last.end.max(p.time);
                last.samples += 1;
                return;
            }
        }
        runs.push(Run {
            start: p.time,
            end: p.time,
            samples: 1,
            stack: p.stack,
            name: p.name,
            gpu,
            resumed,
        });
    }

    /// The end of the input: tags every held sample with what is known, and completes the
    /// last read.
    pub fn finish(&mut self) {
        self.complete_read();
        let mut tagged = Vec::new();
        self.tagger.flush(|_, p, tag| tagged.push((p, tag)));
        self.apply(tagged);
    }

    pub fn config(&self) -> &AggregateConfig {
        &self.config
    }

    /// The recording's start: the zero of every exported time.
    pub fn start(&self) -> Timestamp {
        self.start
    }

    /// Kept samples.
    pub fn samples(&self) -> u64 {
        self.samples
    }

    /// The first and last kept sample's times.
    pub fn sample_span(&self) -> Option<(Timestamp, Timestamp)> {
        self.first.zip(self.last)
    }

    /// Every distinct frame; stacks refer to them by index.
    pub fn frames(&self) -> &[Frame] {
        &self.frames
    }

    /// Every distinct stack, as frame indices outermost first.
    pub fn stacks(&self) -> &[Box<[u32]>] {
        &self.stacks
    }

    /// Thread names, referred to by [`Run::name`].
    pub fn names(&self) -> &[String] {
        &self.names
    }

    /// Threads in the order they were first sampled.
    pub fn threads(&self) -> &[TraceThread] {
        &self.threads
    }

    /// Command lines of the processes attached, by pid.
    pub fn command_line(&self, pid: u32) -> Option<&str> {
        self.commands.get(&pid).map(String::as_str)
    }

    /// A process's rank, when a launcher started it (`--subprocesses` under torchrun, Slurm).
    pub fn rank(&self, pid: u32) -> Option<u32> {
        self.ranks.get(&pid).copied()
    }

    /// Every GPU reading taken, in the order received.
    pub fn gpu_readings(&self) -> &[GpuSample] {
        &self.gpu
    }

    /// Every reading of a process's memory, in the order received.
    pub fn memory_readings(&self) -> &[MemorySample] {
        &self.memory
    }

    /// Every reading of the job's memory cgroup, in the order received.
    pub fn cgroup_readings(&self) -> &[CgroupSample] {
        &self.cgroup
    }

    /// Each thread's GIL, in the order the threads were first seen holding or waiting for it
    /// (or held it while another waited); those with no run have none.
    pub fn gil_tracks(&self) -> &[GilTrack] {
        &self.gil_tracks
    }
}

/// A completed read's sample into its thread's GIL runs. A thread gets a track once it holds
/// or waits for the GIL: threads that never do stay out of the export.
fn add_gil(
    tracks: &mut Vec<GilTrack>,
    ids: &mut HashMap<GilKey, u32>,
    thread: &ThreadInfo,
    sample: GilSample<GilKey>,
    read: GilRead<GilKey>,
) {
    let known = ids.get(&sample.thread).copied();
    let id = match (known, read.state) {
        (Some(id), _) => id,
        (None, GilState::Held | GilState::Waited) => gil_track(tracks, ids, sample.thread),
        (None, _) => return,
    };
    // The holder may come later in the read than its waiter: its track is made now and named
    // at its own sample.
    let holder = read.holder.map(|h| gil_track(tracks, ids, h));
    let track = &mut tracks[id as usize];
    let display = thread.display_name();
    if track.name != display {
        track.name = display.into_owned();
    }
    if thread.os_thread_id.is_some() {
        track.os_thread_id = thread.os_thread_id;
    }
    track.add(sample.time, read.state, holder);
}

/// The index of a thread's GIL track, made when new.
fn gil_track(tracks: &mut Vec<GilTrack>, ids: &mut HashMap<GilKey, u32>, key: GilKey) -> u32 {
    *ids.entry(key).or_insert_with(|| {
        tracks.push(GilTrack::new(key.0, key.1));
        (tracks.len() - 1) as u32
    })
}

fn intern_name(names: &mut Vec<String>, ids: &mut HashMap<String, u32>, name: &str) -> u32 {
    if let Some(&id) = ids.get(name) {
        return id;
    }
    let id = names.len() as u32;
    names.push(name.to_owned());
    ids.insert(name.to_owned(), id);
    id
}

#[cfg(test)]
mod tests {
    use super::*;
    use stackscope_event::ThreadInfo;

    const MS: u64 = 1_000_000;

    fn stack(time_ms: u64, tid: u64, active: bool, function: &str) -> Event {
        Event::Stack(StackSample {
            time: Timestamp(time_ms * MS),
            pid: 7,
            thread: ThreadInfo {
                os_thread_id: Some(tid + 100),
                python_thread_id: tid,
                name: Some(format!("t{tid}").into()),
                active,
                owns_gil: true,
            },
            frames: vec![
                Frame::python(function, "a.py", 3),
                Frame::python("main", "a.py", 1),
            ]
            .into(),
        })
    }

    fn gpu(time_ms: u64, utilization: f32) -> Event {
        Event::Gpu(GpuSample {
            time: Timestamp(time_ms * MS),
            device: 0,
            utilization: Some(utilization),
            ..GpuSample::default()
        })
    }

    #[test]
    fn runs_merge_consecutive_samples_and_carry_the_gpu_state() {
        let config = AggregateConfig::default();
        let mut trace = SampleTrace::new(config, Timestamp(0));
        trace.handle(gpu(0, 90.0));
        for t in [10, 20, 30] {
            trace.handle(stack(t, 1, true, "work"));
        }
        trace.handle(gpu(35, 90.0));
        trace.handle(stack(40, 1, true, "work"));
        trace.handle(stack(50, 1, false, "sleep"));
        trace.handle(stack(60, 1, true, "load"));
        trace.handle(gpu(70, 5.0));
        trace.finish();
        let thread = &trace.threads()[0];
        assert_eq!(thread.display_id(), "101");
        let runs: Vec<(u64, GpuTag)> = thread.runs.iter().map(|r| (r.samples, r.gpu)).collect();
        assert_eq!(
            runs,
            vec![(3, GpuTag::Busy), (1, GpuTag::Idle), (1, GpuTag::Idle)]
        );
        assert_eq!(trace.samples(), 5, "the idle thread's sample is left out");
        assert_eq!(trace.stacks().len(), 2);
        assert_eq!(trace.gpu_readings().len(), 3);
    }

    /// A sample of thread `tid` of process 7 that holds the GIL, or not.
    fn gil_stack(time_ms: u64, tid: u64, active: bool, owns_gil: bool) -> Event {
        let mut event = stack(time_ms, tid, active, "work");
        if let Event::Stack(s) = &mut event {
            s.thread.owns_gil = owns_gil;
        }
        event
    }

    fn gil_runs(trace: &SampleTrace, tid: u64) -> Vec<(u64, u64, u64, GilState, Option<String>)> {
        let track = trace
            .gil_tracks()
            .iter()
            .find(|t| t.python_thread_id == tid)
            .unwrap_or_else(|| panic!("no GIL track for {tid}"));
        track
            .runs
            .iter()
            .map(|r| {
                let holder = r
                    .holder
                    .map(|h| trace.gil_tracks()[h as usize].name.clone());
                (r.start.0 / MS, r.end.0 / MS, r.samples, r.state, holder)
            })
            .collect()
    }

    #[test]
    fn gil_runs_resolve_each_read_whatever_the_order_of_its_threads() {
        let mut trace = SampleTrace::new(AggregateConfig::default(), Timestamp(0));
        // At 0 ms both run at their stack without the GIL: a wait there is one for the GIL.
        // Reads at 10, 20, 30 ms: thread 1 (read first) waits while thread 2 holds; at 40 ms
        // nobody holds, at 50 ms thread 1 holds, thread 2 waits for it.
        trace.handle(gil_stack(0, 1, true, false));
        trace.handle(gil_stack(0, 2, true, false));
        for t in [10, 20, 30] {
            trace.handle(gil_stack(t, 1, false, false));
            trace.handle(gil_stack(t, 2, true, true));
        }
        trace.handle(gil_stack(40, 1, false, false));
        trace.handle(gil_stack(40, 2, true, false));
        trace.handle(gil_stack(50, 1, true, true));
        trace.handle(gil_stack(50, 2, false, false));
        trace.handle(gpu(55, 90.0));
        trace.handle(gil_stack(60, 1, true, true));
        trace.finish();
        assert_eq!(
            gil_runs(&trace, 1),
            vec![
                (10, 30, 3, GilState::Waited, Some("t2".to_owned())),
                (50, 60, 2, GilState::Held, None),
            ]
        );
        // Thread 2 held, then ran without the GIL, then waited for thread 1.
        assert_eq!(
            gil_runs(&trace, 2),
            vec![
                (10, 30, 3, GilState::Held, None),
                (50, 50, 1, GilState::Waited, Some("t1".to_owned())),
            ]
        );
        // The idle samples stay out of the stack runs, as before.
        assert_eq!(trace.samples(), 8);
    }

    #[test]
    fn a_gil_run_ends_at_a_gap_and_a_sleep_elsewhere_is_no_wait() {
        let mut trace = SampleTrace::new(AggregateConfig::default(), Timestamp(0));
        for t in [10, 20, 2000, 2010] {
            trace.handle(gil_stack(t, 1, true, true));
        }
        // A thread asleep where it never ran waits for something else, not the GIL.
        trace.handle(gil_stack(2020, 2, false, false));
        trace.handle(gil_stack(2020, 1, true, true));
        trace.finish();
        assert_eq!(
            gil_runs(&trace, 1),
            vec![
                (10, 20, 2, GilState::Held, None),
                (2000, 2020, 3, GilState::Held, None),
            ]
        );
        assert!(trace.gil_tracks().iter().all(|t| t.python_thread_id != 2));
    }
}
