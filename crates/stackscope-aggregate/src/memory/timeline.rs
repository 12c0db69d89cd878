//! What the aggregate keeps of each process's memory, of each process's GPU memory and of the
//! job's memory cgroup: a thinned series per process for the chart, and beside it what the
//! summary and the verdict read exactly (first, peak and latest readings, the fit over every
//! reading, the first and latest `smaps_rollup` figures).
//!
//! Points are shared out under one budget: with few processes each keeps up to
//! [`MAX_POINTS_PER_PROCESS`], with many (DataLoader workers re-created every epoch, for days)
//! each keeps fewer, never under [`MIN_POINTS_PER_PROCESS`].
//!
//! Here are the live processes: one that ended leaves for [`super::ended`], told by its exit
//! event, or found gone here ([`Processes::gone`]) when nothing says so (a process the sampler
//! does not follow: not Python, or without `--subprocesses`).

use foldhash::{HashMap, HashSet};
use stackscope_event::{CgroupSample, MemorySample, ProcessGpuMemory, Timestamp};

use super::series::{Fit, Level, Thinned};

/// Points of one process's series while the processes are few: more than a chart's width.
pub(crate) const MAX_POINTS_PER_PROCESS: usize = 4096;
/// However many the processes, each keeps this many: enough to draw its climb.
pub(crate) const MIN_POINTS_PER_PROCESS: usize = 64;
/// Points shared out over all processes' series (some tens of MiB at most).
pub(crate) const POINTS_BUDGET: usize = 256 * 1024;
/// Points of the cgroup's series: one series, kept as long as a process's longest.
const CGROUP_POINTS: usize = MAX_POINTS_PER_PROCESS;
/// A process the poller left out of this many of its rounds of readings ...
pub(crate) const GONE_AFTER_ROUNDS: u64 = 3;
/// ... over at least this long has ended: the poller reads every process of the tree at each
/// round and stops reading one that is gone. Both, so that neither a gap in the readings (a
/// batch lost, the poller held up: no round passes) nor a low `--memory-rate` (a round every
/// few seconds) ends a live process; a second or two of unreadable files is not an end either.
pub(crate) const GONE_AFTER_NANOS: u64 = 10_000_000_000;

/// One reading of a process's memory.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) struct Reading {
    pub time: Timestamp,
    pub rss: u64,
    pub private: Option<u64>,
    pub shared: Option<u64>,
    pub swap: Option<u64>,
}

impl Reading {
    pub(crate) fn of(sample: &MemorySample) -> Reading {
        Reading {
            time: sample.time,
            rss: sample.rss_bytes,
            private: sample.private_bytes,
            shared: sample.shared_bytes,
            swap: sample.swap_bytes,
        }
    }

    /// Whether `smaps_rollup` was read with it.
    pub fn has_smaps(&self) -> bool {
        self.private.is_some() && self.shared.is_some()
    }
}

impl Level for Reading {
    fn time(&self) -> Timestamp {
        self.time
    }
    fn level(&self) -> u64 {
        self.rss
    }
    /// The higher reading stands for both; the other's `smaps_rollup` figures fill in where
    /// the higher has none, so that a thinned series still shows them.
    fn merge(self, other: Reading) -> Reading {
        let (mut high, low) = if other.rss > self.rss {
            (other, self)
        } else {
            (self, other)
        };
        if !high.has_smaps() && low.has_smaps() {
            high.private = low.private;
            high.shared = low.shared;
            high.swap = low.swap;
        }
        high
    }
}

/// One process's memory over the recording.
#[derive(Debug, Clone)]
pub(crate) struct ProcessState {
    pub series: Thinned<Reading>,
    pub first: Reading,
    pub last: Reading,
    pub peak: u64,
    /// The line through every reading of its resident memory.
    pub fit: Fit,
    /// The first and latest readings that read `smaps_rollup`.
    pub smaps_first: Option<Reading>,
    pub smaps_last: Option<Reading>,
    /// The poller's round of its latest reading ([`Processes::gone`]).
    round: u64,
}

impl ProcessState {
    fn new(reading: Reading, cap: usize) -> ProcessState {
        let mut state = ProcessState {
            series: Thinned::new(cap),
            first: reading,
            last: reading,
            peak: 0,
            fit: Fit::default(),
            smaps_first: None,
            smaps_last: None,
            round: 0,
        };
        state.add(reading);
        state
    }

    /// Takes a reading into the series and the figures (a late one of a process that ended
    /// too, [`super::ended`]).
    pub(crate) fn add(&mut self, reading: Reading) {
        self.series.push(reading);
        self.last = reading;
        self.peak = self.peak.max(reading.rss);
        self.fit.add(reading.time, reading.rss);
        if reading.has_smaps() {
            self.smaps_first.get_or_insert(reading);
            self.smaps_last = Some(reading);
        }
    }

    /// The series and the latest reading, whether or not thinning kept it.
    pub fn points(&self) -> Vec<Reading> {
        let mut points: Vec<Reading> = self.series.iter().copied().collect();
        if points.last().is_some_and(|p| p.time < self.last.time) {
            points.push(self.last);
        }
        points
    }
}

/// Every live process's memory readings.
#[derive(Debug, Clone)]
pub(crate) struct Processes {
    pub by_pid: HashMap<u32, ProcessState>,
    max: usize,
    /// Processes dropped to stay under `max`: the least recently read.
    pub dropped: u64,
    /// Series kept beside these (processes that ended, kept whole): they share the budget.
    pub others: usize,
    /// The poller's rounds so far: a round ends where a process is read again.
    round: u64,
    /// The processes read in the round in progress.
    in_round: HashSet<u32>,
}

/// What a reading changed: the reading before it, if any.
pub(crate) struct Read {
    pub previous: Option<Reading>,
    /// A process dropped to make room, whose attribution goes too.
    pub dropped: Option<u32>,
}

impl Processes {
    pub fn new(max: usize) -> Processes {
        Processes {
            by_pid: HashMap::default(),
            max: max.max(1),
            dropped: 0,
            others: 0,
            round: 0,
            in_round: HashSet::default(),
        }
    }

    /// Adds a reading; `None` when it is not later than the process's latest (the poller
    /// reads each process in time order: an equal or older reading says nothing new).
    pub fn add(&mut self, sample: &MemorySample) -> Option<Read> {
        let reading = Reading::of(sample);
        if !self.in_round.insert(sample.pid) {
            self.round += 1;
            self.in_round.clear();
            self.in_round.insert(sample.pid);
        }
        let round = self.round;
        if let Some(state) = self.by_pid.get_mut(&sample.pid) {
            if reading.time <= state.last.time {
                return None;
            }
            let previous = state.last;
            state.add(reading);
            state.round = round;
            return Some(Read {
                previous: Some(previous),
                dropped: None,
            });
        }
        let dropped = (self.by_pid.len() >= self.max)
            .then(|| self.drop_least_recent())
            .flatten();
        let cap = self.cap_with(1);
        let mut state = ProcessState::new(reading, cap);
        state.round = round;
        self.by_pid.insert(sample.pid, state);
        for state in self.by_pid.values_mut() {
            state.series.set_cap(cap);
        }
        Some(Read {
            previous: None,
            dropped,
        })
    }

    /// Each series' share of the points with `more` series besides those kept now.
    pub fn cap_with(&self, more: usize) -> usize {
        points_per_process(self.by_pid.len() + self.others + more)
    }

    /// The live processes that ended by `now` without a word: left out of the poller's last
    /// [`GONE_AFTER_ROUNDS`] rounds, for [`GONE_AFTER_NANOS`] at least.
    pub fn gone(&self, now: Timestamp) -> Vec<u32> {
        let mut gone: Vec<u32> = self
            .by_pid
            .iter()
            .filter(|(_, s)| {
                self.round >= s.round + GONE_AFTER_ROUNDS
                    && now.as_nanos() >= s.last.time.as_nanos().saturating_add(GONE_AFTER_NANOS)
            })
            .map(|(&pid, _)| pid)
            .collect();
        gone.sort_unstable();
        gone
    }

    /// Takes a process out (it ended); the others' series get its share of the points.
    pub fn remove(&mut self, pid: u32) -> Option<ProcessState> {
        let state = self.by_pid.remove(&pid)?;
        self.in_round.remove(&pid);
        Some(state)
    }

    fn drop_least_recent(&mut self) -> Option<u32> {
        let (&pid, _) = self
            .by_pid
            .iter()
            .min_by_key(|(&pid, s)| (s.last.time, pid))?;
        self.by_pid.remove(&pid);
        self.dropped += 1;
        Some(pid)
    }
}

/// Each series' share of [`POINTS_BUDGET`] among `processes`.
pub(crate) fn points_per_process(processes: usize) -> usize {
    (POINTS_BUDGET / processes.max(1)).clamp(MIN_POINTS_PER_PROCESS, MAX_POINTS_PER_PROCESS)
}

/// One process's GPU memory at one GPU reading, summed over the devices it is on.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) struct GpuPoint {
    pub time: Timestamp,
    pub bytes: u64,
}

impl Level for GpuPoint {
    fn time(&self) -> Timestamp {
        self.time
    }
    fn level(&self) -> u64 {
        self.bytes
    }
}

/// One process's GPU memory over the recording.
#[derive(Debug, Clone)]
pub(crate) struct GpuProcess {
    pub series: Thinned<GpuPoint>,
    pub last: GpuPoint,
    pub peak: u64,
    pub fit: Fit,
}

impl GpuProcess {
    fn add(&mut self, point: GpuPoint) {
        self.series.push(point);
        self.last = point;
        self.peak = self.peak.max(point.bytes);
        self.fit.add(point.time, point.bytes);
    }

    /// Its GPU memory at its latest point at or before `time`.
    pub fn at(&self, time: Timestamp) -> Option<u64> {
        if time >= self.last.time {
            return Some(self.last.bytes);
        }
        self.series.at_or_before(time).map(|p| p.bytes)
    }

    pub fn points(&self) -> Vec<GpuPoint> {
        let mut points: Vec<GpuPoint> = self.series.iter().copied().collect();
        if points.last().is_some_and(|p| p.time < self.last.time) {
            points.push(self.last);
        }
        points
    }
}

/// Every process's GPU memory, from the GPU poller's per-process lists.
#[derive(Debug, Clone)]
pub(crate) struct GpuMemory {
    pub by_pid: HashMap<u32, GpuProcess>,
    /// Each device's latest list.
    on_device: HashMap<u32, Vec<ProcessGpuMemory>>,
    max: usize,
    pub dropped: u64,
}

impl GpuMemory {
    pub fn new(max: usize) -> GpuMemory {
        GpuMemory {
            by_pid: HashMap::default(),
            on_device: HashMap::default(),
            max: max.max(1),
            dropped: 0,
        }
    }

    /// One device's list at `time`: every process on it, or that was on it before, gets a
    /// point of its memory over all devices (0 once it has left them all). A process `listed`
    /// without a figure in `memory` keeps the figure it had on the device: the driver did not
    /// say, which is not zero.
    pub fn add(
        &mut self,
        time: Timestamp,
        device: u32,
        listed: &[u32],
        memory: &[ProcessGpuMemory],
    ) {
        let before = self.on_device.remove(&device).unwrap_or_default();
        let mut list = memory.to_vec();
        for pid in listed {
            if !memory.iter().any(|p| p.pid == *pid) {
                list.extend(before.iter().filter(|p| p.pid == *pid));
            }
        }
        self.on_device.insert(device, list.clone());
        let mut pids: Vec<u32> = list.iter().chain(&before).map(|p| p.pid).collect();
        pids.sort_unstable();
        pids.dedup();
        for pid in pids {
            let bytes = self
                .on_device
                .values()
                .flatten()
                .filter(|p| p.pid == pid)
                .fold(0u64, |sum, p| sum.saturating_add(p.bytes));
            self.point(pid, GpuPoint { time, bytes });
        }
    }

    fn point(&mut self, pid: u32, point: GpuPoint) {
        if let Some(process) = self.by_pid.get_mut(&pid) {
            if point.time >= process.last.time {
                process.add(point);
            }
            return;
        }
        if self.by_pid.len() >= self.max {
            let oldest = self
                .by_pid
                .iter()
                .min_by_key(|(&pid, p)| (p.last.time, pid))
                .map(|(&pid, _)| pid);
            if let Some(oldest) = oldest {
                self.by_pid.remove(&oldest);
                self.dropped += 1;
            }
        }
        let cap = points_per_process(self.by_pid.len() + 1);
        let mut process = GpuProcess {
            series: Thinned::new(cap),
            last: point,
            peak: 0,
            fit: Fit::default(),
        };
        process.add(point);
        self.by_pid.insert(pid, process);
        for process in self.by_pid.values_mut() {
            process.series.set_cap(cap);
        }
    }

    /// Takes process `pid` out (it ended): its series, and its place in each device's latest
    /// list (the next reading of a device must not bring it back at 0).
    pub fn remove(&mut self, pid: u32) -> Option<GpuProcess> {
        for list in self.on_device.values_mut() {
            list.retain(|p| p.pid != pid);
        }
        self.by_pid.remove(&pid)
    }

    /// The processes on no device now whose latest point is [`GONE_AFTER_NANOS`] before
    /// `now`: processes that left the GPUs (and, unless their memory is read, ended).
    pub fn gone(&self, now: Timestamp) -> Vec<u32> {
        let listed = |pid: u32| self.on_device.values().flatten().any(|p| p.pid == pid);
        let mut gone: Vec<u32> = self
            .by_pid
            .iter()
            .filter(|(&pid, p)| {
                now.as_nanos() >= p.last.time.as_nanos().saturating_add(GONE_AFTER_NANOS)
                    && !listed(pid)
            })
            .map(|(&pid, _)| pid)
            .collect();
        gone.sort_unstable();
        gone
    }
}

/// One reading of the memory cgroup.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) struct CgroupReading {
    pub time: Timestamp,
    pub usage: u64,
    pub limit: Option<u64>,
    pub oom_kills: Option<u64>,
}

impl Level for CgroupReading {
    fn time(&self) -> Timestamp {
        self.time
    }
    fn level(&self) -> u64 {
        self.usage
    }
}

/// The job's memory cgroup over the recording.
#[derive(Debug, Clone)]
pub(crate) struct Cgroup {
    pub series: Thinned<CgroupReading>,
    pub last: CgroupReading,
    pub usage_peak: u64,
    /// The first and latest OOM kill counts read.
    pub oom_first: Option<u64>,
    pub oom_last: Option<u64>,
}

impl Cgroup {
    pub fn new(sample: &CgroupSample) -> Cgroup {
        let reading = CgroupReading::of(sample);
        let mut cgroup = Cgroup {
            series: Thinned::new(CGROUP_POINTS),
            last: reading,
            usage_peak: 0,
            oom_first: None,
            oom_last: None,
        };
        cgroup.add(sample);
        cgroup
    }

    pub fn add(&mut self, sample: &CgroupSample) {
        let reading = CgroupReading::of(sample);
        if reading.time < self.last.time {
            return;
        }
        self.series.push(reading);
        self.last = reading;
        self.usage_peak = self.usage_peak.max(reading.usage);
        if let Some(kills) = reading.oom_kills {
            self.oom_first.get_or_insert(kills);
            self.oom_last = Some(kills);
        }
    }

    /// OOM kills the cgroup counted during the recording.
    pub fn oom_kills(&self) -> u64 {
        match (self.oom_first, self.oom_last) {
            (Some(first), Some(last)) => last.saturating_sub(first),
            _ => 0,
        }
    }

    /// The latest limit read.
    pub fn limit(&self) -> Option<u64> {
        self.last.limit
    }

    pub fn points(&self) -> Vec<CgroupReading> {
        let mut points: Vec<CgroupReading> = self.series.iter().copied().collect();
        if points.last().is_some_and(|p| p.time < self.last.time) {
            points.push(self.last);
        }
        points
    }
}

impl CgroupReading {
    fn of(sample: &CgroupSample) -> CgroupReading {
        CgroupReading {
            time: sample.time,
            usage: sample.usage_bytes,
            limit: sample.limit_bytes,
            oom_kills: sample.oom_kills,
        }
    }
}
