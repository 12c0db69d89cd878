//! One recording, for `attach` and `record`: starts the producers and the aggregator, waits for
//! the end (duration, Ctrl-C, SIGTERM, the target's exit), and writes the output directory.

use std::path::{Path, PathBuf};
use std::process::{Child, ExitStatus};
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;
use std::thread::JoinHandle;
use std::time::{Duration, Instant};

use anyhow::{bail, Context};
use crossbeam_channel::{bounded, Receiver};
use stackscope_aggregate::{AggregateConfig, Aggregator, RecordingMeta};
use stackscope_event::{Event, Timestamp};
use stackscope_sampler::{
    PythonTarget, Sampler, SamplerConfig, SamplerReport, StopReason, TargetOptions,
};

use crate::config::{ensure_writable_dir, RecordingConfig, Target};
use crate::gpu::GpuHandle;

/// Room for a few seconds of samples at the highest rate: enough to ride out a slow write of
/// the aggregator without the producers ever waiting.
const CHANNEL_CAPACITY: usize = 1 << 16;

/// How long `record` waits for a freshly started interpreter to become readable.
const STARTUP_TIMEOUT: Duration = Duration::from_secs(10);

pub fn run(config: RecordingConfig) -> anyhow::Result<()> {
    let signals = Signals::install()?;
    let options = TargetOptions {
        blocking: config.blocking,
        locals: false,
    };
    let (target, child, out_dir) = match &config.target {
        Target::Pid(pid) => {
            let target = PythonTarget::attach(*pid, &options)?;
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
            let target = match PythonTarget::attach_when_ready(
                child.pid(),
                &options,
                STARTUP_TIMEOUT,
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
    eprintln!(
        "stackscope: sampling process {pid} (Python {}) at {} Hz; Ctrl-C to stop",
        target.python_version(),
        config.rate_hz
    );
    record(config, target, child, signals, out_dir)
}

fn record(
    config: RecordingConfig,
    target: PythonTarget,
    mut child: Option<LaunchedChild>,
    signals: Signals,
    out_dir: PathBuf,
) -> anyhow::Result<()> {
    let pid = target.pid();
    let python_version = target.python_version().to_owned();
    let command_line = target.command_line().to_owned();
    let start = Timestamp::now();
    let started_at = chrono::Local::now().to_rfc3339();
    let started = Instant::now();

    let (sender, receiver) = bounded(CHANNEL_CAPACITY);
    let producers_stop = Arc::new(AtomicBool::new(false));
    let gpu = GpuHandle::start(&config.gpu, pid, sender.clone(), producers_stop.clone());
    let aggregate_config = AggregateConfig {
        include_idle: config.include_idle,
        idle_below: config.idle_below,
        gpu_enabled: gpu.is_enabled(),
    };
    let aggregator = spawn_aggregator(aggregate_config, start, receiver)?;
    let sampler = Sampler::spawn(
        target,
        SamplerConfig {
            rate_hz: config.rate_hz,
            duration: config.duration,
        },
        sender,
        producers_stop.clone(),
    )
    .context("cannot start the sampling thread")?;

    while !signals.stop_requested() && !sampler.is_finished() {
        std::thread::sleep(Duration::from_millis(20));
    }
    producers_stop.store(true, Ordering::Relaxed);
    let report = sampler.join();
    let gpu_report = gpu.join();
    let duration_secs = started.elapsed().as_secs_f64();
    let exit_status = child.as_mut().and_then(|c| c.end()).and_then(|s| s.code());
    let aggregator = aggregator
        .join()
        .map_err(|_| anyhow::anyhow!("the aggregator thread panicked"))?;

    if let StopReason::Fatal(why) = &report.stop {
        eprintln!("stackscope: sampling stopped early: {why}");
    }
    let target_exited = report.stop == StopReason::TargetExited;
    if target_exited {
        match exit_status {
            Some(code) => eprintln!("stackscope: process {pid} exited with status {code}"),
            None => eprintln!("stackscope: process {pid} exited"),
        }
    }
    let meta = RecordingMeta {
        pid,
        command_line,
        python_version,
        started_at,
        duration_secs,
        rate_hz: config.rate_hz,
        ticks: report.ticks,
        dropped: report.dropped + gpu_report.dropped,
        late_ticks: report.late_ticks,
        max_lateness_ms: report.max_lateness.as_secs_f64() * 1e3,
        target_exited,
        exit_status,
        gpu_devices: gpu_report.devices,
        gpu_unavailable: gpu_report.unavailable,
        notices: notices(&report, gpu_report.notices),
    };
    let written = stackscope_report::write_outputs(&out_dir, &aggregator, &meta)
        .with_context(|| format!("cannot write the recording to {}", out_dir.display()))?;
    let mut stdout = std::io::stdout().lock();
    stackscope_report::write_text_summary(&written.summary, &out_dir, &mut stdout)
        .context("cannot print the summary")?;
    Ok(())
}

fn notices(report: &SamplerReport, gpu: Vec<String>) -> Vec<String> {
    let mut out = Vec::new();
    if report.skipped_ticks > 0 {
        out.push(format!(
            "the sampler fell behind and skipped {} ticks: the rate is too high for this target",
            report.skipped_ticks
        ));
    }
    if let StopReason::Fatal(why) = &report.stop {
        out.push(format!("sampling stopped early: {why}"));
    }
    out.extend(gpu);
    out
}

fn spawn_aggregator(
    config: AggregateConfig,
    start: Timestamp,
    receiver: Receiver<Event>,
) -> anyhow::Result<JoinHandle<Aggregator>> {
    std::thread::Builder::new()
        .name("stackscope-aggregate".into())
        .spawn(move || {
            let mut aggregator = Aggregator::new(config, start);
            // Ends when every producer has dropped its sender.
            for event in receiver {
                aggregator.handle(event);
            }
            aggregator.finish();
            aggregator
        })
        .context("cannot start the aggregator thread")
}

/// Ctrl-C and SIGTERM end the recording cleanly; a second Ctrl-C ends stackscope at once.
struct Signals {
    stop: Arc<AtomicBool>,
}

impl Signals {
    fn install() -> anyhow::Result<Signals> {
        use signal_hook::consts::{SIGINT, SIGTERM};
        use signal_hook::flag;
        let stop = Arc::new(AtomicBool::new(false));
        for signal in [SIGINT, SIGTERM] {
            // Registered first, so it sees the flag before this signal sets it.
            flag::register_conditional_shutdown(signal, 130, stop.clone())
                .context("cannot install signal handlers")?;
            flag::register(signal, stop.clone()).context("cannot install signal handlers")?;
        }
        Ok(Signals { stop })
    }

    fn stop_requested(&self) -> bool {
        self.stop.load(Ordering::Relaxed)
    }
}

/// The process `record` started. Dropping it without `end` kills it: a recording that fails
/// must not leave its command running.
struct LaunchedChild {
    child: Child,
    status: Option<ExitStatus>,
    was_killed: bool,
}

impl LaunchedChild {
    fn spawn(command: &[String]) -> anyhow::Result<LaunchedChild> {
        let (program, args) = command
            .split_first()
            .context("record needs a command after --")?;
        let child = std::process::Command::new(program)
            .args(args)
            .spawn()
            .with_context(|| format!("cannot start {program}"))?;
        Ok(LaunchedChild {
            child,
            status: None,
            was_killed: false,
        })
    }

    fn pid(&self) -> u32 {
        self.child.id()
    }

    /// Waits for the command to end, asking it to (SIGINT, then SIGKILL) if it has not.
    fn end(&mut self) -> Option<ExitStatus> {
        if self.status.is_some() {
            return self.status;
        }
        if let Ok(Some(status)) = self.child.try_wait() {
            self.status = Some(status);
            return self.status;
        }
        let pid = nix::unistd::Pid::from_raw(self.child.id() as i32);
        let _ = nix::sys::signal::kill(pid, nix::sys::signal::Signal::SIGINT);
        let deadline = Instant::now() + Duration::from_secs(3);
        while Instant::now() < deadline {
            if let Ok(Some(status)) = self.child.try_wait() {
                self.status = Some(status);
                return self.status;
            }
            std::thread::sleep(Duration::from_millis(20));
        }
        self.was_killed = true;
        let _ = self.child.kill();
        self.status = self.child.wait().ok();
        self.status
    }
}

impl Drop for LaunchedChild {
    fn drop(&mut self) {
        self.end();
    }
}
