//! report.html's memory: the data of the memory chart (each process's resident memory over
//! time, the cgroup's usage and limit) and the markup around it: the chart under the GPU
//! timeline (`#memory-chart`), the "memory growth" flamegraph of the selected window
//! (`#memory-growth`), and the memory verdict's lines beside the GPU verdict.
//!
//! What grew while each stack ran is in the page's buckets (`PageBucket::g`), so that the
//! growth flamegraph of any window is the sum of the buckets it covers, as the sample
//! flamegraph's is; `assets/memory.js` draws both from what report.js hands it. A recording
//! without memory readings gets none of this: no data, no markup.

use std::collections::BTreeMap;
use std::io::Write;

use serde::Serialize;
use stackscope_aggregate::{Aggregator, CgroupPoint, MemoryPoint, Summary};

use crate::markup::escape;
use crate::ReportError;

/// Readings per process at most on the page: finer than any screen shows.
pub const MAX_MEMORY_POINTS: usize = 4000;
/// Readings of all processes together at most, so that a job of many workers still makes a
/// page of a few MiB: each process then gets its share, but never fewer than
/// [`MIN_MEMORY_POINTS`].
pub const MAX_MEMORY_PAGE_POINTS: usize = 64_000;
const MIN_MEMORY_POINTS: usize = 250;

/// What the page draws of memory.
#[derive(Debug, Serialize)]
pub struct PageMemory {
    /// One line per process, the largest peak first (it takes the first colour).
    pub processes: Vec<PageMemoryProcess>,
    /// The memory cgroup's usage, and its limit drawn as a horizontal line; `None` when no
    /// cgroup was read.
    pub cgroup: Option<PageCgroup>,
    /// The memory verdict's sentences, as the summary has them; empty when memory was flat.
    pub verdict: Vec<String>,
}

#[derive(Debug, Serialize)]
pub struct PageMemoryProcess {
    pub pid: u32,
    pub role: String,
    /// What the legend calls its line: `pid 4321 · DataLoader worker 1`.
    pub label: String,
    /// Seconds since the recording's start.
    pub t: Vec<f64>,
    /// Resident memory, bytes: the largest reading of those a point stands for, so that a
    /// peak near the limit is never averaged away.
    pub rss: Vec<u64>,
}

#[derive(Debug, Serialize)]
pub struct PageCgroup {
    pub t: Vec<f64>,
    pub usage: Vec<u64>,
    /// The latest limit read; `None` when the cgroup is unlimited.
    pub limit: Option<u64>,
}

/// The page's memory, or `None` for a recording without memory readings.
pub fn page_memory(agg: &Aggregator, summary: &Summary) -> Option<PageMemory> {
    let memory = summary.memory.as_ref()?;
    let mut processes = process_lines(&agg.memory_points());
    // Largest peak first, then by pid: the order the summary lists them in.
    processes.sort_by_key(|p| (std::cmp::Reverse(p.rss.iter().max().copied()), p.pid));
    Some(PageMemory {
        processes,
        cgroup: cgroup_line(&agg.cgroup_points()),
        verdict: memory.verdict.iter().map(|f| f.text.clone()).collect(),
    })
}

/// Each process's readings, thinned to its share of the page's points.
fn process_lines(points: &[MemoryPoint]) -> Vec<PageMemoryProcess> {
    let mut by_pid: BTreeMap<u32, Vec<&MemoryPoint>> = BTreeMap::new();
    for p in points {
        by_pid.entry(p.pid).or_default().push(p);
    }
    let most =
        (MAX_MEMORY_PAGE_POINTS / by_pid.len().max(1)).clamp(MIN_MEMORY_POINTS, MAX_MEMORY_POINTS);
    by_pid
        .into_iter()
        .map(|(pid, readings)| {
            // The latest role: a process may be named better once more of it was seen.
            let role = readings.last().map(|p| p.role.clone()).unwrap_or_default();
            let (t, rss) = thinned(&readings, most, |p| (p.secs, p.rss));
            PageMemoryProcess {
                pid,
                label: process_label(pid, &role),
                role,
                t,
                rss,
            }
        })
        .collect()
}

fn process_label(pid: u32, role: &str) -> String {
    if role.is_empty() {
        format!("pid {pid}")
    } else {
        format!("pid {pid} · {role}")
    }
}

fn cgroup_line(points: &[CgroupPoint]) -> Option<PageCgroup> {
    if points.is_empty() {
        return None;
    }
    let readings: Vec<&CgroupPoint> = points.iter().collect();
    let (t, usage) = thinned(&readings, MAX_MEMORY_POINTS, |p| (p.secs, p.usage));
    Some(PageCgroup {
        t,
        usage,
        limit: points.iter().rev().find_map(|p| p.limit),
    })
}

/// At most `most` points: runs of readings each as one point at its last reading's time (in
/// milliseconds, as the GPU series), with the run's largest value.
fn thinned<T>(readings: &[&T], most: usize, at: impl Fn(&T) -> (f64, u64)) -> (Vec<f64>, Vec<u64>) {
    let per_point = readings.len().div_ceil(most.max(1)).max(1);
    readings
        .chunks(per_point)
        .filter_map(|run| {
            let secs = at(run.last()?).0;
            let peak = run.iter().map(|r| at(r).1).max()?;
            Some(((secs * 1000.0).round() / 1000.0, peak))
        })
        .unzip()
}

/// The memory verdict's lines, under the GPU verdict; nothing when there is nothing to say.
pub(super) fn write_memory_verdict<W: Write>(
    memory: Option<&PageMemory>,
    w: &mut W,
) -> Result<(), ReportError> {
    let Some(memory) = memory.filter(|m| !m.verdict.is_empty()) else {
        return Ok(());
    };
    writeln!(
        w,
        "<ul class=\"verdict memory-verdict\" id=\"memory-verdict\">"
    )?;
    for line in &memory.verdict {
        writeln!(w, "<li><b>Memory:</b> {}</li>", escape(line))?;
    }
    writeln!(w, "</ul>")?;
    Ok(())
}

/// The memory chart's place, under the GPU timeline and its legend, on the same x axis; its
/// legend names what it draws (no title of its own: the first screen keeps the flamegraph's
/// top rows).
pub(super) fn memory_chart_markup(memory: Option<&PageMemory>) -> &'static str {
    if memory.is_none() {
        return "";
    }
    "<div id=\"memory-chart\"></div>\n<div id=\"memory-legend\"></div>\n"
}

/// The memory growth flamegraph's section, after the samples' flamegraph.
pub(super) fn memory_growth_markup(memory: Option<&PageMemory>) -> &'static str {
    if memory.is_none() {
        return "";
    }
    "<section id=\"memory-growth-section\">\n<h2>Memory growth \
     <span id=\"memory-growth-label\"></span></h2>\n<p class=\"hint\">What ran while memory \
     grew: each process's growth between two readings of its memory charged to the stacks \
     sampled in it meanwhile. Not an allocation trace.</p>\n<div class=\"controls\">\
     <span>grown in selection: <b id=\"memory-growth-bytes\"></b></span>\n\
     <button id=\"memory-growth-reset\">reset zoom</button>\n</div>\n\
     <div id=\"memory-growth\"></div>\n<div id=\"memory-growth-details\"></div>\n</section>\n"
}

#[cfg(test)]
#[path = "memory_tests.rs"]
mod tests;
