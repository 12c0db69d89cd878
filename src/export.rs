//! `stackscope export`: re-reads a recording's sample log (all of it, or a window) and writes
//! it in a format other tools read; and the same files for `attach`/`record --format`.

use std::path::{Path, PathBuf};

use anyhow::Context;
use stackscope_report::{read_trace, RebuildError, RebuildOptions, TraceOutcome};
use stackscope_report::{write_export_file, ExportFormat, ExportInfo};
use stackscope_samplelog::{report_dir, Window};

use crate::config::ExportConfig;

pub fn run(config: ExportConfig) -> anyhow::Result<()> {
    let window = config.window;
    let outcome = read(&config.dir, window)?;
    let path = match &config.output {
        Some(path) => path.clone(),
        None if window.is_whole() => config.dir.join(config.format.file_name()),
        None => {
            let dir = report_dir(&config.dir, &window);
            crate::config::ensure_writable_dir(&dir)?;
            dir.join(config.format.file_name())
        }
    };
    let written = write(&outcome, config.format, &path)?;
    eprintln!(
        "stackscope: {:.1} to {:.1} s of the recording, {} samples ({} events read)",
        outcome.from_secs,
        outcome.to_secs,
        outcome.sink.samples(),
        outcome.events_read
    );
    // What of the log could not be read: damaged blocks skipped, an early end.
    if let Some(problems) = outcome.log.problems() {
        eprintln!("stackscope: {problems}");
    }
    // A log kept within --log-max-size/--log-max-age whose oldest segments were deleted.
    if let Some(dropped) = outcome.log.dropped_line() {
        eprintln!("stackscope: {dropped}");
    }
    println!("{}", written.display());
    Ok(())
}

/// Writes `formats` into `dir` from its sample log, for `attach`/`record --format`: the whole
/// recording as the log holds it now (flushed by the checkpoint just before). A recording with
/// no events yet has nothing to export: no file, and no error.
pub fn write_formats(dir: &Path, formats: &[ExportFormat]) -> anyhow::Result<Vec<PathBuf>> {
    if formats.is_empty() {
        return Ok(Vec::new());
    }
    let outcome = match read(dir, Window::WHOLE) {
        Err(e) if matches!(e.downcast_ref(), Some(RebuildError::NothingRead { .. })) => {
            return Ok(Vec::new())
        }
        read => read?,
    };
    formats
        .iter()
        .map(|&format| write(&outcome, format, &dir.join(format.file_name())))
        .collect()
}

fn read(dir: &Path, window: Window) -> anyhow::Result<TraceOutcome> {
    let options = RebuildOptions {
        window,
        idle_below: None,
        include_idle: None,
        processes_apart: false,
        threads_apart: false,
    };
    read_trace(dir, &options)
        .with_context(|| format!("cannot read the recording in {}", dir.display()))
}

fn write(outcome: &TraceOutcome, format: ExportFormat, path: &Path) -> anyhow::Result<PathBuf> {
    let info = ExportInfo {
        meta: &outcome.meta,
        time_nanos: window_start_nanos(&outcome.meta.started_at, outcome.from_secs),
        from_secs: outcome.from_secs,
        to_secs: outcome.to_secs,
    };
    write_export_file(path, format, &outcome.sink, &info)
        .with_context(|| format!("cannot write the {format} export to {}", path.display()))
}

/// The wall-clock start of the window in nanoseconds since the Unix epoch; 0 (the format's
/// "unknown") when the recording's start time does not parse.
fn window_start_nanos(started_at: &str, from_secs: f64) -> i64 {
    chrono::DateTime::parse_from_rfc3339(started_at)
        .ok()
        .and_then(|t| t.timestamp_nanos_opt())
        .map_or(0, |ns| ns.saturating_add((from_secs * 1e9) as i64))
}
