//! The GPU timeline in memory: readings in time order, at a resolution that coarsens with age
//! so that memory stays bounded however long the recording (the full resolution is on disk).
//!
//! Each device keeps at most [`crate::Limits::max_gpu_points`] points. When a device passes
//! it, the older half of its points is halved: adjacent pairs are merged into one point at the
//! later time. Repeated, this leaves recent readings at full resolution (always at least the
//! newest half) and older ones ever coarser, a log-like history.
//!
//! A point stands for the interval since the device's previous point (the rule stack samples
//! are tagged by), so a merged point's values are the means of its two readings weighted by the
//! intervals they covered: the time-weighted mean utilization over the timeline is unchanged by
//! merging. The device's first point is never merged: its time opens the first interval.

use std::collections::BTreeMap;

use stackscope_event::{GpuSample, Timestamp};

use super::device_stats::{DeviceStats, GpuDeviceSummary};
use super::mean::{UtilizationMean, UtilizationResult};

#[derive(Debug, Default)]
struct Device {
    /// Points of this device in `samples`.
    points: usize,
    /// Figures over every reading, not just the points kept.
    stats: DeviceStats,
}

#[derive(Debug)]
pub struct GpuTimeline {
    max_points: usize,
    idle_below: f32,
    samples: Vec<GpuSample>,
    devices: BTreeMap<u32, Device>,
    /// Readings merged into coarser points so far.
    merged: u64,
    /// The mean and idle share over every reading, which merged points would blur.
    mean: UtilizationMean,
}

impl GpuTimeline {
    pub fn new(max_points: usize, idle_below: f32) -> GpuTimeline {
        GpuTimeline {
            // A first point and at least one pair to merge.
            max_points: max_points.max(4),
            idle_below,
            samples: Vec::new(),
            devices: BTreeMap::new(),
            merged: 0,
            mean: UtilizationMean::new(idle_below),
        }
    }

    /// Adds a sample at its place in time. Devices are polled one after the other, so a batch
    /// from one device can end before the previous batch of another; samples of equal time keep
    /// their arrival order.
    pub fn push(&mut self, sample: GpuSample) {
        let device = self.devices.entry(sample.device).or_default();
        device.stats.add(&sample, self.idle_below);
        device.points += 1;
        if let Some(u) = sample.utilization {
            self.mean.add(sample.device, sample.time.as_nanos(), u);
        }
        let over = device.points > self.max_points;
        let index = sample.device;
        let late = self
            .samples
            .last()
            .is_some_and(|last| last.time > sample.time);
        if late {
            let at = self.samples.partition_point(|s| s.time <= sample.time);
            self.samples.insert(at, sample);
        } else {
            self.samples.push(sample);
        }
        if over {
            self.compact(index);
        }
    }

    /// Merges adjacent pairs among the older half of `device`'s points, its first point aside.
    /// Costs one pass over the timeline, once every `max_points / 4` readings of the device.
    fn compact(&mut self, device: u32) {
        let Some(state) = self.devices.get_mut(&device) else {
            return;
        };
        // An even number of points after the first, so that every pair is complete.
        let older = (state.points / 2) & !1;
        state.points -= older / 2;
        self.merged += older as u64 / 2;
        let old = std::mem::take(&mut self.samples);
        let mut kept = Vec::with_capacity(old.len());
        let mut index = 0usize;
        let mut previous: Option<Timestamp> = None;
        let mut held: Option<(GpuSample, u64)> = None;
        for sample in old {
            if sample.device != device {
                kept.push(sample);
                continue;
            }
            // The interval this point covers: since the device's previous point.
            let span = previous.map_or(0, |p| sample.time.0.saturating_sub(p.0));
            previous = Some(sample.time);
            index += 1;
            if index == 1 || index > older + 1 {
                kept.push(sample);
                continue;
            }
            match held.take() {
                None => held = Some((sample, span)),
                Some((first, first_span)) => kept.push(merge(&first, first_span, &sample, span)),
            }
        }
        // Unreachable with an even count, but a reading is never silently lost.
        if let Some((first, _)) = held {
            kept.push(first);
        }
        self.samples = kept;
    }

    pub fn samples(&self) -> &[GpuSample] {
        &self.samples
    }

    pub fn is_empty(&self) -> bool {
        self.devices.is_empty()
    }

    /// The device indices present, ascending.
    pub fn devices(&self) -> Vec<u32> {
        self.devices.keys().copied().collect()
    }

    /// Points kept for `device`.
    pub fn points(&self, device: u32) -> usize {
        self.devices.get(&device).map_or(0, |d| d.points)
    }

    /// Readings received from `device`, merged or not.
    pub fn readings(&self, device: u32) -> u64 {
        self.devices.get(&device).map_or(0, |d| d.stats.readings())
    }

    /// Readings merged into coarser points so far; 0 while everything is at full resolution.
    pub fn merged(&self) -> u64 {
        self.merged
    }

    /// Makes the mean wait for `device` from the start, even before its first reading.
    pub fn expect_device(&mut self, device: u32) {
        self.mean.expect_device(device);
    }

    /// Leaves the job's start-up (the time before the first busy burst) out of
    /// [`utilization_mean`](GpuTimeline::utilization_mean).
    pub fn leave_out_startup(&mut self) {
        self.mean.leave_out_startup();
    }

    /// Where start-up ended (the first busy burst's start), once it has; `None` while it has not
    /// or where start-up is not left out.
    pub fn startup_end(&self) -> Option<Timestamp> {
        self.mean.startup_end().map(Timestamp)
    }

    /// Gives up leaving start-up out: no burst came.
    pub fn abandon_startup(&mut self) {
        self.mean.abandon_startup();
    }

    /// The time-weighted mean utilization of each device and of all devices over every reading
    /// (start-up left out where it is), and the share of time the devices' mean was below the
    /// idle threshold; `None` without utilization readings.
    pub fn utilization_mean(&self) -> Option<UtilizationResult> {
        self.mean.result()
    }

    /// The figures of every device over all its readings, with its mean utilization from
    /// `utilization` (this timeline's [`GpuTimeline::utilization_mean`]); `name` and `uuid` left
    /// empty.
    pub fn device_summaries(
        &self,
        utilization: Option<&UtilizationResult>,
    ) -> Vec<GpuDeviceSummary> {
        self.devices
            .iter()
            .map(|(&index, device)| {
                let mean = utilization.and_then(|u| u.devices.get(&index).copied());
                device.stats.summary(index, mean)
            })
            .collect()
    }

    /// One device's utilization points, in time order, as `(nanoseconds, percent)`.
    pub fn utilization_series(&self, device: u32) -> Vec<(u64, f32)> {
        self.samples
            .iter()
            .filter(|s| s.device == device)
            .filter_map(|s| s.utilization.map(|u| (s.time.as_nanos(), u)))
            .collect()
    }
}

/// The processes either reading listed, once each; `None` when neither had a list.
fn union(a: Option<&[u32]>, b: Option<&[u32]>) -> Option<Vec<u32>> {
    if a.is_none() && b.is_none() {
        return None;
    }
    let mut pids: Vec<u32> = a.into_iter().chain(b).flatten().copied().collect();
    pids.sort_unstable();
    pids.dedup();
    Some(pids)
}

/// One point for two adjacent readings of a device: at the later time, each metric the mean of
/// the two weighted by the intervals they covered (equal weights when neither is known), total
/// memory and each process's GPU memory the later one, throttle reasons any of either.
fn merge(a: &GpuSample, span_a: u64, b: &GpuSample, span_b: u64) -> GpuSample {
    let (wa, wb) = if span_a == 0 && span_b == 0 {
        (1.0, 1.0)
    } else {
        (span_a as f64, span_b as f64)
    };
    let mean = |x: Option<f64>, y: Option<f64>| match (x, y) {
        (Some(x), Some(y)) => Some((x * wa + y * wb) / (wa + wb)),
        (x, y) => x.or(y),
    };
    let mean_f32 =
        |x: Option<f32>, y: Option<f32>| mean(x.map(f64::from), y.map(f64::from)).map(|v| v as f32);
    GpuSample {
        time: b.time,
        device: b.device,
        utilization: mean_f32(a.utilization, b.utilization),
        memory_utilization: mean_f32(a.memory_utilization, b.memory_utilization),
        memory_used_bytes: mean(
            a.memory_used_bytes.map(|v| v as f64),
            b.memory_used_bytes.map(|v| v as f64),
        )
        .map(|v| v.round() as u64),
        memory_total_bytes: b.memory_total_bytes.or(a.memory_total_bytes),
        power_watts: mean_f32(a.power_watts, b.power_watts),
        sm_clock_mhz: mean(a.sm_clock_mhz.map(f64::from), b.sm_clock_mhz.map(f64::from))
            .map(|v| v.round() as u32),
        throttle_reasons: match (a.throttle_reasons, b.throttle_reasons) {
            (Some(x), Some(y)) => Some(x | y),
            (x, y) => x.or(y),
        },
        process_utilization: mean_f32(a.process_utilization, b.process_utilization),
        sm_active: mean_f32(a.sm_active, b.sm_active),
        sm_occupancy: mean_f32(a.sm_occupancy, b.sm_occupancy),
        tensor_active: mean_f32(a.tensor_active, b.tensor_active),
        dram_bw: mean_f32(a.dram_bw, b.dram_bw),
        compute_pids: union(a.compute_pids.as_deref(), b.compute_pids.as_deref()),
        // The later reading, as for total memory: a process's GPU memory is a level, not a
        // rate to average.
        process_memory: if b.process_memory.is_empty() {
            a.process_memory.clone()
        } else {
            b.process_memory.clone()
        },
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// The time-weighted mean of the points kept, as if they were the readings.
    fn mean_of_points(timeline: &GpuTimeline, device: u32) -> f64 {
        let mut mean = UtilizationMean::new(30.0);
        for (t, u) in timeline.utilization_series(device) {
            mean.add(device, t, u);
        }
        mean.result().map_or(f64::NAN, |r| r.mean)
    }

    fn at(t: u64, device: u32) -> GpuSample {
        GpuSample {
            time: Timestamp(t),
            device,
            utilization: Some(t as f32),
            ..GpuSample::default()
        }
    }

    #[test]
    fn late_samples_are_inserted_in_time_order() {
        let mut timeline = GpuTimeline::new(100, 30.0);
        for (t, d) in [(10, 0), (20, 0), (30, 0), (15, 1), (25, 1), (35, 1)] {
            timeline.push(at(t, d));
        }
        let times: Vec<u64> = timeline.samples().iter().map(|s| s.time.0).collect();
        assert_eq!(times, vec![10, 15, 20, 25, 30, 35]);
        assert_eq!(timeline.devices(), vec![0, 1]);
        assert_eq!(
            timeline.utilization_series(1),
            vec![(15, 15.0), (25, 25.0), (35, 35.0)]
        );
        assert_eq!(timeline.merged(), 0);
    }

    #[test]
    fn merging_weights_by_the_interval_covered() {
        let a = GpuSample {
            time: Timestamp(30),
            utilization: Some(0.0),
            throttle_reasons: Some(1),
            memory_total_bytes: Some(8),
            ..GpuSample::default()
        };
        let b = GpuSample {
            time: Timestamp(40),
            utilization: Some(90.0),
            throttle_reasons: Some(4),
            ..GpuSample::default()
        };
        // a covered 20 ns, b 10 ns.
        let m = merge(&a, 20, &b, 10);
        assert_eq!(m.time, Timestamp(40));
        assert_eq!(m.utilization, Some(30.0));
        assert_eq!(m.throttle_reasons, Some(5));
        assert_eq!(m.memory_total_bytes, Some(8));
        assert_eq!(merge(&a, 0, &b, 0).utilization, Some(45.0));
        // A GPM reading on one side only stays as it was.
        let c = GpuSample {
            sm_active: Some(12.0),
            ..b.clone()
        };
        assert_eq!(merge(&a, 20, &c, 10).sm_active, Some(12.0));
    }

    #[test]
    fn points_stay_bounded_and_the_mean_stays_right() {
        let max = 1_000;
        let mut timeline = GpuTimeline::new(max, 30.0);
        let step = 150_000_000u64;
        // Two devices, a sawtooth and an irregular square wave, a million readings in all.
        for k in 1..=500_000u64 {
            let t = k * step;
            let saw = (k % 100) as f32;
            let square = if (k / 7) % 3 == 0 { 95.0 } else { 5.0 };
            timeline.push(GpuSample {
                time: Timestamp(t),
                device: 0,
                utilization: Some(saw),
                ..GpuSample::default()
            });
            timeline.push(GpuSample {
                time: Timestamp(t + step / 3),
                device: 1,
                utilization: Some(square),
                ..GpuSample::default()
            });
            assert!(timeline.points(0) <= max && timeline.points(1) <= max);
        }
        assert!(timeline.samples().len() <= 2 * max);
        assert_eq!(timeline.readings(0), 500_000);
        let times: Vec<u64> = timeline.samples().iter().map(|s| s.time.0).collect();
        assert!(
            times.windows(2).all(|w| w[0] <= w[1]),
            "still in time order"
        );

        // The newest readings are still there as read.
        let series = timeline.utilization_series(0);
        let last: Vec<f32> = series[series.len() - 3..].iter().map(|r| r.1).collect();
        assert_eq!(last, vec![98.0, 99.0, 0.0]);

        // Time-weighted mean of each device over the kept points, against the exact one:
        // whoever reads the timeline (the CSV, the chart) sees the right level.
        for (device, exact) in [(0u32, 49.5f64), (1, 35.0)] {
            let mean = mean_of_points(&timeline, device);
            assert!((mean - exact).abs() < 0.05, "device {device}: {mean}");
        }
        // The summary's figures come from every reading, not the points.
        let result = timeline.utilization_mean().expect("a mean");
        assert!(
            (result.mean - (49.5 + 35.0) / 2.0).abs() < 0.01,
            "{result:?}"
        );
        assert!(result.idle_share > 0.0, "{result:?}");
        // The per-device figures count every reading; each device's mean is the result's.
        let summaries = timeline.device_summaries(Some(&result));
        assert_eq!(summaries[0].samples, 500_000);
        let device_mean = summaries[0].mean_utilization.unwrap_or_default();
        assert!((device_mean - 49.5).abs() < 0.01, "{device_mean}");
        assert_eq!(summaries[0].mean_utilization, Some(result.devices[&0]));
        assert_eq!(summaries[0].max, Some(99.0));
    }
}
