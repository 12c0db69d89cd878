//! Writing a whole output directory, each file atomically.

use std::fs::{self, File};
use std::io::{BufWriter, Write};
use std::path::{Path, PathBuf};

use stackscope_aggregate::{Aggregator, RecordingMeta, StackView, Summary};

use crate::{
    write_flamegraph, write_folded, write_gpu_timeline_csv, write_gpu_timeline_svg,
    write_memory_growth_folded, write_memory_timeline_csv, write_report_html, ReportError,
};

pub const FLAMEGRAPH: &str = "flamegraph.svg";
pub const FOLDED: &str = "stacks.folded";
pub const SUMMARY: &str = "summary.json";
pub const GPU_CSV: &str = "gpu-timeline.csv";
pub const GPU_SVG: &str = "gpu-timeline.svg";
pub const FLAMEGRAPH_IDLE: &str = "flamegraph-gpu-idle.svg";
pub const FOLDED_IDLE: &str = "stacks-gpu-idle.folded";
pub const FLAMEGRAPH_BUSY: &str = "flamegraph-gpu-busy.svg";
pub const FOLDED_BUSY: &str = "stacks-gpu-busy.folded";
pub const MEMORY_CSV: &str = "memory-timeline.csv";
pub const FOLDED_MEMORY_GROWTH: &str = "stacks-memory-growth.folded";
pub const REPORT_HTML: &str = crate::html::REPORT_FILE;

/// Longest command line shown in a flamegraph title before it is cut.
const TITLE_COMMAND_CHARS: usize = 80;

/// What [`write_outputs`] wrote.
#[derive(Debug, Clone)]
pub struct OutputFiles {
    /// Every file written, in the order written.
    pub paths: Vec<PathBuf>,
    /// The summary as written to `summary.json`.
    pub summary: Summary,
}

/// The names of the files an output directory holds, with or without GPU data and memory
/// readings.
pub fn file_names(gpu: bool, memory: bool) -> Vec<&'static str> {
    let mut names = vec![FLAMEGRAPH, FOLDED, SUMMARY, REPORT_HTML];
    if gpu {
        names.extend([
            GPU_CSV,
            GPU_SVG,
            FLAMEGRAPH_IDLE,
            FOLDED_IDLE,
            FLAMEGRAPH_BUSY,
            FOLDED_BUSY,
        ]);
    }
    if memory {
        names.extend([MEMORY_CSV, FOLDED_MEMORY_GROWTH]);
    }
    names
}

/// Writes every output file of the recording into `dir`, which must exist. The GPU files are
/// written when there is GPU data, the memory files when there are memory readings. `summary.json` is written last, so a reader that sees a new
/// summary sees the profiles it describes.
pub fn write_outputs(
    dir: &Path,
    agg: &Aggregator,
    meta: &RecordingMeta,
) -> Result<OutputFiles, ReportError> {
    write_outputs_with_log(dir, agg, meta, None)
}

/// As [`write_outputs`], for a recording: `summary.json` says what its sample log kept
/// (`samples_log`, [`crate::SamplesLogSummary`]).
pub fn write_outputs_with_log(
    dir: &Path,
    agg: &Aggregator,
    meta: &RecordingMeta,
    samples_log: Option<&crate::SamplesLogSummary>,
) -> Result<OutputFiles, ReportError> {
    let summary = agg.summary(meta);
    let mut paths = Vec::new();
    let subject = title_subject(meta);

    let all = agg.folded(StackView::All);
    paths.push(write_atomic(dir, FOLDED, |w| write_folded(&all, w))?);
    paths.push(write_atomic(dir, FLAMEGRAPH, |w| {
        write_flamegraph(&all, &format!("stackscope: {subject}"), w)
    })?);
    drop(all);

    let timeline = agg.gpu_timeline();
    if !timeline.is_empty() {
        let start = agg.start();
        paths.push(write_atomic(dir, GPU_CSV, |w| {
            write_gpu_timeline_csv(timeline, start, w)
        })?);
        paths.push(write_atomic(dir, GPU_SVG, |w| {
            write_gpu_timeline_svg(timeline, start, w)
        })?);
        let idle_below = agg.config().idle_below;
        let views = [
            (
                StackView::GpuIdle,
                FOLDED_IDLE,
                FLAMEGRAPH_IDLE,
                format!("while the GPU was idle (below {idle_below}%)"),
            ),
            (
                StackView::GpuBusy,
                FOLDED_BUSY,
                FLAMEGRAPH_BUSY,
                format!("while the GPU was busy (at or above {idle_below}%)"),
            ),
        ];
        for (view, folded_name, svg_name, what) in views {
            let lines = agg.folded(view);
            paths.push(write_atomic(dir, folded_name, |w| write_folded(&lines, w))?);
            paths.push(write_atomic(dir, svg_name, |w| {
                write_flamegraph(&lines, &format!("stackscope: {subject}, {what}"), w)
            })?);
        }
    }

    if summary.memory.is_some() {
        paths.extend(write_memory_files(dir, agg)?);
    }

    paths.push(write_atomic(dir, REPORT_HTML, |w| {
        write_report_html(agg, &summary, meta, w)
    })?);
    paths.push(write_atomic(dir, SUMMARY, |w| {
        crate::samples_log::write_summary_json_with_log(&summary, samples_log, w)
    })?);
    Ok(OutputFiles { paths, summary })
}

/// `memory-timeline.csv` and `stacks-memory-growth.folded`. The growth file is written even
/// when nothing grew (then empty), as the GPU-idle stacks are when the GPU never idled: which
/// files a recording has depends on what it read, not on what the job did.
fn write_memory_files(dir: &Path, agg: &Aggregator) -> Result<Vec<PathBuf>, ReportError> {
    let points = agg.memory_points();
    let csv = write_atomic(dir, MEMORY_CSV, |w| write_memory_timeline_csv(&points, w))?;
    drop(points);
    let growth = agg.memory_growth();
    let folded = write_atomic(dir, FOLDED_MEMORY_GROWTH, |w| {
        write_memory_growth_folded(agg.stack_table(), &growth, w)
    })?;
    Ok(vec![csv, folded])
}

fn title_subject(meta: &RecordingMeta) -> String {
    let command: String = meta
        .command_line
        .chars()
        .take(TITLE_COMMAND_CHARS)
        .collect();
    let ellipsis = if meta.command_line.chars().count() > TITLE_COMMAND_CHARS {
        "..."
    } else {
        ""
    };
    if command.is_empty() {
        format!("pid {}", meta.pid)
    } else {
        format!("pid {} ({command}{ellipsis})", meta.pid)
    }
}

/// Writes `name` in `dir` through a temporary file in the same directory, synced and then
/// renamed over the old one: a reader, or a `kill -9` mid-write, never leaves half a file.
/// The one atomic write of the project: every output file, `watch`'s hang reports and the
/// exports go through it.
pub fn write_atomic(
    dir: &Path,
    name: &str,
    write: impl FnOnce(&mut BufWriter<File>) -> Result<(), ReportError>,
) -> Result<PathBuf, ReportError> {
    let path = dir.join(name);
    let temp = dir.join(format!(".{name}.{}.tmp", std::process::id()));
    let result = write_and_sync(&temp, write).and_then(|()| {
        fs::rename(&temp, &path).map_err(|source| ReportError::File {
            path: path.clone(),
            source,
        })
    });
    if result.is_err() {
        // The temporary file is ours and useless now; failing to remove it changes nothing.
        let _ = fs::remove_file(&temp);
    }
    result.map(|()| path)
}

fn write_and_sync(
    temp: &Path,
    write: impl FnOnce(&mut BufWriter<File>) -> Result<(), ReportError>,
) -> Result<(), ReportError> {
    let file_error = |source| ReportError::File {
        path: temp.to_owned(),
        source,
    };
    let file = File::create(temp).map_err(file_error)?;
    let mut writer = BufWriter::new(file);
    write(&mut writer).map_err(|e| match e {
        ReportError::Io(source) => file_error(source),
        other => other,
    })?;
    writer.flush().map_err(file_error)?;
    let file = writer
        .into_inner()
        .map_err(|e| file_error(e.into_error()))?;
    file.sync_all().map_err(file_error)?;
    Ok(())
}
