//! The GPU timeline: every GPU sample kept, in time order.
//!
//! All samples are kept for now; the storage sits behind this type so that a downsampler
//! (bounded memory for recordings of days) can replace `push` without touching its users.

use stackscope_event::GpuSample;

#[derive(Debug, Default)]
pub struct GpuTimeline {
    samples: Vec<GpuSample>,
}

impl GpuTimeline {
    /// Adds a sample at its place in time. Devices are polled one after the other, so a batch
    /// from one device can end before the previous batch of another; samples of equal time keep
    /// their arrival order.
    pub fn push(&mut self, sample: GpuSample) {
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
    }

    pub fn samples(&self) -> &[GpuSample] {
        &self.samples
    }

    pub fn is_empty(&self) -> bool {
        self.samples.is_empty()
    }

    /// The device indices present, ascending.
    pub fn devices(&self) -> Vec<u32> {
        let mut devices: Vec<u32> = self.samples.iter().map(|s| s.device).collect();
        devices.sort_unstable();
        devices.dedup();
        devices
    }

    /// One device's utilization readings, in time order, as `(nanoseconds, percent)`.
    pub fn utilization_series(&self, device: u32) -> Vec<(u64, f32)> {
        self.samples
            .iter()
            .filter(|s| s.device == device)
            .filter_map(|s| s.utilization.map(|u| (s.time.as_nanos(), u)))
            .collect()
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use stackscope_event::Timestamp;

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
        let mut timeline = GpuTimeline::default();
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
    }
}
