//! The summary of a recording: the schema of `summary.json`.

use serde::{Deserialize, Serialize};

use crate::aggregator::{Aggregator, ThreadStat};
use crate::functions::{top_functions, FunctionStat, TopFunctions, TOP_FUNCTIONS};
use crate::gpu_stats::{device_summary, resample_mean, time_weighted, GpuDeviceSummary};
use crate::meta::RecordingMeta;
use crate::oscillation::oscillation_period;
use crate::verdict::{verdict, Verdict, VerdictInput};

/// How many functions the GPU-idle and GPU-busy lists hold.
pub const TOP_GPU_FUNCTIONS: usize = 10;
/// Grid step for the oscillation search: 10 Hz resolves periods of a second or more well.
const OSCILLATION_STEP_NANOS: u64 = 100_000_000;
/// The oscillation search looks at the latest stretch of this length, so its cost stays fixed
/// however long the recording: a training loop's rhythm shows within minutes.
const OSCILLATION_WINDOW_NANOS: u64 = 600_000_000_000;

#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct Summary {
    pub pid: u32,
    pub command_line: String,
    pub python_version: String,
    pub started_at: String,
    pub duration_secs: f64,
    pub rate_hz: f64,
    /// Sampling attempts of the timer.
    pub ticks: u64,
    /// Stack samples kept.
    pub samples: u64,
    pub idle_samples_skipped: u64,
    pub errors: ErrorCounts,
    pub dropped: u64,
    pub late_ticks: u64,
    pub max_lateness_ms: f64,
    pub target_exited: bool,
    pub exit_status: Option<i32>,
    /// By kept samples, most first.
    pub threads: Vec<ThreadSummary>,
    pub top_functions: TopFunctions,
    pub notices: Vec<String>,
    /// `None` when no GPU reading was recorded.
    pub gpu: Option<GpuSummary>,
    /// Why there is no GPU data (no NVML, `--gpu off`, no device), when the binary knows.
    pub gpu_unavailable: Option<String>,
}

/// Sampling attempts that failed, by kind.
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct ErrorCounts {
    pub total: u64,
    pub torn_read: u64,
    pub thread_gone: u64,
    pub other: u64,
}

#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct ThreadSummary {
    pub name: String,
    pub os_thread_id: Option<u64>,
    pub python_thread_id: u64,
    /// Kept samples; a thread seen only idle (and skipped) has 0.
    pub samples: u64,
}

#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct GpuSummary {
    pub devices: Vec<GpuDeviceSummary>,
    pub idle_below: f64,
    /// Time-weighted mean over the recording of the devices' mean utilization.
    pub mean_utilization: Option<f64>,
    /// Share of the recording's time the devices' mean utilization was below `idle_below`.
    pub idle_share: Option<f64>,
    pub oscillation_period_secs: Option<f64>,
    pub samples_gpu_idle: u64,
    pub samples_gpu_busy: u64,
    /// Samples with no GPU reading at their time, and any still waiting for one.
    pub samples_gpu_unknown: u64,
    /// By self share of the GPU-idle samples.
    pub top_idle_functions: Vec<FunctionStat>,
    /// By self share of the GPU-busy samples.
    pub top_busy_functions: Vec<FunctionStat>,
    pub verdict: Verdict,
}

impl Aggregator {
    pub fn summary(&self, meta: &RecordingMeta) -> Summary {
        let mut threads: Vec<ThreadSummary> = self.threads.values().map(thread_summary).collect();
        threads.sort_by(|a, b| {
            b.samples
                .cmp(&a.samples)
                .then_with(|| a.name.cmp(&b.name))
                .then(a.python_thread_id.cmp(&b.python_thread_id))
        });
        Summary {
            pid: meta.pid,
            command_line: meta.command_line.clone(),
            python_version: meta.python_version.clone(),
            started_at: meta.started_at.clone(),
            duration_secs: meta.duration_secs,
            rate_hz: meta.rate_hz,
            ticks: meta.ticks,
            samples: self.samples,
            idle_samples_skipped: self.idle_skipped,
            errors: self.errors.clone(),
            dropped: meta.dropped,
            late_ticks: meta.late_ticks,
            max_lateness_ms: meta.max_lateness_ms,
            target_exited: meta.target_exited,
            exit_status: meta.exit_status,
            threads,
            top_functions: top_functions(&self.table, |c| c.all, TOP_FUNCTIONS),
            notices: meta.notices.clone(),
            gpu: self.gpu_summary(meta),
            gpu_unavailable: meta.gpu_unavailable.clone(),
        }
    }

    fn gpu_summary(&self, meta: &RecordingMeta) -> Option<GpuSummary> {
        if self.timeline.is_empty() {
            return None;
        }
        let idle_below = self.config.idle_below;
        let samples = self.timeline.samples();
        let devices: Vec<GpuDeviceSummary> = self
            .timeline
            .devices()
            .into_iter()
            .map(|index| {
                let mut device = device_summary(samples, index, idle_below);
                if let Some(info) = meta.gpu_devices.iter().find(|d| d.index == index) {
                    device.name.clone_from(&info.name);
                    device.uuid.clone_from(&info.uuid);
                }
                device
            })
            .collect();
        let series: Vec<Vec<(u64, f32)>> = self
            .timeline
            .devices()
            .into_iter()
            .map(|d| self.timeline.utilization_series(d))
            .filter(|s| !s.is_empty())
            .collect();
        let first = series.iter().filter_map(|s| s.first()).map(|r| r.0).min();
        let last = series.iter().filter_map(|s| s.last()).map(|r| r.0).max();
        let (mean_utilization, idle_share, oscillation_period_secs) = match (first, last) {
            (Some(first), Some(last)) => {
                let (mean, idle_share) = match time_weighted(&series, idle_below) {
                    Some((m, i)) => (Some(m), Some(i)),
                    None => (None, None),
                };
                let window_start = last.saturating_sub(OSCILLATION_WINDOW_NANOS).max(first);
                let recent = resample_mean(&series, window_start, last, OSCILLATION_STEP_NANOS);
                let period = oscillation_period(&recent, OSCILLATION_STEP_NANOS as f64 / 1e9);
                (mean, idle_share, period)
            }
            _ => (None, None, None),
        };
        let mut tagged = [0u64; 3];
        for stack in self.table.stacks() {
            tagged[0] += stack.counts.gpu_idle;
            tagged[1] += stack.counts.gpu_busy;
            tagged[2] += stack.counts.gpu_unknown;
        }
        let pending = self.tagger.pending_len() as u64;
        let top_idle = top_functions(&self.table, |c| c.gpu_idle, TOP_GPU_FUNCTIONS).by_self;
        let top_busy = top_functions(&self.table, |c| c.gpu_busy, TOP_GPU_FUNCTIONS).by_self;
        let verdict = verdict(VerdictInput {
            mean_utilization,
            oscillation_period_secs,
            idle_functions: &top_idle,
        });
        Some(GpuSummary {
            devices,
            idle_below: f64::from(idle_below),
            mean_utilization,
            idle_share,
            oscillation_period_secs,
            samples_gpu_idle: tagged[0],
            samples_gpu_busy: tagged[1],
            samples_gpu_unknown: tagged[2] + pending,
            top_idle_functions: top_idle,
            top_busy_functions: top_busy,
            verdict,
        })
    }
}

fn thread_summary(stat: &ThreadStat) -> ThreadSummary {
    ThreadSummary {
        name: stat.name.clone(),
        os_thread_id: stat.os_thread_id,
        python_thread_id: stat.python_thread_id,
        samples: stat.samples,
    }
}
