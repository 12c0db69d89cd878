//! The GIL on the page: the legend of the strip the script draws under each thread's lane
//! (when it held the GIL, when it waited for it, when it ran without it; from the buckets'
//! `l` counts) and the table of each thread's shares over the recording (`summary.gil`).
//!
//! Both are written into the HTML itself, so they read where scripts do not run; the strips
//! are the script's (`assets/report.js`), as the lanes are.

use stackscope_aggregate::{GilSummary, GilThread};

use super::data::{PageData, PageLane, LANE_CELL};
use crate::markup::escape;

/// How many threads the GIL table lists before saying how many more there are.
const GIL_TABLE_THREADS: usize = 20;

/// The GIL legend, written under the lanes (the script moves it onto the lanes' key line);
/// empty where no lane has GIL counts.
pub(super) fn gil_legend_markup(data: &PageData) -> &'static str {
    if lanes_have_gil(data) {
        LEGEND
    } else {
        ""
    }
}

/// The GIL table's section, after the flamegraph's: the first screen keeps the flamegraph's
/// top rows. Empty where the summary has no `gil`.
pub(super) fn gil_table_markup(data: &PageData) -> String {
    data.gil.as_ref().map_or_else(String::new, |gil| {
        format!(
            "<section id=\"gil-section\">\n<h2>The GIL by thread <span class=\"hint\">shares \
             of each thread's time</span></h2>\n{}</section>\n",
            gil_table(gil, &data.lanes)
        )
    })
}

/// The strip's colours, named as the script draws them (`gil-held`, `gil-waited`,
/// `gil-without`).
const LEGEND: &str = "<div class=\"gil-legend\" id=\"gil-legend\">the GIL, under each lane: \
<span class=\"swatch gil-held\"></span>held \
<span class=\"swatch gil-waited\"></span>waited for it \
<span class=\"swatch gil-without\"></span>ran without it (native code)</div>\n";

/// Whether any bucket counts a sample that held the GIL or waited for it: a recording whose
/// reader said nothing of the GIL gets no strips and no legend.
fn lanes_have_gil(data: &PageData) -> bool {
    data.buckets.iter().any(|b| {
        b.l.chunks_exact(LANE_CELL)
            .any(|cell| cell[3] > 0 || cell[4] > 0)
    })
}

/// `<table id="gil-table">`: each thread's shares of its samples, most held first, named as
/// its lane is.
fn gil_table(gil: &GilSummary, lanes: &[PageLane]) -> String {
    let mut out = String::from(
        "<table class=\"gil-table\" id=\"gil-table\">\n<tr><th>thread</th><th>holds</th>\
         <th>waits for it</th><th>runs without it</th></tr>\n",
    );
    for t in gil.threads.iter().take(GIL_TABLE_THREADS) {
        out.push_str(&format!(
            "<tr data-pid=\"{}\" data-thread-id=\"{}\"><td>{}</td><td class=\"num\">{}</td>\
             <td class=\"num\">{}</td><td class=\"num\">{}</td></tr>\n",
            t.pid,
            t.python_thread_id,
            escape(&thread_label(t, lanes)),
            percent(t.holds),
            percent(t.waits),
            percent(t.runs_without),
        ));
    }
    let more = gil.threads.len().saturating_sub(GIL_TABLE_THREADS);
    if more > 0 {
        out.push_str(&format!(
            "<tr><td colspan=\"4\">and {more} more threads</td></tr>\n"
        ));
    }
    out.push_str("</table>\n");
    out
}

/// The thread as its lane names it (`pid 448 · trainer (MainThread)`), else by pid and name.
fn thread_label(t: &GilThread, lanes: &[PageLane]) -> String {
    lanes
        .iter()
        .find(|l| l.pid == t.pid && l.thread_id == t.python_thread_id)
        .map_or_else(
            || format!("pid {} · {}", t.pid, t.thread),
            |l| l.label.clone(),
        )
}

fn percent(share: f64) -> String {
    format!("{:.0}%", share * 100.0)
}
