//! Exports that other tools read: pprof (`go tool pprof`, Grafana Pyroscope), speedscope's JSON,
//! and a Chrome trace (JSON) that Perfetto opens, with the GPUs and the memory of each process
//! and of the job's cgroup as counter tracks.
//!
//! Each writer is a pure function of a [`SampleTrace`] (a window of a recording, every kept
//! sample in time order with its GPU state) and an [`ExportInfo`], over any `W: Write`.

mod perfetto;
mod pprof;
pub mod pprof_proto;
mod speedscope;

use std::fmt;
use std::path::{Path, PathBuf};
use std::str::FromStr;

use stackscope_aggregate::{RecordingMeta, SampleTrace};

use crate::ReportError;

pub use perfetto::write_perfetto;
pub use pprof::{build_profile, write_pprof};
pub use speedscope::write_speedscope;

/// An export format, as `--format` names it.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub enum ExportFormat {
    Pprof,
    Speedscope,
    Perfetto,
}

impl ExportFormat {
    pub const ALL: [ExportFormat; 3] = [
        ExportFormat::Pprof,
        ExportFormat::Speedscope,
        ExportFormat::Perfetto,
    ];

    /// The file it is written to by default.
    pub fn file_name(self) -> &'static str {
        match self {
            ExportFormat::Pprof => "profile.pb.gz",
            ExportFormat::Speedscope => "profile.speedscope.json",
            ExportFormat::Perfetto => "trace.json",
        }
    }

    pub fn name(self) -> &'static str {
        match self {
            ExportFormat::Pprof => "pprof",
            ExportFormat::Speedscope => "speedscope",
            ExportFormat::Perfetto => "perfetto",
        }
    }

    /// Writes the trace in this format.
    pub fn write<W: std::io::Write>(
        self,
        trace: &SampleTrace,
        info: &ExportInfo<'_>,
        w: W,
    ) -> Result<(), ReportError> {
        match self {
            ExportFormat::Pprof => write_pprof(trace, info, w),
            ExportFormat::Speedscope => write_speedscope(trace, info, w),
            ExportFormat::Perfetto => write_perfetto(trace, info, w),
        }
    }
}

/// Writes `format` to `path` atomically (a temporary name in the same directory, renamed), so
/// a viewer never opens half a file.
pub fn write_export_file(
    path: &Path,
    format: ExportFormat,
    trace: &SampleTrace,
    info: &ExportInfo<'_>,
) -> Result<PathBuf, ReportError> {
    let dir = match path.parent() {
        Some(dir) if !dir.as_os_str().is_empty() => dir,
        _ => Path::new("."),
    };
    let name = path
        .file_name()
        .map(|n| n.to_string_lossy().into_owned())
        .unwrap_or_else(|| format.file_name().to_owned());
    crate::outputs::write_atomic(dir, &name, |w| format.write(trace, info, w))
}

impl fmt::Display for ExportFormat {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.name())
    }
}

impl FromStr for ExportFormat {
    type Err = String;

    fn from_str(s: &str) -> Result<Self, Self::Err> {
        ExportFormat::ALL
            .into_iter()
            .find(|f| f.name() == s)
            .ok_or_else(|| format!("unknown format '{s}': use pprof, speedscope or perfetto"))
    }
}

/// What the exports say about the recording beside its samples.
#[derive(Debug, Clone, Copy)]
pub struct ExportInfo<'a> {
    pub meta: &'a RecordingMeta,
    /// Wall-clock time of the window's start, nanoseconds since the Unix epoch (0: unknown).
    pub time_nanos: i64,
    /// The window, seconds since the recording's start.
    pub from_secs: f64,
    pub to_secs: f64,
}

impl ExportInfo<'_> {
    /// Seconds between samples of one thread.
    pub fn period_secs(&self) -> f64 {
        if self.meta.rate_hz > 0.0 {
            1.0 / self.meta.rate_hz
        } else {
            0.01
        }
    }

    /// The name of a GPU for its counter track: `GPU 0 (NVIDIA H100)`.
    pub fn gpu_name(&self, device: u32) -> String {
        match self.meta.gpu_devices.iter().find(|d| d.index == device) {
            Some(d) if !d.name.is_empty() => format!("GPU {device} ({})", d.name),
            _ => format!("GPU {device}"),
        }
    }
}

#[cfg(test)]
mod tests;
