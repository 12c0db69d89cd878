//! Memory: every process's memory over time, the job's memory cgroup, what ran while memory
//! grew, and the verdict on it (steady growth, copy-on-write in forked workers, GPU memory
//! that climbs).
//!
//! The memory poller's readings ([`MemorySample`], [`CgroupSample`]) and the GPU poller's
//! per-process GPU memory ([`GpuSample::process_memory`]) arrive on the channel beside the
//! stacks; growth of a process's resident memory between two readings is charged to the
//! stacks sampled in that process in that interval. That is what ran while memory grew, not
//! an allocation trace, and the outputs say so.
//!
//! - `timeline`: what is kept of each process's readings, its GPU memory and the cgroup's,
//!   bounded (`series`: the thinned series, the running fit, the trend);
//! - `ended`: what is kept of the processes that ended: some whole, the others by kind, so
//!   that a job that starts and ends workers for days keeps memory bounded;
//! - `attribution`: growth matched by time to the stacks kept for its process;
//! - `roles`: what each process is to the job, one name for the timeline and the summary;
//! - `summary` and `verdict` (`text`: sizes and rates in words): `summary.json`'s `memory`.

mod attribution;
mod ended;
mod roles;
mod series;
mod summary;
mod text;
mod timeline;
mod verdict;

#[cfg(test)]
mod tests;
#[cfg(test)]
mod tests_ended;
#[cfg(test)]
mod tests_verdict;

use foldhash::HashMap;
use serde::{Deserialize, Serialize};
use stackscope_event::{
    CgroupSample, GpuSample, HowEnded, MemorySample, ProcessEvent, ProcessEventKind,
    ProcessGpuMemory, Timestamp,
};

use crate::fold::{StackId, TimeBuckets};
use attribution::Attribution;
use ended::{Ended, EndedProcess, Identity};
pub use series::growth_rate;
pub use text::{rate as rate_text, size as size_text};
use timeline::{Cgroup, GpuMemory, Processes};
pub(crate) use timeline::{GONE_AFTER_NANOS, GONE_AFTER_ROUNDS};

/// One process's memory at one reading, as `memory-timeline.csv` writes it.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct MemoryPoint {
    /// Seconds since the recording's start.
    pub secs: f64,
    pub pid: u32,
    /// The process's role in the job, as the summary names it (`trainer`, `DataLoader worker
    /// 1`, `rank 3`, `main`...).
    pub role: String,
    pub rss: u64,
    pub private: Option<u64>,
    pub shared: Option<u64>,
    pub swap: Option<u64>,
    /// Its GPU memory at the latest GPU reading before, summed over devices.
    pub gpu_memory: Option<u64>,
}

/// One reading of the job's memory cgroup.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct CgroupPoint {
    pub secs: f64,
    pub usage: u64,
    pub limit: Option<u64>,
    pub oom_kills: Option<u64>,
}

/// `summary.json`'s `memory`.
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
pub struct MemorySummary {
    /// Every process read and kept whole, largest peak first: those alive, and of those that
    /// ended the most recent, the largest and those the verdict speaks of.
    pub processes: Vec<ProcessMemory>,
    /// Processes that ended, and of them those folded into `folded` (not in `processes`).
    #[serde(default)]
    pub processes_ended: u64,
    #[serde(default)]
    pub processes_folded: u64,
    /// The processes folded, by kind, most first.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub folded: Vec<FoldedProcessMemory>,
    /// `None` when no cgroup was read.
    pub cgroup: Option<CgroupMemory>,
    /// What there is to say; empty when memory was flat.
    pub verdict: Vec<MemoryFinding>,
    /// Growth of resident memory between two readings of a process in which none of its
    /// samples was kept (all its threads idle and left out, or not sampled): charged to no
    /// stack.
    #[serde(default)]
    pub growth_unattributed_bytes: u64,
}

#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct ProcessMemory {
    pub pid: u32,
    pub role: String,
    pub rss_start: u64,
    pub rss_peak: u64,
    pub rss_end: u64,
    /// The slope of its resident memory over the recording (least squares), bytes a second.
    pub growth_bytes_per_s: f64,
    #[serde(default)]
    pub private_start: Option<u64>,
    #[serde(default)]
    pub private_end: Option<u64>,
    #[serde(default)]
    pub gpu_memory_peak: Option<u64>,
    /// Seconds since the start of its first and last reading.
    pub first_secs: f64,
    pub last_secs: f64,
}

/// Processes of one kind that ended, folded together: `summary.json`'s `memory.folded`.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct FoldedProcessMemory {
    /// Their command line with every run of digits as `N`; empty where the sampler did not
    /// follow them (their command was not told), `(other commands)` past the kinds kept apart.
    pub kind: String,
    #[serde(default)]
    pub rank: Option<u32>,
    pub processes: u64,
    /// The highest peak of their resident memory, and the mean of their peaks.
    pub rss_peak: u64,
    pub rss_peak_mean: u64,
    #[serde(default)]
    pub gpu_memory_peak: Option<u64>,
    /// Seconds since the start of the first one's first reading and of the last one's end.
    pub first_secs: f64,
    pub last_secs: f64,
}

#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct CgroupMemory {
    pub usage_peak: u64,
    pub limit: Option<u64>,
    /// OOM kills the cgroup counted during the recording.
    #[serde(default)]
    pub oom_kills: u64,
}

#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum MemoryFindingKind {
    /// Steady growth of one process's resident memory: a leak, or a cache without bound.
    Leak,
    /// Forked workers whose private memory grows while their resident memory stays: pages
    /// shared with the parent copied as refcounts are touched.
    CopyOnWrite,
    /// A process's GPU memory that climbs.
    GpuGrowth,
    /// A process of the job the kernel's OOM killer ended, with its climb.
    OomKilled,
}

/// One thing the verdict says about memory.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct MemoryFinding {
    pub kind: MemoryFindingKind,
    /// The process it is about (for copy-on-write, the first of the workers).
    pub pid: u32,
    pub role: String,
    /// The processes it covers (copy-on-write: every worker).
    #[serde(default)]
    pub pids: Vec<u32>,
    pub growth_bytes_per_s: f64,
    pub from_bytes: u64,
    pub to_bytes: u64,
    /// Over how long.
    pub secs: f64,
    /// The function that ran most while it grew, `function (file:line)`, and its share of the
    /// growth.
    #[serde(default)]
    pub top_function: Option<String>,
    #[serde(default)]
    pub top_function_share: Option<f64>,
    /// At this rate, seconds until the cgroup's limit (`leak`) or until the GPU's memory is
    /// full (`gpu_growth`, where one GPU was polled).
    #[serde(default)]
    pub secs_to_limit: Option<f64>,
    /// The finding in one sentence, as the terminal and the page say it.
    pub text: String,
}

/// How often the live tables are looked over for processes that ended without a word
/// ([`MemoryState::sweep`]), in the readings' time: the ends it finds are [`GONE_AFTER_NANOS`]
/// old at least, a second more changes nothing.
///
/// [`GONE_AFTER_NANOS`]: timeline::GONE_AFTER_NANOS
const SWEEP_EVERY_NANOS: u64 = 1_000_000_000;

/// What the aggregator keeps of memory (bounded however long the recording, and however many
/// processes come and go): every live process's readings, each process's GPU memory, the
/// cgroup's readings, what ran while memory grew, and what is kept of the processes that ended.
#[derive(Debug, Clone)]
pub struct MemoryState {
    pub(crate) processes: Processes,
    pub(crate) gpu: GpuMemory,
    pub(crate) cgroup: Option<Cgroup>,
    pub(crate) attribution: Attribution,
    pub(crate) ended: Ended,
    /// Each live process's command line and rank, as the sampler told when it attached.
    identities: HashMap<u32, Identity>,
    /// The first process read: the memory poller reads the target first, so this is the
    /// process `memory_points` calls `main` (the summary has the recording's own pid).
    first_pid: Option<u32>,
    /// The latest reading's time (memory or GPU), and those of the last sweeps.
    latest: Timestamp,
    swept_at: Timestamp,
    gpu_swept_at: Timestamp,
}

impl Default for MemoryState {
    fn default() -> Self {
        MemoryState::new(crate::Limits::default().max_processes)
    }
}

impl MemoryState {
    /// Keeping at most `max_processes` processes (the aggregate's [`crate::Limits`]).
    pub fn new(max_processes: usize) -> MemoryState {
        MemoryState {
            processes: Processes::new(max_processes),
            gpu: GpuMemory::new(max_processes),
            cgroup: None,
            attribution: Attribution::default(),
            ended: Ended::default(),
            identities: HashMap::default(),
            first_pid: None,
            latest: Timestamp(0),
            swept_at: Timestamp(0),
            gpu_swept_at: Timestamp(0),
        }
    }

    /// One reading of one process; its growth since its reading before is charged to the
    /// stacks sampled in it meanwhile.
    pub(crate) fn memory(&mut self, sample: &MemorySample, buckets: &mut TimeBuckets) {
        self.observe_time(sample.time, buckets);
        if !self.processes.by_pid.contains_key(&sample.pid) && !self.new_process(sample) {
            return;
        }
        let Some(read) = self.processes.add(sample) else {
            return;
        };
        self.first_pid.get_or_insert(sample.pid);
        if let Some(dropped) = read.dropped {
            self.attribution.drop_process(dropped, buckets);
            self.gpu.remove(dropped);
            self.identities.remove(&dropped);
        }
        if read.previous.is_none() {
            self.ended.set_cap(self.processes.cap_with(0));
        }
        let previous = read.previous;
        let growth = previous.map_or(0, |p| sample.rss_bytes.saturating_sub(p.rss));
        self.attribution.reading(
            sample.pid,
            previous.map(|p| p.time),
            sample.time,
            growth,
            buckets,
        );
    }

    /// Whether a reading of `sample.pid`, not a live process, is that of a new process. One
    /// taken shortly after the end of the process that had the pid is a late reading of it
    /// (added to what is kept of it, [`ended::LATE_READING_NANOS`]); one of no resident memory
    /// is a process that exited and waits for its parent to reap it (a zombie). Otherwise a
    /// process kept under the pid is folded: the pid is another's now.
    fn new_process(&mut self, sample: &MemorySample) -> bool {
        let pid = sample.pid;
        if let Some(ended) = self.ended.kept_mut(pid) {
            let late = sample.time.as_nanos()
                <= ended
                    .at
                    .as_nanos()
                    .saturating_add(ended::LATE_READING_NANOS);
            if late {
                if sample.time > ended.rss.last.time {
                    ended.rss.add(timeline::Reading::of(sample));
                }
                return false;
            }
        }
        if sample.rss_bytes == 0 {
            return false;
        }
        self.ended.fold_pid(pid);
        self.processes.others = self.ended.kept.len();
        true
    }

    /// A process event: the sampler attached to a process (its command line and rank are
    /// kept while it lives), or it ended ([`MemoryState::process_ended`]). Each event counts
    /// once however often it is told.
    pub(crate) fn process_event(&mut self, event: &ProcessEvent, buckets: &mut TimeBuckets) {
        match event.kind {
            ProcessEventKind::Attached => {
                let identity = Identity::new(&event.command_line, event.rank.rank);
                self.identities.insert(event.pid, identity);
            }
            ProcessEventKind::Exited => {
                let oom = matches!(event.how, Some(HowEnded::OomKilled(_)));
                let told = (!event.command_line.is_empty())
                    .then(|| Identity::new(&event.command_line, event.rank.rank));
                self.process_ended(event.pid, event.time, told, oom, buckets);
            }
        }
    }

    /// Process `pid` ended at `time` (`oom`: the OOM killer ended it), as the sampler says:
    /// what is kept of it leaves the live tables ([`ended`]) and its matching of growth to
    /// stacks is settled and released. A process already found gone, or never read, gets what
    /// the event tells.
    pub(crate) fn process_ended(
        &mut self,
        pid: u32,
        time: Timestamp,
        identity: Option<Identity>,
        oom: bool,
        buckets: &mut TimeBuckets,
    ) {
        let known = self.identities.remove(&pid);
        let identity = known.or(identity);
        let oom_killed = oom.then_some(time);
        if self.processes.by_pid.contains_key(&pid) {
            self.end(pid, time, identity, oom_killed, buckets);
            return;
        }
        let charged = self.attribution.end_process(pid, buckets);
        let gpu = self.gpu.remove(pid);
        let Some(ended) = self.ended.kept_mut(pid) else {
            return;
        };
        // Found gone from its readings before this event came.
        if ended.identity.is_none() {
            ended.identity = identity;
        }
        if oom_killed.is_some() && ended.oom_killed.is_none() {
            ended.oom_killed = oom_killed;
            ended.notable = true;
        }
        for (stack, bytes) in charged.into_iter().flatten() {
            *ended.charged.entry(stack).or_default() += bytes;
        }
        if ended.gpu.is_none() {
            ended.gpu = gpu;
        }
    }

    /// Moves live process `pid` to the ended, at `at`.
    fn end(
        &mut self,
        pid: u32,
        at: Timestamp,
        identity: Option<Identity>,
        oom_killed: Option<Timestamp>,
        buckets: &mut TimeBuckets,
    ) {
        let charged = self
            .attribution
            .end_process(pid, buckets)
            .unwrap_or_default();
        let gpu = self.gpu.remove(pid);
        let Some(rss) = self.processes.remove(pid) else {
            return;
        };
        let notable = oom_killed.is_some() || verdict::may_speak_of(&rss, gpu.as_ref());
        self.ended.push(EndedProcess {
            pid,
            rss,
            gpu,
            charged,
            at,
            identity,
            oom_killed,
            notable,
        });
        self.processes.others = self.ended.kept.len();
    }

    /// Notes the latest reading's time, and once a second looks for processes that ended
    /// without a word.
    fn observe_time(&mut self, time: Timestamp, buckets: &mut TimeBuckets) {
        self.latest = self.latest.max(time);
        if self.latest.as_nanos() >= self.swept_at.as_nanos().saturating_add(SWEEP_EVERY_NANOS) {
            self.swept_at = self.latest;
            self.sweep(buckets);
        }
    }

    /// Ends the processes the poller stopped reading ([`Processes::gone`]): a process the
    /// sampler does not follow has no exit event. Releases too the GPU memory of processes off
    /// every GPU (and not read), and the matching state of processes sampled but never read.
    fn sweep(&mut self, buckets: &mut TimeBuckets) {
        let now = self.latest;
        for pid in self.processes.gone(now) {
            let at = self.processes.by_pid.get(&pid).map_or(now, |p| p.last.time);
            let identity = self.identities.remove(&pid);
            self.end(pid, at, identity, None, buckets);
        }
        self.sweep_gpu();
        for pid in self.attribution.unread_gone(now) {
            if !self.processes.by_pid.contains_key(&pid) {
                self.attribution.end_process(pid, buckets);
            }
        }
    }

    /// Releases the GPU memory of the processes off every GPU for a while that are not read
    /// live: one that ended hands it to what is kept of it.
    fn sweep_gpu(&mut self) {
        for pid in self.gpu.gone(self.latest) {
            if self.processes.by_pid.contains_key(&pid) {
                continue;
            }
            let gpu = self.gpu.remove(pid);
            if let Some(ended) = self.ended.kept_mut(pid) {
                if ended.gpu.is_none() {
                    ended.gpu = gpu;
                }
            }
        }
    }

    /// Entries kept per process now, in every table of memory: live processes' series,
    /// their GPU series, their matching state and their commands, and the ended kept whole.
    /// For tests that what an ended process held goes.
    #[cfg(test)]
    pub(crate) fn process_entries(&self) -> ProcessEntries {
        ProcessEntries {
            live: self.processes.by_pid.len(),
            gpu: self.gpu.by_pid.len(),
            matching: self.attribution.by_pid.len(),
            identities: self.identities.len(),
            kept_ended: self.ended.kept.len(),
            folded_kinds: self.ended.kinds.len(),
        }
    }

    pub(crate) fn cgroup(&mut self, sample: &CgroupSample) {
        match &mut self.cgroup {
            Some(cgroup) => cgroup.add(sample),
            None => self.cgroup = Some(Cgroup::new(sample)),
        }
    }

    /// One GPU reading: its per-process list, when the driver could list the processes (the
    /// poller lists them with the newest reading of each poll).
    pub(crate) fn gpu(&mut self, sample: &GpuSample) {
        // Without memory readings GPU memory is swept here (with them too: it is cheap).
        self.latest = self.latest.max(sample.time);
        let due = self
            .gpu_swept_at
            .as_nanos()
            .saturating_add(SWEEP_EVERY_NANOS);
        if self.latest.as_nanos() >= due {
            self.gpu_swept_at = self.latest;
            self.sweep_gpu();
        }
        if let Some(listed) = &sample.compute_pids {
            self.gpu_memory(sample.time, sample.device, listed, &sample.process_memory);
        }
    }

    /// One device's per-process GPU memory at `time`: `listed` holds a context on it, `memory`
    /// says how much of those the driver gave a figure for.
    pub(crate) fn gpu_memory(
        &mut self,
        time: Timestamp,
        device: u32,
        listed: &[u32],
        memory: &[ProcessGpuMemory],
    ) {
        self.gpu.add(time, device, listed, memory);
    }

    /// A stack sample of `pid` at `time`, with its stack when it was kept.
    pub(crate) fn stack_sample(
        &mut self,
        pid: u32,
        time: Timestamp,
        stack: Option<StackId>,
        buckets: &mut TimeBuckets,
    ) {
        if self.first_pid.is_none() {
            // No memory read (memory off, an old log): nothing to match.
            return;
        }
        self.attribution.sample(pid, time, stack, buckets);
    }

    /// The end of the recording: growth still waiting is charged with the samples there are.
    pub(crate) fn finish(&mut self, buckets: &mut TimeBuckets) {
        self.attribution.finish(buckets);
    }

    /// The caps reached, for the summary's `caps_reached`.
    pub(crate) fn caps_reached(&self, max_processes: usize) -> Vec<String> {
        let mut caps = Vec::new();
        if self.processes.dropped > 0 {
            caps.push(format!(
                "processes whose memory is kept capped at {max_processes}: the {} least \
                 recently read left out of the memory timeline and summary (their growth stays \
                 in the memory-growth flamegraph)",
                self.processes.dropped
            ));
        }
        if self.gpu.dropped > 0 {
            caps.push(format!(
                "processes whose GPU memory is kept capped at {max_processes}: the {} least \
                 recently listed left out",
                self.gpu.dropped
            ));
        }
        if self.ended.folded > 0 {
            caps.push(format!(
                "processes that ended kept whole capped at the {} most recent, the {} largest \
                 and {} the verdict speaks of: the {} others folded by kind into the memory \
                 summary's `folded` (their growth stays in the memory-growth flamegraph)",
                ended::KEPT_RECENT,
                ended::KEPT_LARGEST,
                ended::KEPT_NOTABLE,
                self.ended.folded
            ));
        }
        caps
    }
}

/// [`MemoryState::process_entries`].
#[cfg(test)]
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) struct ProcessEntries {
    pub live: usize,
    pub gpu: usize,
    pub matching: usize,
    pub identities: usize,
    pub kept_ended: usize,
    pub folded_kinds: usize,
}

impl crate::Aggregator {
    /// Every process's memory readings, oldest first (coarsened with age on long recordings).
    pub fn memory_points(&self) -> Vec<MemoryPoint> {
        match self.memory.first_pid {
            Some(target) => summary::points(self, target),
            None => Vec::new(),
        }
    }

    /// The memory cgroup's readings, oldest first.
    pub fn cgroup_points(&self) -> Vec<CgroupPoint> {
        summary::cgroup_points(self)
    }

    /// Bytes of resident memory growth charged to each stack over the whole recording, most
    /// first: `stacks-memory-growth.folded`. Growth still waiting for its samples counts with
    /// those already there.
    pub fn memory_growth(&self) -> Vec<(crate::StackId, u64)> {
        self.memory.attribution.growth()
    }

    /// `summary.json`'s `memory`: `None` when no memory reading was recorded.
    pub(crate) fn memory_summary(&self, meta: &crate::RecordingMeta) -> Option<MemorySummary> {
        summary::summary(self, meta.pid)
    }
}
