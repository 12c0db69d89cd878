//! One recording, for `attach` and `record`: starts the producers and the aggregator, waits for
//! the end (duration, Ctrl-C, SIGTERM, the target's exit), and writes the output directory.

use std::path::{Path, PathBuf};
use std::sync::atomic::Ordering;
use std::time::{Duration, Instant};

use anyhow::{bail, Context};
use stackscope_aggregate::{AggregateConfig, RecordingMeta};
use stackscope_event::Timestamp;
use stackscope_report::SamplesLogSummary;
use stackscope_samplelog::LogHeader;
use stackscope_sampler::{
    Root, SamplerConfig, SamplerReport, SamplerStats, StopReason, TargetOptions,
};

use crate::child::LaunchedChild;
use crate::config::{ensure_writable_dir, RecordingConfig, Target};
use crate::ending::Stopped;
use crate::exit::{shell_status, CommandExit, Ended, EndedBy, WithStatus};
use crate::gpu::GpuReport;
use crate::memory::MemoryReport;
use crate::metrics::{MetricsEndpoint, DEFAULT_HANG_AFTER_SECS};
use crate::recorder::Recorder;
pub use crate::session::GpuSource;
use crate::session::{Producers, Session, Wake};
use crate::signals::{Request, Signals};

/// How long `record` waits for a freshly started interpreter to become readable.
const STARTUP_TIMEOUT: Duration = Duration::from_secs(10);

/// Records, and gives how the recording ended.
pub fn run(config: RecordingConfig) -> anyhow::Result<Ended> {
    run_with(config, GpuSource::Nvml)
}

pub fn run_with(config: RecordingConfig, gpu_source: GpuSource) -> anyhow::Result<Ended> {
    let signals = Signals::install()?;
    let options = TargetOptions {
        blocking: config.blocking,
        locals: false,
        native: config.native,
        tuning: config.tuning,
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
                    // A command that ended by itself: its status is the job's, for a launcher
                    // that wraps `record`, whatever stackscope could not do. One still running
                    // is ended, and the failure is stackscope's.
                    let by_itself = child.ended_by_itself(CHILD_EXIT_GRACE);
                    child.end(EndedBy::Target);
                    return Err(match by_itself.map(|exit| (exit, shell_status(exit))) {
                        Some((exit, Some(status))) => WithStatus {
                            status,
                            message: format!(
                                "{} exited ({exit}) before stackscope could read its \
                                 interpreter; nothing was recorded: {e}",
                                command.join(" ")
                            ),
                        }
                        .into(),
                        _ => e.into(),
                    });
                }
            };
            let dir = config.output_dir(child.pid());
            ensure_writable_dir(&dir)?;
            (target, Some(child), dir)
        }
    };
    let pid = target.pid();
    // Whether the processes below it are sampled too, said where the user looks first.
    let tree = if config.subprocesses {
        " and the processes below it"
    } else {
        " alone (--no-subprocesses)"
    };
    match &target {
        Root::Python(_) => eprintln!(
            "stackscope: sampling process {pid} ({}){tree} at {} Hz; Ctrl-C to stop",
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

/// The recording's steps: start the producers and the recorder, sample until something ends
/// it, then end the command and write everything.
fn record(
    config: RecordingConfig,
    gpu_source: GpuSource,
    target: Root,
    mut child: Option<LaunchedChild>,
    signals: Signals,
    out_dir: PathBuf,
) -> anyhow::Result<Ended> {
    let start = Timestamp::now();
    let mut meta = MetaSource::new(&target, config.rate_hz);
    let mut session = start_session(&config, gpu_source, target, signals)?;
    // `record` starts the job: its start-up (imports, model build, worker start) is not the
    // job's steady state.
    let leave_out_startup = child.is_some();
    let (mut recorder, metrics) =
        start_recorder(&config, &session, &meta, start, leave_out_startup, &out_dir)?;
    sample_until_stopped(
        &mut session,
        &mut recorder,
        metrics.as_ref(),
        &meta,
        &config,
        &out_dir,
    );
    let stop_signal = session.signals().stop_signal();
    let stopped = session.stop();
    // Both producers have ended: everything they sent is waiting, the sampler's last batch too.
    for batch in session.waiting() {
        recorder.handle(batch);
    }
    let Some(report) = stopped.sampler else {
        bail!("the sampling thread was stopped twice");
    };
    // The time sampled, not the time ending the command took after.
    meta.sampled = Some(meta.started.elapsed());
    let by = ended_by(stop_signal, &report.stop);
    if let StopReason::Fatal(why) = &report.stop {
        eprintln!("stackscope: sampling stopped early: {why}");
    }
    let target_exited = report.stop == StopReason::TargetExited;
    let command = end_command(child.as_mut(), target_exited, by, meta.pid);
    let exit_status = command.exit;
    let ended = target_exited || exit_status.is_some();
    let final_meta = meta.finished(&report, stopped.gpu, stopped.memory, ended, command);
    write_recording(recorder, &final_meta, exit_status, &config, &out_dir)?;
    // `attach` of a tree that ran no Python: nothing asked for was recorded (`record`'s
    // status is its command's; its summary says so).
    if child.is_none() && !meta.read_python(&report) {
        return Err(no_python(&meta, final_meta.duration_secs));
    }
    Ok(Ended {
        by,
        command: exit_status,
    })
}

/// The error of an `attach` during which no Python ran in the target's tree.
fn no_python(meta: &MetaSource, secs: f64) -> anyhow::Error {
    anyhow::anyhow!(
        "process {} ({}) is not a Python process, and no Python process ran below it in the \
         {secs:.1} s recorded: no stack was sampled",
        meta.pid,
        meta.command_line,
    )
}

/// Starts the producers: the sampler on `target`, and the GPU poller.
fn start_session(
    config: &RecordingConfig,
    gpu_source: GpuSource,
    target: Root,
    signals: Signals,
) -> anyhow::Result<Session> {
    Session::start(
        signals,
        Producers {
            pid: target.pid(),
            gpu: &config.gpu,
            gpu_source,
            memory_rate_hz: config.memory_rate_hz,
            sampler: Some((
                target,
                SamplerConfig {
                    rate_hz: config.rate_hz,
                    duration: config.duration,
                    follow_children: config.subprocesses,
                    options: TargetOptions {
                        blocking: config.blocking,
                        locals: false,
                        native: config.native,
                        tuning: config.tuning,
                    },
                },
            )),
        },
    )
}

/// Opens the output directory's recorder (and the sample log it writes as it goes), and the
/// metrics endpoint when `--metrics-addr` asks for one.
fn start_recorder(
    config: &RecordingConfig,
    session: &Session,
    meta: &MetaSource,
    start: Timestamp,
    leave_out_startup: bool,
    out_dir: &Path,
) -> anyhow::Result<(Recorder, Option<MetricsEndpoint>)> {
    let aggregate_config = AggregateConfig {
        include_idle: config.include_idle,
        idle_below: config.gpu.idle_below,
        gpu_enabled: session.gpu_enabled(),
        process_root: config.subprocesses,
        leave_out_startup,
        processes_apart: config.processes_apart,
        threads_apart: config.threads_apart,
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
        leave_out_startup: Some(aggregate_config.leave_out_startup),
        expected_gpu_devices: Vec::new(),
        cpus_usable: meta.cpus_usable,
        processes_apart: aggregate_config.processes_apart,
        threads_apart: aggregate_config.threads_apart,
    };
    let metrics = MetricsEndpoint::start(
        config.metrics_addr.as_deref(),
        DEFAULT_HANG_AFTER_SECS,
        config.gpu.idle_below,
    )?;
    let recorder = Recorder::create(
        aggregate_config,
        start,
        out_dir,
        &log_header,
        config.log_limits,
        metrics.as_ref().map(|m| m.state.clone()),
    )?;
    Ok((recorder, metrics))
}

/// Hands every batch to the recorder and writes a checkpoint every `--flush-interval` and on
/// SIGUSR1, until a stop signal or the sampler's end.
fn sample_until_stopped(
    session: &mut Session,
    recorder: &mut Recorder,
    metrics: Option<&MetricsEndpoint>,
    meta: &MetaSource,
    config: &RecordingConfig,
    out_dir: &Path,
) {
    let mut next_checkpoint = Instant::now() + config.flush_interval;
    let mut reported_stop = false;
    // A signal that came before the session started (during a slow attach) counts too.
    let mut stopping = session.signals().stop_requested();
    while !stopping {
        let checkpoint = match session.wait(Some(next_checkpoint)) {
            Wake::Batch(batch) => {
                recorder.handle(batch);
                // The sampler's counters move with its batches: look at them now.
                let stats = session.sampler_stats();
                if let Some(m) = metrics {
                    let dropped = stats.dropped.load(Ordering::Relaxed);
                    crate::metrics::lock(&m.state).set_dropped(dropped);
                }
                let stopped = stats.stopped_now.load(Ordering::Relaxed);
                if stopped != reported_stop {
                    reported_stop = stopped;
                    say_stopped(meta.pid, stopped);
                }
                None
            }
            Wake::Signal(Request::Stop) | Wake::SamplerEnded => {
                stopping = true;
                None
            }
            Wake::Signal(Request::Checkpoint) => Some(true),
            Wake::Deadline => Some(false),
            Wake::Extra(()) => None,
        };
        if let Some(asked) = checkpoint {
            write_checkpoint(session, recorder, meta, config, out_dir, asked);
            next_checkpoint = Instant::now() + config.flush_interval;
        }
    }
}

/// Writes the output directory as it stands; says so when SIGUSR1 `asked` for it.
fn write_checkpoint(
    session: &Session,
    recorder: &mut Recorder,
    meta: &MetaSource,
    config: &RecordingConfig,
    out_dir: &Path,
    asked: bool,
) {
    // A SIGUSR1 answered here needs no second checkpoint from the flag it also set.
    session.signals().take_checkpoint_request();
    let gpu = session
        .gpu_snapshot()
        .unwrap_or_else(|| GpuReport::unavailable(""));
    let snapshot = meta.live(session.sampler_stats(), &gpu, &session.memory_snapshot());
    match recorder.checkpoint(&snapshot) {
        Ok(_) if asked => eprintln!("stackscope: checkpoint written to {}", out_dir.display()),
        Ok(_) => {}
        Err(e) => eprintln!("stackscope: checkpoint failed: {e:#}"),
    }
    if let Err(e) = crate::export::write_formats(out_dir, &config.formats) {
        eprintln!("stackscope: checkpoint exports failed: {e:#}");
    }
}

/// What ended the recording. A signal counts first: Ctrl-C that also reached the command ends
/// it "by itself".
fn ended_by(stop_signal: Option<i32>, stop: &StopReason) -> EndedBy {
    match (stop_signal, stop) {
        (Some(signal), _) => EndedBy::Signal(signal),
        (None, StopReason::DurationElapsed) => EndedBy::Duration,
        _ => EndedBy::Target,
    }
}

/// How `record`'s command ended, and whether stackscope stopped it.
#[derive(Debug, Clone, Copy, Default)]
struct CommandEnd {
    exit: Option<CommandExit>,
    stopped: Option<Stopped>,
}

/// `record`'s command: waits for it when the sampler saw it go, else stops it as `by` ended
/// the recording; says how it ended, as summary.json will.
fn end_command(
    child: Option<&mut LaunchedChild>,
    target_exited: bool,
    by: EndedBy,
    pid: u32,
) -> CommandEnd {
    let Some(child) = child else {
        if target_exited {
            eprintln!("stackscope: process {pid} exited");
        }
        return CommandEnd::default();
    };
    let exit = if target_exited {
        child.wait_for_exit(CHILD_EXIT_GRACE)
    } else {
        child.end(by)
    };
    let stopped = child.stopped();
    // The console and summary.json say the same: whether the target ended, and how.
    let after = stopped
        .map(|s| {
            format!(
                " after stackscope stopped it {}",
                crate::ending::reason(s.by)
            )
        })
        .unwrap_or_default();
    match exit {
        Some(CommandExit::Code(code)) => {
            eprintln!("stackscope: process {pid} exited with status {code}{after}")
        }
        Some(exit @ CommandExit::Signal(_)) => {
            eprintln!("stackscope: process {pid} ended by {exit}{after}")
        }
        None if target_exited => eprintln!("stackscope: process {pid} exited"),
        None => {}
    }
    CommandEnd { exit, stopped }
}

/// Writes the finished output directory and the exports, and prints the summary.
fn write_recording(
    recorder: Recorder,
    final_meta: &RecordingMeta,
    exit_status: Option<CommandExit>,
    config: &RecordingConfig,
    out_dir: &Path,
) -> anyhow::Result<()> {
    // The command has ended: a failure from here on is stackscope's, and says how it ended.
    let ended_with = |e: anyhow::Error| match exit_status {
        Some(exit) => e.context(format!(
            "the command ended with {exit}, but its recording was not fully written"
        )),
        None => e,
    };
    let (written, samples_log) = recorder.finish(final_meta).map_err(ended_with)?;
    crate::export::write_formats(out_dir, &config.formats).map_err(ended_with)?;
    match print_summary(&written.summary, samples_log.as_ref(), out_dir) {
        // Everything is written; the summary's reader went away, which fails nothing.
        Err(e) if crate::exit::is_closed_pipe(&e) => Ok(()),
        printed => printed,
    }
}

/// The summary on standard output, and under --log-max-size/--log-max-age what the sample log
/// kept.
fn print_summary(
    summary: &stackscope_aggregate::Summary,
    samples_log: Option<&SamplesLogSummary>,
    out_dir: &Path,
) -> anyhow::Result<()> {
    use std::io::Write;
    let mut stdout = std::io::stdout().lock();
    stackscope_report::write_text_summary(summary, out_dir, &mut stdout)
        .context("cannot print the summary")?;
    if let Some(line) = samples_log.and_then(|log| log.line()) {
        writeln!(stdout, "{line}").context("cannot print the summary")?;
    }
    Ok(())
}

fn say_stopped(pid: u32, stopped: bool) {
    if stopped {
        eprintln!(
            "stackscope: process {pid} is stopped (SIGSTOP or a debugger); not sampling it, \
             and leaving it stopped"
        );
    } else {
        eprintln!("stackscope: process {pid} runs again; sampling resumed");
    }
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
    /// CPUs the target may use, read when it was attached.
    cpus_usable: Option<f64>,
}

impl MetaSource {
    /// What is known before sampling starts.
    fn new(target: &Root, rate_hz: f64) -> MetaSource {
        MetaSource {
            pid: target.pid(),
            rank: stackscope_event::RankInfo::of_process(target.pid()),
            host: stackscope_event::host_name(),
            command_line: target.command_line().to_owned(),
            python_version: target.python_version().unwrap_or_default().to_owned(),
            // Until the sampler has read: the root's reader (a root that is not Python has none).
            reader: match target {
                Root::Python(t) => t.reader().to_owned(),
                Root::Other(_) => String::new(),
            },
            started_at: chrono::Local::now().to_rfc3339(),
            started: Instant::now(),
            sampled: None,
            rate_hz,
            cpus_usable: stackscope_sampler::procfs::cpus::cpus_usable(target.pid()),
        }
    }

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
            cpus_usable: self.cpus_usable,
        }
    }

    /// The recording so far, while it runs.
    fn live(&self, stats: &SamplerStats, gpu: &GpuReport, memory: &MemoryReport) -> RecordingMeta {
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
            dropped: stats.dropped.load(Ordering::Relaxed) + gpu.dropped + memory.dropped,
            late_ticks: stats.late_ticks.load(Ordering::Relaxed),
            max_lateness_ms: stats.max_lateness_ns.load(Ordering::Relaxed) as f64 / 1e6,
            gpu_devices: gpu.devices.clone(),
            gpu_unavailable: gpu.unavailable.clone(),
            notices: sampler_notices(ticks, skipped, stopped, None)
                .into_iter()
                .chain(stackscope_sampler::cap_notice(
                    stats.caps_reached.load(Ordering::Relaxed),
                    stats.cap_evictions.load(Ordering::Relaxed),
                ))
                .chain(gpu.notices.iter().cloned())
                .chain(memory.notices.iter().cloned())
                .collect(),
            ..self.base()
        }
    }

    /// Whether any Python was read: the target is Python, or the sampler read a process
    /// below it.
    fn read_python(&self, report: &SamplerReport) -> bool {
        !self.reader.is_empty() || !report.reader.is_empty()
    }

    fn finished(
        &mut self,
        report: &SamplerReport,
        gpu: GpuReport,
        memory: MemoryReport,
        target_exited: bool,
        command: CommandEnd,
    ) -> RecordingMeta {
        let exit_status = command.exit;
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
        notices.extend(ending_notice(command));
        if !self.read_python(report) {
            notices.push(
                "no Python process ran in the target's tree while it was recorded: no stack \
                 was sampled"
                    .to_owned(),
            );
        }
        notices.extend(stackscope_sampler::cap_notice(
            report.caps_reached,
            report.cap_evictions,
        ));
        notices.extend(gpu.notices);
        notices.extend(memory.notices);
        RecordingMeta {
            reader: if report.reader.is_empty() {
                self.reader.clone()
            } else {
                report.reader.clone()
            },
            ticks: report.ticks,
            dropped: report.dropped + gpu.dropped + memory.dropped,
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

/// How the command ended, where the summary's header alone would not say it: stopped by
/// stackscope (and how it then ended), or ended by a signal of its own.
fn ending_notice(command: CommandEnd) -> Option<String> {
    match (command.stopped, command.exit) {
        (Some(stopped), Some(exit)) => {
            Some(format!("{}; it ended with {exit}", stopped.describe()))
        }
        (Some(stopped), None) => Some(stopped.describe()),
        (None, Some(exit @ CommandExit::Signal(_))) => {
            Some(format!("the command ended by a signal ({exit})"))
        }
        (None, _) => None,
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
