//! The summary of a recording: the schema of `summary.json`.

use serde::{Deserialize, Serialize};
use stackscope_event::{ProcessEnded, RankInfo};

use crate::fold::{
    top_functions, Aggregator, ErrorCounts, FunctionStat, RecordingMeta, TopFunctions,
    OTHER_THREADS, TOP_FUNCTIONS,
};
use crate::gil::GilSummary;
use crate::gpu::{
    bursts_of_grid, cycle, resample_mean, short_bursts_of_grid, short_cycle, Cycle,
    GpuDeviceSummary, UtilizationResult,
};
use crate::jobs::{FrozenThread, HangGpu, Stuck};
use crate::roles::step::{GilHolder, StepBreakdown};
use crate::roles::while_idle::{FeedersWhileIdle, WhileIdle};
use crate::roles::{self, LoopFoundBy, ThreadRole};
use crate::verdict::{
    idle_path, idle_path_by, verdict_and_fix, IdlePath, IfFixed, Verdict, VerdictInput,
};

/// How many functions the GPU-idle and GPU-busy lists hold.
mod processes;
mod the_loop;
mod waits;

pub use processes::{process_name, ProcessGroupSummary};
pub use waits::WaitsLeftOut;

pub const TOP_GPU_FUNCTIONS: usize = 10;
/// Grid step for the cycle search: 10 Hz resolves bursts of a few tenths of a second.
const CYCLE_STEP_NANOS: u64 = 100_000_000;
/// The cycle search looks at the latest stretch of this length, so its cost stays fixed
/// however long the recording: a training loop's rhythm shows within minutes.
const CYCLE_WINDOW_NANOS: u64 = 600_000_000_000;
/// How many frozen threads a stuck recording names.
const STUCK_THREADS: usize = 5;
/// How many functions the start-up's list holds.
const STARTUP_FUNCTIONS: usize = 5;

#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct Summary {
    pub pid: u32,
    /// The target's rank, when a launcher started it.
    #[serde(flatten)]
    pub rank: RankInfo,
    /// The machine the recording ran on.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub host: Option<String>,
    pub command_line: String,
    pub python_version: String,
    /// Which stack reader read the samples ([`RecordingMeta::reader`]).
    #[serde(default)]
    pub reader: String,
    pub started_at: String,
    pub duration_secs: f64,
    pub rate_hz: f64,
    /// Sampling attempts of the timer.
    pub ticks: u64,
    /// Stack samples kept.
    pub samples: u64,
    pub idle_samples_skipped: u64,
    /// Where the waits left out wait, when they outnumber the samples kept in a job with no
    /// loop (a server's latency): `--idle` counts them.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub waits_left_out: Option<WaitsLeftOut>,
    pub errors: ErrorCounts,
    pub dropped: u64,
    pub late_ticks: u64,
    pub max_lateness_ms: f64,
    pub target_exited: bool,
    pub exit_status: Option<i32>,
    /// The signal that ended the command, when one did (`record`); `exit_status` is then null.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub exit_signal: Option<i32>,
    /// By kept samples, most first; threads folded out of the table under thread churn last,
    /// as one `[other threads]` entry.
    pub threads: Vec<ThreadSummary>,
    /// The processes sampled when following a process tree (`--subprocesses`), by kept
    /// samples; processes folded out of the table last, as one `[other processes]` entry.
    /// Empty when following one process.
    #[serde(default)]
    pub processes: Vec<ProcessSummary>,
    /// The processes of the tree that vanished while sampled, with what ended each where the
    /// sampler could tell (`--subprocesses`): `[{pid, role, started, ended, how}]`.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub processes_ended: Vec<ProcessEnded>,
    /// How many processes the recording followed: the target and every process below it that
    /// was sampled (those folded into `[other processes]` too); 1 when it kept to the target
    /// (`--no-subprocesses`).
    #[serde(default)]
    pub processes_followed: u64,
    /// The thread most of whose samples are below one Python line, in compiled code, and the
    /// line that points at `--native` ([`crate::compiled`]); null when none is.
    #[serde(default)]
    pub compiled_code: Option<crate::CompiledCode>,
    pub top_functions: TopFunctions,
    pub notices: Vec<String>,
    /// The caps on the aggregate's tables that were reached, each saying what became of what
    /// it turned away. Empty on all but pathological or very long recordings.
    #[serde(default)]
    pub caps_reached: Vec<String>,
    /// `None` when no GPU reading was recorded.
    pub gpu: Option<GpuSummary>,
    /// Why there is no GPU data (no NVML, `--gpu off`, no device), when the binary knows.
    pub gpu_unavailable: Option<String>,
    /// What each thread is to the job: the trainer, its feeders, helpers (`roles/`).
    #[serde(default)]
    pub roles: Vec<ThreadRole>,
    /// When the target did not move (the hang rule over the recording): for how long, and
    /// where its threads are frozen. `None` when it moved.
    #[serde(default)]
    pub stuck: Option<Stuck>,
    /// Every process's memory, the cgroup's, and the verdict on them; `None` when memory was
    /// not read (`--memory-rate 0`, an old log).
    #[serde(default)]
    pub memory: Option<crate::MemorySummary>,
    /// How the loop (the `trainer` role) was found: by the GPU's correlation, or, without GPU
    /// data, by its hand-offs; `None` without a loop.
    #[serde(default)]
    pub loop_found_by: Option<LoopFoundBy>,
    /// The loop's step broken down, with or without GPU data (`gpu.step` is the same where
    /// there is GPU data); `None` without a loop.
    #[serde(default)]
    pub step: Option<StepBreakdown>,
    /// Who held the GIL while the loop waited for it (as `gpu.step_gil_holder`).
    #[serde(default)]
    pub step_gil_holder: Option<GilHolder>,
    /// What fixing the verdict's bottleneck buys (as `gpu.if_fixed`).
    #[serde(default)]
    pub if_fixed: Option<IfFixed>,
    /// The verdict: `gpu.verdict` where there is GPU data; without, the loop's own reading
    /// (`None` without a loop or GPU data).
    #[serde(default)]
    pub verdict: Option<Verdict>,
    /// The loop's feeders: over the whole recording without GPU data, while the GPU idled with
    /// it (as `gpu.while_idle.feeders`).
    #[serde(default)]
    pub feeders: Vec<FeedersWhileIdle>,
    /// Each thread's and process's GIL, as shares of wall time; `None` when no sample said who
    /// held it.
    #[serde(default)]
    pub gil: Option<GilSummary>,
}

#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct ThreadSummary {
    /// The process of the thread; 0 for the `[other threads]` entry.
    #[serde(default)]
    pub pid: u32,
    pub name: String,
    pub os_thread_id: Option<u64>,
    pub python_thread_id: u64,
    /// Kept samples; a thread seen only idle (and skipped) has 0.
    pub samples: u64,
    /// For an entry of many threads (a pool of short-lived threads read as one, `thread pool
    /// process_request_thread`; `[other threads]`): how many threads it holds.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub threads: Option<u64>,
    /// For a pool: the most of its threads alive at once.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub at_a_time: Option<u64>,
}

#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct ProcessSummary {
    /// 0 for the `[other processes]` entry.
    pub pid: u32,
    /// Its rank, when a launcher started it: `rank`, `local_rank`, `world_size`, `group_rank`.
    #[serde(flatten)]
    pub rank: RankInfo,
    pub command_line: String,
    /// Kept stack samples.
    pub samples: u64,
    /// Whether the sampler saw it exit (or lost it).
    pub exited: bool,
    /// Seconds since the recording's start when the sampler attached to it.
    pub attached_secs: Option<f64>,
    /// Seconds since the recording's start when it exited.
    pub exited_secs: Option<f64>,
    /// For a group of like processes (its pid one past any real pid): its label and counts.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub group: Option<ProcessGroupSummary>,
}

#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct GpuSummary {
    pub devices: Vec<GpuDeviceSummary>,
    pub idle_below: f64,
    /// The mean of the devices' `mean_utilization`s: the mean the verdict names.
    pub mean_utilization: Option<f64>,
    /// Share of the recording's time the devices' mean utilization was below `idle_below`.
    pub idle_share: Option<f64>,
    /// The cycle's period (`cycle.period_secs`), kept for the scripts that read it.
    pub oscillation_period_secs: Option<f64>,
    /// The GPU's rhythm: busy bursts and idle gaps, as `nvidia-smi dmon` shows them; `None`
    /// when the bursts are too few or too irregular to be one.
    #[serde(default)]
    pub cycle: Option<Cycle>,
    /// The start-up left out of these figures and the verdict (the time before the GPU's
    /// first busy burst, `record` only); 0 when nothing was left out.
    #[serde(default)]
    pub startup_secs: f64,
    /// Where start-up went: its top functions by self share.
    #[serde(default)]
    pub startup_functions: Vec<FunctionStat>,
    /// What the trainer and its feeders did while the GPU idled.
    #[serde(default)]
    pub while_idle: WhileIdle,
    /// The trainer's step broken down: shares of its wall time, summing to 1; `None` without
    /// a trainer.
    #[serde(default)]
    pub step: Option<StepBreakdown>,
    /// Who held the GIL while the trainer waited for it, when those waits are 10% of its step
    /// or more.
    #[serde(default)]
    pub step_gil_holder: Option<GilHolder>,
    /// What fixing the verdict's bottleneck buys.
    #[serde(default)]
    pub if_fixed: Option<IfFixed>,
    pub samples_gpu_idle: u64,
    pub samples_gpu_busy: u64,
    /// Samples with no GPU reading at their time, and any still waiting for one.
    pub samples_gpu_unknown: u64,
    /// By self share of the GPU-idle samples.
    pub top_idle_functions: Vec<FunctionStat>,
    /// By self share of the GPU-busy samples.
    pub top_busy_functions: Vec<FunctionStat>,
    /// The call path whose share rises most from GPU-busy to GPU-idle samples: the code the
    /// verdict names. `None` when no path rises enough.
    #[serde(default)]
    pub idle_path: Option<IdlePath>,
    pub verdict: Verdict,
    /// Mean GPM SM activity (percent) of the devices that have GPM; absent elsewhere.
    #[serde(default)]
    pub mean_sm_active_pct: Option<f64>,
    /// Of the GPU-busy samples, those taken while SM activity was low against utilization.
    #[serde(default)]
    pub samples_gpu_low_sm: u64,
    /// By self share of the samples taken while SM activity was low.
    #[serde(default)]
    pub top_low_sm_functions: Vec<FunctionStat>,
    /// The call path whose share rises most from the other GPU-busy samples to those taken
    /// with low SM activity: the code the low-SM verdict names.
    #[serde(default)]
    pub low_sm_path: Option<IdlePath>,
}

impl Aggregator {
    pub fn summary(&self, meta: &RecordingMeta) -> Summary {
        let roles = roles::of(self, meta.pid);
        let gpu = self.gpu_summary(meta, &roles);
        let the_loop = self.loop_reading(meta, &roles, gpu.as_ref());
        Summary {
            pid: meta.pid,
            rank: meta.rank,
            host: meta.host.clone(),
            command_line: meta.command_line.clone(),
            python_version: meta.python_version.clone(),
            reader: meta.reader.clone(),
            started_at: meta.started_at.clone(),
            duration_secs: meta.duration_secs,
            rate_hz: meta.rate_hz,
            ticks: meta.ticks,
            samples: self.samples,
            idle_samples_skipped: self.idle_skipped,
            waits_left_out: self.waits_left_out(&roles.threads),
            errors: self.errors.clone(),
            dropped: meta.dropped,
            late_ticks: meta.late_ticks,
            max_lateness_ms: meta.max_lateness_ms,
            target_exited: meta.target_exited,
            exit_status: meta.exit_status,
            exit_signal: meta.exit_signal,
            threads: self.thread_summaries(),
            processes: self.process_summaries(),
            processes_ended: self.processes_ended(meta),
            processes_followed: self.processes_followed(),
            compiled_code: if self.config.include_idle {
                None
            } else {
                crate::compiled_code(&self.table)
            },
            top_functions: top_functions(&self.table, |c| c.all, TOP_FUNCTIONS),
            notices: meta.notices.clone(),
            caps_reached: self.caps_reached(),
            gpu,
            gpu_unavailable: meta.gpu_unavailable.clone(),
            loop_found_by: roles.found_by,
            roles: roles.threads,
            stuck: self.stuck(),
            memory: self.memory_summary(meta),
            step: the_loop.step,
            step_gil_holder: the_loop.step_gil_holder,
            if_fixed: the_loop.if_fixed,
            verdict: the_loop.verdict,
            feeders: the_loop.feeders,
            gil: self.gil_summary(),
        }
    }

    fn gpu_summary(&self, meta: &RecordingMeta, roles: &roles::Roles) -> Option<GpuSummary> {
        if self.timeline.is_empty() {
            return None;
        }
        let idle_below = self.config.idle_below;
        // The one mean: each device's, and theirs, which the verdict judges.
        let utilization = self.timeline.utilization_mean();
        let devices = self.device_summaries(meta, utilization.as_ref());
        let series = self.utilization_series();
        let mean_utilization = utilization.as_ref().map(|u| u.mean);
        let idle_share = utilization.as_ref().map(|u| u.idle_share);
        let startup_end = self.startup.end();
        let cycle = self.cycle(&series, startup_end.map(|t| t.as_nanos()));
        let startup_secs = startup_end.map_or(0.0, |end| end.seconds_since(self.start).max(0.0));
        let tagged = self.tagged_counts();
        let mean_sm_active = mean_sm_active(&devices);
        let top_low_sm = top_functions(&self.table, |c| c.gpu_low_sm, TOP_GPU_FUNCTIONS).by_self;
        let pending = self.pending_gpu_tagging() as u64;
        let top_idle = top_functions(&self.table, |c| c.gpu_idle, TOP_GPU_FUNCTIONS).by_self;
        let top_busy = top_functions(&self.table, |c| c.gpu_busy, TOP_GPU_FUNCTIONS).by_self;
        let idle_path = idle_path(&self.table);
        let low_sm_path = idle_path_by(&self.table, |c| {
            (c.gpu_low_sm, c.gpu_busy.saturating_sub(c.gpu_low_sm))
        });
        let while_idle = roles::while_idle_of(self, roles);
        let (step, step_gil_holder) = match roles::step_of(self, roles) {
            Some((step, holder)) => (Some(step), holder),
            None => (None, None),
        };
        let stuck = self.stuck();
        let hang_gpu = mean_utilization
            .map(|mean| HangGpu::classify(mean, mean_sm_active, f64::from(idle_below), false));
        let (verdict, if_fixed) = verdict_and_fix(VerdictInput {
            stuck: stuck.as_ref().zip(hang_gpu),
            mean_utilization,
            cycle: cycle.as_ref(),
            while_idle: &while_idle,
            startup_secs,
            idle_functions: &top_idle,
            idle_path: idle_path.as_ref(),
            low_sm_path: low_sm_path.as_ref(),
            mean_sm_active,
            low_sm_functions: &top_low_sm,
            step: step.as_ref(),
            gil_holder: step_gil_holder.as_ref(),
            cpus_usable: meta.cpus_usable,
        });
        Some(GpuSummary {
            devices,
            idle_below: f64::from(idle_below),
            mean_utilization,
            idle_share,
            oscillation_period_secs: cycle.map(|c| c.period_secs),
            cycle,
            startup_secs,
            startup_functions: top_functions(&self.table, |c| c.startup, STARTUP_FUNCTIONS).by_self,
            while_idle,
            step: step.map(|s| s.breakdown),
            step_gil_holder,
            if_fixed,
            samples_gpu_idle: tagged[0],
            samples_gpu_busy: tagged[1],
            samples_gpu_unknown: tagged[2] + pending,
            top_idle_functions: top_idle,
            top_busy_functions: top_busy,
            idle_path,
            verdict,
            mean_sm_active_pct: mean_sm_active,
            samples_gpu_low_sm: tagged[3],
            top_low_sm_functions: top_low_sm,
            low_sm_path,
        })
    }

    /// Each device's utilization series, those with readings.
    fn utilization_series(&self) -> Vec<Vec<(u64, f32)>> {
        self.timeline
            .devices()
            .into_iter()
            .map(|d| self.timeline.utilization_series(d))
            .filter(|s| !s.is_empty())
            .collect()
    }

    /// The samples tagged GPU-idle, busy, unknown and low-SM, over every stack.
    fn tagged_counts(&self) -> [u64; 4] {
        let mut tagged = [0u64; 4];
        for stack in self.table.stacks() {
            tagged[0] += stack.counts.gpu_idle;
            tagged[1] += stack.counts.gpu_busy;
            tagged[2] += stack.counts.gpu_unknown;
            tagged[3] += stack.counts.gpu_low_sm;
        }
        tagged
    }

    /// Each device's figures, named as the recording's meta names them.
    fn device_summaries(
        &self,
        meta: &RecordingMeta,
        utilization: Option<&UtilizationResult>,
    ) -> Vec<GpuDeviceSummary> {
        self.timeline
            .device_summaries(utilization)
            .into_iter()
            .map(|mut device| {
                let index = device.index;
                if let Some(info) = meta.gpu_devices.iter().find(|d| d.index == index) {
                    device.name.clone_from(&info.name);
                    device.uuid.clone_from(&info.uuid);
                }
                device
            })
            .collect()
    }

    /// The cycle in the latest stretch of the timeline (which it keeps at full resolution),
    /// from the end of start-up on.
    fn cycle(&self, series: &[Vec<(u64, f32)>], startup_end: Option<u64>) -> Option<Cycle> {
        let first = series.iter().filter_map(|s| s.first()).map(|r| r.0).min()?;
        let last = series.iter().filter_map(|s| s.last()).map(|r| r.0).max()?;
        let from = last
            .saturating_sub(CYCLE_WINDOW_NANOS)
            .max(first)
            .max(startup_end.unwrap_or(0));
        let grid = resample_mean(series, from, last, CYCLE_STEP_NANOS);
        let to = from + grid.len() as u64 * CYCLE_STEP_NANOS;
        let bursts = bursts_of_grid(&grid, from, CYCLE_STEP_NANOS, self.config.idle_below);
        cycle(&bursts, from, to).or_else(|| {
            let short = short_bursts_of_grid(&grid, from, CYCLE_STEP_NANOS, self.config.idle_below);
            short_cycle(&short, from, to)
        })
    }

    /// Whether the target did not move (`Stuck::judge`), with where its busiest threads are.
    fn stuck(&self) -> Option<Stuck> {
        let unchanged_secs = self.motion.unchanged_secs();
        let working = self.motion.activity.any_working();
        let whole_recording = Stuck::judge(unchanged_secs, self.motion.span_secs(), working)?;
        let mut threads: Vec<_> = self.threads.iter().collect();
        threads.sort_by(|a, b| {
            b.activity
                .totals
                .all()
                .total()
                .cmp(&a.activity.totals.all().total())
                .then(a.pid.cmp(&b.pid))
        });
        let frozen = threads
            .iter()
            .filter_map(|t| {
                let frame = t.last_frames.as_ref()?.iter().find(|f| !f.native)?;
                Some(FrozenThread {
                    pid: t.pid,
                    thread: t.name.clone(),
                    frame: frame.label(),
                })
            })
            .take(STUCK_THREADS)
            .collect();
        Some(Stuck {
            unchanged_secs,
            whole_recording,
            threads: frozen,
        })
    }

    fn thread_summaries(&self) -> Vec<ThreadSummary> {
        // A thread of a kind read as one is its kind's, as its stacks are: one entry.
        let mut threads: Vec<ThreadSummary> = Vec::new();
        let mut kinds: std::collections::HashMap<(u32, u64), usize> = Default::default();
        for t in self.threads.iter() {
            let Some(kind @ (pid, kind_id, _)) = t.in_kind else {
                threads.push(ThreadSummary {
                    pid: t.pid,
                    name: t.name.clone(),
                    os_thread_id: t.os_thread_id,
                    python_thread_id: t.python_thread_id,
                    samples: t.samples,
                    threads: None,
                    at_a_time: None,
                });
                continue;
            };
            let at = *kinds.entry((pid, kind_id)).or_insert_with(|| {
                let (all, at_once) = self.threads.pool_heads(kind);
                threads.push(ThreadSummary {
                    pid,
                    name: crate::fold::kind_label(pid, &t.name),
                    os_thread_id: None,
                    python_thread_id: kind_id,
                    samples: 0,
                    threads: Some(all),
                    at_a_time: Some(at_once),
                });
                threads.len() - 1
            });
            threads[at].samples += t.samples;
        }
        threads.sort_by(|a, b| {
            b.samples
                .cmp(&a.samples)
                .then_with(|| a.name.cmp(&b.name))
                .then(a.pid.cmp(&b.pid))
                .then(a.python_thread_id.cmp(&b.python_thread_id))
        });
        let folded = self.threads.folded();
        if folded.threads > 0 {
            threads.push(ThreadSummary {
                pid: 0,
                name: OTHER_THREADS.to_owned(),
                os_thread_id: None,
                python_thread_id: 0,
                samples: folded.samples,
                threads: Some(folded.threads),
                at_a_time: None,
            });
        }
        threads
    }
}

/// The devices' mean SM activity, where any device reports it (GPM: Hopper and later).
fn mean_sm_active(devices: &[GpuDeviceSummary]) -> Option<f64> {
    let sm_means: Vec<f64> = devices
        .iter()
        .filter_map(|d| d.mean_sm_active_pct)
        .collect();
    (!sm_means.is_empty()).then(|| sm_means.iter().sum::<f64>() / sm_means.len() as f64)
}
