//! `report.html`: one self-contained page that joins the GPU timeline to the code.
//!
//! The page embeds its data (see [`data`]) as JSON and its drawing libraries (uPlot for the
//! timeline, d3-flame-graph for the flamegraph; vendored by `scripts/vendor-js` under
//! `assets/vendor/`, with their licences) and its own script and style, all included in the
//! binary at build time: it opens from disk with no server and no network.
//!
//! The headline (target, duration, samples, errors, verdict) is written into the HTML itself,
//! so it reads even where scripts do not run; the timeline, thread lanes and flamegraph are
//! drawn by `assets/report.js` from the embedded data, with `assets/flame.js` (the flamegraph
//! as an icicle), `assets/series.js` (the timeline's colours and legend) and `assets/memory.js`
//! (the memory chart and the memory growth flamegraph, where there are memory readings; see
//! [`memory`]). Each thread's lane carries its GIL (held, waited for, ran without), beside
//! the legend and the table of `summary.gil` written here (see [`gil`]). See
//! `docs/report-page.md`.

mod compare;
mod data;
mod gil;
mod memory;
mod merged;

use std::io::Write;

use stackscope_aggregate::{Aggregator, RecordingMeta, Summary};

pub use compare::{write_compare_html, ComparePage, DiffStack};
pub use data::MergedPage;
pub use data::{page_data, PageData, MAX_GPU_POINTS, SIMULATED_UUID_PREFIX};
pub use memory::{page_memory, PageCgroup, PageMemory, PageMemoryProcess, MAX_MEMORY_POINTS};
pub use merged::{merged_page_data, RankPage};

use crate::markup::escape;
use crate::ReportError;

/// The page may load nothing: no script, style, image, font or connection from outside
/// itself, whatever a frame name or a future edit holds; the browser enforces it.
pub const CSP: &str = "default-src 'none'; script-src 'unsafe-inline'; \
style-src 'unsafe-inline'; img-src data:; font-src data:";

/// The page's file name in an output directory.
pub const REPORT_FILE: &str = "report.html";

pub(crate) const UPLOT_JS: &str = include_str!("../../assets/vendor/uPlot.iife.min.js");
pub(crate) const UPLOT_CSS: &str = include_str!("../../assets/vendor/uPlot.min.css");
pub(crate) const D3_SELECTION_JS: &str = include_str!("../../assets/vendor/d3-selection.min.js");
pub(crate) const FLAMEGRAPH_JS: &str = include_str!("../../assets/vendor/d3-flamegraph.min.js");
pub(crate) const FLAMEGRAPH_CSS: &str = include_str!("../../assets/vendor/d3-flamegraph.css");
pub(crate) const FLAME_JS: &str = include_str!("../../assets/flame.js");
const SERIES_JS: &str = include_str!("../../assets/series.js");
const MEMORY_JS: &str = include_str!("../../assets/memory.js");
const REPORT_JS: &str = include_str!("../../assets/report.js");
pub(crate) const REPORT_CSS: &str = include_str!("../../assets/report.css");
pub(crate) const LICENCES: &str =
    "uPlot 1.6.32 (MIT, Leon Sorokin), d3-flame-graph 4.1.3 (Apache-2.0, \
Martin Spier), d3-selection 3.0.0 and the d3 modules bundled in d3-flame-graph (ISC, Mike Bostock)";

/// Writes the page for the recording the aggregator holds; `summary` is the one written to
/// `summary.json` beside it.
pub fn write_report_html<W: Write>(
    agg: &Aggregator,
    summary: &Summary,
    meta: &RecordingMeta,
    w: &mut W,
) -> Result<(), ReportError> {
    let data = page_data(agg, summary, meta);
    write_page(&data, w)
}

/// The flamegraph's GPU views, or, in a recording without GPU data (where they could only be
/// empty), the one line that says why there are none.
fn gpu_views(data: &PageData) -> String {
    if !data.gpus.is_empty() {
        return "<button data-view=\"idle\">GPU idle</button>\
                <button data-view=\"busy\">GPU busy</button>\
                <button data-view=\"diff\">difference</button>"
            .to_owned();
    }
    let why = match data.gpu_unavailable.as_deref() {
        Some(why) if !why.is_empty() => format!(": {why}"),
        _ => String::new(),
    };
    format!(
        "<span id=\"no-gpu-views\">No GPU idle, busy or difference views: this recording \
         has no GPU data{}</span>",
        escape(&why)
    )
}

/// Writes the page for already built data.
pub fn write_page<W: Write>(data: &PageData, w: &mut W) -> Result<(), ReportError> {
    let json = script_json(data)?;
    let title = format!("stackscope: {}", subject(data));
    write!(
        w,
        "<!DOCTYPE html>\n<html lang=\"en\">\n<head>\n<meta charset=\"utf-8\">\n\
         <meta name=\"viewport\" content=\"width=device-width, initial-scale=1\">\n\
         <meta http-equiv=\"Content-Security-Policy\" content=\"{CSP}\">\n\
         <title>{}</title>\n<style>\n{UPLOT_CSS}\n{FLAMEGRAPH_CSS}\n{REPORT_CSS}\n</style>\n\
         </head>\n<body>\n",
        escape(&title)
    )?;
    write_headline(data, w)?;
    write!(
        w,
        "<section id=\"timeline-section\">\n<h2>Timeline <span class=\"hint\">drag to select a \
         window</span></h2>\n<div id=\"timeline\"></div>\n\
         <div id=\"timeline-legend\"></div>\n{}<div id=\"lanes\"></div>\n{}</section>\n\
         <section id=\"flame-section\">\n<h2>Flamegraph <span id=\"window-label\"></span></h2>\n\
         <div class=\"controls\">\n<span class=\"views\" id=\"views\">\
         <button data-view=\"all\">all samples</button>{}</span>\n\
         <input id=\"search\" type=\"search\" placeholder=\"search functions\">\n\
         <button id=\"reset-zoom\">reset zoom</button>\n\
         <button id=\"whole\">whole recording</button>\n\
         <span>samples in selection: <b id=\"selection-samples\">{}</b></span>\n\
         <span id=\"view-samples\"></span>\n</div>\n\
         <div id=\"legend\"></div>\n<div id=\"flamegraph\"></div>\n\
         <div id=\"details\"></div>\n</section>\n{}{}\
         <footer>Written by stackscope. Libraries embedded: {LICENCES}.</footer>\n\
         <script type=\"application/json\" id=\"stackscope-data\">{json}</script>\n\
         <script>\n{D3_SELECTION_JS}\n</script>\n<script>\n{UPLOT_JS}\n</script>\n\
         <script>\n{FLAMEGRAPH_JS}\n</script>\n<script>\n{FLAME_JS}\n</script>\n\
         <script>\n{SERIES_JS}\n</script>\n<script>\n{MEMORY_JS}\n</script>\n\
         <script>\n{REPORT_JS}\n</script>\n\
         </body>\n</html>\n",
        memory::memory_chart_markup(data.memory.as_ref()),
        gil::gil_legend_markup(data),
        gpu_views(data),
        data.samples,
        gil::gil_table_markup(data),
        memory::memory_growth_markup(data.memory.as_ref()),
    )?;
    Ok(())
}

/// `data` as JSON to embed in a `<script>` element.
pub(crate) fn script_json<T: serde::Serialize>(data: &T) -> Result<String, ReportError> {
    let json = serde_json::to_string(data).map_err(std::io::Error::other)?;
    // Inside a <script> element only `</script` (or `<!--`) could end it early; JSON allows
    // `<` escaped as \u003c in its strings, and `<` appears nowhere else in JSON.
    Ok(json.replace('<', "\\u003c"))
}

fn write_headline<W: Write>(data: &PageData, w: &mut W) -> Result<(), ReportError> {
    writeln!(w, "<header>\n<h1>stackscope</h1>")?;
    if data.simulated {
        writeln!(
            w,
            "<p class=\"simulated\" id=\"simulated\">The GPU here is simulated (stackscope \
             demo): its utilization follows the training loop's phases, it was not read from a \
             device.</p>"
        )?;
    }
    write_facts(data, w)?;
    write_verdict(data, w)?;
    memory::write_memory_verdict(data.memory.as_ref(), w)?;
    if let Some(merged) = &data.merged {
        merged::write_rank_table(merged, w)?;
    }
    write_notices(&data.notices, w)?;
    writeln!(w, "</header>")?;
    Ok(())
}

/// The table of facts: target, Python, timing, samples, devices, cycle, roles.
fn write_facts<W: Write>(data: &PageData, w: &mut W) -> Result<(), ReportError> {
    writeln!(w, "<table class=\"facts\">")?;
    let row = |w: &mut W, k: &str, v: &str, id: &str| -> Result<(), ReportError> {
        writeln!(
            w,
            "<tr><th>{}</th><td id=\"{id}\">{}</td></tr>",
            escape(k),
            escape(v)
        )?;
        Ok(())
    };
    row(w, "target", &subject(data), "target")?;
    row(w, "Python", &data.python_version, "python")?;
    row(w, "started", &data.started_at, "started")?;
    row(
        w,
        "duration",
        &format!("{:.1} s at {} Hz", data.duration_secs, data.rate_hz),
        "duration",
    )?;
    row(w, "samples", &data.samples.to_string(), "samples")?;
    row(
        w,
        "errors",
        &format!("{} (dropped {})", data.errors, data.dropped),
        "errors",
    )?;
    row(w, "GPU", &devices_text(data), "devices")?;
    if let Some(cycle) = &data.cycle {
        let mut text = format!("{} ({} cycles)", cycle.describe(), cycle.cycles);
        if data.startup_secs > 0.0 {
            text.push_str(&format!(
                ", after {:.1} s of start-up left out",
                data.startup_secs
            ));
        }
        row(w, "GPU cycle", &text, "cycle")?;
    }
    if let Some(roles) = &data.roles {
        row(w, "roles", roles, "roles")?;
    }
    writeln!(w, "</table>")?;
    Ok(())
}

/// The devices read (`GPU 0 (H100)`, with whose they are on a merged page), or why none.
fn devices_text(data: &PageData) -> String {
    let devices: Vec<String> = data
        .gpus
        .iter()
        .map(|g| {
            let device = if g.name.is_empty() {
                format!("GPU {}", g.index)
            } else {
                format!("GPU {} ({})", g.index, g.name)
            };
            match &g.owner {
                Some(owner) => format!("{owner}: {device}"),
                None => device,
            }
        })
        .collect();
    if devices.is_empty() {
        data.gpu_unavailable
            .clone()
            .map_or("no GPU data".to_owned(), |why| {
                format!("no GPU data: {why}")
            })
    } else {
        devices.join(", ")
    }
}

/// The verdict, then what explains it: the step bar and the GPU-idle code path. Without GPU
/// data the verdict is the loop's own reading, and the page says so.
fn write_verdict<W: Write>(data: &PageData, w: &mut W) -> Result<(), ReportError> {
    let read_without_gpu = data.gpus.is_empty() && data.verdict.is_some();
    let verdict = data.verdict.as_ref().map_or(
        "No GPU utilization was recorded, so there is no verdict.",
        |v| v.text.as_str(),
    );
    let label = if read_without_gpu {
        "Verdict (without GPU data):"
    } else {
        "Verdict:"
    };
    writeln!(
        w,
        "<p class=\"verdict\"><b>{label}</b> <span id=\"verdict\">{}</span></p>",
        escape(verdict)
    )?;
    if read_without_gpu {
        writeln!(
            w,
            "<p class=\"no-gpu-verdict\" id=\"no-gpu-verdict\">{}</p>",
            escape(&no_gpu_reading(data))
        )?;
    }
    if let Some(step) = &data.step {
        let heading = if data.gpus.is_empty() {
            "The loop's time"
        } else {
            "The training loop's time"
        };
        write_step_bar(heading, step, w)?;
    }
    if let Some(path) = &data.idle_path {
        writeln!(
            w,
            "<p class=\"idle-path\">GPU-idle code: <code id=\"idle-path\">{}</code> \
             ({:.0}% of GPU-idle samples, {:.0}% of GPU-busy ones)</p>",
            escape(&path.label()),
            path.idle_share * 100.0,
            path.busy_share * 100.0
        )?;
    }
    Ok(())
}

/// The line under a verdict read without GPU data: that there was none, and how the loop
/// was found.
fn no_gpu_reading(data: &PageData) -> String {
    let why = match data.gpu_unavailable.as_deref() {
        Some(why) if !why.is_empty() => format!(" ({why})"),
        _ => String::new(),
    };
    let found = match data.loop_found_by {
        Some(stackscope_aggregate::LoopFoundBy::HandOffs) | None => {
            "the loop was found by its hand-offs (it takes work from other processes or \
             threads, then computes) and read from its own time"
        }
        Some(stackscope_aggregate::LoopFoundBy::Gpu) => "the loop was read from its own time",
    };
    format!("Read without GPU data{why}: {found}.")
}

fn write_notices<W: Write>(notices: &[String], w: &mut W) -> Result<(), ReportError> {
    if !notices.is_empty() {
        writeln!(w, "<ul class=\"notices\">")?;
        for notice in notices {
            writeln!(w, "<li>{}</li>", escape(notice))?;
        }
        writeln!(w, "</ul>")?;
    }
    Ok(())
}

fn subject(data: &PageData) -> String {
    if let Some(merged) = &data.merged {
        return merged.title.clone();
    }
    let command: String = data.command_line.chars().take(120).collect();
    if command.is_empty() {
        format!("pid {}", data.pid)
    } else {
        format!("pid {} ({command})", data.pid)
    }
}

#[cfg(test)]
mod gil_tests;
#[cfg(test)]
mod tests;

/// The loop's step as one bar (`<div id="step-bar">`) under `heading`: a segment per part of
/// its time, as wide as its share, named with its share.
fn write_step_bar<W: Write>(
    heading: &str,
    step: &stackscope_aggregate::StepBreakdown,
    w: &mut W,
) -> Result<(), ReportError> {
    write!(
        w,
        "<div class=\"step\"><b>{heading}:</b> <div class=\"step-bar\" id=\"step-bar\">"
    )?;
    for (part, share) in step.parts() {
        if share < 0.005 {
            continue;
        }
        let pct = share * 100.0;
        write!(
            w,
            "<span class=\"step-part step-{part}\" style=\"width:{pct:.1}%\" \
             title=\"{part} {pct:.0}%\">{part} {pct:.0}%</span>"
        )?;
    }
    writeln!(w, "</div></div>")?;
    Ok(())
}
