//! The sampling thread: reads the target at a fixed rate and streams events, never blocking.

use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::Arc;
use std::thread::JoinHandle;
use std::time::{Duration, Instant};

use crossbeam_channel::{Receiver, Sender};
use stackscope_event::{Batch, Event, ProcessEvent, SampleError, StackSample, Timestamp};

use crate::batch::{Batcher, Flushed};
use crate::caps::CapHits;
use crate::cputime::{Phase, TickCosts};
use crate::ends::EndWatch;
use crate::error::SampleFailure;
use crate::fast::PidMap;
use crate::procfs;
use crate::root::Root;
use crate::target::{PythonTarget, TargetOptions};
use crate::timer::SampleTimer;
use crate::tree::ProcessSet;
use crate::tuning::ShortSlices;

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
    /// Times one of the caches of the targets' code (names, files, code objects) reached its
    /// cap and was emptied ([`crate::cap_notice`] says it), and the entries it let go then.
    pub caps_reached: AtomicU64,
    pub cap_evictions: AtomicU64,
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
    /// Adds a target's caps reached since it was last asked.
    fn note_caps(&self, caps: CapHits) {
        if caps.reached > 0 {
            self.caps_reached.fetch_add(caps.reached, Ordering::Relaxed);
            self.cap_evictions
                .fetch_add(caps.evicted, Ordering::Relaxed);
        }
    }

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
    /// [`SamplerStats::caps_reached`] and [`SamplerStats::cap_evictions`] at the end.
    pub caps_reached: u64,
    pub cap_evictions: u64,
}

/// A running sampling thread.
pub struct Sampler {
    handle: JoinHandle<StopReason>,
    stats: Arc<SamplerStats>,
    /// Disconnected when the thread ends: a consumer can `select!` on it.
    done: Receiver<()>,
}

impl Sampler {
    /// Starts sampling `target` on a new thread. It stops when `stop` is set, the duration has
    /// passed, or the target exits; it sends what it read in batches ([`crate::batch`]), the
    /// last one as it ends, and the channel's sender is dropped when it ends.
    pub fn spawn(
        root: impl Into<Root>,
        config: SamplerConfig,
        sender: Sender<Batch>,
        stop: Arc<AtomicBool>,
    ) -> std::io::Result<Sampler> {
        let stats = Arc::new(SamplerStats::default());
        let thread_stats = stats.clone();
        let set =
            ProcessSet::from_root(root.into(), config.follow_children, config.options.clone());
        let (done_sender, done) = crossbeam_channel::bounded::<()>(0);
        let handle = std::thread::Builder::new()
            .name("stackscope-sampler".into())
            .spawn(move || {
                let slices = config.options.tuning.short_slices;
                if slices == ShortSlices::Always {
                    crate::slice::ask_for_short_slices();
                }
                let adaptive = slices == ShortSlices::WhenLosingTicks;
                let mut out = Output {
                    batcher: Batcher::new(sender),
                    stats: &thread_stats,
                };
                let stop = run(set, &config, &mut out, &stop, adaptive);
                out.flush();
                drop(done_sender);
                stop
            })?;
        Ok(Sampler {
            handle,
            stats,
            done,
        })
    }

    /// A channel that never carries anything and is disconnected once the thread has ended:
    /// `recv` on it (in a `select!`) returns an error then.
    pub fn done(&self) -> &Receiver<()> {
        &self.done
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
            caps_reached: s.caps_reached.load(Ordering::Relaxed),
            cap_evictions: s.cap_evictions.load(Ordering::Relaxed),
        }
    }
}

/// Where the sampler's events go: the batch in progress, and the counts of what became of
/// them.
struct Output<'a> {
    batcher: Batcher,
    stats: &'a SamplerStats,
}

impl Output<'_> {
    fn offer(&mut self, event: Event) {
        self.batcher.push(event);
    }

    fn end_sample(&mut self) {
        let flushed = self.batcher.end_sample();
        self.count(flushed);
    }

    fn flush_before(&mut self, next: Instant) {
        let flushed = self.batcher.flush_before(next);
        self.count(flushed);
    }

    fn flush(&mut self) {
        let flushed = self.batcher.flush();
        self.count(flushed);
    }

    fn count(&self, flushed: Flushed) {
        match flushed {
            Flushed::Sent { stacks } => {
                self.stats.stacks_sent.fetch_add(stacks, Ordering::Relaxed);
            }
            Flushed::Dropped { events } => {
                self.stats.dropped.fetch_add(events, Ordering::Relaxed);
            }
            // The aggregator is gone: the recording is ending, nothing to count.
            Flushed::Empty | Flushed::Disconnected => {}
        }
    }
}

/// Announces processes attached to, and has `ends` follow them.
fn offer_attached(
    events: Vec<ProcessEvent>,
    mut ends: Option<&mut EndWatch>,
    out: &mut Output<'_>,
) {
    for event in events {
        if let Some(ends) = ends.as_deref_mut() {
            ends.follow(event.pid);
        }
        out.offer(Event::Process(event));
    }
}

/// How often the sampler takes in the processes the finder attached to: a process found
/// starts being sampled at most this much later, and the ticks between do not each look at a
/// channel another thread wrote to (a few cache misses after each sleep).
const RESCAN_EVERY: Duration = Duration::from_millis(50);

fn run(
    mut set: ProcessSet,
    config: &SamplerConfig,
    out: &mut Output<'_>,
    stop: &AtomicBool,
    adaptive: bool,
) -> StopReason {
    let stats = out.stats;
    let mut slices = adaptive.then(crate::slice::Adaptive::default);
    let mut timer = SampleTimer::new(config.rate_hz);
    let deadline = config.duration.map(|d| Instant::now() + d);
    if let Some(event) = set.other_root_event(Timestamp::now()) {
        out.offer(Event::Process(event));
    }
    // How the processes of a followed tree end (the kernel's exit events, zombies, OOM
    // kills), told with each exit event.
    let mut ends = config.follow_children.then(EndWatch::open);
    let attached: Vec<ProcessEvent> = set
        .targets()
        .iter()
        .map(|target| ProcessSet::attached_event(target, Timestamp::now()))
        .collect();
    offer_attached(attached, ends.as_mut(), out);
    // Each target's stat file, kept open: asked every sample whether someone stopped it.
    let mut stop_checks: PidMap<procfs::StopCheck> = PidMap::default();
    let mut costs = TickCosts::new(config.options.tuning.stats);
    let mut rescan_due = Instant::now();
    loop {
        if stop.load(Ordering::Relaxed) {
            return StopReason::Requested;
        }
        // What waits goes out before a sleep that would make it older than a batch may get.
        out.flush_before(timer.next_tick());
        costs.mark(Phase::Other);
        let tick = timer.wait(deadline);
        costs.mark(Phase::Wait);
        let Some(tick) = tick else {
            return StopReason::DurationElapsed;
        };
        stats.note_lateness(tick.lateness, timer.period());
        if let Some(slices) = &mut slices {
            slices.tick(&tick, timer.period());
        }
        stats
            .skipped_ticks
            .fetch_add(tick.skipped, Ordering::Relaxed);
        stats.ticks.fetch_add(1, Ordering::Relaxed);
        let time = Timestamp::now();
        if let Some(ends) = ends.as_mut() {
            ends.poll_if_due();
        }
        let now = Instant::now();
        if now >= rescan_due {
            rescan_due = now + RESCAN_EVERY;
            offer_attached(set.rescan(time), ends.as_mut(), out);
        }
        let (gone, any_stopped) = match sample_all(&mut set, &mut stop_checks, time, out) {
            Ok(read) => read,
            Err(why) => return StopReason::Fatal(why),
        };
        costs.mark(Phase::Read);
        let was_stopped = stats.stopped_now.swap(any_stopped, Ordering::Relaxed);
        if any_stopped {
            stats.stopped_ticks.fetch_add(1, Ordering::Relaxed);
        }
        remove_gone(&mut set, &mut stop_checks, gone, ends.as_mut(), time, out);
        stats
            .processes
            .store(set.targets().len() as u64, Ordering::Relaxed);
        if !set.has_root() {
            return StopReason::TargetExited;
        }
        out.end_sample();
        if was_stopped != any_stopped {
            // The consumer learns of the change with the batch: hand it over now, even empty.
            let flushed = out.batcher.flush_even_empty();
            out.count(flushed);
        }
    }
}

/// One sample of every target: the pids of those gone, and whether any was stopped by
/// someone else; `Err` with why when sampling cannot go on.
fn sample_all(
    set: &mut ProcessSet,
    stop_checks: &mut PidMap<procfs::StopCheck>,
    time: Timestamp,
    out: &mut Output<'_>,
) -> Result<(Vec<u32>, bool), String> {
    let mut gone = Vec::new();
    let mut any_stopped = false;
    for target in set.targets_mut() {
        let check = stop_checks
            .entry(target.pid())
            .or_insert_with(|| procfs::StopCheck::new(target.pid()));
        let outcome = sample_one(target, check, time, out);
        out.stats.note_caps(target.take_caps());
        match outcome {
            Outcome::Read => {}
            Outcome::Stopped => any_stopped = true,
            Outcome::Gone => gone.push(target.pid()),
            Outcome::Fatal(why) => return Err(why),
        }
    }
    Ok((gone, any_stopped))
}

/// Lets the processes gone go, each told with how it ended.
fn remove_gone(
    set: &mut ProcessSet,
    stop_checks: &mut PidMap<procfs::StopCheck>,
    gone: Vec<u32>,
    mut ends: Option<&mut EndWatch>,
    time: Timestamp,
    out: &mut Output<'_>,
) {
    if let Some(ends) = ends.as_deref_mut().filter(|_| !gone.is_empty()) {
        // What the kernel said of them since the last poll.
        ends.poll();
    }
    for pid in gone {
        stop_checks.remove(&pid);
        if let Some(mut event) = set.remove(pid, time) {
            event.how = ends.as_deref_mut().map(|ends| ends.how_ended(pid));
            out.offer(Event::Process(event));
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
    stop_check: &mut procfs::StopCheck,
    time: Timestamp,
    out: &mut Output<'_>,
) -> Outcome {
    let pid = target.pid();
    let stats = out.stats;
    // A process stopped by SIGSTOP or held by a debugger belongs to whoever stopped it:
    // py-spy's reader would attach and, on detach, possibly resume it. Ours stops nothing
    // that is stopped already, so it reads first: a read that saw a thread running or asleep
    // shows the process was not stopped, without another `/proc` read (each costs as much
    // as a tenth of a sample).
    let own = target.reader() == "stackscope";
    if !own && stop_check.is_stopped() {
        return Outcome::Stopped;
    }
    let read = target.read_stacks();
    if own && !(read.is_ok() && target.seen_running()) && stop_check.is_stopped() {
        return Outcome::Stopped;
    }
    match read {
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
                out.offer(event);
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
                return reattach(target, stats);
            }
            let event = Event::SampleError(SampleError {
                time,
                pid,
                kind,
                message,
            });
            out.offer(event);
            Outcome::Read
        }
    }
}

/// After an exec every address we hold is stale: find the new program's interpreter, or give
/// the process up if it is no longer Python.
fn reattach(target: &mut PythonTarget, stats: &SamplerStats) -> Outcome {
    // The caches go with the old program: what they counted is said first.
    stats.note_caps(target.take_caps());
    match PythonTarget::attach(target.pid(), &target.options()) {
        Ok(fresh) => {
            *target = fresh;
            Outcome::Read
        }
        Err(_) => Outcome::Gone,
    }
}
