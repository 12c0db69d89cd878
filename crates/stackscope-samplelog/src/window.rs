//! The time window `stackscope report` rebuilds: seconds since the recording's start.

use std::path::{Path, PathBuf};

/// A half-open window `[from, to)` in seconds since the recording's start; an open end reaches
/// as far as the recording does (before its start or after its end).
///
/// An event at time `t` is in the window when `from <= t - start < to`.
#[derive(Debug, Clone, Copy, Default, PartialEq)]
pub struct Window {
    pub from: Option<f64>,
    pub to: Option<f64>,
}

impl Window {
    /// The whole recording.
    pub const WHOLE: Window = Window {
        from: None,
        to: None,
    };

    pub fn new(from: Option<f64>, to: Option<f64>) -> Window {
        Window { from, to }
    }

    pub fn is_whole(&self) -> bool {
        self.from.is_none() && self.to.is_none()
    }

    /// Whether an event `secs` seconds after the start is in the window.
    pub fn contains(&self, secs: f64) -> bool {
        let after_from = !matches!(self.from, Some(from) if secs < from);
        let before_to = !matches!(self.to, Some(to) if secs >= to);
        after_from && before_to
    }

    /// Checks that the window can hold anything: finite, not negative, `from` before `to`.
    pub fn validate(&self) -> Result<(), String> {
        for (name, value) in [("--from", self.from), ("--to", self.to)] {
            if let Some(v) = value {
                if !v.is_finite() || v < 0.0 {
                    return Err(format!(
                        "{name} {v} is not a number of seconds since the recording's start"
                    ));
                }
            }
        }
        if let (Some(from), Some(to)) = (self.from, self.to) {
            if to <= from {
                return Err(format!("--to {to} is not after --from {from}"));
            }
        }
        Ok(())
    }

    /// Parses `FROM-TO` (seconds since the recording's start; `FROM-` reaches to its end),
    /// as `stackscope compare DIR@FROM-TO` names a window, and checks it.
    pub fn parse(span: &str) -> Result<Window, String> {
        let (from, to) = span.split_once('-').ok_or_else(|| {
            format!("'{span}' is not a window: write FROM-TO in seconds, e.g. 0-30")
        })?;
        let secs = |text: &str| -> Result<Option<f64>, String> {
            if text.trim().is_empty() {
                return Ok(None);
            }
            text.trim().parse::<f64>().map(Some).map_err(|_| {
                format!("'{span}' is not a window: '{text}' is not a number of seconds")
            })
        };
        let window = Window::new(secs(from)?.or(Some(0.0)), secs(to)?);
        window.validate()?;
        Ok(window)
    }

    /// `FROM-TO` as [`Window::parse`] reads it, `FROM-` for an open end.
    pub fn span(&self) -> String {
        let from = self.from.unwrap_or(0.0);
        match self.to {
            Some(to) => format!("{from}-{to}"),
            None => format!("{from}-"),
        }
    }

    /// The name of the directory a report of this window goes to by default:
    /// `report-FROM-TO`, seconds, `0` and `end` for open ends (`report-600-1200`,
    /// `report-0-end`).
    pub fn dir_name(&self) -> String {
        let from = self.from.unwrap_or(0.0);
        match self.to {
            Some(to) => format!("report-{from}-{to}"),
            None => format!("report-{from}-end"),
        }
    }
}

/// Where `stackscope report DIR` writes by default: `DIR/report-FROM-TO/`, so that the
/// recording's own files in `DIR` stay as they are.
pub fn report_dir(dir: &Path, window: &Window) -> PathBuf {
    dir.join(window.dir_name())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_window_is_half_open() {
        let w = Window::new(Some(10.0), Some(20.0));
        assert!(!w.contains(9.999));
        assert!(w.contains(10.0));
        assert!(w.contains(19.999));
        assert!(!w.contains(20.0));
        assert!(Window::WHOLE.contains(-5.0));
        assert!(Window::new(None, Some(1.0)).contains(-5.0));
        assert!(Window::new(Some(1.0), None).contains(1e9));
    }

    #[test]
    fn bad_windows_are_refused() {
        assert!(Window::new(Some(5.0), Some(5.0)).validate().is_err());
        assert!(Window::new(Some(-1.0), None).validate().is_err());
        assert!(Window::new(None, Some(f64::NAN)).validate().is_err());
        assert!(Window::new(Some(0.0), Some(0.5)).validate().is_ok());
        assert!(Window::WHOLE.validate().is_ok());
    }

    #[test]
    fn spans_parse_as_compare_names_them() {
        assert_eq!(
            Window::parse("0-30"),
            Ok(Window::new(Some(0.0), Some(30.0)))
        );
        assert_eq!(Window::parse("30.5-"), Ok(Window::new(Some(30.5), None)));
        assert_eq!(
            Window::parse("30-60").map(|w| w.span()),
            Ok("30-60".to_owned())
        );
        assert!(Window::parse("30").is_err());
        assert!(Window::parse("a-b").is_err());
        assert!(Window::parse("30-10").is_err());
    }

    #[test]
    fn directory_names() {
        assert_eq!(Window::WHOLE.dir_name(), "report-0-end");
        assert_eq!(
            Window::new(Some(600.0), Some(1200.0)).dir_name(),
            "report-600-1200"
        );
        assert_eq!(Window::new(Some(12.5), None).dir_name(), "report-12.5-end");
        assert_eq!(
            report_dir(Path::new("out"), &Window::new(None, Some(60.0))),
            Path::new("out/report-0-60")
        );
    }
}
