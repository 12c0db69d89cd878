//! GPM (GPU Performance Monitoring, Hopper and later): SM activity, SM occupancy, tensor
//! activity and DRAM bandwidth, each computed by the driver from the difference of two samples.
//!
//! `utilization` counts a time slice busy when any kernel ran, however few SMs it used; one
//! small kernel at a time on a 132-SM H100 reads 100%. GPM's SM activity
//! (`NVML_GPM_METRIC_SM_UTIL`, the counter DCGM's `SM_ACTIVE` comes from) says how much of the
//! GPU the kernels ran on.
//!
//! Each poll takes one sample per device and asks for the metrics between it and the previous
//! poll's sample, so every reading covers one poll interval, ending at the poll. The first poll
//! only takes a sample. Where GPM is missing (the support query says no, a symbol is absent, a
//! call answers NOT_SUPPORTED) the [`MetricSet`] switches it off with one notice; a metric the
//! device lacks is switched off alone; a device lost between the two samples is lost like on
//! any other call, and the held sample is freed.

use nvml_wrapper::enums::gpm::GpmMetricId;
use nvml_wrapper::gpm::{gpm_metrics_get, GpmSample};
use nvml_wrapper::Device;

use crate::metric::{Metric, MetricSet, Reading};

/// The GPM readings of one interval, in percent; `None` where unknown.
#[derive(Debug, Clone, Copy, Default, PartialEq)]
pub struct GpmValues {
    pub sm_active: Option<f32>,
    pub sm_occupancy: Option<f32>,
    pub tensor_active: Option<f32>,
    pub dram_bw: Option<f32>,
}

impl GpmValues {
    fn set(&mut self, metric: Metric, value: Option<f32>) {
        let slot = match metric {
            Metric::GpmSmActive => &mut self.sm_active,
            Metric::GpmSmOccupancy => &mut self.sm_occupancy,
            Metric::GpmTensorActive => &mut self.tensor_active,
            Metric::GpmDramBw => &mut self.dram_bw,
            _ => return,
        };
        *slot = value;
    }
}

/// NVML's id for one of [`Metric::GPM_VALUES`].
fn metric_id(metric: Metric) -> Option<GpmMetricId> {
    Some(match metric {
        Metric::GpmSmActive => GpmMetricId::SmUtil,
        Metric::GpmSmOccupancy => GpmMetricId::SmOccupancy,
        Metric::GpmTensorActive => GpmMetricId::AnyTensorUtil,
        Metric::GpmDramBw => GpmMetricId::DramBwUtil,
        _ => return None,
    })
}

/// One device's GPM state between polls: the sample that opens the next interval.
///
/// Tied to the NVML instance its samples come from; dropping it frees the held sample (which
/// must happen before NVML shuts down).
#[derive(Debug, Default)]
pub struct GpmReader<'nvml> {
    previous: Option<GpmSample<'nvml>>,
    /// The support query answered yes; it is not asked again.
    supported: bool,
}

impl<'nvml> GpmReader<'nvml> {
    pub fn new() -> GpmReader<'nvml> {
        GpmReader {
            previous: None,
            supported: false,
        }
    }

    /// Forgets the held sample: the device is not polled now, and a later reading must not
    /// span the time it was not.
    pub fn reset(&mut self) {
        self.previous = None;
    }

    /// Takes this poll's sample and returns the metrics since the previous one (none on the
    /// first poll, after a failed sample, or where GPM is off).
    pub fn read(
        &mut self,
        device: &Device<'nvml>,
        metrics: &mut MetricSet,
        notices: &mut Vec<String>,
    ) -> GpmValues {
        if !wanted(metrics) {
            self.previous = None;
            return GpmValues::default();
        }
        if !self.supported {
            match metrics.read(Metric::GpmSupport, notices, || device.gpm_support()) {
                Reading::Value(true) => self.supported = true,
                Reading::Value(false) => {
                    metrics.switch_off(
                        Metric::GpmSupport,
                        "no GPM counters on this device: they need Hopper or later, and not every MIG setup has them",
                        notices,
                    );
                    return GpmValues::default();
                }
                Reading::NoData | Reading::Unavailable => return GpmValues::default(),
            }
        }
        let current = match metrics.read(Metric::GpmSample, notices, || device.gpm_sample()) {
            Reading::Value(sample) => sample,
            // The interval restarts at the next good sample; a lost device is done with, and
            // its held sample freed here rather than at the end.
            Reading::NoData | Reading::Unavailable => {
                self.previous = None;
                return GpmValues::default();
            }
        };
        let values = match &self.previous {
            Some(previous) => between(previous, &current, metrics, notices),
            None => GpmValues::default(),
        };
        // Replacing frees the previous sample.
        self.previous = if metrics.is_lost() {
            None
        } else {
            Some(current)
        };
        values
    }
}

/// Whether GPM is still worth sampling on this device.
fn wanted(metrics: &MetricSet) -> bool {
    [Metric::GpmSupport, Metric::GpmSample, Metric::GpmMetrics]
        .into_iter()
        .all(|m| metrics.is_on(m))
        && Metric::GPM_VALUES.into_iter().any(|m| metrics.is_on(m))
}

/// The metrics still on, computed by the driver between `first` and `second`; each metric's own
/// failure switches off that metric alone.
fn between<'nvml>(
    first: &GpmSample<'nvml>,
    second: &GpmSample<'nvml>,
    metrics: &mut MetricSet,
    notices: &mut Vec<String>,
) -> GpmValues {
    let asked: Vec<(Metric, GpmMetricId)> = Metric::GPM_VALUES
        .into_iter()
        .filter(|&m| metrics.is_on(m))
        .filter_map(|m| Some((m, metric_id(m)?)))
        .collect();
    let ids: Vec<GpmMetricId> = asked.iter().map(|&(_, id)| id).collect();
    let Reading::Value(results) = metrics.read(Metric::GpmMetrics, notices, || {
        gpm_metrics_get(first.nvml(), first, second, &ids)
    }) else {
        return GpmValues::default();
    };
    let mut values = GpmValues::default();
    for ((metric, _), result) in asked.into_iter().zip(results) {
        let value = metrics
            .read(metric, notices, || result.map(|r| r.value))
            .value()
            // A driver's NaN or infinity is no reading.
            .filter(|v| v.is_finite())
            .map(|v| v as f32);
        values.set(metric, value);
    }
    values
}
