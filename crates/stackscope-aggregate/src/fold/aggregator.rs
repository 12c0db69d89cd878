//! The aggregator: the one owner of a recording's state, fed event by event.

use std::collections::BTreeSet;
use std::sync::Arc;

use stackscope_event::{Event, Frames, GpuSample, SampleErrorKind, StackSample, Timestamp};

use serde::{Deserialize, Serialize};

use super::buckets::TimeBuckets;
use super::ends::count_in_lane;
use super::intern::{FrameId, StackCounts, StackTable};
use super::kinds::kind_label;
use super::limits::{Limits, FRAME_TABLE_FULL, OTHER_PROCESSES, OTHER_THREADS, STACK_TABLE_FULL};
use super::motion::{same_python_stack, Motion};
use super::process_groups::REMARKABLE_ENDS_KEPT;
use super::processes::ProcessTable;
use super::reads::{gil_sample, ReadDone, ReadItem};
use super::tagged::{self, Held, Sink, Startup, Tagged};
use super::threads::{thread_key, ThreadKey, ThreadTable};
use crate::gil::{GilCounts, ReadGroups};
use crate::gpu::{
    GpuTag, GpuTagger, GpuTimeline, DEFAULT_IDLE_BELOW, MAX_PENDING, MAX_READINGS_PER_DEVICE,
};
use crate::jobs::{is_spin_wait, works_at_read};
use crate::memory::MemoryState;
use foldhash::HashMap;

#[derive(Debug, Clone, PartialEq)]
pub struct AggregateConfig {
    /// Keep samples of threads that were sleeping or blocked (py-spy leaves them out).
    pub include_idle: bool,
    /// GPU utilization in percent below which a stack sample counts as "GPU idle".
    pub idle_below: f32,
    /// Whether GPU readings are expected; when not, stack samples are never held back.
    pub gpu_enabled: bool,
    /// Root every stack at its process (`process PID COMMAND`) above its thread, and keep
    /// per-process figures: set when following a process tree (`--subprocesses`).
    pub process_root: bool,
    /// Leave the target's start-up (the time before the GPU's first busy burst) out of the GPU
    /// figures and the verdict: set by `record`, which starts the job.
    pub leave_out_startup: bool,
    /// Keep like processes apart, each under its own root (`--processes-apart`); by default
    /// they are one group (`kinds.rs`).
    pub processes_apart: bool,
    /// Keep every thread apart under its own name (`--threads-apart`); by default a process's
    /// short-lived threads of one kind are one pool once one of them ended (`kinds.rs`).
    pub threads_apart: bool,
}

impl Default for AggregateConfig {
    /// The command line's defaults: idle threads left out, 30% idle threshold, GPU on (auto).
    fn default() -> Self {
        AggregateConfig {
            include_idle: false,
            idle_below: DEFAULT_IDLE_BELOW,
            gpu_enabled: true,
            process_root: false,
            leave_out_startup: false,
            processes_apart: false,
            threads_apart: false,
        }
    }
}

/// Sampling attempts that failed, by kind.
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct ErrorCounts {
    pub total: u64,
    pub torn_read: u64,
    pub thread_gone: u64,
    pub other: u64,
}

/// Which samples a folded profile covers.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum StackView {
    All,
    GpuIdle,
    GpuBusy,
}

impl StackView {
    pub(crate) fn count(self, counts: &StackCounts) -> u64 {
        match self {
            StackView::All => counts.all,
            StackView::GpuIdle => counts.gpu_idle,
            StackView::GpuBusy => counts.gpu_busy,
        }
    }
}

/// Folds stack samples, keeps the GPU timeline and tags samples with the GPU's state.
///
/// Pure: no I/O, no threads, no clock reads; feed it [`Event`]s in roughly the order they were
/// taken and ask it for folded profiles and a summary at any time.
#[derive(Debug)]
pub struct Aggregator {
    pub(crate) config: AggregateConfig,
    pub(crate) start: Timestamp,
    pub(crate) table: StackTable,
    pub(crate) tagger: GpuTagger<Held>,
    /// The start-up gate tagged samples pass through (`tagged.rs`).
    pub(crate) startup: Startup,
    /// Tagged samples on their way from the tagger to the gate, kept to reuse its memory.
    pub(super) released: Vec<Tagged>,
    pub(crate) timeline: GpuTimeline,
    pub(crate) threads: ThreadTable,
    /// Filled only with `process_root`: without it the recording follows one process.
    pub(crate) processes: ProcessTable,
    pub(crate) limits: Limits,
    pub(crate) samples: u64,
    pub(crate) idle_skipped: u64,
    pub(crate) errors: ErrorCounts,
    /// Samples per stack and thread over time, for the HTML report.
    pub(crate) buckets: TimeBuckets,
    /// When any thread's Python stack last changed: whether the target is stuck.
    pub(crate) motion: Motion,
    /// The samples of the latest read, held until it is complete so that each knows who held
    /// the GIL at its instant (`gil/`), with the tag `top` gave it, if any.
    pub(super) reads: ReadGroups<ThreadKey, ReadItem>,
    /// A completed read's samples, on their way on (kept to reuse its memory).
    pub(super) read_done: Vec<ReadDone>,
    /// By process, its reads: how many, at how many a thread held the GIL, at how many one
    /// waited for it.
    pub(crate) gil_by_process: HashMap<u32, GilCounts>,
    /// Every pid NVML listed with a compute context on a polled device during the recording;
    /// `None` while no GPU sample carried a list (an old driver or log, a fake without one).
    pub(crate) compute_pids: Option<BTreeSet<u32>>,
    /// Every process's memory, the cgroup's, and what ran while memory grew (`memory/`).
    pub(crate) memory: MemoryState,
}

/// Whether `frames` are a spin wait, remembered with the very frames last asked about: the
/// sampler hands on one shared stack while a thread stays where it is.
fn spin_wait_of(last: &mut Option<(Frames, bool)>, frames: &Frames) -> bool {
    if let Some((seen, spin_wait)) = last {
        if Arc::ptr_eq(seen, frames) {
            return *spin_wait;
        }
    }
    let spin_wait = frames.iter().any(|f| is_spin_wait(&f.function, f.native));
    *last = Some((frames.clone(), spin_wait));
    spin_wait
}

/// The thread table, reading short-lived threads as their kind unless kept apart.
fn thread_table(max: usize, apart: bool) -> ThreadTable {
    let mut table = ThreadTable::new(max);
    if apart {
        table.keep_threads_apart();
    }
    table
}

impl Aggregator {
    /// An aggregator with the default [`Limits`].
    pub fn new(config: AggregateConfig, start: Timestamp) -> Aggregator {
        Aggregator::with_limits(config, start, Limits::default())
    }

    /// An aggregator with other caps than the default, for tests that reach them.
    pub fn with_limits(config: AggregateConfig, start: Timestamp, limits: Limits) -> Aggregator {
        let limits = limits.sane();
        let mut timeline = GpuTimeline::new(limits.max_gpu_points, config.idle_below);
        let startup = if config.leave_out_startup && config.gpu_enabled {
            timeline.leave_out_startup();
            Startup::Waiting(Default::default())
        } else {
            Startup::Off
        };
        Aggregator {
            tagger: GpuTagger::new(config.idle_below),
            startup,
            released: Vec::new(),
            timeline,
            table: StackTable::new(limits),
            threads: thread_table(limits.max_threads, config.threads_apart),
            processes: ProcessTable::new(limits.max_processes, config.processes_apart),
            limits,
            config,
            start,
            samples: 0,
            idle_skipped: 0,
            errors: ErrorCounts::default(),
            buckets: TimeBuckets::new(start),
            motion: Motion::default(),
            reads: ReadGroups::default(),
            read_done: Vec::new(),
            gil_by_process: HashMap::default(),
            compute_pids: None,
            memory: MemoryState::new(limits.max_processes),
        }
    }

    pub fn handle(&mut self, event: Event) {
        if !matches!(event, Event::Stack(_)) {
            // Any other event ends the read its samples came in.
            self.complete_read();
        }
        match event {
            Event::Stack(sample) => self.handle_stack(sample),
            Event::SampleError(error) => {
                self.errors.total += 1;
                match error.kind {
                    SampleErrorKind::TornRead => self.errors.torn_read += 1,
                    SampleErrorKind::ThreadGone => self.errors.thread_gone += 1,
                    SampleErrorKind::Other => self.errors.other += 1,
                }
                self.tagger.observe(error.time);
            }
            Event::Gpu(sample) => self.handle_gpu(sample),
            Event::Process(process) => {
                if self.config.process_root {
                    self.process_event(&process);
                }
                self.memory.process_event(&process, &mut self.buckets);
                self.tagger.observe(process.time);
            }
            Event::Memory(sample) => self.memory.memory(&sample, &mut self.buckets),
            Event::Cgroup(sample) => self.memory.cgroup(&sample),
        }
        self.release_tagged();
    }

    fn handle_stack(&mut self, sample: StackSample) {
        let gil = gil_sample(&sample);
        let held = self.fold_stack(sample);
        let gil = self.where_it_runs(gil, &held);
        self.hold_for_read(gil, held, None);
    }

    /// A stack sample whose GPU state another view of the same live run has decided (`top`'s
    /// table tags each sample once, by the same tagger): folded as [`Aggregator::handle`] would
    /// once its own tagger released it.
    pub fn handle_tagged(&mut self, sample: StackSample, tag: GpuTag) {
        let time = sample.time;
        let gil = gil_sample(&sample);
        let held = self.fold_stack(sample);
        let gil = self.where_it_runs(gil, &held);
        self.tagger.observe(time);
        self.hold_for_read(gil, held, Some(tag));
    }

    /// Folds a stack sample into the tables that do not wait for its GPU state; what is left
    /// for its tag.
    fn fold_stack(&mut self, sample: StackSample) -> Held {
        let name = sample.thread.display_name();
        let running = sample.thread.active;
        let kept = running || self.config.include_idle;
        let owner = self.owner_of(sample.pid);
        let thread = self
            .threads
            .observe(sample.pid, owner, &sample.thread, &name);
        count_in_lane(&mut self.buckets, thread, &sample, &name);
        if kept {
            thread.samples += 1;
        }
        let moved = match &thread.last_frames {
            Some(last) => !same_python_stack(last, &sample.frames),
            None => true,
        };
        if moved {
            thread.last_frames = Some(sample.frames.clone());
        }
        // Whether it works at this read: running, in no spin wait, with no GPU busy that it
        // could be spinning on (the GPU state at its instant, as far as the readings reach).
        let spin_wait = spin_wait_of(&mut thread.spin_wait, &sample.frames);
        let gpu_busy = self.tagger.tag_at(sample.time).idle() == Some(false);
        let working = works_at_read(running, sample.thread.owns_gil, spin_wait, gpu_busy);
        let key = (sample.pid, sample.thread.python_thread_id);
        self.motion.sample(sample.time, moved, key, working);
        if self.config.process_root {
            self.processes.sample(sample.pid, kept);
        }
        if kept {
            self.samples += 1;
        } else {
            self.idle_skipped += 1;
        }
        // A waiting thread's stack is interned too (not counted in the profile): where a
        // training loop waits is the verdict's answer.
        let known_stacks = self.table.stacks().len();
        let stack = {
            let (roots, n) = self.roots(&sample, &name);
            Some(self.table.intern(&roots[..n], &sample.frames))
        };
        if self.table.stacks().len() > known_stacks {
            self.learn_group_work(sample.pid, &sample.frames);
        }
        if let (true, Some(stack)) = (kept, stack) {
            self.table.count(stack);
        }
        // What ran while memory grew: the kept stack, matched to the process's readings by
        // time (they come on another path, sooner).
        self.memory.stack_sample(
            sample.pid,
            sample.time,
            stack.filter(|_| kept),
            &mut self.buckets,
        );
        let key = thread_key(sample.pid, &sample.thread);
        Held {
            stack,
            kept,
            running,
            thread: key,
            // Known once the sample's read is complete (`pass_read`).
            gil_waited: false,
            gil_holder: None,
        }
    }

    /// The roots a sample's stack hangs under: its thread's, and its process's above it with
    /// `process_root`: the first `n` of the array.
    fn roots(&mut self, sample: &StackSample, name: &str) -> ([FrameId; 2], usize) {
        let key = thread_key(sample.pid, &sample.thread);
        let Some(thread) = self.threads.get_mut(&key) else {
            return ([self.table.thread_root(name), 0], 1);
        };
        let thread_root = if sample.thread.name.is_some() {
            // The thread's samples from before its name was read are under its name too (its
            // kind's, for a thread of a kind read as one).
            if let Some(root) = thread.unnamed_root.take() {
                match thread.in_kind {
                    Some(_) => self
                        .table
                        .name_thread_root(root, &kind_label(thread.owner, name)),
                    None => self.table.name_thread_root(root, name),
                }
                thread.named_root = Some(root);
            }
            match thread.root {
                Some(root) if thread.name_unchanged => root,
                _ => {
                    // A thread of a kind read as one is under its kind's name.
                    let root = match thread.in_kind {
                        Some(_) => self.table.thread_root(&kind_label(thread.owner, name)),
                        None => self.table.thread_root(name),
                    };
                    thread.root = self.table.is_thread_root(root).then_some(root);
                    root
                }
            }
        } else if thread.named {
            // Named before (its name could not be read this time): its name stands.
            let known = match thread.in_kind {
                Some(_) => kind_label(thread.owner, &thread.name),
                None => thread.name.clone(),
            };
            self.table.thread_root(&known)
        } else {
            match thread.unnamed_root {
                Some(root) => root,
                // Threads not named yet come and go too: once one ended unnamed, those that
                // follow share the kind's root (`thread N`) until their names are read.
                None if thread.in_kind.is_some() => {
                    self.table.thread_root(&kind_label(thread.owner, name))
                }
                None => {
                    let root = self.table.unnamed_thread_root(name);
                    thread.unnamed_root = Some(root);
                    root
                }
            }
        };
        if self.config.process_root {
            let process_root = self.processes.root(sample.pid, &mut self.table);
            ([process_root, thread_root], 2)
        } else {
            ([thread_root, 0], 1)
        }
    }

    fn handle_gpu(&mut self, sample: GpuSample) {
        if let Some(pids) = &sample.compute_pids {
            self.compute_pids
                .get_or_insert_with(BTreeSet::new)
                .extend(pids.iter().copied());
        }
        self.memory.gpu(&sample);
        self.tagger.add_gpu(&sample);
        self.timeline.push(sample);
    }

    pub(super) fn release_tagged(&mut self) {
        let released = &mut self.released;
        self.tagger
            .release(|time, held, tag| released.push((time, held, tag)));
        self.pass_released();
    }

    /// Hands what the tagger released to the start-up gate and on into the tables.
    fn pass_released(&mut self) {
        let mut sink = Sink {
            table: &mut self.table,
            buckets: &mut self.buckets,
            threads: &mut self.threads,
        };
        let end = self.timeline.startup_end();
        if tagged::pass(&mut self.startup, end, &mut sink, self.released.drain(..)) {
            self.timeline.abandon_startup();
        }
    }

    /// Names the devices the GPU poller watches, so that stack samples also wait for a device
    /// that has not reported yet; otherwise only devices already seen are waited for.
    pub fn expect_gpu_devices(&mut self, devices: &[u32]) {
        for &device in devices {
            self.tagger.expect_device(device);
            self.timeline.expect_device(device);
        }
    }

    /// The end of the recording: tags every held sample with what is known.
    /// Samples still waiting for the end of start-up count as usual when none came.
    pub fn finish(&mut self) {
        self.complete_read();
        let released = &mut self.released;
        self.tagger
            .flush(|time, held, tag| released.push((time, held, tag)));
        self.pass_released();
        if matches!(self.startup, Startup::Waiting(_)) {
            let mut sink = Sink {
                table: &mut self.table,
                buckets: &mut self.buckets,
                threads: &mut self.threads,
            };
            tagged::give_up(&mut self.startup, &mut sink);
            self.timeline.abandon_startup();
        }
        self.memory.finish(&mut self.buckets);
    }

    /// Folded lines of one view, `thread;outer;...;inner` with their counts, sorted by stack;
    /// with `process_root`, `process PID COMMAND;thread;outer;...;inner`.
    /// Samples still held for GPU tagging are in `All` but not yet in the GPU views.
    pub fn folded(&self, view: StackView) -> Vec<(String, u64)> {
        let stacks = self.table.stacks().iter();
        self.table
            .folded_lines(stacks.map(|stack| (stack, view.count(&stack.counts))))
    }

    /// The GPU timeline kept in memory, in time order: every reading while a device has fewer
    /// than [`Limits::max_gpu_points`], then older readings merged into coarser points.
    pub fn gpu_timeline(&self) -> &[GpuSample] {
        self.timeline.samples()
    }

    pub fn config(&self) -> &AggregateConfig {
        &self.config
    }

    /// The recording's start on the event clock, the zero of timeline times.
    pub fn start(&self) -> Timestamp {
        self.start
    }

    /// Stack samples kept (not skipped as idle).
    pub fn samples(&self) -> u64 {
        self.samples
    }

    pub fn idle_samples_skipped(&self) -> u64 {
        self.idle_skipped
    }

    pub fn errors(&self) -> &ErrorCounts {
        &self.errors
    }

    /// Stack samples waiting for the GPU readings that cover them (and, while GPU readings
    /// are expected, those of the latest read, held until it is complete).
    pub fn pending_gpu_tagging(&self) -> usize {
        let read = if self.config.gpu_enabled {
            self.reads.len()
        } else {
            0
        };
        self.tagger.pending_len() + read
    }

    /// Distinct stacks interned so far: what memory grows with, up to [`Limits::max_stacks`].
    pub fn distinct_stacks(&self) -> usize {
        self.table.stacks().len()
    }

    /// Distinct code frames interned, up to [`Limits::max_frames`].
    pub fn distinct_frames(&self) -> usize {
        self.table.code_frame_count()
    }

    /// Distinct functions `(function, file)`: never more than the frames.
    pub fn distinct_functions(&self) -> usize {
        self.table.function_count()
    }

    /// Distinct thread names used as roots, up to [`Limits::max_thread_roots`].
    pub fn thread_roots(&self) -> usize {
        self.table.thread_root_count()
    }

    /// Distinct process roots, up to [`Limits::max_processes`].
    pub fn process_roots(&self) -> usize {
        self.table.process_root_count()
    }

    /// Threads in the per-thread table, up to [`Limits::max_threads`].
    pub fn threads_tracked(&self) -> usize {
        self.threads.len()
    }

    /// Processes in the per-process table, up to [`Limits::max_processes`].
    pub fn processes_tracked(&self) -> usize {
        self.processes.len()
    }

    /// Timeline points kept for one device, up to [`Limits::max_gpu_points`].
    pub fn gpu_points(&self, device: u32) -> usize {
        self.timeline.points(device)
    }

    /// GPU readings received from one device, whether kept as points or merged.
    pub fn gpu_readings(&self, device: u32) -> u64 {
        self.timeline.readings(device)
    }

    /// GPU readings held by the tagger, across devices: a few seconds' worth.
    pub fn gpu_readings_held(&self) -> usize {
        self.tagger.readings_len()
    }

    /// Samples per stack and per thread over time, in bounded buckets.
    pub fn time_buckets(&self) -> &TimeBuckets {
        &self.buckets
    }

    /// The interned stacks, frames and functions the buckets refer to.
    pub fn stack_table(&self) -> &StackTable {
        &self.table
    }

    /// The caps in force.
    pub fn limits(&self) -> &Limits {
        &self.limits
    }

    /// One line per cap reached so far, saying what happened to what it turned away; empty
    /// while every table is below its cap. The summary's `caps_reached`.
    pub fn caps_reached(&self) -> Vec<String> {
        let limits = &self.limits;
        let table = self.table.overflow();
        let threads = self.threads.folded();
        let processes = self.processes.folded();
        let mut caps = Vec::new();
        if table.stack_samples > 0 {
            caps.push(format!(
                "distinct stacks capped at {}: {} later samples of new stacks counted as \
                 {STACK_TABLE_FULL}",
                limits.max_stacks, table.stack_samples
            ));
        }
        if table.frame_samples > 0 {
            caps.push(format!(
                "distinct frames capped at {}: new frames of {} later samples shown as \
                 {FRAME_TABLE_FULL}",
                limits.max_frames, table.frame_samples
            ));
        }
        if table.thread_root_samples > 0 {
            caps.push(format!(
                "distinct thread names capped at {}: {} later samples of newly named threads \
                 rooted at {OTHER_THREADS}",
                limits.max_thread_roots, table.thread_root_samples
            ));
        }
        if threads.threads > 0 {
            caps.push(format!(
                "threads tracked capped at {}: {} least recently seen threads ({} samples) \
                 folded into {OTHER_THREADS}",
                limits.max_threads, threads.threads, threads.samples
            ));
        }
        if table.process_roots > 0 {
            caps.push(format!(
                "distinct process roots capped at {}: {} later processes rooted at \
                 {OTHER_PROCESSES}",
                limits.max_processes, table.process_roots
            ));
        }
        if processes.processes > 0 {
            caps.push(format!(
                "processes tracked capped at {}: {} least recently active processes ({} \
                 samples) folded into {OTHER_PROCESSES}",
                limits.max_processes, processes.processes, processes.samples
            ));
        }
        let ends_dropped = self.processes.groups.remarkable_dropped;
        if ends_dropped > 0 {
            caps.push(format!(
                "group members that ended by a signal, a non-zero status or the OOM killer \
                 named in processes_ended capped at the {REMARKABLE_ENDS_KEPT} newest: {ends_dropped} \
                 older ones counted in their group only"
            ));
        }
        if self.timeline.merged() > 0 {
            caps.push(format!(
                "GPU timeline in memory capped at {} points per device: older points merged \
                 pairwise {} times into coarser ones",
                limits.max_gpu_points,
                self.timeline.merged()
            ));
        }
        if self.tagger.forced() > 0 {
            caps.push(format!(
                "GPU tagging queue capped at {MAX_PENDING} samples: {} samples tagged before \
                 their GPU readings arrived",
                self.tagger.forced()
            ));
        }
        if self.tagger.dropped_readings() > 0 {
            caps.push(format!(
                "GPU readings held for tagging capped at {MAX_READINGS_PER_DEVICE} per device: \
                 {} older readings dropped",
                self.tagger.dropped_readings()
            ));
        }
        caps.extend(self.memory.caps_reached(limits.max_processes));
        caps
    }
}
