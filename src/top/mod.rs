//! `stackscope top`: the live view of a running job. Starts the same producers as a recording
//! (the sampler thread and the GPU poller, on one channel) but folds their events into a table
//! model (`stackscope_aggregate::top`, tagged as a recording is) instead of a recorder, and
//! shows it every second: full-screen on a terminal ([`tui`]), as plain-text tables otherwise
//! ([`plain`]).

mod format;
mod idle_code;
mod plain;
mod tui;
mod view;

use std::io::IsTerminal;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;
use std::time::{Duration, Instant};

use anyhow::Context;
use crossbeam_channel::{bounded, Receiver};
use stackscope_event::Event;
use stackscope_sampler::{Root, Sampler, SamplerConfig, SamplerStats, StopReason, TargetOptions};

use crate::config::TopConfig;
use crate::gpu::GpuHandle;
use crate::metrics::{MetricsEndpoint, DEFAULT_HANG_AFTER_SECS};
use crate::signals::Signals;

use format::Status;
use stackscope_aggregate::top::TopModel;

/// How often the view refreshes and the interval columns roll over.
const INTERVAL: Duration = Duration::from_secs(1);

/// As in a recording: a few seconds of samples at the highest rate, so the producers never
/// wait while the view draws.
const CHANNEL_CAPACITY: usize = 1 << 16;

/// Events folded per call of [`Session::pump`], so that a flood cannot keep the loop from
/// answering keys.
const PUMP_LIMIT: usize = 100_000;

pub fn run(config: TopConfig) -> anyhow::Result<()> {
    let signals = Signals::install()?;
    let options = TargetOptions {
        blocking: true,
        locals: false,
        native: false,
    };
    // Attaching can fail (no such process, not Python, permission): fail before the terminal
    // changes, so the error is one plain line.
    let target = Root::attach(config.pid, &options, config.subprocesses)?;
    let session = Session::start(&config, target, options)?;
    if std::io::stdout().is_terminal() {
        tui::run(session, &signals, config.include_idle)
    } else {
        plain::run(session, &signals, config.include_idle)
    }
}

/// The producers, the channel and the model of one `top` run. Dropping it stops the producers
/// and waits for them, so the target is never left stopped whatever way `top` ends.
pub struct Session {
    receiver: Receiver<Event>,
    sampler: Option<Sampler>,
    sampler_stats: Arc<SamplerStats>,
    gpu: Option<GpuHandle>,
    producers_stop: Arc<AtomicBool>,
    pub model: TopModel,
    pub status: Status,
    idle_code: idle_code::IdleCode,
    interval_started: Instant,
    all_started: Instant,
    /// `--metrics-addr`'s state and server.
    metrics: Option<MetricsEndpoint>,
    ticks_at_interval_start: u64,
}

impl Session {
    fn start(config: &TopConfig, target: Root, options: TargetOptions) -> anyhow::Result<Session> {
        let status = Status {
            pid: target.pid(),
            rank: stackscope_event::RankInfo::of_process(target.pid()).rank,
            command: target.command_line().to_owned(),
            python_version: target
                .python_version()
                .unwrap_or("none (a launcher)")
                .to_owned(),
            rate_hz: config.rate_hz,
            processes: 1,
            ..Status::default()
        };
        let (sender, receiver) = bounded(CHANNEL_CAPACITY);
        let producers_stop = Arc::new(AtomicBool::new(false));
        // Started before the terminal changes: a missing NVML says why in one line that stays
        // on the screen after `top` ends (and in the view's GPU line).
        let gpu = GpuHandle::start(
            &config.gpu,
            status.pid,
            sender.clone(),
            producers_stop.clone(),
        );
        let model = TopModel::new(config.gpu.idle_below, gpu.is_enabled());
        let gpu_enabled = gpu.is_enabled();
        let metrics = MetricsEndpoint::start(
            config.metrics_addr.as_deref(),
            DEFAULT_HANG_AFTER_SECS,
            config.gpu.idle_below,
        )?;
        let sampler = Sampler::spawn(
            target,
            SamplerConfig {
                rate_hz: config.rate_hz,
                duration: None,
                follow_children: config.subprocesses,
                options,
            },
            sender,
            producers_stop.clone(),
        )
        .context("cannot start the sampling thread")?;
        let now = Instant::now();
        let mut session = Session {
            receiver,
            sampler_stats: sampler.stats().clone(),
            sampler: Some(sampler),
            gpu: Some(gpu),
            producers_stop,
            idle_code: idle_code::IdleCode::new(config.gpu.idle_below, gpu_enabled),
            model,
            status,
            interval_started: now,
            all_started: now,
            metrics,
            ticks_at_interval_start: 0,
        };
        session.refresh_status(0.0);
        Ok(session)
    }

    /// Folds the events waiting on the channel into the model.
    pub fn pump(&mut self) {
        let mut metrics = self
            .metrics
            .as_ref()
            .map(|m| crate::metrics::lock(&m.state));
        for event in self.receiver.try_iter().take(PUMP_LIMIT) {
            self.idle_code.handle(&event);
            if let Some(m) = metrics.as_mut() {
                m.observe(&event);
            }
            self.model.handle(event);
        }
    }

    /// Whether the interval in progress has run its length.
    pub fn interval_due(&self) -> bool {
        self.status.ended.is_none() && self.interval_started.elapsed() >= INTERVAL
    }

    /// How long until the interval in progress ends.
    pub fn until_interval_end(&self) -> Duration {
        INTERVAL.saturating_sub(self.interval_started.elapsed())
    }

    /// Ends the interval in progress: the model rolls over and the header's figures are
    /// measured over it.
    pub fn end_interval(&mut self) {
        let secs = self.interval_started.elapsed().as_secs_f64();
        self.interval_started = Instant::now();
        self.model.end_interval();
        self.refresh_status(secs);
    }

    fn refresh_status(&mut self, interval_secs: f64) {
        let stats = &self.sampler_stats;
        let ticks = stats.ticks.load(Ordering::Relaxed);
        if interval_secs > 0.0 {
            self.status.achieved_hz =
                ticks.saturating_sub(self.ticks_at_interval_start) as f64 / interval_secs;
            self.status.interval_secs = interval_secs;
        }
        self.ticks_at_interval_start = ticks;
        self.status.errors = stats.errors.load(Ordering::Relaxed);
        self.status.processes = stats.processes.load(Ordering::Relaxed).max(1);
        self.status.target_stopped = stats.stopped_now.load(Ordering::Relaxed);
        self.status.all_secs = self.all_started.elapsed().as_secs_f64();
        let mut dropped = stats.dropped.load(Ordering::Relaxed);
        if let Some(gpu) = &self.gpu {
            let report = gpu.snapshot();
            dropped += report.dropped;
            self.status.gpu_unavailable = report.unavailable;
            let devices: Vec<(u32, String)> = report
                .devices
                .into_iter()
                .map(|d| (d.index, d.name))
                .collect();
            self.model.set_devices(&devices);
        }
        self.status.dropped = dropped;
        self.status.idle_code = self.idle_code.sentence();
        if let Some(m) = &self.metrics {
            crate::metrics::lock(&m.state).set_dropped(dropped);
        }
    }

    /// Clears the since-start counts (the `r` key).
    pub fn reset(&mut self) {
        self.model.reset();
        self.idle_code.reset();
        self.all_started = Instant::now();
        self.status.all_secs = 0.0;
    }

    /// Notices, once, that the sampler has ended by itself (the target exited, or sampling
    /// could not go on): folds what is left, ends the last interval, stops the GPU poller and
    /// says so in `status.ended`. True the one time it happens.
    pub fn check_ended(&mut self) -> bool {
        if !self.sampler.as_ref().is_some_and(Sampler::is_finished) {
            return false;
        }
        let Some(sampler) = self.sampler.take() else {
            return false;
        };
        let report = sampler.join();
        self.producers_stop.store(true, Ordering::Relaxed);
        if let Some(gpu) = self.gpu.take() {
            gpu.join();
        }
        // Both producers are done: everything they sent is on the channel now.
        self.pump();
        self.model.flush();
        self.idle_code.finish();
        self.end_interval();
        let pid = self.status.pid;
        self.status.ended = Some(match report.stop {
            StopReason::Fatal(why) => format!("sampling of process {pid} stopped: {why}"),
            _ => format!("process {pid} ended"),
        });
        true
    }
}

impl Drop for Session {
    fn drop(&mut self) {
        self.producers_stop.store(true, Ordering::Relaxed);
        if let Some(sampler) = self.sampler.take() {
            sampler.join();
        }
        if let Some(gpu) = self.gpu.take() {
            gpu.join();
        }
    }
}
