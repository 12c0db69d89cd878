//! Memory readings: what the memory poller reads of every process of the job and of the job's
//! memory cgroup, on the recording's clock.

use serde::{Deserialize, Serialize};

use crate::Timestamp;

/// One reading of one process's memory.
///
/// `rss_bytes` comes from `/proc/PID/statm` at every reading (10 Hz by default); the
/// `smaps_rollup` fields only at the lower rate that file's cost allows, `None` in between.
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct MemorySample {
    pub time: Timestamp,
    pub pid: u32,
    /// Resident set size: `statm`'s resident pages times the page size.
    pub rss_bytes: u64,
    /// Pages mapped by this process alone (`Private_Clean + Private_Dirty` of `smaps_rollup`).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub private_bytes: Option<u64>,
    /// Resident pages mapped by other processes too (`Shared_Clean + Shared_Dirty`): after a
    /// fork, what the child still shares with its parent.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub shared_bytes: Option<u64>,
    /// Swapped out (`smaps_rollup`'s `Swap`).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub swap_bytes: Option<u64>,
}

/// One reading of the memory cgroup the target runs in (v2 `memory.current`, `memory.max`,
/// `memory.events`' `oom_kill`; v1's `memory.usage_in_bytes`, `memory.limit_in_bytes`,
/// `memory.oom_control`'s `oom_kill`).
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct CgroupSample {
    pub time: Timestamp,
    pub usage_bytes: u64,
    /// `None` when unlimited (`max`, or v1's huge sentinel).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub limit_bytes: Option<u64>,
    /// The OOM kills the cgroup has counted since it was created; `None` when unreadable.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub oom_kills: Option<u64>,
}

/// One process's GPU memory as NVML lists it with a compute context on a device
/// (`usedGpuMemory` of `nvmlDeviceGetComputeRunningProcesses`).
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct ProcessGpuMemory {
    pub pid: u32,
    pub bytes: u64,
}
