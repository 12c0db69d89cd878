//! One poll of one device: the driver's new ring samples plus the point-in-time metrics, turned
//! into [`GpuSample`]s on the recording's clock.

use nvml_wrapper::enum_wrappers::device::{Clock, Sampling};
use nvml_wrapper::enums::device::{SampleValue, UsedGpuMemory};
use nvml_wrapper::struct_wrappers::device::{ProcessInfo, ProcessUtilizationSample};
use nvml_wrapper::Device;
use stackscope_event::{GpuSample, ProcessGpuMemory, Timestamp};

use crate::clock::ClockOffset;
use crate::devices::GpuDeviceInfo;
use crate::gpm::GpmReader;
use crate::metric::{Metric, MetricSet, Reading};

/// What the poller remembers about one device between polls.
#[derive(Debug)]
pub struct DeviceState {
    pub info: GpuDeviceInfo,
    pub metrics: MetricSet,
    /// The newest ring timestamp seen (wall-clock µs): the next query asks for newer ones.
    last_ring_us: u64,
    /// Likewise for per-process utilization.
    last_process_us: u64,
    /// Polls in a row in which the ring, though working, had nothing new.
    empty_ring_polls: u32,
}

/// After this many polls without a new ring sample, the current rates stand in, so a driver
/// that answers the ring query but never fills it still yields utilization.
const EMPTY_RING_POLLS_BEFORE_RATES: u32 = 3;

impl DeviceState {
    /// A device whose readings start at `since_us` (wall-clock µs): samples the driver took
    /// before the recording began are not reported.
    pub fn new(info: GpuDeviceInfo, since_us: u64) -> DeviceState {
        DeviceState {
            metrics: MetricSet::new(info.index),
            info,
            last_ring_us: since_us,
            last_process_us: since_us,
            empty_ring_polls: 0,
        }
    }

    /// Reads the device once. Returns the ring's new samples, oldest first, the newest carrying
    /// the point-in-time metrics and the GPM readings of the interval since the last poll; or
    /// one sample at the poll's time when the ring had nothing (or is unavailable, in which case
    /// its utilization comes from the current rates).
    pub fn poll<'nvml>(
        &mut self,
        device: &Device<'nvml>,
        gpm: &mut GpmReader<'nvml>,
        target_pids: &[u32],
        clock: ClockOffset,
        notices: &mut Vec<String>,
    ) -> Vec<GpuSample> {
        let index = self.info.index;
        // First, so that the GPM interval ends where the ring's newest sample is read, and a
        // device lost since the previous GPM sample shows there.
        let gpm_values = gpm.read(device, &mut self.metrics, notices);
        let mut samples = self.ring_samples(device, clock, notices);
        self.empty_ring_polls = if samples.is_empty() {
            self.empty_ring_polls.saturating_add(1)
        } else {
            0
        };
        // A ring that works stays the only source of utilization: the rates are a trailing
        // average that would blur the ring's instants.
        let ring_trusted = self.metrics.is_on(Metric::Samples)
            && self.empty_ring_polls < EMPTY_RING_POLLS_BEFORE_RATES;

        let (point, rate) = self.point_readings(device, notices);
        // An empty per-process answer means "the target did not use the GPU" only if the driver
        // sampled after the newest per-process answer; the ring shows whether it did. A ring
        // sample the previous poll's per-process answer already covered does not count: two
        // polls close together (the last one, at stop) would read as an idle target.
        let driver_sampled = !self.metrics.is_on(Metric::Samples)
            || sampled_since(self.last_ring_us, self.last_process_us);
        let process_utilization =
            self.process_utilization(device, target_pids, driver_sampled, notices);
        let (compute_pids, process_memory) = self.compute_processes(device, notices);

        if samples.is_empty() {
            samples.push(GpuSample {
                time: Timestamp::now(),
                device: index,
                utilization: if ring_trusted { None } else { rate },
                ..GpuSample::default()
            });
        }
        if let Some(newest) = samples.last_mut() {
            newest.memory_utilization = point.memory_utilization;
            newest.memory_used_bytes = point.memory_used_bytes;
            newest.memory_total_bytes = point.memory_total_bytes;
            newest.power_watts = point.power_watts;
            newest.sm_clock_mhz = point.sm_clock_mhz;
            newest.throttle_reasons = point.throttle_reasons;
            newest.process_utilization = process_utilization;
            newest.compute_pids = compute_pids;
            newest.process_memory = process_memory;
            newest.sm_active = gpm_values.sm_active;
            newest.sm_occupancy = gpm_values.sm_occupancy;
            newest.tensor_active = gpm_values.tensor_active;
            newest.dram_bw = gpm_values.dram_bw;
        }
        samples
    }

    /// The point-in-time readings a poll puts on its newest sample (memory, power, SM clock,
    /// throttle reasons), and the utilization rate, a trailing average, for a poll whose ring
    /// gave nothing.
    fn point_readings(
        &mut self,
        device: &Device<'_>,
        notices: &mut Vec<String>,
    ) -> (GpuSample, Option<f32>) {
        let rates = self
            .metrics
            .read(Metric::UtilizationRates, notices, || {
                device.utilization_rates()
            })
            .value();
        let memory = self
            .metrics
            .read(Metric::Memory, notices, || device.memory_info())
            .value();
        let power_mw = self
            .metrics
            .read(Metric::Power, notices, || device.power_usage())
            .value();
        let sm_clock = self
            .metrics
            .read(Metric::SmClock, notices, || device.clock_info(Clock::SM))
            .value();
        let throttle = self
            .metrics
            .read(Metric::Throttle, notices, || {
                device.current_throttle_reasons()
            })
            .value();
        let point = GpuSample {
            memory_utilization: rates.as_ref().map(|r| r.memory as f32),
            memory_used_bytes: memory.as_ref().map(|m| m.used),
            memory_total_bytes: memory.as_ref().map(|m| m.total),
            power_watts: power_mw.map(|mw| mw as f32 / 1000.0),
            sm_clock_mhz: sm_clock,
            throttle_reasons: throttle.map(|t| t.bits()),
            ..GpuSample::default()
        };
        (point, rates.map(|r| r.gpu as f32))
    }

    /// The ring's samples newer than the last seen, converted to the monotonic clock.
    fn ring_samples(
        &mut self,
        device: &Device<'_>,
        clock: ClockOffset,
        notices: &mut Vec<String>,
    ) -> Vec<GpuSample> {
        let since = self.last_ring_us;
        let Reading::Value(raw) = self.metrics.read(Metric::Samples, notices, || {
            device.samples(Sampling::GpuUtilization, since)
        }) else {
            return Vec::new();
        };
        let mut samples: Vec<(u64, f32)> = raw
            .into_iter()
            .filter(|s| s.timestamp > since)
            .map(|s| (s.timestamp, sample_percent(&s.value)))
            .collect();
        // The driver returns them in time order; sorting costs nothing and guarantees it.
        samples.sort_by_key(|&(time_us, _)| time_us);
        if let Some(&(newest, _)) = samples.last() {
            self.last_ring_us = newest;
        }
        samples
            .into_iter()
            .map(|(time_us, percent)| GpuSample {
                time: clock.to_monotonic(time_us),
                device: self.info.index,
                utilization: Some(percent),
                ..GpuSample::default()
            })
            .collect()
    }

    /// The target's share of the SM since the last poll: the sum over its processes (a training
    /// job's workers each hold a context). `None` without target pids, without the call, or when
    /// the driver answered nothing and `driver_sampled` is false.
    fn process_utilization(
        &mut self,
        device: &Device<'_>,
        target_pids: &[u32],
        driver_sampled: bool,
        notices: &mut Vec<String>,
    ) -> Option<f32> {
        if target_pids.is_empty() {
            return None;
        }
        let since = self.last_process_us;
        match self.metrics.read(Metric::ProcessUtilization, notices, || {
            device.process_utilization_stats(since)
        }) {
            Reading::Value(list) => {
                if let Some(newest) = list.iter().map(|s| s.timestamp).max() {
                    self.last_process_us = self.last_process_us.max(newest);
                }
                Some(target_share(&list, target_pids))
            }
            // The driver lists only processes that used the GPU; none listed means none did,
            // provided it took samples at all since the last poll.
            Reading::NoData => driver_sampled.then_some(0.0),
            Reading::Unavailable => None,
        }
    }
}

impl DeviceState {
    /// The pids NVML lists with a compute context on the device now (the processes that drive
    /// it: the roles look for the trainer among them), `None` when the driver cannot list them;
    /// and, from the same list, each one's GPU memory.
    fn compute_processes(
        &mut self,
        device: &Device<'_>,
        notices: &mut Vec<String>,
    ) -> (Option<Vec<u32>>, Vec<ProcessGpuMemory>) {
        match self.metrics.read(Metric::ComputeProcesses, notices, || {
            device.running_compute_processes()
        }) {
            Reading::Value(list) => {
                let mut pids: Vec<u32> = list.iter().map(|p| p.pid).collect();
                pids.sort_unstable();
                pids.dedup();
                (Some(pids), process_memory(&list))
            }
            // Nothing listed is an answer: no process holds a context now.
            Reading::NoData => (Some(Vec::new()), Vec::new()),
            Reading::Unavailable => (None, Vec::new()),
        }
    }
}

/// Whether the ring holds a sample newer than `process_us`, the newest time the per-process
/// answers covered.
fn sampled_since(ring_us: u64, process_us: u64) -> bool {
    ring_us > process_us
}

/// Each listed process's GPU memory, by pid: a process with several contexts on the device (one
/// per MIG compute instance) is listed once per context, and its memory is their sum. An entry
/// the driver gives no figure for (under WDDM, or without the rights to see other users'
/// processes) is left out rather than read as zero.
fn process_memory(list: &[ProcessInfo]) -> Vec<ProcessGpuMemory> {
    let mut out: Vec<ProcessGpuMemory> = Vec::new();
    for process in list {
        let UsedGpuMemory::Used(bytes) = process.used_gpu_memory else {
            continue;
        };
        match out.iter_mut().find(|p| p.pid == process.pid) {
            Some(entry) => entry.bytes = entry.bytes.saturating_add(bytes),
            None => out.push(ProcessGpuMemory {
                pid: process.pid,
                bytes,
            }),
        }
    }
    out.sort_unstable_by_key(|p| p.pid);
    out
}

/// A ring sample's value as a percentage, whatever type the driver chose for it.
fn sample_percent(value: &SampleValue) -> f32 {
    match *value {
        SampleValue::F64(v) => v as f32,
        SampleValue::U32(v) => v as f32,
        SampleValue::U64(v) => v as f32,
        SampleValue::I64(v) => v as f32,
    }
}

/// The summed SM utilization of the target's pids, each at its newest entry, capped at 100.
fn target_share(list: &[ProcessUtilizationSample], target_pids: &[u32]) -> f32 {
    let mut newest: Vec<(u32, u64, u32)> = Vec::new();
    for s in list.iter().filter(|s| target_pids.contains(&s.pid)) {
        match newest.iter_mut().find(|(pid, _, _)| *pid == s.pid) {
            Some(entry) if entry.1 < s.timestamp => *entry = (s.pid, s.timestamp, s.sm_util),
            Some(_) => {}
            None => newest.push((s.pid, s.timestamp, s.sm_util)),
        }
    }
    let total: u32 = newest.iter().map(|&(_, _, sm)| sm).sum();
    total.min(100) as f32
}

#[cfg(test)]
mod tests {
    use super::*;

    fn entry(pid: u32, timestamp: u64, sm_util: u32) -> ProcessUtilizationSample {
        ProcessUtilizationSample {
            pid,
            timestamp,
            sm_util,
            mem_util: 0,
            enc_util: 0,
            dec_util: 0,
        }
    }

    #[test]
    fn target_share_sums_the_newest_entry_of_each_target_pid() {
        let list = [
            entry(10, 1, 30),
            entry(10, 2, 40),
            entry(11, 2, 20),
            entry(99, 2, 90),
        ];
        assert_eq!(target_share(&list, &[10, 11]), 60.0);
        assert_eq!(target_share(&list, &[12]), 0.0);
        assert_eq!(target_share(&list, &[10, 11, 99]), 100.0);
    }

    #[test]
    fn an_empty_per_process_answer_is_idle_only_after_a_ring_sample_it_did_not_cover() {
        // The previous per-process answer reached 2_000 µs; the ring's newest is that one.
        assert!(!sampled_since(2_000, 2_000));
        // A ring sample older than the answer is covered by it too.
        assert!(!sampled_since(1_500, 2_000));
        // The driver sampled after it and listed nothing: the target did not use the GPU.
        assert!(sampled_since(2_020, 2_000));
    }

    fn process(pid: u32, used: UsedGpuMemory) -> ProcessInfo {
        ProcessInfo {
            pid,
            used_gpu_memory: used,
            gpu_instance_id: None,
            compute_instance_id: None,
        }
    }

    #[test]
    fn process_memory_sums_a_pid_and_skips_unknown_figures() {
        let list = [
            process(20, UsedGpuMemory::Used(300)),
            process(10, UsedGpuMemory::Used(100)),
            process(20, UsedGpuMemory::Used(50)),
            process(30, UsedGpuMemory::Unavailable),
        ];
        let memory: Vec<(u32, u64)> = process_memory(&list)
            .iter()
            .map(|p| (p.pid, p.bytes))
            .collect();
        assert_eq!(memory, vec![(10, 100), (20, 350)]);
        assert!(process_memory(&[]).is_empty());
    }

    #[test]
    fn sample_values_of_any_type_read_as_percent() {
        assert_eq!(sample_percent(&SampleValue::U32(97)), 97.0);
        assert_eq!(sample_percent(&SampleValue::F64(3.5)), 3.5);
        assert_eq!(sample_percent(&SampleValue::U64(50)), 50.0);
    }
}
