//! `compare.html`: one self-contained page that sets two recordings side by side (`stackscope
//! compare BEFORE AFTER`): the verdict on the change, a table of the figures before and after,
//! both GPU timelines on one scale, the training loop's step in both, and a differential icicle
//! of the stacks (widths from AFTER, coloured by how each frame's share moved).
//!
//! Like report.html it embeds its data ([`ComparePage`], as JSON) and its libraries, and loads
//! nothing. The verdict, the figures and the step bars are written into the HTML itself, so they
//! read where scripts do not run; `assets/compare.js` draws the timelines (uPlot) and the icicle
//! (`assets/flame.js` over d3-flame-graph) from the embedded data.

use std::io::Write;

use serde::Serialize;
use serde_json::Value;
use stackscope_aggregate::compare::MatchedStack;
use stackscope_aggregate::StepBreakdown;

use super::{
    script_json, CSP, D3_SELECTION_JS, FLAMEGRAPH_CSS, FLAMEGRAPH_JS, FLAME_JS, LICENCES,
    REPORT_CSS, UPLOT_CSS, UPLOT_JS,
};
use crate::markup::escape;
use crate::ReportError;

const COMPARE_JS: &str = include_str!("../../assets/compare.js");
const COMPARE_CSS: &str = include_str!("../../assets/compare.css");
/// The functions the figures table lists at most (compare.json's biggest moves first).
const MAX_FUNCTIONS: usize = 10;
/// The page's embedded data.
#[derive(Debug, Clone, Serialize)]
pub struct ComparePage {
    /// compare.json, as written beside the page.
    pub compare: Value,
    /// The utilization (percent) below which the GPU counts as idle: the timelines' dashed line.
    pub idle_below: f64,
    /// Each side's GPU utilization, `[secs from its window's start, percent]`: BEFORE, AFTER;
    /// empty for a side without GPU data.
    pub timelines: [Vec<[f64; 2]>; 2],
    /// The identity-matched stacks, with their share of each side's samples.
    pub stacks: Vec<DiffStack>,
}

/// One stack (outermost frame first) and its share of each side's samples (0 where absent):
/// the comparison's matched stacks, as they are.
pub type DiffStack = MatchedStack;

/// The parts of the loop's step, in `gpu.step`'s order, named where the step is defined.
fn step_parts() -> [&'static str; 6] {
    StepBreakdown::default().parts().map(|(name, _)| name)
}

/// Writes the page for `page`.
pub fn write_compare_html<W: Write>(page: &ComparePage, w: &mut W) -> Result<(), ReportError> {
    let json = script_json(page)?;
    let c = &page.compare;
    write_head(c, w)?;
    write_header(c, w)?;
    write_figures(c, w)?;
    write_timelines(c, w)?;
    write_step_bars(c, w)?;
    write_icicle_section(page, w)?;
    write!(
        w,
        "<footer>Written by stackscope. Libraries embedded: {LICENCES}.</footer>\n\
         <script type=\"application/json\" id=\"stackscope-data\">{json}</script>\n\
         <script>\n{D3_SELECTION_JS}\n</script>\n<script>\n{UPLOT_JS}\n</script>\n\
         <script>\n{FLAMEGRAPH_JS}\n</script>\n<script>\n{FLAME_JS}\n</script>\n\
         <script>\n{COMPARE_JS}\n</script>\n</body>\n</html>\n"
    )?;
    Ok(())
}

/// A side's label (`run1@0-30`), or its name in the page where compare.json has none.
fn label<'a>(c: &'a Value, side: &'a str) -> &'a str {
    c[side]["label"].as_str().unwrap_or(side)
}

fn write_head<W: Write>(c: &Value, w: &mut W) -> Result<(), ReportError> {
    let title = format!(
        "stackscope compare: {} → {}",
        label(c, "before"),
        label(c, "after")
    );
    write!(
        w,
        "<!DOCTYPE html>\n<html lang=\"en\">\n<head>\n<meta charset=\"utf-8\">\n\
         <meta name=\"viewport\" content=\"width=device-width, initial-scale=1\">\n\
         <meta http-equiv=\"Content-Security-Policy\" content=\"{CSP}\">\n\
         <title>{}</title>\n<style>\n{UPLOT_CSS}\n{FLAMEGRAPH_CSS}\n{REPORT_CSS}\n{COMPARE_CSS}\n\
         </style>\n</head>\n<body>\n",
        escape(&title)
    )?;
    Ok(())
}

/// The two sides, the verdict on the change, what differs between the recordings themselves,
/// and each side's own verdict.
fn write_header<W: Write>(c: &Value, w: &mut W) -> Result<(), ReportError> {
    let verdict = &c["change"]["verdict"];
    let text = verdict["text"]
        .as_str()
        .unwrap_or("No verdict on the change.");
    let class = verdict["class"].as_str().unwrap_or("no_change");
    writeln!(
        w,
        "<header>\n<h1>stackscope compare</h1>\n<p class=\"sides\">before <b id=\"before-label\">\
         {}</b> → after <b id=\"after-label\">{}</b></p>\n<p class=\"change-verdict\" \
         id=\"change-verdict\" data-class=\"{}\">{}</p>",
        escape(label(c, "before")),
        escape(label(c, "after")),
        escape(class),
        escape(text)
    )?;
    let mismatches: Vec<&str> = c["mismatches"]
        .as_array()
        .map_or(Vec::new(), |m| m.iter().filter_map(Value::as_str).collect());
    write_list(w, "mismatches", "notices", &mismatches)?;
    let side_verdicts: Vec<String> = ["before", "after"]
        .iter()
        .filter_map(|side| {
            let text = c[*side]["verdict"]["text"].as_str()?;
            Some(format!("{side} ({}): {text}", label(c, side)))
        })
        .collect();
    let side_verdicts: Vec<&str> = side_verdicts.iter().map(String::as_str).collect();
    write_list(w, "side-verdicts", "side-verdicts", &side_verdicts)?;
    writeln!(w, "</header>")?;
    Ok(())
}

/// `<ul>` of `items`, escaped; nothing when there are none.
fn write_list<W: Write>(
    w: &mut W,
    id: &str,
    class: &str,
    items: &[&str],
) -> Result<(), ReportError> {
    if items.is_empty() {
        return Ok(());
    }
    writeln!(w, "<ul id=\"{id}\" class=\"{class}\">")?;
    for item in items {
        writeln!(w, "<li>{}</li>", escape(item))?;
    }
    writeln!(w, "</ul>")?;
    Ok(())
}

/// How a figure reads.
#[derive(Debug, Clone, Copy)]
enum Unit {
    Secs,
    Count,
    Hz,
    /// Already in percent (utilization).
    Percent,
    /// A fraction 0..1, shown in percent.
    Share,
}

impl Unit {
    fn value(self, v: f64) -> String {
        match self {
            Unit::Secs => format!("{v:.1} s"),
            Unit::Count => format!("{v:.0}"),
            Unit::Hz => format!("{v:.0} Hz"),
            Unit::Percent => format!("{v:.1}%"),
            Unit::Share => format!("{:.1}%", v * 100.0),
        }
    }

    /// A size of change without its sign: percentages move by points.
    fn amount(self, d: f64) -> String {
        match self {
            Unit::Percent => format!("{d:.1} points"),
            Unit::Share => format!("{:.1} points", d * 100.0),
            _ => self.value(d),
        }
    }

    fn change(self, d: f64) -> String {
        let sign = if d < 0.0 { "−" } else { "+" };
        format!("{sign}{}", self.amount(d.abs()))
    }
}

/// One row of the figures table, its cells as text.
struct Row {
    key: String,
    name: String,
    cells: [String; 4],
    moved: bool,
}

/// A row from the sides' own figures (`before.samples`, ...): no noise, never marked moved.
fn side_row(c: &Value, key: &str, name: &str, unit: Unit) -> Row {
    let (b, a) = (c["before"][key].as_f64(), c["after"][key].as_f64());
    let shown = |v: Option<f64>| v.map_or("–".to_owned(), |v| unit.value(v));
    let change = match (b, a) {
        (Some(b), Some(a)) => unit.change(a - b),
        _ => "–".to_owned(),
    };
    Row {
        key: key.to_owned(),
        name: name.to_owned(),
        cells: [shown(b), shown(a), change, String::new()],
        moved: false,
    }
}

/// A row from a `Change` (`{before, after, change, noise, moved}`); none where `v` is not one.
fn change_row(v: &Value, key: String, name: String, unit: Unit) -> Option<Row> {
    let (before, after) = (v["before"].as_f64()?, v["after"].as_f64()?);
    let change = v["change"].as_f64().unwrap_or(after - before);
    let noise = v["noise"]
        .as_f64()
        .map_or(String::new(), |n| format!("±{}", unit.amount(n)));
    Some(Row {
        key,
        name,
        cells: [
            unit.value(before),
            unit.value(after),
            unit.change(change),
            noise,
        ],
        moved: v["moved"].as_bool().unwrap_or(false),
    })
}

fn run_rows(c: &Value) -> Vec<Row> {
    vec![
        side_row(c, "duration_secs", "duration", Unit::Secs),
        side_row(c, "samples", "samples", Unit::Count),
        side_row(c, "rate_hz", "rate", Unit::Hz),
        side_row(c, "processes", "processes", Unit::Count),
        side_row(c, "workers", "workers", Unit::Count),
    ]
}

fn gpu_rows(c: &Value) -> Vec<Row> {
    let gpu = &c["gpu"];
    let util = change_row(
        &gpu["mean_utilization"],
        "gpu.mean_utilization".to_owned(),
        "GPU mean utilization".to_owned(),
        Unit::Percent,
    );
    let mut busy = change_row(
        &gpu["busy_share"],
        "gpu.busy_share".to_owned(),
        "GPU busy share".to_owned(),
        Unit::Share,
    );
    if let (Some(row), Some(ratio)) = (busy.as_mut(), gpu["busy_ratio"].as_f64()) {
        row.cells[2].push_str(&format!(" (×{ratio:.2})"));
    }
    util.into_iter().chain(busy).collect()
}

fn step_rows(c: &Value) -> Vec<Row> {
    step_parts()
        .iter()
        .filter_map(|part| {
            let name = format!("step: {part}");
            change_row(&c["step"][part], format!("step.{part}"), name, Unit::Share)
        })
        .collect()
}

fn function_rows(c: &Value) -> Vec<Row> {
    let functions = c["functions"].as_array().map_or(&[][..], Vec::as_slice);
    functions
        .iter()
        .take(MAX_FUNCTIONS)
        .filter_map(|f| {
            let function = f["function"].as_str()?;
            let name = match f["file"].as_str() {
                Some(file) if !file.is_empty() => format!("{function} ({file})"),
                _ => function.to_owned(),
            };
            change_row(f, format!("function.{function}"), name, Unit::Share)
        })
        .collect()
}

/// The table of figures: before, after, change and noise, the rows that moved beyond noise
/// emphasised.
fn write_figures<W: Write>(c: &Value, w: &mut W) -> Result<(), ReportError> {
    writeln!(
        w,
        "<section id=\"figures-section\">\n<h2>Figures</h2>\n<table id=\"figures\" \
         class=\"figures\">\n<tr><th>figure</th><th>before <span class=\"side\">{}</span></th>\
         <th>after <span class=\"side\">{}</span></th><th>change</th><th>noise</th></tr>",
        escape(label(c, "before")),
        escape(label(c, "after"))
    )?;
    let groups = [
        ("the recordings", run_rows(c)),
        ("the GPU", gpu_rows(c)),
        ("the training loop's step (share of its time)", step_rows(c)),
        (
            "functions that moved most (inclusive share of samples)",
            function_rows(c),
        ),
    ];
    for (heading, rows) in groups.iter().filter(|(_, rows)| !rows.is_empty()) {
        writeln!(
            w,
            "<tr class=\"group\"><th colspan=\"5\">{heading}</th></tr>"
        )?;
        for row in rows {
            write_row(row, w)?;
        }
    }
    writeln!(w, "</table>\n</section>")?;
    Ok(())
}

fn write_row<W: Write>(row: &Row, w: &mut W) -> Result<(), ReportError> {
    let class = if row.moved { " class=\"moved\"" } else { "" };
    write!(
        w,
        "<tr{class} data-figure=\"{}\"><th>{}</th>",
        escape(&row.key),
        escape(&row.name)
    )?;
    for cell in &row.cells {
        write!(w, "<td>{}</td>", escape(cell))?;
    }
    writeln!(w, "</tr>")?;
    Ok(())
}

/// Where compare.js draws the two timelines, each under its side's label.
fn write_timelines<W: Write>(c: &Value, w: &mut W) -> Result<(), ReportError> {
    writeln!(
        w,
        "<section id=\"timelines-section\">\n<h2>GPU utilization <span class=\"hint\">both on \
         one scale: seconds from each window's start, 0 to 100%; dashed: the idle threshold\
         </span></h2>"
    )?;
    let util = &c["gpu"]["mean_utilization"];
    for side in ["before", "after"] {
        let mean = util[side]
            .as_f64()
            .map_or(String::new(), |m| format!(", mean {m:.0}%"));
        writeln!(
            w,
            "<h3>{side}: {}{mean}</h3>\n<div id=\"timeline-{side}\" class=\"timeline\"></div>",
            escape(label(c, side))
        )?;
    }
    writeln!(w, "</section>")?;
    Ok(())
}

/// The loop's step in both recordings: a row per part, before's bar beside after's.
fn write_step_bars<W: Write>(c: &Value, w: &mut W) -> Result<(), ReportError> {
    writeln!(
        w,
        "<section id=\"step-section\">\n<h2>The training loop's time</h2>"
    )?;
    let step = &c["step"];
    if !step.is_object() {
        writeln!(
            w,
            "<p id=\"step-bars\" class=\"none\">No step breakdown: the training loop was not \
             found in both recordings.</p>\n</section>"
        )?;
        return Ok(());
    }
    let bottleneck = c["bottleneck"]["part"].as_str().unwrap_or("");
    writeln!(
        w,
        "<table id=\"step-bars\" class=\"step-bars\">\n<tr><th>part</th><th>before</th>\
         <th>after</th><th>change</th></tr>"
    )?;
    for part in step_parts() {
        write_step_row(&step[part], part, part == bottleneck, w)?;
    }
    writeln!(w, "</table>\n</section>")?;
    Ok(())
}

fn write_step_row<W: Write>(
    v: &Value,
    part: &str,
    bottleneck: bool,
    w: &mut W,
) -> Result<(), ReportError> {
    let Some(row) = change_row(v, part.to_owned(), part.to_owned(), Unit::Share) else {
        return Ok(());
    };
    let class = if row.moved { " class=\"moved\"" } else { "" };
    let tag = if bottleneck {
        " <span class=\"tag\">before's bottleneck</span>"
    } else {
        ""
    };
    write!(w, "<tr{class} data-part=\"{part}\"><th>{part}{tag}</th>")?;
    for side in ["before", "after"] {
        let pct = v[side].as_f64().unwrap_or(0.0).clamp(0.0, 1.0) * 100.0;
        write!(
            w,
            "<td class=\"bar\" data-side=\"{side}\"><span class=\"fill step-{part}\" \
             style=\"width:{pct:.1}%\"></span><span class=\"bar-value\">{pct:.0}%</span></td>"
        )?;
    }
    writeln!(w, "<td>{}</td></tr>", escape(&row.cells[2]))?;
    Ok(())
}

/// The differential icicle's place, its key and the toggle of the stacks that vanished.
fn write_icicle_section<W: Write>(page: &ComparePage, w: &mut W) -> Result<(), ReportError> {
    let vanished: Vec<&DiffStack> = page
        .stacks
        .iter()
        .filter(|s| s.after <= 0.0 && s.before > 0.0)
        .collect();
    let vanished_share: f64 = vanished.iter().map(|s| s.before).sum();
    writeln!(
        w,
        "<section id=\"diff-section\">\n<h2>Where the time moved <span class=\"hint\">width: \
         share of after's samples; colour: its change from before; click to zoom</span></h2>\n\
         <div class=\"controls\"><label><input type=\"checkbox\" id=\"toggle-vanished\"> show \
         the stacks that vanished ({} stack{}, {:.1}% of before's samples; drawn as wide as \
         their share of before)</label> <button id=\"reset-zoom\">reset zoom</button></div>\n\
         <div id=\"diff-legend\"><span class=\"swatch grew\"></span>grew \
         <span class=\"swatch shrank\"></span>shrank <span class=\"swatch same\"></span>within \
         half a point <span class=\"swatch vanished\"></span>vanished</div>\n\
         <div id=\"diff-icicle\"></div>\n<div id=\"diff-details\"></div>\n</section>",
        vanished.len(),
        if vanished.len() == 1 { "" } else { "s" },
        vanished_share * 100.0
    )?;
    Ok(())
}

#[cfg(test)]
#[path = "compare_tests.rs"]
mod tests;
