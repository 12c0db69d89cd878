//! The GPU lines of `top`'s table: per device, utilization now and over the last minute,
//! memory, power. Whether the GPU idled at a stack sample's instant is the tagger's question
//! (`gpu/tagging.rs`), not this one's.

use std::collections::{BTreeMap, VecDeque};

use stackscope_event::GpuSample;

/// Seconds of per-second GPU utilization kept for the sparkline: the last minute.
pub const GPU_HISTORY_SECS: usize = 60;

#[derive(Debug, Clone, Default)]
struct GpuState {
    name: Option<String>,
    /// The newest utilization reading by time (nanoseconds, percent).
    latest: Option<(u64, f32)>,
    memory_used: Option<u64>,
    memory_total: Option<u64>,
    power_watts: Option<f32>,
    /// The newest GPM SM activity reading, where the GPU has GPM.
    sm_active: Option<f32>,
    /// Mean utilization per second as (second, sum, readings), oldest first.
    history: VecDeque<(u64, f64, u32)>,
}

impl GpuState {
    fn add(&mut self, sample: &GpuSample) {
        let time = sample.time.as_nanos();
        if let Some(u) = sample.utilization {
            if self.latest.is_none_or(|(t, _)| t <= time) {
                self.latest = Some((time, u));
            }
            self.add_to_history(time, u);
        }
        // Memory and power come with the newest sample of each poll; keep what there is.
        self.memory_used = sample.memory_used_bytes.or(self.memory_used);
        self.memory_total = sample.memory_total_bytes.or(self.memory_total);
        self.power_watts = sample.power_watts.or(self.power_watts);
        self.sm_active = sample.sm_active.or(self.sm_active);
    }

    fn add_to_history(&mut self, time: u64, utilization: f32) {
        let second = time / 1_000_000_000;
        let newest = self.history.back().map(|b| b.0);
        let bucket = match newest {
            Some(s) if s >= second => self.history.iter_mut().rev().find(|b| b.0 == second),
            _ => {
                self.history.push_back((second, 0.0, 0));
                self.history.back_mut()
            }
        };
        // A late reading for a second no longer (or never) in the history is dropped.
        if let Some(bucket) = bucket {
            bucket.1 += f64::from(utilization);
            bucket.2 += 1;
        }
        while self.history.len() > GPU_HISTORY_SECS {
            self.history.pop_front();
        }
    }
}

/// One GPU line of the view.
#[derive(Debug, Clone, PartialEq)]
pub struct GpuLine {
    pub index: u32,
    pub name: Option<String>,
    /// The newest reading.
    pub utilization: Option<f32>,
    /// Mean utilization of each of the last seconds with readings, oldest first.
    pub history: Vec<f32>,
    pub memory_used: Option<u64>,
    pub memory_total: Option<u64>,
    pub power_watts: Option<f32>,
    /// The newest GPM SM activity (Hopper and later): beside utilization, how much of the GPU
    /// the kernels ran on.
    pub sm_active: Option<f32>,
}

/// The target's GPUs, by NVML index.
#[derive(Debug, Clone, Default)]
pub struct Gpus {
    devices: BTreeMap<u32, GpuState>,
}

impl Gpus {
    pub fn add(&mut self, sample: &GpuSample) {
        self.devices.entry(sample.device).or_default().add(sample);
    }

    /// Names the GPUs the poller watches now and forgets the others (in `auto`, the poller
    /// follows the target from device to device, and a stack sample must not wait for a
    /// device no longer read). An empty list changes nothing: the poller has not said yet.
    pub fn set_devices(&mut self, devices: &[(u32, String)]) {
        if devices.is_empty() {
            return;
        }
        self.devices
            .retain(|index, _| devices.iter().any(|(i, _)| i == index));
        for (index, name) in devices {
            self.devices.entry(*index).or_default().name = Some(name.clone());
        }
    }

    pub fn lines(&self) -> Vec<GpuLine> {
        self.devices
            .iter()
            .map(|(&index, g)| GpuLine {
                index,
                name: g.name.clone(),
                utilization: g.latest.map(|r| r.1),
                history: g
                    .history
                    .iter()
                    .map(|&(_, sum, n)| (sum / f64::from(n.max(1))) as f32)
                    .collect(),
                memory_used: g.memory_used,
                memory_total: g.memory_total,
                power_watts: g.power_watts,
                sm_active: g.sm_active,
            })
            .collect()
    }
}
