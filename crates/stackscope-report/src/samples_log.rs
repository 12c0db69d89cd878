//! What the recording's sample log kept, said in `summary.json` (`samples_log`) and in the
//! text printed at its end: its limits (`--log-max-size`, `--log-max-age`), the segments it
//! is in, and what was deleted to keep within them.

use std::io::Write;

use serde::{Deserialize, Serialize};
use stackscope_aggregate::Summary;
use stackscope_event::Timestamp;
use stackscope_samplelog::{LogLimits, SegmentStats};

use crate::ReportError;

/// The sample log of a recording: `summary.json`'s `samples_log`.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct SamplesLogSummary {
    /// `--log-max-size` in bytes; null without one.
    pub max_size_bytes: Option<u64>,
    /// `--log-max-age` in seconds; null without one.
    pub max_age_secs: Option<f64>,
    /// Files the log is in now: `samples.log` and the closed segments kept beside it.
    pub segments: u64,
    /// Bytes in them.
    pub bytes: u64,
    /// The oldest segments deleted to keep within the limits, and their bytes.
    pub dropped_segments: u64,
    pub dropped_bytes: u64,
    /// Seconds after the recording's start where the oldest segment kept starts: what
    /// `report` can rebuild begins there. Null when nothing was deleted.
    pub first_kept_secs: Option<f64>,
}

impl SamplesLogSummary {
    /// The summary of a log written under `limits`, whose writer says `stats`, for a recording
    /// that started at `start`.
    pub fn of(limits: LogLimits, stats: SegmentStats, start: Timestamp) -> SamplesLogSummary {
        SamplesLogSummary {
            max_size_bytes: limits.max_bytes,
            max_age_secs: limits.max_age.map(|age| age.as_secs_f64()),
            segments: stats.segments,
            bytes: stats.bytes,
            dropped_segments: stats.dropped_segments,
            dropped_bytes: stats.dropped_bytes,
            first_kept_secs: stats
                .first_kept
                .map(|t| (t.seconds_since(start) * 1000.0).round() / 1000.0),
        }
    }

    /// `Sample log: 5 segments, 310.2 KiB (--log-max-size 256.0 KiB); 12 older ones (800.0
    /// KiB) deleted: it starts at 210.3 s`; `None` for a log kept whole, without limits.
    pub fn line(&self) -> Option<String> {
        if self.max_size_bytes.is_none() && self.max_age_secs.is_none() {
            return None;
        }
        let mut limits = Vec::new();
        if let Some(max) = self.max_size_bytes {
            limits.push(format!("--log-max-size {}", bytes_text(max)));
        }
        if let Some(age) = self.max_age_secs {
            limits.push(format!("--log-max-age {age} s"));
        }
        let files = if self.segments == 1 {
            "1 file".to_owned()
        } else {
            format!("{} segments", self.segments)
        };
        let mut line = format!(
            "Sample log: {files}, {} ({})",
            bytes_text(self.bytes),
            limits.join(", ")
        );
        if self.dropped_segments > 0 {
            let older = if self.dropped_segments == 1 {
                "1 older segment".to_owned()
            } else {
                format!("{} older ones", self.dropped_segments)
            };
            line.push_str(&format!(
                "; {older} ({}) deleted: `report` starts at {:.1} s",
                bytes_text(self.dropped_bytes),
                self.first_kept_secs.unwrap_or(0.0)
            ));
        }
        Some(line)
    }
}

/// `summary.json`: the summary's fields as they are, then `samples_log` when there is one.
#[derive(Serialize)]
struct WithSamplesLog<'a> {
    #[serde(flatten)]
    summary: &'a Summary,
    #[serde(skip_serializing_if = "Option::is_none")]
    samples_log: Option<&'a SamplesLogSummary>,
}

/// Writes the summary as pretty JSON, ending with a newline, with `samples_log` after its
/// fields when given; without it, exactly as [`crate::write_summary_json`] does.
pub fn write_summary_json_with_log<W: Write>(
    summary: &Summary,
    samples_log: Option<&SamplesLogSummary>,
    mut w: W,
) -> Result<(), ReportError> {
    let Some(samples_log) = samples_log else {
        return crate::write_summary_json(summary, w);
    };
    let with = WithSamplesLog {
        summary,
        samples_log: Some(samples_log),
    };
    serde_json::to_writer_pretty(&mut w, &with)?;
    writeln!(w)?;
    w.flush()?;
    Ok(())
}

/// `310.2 KiB`, `4.0 MiB`, `1.5 GiB`, `900 bytes`.
fn bytes_text(bytes: u64) -> String {
    const UNITS: [(&str, f64); 3] = [
        ("GiB", 1024.0 * 1024.0 * 1024.0),
        ("MiB", 1024.0 * 1024.0),
        ("KiB", 1024.0),
    ];
    for (unit, size) in UNITS {
        if bytes as f64 >= size {
            return format!("{:.1} {unit}", bytes as f64 / size);
        }
    }
    format!("{bytes} bytes")
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::time::Duration;

    fn limited() -> SamplesLogSummary {
        SamplesLogSummary::of(
            LogLimits {
                max_bytes: Some(256 << 10),
                max_age: Some(Duration::from_secs(6 * 3600)),
            },
            SegmentStats {
                segments: 5,
                bytes: 310 << 10,
                dropped_segments: 12,
                dropped_bytes: 800 << 10,
                first_kept: Some(Timestamp(5_000_000_000 + 210_300_000_000)),
            },
            Timestamp(5_000_000_000),
        )
    }

    #[test]
    fn the_json_names_the_limits_and_what_was_deleted() {
        let json = serde_json::to_value(limited()).expect("json");
        assert_eq!(
            json,
            serde_json::json!({
                "max_size_bytes": 262144,
                "max_age_secs": 21600.0,
                "segments": 5,
                "bytes": 317440,
                "dropped_segments": 12,
                "dropped_bytes": 819200,
                "first_kept_secs": 210.3,
            })
        );
        let whole = SamplesLogSummary::of(
            LogLimits::NONE,
            SegmentStats {
                segments: 1,
                bytes: 1000,
                ..SegmentStats::default()
            },
            Timestamp(0),
        );
        let json = serde_json::to_value(&whole).expect("json");
        assert_eq!(json["max_size_bytes"], serde_json::Value::Null);
        assert_eq!(json["max_age_secs"], serde_json::Value::Null);
        assert_eq!(json["first_kept_secs"], serde_json::Value::Null);
        assert_eq!(whole.line(), None);
    }

    #[test]
    fn summary_json_keeps_its_fields_and_adds_samples_log_last() {
        use stackscope_aggregate::{AggregateConfig, Aggregator, RecordingMeta};
        use stackscope_testkit::events;
        let mut aggregator = Aggregator::new(AggregateConfig::default(), Timestamp(0));
        aggregator.handle(events::stack(
            events::ms(5),
            7,
            &events::thread(1, Some(7), Some("MainThread"), true),
            &[("step", "train.py", 3)],
        ));
        let summary = aggregator.summary(&RecordingMeta {
            pid: 7,
            command_line: "python train.py".into(),
            ..RecordingMeta::default()
        });
        let mut plain = Vec::new();
        crate::write_summary_json(&summary, &mut plain).expect("plain");
        let mut without = Vec::new();
        write_summary_json_with_log(&summary, None, &mut without).expect("without");
        assert_eq!(without, plain);
        let mut with = Vec::new();
        write_summary_json_with_log(&summary, Some(&limited()), &mut with).expect("with");
        let text = String::from_utf8(with).expect("utf-8");
        let plain = String::from_utf8(plain).expect("utf-8");
        // The same text, field for field, with samples_log appended before the closing brace.
        let head = plain.trim_end().strip_suffix('}').expect("an object");
        assert!(text.starts_with(head.trim_end()), "{text}");
        let value: serde_json::Value = serde_json::from_str(&text).expect("json");
        assert_eq!(value["samples_log"]["dropped_segments"], 12);
        assert_eq!(value["pid"], 7);
    }

    #[test]
    fn the_line_says_where_the_log_starts() {
        assert_eq!(
            limited().line().expect("a line"),
            "Sample log: 5 segments, 310.0 KiB (--log-max-size 256.0 KiB, --log-max-age 21600 \
             s); 12 older ones (800.0 KiB) deleted: `report` starts at 210.3 s"
        );
        assert_eq!(bytes_text(900), "900 bytes");
        assert_eq!(bytes_text(3 << 29), "1.5 GiB");
    }
}
