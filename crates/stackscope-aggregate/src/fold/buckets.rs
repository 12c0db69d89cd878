//! Time buckets: the kept stack samples counted per stack and GPU state in fixed slices of
//! time, and each thread's active and idle samples per slice, for the HTML report's timeline
//! and its flamegraph of any window.
//!
//! A bucket's width is 1/8 s times a power of two. When the buckets grow past
//! [`MAX_BUCKETS`] or their entries past [`MAX_ENTRIES`], neighbours are merged pairwise and
//! the width doubles, so memory (and the page) stays bounded however long the recording while
//! a window's counts stay exact for the buckets it covers. Powers of two of an eighth of a
//! second keep bucket edges on exact binary fractions: a bucket edge at 2 s holds exactly the
//! samples `stackscope report --from 2` counts.

use foldhash::HashMap;

use stackscope_event::Timestamp;

use super::intern::StackId;
use crate::gil::GilState;
use crate::gpu::GpuTag;

/// The narrowest bucket: 1/8 s.
pub const BASE_BUCKET_NANOS: u64 = 125_000_000;
/// Past this many buckets the width doubles.
pub const MAX_BUCKETS: usize = 2048;
/// Past this many (bucket, stack) and (bucket, thread) entries the width doubles: about 2 MiB
/// in memory and in the page, part of a long recording's fixed budget (a richer profile widens
/// the buckets instead of growing them). A single bucket may hold more (its stacks are never
/// dropped); coarsening then stops at one bucket.
pub const MAX_ENTRIES: usize = 1 << 16;
/// Threads with their own lane; later ones share one `[other threads]` lane.
pub const MAX_LANES: usize = 256;

/// Samples of one stack in one bucket, by GPU state.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct BucketCounts {
    pub gpu_idle: u32,
    pub gpu_busy: u32,
    pub gpu_unknown: u32,
}

impl BucketCounts {
    pub fn all(&self) -> u64 {
        u64::from(self.gpu_idle) + u64::from(self.gpu_busy) + u64::from(self.gpu_unknown)
    }

    fn add(&mut self, other: &BucketCounts) {
        self.gpu_idle = self.gpu_idle.saturating_add(other.gpu_idle);
        self.gpu_busy = self.gpu_busy.saturating_add(other.gpu_busy);
        self.gpu_unknown = self.gpu_unknown.saturating_add(other.gpu_unknown);
    }
}

/// One thread's samples in one bucket: `active` (running, kept) and `idle` (sleeping or
/// blocked, whether kept or skipped); and of them, those at which it held the GIL and those at
/// which it waited for the GIL another thread held (`gil/`). Active samples without the GIL
/// ran native code that released it.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct LaneCounts {
    pub active: u32,
    pub idle: u32,
    pub gil_held: u32,
    pub gil_waited: u32,
}

impl LaneCounts {
    fn add(&mut self, other: &LaneCounts) {
        self.active = self.active.saturating_add(other.active);
        self.idle = self.idle.saturating_add(other.idle);
        self.gil_held = self.gil_held.saturating_add(other.gil_held);
        self.gil_waited = self.gil_waited.saturating_add(other.gil_waited);
    }
}

/// A sample's thread name, and whether it is the very name (the same shared string) of the
/// thread's sample before: then its lane, as kept by the caller, needs no lookup
/// ([`TimeBuckets::count_thread_in`]).
#[derive(Debug, Clone, Copy)]
pub struct ThreadName<'a> {
    pub name: &'a str,
    pub unchanged: bool,
}

/// A thread with a lane.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Lane {
    pub pid: u32,
    pub python_thread_id: u64,
    /// The latest name seen; `[other threads]` for the shared lane.
    pub name: String,
    pub active: u64,
    pub idle: u64,
}

#[derive(Debug, Clone, Default)]
pub struct Bucket {
    pub stacks: HashMap<StackId, BucketCounts>,
    /// Bytes of resident memory growth charged to each stack in this bucket (`memory/`).
    pub growth: HashMap<StackId, u64>,
    pub lanes: HashMap<u32, LaneCounts>,
}

#[derive(Debug, Clone)]
pub struct TimeBuckets {
    start: Timestamp,
    width_nanos: u64,
    /// By bucket index (time since start over the width); sparse.
    buckets: HashMap<u64, Bucket>,
    entries: usize,
    lanes: Vec<Lane>,
    lane_ids: HashMap<(u32, u64), u32>,
    other_lane: Option<u32>,
    /// Lanes emptied into their pool's ([`TimeBuckets::merge_lane`]), to be given again.
    free_lanes: Vec<u32>,
    /// The bucket counted into last: a new one is made as large as it, so that a bucket
    /// of many threads is not grown step by step.
    latest: Option<u64>,
}

impl TimeBuckets {
    pub fn new(start: Timestamp) -> TimeBuckets {
        TimeBuckets {
            start,
            width_nanos: BASE_BUCKET_NANOS,
            buckets: HashMap::default(),
            entries: 0,
            lanes: Vec::new(),
            lane_ids: HashMap::default(),
            other_lane: None,
            free_lanes: Vec::new(),
            latest: None,
        }
    }

    /// Width of a bucket in nanoseconds.
    pub fn width_nanos(&self) -> u64 {
        self.width_nanos
    }

    pub fn width_secs(&self) -> f64 {
        self.width_nanos as f64 / 1e9
    }

    fn index(&self, time: Timestamp) -> u64 {
        time.0.saturating_sub(self.start.0) / self.width_nanos
    }

    /// Counts one kept sample of `stack` at `time`, tagged `tag`.
    pub fn count_stack(&mut self, time: Timestamp, stack: StackId, tag: GpuTag) {
        let index = self.index(time);
        let bucket = bucket_at(&mut self.buckets, &mut self.latest, index);
        let counts = bucket.stacks.entry(stack).or_insert_with(|| {
            self.entries += 1;
            BucketCounts::default()
        });
        match tag {
            GpuTag::Idle => counts.gpu_idle = counts.gpu_idle.saturating_add(1),
            // Low SM activity is busy by utilization: the page splits idle from busy.
            GpuTag::Busy | GpuTag::BusyLowSm => counts.gpu_busy = counts.gpu_busy.saturating_add(1),
            GpuTag::Unknown => counts.gpu_unknown = counts.gpu_unknown.saturating_add(1),
        }
        self.bound();
    }

    /// Charges `bytes` of a process's memory growth to `stack` in the bucket of `time` (the
    /// reading that saw the growth), for the page's memory-growth view of any window.
    pub fn count_growth(&mut self, time: Timestamp, stack: StackId, bytes: u64) {
        let index = self.index(time);
        let bucket = bucket_at(&mut self.buckets, &mut self.latest, index);
        let charged = bucket.growth.entry(stack).or_insert_with(|| {
            self.entries += 1;
            0
        });
        *charged = charged.saturating_add(bytes);
        self.bound();
    }

    /// Counts one sample of a thread (kept or skipped as idle) at `time`.
    pub fn count_thread(
        &mut self,
        time: Timestamp,
        pid: u32,
        python_thread_id: u64,
        name: &str,
        active: bool,
    ) {
        let lane = self.lane(pid, python_thread_id, name);
        self.count_in_lane(time, lane, active);
    }

    /// [`TimeBuckets::count_thread`], for a caller that keeps the thread's lane from its
    /// sample before in `lane`: while the name is the very same, the lane needs no lookup
    /// (a thread's lane never changes).
    pub fn count_thread_in(
        &mut self,
        lane: &mut Option<u32>,
        time: Timestamp,
        pid: u32,
        python_thread_id: u64,
        name: ThreadName<'_>,
        active: bool,
    ) {
        let id = match *lane {
            Some(id) if name.unchanged => id,
            _ => self.lane(pid, python_thread_id, name.name),
        };
        *lane = Some(id);
        self.count_in_lane(time, id, active);
    }

    fn count_in_lane(&mut self, time: Timestamp, lane: u32, active: bool) {
        if let Some(l) = self.lanes.get_mut(lane as usize) {
            if active {
                l.active += 1;
            } else {
                l.idle += 1;
            }
        }
        let counts = self.lane_counts(time, lane);
        if active {
            counts.active = counts.active.saturating_add(1);
        } else {
            counts.idle = counts.idle.saturating_add(1);
        }
        self.bound();
    }

    /// Counts what a sample already counted in `lane` at `time` did with the GIL, once its read
    /// is complete (`gil/`).
    pub fn count_lane_gil(&mut self, time: Timestamp, lane: u32, state: GilState) {
        let held = state == GilState::Held;
        if !held && state != GilState::Waited {
            return;
        }
        let counts = self.lane_counts(time, lane);
        if held {
            counts.gil_held = counts.gil_held.saturating_add(1);
        } else {
            counts.gil_waited = counts.gil_waited.saturating_add(1);
        }
        self.bound();
    }

    /// A lane's counts in the bucket of `time`, made when new.
    fn lane_counts(&mut self, time: Timestamp, lane: u32) -> &mut LaneCounts {
        let index = self.index(time);
        let entries = &mut self.entries;
        let bucket = bucket_at(&mut self.buckets, &mut self.latest, index);
        bucket.lanes.entry(lane).or_insert_with(|| {
            *entries += 1;
            LaneCounts::default()
        })
    }

    /// Moves an ended thread's lane (`from`, the lane of `(pid, python_thread_id)`) into its
    /// kind's lane `into`, named `name`: its counts in every bucket and its totals. The emptied
    /// lane is free for the next thread that needs one, so a pool's threads that ended before
    /// it was one pool leave one lane, the pool's.
    pub fn merge_lane(&mut self, from: u32, thread: (u32, u64), into: (u32, u64), name: &str) {
        let owned = self.lane_ids.get(&thread) == Some(&from);
        if !owned || Some(from) == self.other_lane {
            return;
        }
        self.lane_ids.remove(&thread);
        let to = match self.lane_ids.get(&into) {
            Some(&to) if Some(to) != self.other_lane => to,
            // The pool has no lane of its own yet (or only the shared one, the lanes being
            // full): the thread's lane becomes the pool's.
            _ => {
                self.lane_ids.insert(into, from);
                if let Some(lane) = self.lanes.get_mut(from as usize) {
                    (lane.pid, lane.python_thread_id) = into;
                    name.clone_into(&mut lane.name);
                }
                return;
            }
        };
        if to == from {
            return;
        }
        let Some(lane) = self.lanes.get_mut(from as usize) else {
            return;
        };
        let (active, idle) = (
            std::mem::take(&mut lane.active),
            std::mem::take(&mut lane.idle),
        );
        if let Some(pool) = self.lanes.get_mut(to as usize) {
            pool.active += active;
            pool.idle += idle;
        }
        let entries = &mut self.entries;
        for bucket in self.buckets.values_mut() {
            let Some(counts) = bucket.lanes.remove(&from) else {
                continue;
            };
            match bucket.lanes.get_mut(&to) {
                Some(pool) => {
                    pool.add(&counts);
                    *entries = entries.saturating_sub(1);
                }
                None => {
                    bucket.lanes.insert(to, counts);
                }
            }
        }
        self.free_lanes.push(from);
    }

    fn lane(&mut self, pid: u32, python_thread_id: u64, name: &str) -> u32 {
        if let Some(&id) = self.lane_ids.get(&(pid, python_thread_id)) {
            if let Some(lane) = self.lanes.get_mut(id as usize) {
                if Some(id) != self.other_lane && lane.name != name {
                    name.clone_into(&mut lane.name);
                }
            }
            return id;
        }
        let id = if self.lanes.len() + 1 < MAX_LANES || !self.free_lanes.is_empty() {
            self.push_lane(pid, python_thread_id, name)
        } else if let Some(other) = self.other_lane {
            other
        } else {
            let other = self.push_lane(0, 0, super::limits::OTHER_THREADS);
            self.other_lane = Some(other);
            other
        };
        self.lane_ids.insert((pid, python_thread_id), id);
        id
    }

    fn push_lane(&mut self, pid: u32, python_thread_id: u64, name: &str) -> u32 {
        if let Some(id) = self.free_lanes.pop() {
            if let Some(lane) = self.lanes.get_mut(id as usize) {
                *lane = Lane {
                    pid,
                    python_thread_id,
                    name: name.to_owned(),
                    active: 0,
                    idle: 0,
                };
                return id;
            }
        }
        let id = self.lanes.len() as u32;
        self.lanes.push(Lane {
            pid,
            python_thread_id,
            name: name.to_owned(),
            active: 0,
            idle: 0,
        });
        id
    }

    fn bound(&mut self) {
        while self.buckets.len() > MAX_BUCKETS || self.entries > MAX_ENTRIES {
            if !self.coarsen() {
                break;
            }
        }
    }

    /// Merges neighbouring buckets pairwise and doubles the width; false when the width cannot
    /// grow any more.
    fn coarsen(&mut self) -> bool {
        if self.buckets.len() <= 1 {
            return false;
        }
        let Some(width) = self.width_nanos.checked_mul(2) else {
            return false;
        };
        let old = std::mem::take(&mut self.buckets);
        self.latest = None;
        let mut entries = 0;
        for (index, bucket) in old {
            let merged = self.buckets.entry(index / 2).or_default();
            for (stack, counts) in bucket.stacks {
                merged.stacks.entry(stack).or_default().add(&counts);
            }
            for (lane, counts) in bucket.lanes {
                merged.lanes.entry(lane).or_default().add(&counts);
            }
            for (stack, bytes) in bucket.growth {
                let m = merged.growth.entry(stack).or_default();
                *m = m.saturating_add(bytes);
            }
        }
        for bucket in self.buckets.values() {
            entries += bucket.stacks.len() + bucket.lanes.len() + bucket.growth.len();
        }
        self.entries = entries;
        self.width_nanos = width;
        true
    }

    /// The buckets in time order, each with its index (its start is `index * width`).
    pub fn sorted(&self) -> Vec<(u64, &Bucket)> {
        let mut out: Vec<(u64, &Bucket)> = self.buckets.iter().map(|(&i, b)| (i, b)).collect();
        out.sort_unstable_by_key(|&(i, _)| i);
        out
    }

    pub fn lanes(&self) -> &[Lane] {
        &self.lanes
    }

    /// (bucket, stack), (bucket, thread) and (bucket, stack) growth entries held.
    pub fn entries(&self) -> usize {
        self.entries
    }

    pub fn len(&self) -> usize {
        self.buckets.len()
    }

    pub fn is_empty(&self) -> bool {
        self.buckets.is_empty()
    }
}

/// The bucket at `index`, made if need be with the room the bucket counted into before it
/// (`latest`) needed. A free function: the caller holds the bucket while it counts into
/// `TimeBuckets::entries`.
fn bucket_at<'a>(
    buckets: &'a mut HashMap<u64, Bucket>,
    latest: &mut Option<u64>,
    index: u64,
) -> &'a mut Bucket {
    if *latest != Some(index) && !buckets.contains_key(&index) {
        let room = latest
            .and_then(|i| buckets.get(&i))
            .map_or((0, 0), |b| (b.stacks.len(), b.lanes.len()));
        let mut bucket = Bucket::default();
        bucket.stacks.reserve(room.0);
        bucket.lanes.reserve(room.1);
        buckets.insert(index, bucket);
    }
    *latest = Some(index);
    buckets.entry(index).or_default()
}

#[cfg(test)]
mod tests {
    use super::*;

    const SEC: u64 = 1_000_000_000;

    #[test]
    fn samples_land_in_their_eighth_of_a_second() {
        let mut b = TimeBuckets::new(Timestamp(10 * SEC));
        b.count_stack(Timestamp(10 * SEC), 1, GpuTag::Idle);
        b.count_stack(Timestamp(12 * SEC - 1), 1, GpuTag::Busy);
        b.count_stack(Timestamp(12 * SEC), 2, GpuTag::Unknown);
        let sorted = b.sorted();
        let indexes: Vec<u64> = sorted.iter().map(|(i, _)| *i).collect();
        assert_eq!(indexes, vec![0, 15, 16]);
        assert_eq!(sorted[1].1.stacks[&1].gpu_busy, 1);
        assert_eq!(b.width_secs(), 0.125);
    }

    #[test]
    fn too_many_buckets_merge_pairwise_and_keep_every_sample() {
        let mut b = TimeBuckets::new(Timestamp(0));
        let n = (MAX_BUCKETS as u64) * 3;
        for i in 0..n {
            b.count_stack(
                Timestamp(i * BASE_BUCKET_NANOS),
                (i % 3) as u32,
                GpuTag::Busy,
            );
            b.count_thread(Timestamp(i * BASE_BUCKET_NANOS), 1, 7, "MainThread", true);
        }
        assert!(b.len() <= MAX_BUCKETS, "{} buckets", b.len());
        assert_eq!(b.width_nanos(), BASE_BUCKET_NANOS * 4);
        let total: u64 = b
            .sorted()
            .iter()
            .flat_map(|(_, bucket)| bucket.stacks.values())
            .map(BucketCounts::all)
            .sum();
        assert_eq!(total, n);
        assert_eq!(b.lanes()[0].active, n);
    }

    #[test]
    fn too_many_entries_merge_too_until_one_bucket_holds_them() {
        let mut b = TimeBuckets::new(Timestamp(0));
        // A new stack in every bucket: merging neighbours does not shrink the entries, so
        // the width doubles until they fit or one bucket is left.
        let n = MAX_ENTRIES as u64 + 10;
        for i in 0..n {
            b.count_stack(
                Timestamp(i * BASE_BUCKET_NANOS / 64),
                i as u32,
                GpuTag::Idle,
            );
        }
        assert!(b.len() <= 2, "{} buckets", b.len());
        assert!(b.entries() as u64 == n, "{} entries", b.entries());
    }

    #[test]
    fn growth_merges_with_its_bucket_and_keeps_every_byte() {
        let mut b = TimeBuckets::new(Timestamp(0));
        let n = (MAX_BUCKETS as u64) * 3;
        for i in 0..n {
            let time = Timestamp(i * BASE_BUCKET_NANOS);
            b.count_stack(time, 1, GpuTag::Busy);
            b.count_growth(time, (i % 2) as u32, 1_000 + i);
        }
        assert!(b.len() <= MAX_BUCKETS);
        let growth: u64 = b
            .sorted()
            .iter()
            .flat_map(|(_, bucket)| bucket.growth.values())
            .sum();
        assert_eq!(growth, (0..n).map(|i| 1_000 + i).sum::<u64>());
        let entries: usize = b
            .sorted()
            .iter()
            .map(|(_, bucket)| bucket.stacks.len() + bucket.growth.len())
            .sum();
        assert_eq!(b.entries(), entries);
    }

    #[test]
    fn threads_past_the_lane_cap_share_one_lane() {
        let mut b = TimeBuckets::new(Timestamp(0));
        for tid in 0..(MAX_LANES as u64 + 50) {
            b.count_thread(Timestamp(0), 1, tid, &format!("t{tid}"), tid % 2 == 0);
        }
        assert_eq!(b.lanes().len(), MAX_LANES);
        let other = b.lanes().last().map(|l| l.name.clone());
        assert_eq!(other.as_deref(), Some(crate::fold::OTHER_THREADS));
        let sum: u64 = b.lanes().iter().map(|l| l.active + l.idle).sum();
        assert_eq!(sum, MAX_LANES as u64 + 50);
    }
}
