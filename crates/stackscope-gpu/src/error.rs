//! Errors, in two classes: [`GpuError`] means no GPU data for this run (the caller says so in
//! one line and records stacks alone); [`MetricError`] is one failed driver call during polling,
//! which at worst turns off that one metric on that one device.

use std::path::PathBuf;

use nvml_wrapper::error::NvmlError;
use thiserror::Error;

/// Why the poller could not start. Each message is one line that says what to check.
#[derive(Debug, Error)]
pub enum GpuError {
    #[error("GPU polling is off")]
    Disabled,
    #[error(
        "cannot load the NVML library {}: {reason} (is the NVIDIA driver installed? \
         --nvml-lib PATH or STACKSCOPE_NVML_LIB names the library)",
        lib.display()
    )]
    Load { lib: PathBuf, reason: String },
    #[error("{} is not an NVML library: {reason}", lib.display())]
    NotNvml { lib: PathBuf, reason: String },
    #[error("NVML initialization failed ({}): {source}", lib.display())]
    Init {
        lib: PathBuf,
        #[source]
        source: NvmlError,
    },
    #[error("cannot count GPUs: {0}")]
    Count(#[source] NvmlError),
    #[error("NVML reports no GPUs")]
    NoDevices,
    #[error("no GPU with index {index}: NVML reports {count} (indices 0 to {})", count.saturating_sub(1))]
    NoSuchDevice { index: u32, count: u32 },
    #[error("cannot open GPU {index}: {source}")]
    Device {
        index: u32,
        #[source]
        source: NvmlError,
    },
    #[error("cannot start the GPU poller thread: {0}")]
    Spawn(#[source] std::io::Error),
}

/// One failed call during polling, classified by what the poller does about it.
#[derive(Debug, Clone, PartialEq, Eq, Error)]
pub enum MetricError {
    /// The driver library lacks the call, or the device or driver does not support it: turn the
    /// metric off for this device, with one notice.
    #[error("{0}")]
    Unsupported(String),
    /// Nothing new since the last call (NVML's NOT_FOUND for sample queries): try next poll.
    #[error("no new data")]
    NoData,
    /// The whole device is gone (fell off the bus, needs a reset, driver unloaded).
    #[error("{0}")]
    DeviceLost(String),
    /// Anything else; retried, and turned off after several failures in a row.
    #[error("{0}")]
    Failed(String),
}

impl MetricError {
    /// Classifies an error from the call of `symbol`.
    pub fn classify(symbol: &str, error: &NvmlError) -> MetricError {
        use NvmlError as E;
        match error {
            // nvml-wrapper resolves symbols lazily: an old library lacking one fails only the
            // call that needs it, with this error.
            E::FailedToLoadSymbol(_) | E::FunctionNotFound => {
                MetricError::Unsupported(format!("{symbol} missing from the driver library"))
            }
            E::NotSupported => MetricError::Unsupported("NOT_SUPPORTED".into()),
            E::NoPermission => MetricError::Unsupported("NO_PERMISSION".into()),
            E::NotFound | E::NoData | E::InsufficientSize(_) => MetricError::NoData,
            E::GpuLost
            | E::ResetRequired
            | E::Uninitialized
            | E::DriverNotLoaded
            | E::LibRmVersionMismatch => MetricError::DeviceLost(error.to_string()),
            other => MetricError::Failed(format!("{symbol}: {other}")),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn classifies_driver_answers() {
        let c = |e: NvmlError| MetricError::classify("nvmlDeviceGetPowerUsage", &e);
        assert_eq!(
            c(NvmlError::FailedToLoadSymbol("undefined symbol".into())),
            MetricError::Unsupported(
                "nvmlDeviceGetPowerUsage missing from the driver library".into()
            )
        );
        assert_eq!(
            c(NvmlError::NotSupported),
            MetricError::Unsupported("NOT_SUPPORTED".into())
        );
        assert_eq!(c(NvmlError::NotFound), MetricError::NoData);
        assert_eq!(c(NvmlError::InsufficientSize(None)), MetricError::NoData);
        assert!(matches!(c(NvmlError::GpuLost), MetricError::DeviceLost(_)));
        assert!(matches!(c(NvmlError::Unknown), MetricError::Failed(_)));
    }

    #[test]
    fn start_errors_are_one_line() {
        let e = GpuError::Load {
            lib: PathBuf::from("/nope/libnvidia-ml.so.1"),
            reason: "cannot open shared object file: No such file or directory".into(),
        };
        let text = e.to_string();
        assert!(!text.contains('\n'));
        assert!(text.contains("/nope/libnvidia-ml.so.1"), "{text}");
        let e = GpuError::NoSuchDevice { index: 3, count: 2 };
        assert_eq!(
            e.to_string(),
            "no GPU with index 3: NVML reports 2 (indices 0 to 1)"
        );
    }
}
