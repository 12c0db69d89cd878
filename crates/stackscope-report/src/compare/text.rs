//! The terminal's screen of `stackscope compare`: before → after and the change of every
//! figure, then the verdict on the change.

use std::io::Write;
use std::path::Path;

use stackscope_aggregate::compare::{Change, Comparison, Side};

use super::{COMPARE_HTML, COMPARE_JSON, DIFF_SVG};
use crate::ReportError;

/// Moved functions shown, and unmoved ones after them up to this many rows.
const FUNCTION_ROWS: usize = 8;
/// Width of the figure's name column.
const NAME_WIDTH: usize = 28;

/// Writes the screen; `out` is where the files went.
pub fn write_compare_text<W: Write>(
    c: &Comparison,
    out: &Path,
    w: &mut W,
) -> Result<(), ReportError> {
    writeln!(
        w,
        "stackscope compare: {} → {}",
        c.before.label, c.after.label
    )?;
    write_run(c, w)?;
    write_gpu(c, w)?;
    write_step(c, w)?;
    write_functions(c, w)?;
    for mismatch in &c.mismatches {
        writeln!(w, "Note: {mismatch}")?;
    }
    writeln!(w)?;
    writeln!(w, "{}", c.change.verdict.text)?;
    writeln!(
        w,
        "Written: {}/{COMPARE_JSON}, {DIFF_SVG}, {COMPARE_HTML}",
        out.display()
    )?;
    Ok(())
}

fn row<W: Write>(
    w: &mut W,
    name: &str,
    before: &str,
    after: &str,
    change: &str,
) -> std::io::Result<()> {
    writeln!(
        w,
        "  {name:<NAME_WIDTH$} {before:>15} {after:>15}   {change}"
    )
}

fn write_run<W: Write>(c: &Comparison, w: &mut W) -> std::io::Result<()> {
    let (b, a) = (&c.before, &c.after);
    row(w, "", "before", "after", "change")?;
    row(
        w,
        "duration",
        &secs(b.duration_secs),
        &secs(a.duration_secs),
        "",
    )?;
    row(
        w,
        "samples",
        &b.samples.to_string(),
        &a.samples.to_string(),
        "",
    )?;
    row(w, "rate", &hz(b.rate_hz), &hz(a.rate_hz), "")?;
    row(w, "processes (workers)", &procs(b), &procs(a), "")?;
    let class = |s: &Side| {
        s.verdict
            .as_ref()
            .map(|v| serde_json::to_value(v.class).ok())
            .and_then(|v| v.and_then(|v| v.as_str().map(str::to_owned)))
            .unwrap_or_else(|| "-".to_owned())
    };
    row(w, "verdict", &class(b), &class(a), "")?;
    let fix = |s: &Side| {
        s.if_fixed
            .as_ref()
            .map(|f| match (f.workers_now, f.workers_needed) {
                (Some(now), Some(needed)) if needed > now => {
                    format!("{:.1}x, {now}→{needed} workers", f.speedup_up_to)
                }
                _ => format!("{:.1}x", f.speedup_up_to),
            })
            .unwrap_or_else(|| "-".to_owned())
    };
    row(w, "if fixed, steps up to", &fix(b), &fix(a), "")
}

fn write_gpu<W: Write>(c: &Comparison, w: &mut W) -> std::io::Result<()> {
    let Some(gpu) = &c.gpu else {
        return Ok(());
    };
    let u = &gpu.mean_utilization;
    row(
        w,
        "GPU mean utilization",
        &format!("{:.0}%", u.before),
        &format!("{:.0}%", u.after),
        &format!("{:+.0} ±{:.0} points{}", u.change, u.noise, mark(u)),
    )?;
    let ratio = gpu
        .busy_ratio
        .map(|r| format!("{r:.2}x, "))
        .unwrap_or_default();
    let b = &gpu.busy_share;
    row(
        w,
        "GPU busy s per wall s",
        &pct(b.before),
        &pct(b.after),
        &format!("{ratio}{}", share_change(b)),
    )
}

fn write_step<W: Write>(c: &Comparison, w: &mut W) -> std::io::Result<()> {
    let Some(step) = &c.step else {
        return Ok(());
    };
    writeln!(w, "  the loop's step:")?;
    for (name, change) in step.parts() {
        if change.before < 0.005 && change.after < 0.005 {
            continue;
        }
        row(
            w,
            &format!("  {name}"),
            &pct(change.before),
            &pct(change.after),
            &share_change(change),
        )?;
    }
    Ok(())
}

fn write_functions<W: Write>(c: &Comparison, w: &mut W) -> std::io::Result<()> {
    if c.functions.is_empty() {
        return Ok(());
    }
    writeln!(w, "  functions (share of samples, anywhere on the stack):")?;
    for f in c.functions.iter().take(FUNCTION_ROWS) {
        let name = if f.file.is_empty() {
            f.function.clone()
        } else {
            format!("{} ({})", f.function, f.file)
        };
        row(
            w,
            &format!("  {}", cut(&name, NAME_WIDTH - 2)),
            &pct(f.share.before),
            &pct(f.share.after),
            &share_change(&f.share),
        )?;
    }
    Ok(())
}

/// "+46 ±7 points  *" for a share; the star marks a change beyond noise.
fn share_change(c: &Change) -> String {
    format!(
        "{:+.0} ±{:.0} points{}",
        c.change * 100.0,
        c.noise * 100.0,
        mark(c)
    )
}

fn mark(c: &Change) -> &'static str {
    if c.moved {
        "  moved"
    } else {
        ""
    }
}

fn pct(share: f64) -> String {
    format!("{:.0}%", share * 100.0)
}

fn secs(s: f64) -> String {
    format!("{s:.1} s")
}

fn hz(rate: f64) -> String {
    format!("{rate:.0} Hz")
}

fn procs(s: &Side) -> String {
    format!("{} ({})", s.processes, s.workers)
}

fn cut(text: &str, chars: usize) -> String {
    if text.chars().count() <= chars {
        return text.to_owned();
    }
    let mut out: String = text.chars().take(chars.saturating_sub(1)).collect();
    out.push('…');
    out
}
