//! SVG flamegraphs drawn by inferno from folded lines.

use std::io::Write;

use inferno::flamegraph::color::{MultiPalette, Palette};
use inferno::flamegraph::{from_lines, Options};

use crate::markup::escape;
use crate::ReportError;

/// Writes an interactive SVG flamegraph of `lines` (stack, count), each run of Python's
/// import-machinery frames drawn as one frame ([`crate::import_frames`]). An empty profile,
/// which inferno refuses, gets a small SVG that says there were no samples, so every output
/// file is always a valid SVG.
pub fn write_flamegraph<W: Write>(
    lines: &[(String, u64)],
    title: &str,
    mut w: W,
) -> Result<(), ReportError> {
    let text: Vec<String> = crate::import_frames::fold_lines(lines)
        .iter()
        .filter(|(_, count)| *count > 0)
        .map(|(stack, count)| format!("{stack} {count}"))
        .collect();
    if text.is_empty() {
        return write_empty_svg(title, w);
    }
    let mut options = Options::default();
    options.title = title.to_owned();
    options.count_name = "samples".to_owned();
    options.colors = Palette::Multi(MultiPalette::Python);
    // Colours from a hash of the name, not random: the same function looks the same in the
    // all, GPU-idle and GPU-busy graphs, and output is reproducible.
    options.hash = true;
    from_lines(&mut options, text.iter().map(String::as_str), &mut w)?;
    w.flush()?;
    Ok(())
}

fn write_empty_svg<W: Write>(title: &str, mut w: W) -> Result<(), ReportError> {
    let title = escape(title);
    write!(
        w,
        r##"<?xml version="1.0" standalone="no"?>
<svg version="1.1" width="1200" height="120" viewBox="0 0 1200 120" xmlns="http://www.w3.org/2000/svg">
<rect x="0" y="0" width="1200" height="120" fill="#f8f8f8"/>
<text x="600" y="40" text-anchor="middle" font-family="Verdana, sans-serif" font-size="17">{title}</text>
<text x="600" y="80" text-anchor="middle" font-family="Verdana, sans-serif" font-size="14" fill="#555555">no samples</text>
</svg>
"##
    )?;
    w.flush()?;
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::test_xml::{parse_svg, Svg};

    fn render(lines: &[(String, u64)], title: &str) -> Svg {
        let mut out = Vec::new();
        write_flamegraph(lines, title, &mut out).expect("flamegraph");
        parse_svg(&out)
    }

    #[test]
    fn flamegraph_names_every_function() {
        let lines = vec![
            (
                "MainThread;<module> (train.py:50);load_batch (train.py:12)".to_owned(),
                70,
            ),
            (
                "MainThread;<module> (train.py:50);train_step (train.py:25)".to_owned(),
                30,
            ),
        ];
        let svg = render(&lines, "stackscope: pid 42");
        let titles = svg.titles.join("\n");
        assert!(
            titles.contains("load_batch (train.py:12) (70 samples, 70.00%)"),
            "{titles}"
        );
        assert!(
            titles.contains("train_step (train.py:25) (30 samples, 30.00%)"),
            "{titles}"
        );
        assert!(
            titles.contains("<module> (train.py:50) (100 samples, 100.00%)"),
            "{titles}"
        );
        assert!(titles.contains("MainThread"), "{titles}");
        assert!(svg.texts.iter().any(|t| t == "stackscope: pid 42"));
    }

    #[test]
    fn empty_profile_is_a_valid_svg() {
        let svg = render(&[], "GPU idle <none> & co");
        assert_eq!(svg.root, "svg");
        assert!(
            svg.texts.iter().any(|t| t == "no samples"),
            "{:?}",
            svg.texts
        );
        assert!(
            svg.texts.iter().any(|t| t == "GPU idle <none> & co"),
            "{:?}",
            svg.texts
        );
    }
}
