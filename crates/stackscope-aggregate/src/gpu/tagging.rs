//! Tagging stack samples with the GPU's state at the instant they were taken: the one
//! definition of "GPU state at instant t" in stackscope. The recording's summary and
//! flamegraph split, the `export` trace, `top`'s table, `watch` and the metrics endpoint all ask
//! a [`GpuTagger`]; it is generic over what it holds, so each keeps its own payload (an
//! interned stack, a whole sample, nothing) and gets it back tagged, in the order it was held.
//!
//! A GPU reading with utilization at time T describes the interval since that device's previous
//! reading, (previous, T]. NVML hands its readings over late (the poller drains the driver's ring
//! about twice a second), so a stack sample is held back until every device has a reading at or
//! after it, and only then tagged from the reading that covers it. Samples wait at most
//! [`HOLD_LIMIT_NANOS`] behind the newest event, so a GPU that stops reporting delays nothing for
//! long. The state at an instant is the mean utilization of the devices with a reading covering
//! it (or, within [`REACH_NANOS`], the nearest one) against `--idle-below`.
//!
//! Where the GPU has GPM, its SM activity readings (each on the newest reading of a poll) are
//! held the same way, and a busy sample is tagged [`GpuTag::BusyLowSm`] when SM activity at its
//! instant is low against utilization (`state.rs`).
//!
//! # Why these rules (and not `top`'s former ones)
//!
//! `top` once had its own copy with a 1.5 s hold, a 200k cap and devices that had not reported
//! skipped; the recording's rules won, so that `top` and `summary.json` agree on one run:
//!
//! - **Hold 5 s.** Readings reach the channel after the stacks they cover, by the poller's
//!   drain interval (500 ms) and more on a loaded machine; a sample released before its covering
//!   reading arrives is tagged from the previous interval's, so a short hold makes the tag depend
//!   on the machine's load. 5 s covers the delay with room. While readings flow no sample waits
//!   that long (`top` shows a sample about one drain interval late); only a device that stopped
//!   reporting makes samples wait out the limit.
//! - **Cap 500k held samples**, about 5 s of 100 threads at 1000 Hz: past it the oldest is
//!   tagged before its readings are in ([`GpuTagger::forced`]). This is the one point where two
//!   holders of the same events can differ, since it counts what they hold: `top` also holds
//!   idle-thread samples and so reaches the cap sooner. Real runs do not come near it.
//! - **Which devices are awaited**: every device that has sent a reading, and those named by
//!   [`GpuTagger::expect_device`] (a replay names what the recording named); a device that never
//!   reports utilization (NOT_SUPPORTED) holds nothing back. No holder learns of devices outside
//!   the event stream (the poller's current device list only names `top`'s GPU lines): a tag that
//!   depended on when a side channel was read could not be replayed from the sample log.

use std::collections::{BTreeMap, VecDeque};

use stackscope_event::{GpuSample, Timestamp};

use super::state::GpuTag;

/// How long a stack sample may wait for the GPU readings that cover it.
pub const HOLD_LIMIT_NANOS: u64 = 5_000_000_000;
/// A hard cap on held samples, so a flood of threads cannot grow the queue without bound.
pub const MAX_PENDING: usize = 500_000;
/// A hard cap on one device's held readings. Trimming by time keeps a few seconds' worth (a
/// few dozen); this bounds a device whose readings all carry one timestamp, which time never
/// trims.
pub const MAX_READINGS_PER_DEVICE: usize = 10_000;
/// How far a reading reaches beyond its neighbours: before a device's first reading and after
/// its last. Past this the device is taken to have no data, so that a poller that stopped does
/// not colour hours of samples with its last value.
pub const REACH_NANOS: u64 = 2_000_000_000;

#[derive(Debug, Clone)]
struct Pending<T> {
    time: Timestamp,
    item: T,
}

/// Holds items stamped with a time until the GPU state at that time is known, then hands each
/// back with its [`GpuTag`]. `T` is what the holder keeps per sample (the aggregate's interned
/// stack, `top`'s whole sample, nothing at all for `watch`).
#[derive(Debug, Clone)]
pub struct GpuTagger<T> {
    idle_below: f32,
    /// Recent utilization readings per device, in time order.
    readings: BTreeMap<u32, VecDeque<(Timestamp, f32)>>,
    /// Recent GPM SM activity readings per device, in time order.
    sm_readings: BTreeMap<u32, VecDeque<(Timestamp, f32)>>,
    pending: VecDeque<Pending<T>>,
    newest: Timestamp,
    /// Samples tagged before their readings arrived because the queue was full.
    forced: u64,
    /// Readings dropped by [`MAX_READINGS_PER_DEVICE`].
    dropped_readings: u64,
}

impl<T> GpuTagger<T> {
    pub fn new(idle_below: f32) -> GpuTagger<T> {
        GpuTagger {
            idle_below,
            readings: BTreeMap::new(),
            sm_readings: BTreeMap::new(),
            pending: VecDeque::new(),
            newest: Timestamp(0),
            forced: 0,
            dropped_readings: 0,
        }
    }

    /// Notes the time of any event, the clock against which held samples age.
    pub fn observe(&mut self, time: Timestamp) {
        self.newest = self.newest.max(time);
    }

    /// Takes one GPU sample: its utilization and GPM SM activity where it has them, else
    /// only its time.
    pub fn add_gpu(&mut self, sample: &GpuSample) {
        match sample.utilization {
            Some(u) => self.add_reading(sample.device, sample.time, u),
            None => self.observe(sample.time),
        }
        if let Some(sm) = sample.sm_active {
            self.add_sm_reading(sample.device, sample.time, sm);
        }
    }

    /// A utilization reading (percent) of `device`, covering the time since its previous one.
    pub fn add_reading(&mut self, device: u32, time: Timestamp, utilization: f32) {
        self.observe(time);
        let series = self.readings.entry(device).or_default();
        if series.back().is_some_and(|&(last, _)| last > time) {
            let at = series.partition_point(|&(t, _)| t <= time);
            series.insert(at, (time, utilization));
        } else {
            series.push_back((time, utilization));
        }
        while series.len() > MAX_READINGS_PER_DEVICE {
            series.pop_front();
            self.dropped_readings += 1;
        }
    }

    /// A GPM SM activity reading (percent) of `device`, covering the time since its previous one.
    pub fn add_sm_reading(&mut self, device: u32, time: Timestamp, sm_active: f32) {
        self.observe(time);
        let series = self.sm_readings.entry(device).or_default();
        let at = series.partition_point(|&(t, _)| t <= time);
        series.insert(at, (time, sm_active));
        while series.len() > MAX_READINGS_PER_DEVICE {
            series.pop_front();
        }
    }

    /// Makes samples wait for `device` even before its first reading.
    pub fn expect_device(&mut self, device: u32) {
        self.readings.entry(device).or_default();
    }

    /// Holds `item`, taken at `time`, until the GPU state at `time` is known.
    pub fn hold(&mut self, time: Timestamp, item: T) {
        self.observe(time);
        self.pending.push_back(Pending { time, item });
    }

    pub fn pending_len(&self) -> usize {
        self.pending.len()
    }

    /// Readings held across devices.
    pub fn readings_len(&self) -> usize {
        self.readings.values().map(VecDeque::len).sum()
    }

    pub fn forced(&self) -> u64 {
        self.forced
    }

    pub fn dropped_readings(&self) -> u64 {
        self.dropped_readings
    }

    /// Hands back, tagged and in the order they were held, the held items whose readings have
    /// all arrived or that waited too long.
    pub fn release(&mut self, mut out: impl FnMut(Timestamp, T, GpuTag)) {
        while let Some(front) = self.pending.front() {
            let waited_too_long = self.newest.0.saturating_sub(front.time.0) > HOLD_LIMIT_NANOS;
            let ready = self.all_devices_reached(front.time) || waited_too_long;
            if !ready {
                if self.pending.len() <= MAX_PENDING {
                    break;
                }
                self.forced += 1;
            }
            let Some(p) = self.pending.pop_front() else {
                break;
            };
            let tag = self.tag_at(p.time);
            out(p.time, p.item, tag);
        }
        self.trim();
    }

    /// Tags everything still held with what is known: the end of the recording.
    pub fn flush(&mut self, mut out: impl FnMut(Timestamp, T, GpuTag)) {
        while let Some(p) = self.pending.pop_front() {
            let tag = self.tag_at(p.time);
            out(p.time, p.item, tag);
        }
        self.trim();
    }

    fn all_devices_reached(&self, time: Timestamp) -> bool {
        let reached = |series: &VecDeque<(Timestamp, f32)>| {
            series.back().is_some_and(|&(last, _)| last >= time)
        };
        // A device with GPM sends its SM activity on the newest reading of each poll, after
        // the poll's older utilization readings: wait for it too, or a sample would take the
        // previous interval's SM activity.
        !self.readings.is_empty()
            && self.readings.values().all(reached)
            && self.sm_readings.values().all(reached)
    }

    /// The state at `time` from the mean utilization of the devices that have a value there,
    /// with what is known now: final once [`GpuTagger::release`] would hand a sample at `time`
    /// back, else a best guess from the nearest earlier readings.
    pub fn tag_at(&self, time: Timestamp) -> GpuTag {
        match self.utilization_at(time) {
            Some(u) => GpuTag::of(f64::from(u), f64::from(self.idle_below), || {
                self.sm_active_at(time).map(f64::from)
            }),
            None => GpuTag::Unknown,
        }
    }

    /// The mean utilization and SM activity (where there is GPM) over the readings it holds
    /// from `since` on (the last few seconds: what a hang report says of the GPU while nothing
    /// moved); `None` without a utilization reading there.
    pub fn recent_means(&self, since: Timestamp) -> Option<(f64, Option<f64>)> {
        let mean = |series: &BTreeMap<u32, VecDeque<(Timestamp, f32)>>| {
            let values: Vec<f64> = series
                .values()
                .flat_map(|s| s.iter().filter(|r| r.0 >= since).map(|r| f64::from(r.1)))
                .collect();
            (!values.is_empty()).then(|| values.iter().sum::<f64>() / values.len() as f64)
        };
        Some((mean(&self.readings)?, mean(&self.sm_readings)))
    }

    /// The mean SM activity at `time` of the devices with a GPM reading covering it.
    fn sm_active_at(&self, time: Timestamp) -> Option<f32> {
        let values: Vec<f32> = self
            .sm_readings
            .values()
            .filter_map(|series| device_utilization_at(series, time))
            .collect();
        (!values.is_empty()).then(|| values.iter().sum::<f32>() / values.len() as f32)
    }

    /// The mean utilization at `time` of the devices with a reading covering it.
    pub fn utilization_at(&self, time: Timestamp) -> Option<f32> {
        let values: Vec<f32> = self
            .readings
            .values()
            .filter_map(|series| device_utilization_at(series, time))
            .collect();
        if values.is_empty() {
            None
        } else {
            Some(values.iter().sum::<f32>() / values.len() as f32)
        }
    }

    /// Forgets readings no held or future sample can need: those before the reading covering
    /// the oldest held sample and older than the hold limit.
    fn trim(&mut self) {
        let horizon = self.newest.0.saturating_sub(HOLD_LIMIT_NANOS);
        let keep_from = self
            .pending
            .front()
            .map_or(horizon, |p| p.time.0.min(horizon));
        for series in self
            .readings
            .values_mut()
            .chain(self.sm_readings.values_mut())
        {
            // Keep one reading before the bound: it is the "nearest earlier" fallback.
            let first_needed = series.partition_point(|&(t, _)| t.0 < keep_from);
            let drop = first_needed.saturating_sub(1);
            series.drain(..drop);
        }
    }
}

/// The covering reading (the first at or after `time`), else the nearest earlier one, each only
/// within [`REACH_NANOS`] where there is no neighbour to bound it.
fn device_utilization_at(series: &VecDeque<(Timestamp, f32)>, time: Timestamp) -> Option<f32> {
    let at = series.partition_point(|&(t, _)| t < time);
    if let Some(&(t, u)) = series.get(at) {
        if at > 0 || t.0 - time.0 <= REACH_NANOS {
            return Some(u);
        }
    }
    if at > 0 {
        let (t, u) = series[at - 1];
        if time.0 - t.0 <= REACH_NANOS {
            return Some(u);
        }
    }
    None
}

#[cfg(test)]
mod tests {
    use super::*;

    const MS: u64 = 1_000_000;

    fn collect(tagger: &mut GpuTagger<u32>, finish: bool) -> Vec<(u32, GpuTag)> {
        let mut out = Vec::new();
        if finish {
            tagger.flush(|_, s, t| out.push((s, t)));
        } else {
            tagger.release(|_, s, t| out.push((s, t)));
        }
        out
    }

    #[test]
    fn sample_waits_for_the_reading_that_covers_it() {
        let mut tagger = GpuTagger::new(30.0);
        tagger.add_reading(0, Timestamp(100 * MS), 90.0);
        tagger.hold(Timestamp(150 * MS), 7);
        assert!(
            collect(&mut tagger, false).is_empty(),
            "no reading after it yet"
        );
        // The reading at 200 ms covers (100, 200] and says idle, although the latest reading
        // known when the stack arrived said busy.
        tagger.add_reading(0, Timestamp(200 * MS), 5.0);
        assert_eq!(collect(&mut tagger, false), vec![(7, GpuTag::Idle)]);
    }

    #[test]
    fn reading_at_the_same_instant_covers_it() {
        let mut tagger = GpuTagger::new(30.0);
        tagger.add_reading(0, Timestamp(100 * MS), 10.0);
        tagger.add_reading(0, Timestamp(200 * MS), 80.0);
        tagger.hold(Timestamp(100 * MS), 1);
        tagger.hold(Timestamp(101 * MS), 2);
        assert_eq!(
            collect(&mut tagger, false),
            vec![(1, GpuTag::Idle), (2, GpuTag::Busy)]
        );
    }

    #[test]
    fn busy_with_low_sm_activity_is_its_own_tag() {
        let mut tagger = GpuTagger::new(30.0);
        tagger.add_reading(0, Timestamp(100 * MS), 95.0);
        tagger.add_reading(0, Timestamp(200 * MS), 95.0);
        tagger.add_sm_reading(0, Timestamp(100 * MS), 15.0);
        tagger.add_reading(0, Timestamp(300 * MS), 95.0);
        tagger.add_sm_reading(0, Timestamp(300 * MS), 80.0);
        tagger.add_reading(0, Timestamp(400 * MS), 5.0);
        tagger.add_sm_reading(0, Timestamp(400 * MS), 1.0);
        for (i, t) in [50u64, 250, 350].into_iter().enumerate() {
            tagger.hold(Timestamp(t * MS), i as u32);
        }
        tagger.add_reading(0, Timestamp(500 * MS), 95.0);
        tagger.hold(Timestamp(450 * MS), 3);
        assert_eq!(
            collect(&mut tagger, false),
            vec![(0, GpuTag::BusyLowSm), (1, GpuTag::Busy), (2, GpuTag::Idle)]
        );
        // Utilization has reached sample 3 but SM activity has not: it waits for the poll's
        // GPM reading rather than take the previous interval's.
        tagger.add_sm_reading(0, Timestamp(500 * MS), 10.0);
        assert_eq!(collect(&mut tagger, false), vec![(3, GpuTag::BusyLowSm)]);
    }

    #[test]
    fn every_device_must_report_and_the_mean_decides() {
        let mut tagger = GpuTagger::new(30.0);
        tagger.add_reading(0, Timestamp(100 * MS), 10.0);
        tagger.add_reading(1, Timestamp(90 * MS), 70.0);
        tagger.hold(Timestamp(95 * MS), 1);
        assert!(
            collect(&mut tagger, false).is_empty(),
            "device 1 not past it"
        );
        // Mean of 10 and 40 is 25: idle.
        tagger.add_reading(1, Timestamp(120 * MS), 40.0);
        assert_eq!(collect(&mut tagger, false), vec![(1, GpuTag::Idle)]);
        // Mean of 10 and 60 is 35: busy.
        tagger.add_reading(0, Timestamp(200 * MS), 10.0);
        tagger.add_reading(1, Timestamp(200 * MS), 60.0);
        tagger.hold(Timestamp(150 * MS), 2);
        assert_eq!(collect(&mut tagger, false), vec![(2, GpuTag::Busy)]);
    }

    #[test]
    fn samples_are_released_after_the_hold_limit_with_what_is_known() {
        let mut tagger = GpuTagger::new(30.0);
        tagger.add_reading(0, Timestamp(1_000 * MS), 12.0);
        tagger.hold(Timestamp(1_500 * MS), 1);
        tagger.hold(Timestamp(6_000 * MS), 2);
        assert!(collect(&mut tagger, false).is_empty());
        tagger.hold(Timestamp(6_600 * MS), 3);
        // Sample 1 is now over 5 s old: tagged from the nearest earlier reading.
        assert_eq!(collect(&mut tagger, false), vec![(1, GpuTag::Idle)]);
        // At the end, sample 2 and 3 are too far past the last reading to borrow it.
        assert_eq!(
            collect(&mut tagger, true),
            vec![(2, GpuTag::Unknown), (3, GpuTag::Unknown)]
        );
    }

    #[test]
    fn no_gpu_data_means_unknown() {
        let mut tagger = GpuTagger::new(30.0);
        tagger.hold(Timestamp(1), 4);
        assert!(collect(&mut tagger, false).is_empty());
        assert_eq!(collect(&mut tagger, true), vec![(4, GpuTag::Unknown)]);
    }

    #[test]
    fn first_reading_reaches_back_only_so_far() {
        let mut tagger = GpuTagger::new(30.0);
        tagger.add_reading(0, Timestamp(10_000 * MS), 90.0);
        tagger.hold(Timestamp(1_000 * MS), 1);
        tagger.hold(Timestamp(9_500 * MS), 2);
        assert_eq!(
            collect(&mut tagger, false),
            vec![(1, GpuTag::Unknown), (2, GpuTag::Busy)]
        );
    }

    #[test]
    fn old_readings_are_trimmed() {
        let mut tagger = GpuTagger::new(30.0);
        for i in 0..1_000u64 {
            tagger.add_reading(0, Timestamp(i * 100 * MS), 50.0);
            tagger.hold(Timestamp(i * 100 * MS), 0);
            let _ = collect(&mut tagger, false);
        }
        let kept = tagger.readings.get(&0).map_or(0, VecDeque::len);
        assert!(kept <= 52, "kept {kept} readings");
        assert_eq!(tagger.pending_len(), 0);
    }

    #[test]
    fn state_is_bounded_when_time_stands_still() {
        let mut tagger = GpuTagger::new(30.0);
        tagger.expect_device(0);
        tagger.expect_device(1);
        // Device 1 never reports and the clock never moves: nothing is released by time.
        for _ in 0..(MAX_PENDING + 1_000) {
            tagger.add_reading(0, Timestamp(7), 50.0);
            tagger.hold(Timestamp(8), 1);
            let _ = collect(&mut tagger, false);
        }
        assert!(tagger.pending_len() <= MAX_PENDING);
        assert!(tagger.readings_len() <= MAX_READINGS_PER_DEVICE);
        assert_eq!(tagger.forced(), 1_000);
        assert!(tagger.dropped_readings() > 0);
    }
}
