//! The metrics read from each device, and the bookkeeping that turns a failing call into one
//! notice and a metric switched off, never into the end of polling.

use nvml_wrapper::error::NvmlError;

use crate::error::MetricError;

/// After this many unexplained failures in a row a metric is switched off, so a call that
/// always fails does not cost a driver round trip on every poll forever.
const MAX_CONSECUTIVE_FAILURES: u32 = 5;

/// One driver call the poller makes per device.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Metric {
    /// The driver's ring of timestamped GPU utilization samples.
    Samples,
    /// The current GPU and memory utilization (the fallback for `Samples`, and the source of
    /// memory utilization).
    UtilizationRates,
    Memory,
    Power,
    SmClock,
    Throttle,
    ProcessUtilization,
    /// Running compute processes (which GPUs the target uses).
    ComputeProcesses,
    /// Running graphics processes: a secondary hint, switched off silently when unavailable.
    GraphicsProcesses,
    /// Whether the device has GPM counters (Hopper and later, not every MIG setup).
    GpmSupport,
    /// Taking a GPM sample (`nvmlGpmSampleAlloc` and `nvmlGpmSampleGet`).
    GpmSample,
    /// Computing GPM metrics from two samples: the call as a whole.
    GpmMetrics,
    /// The GPM metrics themselves, each with its own return code.
    GpmSmActive,
    GpmSmOccupancy,
    GpmTensorActive,
    GpmDramBw,
}

impl Metric {
    const COUNT: usize = 16;

    /// The GPM values, in the order [`crate::gpm`] requests them.
    pub const GPM_VALUES: [Metric; 4] = [
        Metric::GpmSmActive,
        Metric::GpmSmOccupancy,
        Metric::GpmTensorActive,
        Metric::GpmDramBw,
    ];

    fn slot(self) -> usize {
        self as usize
    }

    /// The C function behind the metric, named in notices.
    pub fn symbol(self) -> &'static str {
        match self {
            Metric::Samples => "nvmlDeviceGetSamples",
            Metric::UtilizationRates => "nvmlDeviceGetUtilizationRates",
            Metric::Memory => "nvmlDeviceGetMemoryInfo_v2",
            Metric::Power => "nvmlDeviceGetPowerUsage",
            Metric::SmClock => "nvmlDeviceGetClockInfo",
            Metric::Throttle => "nvmlDeviceGetCurrentClocksThrottleReasons",
            Metric::ProcessUtilization => "nvmlDeviceGetProcessUtilization",
            Metric::ComputeProcesses => "nvmlDeviceGetComputeRunningProcesses_v3",
            Metric::GraphicsProcesses => "nvmlDeviceGetGraphicsRunningProcesses_v3",
            Metric::GpmSupport => "nvmlGpmQueryDeviceSupport",
            Metric::GpmSample => "nvmlGpmSampleGet",
            Metric::GpmMetrics
            | Metric::GpmSmActive
            | Metric::GpmSmOccupancy
            | Metric::GpmTensorActive
            | Metric::GpmDramBw => "nvmlGpmMetricsGet",
        }
    }

    fn what(self) -> &'static str {
        match self {
            Metric::Samples => "utilization samples",
            Metric::UtilizationRates => "utilization rates",
            Metric::Memory => "memory readings",
            Metric::Power => "power readings",
            Metric::SmClock => "SM clock readings",
            Metric::Throttle => "throttle reasons",
            Metric::ProcessUtilization => "per-process utilization readings",
            Metric::ComputeProcesses => "running-process lists",
            Metric::GraphicsProcesses => "graphics-process lists",
            Metric::GpmSupport | Metric::GpmSample | Metric::GpmMetrics => {
                "GPM readings (SM activity, SM occupancy, tensor activity, DRAM bandwidth)"
            }
            Metric::GpmSmActive => "GPM SM activity readings",
            Metric::GpmSmOccupancy => "GPM SM occupancy readings",
            Metric::GpmTensorActive => "GPM tensor activity readings",
            Metric::GpmDramBw => "GPM DRAM bandwidth readings",
        }
    }

    /// What the poller does without the metric, for the notice.
    fn consequence(self) -> &'static str {
        match self {
            Metric::Samples => "using nvmlDeviceGetUtilizationRates (one reading per poll) instead",
            Metric::ComputeProcesses => "cannot tell whether the target uses this GPU",
            Metric::GpmSupport | Metric::GpmSample | Metric::GpmMetrics => {
                "continuing with utilization alone"
            }
            _ => "continuing without them",
        }
    }

    /// Metrics whose loss is not worth a notice.
    fn quiet(self) -> bool {
        matches!(self, Metric::GraphicsProcesses)
    }
}

/// The outcome of one call through [`MetricSet::read`].
#[derive(Debug, PartialEq)]
pub enum Reading<T> {
    Value(T),
    /// The call worked but had nothing new.
    NoData,
    /// No value: the metric is off, failed this time, or the device is lost.
    Unavailable,
}

impl<T> Reading<T> {
    pub fn value(self) -> Option<T> {
        match self {
            Reading::Value(v) => Some(v),
            _ => None,
        }
    }
}

/// Per device: which metrics are still on, and whether the device still answers.
#[derive(Debug)]
pub struct MetricSet {
    device: u32,
    disabled: [bool; Metric::COUNT],
    failures: [u32; Metric::COUNT],
    lost: bool,
}

impl MetricSet {
    pub fn new(device: u32) -> MetricSet {
        MetricSet {
            device,
            disabled: [false; Metric::COUNT],
            failures: [0; Metric::COUNT],
            lost: false,
        }
    }

    pub fn is_on(&self, metric: Metric) -> bool {
        !self.lost && !self.disabled[metric.slot()]
    }

    pub fn is_lost(&self) -> bool {
        self.lost
    }

    /// Switches `metric` off with one notice, for a reason found other than by a failed call
    /// (a device that answers "no GPM here").
    pub fn switch_off(&mut self, metric: Metric, reason: &str, notices: &mut Vec<String>) {
        if self.is_on(metric) {
            self.disable(metric, reason, notices);
        }
    }

    /// Makes one call for `metric` unless it is off, and files its failure: an unsupported call
    /// switches the metric off with a notice pushed to `notices`; a lost device stops every
    /// metric of the device with one notice.
    pub fn read<T>(
        &mut self,
        metric: Metric,
        notices: &mut Vec<String>,
        call: impl FnOnce() -> Result<T, NvmlError>,
    ) -> Reading<T> {
        if !self.is_on(metric) {
            return Reading::Unavailable;
        }
        match call() {
            Ok(value) => {
                self.failures[metric.slot()] = 0;
                Reading::Value(value)
            }
            Err(error) => self.fail(
                metric,
                MetricError::classify(metric.symbol(), &error),
                notices,
            ),
        }
    }

    fn fail<T>(
        &mut self,
        metric: Metric,
        error: MetricError,
        notices: &mut Vec<String>,
    ) -> Reading<T> {
        let device = self.device;
        match error {
            MetricError::NoData => {
                self.failures[metric.slot()] = 0;
                return Reading::NoData;
            }
            MetricError::Unsupported(reason) => {
                self.disable(metric, &reason, notices);
            }
            MetricError::DeviceLost(reason) => {
                self.lost = true;
                notices.push(format!(
                    "device {device} stopped answering ({reason}); no more readings from it"
                ));
            }
            MetricError::Failed(reason) => {
                let failures = &mut self.failures[metric.slot()];
                *failures += 1;
                if *failures >= MAX_CONSECUTIVE_FAILURES {
                    let why = format!("failed {MAX_CONSECUTIVE_FAILURES} times in a row: {reason}");
                    self.disable(metric, &why, notices);
                }
            }
        }
        Reading::Unavailable
    }

    fn disable(&mut self, metric: Metric, reason: &str, notices: &mut Vec<String>) {
        self.disabled[metric.slot()] = true;
        if !metric.quiet() {
            notices.push(format!(
                "{} unavailable on device {} ({reason}); {}",
                metric.what(),
                self.device,
                metric.consequence()
            ));
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn unsupported_switches_off_once_with_one_notice() {
        let mut set = MetricSet::new(0);
        let mut notices = Vec::new();
        let r: Reading<u32> =
            set.read(Metric::Power, &mut notices, || Err(NvmlError::NotSupported));
        assert_eq!(r, Reading::Unavailable);
        assert_eq!(
            notices,
            vec!["power readings unavailable on device 0 (NOT_SUPPORTED); continuing without them"]
        );
        let r = set.read(Metric::Power, &mut notices, || -> Result<u32, _> {
            panic!("a switched-off metric is not called again")
        });
        assert_eq!(r, Reading::Unavailable);
        assert_eq!(notices.len(), 1);
        assert_eq!(
            set.read(Metric::Memory, &mut notices, || Ok(5)),
            Reading::Value(5)
        );
    }

    #[test]
    fn missing_symbol_names_the_call() {
        let mut set = MetricSet::new(1);
        let mut notices = Vec::new();
        let _: Reading<()> = set.read(Metric::Samples, &mut notices, || {
            Err(NvmlError::FailedToLoadSymbol(
                "undefined symbol: nvmlDeviceGetSamples".into(),
            ))
        });
        assert_eq!(
            notices,
            vec![
                "utilization samples unavailable on device 1 \
                 (nvmlDeviceGetSamples missing from the driver library); using \
                 nvmlDeviceGetUtilizationRates (one reading per poll) instead"
            ]
        );
        assert!(!set.is_on(Metric::Samples));
    }

    #[test]
    fn no_data_is_not_a_failure() {
        let mut set = MetricSet::new(0);
        let mut notices = Vec::new();
        for _ in 0..10 {
            let r: Reading<()> =
                set.read(Metric::Samples, &mut notices, || Err(NvmlError::NotFound));
            assert_eq!(r, Reading::NoData);
        }
        assert!(notices.is_empty());
        assert!(set.is_on(Metric::Samples));
    }

    #[test]
    fn repeated_failures_switch_off() {
        let mut set = MetricSet::new(0);
        let mut notices = Vec::new();
        for _ in 0..4 {
            let _: Reading<()> =
                set.read(Metric::SmClock, &mut notices, || Err(NvmlError::Unknown));
        }
        assert!(set.is_on(Metric::SmClock));
        let _: Reading<()> = set.read(Metric::SmClock, &mut notices, || Err(NvmlError::Unknown));
        assert!(!set.is_on(Metric::SmClock));
        assert_eq!(notices.len(), 1);
        assert!(
            notices[0].contains("failed 5 times in a row"),
            "{}",
            notices[0]
        );
    }

    #[test]
    fn lost_device_stops_everything() {
        let mut set = MetricSet::new(2);
        let mut notices = Vec::new();
        let _: Reading<()> = set.read(Metric::Memory, &mut notices, || Err(NvmlError::GpuLost));
        assert!(set.is_lost());
        assert!(!set.is_on(Metric::Power));
        assert_eq!(notices.len(), 1);
        assert!(
            notices[0].starts_with("device 2 stopped answering"),
            "{}",
            notices[0]
        );
    }

    #[test]
    fn graphics_processes_fail_quietly() {
        let mut set = MetricSet::new(0);
        let mut notices = Vec::new();
        let _: Reading<()> = set.read(Metric::GraphicsProcesses, &mut notices, || {
            Err(NvmlError::NotSupported)
        });
        assert!(notices.is_empty());
        assert!(!set.is_on(Metric::GraphicsProcesses));
    }
}
