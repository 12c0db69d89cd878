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
//! - `attribution`: growth matched by time to the stacks kept for its process;
//! - `roles`: what each process is to the job, one name for the timeline and the summary;
//! - `summary` and `verdict` (`text`: sizes and rates in words): `summary.json`'s `memory`.

mod attribution;
mod roles;
mod series;
mod summary;
mod text;
mod timeline;
mod verdict;

#[cfg(test)]
mod tests;
#[cfg(test)]
mod tests_verdict;

use serde::{Deserialize, Serialize};
use stackscope_event::{CgroupSample, GpuSample, MemorySample, ProcessGpuMemory, Timestamp};

use crate::fold::{StackId, TimeBuckets};
use attribution::Attribution;
pub use series::growth_rate;
pub use text::{rate as rate_text, size as size_text};
use timeline::{Cgroup, GpuMemory, Processes};

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
    /// Every process read, largest peak first.
    pub processes: Vec<ProcessMemory>,
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

/// What the aggregator keeps of memory (bounded however long the recording): every process's
/// readings, each process's GPU memory, the cgroup's readings, and what ran while memory grew.
#[derive(Debug, Clone)]
pub struct MemoryState {
    pub(crate) processes: Processes,
    pub(crate) gpu: GpuMemory,
    pub(crate) cgroup: Option<Cgroup>,
    pub(crate) attribution: Attribution,
    /// The first process read: the memory poller reads the target first, so this is the
    /// process `memory_points` calls `main` (the summary has the recording's own pid).
    first_pid: Option<u32>,
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
            first_pid: None,
        }
    }

    /// One reading of one process; its growth since its reading before is charged to the
    /// stacks sampled in it meanwhile.
    pub(crate) fn memory(&mut self, sample: &MemorySample, buckets: &mut TimeBuckets) {
        let Some(read) = self.processes.add(sample) else {
            return;
        };
        self.first_pid.get_or_insert(sample.pid);
        if let Some(dropped) = read.dropped {
            self.attribution.drop_process(dropped, buckets);
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

    pub(crate) fn cgroup(&mut self, sample: &CgroupSample) {
        match &mut self.cgroup {
            Some(cgroup) => cgroup.add(sample),
            None => self.cgroup = Some(Cgroup::new(sample)),
        }
    }

    /// One GPU reading: its per-process list, when the driver could list the processes (the
    /// poller lists them with the newest reading of each poll).
    pub(crate) fn gpu(&mut self, sample: &GpuSample) {
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
        caps
    }
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
