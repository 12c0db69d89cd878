//! What the recording knows about itself that the samples do not say.

pub use stackscope_event::GpuDeviceInfo;

/// Facts about the recording, gathered by the binary and handed to [`crate::Aggregator::summary`].
#[derive(Debug, Clone, Default, PartialEq)]
pub struct RecordingMeta {
    pub pid: u32,
    /// The target's rank, when a launcher started it.
    pub rank: stackscope_event::RankInfo,
    /// The machine the recording ran on.
    pub host: Option<String>,
    pub command_line: String,
    pub python_version: String,
    /// Which stack reader read the samples: `stackscope` (our own), `py-spy`, or both, most
    /// reads first (`stackscope, py-spy`).
    pub reader: String,
    /// Wall-clock start, RFC 3339.
    pub started_at: String,
    pub duration_secs: f64,
    pub rate_hz: f64,
    /// Sampling attempts of the timer.
    pub ticks: u64,
    /// Events the channel refused because it was full.
    pub dropped: u64,
    pub late_ticks: u64,
    pub max_lateness_ms: f64,
    pub target_exited: bool,
    pub exit_status: Option<i32>,
    /// The signal that ended the command, when one did (`record`).
    pub exit_signal: Option<i32>,
    pub gpu_devices: Vec<GpuDeviceInfo>,
    /// CPUs the target's process may run on: its CPU affinity, capped by its cgroup's CPU
    /// quota; `None` where it could not be read (and in logs written before it was kept).
    pub cpus_usable: Option<f64>,
    /// Why there is no GPU data, when there is none.
    pub gpu_unavailable: Option<String>,
    pub notices: Vec<String>,
}
