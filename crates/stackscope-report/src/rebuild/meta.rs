//! The [`RecordingMeta`] of a rebuilt report: from the log's header, the window, and what the
//! recording's own `summary.json` says that the log does not (drops, ticks, the GPUs' names,
//! the exit status). The summary is optional: a recording killed before its first checkpoint
//! has none.

use std::path::Path;

use serde_json::Value;
use stackscope_aggregate::{GpuDeviceInfo, RecordingMeta};
use stackscope_samplelog::LogHeader;

use super::LogRead;

/// The recording's `summary.json`, if it could be read.
#[derive(Debug, Default)]
pub struct OldSummary(Option<Value>);

impl OldSummary {
    /// Reads `dir/summary.json`; a missing or unreadable file is an empty summary.
    pub fn read(dir: &Path) -> OldSummary {
        let value = std::fs::read(dir.join("summary.json"))
            .ok()
            .and_then(|bytes| serde_json::from_slice(&bytes).ok());
        OldSummary(value)
    }

    pub fn exists(&self) -> bool {
        self.0.is_some()
    }

    fn get(&self, key: &str) -> Option<&Value> {
        self.0.as_ref()?.get(key)
    }

    fn u64(&self, key: &str) -> u64 {
        self.get(key).and_then(Value::as_u64).unwrap_or(0)
    }

    fn f64(&self, key: &str) -> Option<f64> {
        self.get(key).and_then(Value::as_f64)
    }

    /// The rank of each process of a `--subprocesses` recording, by pid.
    pub fn process_ranks(&self) -> std::collections::HashMap<u32, stackscope_event::RankInfo> {
        self.get("processes")
            .and_then(Value::as_array)
            .into_iter()
            .flatten()
            .filter_map(|p| {
                let pid = u32::try_from(p.get("pid")?.as_u64()?).ok()?;
                let rank: stackscope_event::RankInfo = serde_json::from_value(p.clone()).ok()?;
                (!rank.is_empty()).then_some((pid, rank))
            })
            .collect()
    }

    /// Whether the recording started its command (`record`): it knows how the command ended.
    pub fn launched(&self) -> bool {
        ["exit_status", "exit_signal"]
            .iter()
            .any(|key| self.get(key).is_some_and(|v| !v.is_null()))
    }

    pub fn duration_secs(&self) -> Option<f64> {
        self.f64("duration_secs")
    }

    fn string(&self, key: &str) -> Option<String> {
        self.get(key).and_then(Value::as_str).map(str::to_owned)
    }

    fn notices(&self) -> Vec<String> {
        self.get("notices")
            .and_then(Value::as_array)
            .map(|a| {
                a.iter()
                    .filter_map(Value::as_str)
                    .map(String::from)
                    .collect()
            })
            .unwrap_or_default()
    }

    fn gpu_devices(&self) -> Vec<GpuDeviceInfo> {
        let devices = self
            .get("gpu")
            .and_then(|gpu| gpu.get("devices"))
            .and_then(Value::as_array);
        let text = |d: &Value, key: &str| d.get(key).and_then(Value::as_str).map(String::from);
        devices
            .into_iter()
            .flatten()
            .filter_map(|d| {
                Some(GpuDeviceInfo {
                    index: u32::try_from(d.get("index")?.as_u64()?).ok()?,
                    name: text(d, "name").unwrap_or_default(),
                    uuid: text(d, "uuid").unwrap_or_default(),
                })
            })
            .collect()
    }
}

/// What the rebuild found, for the meta.
#[derive(Debug)]
pub struct Coverage<'a> {
    pub whole: bool,
    /// The window as clipped to the recording, seconds since its start.
    pub from: f64,
    pub to: f64,
    /// How long the recording lasted, as far as the log and the summary know.
    pub recording_secs: f64,
    pub log: &'a LogRead,
}

pub fn recording_meta(header: &LogHeader, old: &OldSummary, cov: &Coverage<'_>) -> RecordingMeta {
    let reaches_end = cov.to >= cov.recording_secs;
    let mut notices = old.notices();
    let (ticks, dropped, late_ticks, max_lateness_ms) = if cov.whole {
        (
            old.u64("ticks"),
            old.u64("dropped"),
            old.u64("late_ticks"),
            old.f64("max_lateness_ms").unwrap_or(0.0),
        )
    } else {
        let totals = if old.exists() {
            format!(
                "; ticks, drops and late ticks are counted for the whole recording only: {} \
                 ticks, {} dropped, {} late",
                old.u64("ticks"),
                old.u64("dropped"),
                old.u64("late_ticks")
            )
        } else {
            String::new()
        };
        notices.push(format!(
            "a report of {:.1} s to {:.1} s of a {:.1} s recording{totals}",
            cov.from, cov.to, cov.recording_secs
        ));
        (0, 0, 0, 0.0)
    };
    if let Some(problems) = cov.log.problems() {
        notices.push(format!("the sample log: {problems}"));
    }
    if let Some(dropped) = cov.log.dropped_line() {
        notices.push(dropped);
    }
    let exited = reaches_end
        && old
            .get("target_exited")
            .and_then(Value::as_bool)
            .unwrap_or(false);
    RecordingMeta {
        pid: header.pid,
        // The log does not keep the rank; the recording's summary does.
        rank: old
            .0
            .as_ref()
            .and_then(|v| serde_json::from_value(v.clone()).ok())
            .unwrap_or_default(),
        host: old.string("host"),
        command_line: header.command_line.clone(),
        python_version: header.python_version.clone(),
        reader: old.string("reader").unwrap_or_default(),
        started_at: shifted(&header.started_at, cov.from),
        duration_secs: (cov.to - cov.from).max(0.0),
        rate_hz: header.rate_hz,
        ticks,
        dropped,
        late_ticks,
        max_lateness_ms,
        target_exited: exited,
        exit_status: old
            .get("exit_status")
            .and_then(Value::as_i64)
            .and_then(|s| i32::try_from(s).ok())
            .filter(|_| exited),
        exit_signal: old
            .get("exit_signal")
            .and_then(Value::as_i64)
            .and_then(|s| i32::try_from(s).ok())
            .filter(|_| exited),
        gpu_devices: old.gpu_devices(),
        gpu_unavailable: old.string("gpu_unavailable"),
        notices,
        cpus_usable: header.cpus_usable,
    }
}

/// `started_at` moved `secs` later; unchanged when it does not parse as RFC 3339.
fn shifted(started_at: &str, secs: f64) -> String {
    if secs == 0.0 {
        return started_at.to_owned();
    }
    let nanos = chrono::TimeDelta::nanoseconds((secs * 1e9).round() as i64);
    chrono::DateTime::parse_from_rfc3339(started_at)
        .ok()
        .and_then(|t| t.checked_add_signed(nanos))
        .map_or_else(|| started_at.to_owned(), |t| t.to_rfc3339())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_start_moves_with_the_window() {
        assert_eq!(
            shifted("2024-05-01T10:00:00+02:00", 90.5),
            "2024-05-01T10:01:30.500+02:00"
        );
        assert_eq!(shifted("not a time", 5.0), "not a time");
        assert_eq!(shifted("whatever", 0.0), "whatever");
    }
}
