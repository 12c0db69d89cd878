//! What ran while memory grew: a process's growth between two readings is charged to the
//! stacks the aggregate kept for that process in that interval, split by their samples.
//!
//! Readings and stacks come on different paths: a memory reading at once, stacks in the
//! sampler's batches (every 250 ms). So the two are matched by time, not by arrival: each
//! process keeps a short ring of its recent kept samples (time, stack) and a queue of growth
//! intervals waiting to be charged. An interval is settled once a sample of its process later
//! than its end has come (the sampler reads a process's threads in time order, so nothing of
//! the interval is still on its way), once the stacks have moved on [`SETTLE_LAG_NANOS`] past
//! it (a process whose threads are no longer sampled), or when the queue or the ring is full;
//! at the end whatever waits is settled with what is there. Growth in an interval with no
//! kept sample of its process is counted as unattributed.
//!
//! This is the code that ran while memory grew, never an allocation trace.

use std::collections::VecDeque;

use foldhash::HashMap;
use stackscope_event::Timestamp;

use crate::fold::{StackId, TimeBuckets};

/// Kept samples remembered per process: seconds of a busy process's threads at 100 Hz, far
/// more than the interval between two readings (100 ms at the default 10 Hz) plus a batch's
/// latency. Only samples after the process's latest reading (or its oldest interval waiting)
/// are kept at all.
pub(crate) const RING_CAP: usize = 4096;
/// Growth intervals waiting per process: seconds of readings at 10 Hz.
pub(crate) const PENDING_CAP: usize = 64;
/// Stacks of any process this much later than an interval's end settle it: past a batch's
/// latency (250 ms) several times over, so that a process whose own stacks stopped coming
/// (every thread idle and left out, or not sampled) does not hold its growth back.
pub(crate) const SETTLE_LAG_NANOS: u64 = 2_000_000_000;

/// Growth of one process between two of its readings, not yet charged.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
struct Interval {
    from: Timestamp,
    to: Timestamp,
    bytes: u64,
}

/// One process's matching state and what was charged for it.
#[derive(Debug, Clone, Default)]
pub(crate) struct ProcessCharges {
    ring: VecDeque<(Timestamp, StackId)>,
    pending: VecDeque<Interval>,
    /// Its latest stack sample (kept or not): the sampler has passed this instant for it.
    latest_sample: Option<Timestamp>,
    /// Its latest reading.
    last_reading: Option<Timestamp>,
    /// Bytes charged to each of its stacks. Bounded by the stacks it ran: with process roots
    /// (`--subprocesses`) each process has stacks of its own, so all processes' maps together
    /// hold no more entries than the stack table.
    pub by_stack: HashMap<StackId, u64>,
    /// Growth charged to stacks, and growth with no kept sample in its interval.
    pub charged: u64,
    pub unattributed: u64,
}

impl ProcessCharges {
    /// Samples at or before this are of no interval still to come or waiting.
    fn horizon(&self) -> Option<Timestamp> {
        match (self.pending.front(), self.last_reading) {
            (Some(first), _) => Some(first.from),
            (None, last) => last,
        }
    }

    /// Forgets samples that no interval can hold any more. A process not read yet keeps the
    /// last [`SETTLE_LAG_NANOS`] of them before `latest_any`: its first reading may arrive
    /// after stacks later than it (a process the sampler found before the memory poller).
    fn prune(&mut self, latest_any: Option<Timestamp>) {
        let horizon = self.horizon().or_else(|| {
            latest_any.map(|t| Timestamp(t.as_nanos().saturating_sub(SETTLE_LAG_NANOS)))
        });
        let Some(horizon) = horizon else {
            return;
        };
        while self.ring.front().is_some_and(|&(t, _)| t <= horizon) {
            self.ring.pop_front();
        }
    }

    /// The kept samples in `interval` by stack, in stack order.
    fn counts_in(&self, interval: &Interval) -> Vec<(StackId, u64)> {
        let mut counts: HashMap<StackId, u64> = HashMap::default();
        for &(t, stack) in &self.ring {
            if t > interval.from && t <= interval.to {
                *counts.entry(stack).or_default() += 1;
            }
        }
        let mut counts: Vec<(StackId, u64)> = counts.into_iter().collect();
        counts.sort_unstable();
        counts
    }
}

/// Every process's growth matched to its stacks, and the whole recording's charges.
#[derive(Debug, Clone, Default)]
pub(crate) struct Attribution {
    pub by_pid: HashMap<u32, ProcessCharges>,
    /// Bytes charged to each stack over the whole recording, processes dropped included.
    pub by_stack: HashMap<StackId, u64>,
    pub unattributed: u64,
    /// The latest stack sample of any process.
    latest_any: Option<Timestamp>,
}

impl Attribution {
    /// A reading of `pid` at `to`; `growth` since its reading at `from` (none for its first
    /// reading, or when it did not grow).
    pub fn reading(
        &mut self,
        pid: u32,
        from: Option<Timestamp>,
        to: Timestamp,
        growth: u64,
        buckets: &mut TimeBuckets,
    ) {
        let process = self.by_pid.entry(pid).or_default();
        process.last_reading = Some(to);
        if let (Some(from), true) = (from, growth > 0) {
            process.pending.push_back(Interval {
                from,
                to,
                bytes: growth,
            });
        }
        self.settle(pid, buckets);
    }

    /// A stack sample of `pid` at `time`; `stack` when it was kept (counted in the profile).
    pub fn sample(
        &mut self,
        pid: u32,
        time: Timestamp,
        stack: Option<StackId>,
        buckets: &mut TimeBuckets,
    ) {
        self.latest_any = self.latest_any.max(Some(time));
        if stack.is_none() && !self.by_pid.contains_key(&pid) {
            // Not read yet, and nothing to keep.
            return;
        }
        let process = self.by_pid.entry(pid).or_default();
        process.latest_sample = process.latest_sample.max(Some(time));
        if let Some(stack) = stack {
            if process.horizon().is_none_or(|horizon| time > horizon) {
                if process.ring.len() >= RING_CAP {
                    // The ring moved on: charge what waits before its samples go.
                    self.settle_first(pid, buckets);
                }
                if let Some(process) = self.by_pid.get_mut(&pid) {
                    if process.ring.len() >= RING_CAP {
                        process.ring.pop_front();
                    }
                    process.ring.push_back((time, stack));
                }
            }
        }
        self.settle(pid, buckets);
    }

    /// Settles `pid`'s intervals whose samples have all come.
    fn settle(&mut self, pid: u32, buckets: &mut TimeBuckets) {
        let latest_any = self.latest_any;
        while let Some(process) = self.by_pid.get(&pid) {
            let Some(first) = process.pending.front() else {
                break;
            };
            let passed = process.latest_sample.is_some_and(|t| t > first.to);
            let moved_on = latest_any.is_some_and(|t| {
                t.as_nanos() > first.to.as_nanos().saturating_add(SETTLE_LAG_NANOS)
            });
            let full = process.pending.len() > PENDING_CAP;
            if !(passed || moved_on || full) {
                break;
            }
            self.settle_first(pid, buckets);
        }
        if let Some(process) = self.by_pid.get_mut(&pid) {
            process.prune(latest_any);
            if process.last_reading.is_none() && process.ring.is_empty() {
                self.by_pid.remove(&pid);
            }
        }
    }

    /// Charges `pid`'s oldest waiting interval to the samples in it.
    fn settle_first(&mut self, pid: u32, buckets: &mut TimeBuckets) {
        let Some(process) = self.by_pid.get_mut(&pid) else {
            return;
        };
        let Some(interval) = process.pending.pop_front() else {
            return;
        };
        let shares = split(interval.bytes, &process.counts_in(&interval));
        if shares.is_empty() {
            process.unattributed += interval.bytes;
            self.unattributed += interval.bytes;
            return;
        }
        for (stack, bytes) in shares {
            *process.by_stack.entry(stack).or_default() += bytes;
            *self.by_stack.entry(stack).or_default() += bytes;
            buckets.count_growth(interval.to, stack, bytes);
        }
        process.charged += interval.bytes;
    }

    /// The end: every interval still waiting is charged with the samples there are.
    pub fn finish(&mut self, buckets: &mut TimeBuckets) {
        let mut pids: Vec<u32> = self.by_pid.keys().copied().collect();
        pids.sort_unstable();
        for pid in pids {
            while self.by_pid.get(&pid).is_some_and(|p| !p.pending.is_empty()) {
                self.settle_first(pid, buckets);
            }
            if let Some(process) = self.by_pid.get_mut(&pid) {
                process.prune(self.latest_any);
            }
        }
    }

    /// A process dropped from the memory tables: what waits is charged, then it is forgotten
    /// (its charges stay in the whole recording's).
    pub fn drop_process(&mut self, pid: u32, buckets: &mut TimeBuckets) {
        self.end_process(pid, buckets);
    }

    /// A process that ended: what waits is charged with the samples there are (its last came
    /// before its end), and its matching state goes. Returns what was charged to each of its
    /// stacks, for what is kept of it; the whole recording's charges keep it anyway.
    pub fn end_process(
        &mut self,
        pid: u32,
        buckets: &mut TimeBuckets,
    ) -> Option<HashMap<StackId, u64>> {
        while self.by_pid.get(&pid).is_some_and(|p| !p.pending.is_empty()) {
            self.settle_first(pid, buckets);
        }
        self.by_pid.remove(&pid).map(|p| p.by_stack)
    }

    /// Processes never read (so never ended by the memory tables) whose latest stack sample is
    /// [`SETTLE_LAG_NANOS`] before `now` or older: what they kept is of no use any more.
    pub fn unread_gone(&self, now: Timestamp) -> Vec<u32> {
        let mut gone: Vec<u32> = self
            .by_pid
            .iter()
            .filter(|(_, p)| p.last_reading.is_none())
            .filter(|(_, p)| {
                p.latest_sample
                    .is_none_or(|t| now.as_nanos() >= t.as_nanos().saturating_add(SETTLE_LAG_NANOS))
            })
            .map(|(&pid, _)| pid)
            .collect();
        gone.sort_unstable();
        gone
    }

    /// The whole recording's charges with what still waits charged as it stands, most first:
    /// a checkpoint's view, without settling anything.
    pub fn growth(&self) -> Vec<(StackId, u64)> {
        let mut total = self.by_stack.clone();
        for process in self.by_pid.values() {
            for interval in &process.pending {
                for (stack, bytes) in split(interval.bytes, &process.counts_in(interval)) {
                    *total.entry(stack).or_default() += bytes;
                }
            }
        }
        let mut out: Vec<(StackId, u64)> = total.into_iter().filter(|&(_, b)| b > 0).collect();
        out.sort_unstable_by(|a, b| b.1.cmp(&a.1).then(a.0.cmp(&b.0)));
        out
    }

    /// Growth still waiting whose interval holds no kept sample so far: unattributed as it
    /// stands.
    pub fn pending_unmatched_bytes(&self) -> u64 {
        self.by_pid
            .values()
            .flat_map(|p| p.pending.iter().map(move |i| (p, i)))
            .filter(|(p, i)| p.counts_in(i).is_empty())
            .map(|(_, i)| i.bytes)
            .sum()
    }
}

/// `bytes` split over stacks by their sample counts, to the byte: the remainder of the integer
/// division goes to the stacks with the most samples, one byte each.
fn split(bytes: u64, counts: &[(StackId, u64)]) -> Vec<(StackId, u64)> {
    let total: u64 = counts.iter().map(|&(_, n)| n).sum();
    if total == 0 {
        return Vec::new();
    }
    let mut shares: Vec<(StackId, u64, u64)> = counts
        .iter()
        .map(|&(stack, n)| {
            let share = u128::from(bytes) * u128::from(n) / u128::from(total);
            (stack, u64::try_from(share).unwrap_or(u64::MAX), n)
        })
        .collect();
    let given: u64 = shares.iter().map(|s| s.1).sum();
    let mut left = bytes.saturating_sub(given);
    let mut order: Vec<usize> = (0..shares.len()).collect();
    order.sort_by(|&a, &b| {
        shares[b]
            .2
            .cmp(&shares[a].2)
            .then(shares[a].0.cmp(&shares[b].0))
    });
    for i in order.into_iter().cycle() {
        if left == 0 {
            break;
        }
        shares[i].1 += 1;
        left -= 1;
    }
    shares.into_iter().map(|(s, b, _)| (s, b)).collect()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_split_adds_up_to_the_byte() {
        let shares = split(10, &[(1, 1), (2, 2)]);
        assert_eq!(shares, vec![(1, 3), (2, 7)]);
        assert_eq!(split(5, &[]), vec![]);
        let many: Vec<(StackId, u64)> = (0..7).map(|s| (s, 1)).collect();
        let shares = split(1_000_003, &many);
        assert_eq!(shares.iter().map(|s| s.1).sum::<u64>(), 1_000_003);
    }
}
