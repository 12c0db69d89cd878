//! Per-device GPU figures, accumulated reading by reading at full resolution.
//!
//! The timeline in memory is downsampled on long recordings, which would blur percentiles and
//! miscount readings; so the figures of `summary.json`'s devices are kept as running sums and a
//! histogram instead, exact whatever the recording's length, in constant memory. A device's
//! mean utilization is not among them: it is time-weighted, over the time the verdict judges,
//! and comes from the one place every mean utilization does ([`super::mean`]).

use serde::{Deserialize, Serialize};

use stackscope_event::{GpuSample, Timestamp};

use super::state::is_idle;

const MIB: f64 = 1024.0 * 1024.0;
/// Histogram bins per percentage point: NVML reports whole percents, so percentiles of real
/// readings are exact; other values are placed to 0.1 point.
const BINS_PER_POINT: f64 = 10.0;
const BINS: usize = 100 * BINS_PER_POINT as usize + 1;

/// One device's figures over the recording, as in `summary.json`.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct GpuDeviceSummary {
    pub index: u32,
    pub name: String,
    pub uuid: String,
    /// GPU readings of this device (of any metric).
    pub samples: u64,
    /// Time-weighted over the recording, start-up left out where the GPU summary's
    /// `startup_secs` says so: the mean the verdict judges, and the one the terminal prints.
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
    /// Means of the GPM readings (Hopper and later), in percent, each reading weighted by the
    /// interval it covers; absent without GPM.
    #[serde(default)]
    pub mean_sm_active_pct: Option<f64>,
    #[serde(default)]
    pub mean_sm_occupancy_pct: Option<f64>,
    #[serde(default)]
    pub mean_tensor_active_pct: Option<f64>,
    #[serde(default)]
    pub mean_dram_bw_pct: Option<f64>,
}

/// Running sum and count of one metric.
#[derive(Debug, Clone, Copy, Default)]
struct Mean {
    sum: f64,
    count: u64,
}

impl Mean {
    fn add(&mut self, value: f64) {
        self.sum += value;
        self.count += 1;
    }

    fn get(self) -> Option<f64> {
        (self.count > 0).then(|| self.sum / self.count as f64)
    }
}

#[derive(Debug, Clone)]
pub struct DeviceStats {
    readings: u64,
    utilization: Mean,
    min: f64,
    max: f64,
    idle: u64,
    /// Utilization readings by value, [`BINS_PER_POINT`] bins per point; allocated with the
    /// first utilization reading.
    histogram: Vec<u64>,
    memory_used_mib: Mean,
    /// The latest reading's total memory, by reading time (readings can arrive out of order).
    memory_total: Option<(Timestamp, u64)>,
    power: Mean,
    /// SM activity, SM occupancy, tensor activity, DRAM bandwidth: sums weighted by the
    /// interval each reading covers (seconds), and the weights.
    gpm: [(f64, f64); 4],
    /// The device's first reading of any kind, and its latest GPM reading: a GPM reading covers
    /// the time since the previous one (the first, since the device's first reading), and the
    /// last of a recording may cover a fraction of a poll.
    first_time: Option<Timestamp>,
    last_gpm_time: Option<Timestamp>,
}

impl Default for DeviceStats {
    fn default() -> Self {
        DeviceStats {
            readings: 0,
            utilization: Mean::default(),
            min: f64::INFINITY,
            max: f64::NEG_INFINITY,
            idle: 0,
            histogram: Vec::new(),
            memory_used_mib: Mean::default(),
            memory_total: None,
            power: Mean::default(),
            gpm: [(0.0, 0.0); 4],
            first_time: None,
            last_gpm_time: None,
        }
    }
}

impl DeviceStats {
    pub fn add(&mut self, sample: &GpuSample, idle_below: f32) {
        self.readings += 1;
        if let Some(u) = sample.utilization {
            let u = f64::from(u);
            self.utilization.add(u);
            self.min = self.min.min(u);
            self.max = self.max.max(u);
            if is_idle(u, f64::from(idle_below)) {
                self.idle += 1;
            }
            if self.histogram.is_empty() {
                self.histogram = vec![0; BINS];
            }
            if let Some(bin) = self.histogram.get_mut(bin_of(u)) {
                *bin += 1;
            }
        }
        if let Some(bytes) = sample.memory_used_bytes {
            self.memory_used_mib.add(bytes as f64 / MIB);
        }
        if let Some(total) = sample.memory_total_bytes {
            if !matches!(self.memory_total, Some((t, _)) if t > sample.time) {
                self.memory_total = Some((sample.time, total));
            }
        }
        if let Some(watts) = sample.power_watts {
            self.power.add(f64::from(watts));
        }
        self.add_gpm(sample);
    }

    fn add_gpm(&mut self, sample: &GpuSample) {
        let first = *self.first_time.get_or_insert(sample.time);
        let gpm = [
            sample.sm_active,
            sample.sm_occupancy,
            sample.tensor_active,
            sample.dram_bw,
        ];
        if gpm.iter().all(Option::is_none) {
            return;
        }
        let since = self.last_gpm_time.unwrap_or(first);
        self.last_gpm_time = Some(
            self.last_gpm_time
                .map_or(sample.time, |t| t.max(sample.time)),
        );
        // A reading alone at the device's first instant still counts, with a token weight.
        let weight = (sample.time.0.saturating_sub(since.0) as f64 / 1e9).max(1e-6);
        for ((sum, total), value) in self.gpm.iter_mut().zip(gpm) {
            if let Some(v) = value {
                *sum += f64::from(v) * weight;
                *total += weight;
            }
        }
    }

    pub fn readings(&self) -> u64 {
        self.readings
    }

    /// The figures, with the device's `mean_utilization` as [`super::mean`] gives it; `name`
    /// and `uuid` are left empty for the caller.
    pub fn summary(&self, index: u32, mean_utilization: Option<f64>) -> GpuDeviceSummary {
        let any = self.utilization.count > 0;
        GpuDeviceSummary {
            index,
            name: String::new(),
            uuid: String::new(),
            samples: self.readings,
            mean_utilization,
            p50: self.percentile(50.0),
            p90: self.percentile(90.0),
            p99: self.percentile(99.0),
            min: any.then_some(self.min),
            max: any.then_some(self.max),
            idle_share: any.then(|| self.idle as f64 / self.utilization.count as f64),
            mean_memory_used_mib: self.memory_used_mib.get(),
            memory_total_mib: self.memory_total.map(|(_, b)| b as f64 / MIB),
            mean_power_watts: self.power.get(),
            mean_sm_active_pct: weighted(self.gpm[0]),
            mean_sm_occupancy_pct: weighted(self.gpm[1]),
            mean_tensor_active_pct: weighted(self.gpm[2]),
            mean_dram_bw_pct: weighted(self.gpm[3]),
        }
    }

    /// Nearest-rank percentile of the utilization readings: the value of the bin holding the
    /// reading of that rank, kept within the readings' own range.
    fn percentile(&self, p: f64) -> Option<f64> {
        let n = self.utilization.count;
        if n == 0 {
            return None;
        }
        let rank = ((p / 100.0 * n as f64).ceil() as u64).clamp(1, n);
        let mut seen = 0u64;
        for (bin, &count) in self.histogram.iter().enumerate() {
            seen += count;
            if seen >= rank {
                // The top bin also holds anything above 100%: its largest reading is the max.
                if bin == BINS - 1 {
                    return Some(self.max);
                }
                let value = bin as f64 / BINS_PER_POINT;
                return Some(value.clamp(self.min, self.max));
            }
        }
        Some(self.max)
    }
}

fn weighted((sum, weight): (f64, f64)) -> Option<f64> {
    (weight > 0.0).then(|| sum / weight)
}

fn bin_of(utilization: f64) -> usize {
    let bin = (utilization * BINS_PER_POINT).round();
    // NaN and out-of-range values land in the end bins; min and max still say what they were.
    if bin.is_nan() || bin < 0.0 {
        0
    } else {
        (bin as usize).min(BINS - 1)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn device_figures() {
        let mut stats = DeviceStats::default();
        // Out of time order, as batches of two devices arrive.
        for i in (1..=100u64).rev() {
            stats.add(
                &GpuSample {
                    time: Timestamp(i),
                    device: 1,
                    utilization: Some(i as f32),
                    memory_used_bytes: Some(512 * 1024 * 1024),
                    memory_total_bytes: Some(i * 1024 * 1024 * 1024),
                    power_watts: Some(100.0),
                    ..GpuSample::default()
                },
                30.0,
            );
        }
        let d = stats.summary(1, Some(42.0));
        assert_eq!(d.samples, 100);
        assert_eq!(d.mean_utilization, Some(42.0), "as given");
        assert_eq!((d.p50, d.p90, d.p99), (Some(50.0), Some(90.0), Some(99.0)));
        assert_eq!((d.min, d.max), (Some(1.0), Some(100.0)));
        assert_eq!(d.idle_share, Some(0.29));
        assert_eq!(d.mean_memory_used_mib, Some(512.0));
        assert_eq!(d.memory_total_mib, Some(100.0 * 1024.0), "latest by time");
        assert_eq!(d.mean_power_watts, Some(100.0));
        assert_eq!(d.mean_sm_active_pct, None, "no GPM readings");
    }

    #[test]
    fn gpm_means_weigh_each_reading_by_the_interval_it_covers() {
        let mut stats = DeviceStats::default();
        let s = 1_000_000_000;
        // Readings at 0 s (utilization only), 1 s, 2 s and a last one 0.5 s later.
        for (t, sm, tensor) in [
            (0, None, None),
            (s, Some(20.0), Some(4.0)),
            (2 * s, Some(40.0), None),
            (5 * s / 2, Some(100.0), None),
        ] {
            stats.add(
                &GpuSample {
                    time: Timestamp(t),
                    utilization: Some(95.0),
                    sm_active: sm,
                    tensor_active: tensor,
                    ..GpuSample::default()
                },
                30.0,
            );
        }
        let d = stats.summary(0, None);
        let sm = d.mean_sm_active_pct.unwrap_or_default();
        assert!((sm - (20.0 + 40.0 + 50.0) / 2.5).abs() < 1e-9, "{sm}");
        assert_eq!(d.mean_tensor_active_pct, Some(4.0));
        assert_eq!((d.mean_sm_occupancy_pct, d.mean_dram_bw_pct), (None, None));
    }

    #[test]
    fn readings_without_utilization() {
        let mut stats = DeviceStats::default();
        stats.add(&GpuSample::default(), 30.0);
        let d = stats.summary(0, None);
        assert_eq!(d.samples, 1);
        assert_eq!(d.mean_utilization, None);
        assert_eq!((d.p50, d.min, d.idle_share), (None, None, None));
    }

    #[test]
    fn percentiles_stay_within_the_readings() {
        let mut stats = DeviceStats::default();
        for u in [33.333f32, 33.334, 120.0] {
            stats.add(
                &GpuSample {
                    utilization: Some(u),
                    ..GpuSample::default()
                },
                30.0,
            );
        }
        let d = stats.summary(0, None);
        assert_eq!(d.max, Some(120.0));
        assert_eq!(d.p99, Some(120.0));
        let p50 = d.p50.unwrap_or_default();
        assert!((p50 - 33.333).abs() < 0.05, "{p50}");
    }
}
