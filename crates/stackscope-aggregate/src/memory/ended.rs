//! What is kept of the processes that ended: a job that starts workers and lets them end (a
//! DataLoader re-created at every epoch, a pool that replaces its workers) would otherwise leave
//! a series, its GPU memory and its charges behind per process it ever had.
//!
//! A process that ended leaves the live tables with what it held ([`EndedProcess`]: its series,
//! its figures, its GPU memory, the growth charged to its stacks); its matching state for the
//! growth is released at once. Of the ended, some are kept whole, so that the chart, the CSV
//! and the verdict still show them: the [`KEPT_RECENT`] most recently ended, the
//! [`KEPT_LARGEST`] with the highest peaks, and the [`KEPT_NOTABLE`] the verdict may speak of
//! (OOM killed, climbing, copying their parent's pages). Any other is folded into its kind
//! ([`FoldedKind`]: its command line with digits as `N`, and its rank): how many, their highest
//! and mean peak, when the first started and the last ended. Everything the summary counts of a
//! process folded (its growth in the memory-growth flamegraph, the cgroup's usage) was counted
//! while it lived.

use foldhash::HashMap;
use stackscope_event::Timestamp;

use super::timeline::{GpuProcess, ProcessState};
use crate::fold::StackId;

/// Ended processes kept whole because they ended last: the chart of the last minutes shows the
/// workers of the last epochs as they were (at two new workers a second, half a minute of them).
pub(crate) const KEPT_RECENT: usize = 64;
/// ... because their peaks were the highest: the processes that weighed on the machine's memory.
pub(crate) const KEPT_LARGEST: usize = 64;
/// ... because the verdict may speak of them (OOM killed, a steady climb, pages copied): what it
/// finds outlives the process. The first ones, OOM kills before the others; more than this many
/// such processes say the same thing again.
pub(crate) const KEPT_NOTABLE: usize = 32;
/// Kinds of folded processes told apart; past it the others share one entry, [`OTHER_KINDS`].
pub(crate) const MAX_FOLDED_KINDS: usize = 64;
/// The kind of folded processes past [`MAX_FOLDED_KINDS`] kinds.
pub(crate) const OTHER_KINDS: &str = "(other commands)";
/// A reading of a process that ended, taken at most this long after its end, is a late one of
/// it, not a new process under its pid: readings arrive in batches a second apart, and its exit
/// is told as soon as the sampler misses it.
pub(crate) const LATE_READING_NANOS: u64 = 5_000_000_000;
/// How much of a command line is kept: enough to tell kinds apart.
const KEPT_COMMAND_CHARS: usize = 512;

/// What a process is, as the sampler told when it attached: its command line and its rank.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) struct Identity {
    pub command_line: String,
    pub rank: Option<u32>,
}

impl Identity {
    pub fn new(command_line: &str, rank: Option<u32>) -> Identity {
        let end = command_line
            .char_indices()
            .nth(KEPT_COMMAND_CHARS)
            .map_or(command_line.len(), |(i, _)| i);
        Identity {
            command_line: command_line[..end].to_owned(),
            rank,
        }
    }

    /// Its kind: the command line with every run of digits as `N` (as threads are told apart
    /// by kind), beside its rank.
    fn kind(&self) -> String {
        crate::jobs::thread_key(self.command_line.trim())
    }
}

/// A process that ended, kept whole.
#[derive(Debug, Clone)]
pub(crate) struct EndedProcess {
    pub pid: u32,
    pub rss: ProcessState,
    pub gpu: Option<GpuProcess>,
    /// Growth charged to each of its stacks.
    pub charged: HashMap<StackId, u64>,
    /// When it ended: its exit event's time, else its latest reading's.
    pub at: Timestamp,
    pub identity: Option<Identity>,
    /// When the OOM killer ended it.
    pub oom_killed: Option<Timestamp>,
    /// Whether the verdict may speak of it ([`KEPT_NOTABLE`]).
    pub notable: bool,
}

impl EndedProcess {
    fn peak(&self) -> u64 {
        self.rss.peak
    }
}

/// The ended processes of one kind folded together.
#[derive(Debug, Clone, PartialEq)]
pub(crate) struct FoldedKind {
    /// Its command line with digits as `N`; empty for processes whose command was not told
    /// (the sampler did not follow them), [`OTHER_KINDS`] for those past the kinds' cap.
    pub kind: String,
    pub rank: Option<u32>,
    pub processes: u64,
    /// The highest peak of any of them, and the sum of their peaks (for the mean).
    pub rss_peak: u64,
    pub rss_peak_sum: u128,
    pub gpu_memory_peak: Option<u64>,
    /// The first reading of the first of them, and the end of the last.
    pub first: Timestamp,
    pub last: Timestamp,
    /// Of them, those the verdict could have spoken of, past [`KEPT_NOTABLE`].
    pub notable: u64,
}

/// Every process that ended: those kept whole, and the others by kind.
#[derive(Debug, Clone, Default)]
pub(crate) struct Ended {
    /// In the order they ended.
    pub kept: Vec<EndedProcess>,
    pub kinds: Vec<FoldedKind>,
    /// Processes that ended, and of them those folded.
    pub ended: u64,
    pub folded: u64,
}

impl Ended {
    /// A process that ended; what is kept whole past the caps is folded.
    pub fn push(&mut self, process: EndedProcess) {
        self.ended += 1;
        self.kept.push(process);
        self.fold_beyond_caps();
    }

    /// The kept process of pid `pid`, if one is.
    pub fn kept_mut(&mut self, pid: u32) -> Option<&mut EndedProcess> {
        self.kept.iter_mut().rev().find(|p| p.pid == pid)
    }

    pub fn kept(&self, pid: u32) -> Option<&EndedProcess> {
        self.kept.iter().rev().find(|p| p.pid == pid)
    }

    /// Folds the kept process of pid `pid`: the pid is another process's now, and the outputs
    /// tell processes apart by pid.
    pub fn fold_pid(&mut self, pid: u32) {
        if let Some(at) = self.kept.iter().position(|p| p.pid == pid) {
            let process = self.kept.remove(at);
            self.fold(process);
        }
    }

    /// Gives every kept series `cap` points at most.
    pub fn set_cap(&mut self, cap: usize) {
        for process in &mut self.kept {
            process.rss.series.set_cap(cap);
            if let Some(gpu) = &mut process.gpu {
                gpu.series.set_cap(cap);
            }
        }
    }

    /// Keeps the most recent, the largest and the notable ([`KEPT_RECENT`], [`KEPT_LARGEST`],
    /// [`KEPT_NOTABLE`]); folds the others.
    fn fold_beyond_caps(&mut self) {
        if self.kept.len() <= KEPT_RECENT.max(KEPT_LARGEST) {
            return;
        }
        let n = self.kept.len();
        let mut keep = vec![false; n];
        // `kept` is in the order they ended: the most recent last.
        keep.iter_mut()
            .rev()
            .take(KEPT_RECENT)
            .for_each(|k| *k = true);
        let mut by_peak: Vec<usize> = (0..n).collect();
        by_peak.sort_by(|&a, &b| {
            self.kept[b]
                .peak()
                .cmp(&self.kept[a].peak())
                .then(b.cmp(&a))
        });
        for &i in by_peak.iter().take(KEPT_LARGEST) {
            keep[i] = true;
        }
        let mut notable: Vec<usize> = (0..n).filter(|&i| self.kept[i].notable).collect();
        // OOM kills first, then the first found.
        notable.sort_by_key(|&i| (self.kept[i].oom_killed.is_none(), i));
        for &i in notable.iter().take(KEPT_NOTABLE) {
            keep[i] = true;
        }
        let all = std::mem::take(&mut self.kept);
        for (process, keep) in all.into_iter().zip(keep) {
            if keep {
                self.kept.push(process);
            } else {
                self.fold(process);
            }
        }
    }

    fn fold(&mut self, process: EndedProcess) {
        self.folded += 1;
        let (mut kind, rank) = match &process.identity {
            Some(identity) => (identity.kind(), identity.rank),
            None => (String::new(), None),
        };
        let mut at = self
            .kinds
            .iter()
            .position(|k| k.kind == kind && k.rank == rank);
        if at.is_none() && self.kinds.len() >= MAX_FOLDED_KINDS {
            kind = OTHER_KINDS.to_owned();
            at = self
                .kinds
                .iter()
                .position(|k| k.kind == kind && k.rank.is_none());
        }
        let rank = if kind == OTHER_KINDS { None } else { rank };
        let at = at.unwrap_or_else(|| {
            self.kinds.push(FoldedKind {
                kind,
                rank,
                processes: 0,
                rss_peak: 0,
                rss_peak_sum: 0,
                gpu_memory_peak: None,
                first: process.rss.first.time,
                last: process.at,
                notable: 0,
            });
            self.kinds.len() - 1
        });
        let folded = &mut self.kinds[at];
        folded.processes += 1;
        folded.rss_peak = folded.rss_peak.max(process.peak());
        folded.rss_peak_sum += u128::from(process.peak());
        if let Some(gpu) = &process.gpu {
            folded.gpu_memory_peak = Some(folded.gpu_memory_peak.unwrap_or(0).max(gpu.peak));
        }
        folded.first = folded.first.min(process.rss.first.time);
        folded.last = folded.last.max(process.at);
        folded.notable += u64::from(process.notable);
    }
}
