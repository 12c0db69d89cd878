//! What the caller asks for: which GPUs, which NVML library, how often.

use std::fmt;
use std::path::PathBuf;
use std::str::FromStr;
use std::time::Duration;

/// Which GPUs to poll (`--gpu off|auto|0,1`).
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub enum GpuSelection {
    /// No GPU polling at all.
    Off,
    /// The GPUs on which the target appears in NVML's running processes; all of them while it
    /// appears on none.
    #[default]
    Auto,
    /// Exactly these NVML device indices.
    Devices(Vec<u32>),
}

impl FromStr for GpuSelection {
    type Err = String;

    fn from_str(s: &str) -> Result<GpuSelection, String> {
        match s.trim() {
            "off" | "none" => Ok(GpuSelection::Off),
            "auto" | "" => Ok(GpuSelection::Auto),
            list => {
                let mut indices = Vec::new();
                for word in list.split(',').map(str::trim) {
                    let index = word.parse::<u32>().map_err(|_| {
                        format!(
                            "expected off, auto or a list of GPU indices like 0,1; got {word:?}"
                        )
                    })?;
                    if !indices.contains(&index) {
                        indices.push(index);
                    }
                }
                Ok(GpuSelection::Devices(indices))
            }
        }
    }
}

impl fmt::Display for GpuSelection {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            GpuSelection::Off => f.write_str("off"),
            GpuSelection::Auto => f.write_str("auto"),
            GpuSelection::Devices(list) => {
                let words: Vec<String> = list.iter().map(u32::to_string).collect();
                f.write_str(&words.join(","))
            }
        }
    }
}

/// How the poller runs.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct GpuConfig {
    pub selection: GpuSelection,
    /// The NVML library to load; `None`: `libnvidia-ml.so.1` from the loader path. The binary
    /// fills it from `--nvml-lib` or `STACKSCOPE_NVML_LIB`.
    pub nvml_lib: Option<PathBuf>,
    /// How often the driver is read. The driver's sample ring holds about 20 s, so each poll
    /// collects every sample since the last one; this only sets how late they arrive.
    pub poll_interval: Duration,
    /// How often `Auto` re-checks which GPUs the target uses: a training job may open its CUDA
    /// context well after the profiler attached.
    pub remap_interval: Duration,
    /// Why the target's pids may not be those NVML lists (NVML speaks the host's pids, and
    /// stackscope runs in a PID namespace that does not see them), when that is so. `Auto`
    /// then says so once, if the target shows up on no device, and polls every visible one;
    /// the target's per-process share is left out while no device lists its pids.
    pub unmatched_pids: Option<String>,
}

/// The library name the NVIDIA driver installs (the versioned soname, present without the
/// development package, unlike `libnvidia-ml.so`).
pub const DEFAULT_NVML_LIB: &str = "libnvidia-ml.so.1";

impl Default for GpuConfig {
    fn default() -> GpuConfig {
        GpuConfig {
            selection: GpuSelection::Auto,
            nvml_lib: None,
            poll_interval: Duration::from_millis(500),
            remap_interval: Duration::from_secs(5),
            unmatched_pids: None,
        }
    }
}

impl GpuConfig {
    /// The library path handed to the loader.
    pub fn library(&self) -> PathBuf {
        self.nvml_lib
            .clone()
            .unwrap_or_else(|| PathBuf::from(DEFAULT_NVML_LIB))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn parses_selections() {
        assert_eq!("off".parse(), Ok(GpuSelection::Off));
        assert_eq!("auto".parse(), Ok(GpuSelection::Auto));
        assert_eq!("0".parse(), Ok(GpuSelection::Devices(vec![0])));
        assert_eq!(" 1, 0,1 ".parse(), Ok(GpuSelection::Devices(vec![1, 0])));
        let err = "0,x".parse::<GpuSelection>().expect_err("not an index");
        assert!(err.contains("\"x\""), "{err}");
        assert!("-1".parse::<GpuSelection>().is_err());
    }

    #[test]
    fn displays_round_trip() {
        for text in ["off", "auto", "0,2"] {
            let selection: GpuSelection = text.parse().expect("parses");
            assert_eq!(selection.to_string(), text);
        }
    }

    #[test]
    fn defaults() {
        let config = GpuConfig::default();
        assert_eq!(config.selection, GpuSelection::Auto);
        assert_eq!(config.poll_interval, Duration::from_millis(500));
        assert_eq!(config.library(), PathBuf::from("libnvidia-ml.so.1"));
    }
}
