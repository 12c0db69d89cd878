//! `diff.svg`: a differential flamegraph of two recordings, drawn by inferno.
//!
//! Widths are AFTER's samples; a frame is red where its share of the samples grew and blue
//! where it shrank (BEFORE normalized to AFTER's total, as inferno's `--normalize` does, so a
//! recording of another length or rate compares as shares). Stacks that vanished would be
//! zero wide; they are drawn under a root of their own, `[gone in AFTER]`, as wide as they
//! were in BEFORE, blue by as much as they were.

use std::io::Write;

use inferno::flamegraph::{from_lines, Options};
use stackscope_aggregate::compare::{Comparison, MatchedStack};

use crate::ReportError;

/// The root under which stacks that vanished are drawn.
pub const GONE_ROOT: &str = "[gone in AFTER]";

/// Writes the differential flamegraph of `stacks` (shares of each side's samples), scaled to
/// `after_samples`.
pub fn write_diff_svg<W: Write>(
    comparison: &Comparison,
    stacks: &[MatchedStack],
    after_samples: u64,
    mut w: W,
) -> Result<(), ReportError> {
    let lines = diff_lines(stacks, after_samples.max(1) as f64);
    let title = format!(
        "stackscope compare: {} → {}",
        comparison.before.label, comparison.after.label
    );
    if lines.is_empty() {
        return crate::flamegraph::write_flamegraph(&[], &title, w);
    }
    let mut options = Options::default();
    options.title = title;
    options.subtitle = Some(
        "widths: AFTER; red: a larger share of the samples than BEFORE, blue: smaller; \
         [gone in AFTER]: stacks that vanished"
            .to_owned(),
    );
    options.count_name = "samples".to_owned();
    from_lines(&mut options, lines.iter().map(String::as_str), &mut w)?;
    w.flush()?;
    Ok(())
}

/// `stack BEFORE AFTER` lines in AFTER's samples; a vanished stack as `[gone in AFTER];stack
/// 2n n`, n its BEFORE share in AFTER's samples: n wide, and down by n.
fn diff_lines(stacks: &[MatchedStack], scale: f64) -> Vec<String> {
    let count = |share: f64| (share * scale).round() as u64;
    let mut lines = Vec::new();
    for s in stacks {
        let (before, after) = (count(s.before), count(s.after));
        let stack = s.frames.join(";");
        if after > 0 {
            lines.push(format!("{stack} {before} {after}"));
        } else if before > 0 {
            lines.push(format!("{GONE_ROOT};{stack} {} {before}", 2 * before));
        }
    }
    lines
}

#[cfg(test)]
mod tests {
    use super::*;

    fn stack(frames: &str, before: f64, after: f64) -> MatchedStack {
        MatchedStack {
            frames: frames.split(';').map(str::to_owned).collect(),
            before,
            after,
        }
    }

    #[test]
    fn vanished_stacks_are_drawn_under_their_own_root() {
        let lines = diff_lines(
            &[
                stack("MainThread;f (a.py)", 0.5, 0.25),
                stack("MainThread;g (a.py)", 0.5, 0.75),
                stack("MainThread;h (a.py)", 0.1, 0.0),
            ],
            1000.0,
        );
        assert_eq!(
            lines,
            vec![
                "MainThread;f (a.py) 500 250",
                "MainThread;g (a.py) 500 750",
                "[gone in AFTER];MainThread;h (a.py) 200 100",
            ]
        );
    }
}
