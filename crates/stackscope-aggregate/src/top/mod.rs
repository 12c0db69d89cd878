//! The table behind `stackscope top`: folds stack and GPU samples into per-function counts over
//! two windows, the last refresh interval and everything since start (or the last reset), and
//! derives sorted rows for any view option from those counts. Every count is kept per thread
//! and separately for idle-thread samples, so the keys that change the view (sort, idle threads,
//! per-thread) act at once, without refolding anything.
//!
//! Each stack sample is tagged with the GPU state at its instant by the recording's own
//! [`GpuTagger`] (held until the readings that cover it are in, with the same limits), so that
//! over one event stream this table and `summary.json` count the same GPU-idle samples and
//! the same per-thread and per-function samples (`tests/integration/top_agrees.rs` replays one
//! stream through both; `stackscope-report`'s `tests/integration/rebuild.rs` a recorded sample
//! log).
//!
//! Each thread's GIL is counted per window too ([`TopModel::thread_gil`]): the samples of one
//! read are held until the read is complete and then resolved together by the one GIL rule
//! ([`ReadGroups`]: held, waited for while another thread of its process held it, ran
//! without it, idle), as the recording's aggregator does, whatever order the threads were read
//! in. The GIL does not wait for the GPU's readings: a read's samples are counted once the read
//! is complete, and the read in progress is counted when an interval ends.
//!
//! A thread that ended (gone from its process's reads, or its process exited) is shown as it
//! was for [`ENDED_SHOWN_NANOS`]; then its since-start counts are folded into its kind's (its
//! name with digits as `N`: `Thread-N (worker) (ended)`), one entry per kind, and what was kept
//! for it goes: over days of threads and processes coming and going the table holds the live
//! ones, the last half-minute's ended ones and the kinds. The rows (by function) keep every
//! sample.
//!
//! Pure: no terminal, no clock, no threads. Time comes in with the events; the caller says when
//! an interval ends.

mod gpus;
mod memory;

use std::collections::HashMap;
use std::sync::Arc;

use stackscope_event::{Event, GpuSample, StackSample, Timestamp};

use crate::gil::{frames_key, GilCounts, GilRead, GilSample, ReadGroups, RunsAt};
use crate::gpu::{GpuTag, GpuTagger};

use gpus::Gpus;
pub use gpus::{GpuLine, GPU_HISTORY_SECS};
pub use memory::{LatestMemory, ProcessMemoryLine};

/// Past this many (thread, function) entries in a window, new ones are counted under one
/// [`OTHER_FUNCTIONS`] entry per thread: a session of days over churning threads keeps bounded
/// memory, and the samples still add up.
pub const MAX_ENTRIES: usize = 50_000;
/// The function name of the entry that takes the samples past [`MAX_ENTRIES`].
pub const OTHER_FUNCTIONS: &str = "(other functions)";
/// How long a thread that ended keeps its own per-thread rows and GIL line before they are
/// folded into its kind's: long enough to be seen ending at `top`'s one-second refresh, short
/// enough that a thread per request at 100 a second leaves some thousands at most.
pub const ENDED_SHOWN_NANOS: u64 = 30_000_000_000;
/// Kinds of ended threads kept apart; past it they share one, [`OTHER_ENDED_THREADS`].
pub const MAX_ENDED_KINDS: usize = 256;
/// The kind of the ended threads past [`MAX_ENDED_KINDS`] kinds.
pub const OTHER_ENDED_THREADS: &str = "(other threads)";
/// The pid of the kinds of ended threads: past any real pid, one entry per kind whatever the
/// processes its threads were of.
pub const ENDED_PID: u32 = u32::MAX;

/// Index into the `[active, idle]` pairs of counts.
const ACTIVE: usize = 0;
const IDLE: usize = 1;

/// A thread of a process: the interpreter's id, since the OS id is not always known.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub struct ThreadId {
    pub pid: u32,
    pub id: u64,
}

/// A function is (name, file), as in the summary: its lines are merged into one row.
#[derive(Debug, Clone, PartialEq, Eq, Hash)]
struct FnKey {
    function: Arc<str>,
    file: Arc<str>,
}

#[derive(Debug, Clone, Default)]
struct Counts {
    /// Samples with the function as the innermost frame, `[active, idle]`.
    own: [u64; 2],
    /// Samples with the function anywhere on the stack, counted once however deep it recursed.
    total: [u64; 2],
    /// Of `total`, the samples taken while the GPU idled.
    gpu_idle: [u64; 2],
    /// Samples per line of the function's innermost frame: a row names its busiest line.
    lines: HashMap<u32, u64>,
}

impl Counts {
    /// Adds another thread's counts of the same function (one that ended, into its kind's).
    fn absorb(&mut self, other: &Counts) {
        for k in [ACTIVE, IDLE] {
            self.own[k] += other.own[k];
            self.total[k] += other.total[k];
            self.gpu_idle[k] += other.gpu_idle[k];
        }
        add_lines(&mut self.lines, &other.lines);
    }
}

/// The counts of one stretch of time.
#[derive(Debug, Clone, Default)]
struct Window {
    entries: HashMap<(ThreadId, FnKey), Counts>,
    samples: [u64; 2],
    gpu_idle_samples: [u64; 2],
    /// Threads sampled, and their samples `[active, idle]`.
    threads: HashMap<ThreadId, [u64; 2]>,
    /// Each thread's GIL, by sample (idle samples too: a wait for the GIL is a thread asleep).
    gil: HashMap<ThreadId, GilCounts>,
}

impl Window {
    fn add(&mut self, sample: &StackSample, gpu_idle: bool) {
        let kind = if sample.thread.active { ACTIVE } else { IDLE };
        let thread = thread_id(sample);
        self.samples[kind] += 1;
        if gpu_idle {
            self.gpu_idle_samples[kind] += 1;
        }
        self.threads.entry(thread).or_default()[kind] += 1;
        // A stack is a handful of frames: a linear scan beats hashing for "seen already?".
        let mut seen: Vec<FnKey> = Vec::with_capacity(sample.frames.len());
        for (depth, frame) in sample.frames.iter().enumerate() {
            let mut key = FnKey {
                function: frame.function.clone(),
                file: frame.file.clone(),
            };
            if self.entries.len() >= MAX_ENTRIES
                && !self.entries.contains_key(&(thread, key.clone()))
            {
                key = other_key();
            }
            if seen.contains(&key) {
                continue;
            }
            seen.push(key.clone());
            let counts = self.entries.entry((thread, key)).or_default();
            counts.total[kind] += 1;
            if gpu_idle {
                counts.gpu_idle[kind] += 1;
            }
            if depth == 0 {
                counts.own[kind] += 1;
            }
            *counts.lines.entry(frame.line).or_insert(0) += 1;
        }
    }
}

/// A sample whose read is complete: its GIL state into both windows.
fn count_gil(
    current: &mut Window,
    all: &mut Window,
    sample: GilSample<ThreadId>,
    read: GilRead<ThreadId>,
) {
    current
        .gil
        .entry(sample.thread)
        .or_default()
        .add(read.state);
    all.gil.entry(sample.thread).or_default().add(read.state);
}

/// A tagged sample into the interval in progress and the since-start counts.
fn fold_tagged(current: &mut Window, all: &mut Window, sample: &StackSample, tag: GpuTag) {
    let gpu_idle = tag == GpuTag::Idle;
    current.add(sample, gpu_idle);
    all.add(sample, gpu_idle);
}

fn other_key() -> FnKey {
    FnKey {
        function: Arc::from(OTHER_FUNCTIONS),
        file: Arc::from(""),
    }
}

fn thread_id(sample: &StackSample) -> ThreadId {
    ThreadId {
        pid: sample.pid,
        id: sample.thread.python_thread_id,
    }
}

/// What the table is sorted by, descending.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum SortKey {
    OwnInterval,
    TotalInterval,
    OwnAll,
    TotalAll,
    GpuIdle,
}

impl SortKey {
    /// The next sort of the `s` key's cycle; the GPU-idle share only when there is GPU data.
    pub fn next(self, gpu: bool) -> SortKey {
        match self {
            SortKey::OwnInterval => SortKey::TotalInterval,
            SortKey::TotalInterval => SortKey::OwnAll,
            SortKey::OwnAll => SortKey::TotalAll,
            SortKey::TotalAll if gpu => SortKey::GpuIdle,
            SortKey::TotalAll | SortKey::GpuIdle => SortKey::OwnInterval,
        }
    }

    pub fn label(self) -> &'static str {
        match self {
            SortKey::OwnInterval => "own% (last interval)",
            SortKey::TotalInterval => "total% (last interval)",
            SortKey::OwnAll => "own% (since start)",
            SortKey::TotalAll => "total% (since start)",
            SortKey::GpuIdle => "GPU-idle share%",
        }
    }
}

/// How the rows are derived: what the keys toggle.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct ViewOptions {
    pub sort: SortKey,
    /// Count the samples of idle threads (sleeping, blocked) too.
    pub include_idle: bool,
    /// One row per (thread, function) rather than per function.
    pub per_thread: bool,
}

impl Default for ViewOptions {
    fn default() -> Self {
        ViewOptions {
            sort: SortKey::OwnInterval,
            include_idle: false,
            per_thread: false,
        }
    }
}

/// One row of the table. Shares are percentages of the samples the options count.
#[derive(Debug, Clone, PartialEq)]
pub struct Row {
    /// The thread's name, in per-thread rows.
    pub thread: Option<Arc<str>>,
    pub function: Arc<str>,
    pub file: Arc<str>,
    /// The most-sampled line; 0 when unknown.
    pub line: u32,
    pub own_interval: f64,
    pub total_interval: f64,
    pub own_all: f64,
    pub total_all: f64,
    /// The function's share of the samples taken while the GPU idled, since start; `None`
    /// without GPU data.
    pub gpu_idle: Option<f64>,
    /// The sample counts behind the since-start shares.
    pub counts: RowCounts,
}

/// A row's sample counts since start (or the last reset), under the options' idle-thread
/// choice: what `summary.json`'s `self_samples` and `total_samples` count.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub struct RowCounts {
    /// Samples with the function as the innermost frame.
    pub own: u64,
    /// Samples with the function anywhere on the stack.
    pub total: u64,
    /// Of `total`, those taken while the GPU idled.
    pub gpu_idle: u64,
}

impl Row {
    fn value(&self, key: SortKey) -> f64 {
        match key {
            SortKey::OwnInterval => self.own_interval,
            SortKey::TotalInterval => self.total_interval,
            SortKey::OwnAll => self.own_all,
            SortKey::TotalAll => self.total_all,
            SortKey::GpuIdle => self.gpu_idle.unwrap_or(0.0),
        }
    }
}

/// Sample counts for the header, under the options' idle-thread choice.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub struct Totals {
    pub interval_samples: u64,
    pub all_samples: u64,
    /// Samples left out because their thread was idle (0 when idle threads are shown).
    pub hidden_idle_samples: u64,
    pub gpu_idle_samples: u64,
    /// Threads sampled in the last interval, and those of them seen active.
    pub threads: usize,
    pub active_threads: usize,
}

/// One thread's GIL over the last interval and since start (or the last reset).
#[derive(Debug, Clone, PartialEq)]
pub struct ThreadGil {
    pub thread: ThreadId,
    /// As the per-thread rows name it (with its pid when several processes are sampled).
    pub label: Arc<str>,
    pub interval: GilCounts,
    pub all: GilCounts,
}

impl ThreadGil {
    /// The counts of the window the sort key reads: since start for the since-start sorts.
    pub fn counts(&self, sort: SortKey) -> &GilCounts {
        match sort {
            SortKey::OwnInterval | SortKey::TotalInterval => &self.interval,
            SortKey::OwnAll | SortKey::TotalAll | SortKey::GpuIdle => &self.all,
        }
    }
}

/// Everything `top` shows, folded from the events.
#[derive(Debug, Clone)]
pub struct TopModel {
    gpu_enabled: bool,
    /// The interval in progress.
    current: Window,
    /// The last complete interval: what the interval columns show.
    interval: Window,
    /// Since start or the last reset, including the interval in progress.
    all: Window,
    names: HashMap<ThreadId, Arc<str>>,
    /// What the GPU lines show.
    gpus: Gpus,
    /// What the process lines show: each process's memory now.
    memory: LatestMemory,
    /// Stack samples waiting for the GPU readings that cover them, and those readings.
    tagger: GpuTagger<StackSample>,
    /// The samples of the latest read, held until it is complete (`gil/`).
    reads: ReadGroups<ThreadId, ()>,
    /// Where each thread runs, by its stack's hash: only there is a wait one for the GIL.
    /// Kept over resets: it is what the threads do, not a count of the window.
    runs_at: HashMap<ThreadId, RunsAt<u64>>,
    /// Which threads ended, and when ([`ENDED_SHOWN_NANOS`]).
    ends: Ends,
}

/// Which threads ended: each process's read in progress (a read's samples share its instant),
/// the threads of its last complete read, and the threads found gone since.
#[derive(Debug, Clone, Default)]
struct Ends {
    reading: HashMap<u32, (Timestamp, Vec<u64>)>,
    alive: HashMap<u32, Vec<u64>>,
    /// Threads that ended, and when, in that order.
    ended: Vec<(ThreadId, Timestamp)>,
    /// The kinds their counts went to, by name, with their ids (under [`ENDED_PID`]).
    kinds: HashMap<Arc<str>, u64>,
    kind_names: HashMap<u64, Arc<str>>,
    /// The latest time of any event.
    latest: Timestamp,
}

impl Ends {
    /// A sample of `thread` at `time`: a read of its process at a later instant completes the
    /// one before, whose threads are those alive then.
    fn sample(&mut self, thread: ThreadId, time: Timestamp) {
        self.latest = self.latest.max(time);
        let reading = self
            .reading
            .entry(thread.pid)
            .or_insert_with(|| (time, Vec::new()));
        if time > reading.0 {
            let (at, read) = std::mem::replace(reading, (time, vec![thread.id]));
            self.complete(thread.pid, at, read);
        } else if time == reading.0 && !reading.1.contains(&thread.id) {
            reading.1.push(thread.id);
        }
    }

    /// A complete read of `pid` at `at`: the threads alive before and not in it ended.
    fn complete(&mut self, pid: u32, at: Timestamp, read: Vec<u64>) {
        let before = self.alive.insert(pid, read).unwrap_or_default();
        let now = &self.alive[&pid];
        for id in before {
            if !now.contains(&id) {
                self.ended.push((ThreadId { pid, id }, at));
            }
        }
    }

    /// Process `pid` exited at `time`: its threads with it.
    fn exited(&mut self, pid: u32, time: Timestamp) {
        self.latest = self.latest.max(time);
        let reading = self.reading.remove(&pid).map(|r| r.1).unwrap_or_default();
        let mut threads = self.alive.remove(&pid).unwrap_or_default();
        threads.extend(reading);
        threads.sort_unstable();
        threads.dedup();
        for id in threads {
            self.ended.push((ThreadId { pid, id }, time));
        }
    }

    /// The threads ended [`ENDED_SHOWN_NANOS`] ago or earlier, taken out of the list.
    fn due(&mut self) -> Vec<ThreadId> {
        let horizon = self.latest.as_nanos().saturating_sub(ENDED_SHOWN_NANOS);
        // Ends are found about in time order (each process's reads complete a moment apart):
        // one a little out of order waits for the one before it.
        let due = self
            .ended
            .iter()
            .take_while(|(_, at)| at.as_nanos() <= horizon)
            .count();
        self.ended.drain(..due).map(|(t, _)| t).collect()
    }

    /// The entry of the kind of a thread named `name`.
    fn kind_of(&mut self, name: &str) -> ThreadId {
        let mut kind: Arc<str> = Arc::from(crate::jobs::thread_key(name));
        if !self.kinds.contains_key(&kind) && self.kinds.len() >= MAX_ENDED_KINDS {
            kind = Arc::from(OTHER_ENDED_THREADS);
        }
        let next = self.kinds.len() as u64;
        let id = *self.kinds.entry(kind.clone()).or_insert(next);
        self.kind_names
            .entry(id)
            .or_insert_with(|| Arc::from(format!("{kind} (ended)")));
        ThreadId { pid: ENDED_PID, id }
    }
}

impl TopModel {
    pub fn new(idle_below: f32, gpu_enabled: bool) -> TopModel {
        TopModel {
            gpu_enabled,
            current: Window::default(),
            interval: Window::default(),
            all: Window::default(),
            names: HashMap::new(),
            gpus: Gpus::default(),
            memory: LatestMemory::default(),
            tagger: GpuTagger::new(idle_below),
            reads: ReadGroups::default(),
            runs_at: HashMap::new(),
            ends: Ends::default(),
        }
    }

    pub fn gpu_enabled(&self) -> bool {
        self.gpu_enabled
    }

    /// Takes one event from the channel, as the recording's aggregator would: every event's
    /// time ages the held samples.
    pub fn handle(&mut self, event: Event) {
        self.handle_with(event, &mut |_, _| {});
    }

    /// [`TopModel::handle`], handing each stack sample on with its GPU tag once it is folded:
    /// the run's other views (the verdict's aggregate, the metrics) take the tag from here
    /// rather than tag the samples again.
    pub fn handle_with(&mut self, event: Event, tagged: &mut dyn FnMut(StackSample, GpuTag)) {
        self.memory.observe(&event);
        if !matches!(event, Event::Stack(_)) {
            // Any other event ends the read its samples came in, as in the aggregator.
            self.complete_read();
        }
        match event {
            Event::Stack(sample) => self.add_stack(sample, tagged),
            Event::Gpu(sample) => self.add_gpu(&sample, tagged),
            // Errors and process changes are counted by the sampler's own statistics.
            Event::SampleError(error) => self.observe(error.time, tagged),
            Event::Process(process) => {
                if process.kind == stackscope_event::ProcessEventKind::Exited {
                    self.ends.exited(process.pid, process.time);
                }
                self.observe(process.time, tagged)
            }
            Event::Memory(sample) => self.observe(sample.time, tagged),
            Event::Cgroup(sample) => self.observe(sample.time, tagged),
        }
    }

    fn observe(&mut self, time: Timestamp, tagged: &mut dyn FnMut(StackSample, GpuTag)) {
        self.tagger.observe(time);
        self.release(tagged);
    }

    /// Folds a stack sample: at once without GPU data, else once the GPU readings that cover
    /// its instant are in (or it waited long enough).
    fn add_stack(&mut self, sample: StackSample, tagged: &mut dyn FnMut(StackSample, GpuTag)) {
        let id = thread_id(&sample);
        self.ends.sample(id, sample.time);
        let name = sample.thread.display_name();
        if self.names.get(&id).is_none_or(|n| **n != *name) {
            self.names.insert(id, Arc::from(name));
        }
        let runs_here = self
            .runs_at
            .entry(id)
            .or_default()
            .observe(frames_key(&sample.frames), sample.thread.active);
        let (current, all) = (&mut self.current, &mut self.all);
        self.reads.push(
            GilSample::of(&sample, id, runs_here),
            (),
            &mut |(), s, read| count_gil(current, all, s, read),
        );
        if self.gpu_enabled {
            self.tagger.hold(sample.time, sample);
            self.release(tagged);
        } else {
            self.tagger.observe(sample.time);
            self.current.add(&sample, false);
            self.all.add(&sample, false);
            tagged(sample, GpuTag::Unknown);
        }
    }

    fn add_gpu(&mut self, sample: &GpuSample, tagged: &mut dyn FnMut(StackSample, GpuTag)) {
        self.tagger.add_gpu(sample);
        self.gpus.add(sample);
        self.release(tagged);
    }

    /// Folds every held sample with what is known now: the target has ended, no reading will
    /// come.
    pub fn flush(&mut self) {
        self.flush_with(&mut |_, _| {});
    }

    /// [`TopModel::flush`], handing each sample on with its tag ([`TopModel::handle_with`]).
    pub fn flush_with(&mut self, tagged: &mut dyn FnMut(StackSample, GpuTag)) {
        self.complete_read();
        let (current, all) = (&mut self.current, &mut self.all);
        self.tagger.flush(|_, sample, tag| {
            fold_tagged(current, all, &sample, tag);
            tagged(sample, tag);
        });
    }

    fn release(&mut self, tagged: &mut dyn FnMut(StackSample, GpuTag)) {
        let (current, all) = (&mut self.current, &mut self.all);
        self.tagger.release(|_, sample, tag| {
            fold_tagged(current, all, &sample, tag);
            tagged(sample, tag);
        });
    }

    /// Names the GPUs the poller watches now, for the GPU lines, and forgets the lines of the
    /// others (in `auto` the poller follows the target from device to device); an empty list
    /// changes nothing. Tagging does not use it: it waits for the devices the events show, as a
    /// recording does.
    pub fn set_devices(&mut self, devices: &[(u32, String)]) {
        self.gpus.set_devices(devices);
    }

    /// Whether the target's GPUs idled at `time` (nanoseconds), by what is known now (see
    /// [`GpuTagger::tag_at`]). `None` without GPU data there.
    pub fn gpu_idle_at(&self, time: u64) -> Option<bool> {
        if !self.gpu_enabled {
            return None;
        }
        self.tagger.tag_at(Timestamp(time)).idle()
    }

    /// Counts the GIL of the read held: it is complete (another kind of event came, or the
    /// input ended).
    fn complete_read(&mut self) {
        let (current, all) = (&mut self.current, &mut self.all);
        self.reads
            .flush(&mut |(), s, read| count_gil(current, all, s, read));
    }

    /// Ends the interval in progress: its counts become what the interval columns show. The
    /// read in progress stays held and counts in the next one: a batch of events may end in
    /// the middle of a read, and a read split in two would lose who held the GIL.
    pub fn end_interval(&mut self) {
        self.interval = std::mem::take(&mut self.current);
        self.release_ended();
    }

    /// Folds the since-start counts of the threads ended [`ENDED_SHOWN_NANOS`] ago into their
    /// kinds', and lets go of what was kept for them. The rows by function are unchanged.
    fn release_ended(&mut self) {
        let due = self.ends.due();
        if due.is_empty() {
            return;
        }
        let mut into: HashMap<ThreadId, ThreadId> = HashMap::with_capacity(due.len());
        for thread in due {
            let name = self
                .names
                .remove(&thread)
                .unwrap_or_else(|| Arc::from(format!("thread {:#x}", thread.id)));
            self.runs_at.remove(&thread);
            into.insert(thread, self.ends.kind_of(&name));
        }
        let all = &mut self.all;
        let moved: Vec<(ThreadId, FnKey)> = all
            .entries
            .keys()
            .filter(|(thread, _)| into.contains_key(thread))
            .cloned()
            .collect();
        for (thread, key) in moved {
            let Some(counts) = all.entries.remove(&(thread, key.clone())) else {
                continue;
            };
            let kind = into[&thread];
            let key = if all.entries.len() >= MAX_ENTRIES
                && !all.entries.contains_key(&(kind, key.clone()))
            {
                other_key()
            } else {
                key
            };
            all.entries.entry((kind, key)).or_default().absorb(&counts);
        }
        for (thread, kind) in &into {
            if let Some(samples) = all.threads.remove(thread) {
                let to = all.threads.entry(*kind).or_default();
                to[ACTIVE] += samples[ACTIVE];
                to[IDLE] += samples[IDLE];
            }
            if let Some(gil) = all.gil.remove(thread) {
                let to = all.gil.entry(*kind).or_default();
                to.samples += gil.samples;
                to.held += gil.held;
                to.waited += gil.waited;
                to.ran_without += gil.ran_without;
            }
        }
    }

    /// Threads the table keeps something of (their names, where they run, their since-start
    /// counts, or a place among those ended), kinds of ended threads aside: for tests that a
    /// thread that ended is let go.
    #[cfg(test)]
    pub(crate) fn threads_kept(&self) -> usize {
        let mut threads: std::collections::BTreeSet<ThreadId> = self
            .names
            .keys()
            .chain(self.runs_at.keys())
            .chain(self.all.threads.keys())
            .chain(self.all.gil.keys())
            .chain(self.all.entries.keys().map(|(t, _)| t))
            .copied()
            .collect();
        threads.retain(|t| t.pid != ENDED_PID);
        threads.len()
    }

    /// Clears the since-start counts (the `r` key); the last interval stays on screen.
    pub fn reset(&mut self) {
        self.all = Window::default();
    }

    pub fn totals(&self, options: &ViewOptions) -> Totals {
        let kinds = kinds(options.include_idle);
        let sum = |pair: [u64; 2]| kinds.iter().map(|&k| pair[k]).sum::<u64>();
        Totals {
            interval_samples: sum(self.interval.samples),
            all_samples: sum(self.all.samples),
            hidden_idle_samples: if options.include_idle {
                0
            } else {
                self.all.samples[IDLE]
            },
            gpu_idle_samples: sum(self.all.gpu_idle_samples),
            threads: self.interval.threads.len(),
            active_threads: self
                .interval
                .threads
                .values()
                .filter(|c| c[ACTIVE] > 0)
                .count(),
        }
    }

    /// Samples per thread since start (or the last reset), under the options' idle-thread
    /// choice, by thread: what `summary.json`'s `threads[].samples` counts.
    pub fn thread_samples(&self, options: &ViewOptions) -> Vec<(ThreadId, u64)> {
        let kinds = kinds(options.include_idle);
        let mut threads: Vec<(ThreadId, u64)> = self
            .all
            .threads
            .iter()
            .map(|(&t, c)| (t, kinds.iter().map(|&k| c[k]).sum()))
            .collect();
        threads.sort_unstable();
        threads
    }

    /// Each thread's GIL, those that held the GIL or waited for it in either window, most
    /// held and waited (over the last interval) first.
    pub fn thread_gil(&self) -> Vec<ThreadGil> {
        let several_processes = self.several_processes();
        let mut threads: Vec<ThreadGil> = self
            .all
            .gil
            .keys()
            .chain(self.interval.gil.keys())
            .copied()
            .collect::<std::collections::BTreeSet<ThreadId>>()
            .into_iter()
            .map(|thread| ThreadGil {
                thread,
                label: self.thread_label(thread, several_processes),
                interval: self.interval.gil.get(&thread).copied().unwrap_or_default(),
                all: self.all.gil.get(&thread).copied().unwrap_or_default(),
            })
            .filter(|t| t.interval.held + t.interval.waited + t.all.held + t.all.waited > 0)
            .collect();
        let busy = |c: &GilCounts| c.held + c.waited;
        threads.sort_by(|a, b| {
            busy(&b.interval)
                .cmp(&busy(&a.interval))
                .then(busy(&b.all).cmp(&busy(&a.all)))
                .then(a.thread.cmp(&b.thread))
        });
        threads
    }

    pub fn gpu_lines(&self) -> Vec<GpuLine> {
        self.gpus.lines()
    }

    /// Each process's memory now, by pid: the processes with a memory or GPU memory reading
    /// that have not exited.
    pub fn memory_lines(&self) -> Vec<ProcessMemoryLine> {
        self.memory.lines()
    }

    /// The rows, sorted, with at least one sample counted under the options.
    pub fn rows(&self, options: &ViewOptions) -> Vec<Row> {
        let kinds = kinds(options.include_idle);
        let sum = |pair: &[u64; 2]| kinds.iter().map(|&k| pair[k]).sum::<u64>();
        let mut acc: HashMap<(Option<ThreadId>, FnKey), RowAcc> = HashMap::new();
        let group =
            |thread: ThreadId, key: &FnKey| (options.per_thread.then_some(thread), key.clone());
        for ((thread, key), c) in &self.interval.entries {
            let a = acc.entry(group(*thread, key)).or_default();
            a.own_interval += sum(&c.own);
            a.total_interval += sum(&c.total);
            add_lines(&mut a.interval_lines, &c.lines);
        }
        for ((thread, key), c) in &self.all.entries {
            let a = acc.entry(group(*thread, key)).or_default();
            a.own_all += sum(&c.own);
            a.total_all += sum(&c.total);
            a.gpu_idle += sum(&c.gpu_idle);
            add_lines(&mut a.all_lines, &c.lines);
        }
        let interval_base = sum(&self.interval.samples);
        let all_base = sum(&self.all.samples);
        let idle_base = sum(&self.all.gpu_idle_samples);
        let several_processes = self.several_processes();
        let mut rows: Vec<Row> = acc
            .into_iter()
            .filter(|(_, a)| a.total_interval + a.total_all > 0)
            .map(|((thread, key), a)| {
                // The since-start lines are the steadier choice; after a reset, the interval's.
                let lines = if a.all_lines.is_empty() {
                    &a.interval_lines
                } else {
                    &a.all_lines
                };
                Row {
                    thread: thread.map(|t| self.thread_label(t, several_processes)),
                    function: key.function,
                    file: key.file,
                    line: busiest_line(lines),
                    own_interval: percent(a.own_interval, interval_base),
                    total_interval: percent(a.total_interval, interval_base),
                    own_all: percent(a.own_all, all_base),
                    total_all: percent(a.total_all, all_base),
                    gpu_idle: self.gpu_enabled.then(|| percent(a.gpu_idle, idle_base)),
                    counts: RowCounts {
                        own: a.own_all,
                        total: a.total_all,
                        gpu_idle: a.gpu_idle,
                    },
                }
            })
            .collect();
        sort_rows(&mut rows, options.sort);
        rows
    }

    /// Whether threads of more than one process were sampled: labels then carry the pid.
    fn several_processes(&self) -> bool {
        let mut pids = self.names.keys().map(|t| t.pid).filter(|&p| p != ENDED_PID);
        let first = pids.next();
        pids.any(|p| Some(p) != first)
    }

    fn thread_label(&self, thread: ThreadId, with_pid: bool) -> Arc<str> {
        if thread.pid == ENDED_PID {
            if let Some(kind) = self.ends.kind_names.get(&thread.id) {
                return kind.clone();
            }
        }
        let name = self
            .names
            .get(&thread)
            .cloned()
            .unwrap_or_else(|| Arc::from(format!("thread {:#x}", thread.id)));
        if with_pid {
            Arc::from(format!("{}:{name}", thread.pid))
        } else {
            name
        }
    }
}

#[derive(Default)]
struct RowAcc {
    own_interval: u64,
    total_interval: u64,
    own_all: u64,
    total_all: u64,
    gpu_idle: u64,
    interval_lines: HashMap<u32, u64>,
    all_lines: HashMap<u32, u64>,
}

fn kinds(include_idle: bool) -> &'static [usize] {
    if include_idle {
        &[ACTIVE, IDLE]
    } else {
        &[ACTIVE]
    }
}

fn add_lines(into: &mut HashMap<u32, u64>, from: &HashMap<u32, u64>) {
    for (&line, &n) in from {
        *into.entry(line).or_insert(0) += n;
    }
}

/// The line with the most samples; the lowest on a tie, so the choice does not flicker.
fn busiest_line(lines: &HashMap<u32, u64>) -> u32 {
    lines
        .iter()
        .max_by(|a, b| a.1.cmp(b.1).then(b.0.cmp(a.0)))
        .map_or(0, |(&line, _)| line)
}

fn percent(part: u64, whole: u64) -> f64 {
    if whole == 0 {
        0.0
    } else {
        part as f64 * 100.0 / whole as f64
    }
}

/// Descending by the sort key, then by the other columns, then by name, so equal rows keep
/// one order from refresh to refresh.
fn sort_rows(rows: &mut [Row], key: SortKey) {
    const ORDER: [SortKey; 5] = [
        SortKey::OwnInterval,
        SortKey::TotalInterval,
        SortKey::OwnAll,
        SortKey::TotalAll,
        SortKey::GpuIdle,
    ];
    rows.sort_by(|a, b| {
        std::iter::once(key)
            .chain(ORDER)
            .map(|k| b.value(k).total_cmp(&a.value(k)))
            .find(|o| o.is_ne())
            .unwrap_or(std::cmp::Ordering::Equal)
            .then_with(|| a.function.cmp(&b.function))
            .then_with(|| a.file.cmp(&b.file))
            .then_with(|| a.thread.cmp(&b.thread))
    });
}

#[cfg(test)]
mod tests;
