//! `stackscope compare`'s reading and writing: each side read from its recording's sample log
//! (a window of it, as `stackscope report` reads one), and the files written from the
//! comparison: `compare.json`, `diff.svg` (a differential flamegraph, [`diff_svg`]),
//! `compare.html` (the page, [`crate::html`]) and the terminal's screen ([`text`]).

mod diff_svg;
mod text;

use std::path::Path;

use stackscope_aggregate::compare::{CompareInput, Comparison, MatchedStack};
use stackscope_aggregate::{Aggregator, FrameId, StackView};
use stackscope_event::FileOrigin;
use stackscope_samplelog::{RebuildError, Window};

use crate::html::ComparePage;
use crate::{rebuild, write_atomic, RebuildOptions, ReportError};

pub use diff_svg::write_diff_svg;
pub use text::write_compare_text;

pub const COMPARE_JSON: &str = "compare.json";
pub const DIFF_SVG: &str = "diff.svg";
pub const COMPARE_HTML: &str = "compare.html";

/// One side as read: what the comparison needs, and the GPU timeline for the page.
#[derive(Debug, Clone)]
pub struct ComparedRecording {
    pub input: CompareInput,
    /// `[seconds since the window's start, utilization %]` of the first GPU.
    pub timeline: Vec<[f64; 2]>,
    pub idle_below: f64,
}

/// Reads `window` of the recording in `dir` as one side of a comparison, named `label`.
pub fn read_compared(
    dir: &Path,
    window: Window,
    label: &str,
) -> Result<ComparedRecording, RebuildError> {
    let options = RebuildOptions {
        window,
        idle_below: None,
        include_idle: None,
        processes_apart: false,
        threads_apart: false,
    };
    let read = rebuild(dir, &options)?;
    let agg = &read.sink;
    let summary = agg.summary(&read.meta);
    let start = agg.start();
    let first_device = agg.gpu_timeline().iter().map(|s| s.device).min();
    let timeline = agg
        .gpu_timeline()
        .iter()
        .filter(|s| Some(s.device) == first_device)
        .filter_map(|s| {
            let secs = s.time.0.saturating_sub(start.0) as f64 / 1e9 - read.from_secs;
            s.utilization.map(|u| [secs, f64::from(u)])
        })
        .collect();
    Ok(ComparedRecording {
        input: CompareInput {
            label: label.to_owned(),
            dir: dir.display().to_string(),
            from_secs: read.from_secs,
            to_secs: read.to_secs,
            include_idle: agg.config().include_idle,
            native: holds_native_frames(agg),
            folded: agg.folded(StackView::All),
            gpu_readings: agg.gpu_timeline().len() as u64,
            summary,
        },
        timeline,
        idle_below: f64::from(agg.config().idle_below),
    })
}

/// Whether the recording holds native frames (`--native`): frames of native code with a
/// function, as opposed to the roots, which have none.
fn holds_native_frames(agg: &Aggregator) -> bool {
    let table = agg.stack_table();
    (0..agg.distinct_frames()).any(|id| {
        FrameId::try_from(id)
            .ok()
            .and_then(|id| table.frame(id))
            .is_some_and(|f| f.function.is_some() && f.origin == FileOrigin::Native)
    })
}

/// Writes `compare.json`, `diff.svg` and `compare.html` into `dir`, which must exist.
pub fn write_compare_files(
    dir: &Path,
    comparison: &Comparison,
    stacks: &[MatchedStack],
    sides: [&ComparedRecording; 2],
) -> Result<(), ReportError> {
    write_atomic(dir, COMPARE_JSON, |w| {
        serde_json::to_writer_pretty(&mut *w, comparison)?;
        std::io::Write::write_all(w, b"\n")?;
        Ok(())
    })?;
    write_atomic(dir, DIFF_SVG, |w| {
        write_diff_svg(comparison, stacks, sides[1].input.summary.samples, w)
    })?;
    let page = ComparePage {
        compare: serde_json::to_value(comparison)?,
        idle_below: sides[0].idle_below,
        timelines: [sides[0].timeline.clone(), sides[1].timeline.clone()],
        stacks: stacks.to_vec(),
    };
    write_atomic(dir, COMPARE_HTML, |w| {
        crate::html::write_compare_html(&page, w)
    })?;
    Ok(())
}
