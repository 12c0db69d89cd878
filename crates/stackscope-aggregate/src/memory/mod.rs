//! Memory: every process's memory over time, the job's memory cgroup, what ran while memory
//! grew, and the verdict on it (steady growth, copy-on-write in forked workers, GPU memory
//! that climbs).
//!
//! The memory poller's readings ([`MemorySample`], [`CgroupSample`]) and the GPU poller's
//! per-process GPU memory ([`GpuSample::process_memory`]) arrive on the channel beside the
//! stacks; growth of a process's resident memory between two readings is charged to the
//! stacks sampled in that process in that interval. That is what ran while memory grew, not
//! an allocation trace, and the outputs say so.

use serde::{Deserialize, Serialize};
use stackscope_event::{CgroupSample, GpuSample, MemorySample};

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
    /// At this rate, seconds until the cgroup's limit.
    #[serde(default)]
    pub secs_to_limit: Option<f64>,
    /// The finding in one sentence, as the terminal and the page say it.
    pub text: String,
}

/// What the aggregator keeps of memory (bounded however long the recording).
#[derive(Debug, Clone, Default)]
pub struct MemoryState {}

impl MemoryState {
    pub fn memory(&mut self, _sample: &MemorySample) {}
    pub fn cgroup(&mut self, _sample: &CgroupSample) {}
    pub fn gpu(&mut self, _sample: &GpuSample) {}
}

impl crate::Aggregator {
    /// Every process's memory readings, oldest first (coarsened with age on long recordings).
    pub fn memory_points(&self) -> Vec<MemoryPoint> {
        Vec::new()
    }

    /// The memory cgroup's readings, oldest first.
    pub fn cgroup_points(&self) -> Vec<CgroupPoint> {
        Vec::new()
    }

    /// Bytes of resident memory growth charged to each stack over the whole recording, most
    /// first: `stacks-memory-growth.folded`.
    pub fn memory_growth(&self) -> Vec<(crate::StackId, u64)> {
        Vec::new()
    }

    /// `summary.json`'s `memory`: `None` when no memory reading was recorded.
    pub(crate) fn memory_summary(&self, _meta: &crate::RecordingMeta) -> Option<MemorySummary> {
        None
    }
}
