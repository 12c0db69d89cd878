//! The memory poller's thread: what one reading reads, on the shared producer's schedule.

use std::collections::hash_map::{Entry, HashMap};
use std::fs::File;
use std::io::ErrorKind;
use std::path::Path;
use std::sync::atomic::AtomicBool;
use std::sync::Arc;
use std::time::{Duration, Instant};

use crossbeam_channel::Sender;
use stackscope_event::producer::{FirstPoll, Flow, Producer, Schedule, Tick};
use stackscope_event::{Batch, CgroupSample, Event, MemorySample, Timestamp};

use crate::cgroup::CgroupFiles;
use crate::procfs::{
    page_size, parse_smaps_rollup, parse_statm, read_from_start, read_into, thread_cpu_time,
};
use crate::{MemoryConfig, MemoryError, TargetPids};

/// The share of one CPU the rollups of all processes may take together, in CPU time: a process
/// whose rollup costs `t` is read again after `t × processes / ROLLUP_SHARE` at the soonest
/// (see the crate docs for what a rollup costs).
const ROLLUP_SHARE: f64 = 0.002;

/// The oldest a reading gets before it is handed over: at 10 Hz, ten readings a batch, so that
/// the consumer wakes once a second for memory rather than ten times (each wake-up of the
/// consumer costs it about 50 µs on this project's VM).
const HAND_OVER_EVERY: Duration = Duration::from_secs(1);

/// The handle of a running memory poller.
///
/// Stopping is the caller's: set the `stop` flag given to [`MemoryPoller::start`], then
/// [`MemoryPoller::join`], which wakes the thread at once; it reads once more before it ends.
pub struct MemoryPoller {
    producer: Producer,
}

/// What the memory poller reports when it ends.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct MemoryReport {
    /// Readings the channel refused because it was full.
    pub dropped: u64,
    /// Readings made (each reads every process of the tree once).
    pub polls: u64,
    pub notices: Vec<String>,
}

impl MemoryPoller {
    /// Starts the thread that reads the memory of `root_pid`'s tree (`target_pids`) and of its
    /// memory cgroup. Fails only when sampling is off (`rate_hz` 0) or the thread cannot start.
    pub fn start(
        config: &MemoryConfig,
        root_pid: u32,
        target_pids: TargetPids,
        sender: Sender<Batch>,
        stop: Arc<AtomicBool>,
    ) -> Result<MemoryPoller, MemoryError> {
        if !(config.rate_hz > 0.0 && config.rate_hz.is_finite()) {
            return Err(MemoryError::Disabled);
        }
        let interval = Duration::from_secs_f64(1.0 / config.rate_hz);
        // A reading stands on its own: the first is taken at once.
        let schedule = Schedule::every(interval, FirstPoll::Now).batched(HAND_OVER_EVERY);
        let mut reader = Reader::new(config.clone(), root_pid, target_pids);
        let producer =
            Producer::spawn("stackscope-memory", schedule, sender, stop, move |ticker| {
                ticker.run(|tick| reader.poll(tick))
            })
            .map_err(MemoryError::Spawn)?;
        Ok(MemoryPoller { producer })
    }

    /// Readings the channel refused so far.
    pub fn dropped(&self) -> u64 {
        self.producer.dropped()
    }

    /// Readings made so far.
    pub fn polls(&self) -> u64 {
        self.producer.polls()
    }

    /// The notices so far, oldest first.
    pub fn notices(&self) -> Vec<String> {
        self.producer.notices()
    }

    /// Waits for the thread (after the caller set `stop`) and reports.
    pub fn join(self) -> MemoryReport {
        let report = self.producer.join();
        let mut notices = report.notices;
        if report.panicked {
            notices.push("the memory sampling thread failed; memory data ends early".into());
        }
        MemoryReport {
            dropped: report.dropped,
            polls: report.polls,
            notices,
        }
    }
}

/// Everything the thread owns.
struct Reader {
    config: MemoryConfig,
    root_pid: u32,
    target_pids: TargetPids,
    page_size: u64,
    /// The tree's processes at the last walk, less those found gone since; sorted.
    pids: Vec<u32>,
    /// Each process's `statm`, open (see [`read_from_start`]).
    statm: HashMap<u32, File>,
    next_walk: Instant,
    /// When each process's next `smaps_rollup` is due; absent: now.
    rollup_due: HashMap<u32, Instant>,
    cgroup: Option<CgroupFiles>,
    /// The root's `/proc/PID/cgroup` text the cgroup was located from.
    cgroup_line: Option<String>,
    /// The cgroup's limit as last read (at a walk).
    limit: Option<u64>,
    /// Whether the notice that `smaps_rollup` cannot be read was given.
    rollup_notice: bool,
    /// For the files read again at every reading.
    bytes: Vec<u8>,
    /// For the files opened at every read (`smaps_rollup`, `cgroup`).
    text: String,
}

impl Reader {
    fn new(config: MemoryConfig, root_pid: u32, target_pids: TargetPids) -> Reader {
        Reader {
            config,
            root_pid,
            target_pids,
            page_size: page_size(),
            pids: Vec::new(),
            statm: HashMap::new(),
            next_walk: Instant::now(),
            rollup_due: HashMap::new(),
            cgroup: None,
            cgroup_line: None,
            limit: None,
            rollup_notice: false,
            bytes: Vec::new(),
            text: String::new(),
        }
    }

    /// One reading of every process and of the cgroup.
    fn poll(&mut self, tick: &mut Tick<'_>) -> Flow {
        let now = Instant::now();
        let walked = now >= self.next_walk;
        if walked {
            self.walk();
            self.next_walk = now + self.config.tree_interval;
        }
        let mut gone = Vec::new();
        for index in 0..self.pids.len() {
            let pid = self.pids[index];
            // The last reading has every process's rollup: the recording ends on whole figures.
            match self.read_process(pid, tick.last, tick.notices) {
                Some(sample) => tick.batch.push(Event::Memory(sample)),
                None => gone.push(pid),
            }
        }
        if !gone.is_empty() {
            self.pids.retain(|pid| !gone.contains(pid));
            self.forget_others();
        }
        if let Some(sample) = self.read_cgroup(walked) {
            tick.batch.push(Event::Cgroup(sample));
        }
        Flow::Continue
    }

    /// Asks the tree for its processes, and finds the root's memory cgroup again.
    fn walk(&mut self) {
        let mut pids = (self.target_pids)();
        pids.sort_unstable();
        pids.dedup();
        self.pids = pids;
        self.forget_others();
        let path = self
            .config
            .proc_root
            .join(format!("{}/cgroup", self.root_pid));
        // A root gone keeps the cgroup it had: the job's other processes may still be in it.
        if read_into(&path, &mut self.text).is_err() {
            return;
        }
        // The same line keeps the files open: the cgroup has not moved.
        if self.cgroup_line.as_deref() == Some(self.text.as_str()) {
            return;
        }
        self.cgroup = CgroupFiles::locate(&self.text, &self.config.cgroup_root);
        self.cgroup_line = Some(self.text.clone());
    }

    /// Drops what is kept for processes no longer read.
    fn forget_others(&mut self) {
        let pids = &self.pids;
        self.statm.retain(|pid, _| pids.binary_search(pid).is_ok());
        self.rollup_due
            .retain(|pid, _| pids.binary_search(pid).is_ok());
    }

    /// `statm`, and `smaps_rollup` when due (or `rollup`). `None` when the process is gone (or
    /// its `statm` unreadable).
    fn read_process(
        &mut self,
        pid: u32,
        rollup: bool,
        notices: &mut Vec<String>,
    ) -> Option<MemorySample> {
        let dir = self.config.proc_root.join(pid.to_string());
        let statm = match self.statm.entry(pid) {
            Entry::Occupied(open) => open.into_mut(),
            Entry::Vacant(slot) => slot.insert(File::open(dir.join("statm")).ok()?),
        };
        let time = Timestamp::now();
        let text = read_from_start(statm, &mut self.bytes).ok()?;
        let mut sample = MemorySample {
            time,
            pid,
            rss_bytes: parse_statm(text, self.page_size)?,
            ..MemorySample::default()
        };
        let due = self
            .rollup_due
            .get(&pid)
            .is_none_or(|&due| Instant::now() >= due);
        if rollup || due {
            self.read_rollup(&mut sample, &dir, notices);
        }
        Some(sample)
    }

    /// Fills `sample`'s private, shared and swapped memory from `smaps_rollup`, and says when
    /// the next is due: dear rollups (a big process) come less often, all of them together
    /// within [`ROLLUP_SHARE`] of a CPU.
    fn read_rollup(&mut self, sample: &mut MemorySample, dir: &Path, notices: &mut Vec<String>) {
        // CPU time, not wall time: on a loaded machine the wait for a CPU is not the read's cost.
        let started = thread_cpu_time();
        match read_into(&dir.join("smaps_rollup"), &mut self.text) {
            Ok(()) => {
                if let Some(rollup) = parse_smaps_rollup(&self.text) {
                    sample.private_bytes = Some(rollup.private);
                    sample.shared_bytes = Some(rollup.shared);
                    sample.swap_bytes = Some(rollup.swap);
                }
            }
            Err(error) => self.rollup_failed(sample.pid, dir, &error, notices),
        }
        let cost = thread_cpu_time().saturating_sub(started);
        let processes = self.pids.len().max(1) as f64;
        let wait = cost
            .mul_f64(processes / ROLLUP_SHARE)
            .max(self.config.rollup_interval);
        self.rollup_due.insert(sample.pid, Instant::now() + wait);
    }

    /// Says once why private and shared memory are missing, when the reason is not that the
    /// process just ended: a permission, or a kernel before 4.14 (no `smaps_rollup`).
    fn rollup_failed(
        &mut self,
        pid: u32,
        dir: &Path,
        error: &std::io::Error,
        notices: &mut Vec<String>,
    ) {
        let lasting = match error.kind() {
            ErrorKind::PermissionDenied => true,
            ErrorKind::NotFound => dir.join("statm").exists(),
            _ => false,
        };
        if lasting && !self.rollup_notice {
            self.rollup_notice = true;
            notices.push(format!(
                "private and shared memory unavailable: cannot read /proc/{pid}/smaps_rollup \
                 ({error}); resident memory is still sampled"
            ));
        }
    }

    fn read_cgroup(&mut self, with_limit: bool) -> Option<CgroupSample> {
        let files = self.cgroup.as_ref()?;
        let time = Timestamp::now();
        let reading = files.read(with_limit, &mut self.bytes)?;
        if with_limit {
            self.limit = reading.limit;
        }
        Some(CgroupSample {
            time,
            usage_bytes: reading.usage,
            limit_bytes: self.limit,
            oom_kills: reading.oom_kills,
        })
    }
}

#[cfg(test)]
mod tests;
