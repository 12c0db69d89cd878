//! The types that travel on stackscope's sample channel.
//!
//! Producers (the stack sampler, the GPU poller, the memory poller) turn what they read into
//! these plain values and `try_send` them to the aggregator; the periodic ones share one shape,
//! [`producer::Producer`]. Everything carries a [`Timestamp`] on one clock,
//! CLOCK_MONOTONIC, so a stack sample and a GPU sample can be compared directly.

use std::sync::Arc;

use serde::{Deserialize, Serialize};

mod clock;
mod ending;
mod last_stacks;
mod memory;
mod origin;
pub mod producer;
mod rank;
mod snapshot;
pub mod wakeups;

pub use clock::Timestamp;
pub use ending::{signal_name, HowEnded, OomEvidence, ProcessEnded};
pub use last_stacks::LastStacks;
pub use memory::{CgroupSample, MemorySample, ProcessGpuMemory};
pub use origin::{is_stdlib_module, FileOrigin, StdlibDirs};
pub use rank::{host_name, process_name, RankInfo};
pub use snapshot::{FrameDump, LocalVariable, ProcessDump, ThreadDump, ThreadState};

/// One message on the channel from a producer to the aggregator.
#[derive(Debug, Clone)]
pub enum Event {
    /// One thread's stack at one instant.
    Stack(StackSample),
    /// A sampling attempt that failed (a torn read, a thread that vanished mid-read).
    SampleError(SampleError),
    /// One reading of one GPU.
    Gpu(GpuSample),
    /// A process came under or left the sampler's watch (`--subprocesses` follows a tree).
    Process(ProcessEvent),
    /// One reading of one process's memory (the memory poller).
    Memory(MemorySample),
    /// One reading of the job's memory cgroup (the memory poller).
    Cgroup(CgroupSample),
}

impl Event {
    /// When it happened, on the recording's clock.
    pub fn time(&self) -> Timestamp {
        match self {
            Event::Stack(s) => s.time,
            Event::SampleError(e) => e.time,
            Event::Gpu(g) => g.time,
            Event::Process(p) => p.time,
            Event::Memory(m) => m.time,
            Event::Cgroup(c) => c.time,
        }
    }
}

/// What a producer hands over at once: the events of several samples (the sampler sends what
/// it read every 250 ms or 64 samples, the GPU poller one poll's readings), so that the
/// consumer wakes once per batch, not once per sample.
pub type Batch = Vec<Event>;

/// A process the sampler started or stopped reading.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct ProcessEvent {
    pub time: Timestamp,
    pub pid: u32,
    /// The command line, arguments joined by spaces.
    pub command_line: String,
    pub kind: ProcessEventKind,
    /// Its rank, when a launcher started it (read from its environment).
    #[serde(default)]
    pub rank: RankInfo,
    /// For an exit: what ended it, where that could be known.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub how: Option<HowEnded>,
}

#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum ProcessEventKind {
    /// The sampler attached to it (at the start, or when it appeared as a child).
    Attached,
    /// It exited, or stopped being readable.
    Exited,
}

/// One Python thread's stack, read at one instant.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct StackSample {
    pub time: Timestamp,
    pub pid: u32,
    pub thread: ThreadInfo,
    /// Frames, innermost first (the order the interpreter links them), shared: a thread
    /// found where it was hands on the very stack of its last sample, and the consumers
    /// tell it by its pointer.
    pub frames: Frames,
}

/// What identifies a thread and what it was doing when sampled.
#[derive(Debug, Clone, PartialEq, Eq, Hash, Serialize, Deserialize)]
pub struct ThreadInfo {
    /// The OS thread id (what `ps -L` and `/proc/PID/task` show), when it could be found.
    pub os_thread_id: Option<u64>,
    /// The interpreter's own thread id (`threading.get_ident()`).
    pub python_thread_id: u64,
    /// The name Python gives the thread (`MainThread`, `loader-0`), when it could be read.
    pub name: Option<Arc<str>>,
    /// Whether the thread was running (not sleeping or blocked) at the sample.
    pub active: bool,
    /// Whether the thread held the GIL at the sample.
    pub owns_gil: bool,
}

impl ThreadInfo {
    /// The name to show for the thread: Python's name, else its OS id, else Python's id.
    pub fn display_name(&self) -> std::borrow::Cow<'_, str> {
        match (&self.name, self.os_thread_id) {
            (Some(name), _) => std::borrow::Cow::Borrowed(name),
            (None, Some(tid)) => format!("thread {tid}").into(),
            (None, None) => format!("thread {:#x}", self.python_thread_id).into(),
        }
    }
}

/// A stack's frames, innermost first, shared between the samples that have it.
pub type Frames = Arc<[Frame]>;

/// One frame of a stack. Strings are shared: the sampler hands out the same `Arc` for the same
/// code object, so a stack costs pointers, not copies.
#[derive(Debug, Clone, PartialEq, Eq, Hash, PartialOrd, Ord, Serialize, Deserialize)]
pub struct Frame {
    pub function: Arc<str>,
    pub file: Arc<str>,
    /// The line being executed; 0 when unknown.
    pub line: u32,
    /// Whether this is a native (C/C++) frame rather than a Python one.
    #[serde(default)]
    pub native: bool,
    /// Where its code comes from: decided by the sampler from the file's absolute path
    /// ([`FileOrigin::of_path`]); [`FileOrigin::Native`] for a native frame.
    pub origin: FileOrigin,
}

impl Frame {
    /// A Python frame whose origin is inferred from its shortened file name
    /// ([`FileOrigin::infer`]): what tests and synthetic stacks build.
    pub fn python(function: &str, file: &str, line: u32) -> Frame {
        Frame {
            function: Arc::from(function),
            file: Arc::from(file),
            line,
            native: false,
            origin: FileOrigin::infer(file, false),
        }
    }

    /// The frame as `function (file:line)`, the form used in folded stacks.
    pub fn label(&self) -> String {
        if self.line > 0 {
            format!("{} ({}:{})", self.function, self.file, self.line)
        } else {
            format!("{} ({})", self.function, self.file)
        }
    }
}

/// How a sampling attempt failed, classified the way the recording treats it.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum SampleErrorKind {
    /// A read that raced with the target changing memory under it; the next sample is fine.
    TornRead,
    /// The thread ended while it was being read.
    ThreadGone,
    /// Anything else that did not stop the recording.
    Other,
}

#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct SampleError {
    pub time: Timestamp,
    pub pid: u32,
    pub kind: SampleErrorKind,
    pub message: String,
}

/// A GPU the poller watched, as the summary names it (`summary.json`'s `gpu_devices`). Defined
/// here, where both the poller (which reads it) and the aggregate (which reports it) can see it.
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct GpuDeviceInfo {
    /// NVML's device index, as in [`GpuSample::device`].
    pub index: u32,
    pub name: String,
    pub uuid: String,
}

/// One reading of one GPU, on the recording's clock.
///
/// Every metric is optional: a driver that does not support one leaves it `None`.
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
pub struct GpuSample {
    pub time: Timestamp,
    /// NVML's device index.
    pub device: u32,
    /// Percent of the sample period during which a kernel ran.
    pub utilization: Option<f32>,
    /// Percent of the sample period during which device memory was read or written.
    pub memory_utilization: Option<f32>,
    pub memory_used_bytes: Option<u64>,
    pub memory_total_bytes: Option<u64>,
    pub power_watts: Option<f32>,
    pub sm_clock_mhz: Option<u32>,
    /// NVML's bit mask of clock throttle reasons.
    pub throttle_reasons: Option<u64>,
    /// The target's own share of the SM, from per-process accounting.
    pub process_utilization: Option<f32>,
    /// GPM (Hopper and later), each over the interval since the device's previous GPM reading:
    /// percent of time the SMs had at least one warp assigned (`NVML_GPM_METRIC_SM_UTIL`,
    /// DCGM's SM activity). Utilization counts a time slice busy when any kernel ran; this
    /// says how much of the GPU it ran on.
    #[serde(default)]
    pub sm_active: Option<f32>,
    /// GPM: resident warps against the SMs' maximum, percent (`NVML_GPM_METRIC_SM_OCCUPANCY`).
    #[serde(default)]
    pub sm_occupancy: Option<f32>,
    /// GPM: percent of time any tensor core was busy (`NVML_GPM_METRIC_ANY_TENSOR_UTIL`).
    #[serde(default)]
    pub tensor_active: Option<f32>,
    /// GPM: percent of the peak DRAM bandwidth used (`NVML_GPM_METRIC_DRAM_BW_UTIL`).
    #[serde(default)]
    pub dram_bw: Option<f32>,
    /// The processes NVML lists with a compute context on the device
    /// (`nvmlDeviceGetComputeRunningProcesses`), under the pids of stackscope's `/proc` as the
    /// target's are; `None` where the driver cannot list them (and in older logs).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub compute_pids: Option<Vec<u32>>,
    /// The GPU memory of each process NVML lists with a compute context on the device
    /// (`usedGpuMemory`, read with [`GpuSample::compute_pids`]), one entry per pid; empty where
    /// the driver does not say (and in older logs).
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub process_memory: Vec<ProcessGpuMemory>,
}
