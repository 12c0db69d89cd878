//! `stackscope top`: the live view of a running job. Starts the same producers as a recording
//! (the sampler thread and the GPU poller, on one channel) but folds their events into a table
//! model (`stackscope_aggregate::top`, tagged as a recording is) instead of a recorder, and
//! shows it every second: full-screen on a terminal ([`tui`]), as plain-text tables otherwise
//! ([`plain`]). The table tags each stack sample once and hands it on, tagged, to the
//! verdict's aggregate ([`idle_code`]) and the metrics. What the header says of the job (the
//! GPU-idle code, the trainer's wait, or without GPU data the loop's step and verdict) is read
//! from that aggregate's summary, as `summary.json` would say it; each thread's GIL share from
//! the table.

mod format;
mod idle_code;
mod memory;
mod plain;
mod tui;
mod view;

use std::io::IsTerminal;
use std::sync::atomic::Ordering;
use std::time::{Duration, Instant};

use stackscope_event::{Batch, Event};
use stackscope_sampler::{Root, SamplerConfig, StopReason, TargetOptions};

use crate::config::TopConfig;
use crate::metrics::{MetricsEndpoint, MetricsState, DEFAULT_HANG_AFTER_SECS};
use crate::session::{GpuSource, Producers, Session};
use crate::signals::Signals;

use format::Status;
use stackscope_aggregate::top::TopModel;

/// How often the view refreshes and the interval columns roll over.
const INTERVAL: Duration = Duration::from_secs(1);

pub fn run(config: TopConfig) -> anyhow::Result<()> {
    let signals = Signals::install()?;
    let options = TargetOptions {
        blocking: true,
        locals: false,
        native: false,
        tuning: config.tuning,
    };
    // Attaching can fail (no such process, not Python, permission): fail before the terminal
    // changes, so the error is one plain line.
    let target = Root::attach(config.pid, &options, config.subprocesses)?;
    let live = Live::start(&config, target, options, signals)?;
    if std::io::stdout().is_terminal() {
        tui::run(live, config.include_idle)
    } else {
        plain::run(live, config.include_idle)
    }
}

/// The session (producers, channel, signals) and the model of one `top` run. Dropping it
/// drops the session, which stops the producers and waits for them, so the target is never
/// left stopped whatever way `top` ends.
pub struct Live {
    pub session: Session,
    pub model: TopModel,
    pub status: Status,
    idle_code: idle_code::IdleCode,
    interval_started: Instant,
    all_started: Instant,
    /// `--metrics-addr`'s state and server.
    metrics: Option<MetricsEndpoint>,
    ticks_at_interval_start: u64,
    /// What the table and the verdict's aggregate freed goes back to the system now and then.
    trim: crate::heap::PeriodicTrim,
}

impl Live {
    fn start(
        config: &TopConfig,
        target: Root,
        options: TargetOptions,
        signals: Signals,
    ) -> anyhow::Result<Live> {
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
        // Started before the terminal changes: a missing NVML says why in one line that stays
        // on the screen after `top` ends (and in the view's GPU line).
        let session = Session::start(
            signals,
            Producers {
                pid: status.pid,
                gpu: &config.gpu,
                gpu_source: GpuSource::Nvml,
                memory_rate_hz: config.memory_rate_hz,
                sampler: Some((
                    target,
                    SamplerConfig {
                        rate_hz: config.rate_hz,
                        duration: None,
                        follow_children: config.subprocesses,
                        options,
                    },
                )),
            },
        )?;
        let gpu_enabled = session.gpu_enabled();
        let model = TopModel::new(config.gpu.idle_below, gpu_enabled);
        // Told each sample's GPU state by the table, which tags it.
        let metrics = config
            .metrics_addr
            .as_deref()
            .map(|addr| {
                MetricsEndpoint::serve(Some(addr), MetricsState::told_tags(DEFAULT_HANG_AFTER_SECS))
            })
            .transpose()?;
        let now = Instant::now();
        let mut live = Live {
            session,
            idle_code: idle_code::IdleCode::new(
                config.gpu.idle_below,
                gpu_enabled,
                status.pid,
                config.subprocesses,
            ),
            model,
            status,
            interval_started: now,
            all_started: now,
            metrics,
            ticks_at_interval_start: 0,
            trim: crate::heap::PeriodicTrim::new(),
        };
        live.refresh_status(0.0);
        Ok(live)
    }

    /// Folds one batch of events: the table tags each stack sample once and hands it on to
    /// the verdict's aggregate and the metrics.
    pub fn handle(&mut self, batch: Batch) {
        let mut metrics = self
            .metrics
            .as_ref()
            .map(|m| crate::metrics::lock(&m.state));
        for event in batch {
            if !matches!(event, Event::Stack(_)) {
                self.idle_code.handle(&event);
                if let Some(m) = metrics.as_mut() {
                    m.observe(&event);
                }
            }
            let idle_code = &mut self.idle_code;
            self.model.handle_with(event, &mut |sample, tag| {
                if let Some(m) = metrics.as_mut() {
                    m.count_tagged(&sample, tag);
                }
                idle_code.handle_tagged(sample, tag);
            });
        }
    }

    /// The instant the interval in progress ends: the view's one deadline.
    pub fn interval_end(&self) -> Option<Instant> {
        self.status
            .ended
            .is_none()
            .then(|| self.interval_started + INTERVAL)
    }

    /// Ends the interval in progress: the model rolls over and the header's figures are
    /// measured over it.
    pub fn end_interval(&mut self) {
        let secs = self.interval_started.elapsed().as_secs_f64();
        self.interval_started = Instant::now();
        self.model.end_interval();
        self.refresh_status(secs);
        self.trim.when_due();
    }

    fn refresh_status(&mut self, interval_secs: f64) {
        let stats = self.session.sampler_stats();
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
        let mut dropped =
            stats.dropped.load(Ordering::Relaxed) + self.session.memory_snapshot().dropped;
        if let Some(report) = self.session.gpu_snapshot() {
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
        let summary = self.idle_code.summary();
        format::read_summary(&mut self.status, &summary, self.idle_code.gpu_enabled());
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

    /// Once the sampler has ended by itself (the target exited, or sampling could not go on):
    /// stops the GPU poller, folds what is left, ends the last interval and says so in
    /// `status.ended`.
    pub fn sampler_ended(&mut self) {
        if self.status.ended.is_some() {
            return;
        }
        let stopped = self.session.stop();
        // Both producers are done: everything they sent is on the channel now.
        let waiting: Vec<Batch> = self.session.waiting().collect();
        for batch in waiting {
            self.handle(batch);
        }
        let (metrics, idle_code) = (&self.metrics, &mut self.idle_code);
        let mut metrics = metrics.as_ref().map(|m| crate::metrics::lock(&m.state));
        self.model.flush_with(&mut |sample, tag| {
            if let Some(m) = metrics.as_mut() {
                m.count_tagged(&sample, tag);
            }
            idle_code.handle_tagged(sample, tag);
        });
        drop(metrics);
        self.idle_code.finish();
        self.end_interval();
        let pid = self.status.pid;
        self.status.ended = Some(match stopped.sampler.map(|r| r.stop) {
            Some(StopReason::Fatal(why)) => format!("sampling of process {pid} stopped: {why}"),
            _ => format!("process {pid} ended"),
        });
    }
}
