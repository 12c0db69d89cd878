//! What `watch` keeps of each process's memory, so that a hang report can give the climb of a
//! process that vanished (an OOM kill above all): the memory poller's readings of its resident
//! memory over the last minutes, and what it ran meanwhile (where each of the stacks `watch`
//! reads itself, at its own low rate, is: [`place`]).
//!
//! Bounded however long `watch` runs: each process keeps at most [`KEEP_NANOS`] of readings,
//! thinned beyond [`MAX_READINGS`]; a process no reading or read has named for that long is
//! forgotten, and of the processes that ended only the last [`MAX_ENDED`] are kept.

use std::collections::{HashMap, VecDeque};
use std::sync::Arc;

use serde::Serialize;
use stackscope_aggregate::{memory_rate_text, memory_size_text};
use stackscope_event::{Event, Frame, Timestamp};
use stackscope_sampler::ThreadStack;

/// How far back a process's memory is kept: a climb starts at most this long before its last
/// reading.
const KEEP_NANOS: u64 = 300 * 1_000_000_000;
/// Readings kept per process: 5 minutes at the poller's default 10 Hz is 3000, so beyond this
/// many the older half is thinned to every other reading (older readings matter less to the
/// climb's shape than the last seconds before a kill).
const MAX_READINGS: usize = 1200;
/// Stack reads kept per process (`watch` reads at 1 to 10 Hz), thinned as the readings are.
const MAX_READS: usize = 1200;
/// Processes that ended whose memory is kept for the reports.
const MAX_ENDED: usize = 64;
/// Readings of a climb as a report lists them.
const REPORT_POINTS: usize = 60;
/// Functions of a climb's `ran`.
const REPORT_FUNCTIONS: usize = 5;

/// Where each thread was ([`place`]) at one read of a process's stacks.
type Read = (Timestamp, Vec<Frame>);

/// Every followed process's recent memory and what it ran.
#[derive(Default)]
pub(crate) struct MemoryHistory {
    processes: HashMap<u32, Kept>,
    /// Processes seen gone, oldest first.
    ended: VecDeque<u32>,
}

#[derive(Default)]
struct Kept {
    /// (when, resident bytes), oldest first.
    readings: VecDeque<(Timestamp, u64)>,
    reads: VecDeque<Read>,
}

/// A vanished process's memory in a hang report (`processes_ended[].memory`): from the start of
/// what `watch` kept of it to its last reading.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub(crate) struct MemoryClimb {
    pub rss_first: u64,
    pub rss_peak: u64,
    pub rss_last: u64,
    /// Seconds from the first reading to the last.
    pub secs: f64,
    /// Seconds from the first reading to where the climb starts ([`climb_start`]).
    pub climb_from_secs: f64,
    /// The least-squares slope of its resident memory over the climb.
    pub growth_bytes_per_s: f64,
    /// `[secs since the first reading, rss]`, at most [`REPORT_POINTS`] of them, evenly thinned.
    pub readings: Vec<(f64, u64)>,
    /// What it ran while it grew, most first.
    pub ran: Vec<Ran>,
}

/// A function and its share of the growth charged to the stacks read while it grew (of the
/// reads, where memory did not grow).
#[derive(Debug, Clone, PartialEq, Serialize)]
pub(crate) struct Ran {
    /// `function (file:line)`, at its line that was charged most.
    pub function: String,
    pub share: f64,
}

impl MemoryHistory {
    /// Takes the memory poller's readings; other events are not memory's.
    pub(crate) fn observe(&mut self, event: &Event) {
        if let Event::Memory(m) = event {
            let kept = self.processes.entry(m.pid).or_default();
            push_bounded(&mut kept.readings, (m.time, m.rss_bytes), MAX_READINGS);
        }
    }

    /// One read of `pid`'s stacks at `now`: where each thread that worked at the read was, or
    /// every thread when none did (a process that grows between sleeps).
    pub(crate) fn read(&mut self, pid: u32, now: Timestamp, stacks: &[ThreadStack]) {
        let at = |s: &ThreadStack| place(&s.frames).cloned();
        let mut frames: Vec<Frame> = stacks
            .iter()
            .filter(|s| s.thread.active)
            .filter_map(at)
            .collect();
        if frames.is_empty() {
            frames = stacks.iter().filter_map(at).collect();
        }
        let kept = self.processes.entry(pid).or_default();
        push_bounded(&mut kept.reads, (now, frames), MAX_READS);
    }

    /// A process appeared: a pid seen before that ended is a new process now.
    pub(crate) fn appeared(&mut self, pid: u32) {
        if let Some(i) = self.ended.iter().position(|&p| p == pid) {
            self.ended.remove(i);
            self.processes.remove(&pid);
        }
    }

    /// A followed process is gone: its memory is kept for the reports.
    pub(crate) fn vanished(&mut self, pid: u32) {
        self.ended.retain(|&p| p != pid);
        self.ended.push_back(pid);
        while self.ended.len() > MAX_ENDED {
            if let Some(old) = self.ended.pop_front() {
                self.processes.remove(&old);
            }
        }
    }

    /// Forgets what is older than [`KEEP_NANOS`] before `now`, and the processes still
    /// running that nothing named since (a short-lived child `watch` never read).
    pub(crate) fn prune(&mut self, now: Timestamp) {
        let horizon = Timestamp(now.0.saturating_sub(KEEP_NANOS));
        let ended = &self.ended;
        self.processes.retain(|pid, kept| {
            if ended.contains(pid) {
                return true;
            }
            while kept.readings.front().is_some_and(|r| r.0 < horizon) {
                kept.readings.pop_front();
            }
            while kept.reads.front().is_some_and(|r| r.0 < horizon) {
                kept.reads.pop_front();
            }
            !kept.readings.is_empty() || !kept.reads.is_empty()
        });
    }

    /// `pid`'s climb: from the start of what is kept to its last reading; `None` with fewer
    /// than two readings.
    pub(crate) fn climb(&self, pid: u32) -> Option<MemoryClimb> {
        let kept = self.processes.get(&pid)?;
        let readings: Vec<(Timestamp, u64)> = kept.readings.iter().copied().collect();
        let (first, last) = (*readings.first()?, *readings.last()?);
        if readings.len() < 2 {
            return None;
        }
        let secs = |t: Timestamp| t.0.saturating_sub(first.0 .0) as f64 / 1e9;
        let points: Vec<(f64, u64)> = readings.iter().map(|&(t, rss)| (secs(t), rss)).collect();
        let climb = &points[climb_start(&points)..];
        Some(MemoryClimb {
            rss_first: first.1,
            rss_peak: readings.iter().map(|r| r.1).max().unwrap_or(last.1),
            rss_last: last.1,
            secs: round(secs(last.0), 100.0),
            climb_from_secs: round(climb[0].0, 100.0),
            growth_bytes_per_s: round(stackscope_aggregate::growth_rate(climb), 1.0),
            readings: thin(&points, REPORT_POINTS)
                .into_iter()
                .map(|(s, rss)| (round(s, 100.0), rss))
                .collect(),
            ran: ran_while_growing(&readings, &kept.reads),
        })
    }
}

/// The frame a stack (innermost first) is at, by the rule the summary's `top_function`
/// places a stack with (a helper of the standard library or a package called from the job's
/// function is that function's time).
fn place(frames: &[Frame]) -> Option<&Frame> {
    stackscope_aggregate::place_in(frames.iter(), |f| Some(f.origin))
}

/// Pushes `item`, thinning the older half to every other item beyond `max`.
fn push_bounded<T>(ring: &mut VecDeque<T>, item: T, max: usize) {
    ring.push_back(item);
    if ring.len() <= max {
        return;
    }
    let older = ring.len() / 2;
    let mut i = 0;
    ring.retain(|_| {
        i += 1;
        i > older || i % 2 == 0
    });
}

/// Where the climb to the last reading starts: from the last reading within 5% of the way from
/// the lowest reading to the last one, back down its slope (a process flat for minutes, then
/// climbing, climbs from the last flat reading; one that climbs all along, from its first;
/// one that freed memory and climbs again, from the trough). The first reading when nothing
/// climbs.
fn climb_start(points: &[(f64, u64)]) -> usize {
    let (Some(low), Some(last)) = (points.iter().map(|p| p.1).min(), points.last()) else {
        return 0;
    };
    let near_low = low + (last.1.saturating_sub(low)) / 20;
    let Some(mut i) = points.iter().rposition(|p| p.1 <= near_low) else {
        return 0;
    };
    while i > 0 && points[i - 1].1 < points[i].1 {
        i -= 1;
    }
    if i + 2 < points.len() {
        i
    } else {
        0
    }
}

/// At most `max` of `points`, evenly spaced, the first and the last among them.
fn thin<T: Copy>(points: &[T], max: usize) -> Vec<T> {
    if points.len() <= max || max < 2 {
        return points.to_vec();
    }
    let step = (points.len() - 1) as f64 / (max - 1) as f64;
    (0..max)
        .map(|i| points[((i as f64 * step).round() as usize).min(points.len() - 1)])
        .collect()
}

fn round(x: f64, per_unit: f64) -> f64 {
    (x * per_unit).round() / per_unit
}

/// The resident memory at `t`: the last reading at or before it (the first one before any).
fn rss_at(readings: &[(Timestamp, u64)], t: Timestamp) -> u64 {
    let after = readings.partition_point(|r| r.0 <= t);
    readings[after.saturating_sub(1)].1
}

/// What ran while memory grew: each read of the stacks within the readings stands for the time
/// from halfway to the read before to halfway to the read after (the first from the first
/// reading, the last to the last reading), and the growth over that time is charged evenly to
/// the frames of the read; by function and file, most first. Where nothing grew, the reads'
/// frames by count.
fn ran_while_growing(readings: &[(Timestamp, u64)], reads: &VecDeque<Read>) -> Vec<Ran> {
    let (Some(first), Some(last)) = (readings.first(), readings.last()) else {
        return Vec::new();
    };
    let reads: Vec<&Read> = reads
        .iter()
        .filter(|r| r.0 >= first.0 && r.0 <= last.0 && !r.1.is_empty())
        .collect();
    let mid = |a: Timestamp, b: Timestamp| Timestamp(a.0 / 2 + b.0 / 2);
    let mut grown = Charges::default();
    let mut seen = Charges::default();
    for (i, (at, frames)) in reads.iter().map(|r| (r.0, &r.1)).enumerate() {
        let from = if i == 0 {
            first.0
        } else {
            mid(reads[i - 1].0, at)
        };
        let to = reads.get(i + 1).map_or(last.0, |next| mid(at, next.0));
        let growth = rss_at(readings, to).saturating_sub(rss_at(readings, from));
        let each = 1.0 / frames.len() as f64;
        for frame in frames {
            grown.charge(frame, growth as f64 * each);
            seen.charge(frame, each);
        }
    }
    if grown.total() > 0.0 {
        grown.shares()
    } else {
        seen.shares()
    }
}

/// Amounts charged by function and file, and by line within them.
#[derive(Default)]
struct Charges {
    by_function: HashMap<(Arc<str>, Arc<str>), HashMap<u32, f64>>,
}

impl Charges {
    fn charge(&mut self, frame: &Frame, amount: f64) {
        let key = (frame.function.clone(), frame.file.clone());
        *self
            .by_function
            .entry(key)
            .or_default()
            .entry(frame.line)
            .or_default() += amount;
    }

    fn total(&self) -> f64 {
        self.by_function.values().flat_map(|l| l.values()).sum()
    }

    /// Each function's share of the total, most first, at most [`REPORT_FUNCTIONS`].
    fn shares(&self) -> Vec<Ran> {
        let total = self.total();
        if total <= 0.0 {
            return Vec::new();
        }
        let mut ran: Vec<Ran> = self
            .by_function
            .iter()
            .map(|((function, file), lines)| {
                let line = lines
                    .iter()
                    .max_by(|a, b| a.1.total_cmp(b.1).then(b.0.cmp(a.0)))
                    .map_or(0, |(line, _)| *line);
                let label = Frame::python(function, file, line).label();
                let amount: f64 = lines.values().sum();
                Ran {
                    function: label,
                    share: round(amount / total, 1000.0),
                }
            })
            .filter(|r| r.share > 0.0)
            .collect();
        ran.sort_by(|a, b| {
            b.share
                .total_cmp(&a.share)
                .then(a.function.cmp(&b.function))
        });
        ran.truncate(REPORT_FUNCTIONS);
        ran
    }
}

impl MemoryClimb {
    /// The climb in one line: `13 MB → 258 MB (peak 258 MB) over 8.1 s, 50 MB/s over the last
    /// 4.9 s, while it ran grow_cache (job.py:40) 97%, ...`.
    pub(crate) fn sentence(&self) -> String {
        let mut text = format!(
            "{} → {} (peak {}) over {:.1} s, {} over the last {:.1} s",
            memory_size_text(self.rss_first),
            memory_size_text(self.rss_last),
            memory_size_text(self.rss_peak),
            self.secs,
            memory_rate_text(self.growth_bytes_per_s),
            self.secs - self.climb_from_secs,
        );
        // What had no part worth a word (below 1%) stays in the JSON only.
        let ran: Vec<String> = self
            .ran
            .iter()
            .filter(|r| r.share >= 0.01)
            .map(|r| format!("{} {:.0}%", r.function, r.share * 100.0))
            .collect();
        if !ran.is_empty() {
            text.push_str(&format!(", while it ran {}", ran.join(", ")));
        }
        text
    }
}

#[cfg(test)]
mod tests;
