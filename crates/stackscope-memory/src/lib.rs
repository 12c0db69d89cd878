//! stackscope's memory side: a producer of its own (not the stack sampler's thread) that reads
//! every process of the job's tree and the job's memory cgroup, and sends [`Event::Memory`] and
//! [`Event::Cgroup`] readings, on the recording's monotonic clock, to the aggregator.
//!
//! - Every `1 / rate_hz` seconds ([`MemoryConfig::rate_hz`], `--memory-rate`, 10 by default):
//!   each process's resident set from `/proc/PID/statm`, and the cgroup's usage and OOM kill
//!   count. Those files are kept open and read again with `pread` (2 µs a file, against 18 µs
//!   opened each time); a reading's cost is mostly the thread's wake-up (about 70 µs a reading
//!   on this project's loaded 2-core VM, 0.7 ms a second at 10 Hz, against the sampler's 15 to
//!   20 ms a second at 100 Hz).
//! - At a lower rate, on the same reading: private, shared and swapped memory from
//!   `/proc/PID/smaps_rollup`. That file walks the process's page tables. Measured on the same
//!   VM (kernel 6.18, cgroup v1, `examples/read_cost.rs`): 0.34 ms for an idle 13 MB Python,
//!   0.28 ms of CPU for `scripts/bench-overhead`'s target (14 MB, four busy threads; 4.7 ms of
//!   wall time under load), 20.7 ms for a Python holding 988 MB of lists: about 21 ms per GB
//!   resident. Read every second, the benchmark target's rollup alone added about 0.5 ms a
//!   second, 2 to 3% of stackscope's CPU; so each process's rollup is read at most every
//!   [`MemoryConfig::rollup_interval`] (5 s), at its first reading and at the last, and less
//!   often where it is dear: after a read that took `t` of CPU, not before
//!   `t × processes / ROLLUP_SHARE`, which keeps the rollups of all processes together within
//!   0.2% of one CPU (a 1 GB process every 10.5 s, eight of them every 84 s each).
//! - The tree ([`TargetPids`]) is asked again every [`MemoryConfig::tree_interval`] (1 s): a
//!   tree walk reads every thread's `children` file, dearer than all the processes' `statm`.
//! - The cgroup (v1 or v2, see [`cgroup`]) is that of the tree's root process, found again at
//!   every tree walk; its limit is read then too.
//! - A process that vanished, a file that cannot be read or parsed: that reading is left out,
//!   silently. The one notice is for a kernel or a permission that gives no `smaps_rollup`.
//! - The thread is the shared producer ([`stackscope_event::producer`]): readings go out in
//!   one batch a second, never blocking; a full channel counts every event of the batch as
//!   dropped ([`MemoryPoller::dropped`]).
//!
//! [`Event::Memory`]: stackscope_event::Event::Memory
//! [`Event::Cgroup`]: stackscope_event::Event::Cgroup

use std::path::PathBuf;
use std::sync::Arc;
use std::time::Duration;

pub mod cgroup;
mod poller;
pub mod procfs;

pub use poller::{MemoryPoller, MemoryReport};

/// The target's pids (the process and its descendants), asked again every
/// [`MemoryConfig::tree_interval`].
pub type TargetPids = Arc<dyn Fn() -> Vec<u32> + Send + Sync>;

/// The readings per second without `--memory-rate`.
pub const DEFAULT_RATE_HZ: f64 = 10.0;

/// What to read, how often, and where the file systems are.
#[derive(Debug, Clone)]
pub struct MemoryConfig {
    /// `statm` (and cgroup) readings per second; 0 (or less) is off.
    pub rate_hz: f64,
    /// The least time between two `smaps_rollup` reads of one process.
    pub rollup_interval: Duration,
    /// How often the tree is asked for its processes.
    pub tree_interval: Duration,
    /// Where procfs is mounted (tests point it at a directory of their own).
    pub proc_root: PathBuf,
    /// Where the cgroup file systems are mounted.
    pub cgroup_root: PathBuf,
}

impl Default for MemoryConfig {
    fn default() -> Self {
        MemoryConfig {
            rate_hz: DEFAULT_RATE_HZ,
            rollup_interval: Duration::from_secs(5),
            tree_interval: Duration::from_secs(1),
            proc_root: PathBuf::from("/proc"),
            cgroup_root: PathBuf::from("/sys/fs/cgroup"),
        }
    }
}

/// Why the memory poller did not start.
#[derive(Debug, thiserror::Error)]
pub enum MemoryError {
    /// `rate_hz` is 0: memory sampling is off, as asked.
    #[error("memory sampling is off (--memory-rate 0)")]
    Disabled,
    #[error("cannot start the memory sampling thread: {0}")]
    Spawn(#[source] std::io::Error),
}
