//! The script the fake driver follows: devices, their values over time, and which calls fail.
//!
//! Read once per `nvmlInit` from `STACKSCOPE_FAKE_NVML` (a JSON file path, or inline JSON when
//! the value starts with `{`). Unknown fields are rejected so a typo in a test's script fails
//! loudly at init instead of silently using a default.

use std::path::PathBuf;
use std::time::Duration;

use serde::Deserialize;

/// The environment variable holding the script (a path, or inline JSON starting with `{`).
pub const SCRIPT_ENV: &str = "STACKSCOPE_FAKE_NVML";

#[derive(Debug, Clone, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct Script {
    #[serde(default = "default_devices")]
    pub devices: Vec<DeviceScript>,
    /// Calls answering NOT_SUPPORTED on every device.
    #[serde(default)]
    pub unsupported: Vec<Call>,
    /// Make `nvmlInit` fail with NVML_ERROR_DRIVER_NOT_LOADED, as on a machine without a driver.
    #[serde(default)]
    pub fail_init: bool,
    /// How often the driver-side ring gets a new sample (the real driver: about 1/6 s).
    #[serde(default = "default_sample_period_ms")]
    pub sample_period_ms: u64,
    /// How many samples the ring keeps (the real driver: about 120 for utilization).
    #[serde(default = "default_ring_capacity")]
    pub ring_capacity: usize,
    #[serde(default = "default_driver_version")]
    pub driver_version: String,
}

#[derive(Debug, Clone, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct DeviceScript {
    /// Defaults to `Fake GPU <index>`.
    pub name: Option<String>,
    /// Defaults to `GPU-fake-<index>`.
    pub uuid: Option<String>,
    #[serde(default = "default_memory_total_mib")]
    pub memory_total_mib: u64,
    #[serde(default = "default_memory_used_mib")]
    pub memory_used_mib: u64,
    /// Used memory climbs from `memory_used_mib` by this many MiB a second since init, capped
    /// at the total: with one compute process listed, that process's GPU memory climbs.
    #[serde(default)]
    pub memory_used_mib_per_s: f64,
    #[serde(default)]
    pub utilization: Pattern,
    #[serde(default)]
    pub memory_utilization: Pattern,
    #[serde(default = "default_power_w")]
    pub power_w: f64,
    #[serde(default = "default_sm_clock_mhz")]
    pub sm_clock_mhz: u32,
    #[serde(default = "default_mem_clock_mhz")]
    pub mem_clock_mhz: u32,
    /// A fixed clocks-event-reasons mask; by default the GpuIdle bit while utilization is 0.
    pub throttle_reasons: Option<u64>,
    /// Pids listed by `nvmlDeviceGetComputeRunningProcesses`.
    #[serde(default)]
    pub processes: PidList,
    /// Pids listed by `nvmlDeviceGetGraphicsRunningProcesses`.
    #[serde(default)]
    pub graphics_processes: PidList,
    /// Calls answering NOT_SUPPORTED on this device only (added to the global list).
    #[serde(default)]
    pub unsupported: Vec<Call>,
    /// Seconds after init from which every call on this device answers GPU_IS_LOST.
    pub lost_after_s: Option<f64>,
    /// GPM counters (Hopper and later); absent: the support query answers "not supported".
    pub gpm: Option<GpmScript>,
}

/// What the device's GPM metrics read, each the mean of its pattern over the ticks between two
/// samples.
#[derive(Debug, Clone, Default, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct GpmScript {
    /// `NVML_GPM_METRIC_SM_UTIL`.
    #[serde(default)]
    pub sm_active: Pattern,
    /// `NVML_GPM_METRIC_SM_OCCUPANCY`.
    #[serde(default)]
    pub sm_occupancy: Pattern,
    /// `NVML_GPM_METRIC_ANY_TENSOR_UTIL`.
    #[serde(default)]
    pub tensor_active: Pattern,
    /// `NVML_GPM_METRIC_DRAM_BW_UTIL`.
    #[serde(default)]
    pub dram_bw: Pattern,
    /// Metrics whose per-metric return code is NOT_SUPPORTED.
    #[serde(default)]
    pub unsupported_metrics: Vec<GpmMetric>,
    /// After this many successful `nvmlGpmSampleGet` calls the device is lost: the next GPM
    /// sample is the first call to answer GPU_IS_LOST, and every call on it after that.
    pub lost_after_samples: Option<u32>,
}

/// The GPM metrics the fake computes, by the names `unsupported_metrics` uses.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum GpmMetric {
    SmActive,
    SmOccupancy,
    TensorActive,
    DramBw,
}

/// A utilization value over time, in percent (clamped to 0..=100).
#[derive(Debug, Clone, Deserialize)]
#[serde(untagged)]
pub enum Pattern {
    /// A bare number: constant.
    Number(f64),
    Tagged(TaggedPattern),
}

#[derive(Debug, Clone, Deserialize)]
#[serde(rename_all = "snake_case", deny_unknown_fields)]
pub enum TaggedPattern {
    Constant(f64),
    /// `high` for the first `duty` of every `period_s`, `low` for the rest, counted from init
    /// (shifted by `phase_s`).
    Square {
        period_s: f64,
        low: f64,
        high: f64,
        #[serde(default = "default_duty")]
        duty: f64,
        #[serde(default)]
        phase_s: f64,
    },
    /// A file holding the current value as text, re-read on every tick; while it is missing,
    /// empty or not a number, the previous value (0 at first) stays.
    File(PathBuf),
}

impl Default for Pattern {
    fn default() -> Pattern {
        Pattern::Number(0.0)
    }
}

/// A set of pids: a list, or a file of pids re-read on every call.
#[derive(Debug, Clone, Deserialize)]
#[serde(untagged)]
pub enum PidList {
    List(Vec<u32>),
    /// `{"file": PATH}`: whitespace- or comma-separated pids, re-read on every call so a test can
    /// make a process "open a CUDA context" after the profiler attached. Missing file: no pids.
    File {
        file: PathBuf,
    },
}

impl Default for PidList {
    fn default() -> PidList {
        PidList::List(Vec::new())
    }
}

/// The scriptable calls, by the names the `unsupported` lists use.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum Call {
    /// nvmlDeviceGetSamples
    Samples,
    /// nvmlDeviceGetUtilizationRates
    UtilizationRates,
    /// nvmlDeviceGetMemoryInfo and _v2
    Memory,
    /// nvmlDeviceGetPowerUsage
    Power,
    /// nvmlDeviceGetClockInfo
    Clock,
    /// nvmlDeviceGetCurrentClocksThrottleReasons / EventReasons
    Throttle,
    /// nvmlDeviceGetComputeRunningProcesses / GraphicsRunningProcesses (all versions)
    Processes,
    /// nvmlDeviceGetProcessUtilization
    ProcessUtilization,
    /// nvmlGpmQueryDeviceSupport and nvmlGpmSampleGet (GPM as a whole, as on a MIG setup
    /// without it)
    Gpm,
}

impl Script {
    /// The script from the environment; the default (one idle device) when the variable is unset.
    pub fn from_env() -> Result<Script, String> {
        match std::env::var_os(SCRIPT_ENV) {
            None => Script::parse("{}"),
            Some(value) => {
                let value = value.to_string_lossy().into_owned();
                if value.trim_start().starts_with('{') {
                    Script::parse(&value)
                } else {
                    let text = std::fs::read_to_string(&value)
                        .map_err(|e| format!("{SCRIPT_ENV}: cannot read {value}: {e}"))?;
                    Script::parse(&text).map_err(|e| format!("{value}: {e}"))
                }
            }
        }
    }

    pub fn parse(text: &str) -> Result<Script, String> {
        let script: Script =
            serde_json::from_str(text).map_err(|e| format!("bad fake NVML script: {e}"))?;
        if script.sample_period_ms == 0 {
            return Err("bad fake NVML script: sample_period_ms must be positive".into());
        }
        if script.ring_capacity == 0 {
            return Err("bad fake NVML script: ring_capacity must be positive".into());
        }
        Ok(script)
    }
}

impl DeviceScript {
    /// Total and used memory in bytes, `elapsed` after init: used climbs at
    /// `memory_used_mib_per_s` (a negative rate is read as none), never above the total.
    pub fn memory_at(&self, elapsed: Duration) -> (u64, u64) {
        const MIB: f64 = 1024.0 * 1024.0;
        let total = self.memory_total_mib.saturating_mul(1 << 20);
        let climbed = self.memory_used_mib_per_s.max(0.0) * elapsed.as_secs_f64() * MIB;
        let used = self.memory_used_mib.saturating_mul(1 << 20) as f64 + climbed;
        // `as` saturates a float beyond u64's range.
        (total, (used as u64).min(total))
    }

    pub fn name(&self, index: usize) -> String {
        self.name
            .clone()
            .unwrap_or_else(|| format!("Fake GPU {index}"))
    }

    pub fn uuid(&self, index: usize) -> String {
        self.uuid
            .clone()
            .unwrap_or_else(|| format!("GPU-fake-{index}"))
    }
}

impl PidList {
    pub fn pids(&self) -> Vec<u32> {
        match self {
            PidList::List(pids) => pids.clone(),
            PidList::File { file } => std::fs::read_to_string(file)
                .map(|text| {
                    text.split(|c: char| c.is_whitespace() || c == ',')
                        .filter_map(|word| word.parse().ok())
                        .collect()
                })
                .unwrap_or_default(),
        }
    }
}

fn default_devices() -> Vec<DeviceScript> {
    vec![DeviceScript {
        name: None,
        uuid: None,
        memory_total_mib: default_memory_total_mib(),
        memory_used_mib: default_memory_used_mib(),
        memory_used_mib_per_s: 0.0,
        utilization: Pattern::default(),
        memory_utilization: Pattern::default(),
        power_w: default_power_w(),
        sm_clock_mhz: default_sm_clock_mhz(),
        mem_clock_mhz: default_mem_clock_mhz(),
        throttle_reasons: None,
        processes: PidList::default(),
        graphics_processes: PidList::default(),
        unsupported: Vec::new(),
        lost_after_s: None,
        gpm: None,
    }]
}

fn default_sample_period_ms() -> u64 {
    166
}
fn default_ring_capacity() -> usize {
    120
}
fn default_driver_version() -> String {
    "550.54.15-fake".into()
}
fn default_memory_total_mib() -> u64 {
    81920
}
fn default_memory_used_mib() -> u64 {
    1000
}
fn default_power_w() -> f64 {
    250.0
}
fn default_sm_clock_mhz() -> u32 {
    1755
}
fn default_mem_clock_mhz() -> u32 {
    2619
}
fn default_duty() -> f64 {
    0.5
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn empty_script_has_one_idle_device() {
        let script = Script::parse("{}").expect("parses");
        assert_eq!(script.devices.len(), 1);
        assert_eq!(script.devices[0].name(0), "Fake GPU 0");
        assert_eq!(script.sample_period_ms, 166);
    }

    #[test]
    fn full_script_parses() {
        let script = Script::parse(
            r#"{ "devices": [
                  { "name": "Fake H100", "uuid": "GPU-x", "utilization": {"square":
                      {"period_s": 4.0, "low": 3, "high": 97}},
                    "processes": [12, 13], "unsupported": ["power"] },
                  { "utilization": 50, "processes": {"file": "/nonexistent"} },
                  { "utilization": {"file": "/tmp/u"}, "lost_after_s": 2.5 } ],
                 "unsupported": ["samples", "process_utilization"],
                 "sample_period_ms": 20 }"#,
        )
        .expect("parses");
        assert_eq!(script.devices.len(), 3);
        assert_eq!(script.devices[0].processes.pids(), vec![12, 13]);
        assert!(script.devices[1].processes.pids().is_empty());
        assert_eq!(
            script.unsupported,
            vec![Call::Samples, Call::ProcessUtilization]
        );
        assert!(matches!(
            script.devices[0].utilization,
            Pattern::Tagged(TaggedPattern::Square { duty, .. }) if duty == 0.5
        ));
    }

    #[test]
    fn gpm_script_parses() {
        let script = Script::parse(
            r#"{ "devices": [ { "gpm": { "sm_active": 20, "tensor_active": {"constant": 5},
                   "unsupported_metrics": ["sm_occupancy"], "lost_after_samples": 2 } }, {} ],
                 "unsupported": ["gpm"] }"#,
        )
        .expect("parses");
        let gpm = script.devices[0].gpm.as_ref().expect("gpm");
        assert_eq!(gpm.unsupported_metrics, vec![GpmMetric::SmOccupancy]);
        assert_eq!(gpm.lost_after_samples, Some(2));
        assert!(script.devices[1].gpm.is_none());
        assert_eq!(script.unsupported, vec![Call::Gpm]);
        assert!(Script::parse(r#"{"devices": [{"gpm": {"sm_activ": 1}}]}"#).is_err());
    }

    #[test]
    fn used_memory_climbs_at_its_rate_up_to_the_total() {
        let script = Script::parse(
            r#"{ "devices": [ { "memory_total_mib": 100, "memory_used_mib": 10,
                   "memory_used_mib_per_s": 20 }, { "memory_used_mib": 10 } ] }"#,
        )
        .expect("parses");
        const MIB: u64 = 1 << 20;
        let climbing = &script.devices[0];
        assert_eq!(climbing.memory_at(Duration::ZERO), (100 * MIB, 10 * MIB));
        assert_eq!(
            climbing.memory_at(Duration::from_secs(2)),
            (100 * MIB, 50 * MIB)
        );
        assert_eq!(climbing.memory_at(Duration::from_millis(500)).1, 20 * MIB);
        assert_eq!(climbing.memory_at(Duration::from_secs(60)).1, 100 * MIB);
        let flat = &script.devices[1];
        assert_eq!(flat.memory_at(Duration::from_secs(60)).1, 10 * MIB);
    }

    #[test]
    fn typos_are_rejected() {
        assert!(Script::parse(r#"{"devics": []}"#).is_err());
        assert!(Script::parse(r#"{"unsupported": ["powr"]}"#).is_err());
        assert!(Script::parse(r#"{"sample_period_ms": 0}"#).is_err());
    }
}
