//! Statistics of the GPU timeline: per-device figures and the utilization resampled on a grid.

use serde::{Deserialize, Serialize};

use stackscope_event::GpuSample;

const MIB: f64 = 1024.0 * 1024.0;

/// One device's figures over the recording, as in `summary.json`.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct GpuDeviceSummary {
    pub index: u32,
    pub name: String,
    pub uuid: String,
    /// GPU readings of this device (of any metric).
    pub samples: u64,
    pub mean_utilization: Option<f64>,
    pub p50: Option<f64>,
    pub p90: Option<f64>,
    pub p99: Option<f64>,
    pub min: Option<f64>,
    pub max: Option<f64>,
    /// Share of utilization readings below the idle threshold, 0 to 1.
    pub idle_share: Option<f64>,
    pub mean_memory_used_mib: Option<f64>,
    pub memory_total_mib: Option<f64>,
    pub mean_power_watts: Option<f64>,
}

/// Figures of one device's readings; `name` and `uuid` are left empty for the caller.
pub fn device_summary(samples: &[GpuSample], device: u32, idle_below: f32) -> GpuDeviceSummary {
    let readings: Vec<&GpuSample> = samples.iter().filter(|s| s.device == device).collect();
    let mut utilization: Vec<f64> = readings
        .iter()
        .filter_map(|s| s.utilization.map(f64::from))
        .collect();
    utilization.sort_by(f64::total_cmp);
    let idle = utilization
        .iter()
        .filter(|&&u| u < f64::from(idle_below))
        .count();
    let memory_used: Vec<f64> = readings
        .iter()
        .filter_map(|s| s.memory_used_bytes.map(|b| b as f64 / MIB))
        .collect();
    let power: Vec<f64> = readings
        .iter()
        .filter_map(|s| s.power_watts.map(f64::from))
        .collect();
    GpuDeviceSummary {
        index: device,
        name: String::new(),
        uuid: String::new(),
        samples: readings.len() as u64,
        mean_utilization: mean(&utilization),
        p50: percentile(&utilization, 50.0),
        p90: percentile(&utilization, 90.0),
        p99: percentile(&utilization, 99.0),
        min: utilization.first().copied(),
        max: utilization.last().copied(),
        idle_share: (!utilization.is_empty()).then(|| idle as f64 / utilization.len() as f64),
        mean_memory_used_mib: mean(&memory_used),
        memory_total_mib: readings
            .iter()
            .rev()
            .find_map(|s| s.memory_total_bytes)
            .map(|b| b as f64 / MIB),
        mean_power_watts: mean(&power),
    }
}

pub fn mean(values: &[f64]) -> Option<f64> {
    (!values.is_empty()).then(|| values.iter().sum::<f64>() / values.len() as f64)
}

/// Nearest-rank percentile of ascending `sorted` values: always one of the readings.
pub fn percentile(sorted: &[f64], p: f64) -> Option<f64> {
    if sorted.is_empty() {
        return None;
    }
    let rank = (p / 100.0 * sorted.len() as f64).ceil() as usize;
    sorted.get(rank.clamp(1, sorted.len()) - 1).copied()
}

/// The time-weighted mean utilization of all devices over their readings, and the share of that
/// time during which the mean was below `idle_below`.
///
/// Each reading covers the interval since the previous reading of any device (the rule stack
/// samples are tagged by), so the result is exact whatever the readings' spacing. A regular
/// grid would alias with a training loop whose step is a multiple of the grid step and report
/// whatever phase the grid happens to land on.
pub fn time_weighted(series: &[Vec<(u64, f32)>], idle_below: f32) -> Option<(f64, f64)> {
    let mut instants: Vec<u64> = series.iter().flatten().map(|r| r.0).collect();
    instants.sort_unstable();
    instants.dedup();
    let mut cursors = vec![0usize; series.len()];
    let (mut weighted, mut idle, mut total) = (0.0f64, 0.0f64, 0.0f64);
    for pair in instants.windows(2) {
        let (from, to) = (pair[0], pair[1]);
        let mut sum = 0.0f64;
        let mut count = 0u32;
        for (device, readings) in series.iter().enumerate() {
            let cursor = &mut cursors[device];
            while *cursor < readings.len() && readings[*cursor].0 < to {
                *cursor += 1;
            }
            if let Some(&(_, u)) = readings.get(*cursor).or_else(|| readings.last()) {
                sum += f64::from(u);
                count += 1;
            }
        }
        if count == 0 {
            continue;
        }
        let span = (to - from) as f64;
        let value = sum / f64::from(count);
        weighted += value * span;
        if value < f64::from(idle_below) {
            idle += span;
        }
        total += span;
    }
    if total > 0.0 {
        Some((weighted / total, idle / total))
    } else {
        // One instant: its readings are all there is.
        let values: Vec<f64> = series
            .iter()
            .filter_map(|r| r.first())
            .map(|r| f64::from(r.1))
            .collect();
        let m = mean(&values)?;
        Some((m, if m < f64::from(idle_below) { 1.0 } else { 0.0 }))
    }
}

/// The mean utilization of all devices on a regular grid from `start` to `end` (nanoseconds),
/// `step` apart. Each point takes each device's reading covering it (the first at or after it),
/// or its last reading past the end of its series, the same rule stack samples are tagged by.
/// `series` holds each device's `(nanoseconds, percent)` readings in time order.
pub fn resample_mean(series: &[Vec<(u64, f32)>], start: u64, end: u64, step: u64) -> Vec<f32> {
    if step == 0 || end < start || series.iter().all(Vec::is_empty) {
        return Vec::new();
    }
    let points = (end - start) / step + 1;
    let mut cursors = vec![0usize; series.len()];
    let mut grid = Vec::with_capacity(points as usize);
    for k in 0..points {
        let t = start + k * step;
        let mut sum = 0.0f32;
        let mut count = 0u32;
        for (device, readings) in series.iter().enumerate() {
            let cursor = &mut cursors[device];
            while *cursor < readings.len() && readings[*cursor].0 < t {
                *cursor += 1;
            }
            let reading = readings.get(*cursor).or_else(|| readings.last());
            if let Some(&(_, u)) = reading {
                sum += u;
                count += 1;
            }
        }
        if count > 0 {
            grid.push(sum / count as f32);
        }
    }
    grid
}

#[cfg(test)]
mod tests {
    use super::*;
    use stackscope_event::Timestamp;

    #[test]
    fn device_figures() {
        let samples: Vec<GpuSample> = (1..=100u64)
            .map(|i| GpuSample {
                time: Timestamp(i),
                device: 1,
                utilization: Some(i as f32),
                memory_used_bytes: Some(512 * 1024 * 1024),
                memory_total_bytes: Some(8 * 1024 * 1024 * 1024),
                power_watts: Some(100.0),
                ..GpuSample::default()
            })
            .chain(std::iter::once(GpuSample {
                time: Timestamp(5),
                device: 0,
                ..GpuSample::default()
            }))
            .collect();
        let d = device_summary(&samples, 1, 30.0);
        assert_eq!(d.samples, 100);
        assert_eq!(d.mean_utilization, Some(50.5));
        assert_eq!((d.p50, d.p90, d.p99), (Some(50.0), Some(90.0), Some(99.0)));
        assert_eq!((d.min, d.max), (Some(1.0), Some(100.0)));
        assert_eq!(d.idle_share, Some(0.29));
        assert_eq!(d.mean_memory_used_mib, Some(512.0));
        assert_eq!(d.memory_total_mib, Some(8192.0));
        assert_eq!(d.mean_power_watts, Some(100.0));

        let other = device_summary(&samples, 0, 30.0);
        assert_eq!(other.samples, 1);
        assert_eq!(other.mean_utilization, None);
        assert_eq!(other.idle_share, None);
    }

    #[test]
    fn time_weighting_does_not_alias_with_a_periodic_load() {
        // A 100 ms cycle, busy for the last 40 ms of each, read every 20 ms for 10 s.
        let readings: Vec<(u64, f32)> = (1..=500u64)
            .map(|k| {
                let t = k * 20_000_000;
                let phase = (t % 100_000_000) / 20_000_000;
                (t, if phase == 4 || phase == 0 { 100.0 } else { 0.0 })
            })
            .collect();
        let (mean, idle) = time_weighted(&[readings], 30.0).expect("some");
        assert!((mean - 40.0).abs() < 1.0, "{mean}");
        assert!((idle - 0.6).abs() < 0.01, "{idle}");
    }

    #[test]
    fn time_weighting_averages_devices_over_each_interval() {
        let a = vec![(10, 0.0), (20, 100.0)];
        let b = vec![(10, 100.0), (20, 100.0)];
        // One interval, (10, 20]: a reads 100, b reads 100.
        assert_eq!(time_weighted(&[a, b], 30.0), Some((100.0, 0.0)));
        let single = vec![(10, 10.0)];
        assert_eq!(time_weighted(&[single], 30.0), Some((10.0, 1.0)));
    }

    #[test]
    fn grid_takes_the_covering_reading_and_averages_devices() {
        let a = vec![(10, 0.0), (20, 100.0)];
        let b = vec![(15, 50.0)];
        // At 10: a covers with 0, b with 50. At 15: a's 100, b's 50. At 20: a 100, b past its
        // end keeps 50.
        let grid = resample_mean(&[a, b], 10, 20, 5);
        assert_eq!(grid, vec![25.0, 75.0, 75.0]);
    }
}
