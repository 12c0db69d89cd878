//! The sampling thread: reads the target at a fixed rate and streams events, never blocking.

use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::Arc;
use std::thread::JoinHandle;
use std::time::{Duration, Instant};

use crossbeam_channel::{Sender, TrySendError};
use stackscope_event::{Event, SampleError, StackSample, Timestamp};

use crate::error::SampleFailure;
use crate::procfs;
use crate::root::Root;
use crate::target::{PythonTarget, TargetOptions};
use crate::timer::SampleTimer;
use crate::tree::ProcessSet;

#[derive(Debug, Clone)]
pub struct SamplerConfig {
    pub rate_hz: f64,
    /// Stop by itself after this long.
    pub duration: Option<Duration>,
    /// Also sample the target's child processes as they come and go.
    pub follow_children: bool,
    /// How to read children found later (the root is already attached).
    pub options: TargetOptions,
}

/// Counters the sampler keeps while it runs; readable live from other threads.
#[derive(Debug, Default)]
pub struct SamplerStats {
    /// Sampling attempts.
    pub ticks: AtomicU64,
    /// Ticks that fired more than a tenth of a period late.
    pub late_ticks: AtomicU64,
    /// Ticks skipped because a sample overran whole periods.
    pub skipped_ticks: AtomicU64,
    pub max_lateness_ns: AtomicU64,
    /// Stacks handed to the channel.
    pub stacks_sent: AtomicU64,
    /// Events the channel refused because it was full.
    pub dropped: AtomicU64,
    /// Sampling attempts that failed.
    pub errors: AtomicU64,
    /// Ticks at which the target was found stopped by someone else (SIGSTOP, a debugger) and
    /// was left alone.
    pub stopped_ticks: AtomicU64,
    /// Whether the target is stopped by someone else right now.
    pub stopped_now: AtomicBool,
    /// Processes followed right now (1 without `--subprocesses`).
    pub processes: AtomicU64,
    /// Successful reads by stackscope's own stack reader.
    pub own_reader_reads: AtomicU64,
    /// Successful reads by py-spy's (the fallback).
    pub pyspy_reader_reads: AtomicU64,
}

impl SamplerStats {
    /// Which reader read the samples: `stackscope`, `py-spy`, or both, most reads first.
    pub fn reader(&self) -> String {
        reader_name(
            self.own_reader_reads.load(Ordering::Relaxed),
            self.pyspy_reader_reads.load(Ordering::Relaxed),
        )
    }
}

/// `stackscope`, `py-spy`, or both (most reads first); empty before any read.
pub fn reader_name(own: u64, pyspy: u64) -> String {
    match (own, pyspy) {
        (0, 0) => String::new(),
        (_, 0) => "stackscope".to_owned(),
        (0, _) => "py-spy".to_owned(),
        (a, b) if a >= b => "stackscope, py-spy".to_owned(),
        _ => "py-spy, stackscope".to_owned(),
    }
}

impl SamplerStats {
    fn note_lateness(&self, lateness: Duration, period: Duration) {
        if lateness > period / 10 {
            self.late_ticks.fetch_add(1, Ordering::Relaxed);
        }
        let ns = u64::try_from(lateness.as_nanos()).unwrap_or(u64::MAX);
        self.max_lateness_ns.fetch_max(ns, Ordering::Relaxed);
    }
}

/// Why the sampler stopped.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum StopReason {
    /// Someone set the stop flag (Ctrl-C, SIGTERM, the end of `record`).
    Requested,
    DurationElapsed,
    TargetExited,
    /// Sampling could not go on (permission lost); the message says why.
    Fatal(String),
}

#[derive(Debug, Clone)]
pub struct SamplerReport {
    pub stop: StopReason,
    pub ticks: u64,
    pub late_ticks: u64,
    pub skipped_ticks: u64,
    pub max_lateness: Duration,
    pub stacks_sent: u64,
    pub dropped: u64,
    pub errors: u64,
    pub stopped_ticks: u64,
    /// Which reader read the samples ([`SamplerStats::reader`]).
    pub reader: String,
}

/// A running sampling thread.
pub struct Sampler {
    handle: JoinHandle<StopReason>,
    stats: Arc<SamplerStats>,
}

impl Sampler {
    /// Starts sampling `target` on a new thread. It stops when `stop` is set, the duration has
    /// passed, or the target exits; the channel's sender is dropped when it ends.
    pub fn spawn(
        root: impl Into<Root>,
        config: SamplerConfig,
        sender: Sender<Event>,
        stop: Arc<AtomicBool>,
    ) -> std::io::Result<Sampler> {
        let stats = Arc::new(SamplerStats::default());
        let thread_stats = stats.clone();
        let set =
            ProcessSet::from_root(root.into(), config.follow_children, config.options.clone());
        let handle = std::thread::Builder::new()
            .name("stackscope-sampler".into())
            .spawn(move || run(set, &config, &sender, &stop, &thread_stats))?;
        Ok(Sampler { handle, stats })
    }

    pub fn stats(&self) -> &Arc<SamplerStats> {
        &self.stats
    }

    /// Whether the thread has ended by itself (the target exited, the duration passed).
    pub fn is_finished(&self) -> bool {
        self.handle.is_finished()
    }

    pub fn join(self) -> SamplerReport {
        let stop = self
            .handle
            .join()
            .unwrap_or_else(|_| StopReason::Fatal("the sampling thread panicked".into()));
        let s = &self.stats;
        SamplerReport {
            stop,
            ticks: s.ticks.load(Ordering::Relaxed),
            late_ticks: s.late_ticks.load(Ordering::Relaxed),
            skipped_ticks: s.skipped_ticks.load(Ordering::Relaxed),
            max_lateness: Duration::from_nanos(s.max_lateness_ns.load(Ordering::Relaxed)),
            stacks_sent: s.stacks_sent.load(Ordering::Relaxed),
            dropped: s.dropped.load(Ordering::Relaxed),
            errors: s.errors.load(Ordering::Relaxed),
            stopped_ticks: s.stopped_ticks.load(Ordering::Relaxed),
            reader: s.reader(),
        }
    }
}

fn run(
    mut set: ProcessSet,
    config: &SamplerConfig,
    sender: &Sender<Event>,
    stop: &AtomicBool,
    stats: &SamplerStats,
) -> StopReason {
    let mut timer = SampleTimer::new(config.rate_hz);
    let deadline = config.duration.map(|d| Instant::now() + d);
    if let Some(event) = set.other_root_event(Timestamp::now()) {
        offer(sender, Event::Process(event), stats);
    }
    for target in set.targets() {
        let event = ProcessSet::attached_event(target, Timestamp::now());
        offer(sender, Event::Process(event), stats);
    }
    loop {
        if stop.load(Ordering::Relaxed) {
            return StopReason::Requested;
        }
        let Some(tick) = timer.wait(deadline) else {
            return StopReason::DurationElapsed;
        };
        stats.note_lateness(tick.lateness, timer.period());
        stats
            .skipped_ticks
            .fetch_add(tick.skipped, Ordering::Relaxed);
        stats.ticks.fetch_add(1, Ordering::Relaxed);
        let time = Timestamp::now();
        for event in set.rescan(time) {
            offer(sender, Event::Process(event), stats);
        }
        let mut gone = Vec::new();
        let mut any_stopped = false;
        for target in set.targets_mut() {
            match sample_one(target, time, sender, stats) {
                Outcome::Read => {}
                Outcome::Stopped => any_stopped = true,
                Outcome::Gone => gone.push(target.pid()),
                Outcome::Fatal(why) => return StopReason::Fatal(why),
            }
        }
        stats.stopped_now.store(any_stopped, Ordering::Relaxed);
        if any_stopped {
            stats.stopped_ticks.fetch_add(1, Ordering::Relaxed);
        }
        for pid in gone {
            if let Some(event) = set.remove(pid, time) {
                offer(sender, Event::Process(event), stats);
            }
        }
        stats
            .processes
            .store(set.targets().len() as u64, Ordering::Relaxed);
        if !set.has_root() {
            return StopReason::TargetExited;
        }
    }
}

enum Outcome {
    Read,
    /// Stopped by someone else: left alone, not resumed by us.
    Stopped,
    Gone,
    Fatal(String),
}

/// Reads one process once and sends what it found.
fn sample_one(
    target: &mut PythonTarget,
    time: Timestamp,
    sender: &Sender<Event>,
    stats: &SamplerStats,
) -> Outcome {
    let pid = target.pid();
    // A process stopped by SIGSTOP or held by a debugger belongs to whoever stopped it:
    // reading it would mean attaching and, on detach, possibly resuming it.
    if procfs::is_stopped(pid) {
        return Outcome::Stopped;
    }
    let own = target.reader() == "stackscope";
    match target.read_stacks() {
        Ok(stacks) => {
            let reads = if own {
                &stats.own_reader_reads
            } else {
                &stats.pyspy_reader_reads
            };
            reads.fetch_add(1, Ordering::Relaxed);
            for stack in stacks {
                let event = Event::Stack(StackSample {
                    time,
                    pid,
                    thread: stack.thread,
                    frames: stack.frames,
                });
                if offer(sender, event, stats) {
                    stats.stacks_sent.fetch_add(1, Ordering::Relaxed);
                }
            }
            Outcome::Read
        }
        Err(SampleFailure::ProcessGone(_)) => Outcome::Gone,
        Err(e @ SampleFailure::PermissionLost(_)) => {
            // A process in the middle of exiting has already dropped its memory and answers
            // reads with EPERM before it turns into a zombie: give it a moment to finish.
            std::thread::sleep(Duration::from_millis(50));
            if procfs::is_alive(pid) {
                Outcome::Fatal(e.to_string())
            } else {
                Outcome::Gone
            }
        }
        Err(SampleFailure::Transient { kind, message }) => {
            stats.errors.fetch_add(1, Ordering::Relaxed);
            if target.needs_reattach() {
                return reattach(target);
            }
            let event = Event::SampleError(SampleError {
                time,
                pid,
                kind,
                message,
            });
            offer(sender, event, stats);
            Outcome::Read
        }
    }
}

/// After an exec every address we hold is stale: find the new program's interpreter, or give
/// the process up if it is no longer Python.
fn reattach(target: &mut PythonTarget) -> Outcome {
    match PythonTarget::attach(target.pid(), &target.options()) {
        Ok(fresh) => {
            *target = fresh;
            Outcome::Read
        }
        Err(_) => Outcome::Gone,
    }
}

/// Hands an event over without waiting; a full channel costs the event, which is counted.
fn offer(sender: &Sender<Event>, event: Event, stats: &SamplerStats) -> bool {
    match sender.try_send(event) {
        Ok(()) => true,
        Err(TrySendError::Full(_)) => {
            stats.dropped.fetch_add(1, Ordering::Relaxed);
            false
        }
        // The aggregator is gone: the recording is ending, nothing to count.
        Err(TrySendError::Disconnected(_)) => false,
    }
}
