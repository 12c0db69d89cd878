//! One recording, for `attach` and `record`: starts the producers and the aggregator, waits for
//! the end (duration, Ctrl-C, SIGTERM, the target's exit), and writes the output directory.

use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;
use std::time::{Duration, Instant};

use anyhow::{bail, Context};
use crossbeam_channel::bounded;
use stackscope_aggregate::{AggregateConfig, RecordingMeta};
use stackscope_event::Timestamp;
use stackscope_samplelog::LogHeader;
use stackscope_sampler::{
    Root, Sampler, SamplerConfig, SamplerReport, SamplerStats, StopReason, TargetOptions,
};

use crate::child::{CommandExit, LaunchedChild};
use crate::config::{ensure_writable_dir, RecordingConfig, Target};
use crate::gpu::{GpuHandle, GpuReport};
use crate::metrics::{MetricsEndpoint, DEFAULT_HANG_AFTER_SECS};
use crate::recorder::Recorder;
use crate::signals::Signals;

/// Room for a few seconds of samples at the highest rate: enough to ride out a slow write of
/// the aggregator without the producers ever waiting.
const CHANNEL_CAPACITY: usize = 1 << 16;

/// How long `record` waits for a freshly started interpreter to become readable.
const STARTUP_TIMEOUT: Duration = Duration::from_secs(10);

/// Where a recording's GPU readings come from.
pub enum GpuSource {
    /// NVML, as `--gpu` and `--nvml-lib` say.
    Nvml,
    /// `stackscope demo`'s simulated GPU, following the phases its loop writes to this file.
    Simulated(PathBuf),
}

pub fn run(config: RecordingConfig) -> anyhow::Result<()> {
    run_with(config, GpuSource::Nvml)
}

pub fn run_with(config: RecordingConfig, gpu_source: GpuSource) -> anyhow::Result<()> {
    let signals = Signals::install()?;
    let options = TargetOptions {
        blocking: config.blocking,
        locals: false,
        native: config.native,
    };
    let (target, child, out_dir) = match &config.target {
        Target::Pid(pid) => {
            let target = Root::attach(*pid, &options, config.subprocesses)?;
            let dir = config.output_dir(*pid);
            ensure_writable_dir(&dir)?;
            (target, None, dir)
        }
        Target::Command(command) => {
            if let Some(dir) = &config.output {
                ensure_writable_dir(dir)?;
            } else {
                ensure_writable_dir(Path::new("."))?;
            }
            let mut child = LaunchedChild::spawn(command)?;
            let target = match Root::attach_when_ready(
                child.pid(),
                &options,
                STARTUP_TIMEOUT,
                config.subprocesses,
            ) {
                Ok(target) => target,
                Err(e) => {
                    let status = child.end();
                    match status {
                        Some(status) if !child.was_killed => bail!(
                            "{} exited ({status}) before stackscope could read its interpreter: {e}",
                            command.join(" ")
                        ),
                        _ => return Err(e.into()),
                    }
                }
            };
            let dir = config.output_dir(child.pid());
            ensure_writable_dir(&dir)?;
            (target, Some(child), dir)
        }
    };
    let pid = target.pid();
    match &target {
        Root::Python(_) => eprintln!(
            "stackscope: sampling process {pid} ({}) at {} Hz; Ctrl-C to stop",
            target.describe(),
            config.rate_hz
        ),
        Root::Other(_) => eprintln!(
            "stackscope: following process {pid} ({}) and sampling its Python descendants at \
             {} Hz; Ctrl-C to stop",
            target.describe(),
            config.rate_hz
        ),
    }
    record(config, gpu_source, target, child, signals, out_dir)
}

fn record(
    config: RecordingConfig,
    gpu_source: GpuSource,
    target: Root,
    mut child: Option<LaunchedChild>,
    signals: Signals,
    out_dir: PathBuf,
) -> anyhow::Result<()> {
    let start = Timestamp::now();
    let mut meta = MetaSource {
        pid: target.pid(),
        rank: stackscope_event::RankInfo::of_process(target.pid()),
        host: stackscope_event::host_name(),
        command_line: target.command_line().to_owned(),
        python_version: target.python_version().unwrap_or_default().to_owned(),
        reader: target.reader().to_owned(),
        started_at: chrono::Local::now().to_rfc3339(),
        started: Instant::now(),
        sampled: None,
        rate_hz: config.rate_hz,
    };

    let (sender, receiver) = bounded(CHANNEL_CAPACITY);
    let producers_stop = Arc::new(AtomicBool::new(false));
    let gpu = match gpu_source {
        GpuSource::Nvml => GpuHandle::start(
            &config.gpu,
            meta.pid,
            sender.clone(),
            producers_stop.clone(),
        ),
        GpuSource::Simulated(phase_file) => {
            GpuHandle::simulated(phase_file, sender.clone(), producers_stop.clone())
        }
    };
    let aggregate_config = AggregateConfig {
        include_idle: config.include_idle,
        idle_below: config.gpu.idle_below,
        gpu_enabled: gpu.is_enabled(),
        process_root: config.subprocesses,
    };
    let log_header = LogHeader {
        start,
        started_at: meta.started_at.clone(),
        pid: meta.pid,
        command_line: meta.command_line.clone(),
        python_version: meta.python_version.clone(),
        rate_hz: config.rate_hz,
        include_idle: aggregate_config.include_idle,
        idle_below: aggregate_config.idle_below,
        gpu_enabled: aggregate_config.gpu_enabled,
        process_root: aggregate_config.process_root,
        expected_gpu_devices: Vec::new(),
    };
    let metrics = MetricsEndpoint::start(
        config.metrics_addr.as_deref(),
        DEFAULT_HANG_AFTER_SECS,
        config.gpu.idle_below,
    )?;
    let recorder = Recorder::spawn(
        aggregate_config,
        start,
        receiver,
        &out_dir,
        &log_header,
        metrics.as_ref().map(|m| m.state.clone()),
    )?;
    let sampler = Sampler::spawn(
        target,
        SamplerConfig {
            rate_hz: config.rate_hz,
            duration: config.duration,
            follow_children: config.subprocesses,
            options: TargetOptions {
                blocking: config.blocking,
                locals: false,
                native: config.native,
            },
        },
        sender,
        producers_stop.clone(),
    )
    .context("cannot start the sampling thread")?;

    let mut next_checkpoint = Instant::now() + config.flush_interval;
    let mut reported_stop = false;
    while !signals.stop_requested() && !sampler.is_finished() {
        std::thread::sleep(Duration::from_millis(20));
        if let Some(m) = &metrics {
            let dropped = sampler.stats().dropped.load(Ordering::Relaxed);
            crate::metrics::lock(&m.state).set_dropped(dropped);
        }
        let stopped = sampler.stats().stopped_now.load(Ordering::Relaxed);
        if stopped != reported_stop {
            reported_stop = stopped;
            if stopped {
                eprintln!(
                    "stackscope: process {} is stopped (SIGSTOP or a debugger); not sampling it, \
                     and leaving it stopped",
                    meta.pid
                );
            } else {
                eprintln!(
                    "stackscope: process {} runs again; sampling resumed",
                    meta.pid
                );
            }
        }
        let asked = signals.take_checkpoint_request();
        if asked || Instant::now() >= next_checkpoint {
            let snapshot = meta.live(sampler.stats(), &gpu.snapshot());
            match recorder.checkpoint(&snapshot) {
                Ok(_) if asked => {
                    eprintln!("stackscope: checkpoint written to {}", out_dir.display())
                }
                Ok(_) => {}
                Err(e) => eprintln!("stackscope: checkpoint failed: {e:#}"),
            }
            // Outside the recorder's lock: the exports re-read the log it just flushed.
            if let Err(e) = crate::export::write_formats(&out_dir, &config.formats) {
                eprintln!("stackscope: checkpoint exports failed: {e:#}");
            }
            next_checkpoint = Instant::now() + config.flush_interval;
        }
    }
    producers_stop.store(true, Ordering::Relaxed);
    let report = sampler.join();
    // The time sampled, not the time ending the command took after.
    meta.sampled = Some(meta.started.elapsed());
    let gpu_report = gpu.join();
    let target_exited = report.stop == StopReason::TargetExited;
    if let StopReason::Fatal(why) = &report.stop {
        eprintln!("stackscope: sampling stopped early: {why}");
    }
    let exit_status = child.as_mut().and_then(|c| {
        if target_exited {
            c.wait_for_exit(CHILD_EXIT_GRACE)
        } else {
            c.end()
        }
    });
    // The console and summary.json say the same: whether the target ended, and how.
    match exit_status {
        Some(CommandExit::Code(code)) => {
            eprintln!("stackscope: process {} exited with status {code}", meta.pid)
        }
        Some(exit @ CommandExit::Signal(_)) => {
            eprintln!("stackscope: process {} ended by {exit}", meta.pid)
        }
        None if target_exited => eprintln!("stackscope: process {} exited", meta.pid),
        None => {}
    }
    let ended = target_exited || exit_status.is_some();
    let final_meta = meta.finished(&report, gpu_report, ended, exit_status);
    let written = recorder.finish(&final_meta)?;
    crate::export::write_formats(&out_dir, &config.formats)?;
    let mut stdout = std::io::stdout().lock();
    stackscope_report::write_text_summary(&written.summary, &out_dir, &mut stdout)
        .context("cannot print the summary")?;
    Ok(())
}

/// How long `record` waits for its command to be reaped once the sampler saw it go.
const CHILD_EXIT_GRACE: Duration = Duration::from_secs(5);

/// What the recording knows about itself, turned into the aggregate's `RecordingMeta` at each
/// checkpoint and at the end.
struct MetaSource {
    pid: u32,
    rank: stackscope_event::RankInfo,
    host: Option<String>,
    command_line: String,
    python_version: String,
    /// The reader the target was attached with, until the sampler has read.
    reader: String,
    started_at: String,
    started: Instant,
    /// How long the sampler ran, once it has stopped.
    sampled: Option<Duration>,
    rate_hz: f64,
}

impl MetaSource {
    fn base(&self) -> RecordingMeta {
        RecordingMeta {
            pid: self.pid,
            rank: self.rank,
            host: self.host.clone(),
            command_line: self.command_line.clone(),
            python_version: self.python_version.clone(),
            reader: self.reader.clone(),
            started_at: self.started_at.clone(),
            duration_secs: self
                .sampled
                .unwrap_or_else(|| self.started.elapsed())
                .as_secs_f64(),
            rate_hz: self.rate_hz,
            ticks: 0,
            dropped: 0,
            late_ticks: 0,
            max_lateness_ms: 0.0,
            target_exited: false,
            exit_status: None,
            exit_signal: None,
            gpu_devices: Vec::new(),
            gpu_unavailable: None,
            notices: Vec::new(),
        }
    }

    /// The recording so far, while it runs.
    fn live(&self, stats: &SamplerStats, gpu: &GpuReport) -> RecordingMeta {
        let ticks = stats.ticks.load(Ordering::Relaxed);
        let skipped = stats.skipped_ticks.load(Ordering::Relaxed);
        let stopped = stats.stopped_ticks.load(Ordering::Relaxed);
        let reader = stats.reader();
        RecordingMeta {
            reader: if reader.is_empty() {
                self.reader.clone()
            } else {
                reader
            },
            ticks,
            dropped: stats.dropped.load(Ordering::Relaxed) + gpu.dropped,
            late_ticks: stats.late_ticks.load(Ordering::Relaxed),
            max_lateness_ms: stats.max_lateness_ns.load(Ordering::Relaxed) as f64 / 1e6,
            gpu_devices: gpu.devices.clone(),
            gpu_unavailable: gpu.unavailable.clone(),
            notices: sampler_notices(ticks, skipped, stopped, None)
                .into_iter()
                .chain(gpu.notices.iter().cloned())
                .collect(),
            ..self.base()
        }
    }

    fn finished(
        &mut self,
        report: &SamplerReport,
        gpu: GpuReport,
        target_exited: bool,
        exit_status: Option<CommandExit>,
    ) -> RecordingMeta {
        let fatal = match &report.stop {
            StopReason::Fatal(why) => Some(why.as_str()),
            _ => None,
        };
        let mut notices = sampler_notices(
            report.ticks,
            report.skipped_ticks,
            report.stopped_ticks,
            fatal,
        );
        if let Some(status) = exit_status {
            if status.code().is_none() {
                notices.push(format!("the command ended by a signal ({status})"));
            }
        }
        notices.extend(gpu.notices);
        RecordingMeta {
            reader: if report.reader.is_empty() {
                self.reader.clone()
            } else {
                report.reader.clone()
            },
            ticks: report.ticks,
            dropped: report.dropped + gpu.dropped,
            late_ticks: report.late_ticks,
            max_lateness_ms: report.max_lateness.as_secs_f64() * 1e3,
            target_exited,
            exit_status: exit_status.and_then(|s| s.code()),
            exit_signal: exit_status.and_then(|s| s.signal()),
            gpu_devices: gpu.devices,
            gpu_unavailable: gpu.unavailable,
            notices,
            ..self.base()
        }
    }
}

fn sampler_notices(ticks: u64, skipped: u64, stopped: u64, fatal: Option<&str>) -> Vec<String> {
    let mut out = Vec::new();
    // A few skipped ticks are scheduling noise; a steady share means the rate is too high.
    if skipped > 0 && skipped * 100 > ticks {
        out.push(format!(
            "the sampler fell behind and skipped {skipped} ticks ({:.1}% of {ticks}): lower --rate",
            skipped as f64 * 100.0 / (ticks + skipped) as f64
        ));
    }
    if stopped > 0 {
        out.push(format!(
            "the target was stopped by someone else (SIGSTOP or a debugger) for {stopped} ticks; \
             stackscope did not sample or resume it then"
        ));
    }
    if let Some(why) = fatal {
        out.push(format!("sampling stopped early: {why}"));
    }
    out
}
