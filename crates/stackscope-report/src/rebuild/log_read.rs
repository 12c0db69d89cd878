//! What of a recording's sample log a rebuild could read, said the same way on `report`'s and
//! `export`'s stderr and in the rebuilt summary's notices: the span read, the damaged blocks
//! skipped, and why the log ends early when it does; and, for a log kept within a size or an
//! age, where it starts when its oldest segments were deleted.

use stackscope_samplelog::{Damage, LogEnd};

/// What reading the log found.
#[derive(Debug, Clone, PartialEq)]
pub struct LogRead {
    /// The latest event read, seconds since the recording's start.
    pub last_secs: f64,
    /// How reading ended; `None` when it stopped past the window, before the log's end.
    pub end: Option<LogEnd>,
    pub damage: Damage,
    /// Of a log whose oldest segments were deleted (`--log-max-size`, `--log-max-age`): how
    /// many, and where the oldest kept starts, seconds since the recording's start.
    pub dropped: Option<Dropped>,
}

/// The oldest segments of a sample log, deleted to keep it within its limits.
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct Dropped {
    pub segments: u64,
    /// Where the log now starts, seconds since the recording's start.
    pub kept_from_secs: f64,
}

impl LogRead {
    /// Whether the log ends before the recording did: cut short, or damaged at its end.
    pub fn incomplete(&self) -> bool {
        matches!(self.end, Some(LogEnd::Torn { .. } | LogEnd::Corrupt { .. }))
    }

    /// `read 0.0 to 23.1 s; 1 damaged block skipped (16384 bytes); the log is incomplete after
    /// that (...)`; `None` when nothing was left out.
    pub fn problems(&self) -> Option<String> {
        let mut parts = Vec::new();
        let d = self.damage;
        if d.blocks > 0 {
            let blocks = if d.blocks == 1 {
                "1 damaged block".to_owned()
            } else {
                format!("{} damaged blocks", d.blocks)
            };
            let lost = match d.lost_events {
                0 => String::new(),
                n => format!(", and {n} later events that used what they defined"),
            };
            parts.push(format!("{blocks} skipped ({} bytes){lost}", d.bytes));
        }
        match &self.end {
            Some(LogEnd::Torn { ignored_bytes, .. }) => parts.push(format!(
                "the log is incomplete after that (it ends in {ignored_bytes} bytes of an \
                 unfinished block: the recording was cut short, or is still running)"
            )),
            Some(LogEnd::Corrupt {
                offset,
                ignored_bytes,
                why,
            }) => parts.push(format!(
                "the log is incomplete after that (damaged at byte {offset}: {why}; the \
                 {ignored_bytes} bytes from there on were left out)"
            )),
            Some(LogEnd::Complete) | None => {}
        }
        (!parts.is_empty())
            .then(|| format!("read 0.0 to {:.1} s; {}", self.last_secs, parts.join("; ")))
    }

    /// `this report starts at 210.3 s, the sample log's first kept segment: its 12 oldest
    /// segments were deleted to keep it within --log-max-size or --log-max-age`; `None` when
    /// the log starts with the recording.
    pub fn dropped_line(&self) -> Option<String> {
        let dropped = self.dropped?;
        let segments = if dropped.segments == 1 {
            "its oldest segment was".to_owned()
        } else {
            format!("its {} oldest segments were", dropped.segments)
        };
        Some(format!(
            "this report starts at {:.1} s, the sample log's first kept segment: {segments} \
             deleted to keep it within --log-max-size or --log-max-age",
            dropped.kept_from_secs
        ))
    }

    /// Why nothing could be read, for a log that gave no event.
    pub fn why_empty(&self) -> String {
        match &self.end {
            Some(LogEnd::Torn { .. }) => "it ends inside its first block of events (the \
                                          recording was cut short before it wrote one whole)"
                .to_owned(),
            Some(LogEnd::Corrupt { why, .. }) => {
                format!("its first block of events is damaged ({why}) and no good block follows")
            }
            Some(LogEnd::Complete) | None if self.damage.blocks > 0 => {
                "every block of events is damaged".to_owned()
            }
            Some(LogEnd::Complete) | None => "it holds no events".to_owned(),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn read(end: LogEnd, damage: Damage) -> LogRead {
        LogRead {
            last_secs: 23.14,
            end: Some(end),
            damage,
            dropped: None,
        }
    }

    #[test]
    fn a_whole_log_has_nothing_to_say() {
        assert_eq!(read(LogEnd::Complete, Damage::default()).problems(), None);
        assert_eq!(
            read(LogEnd::Complete, Damage::default()).dropped_line(),
            None
        );
    }

    #[test]
    fn a_log_whose_oldest_segments_were_deleted_says_where_it_starts() {
        let mut log = read(LogEnd::Complete, Damage::default());
        log.dropped = Some(Dropped {
            segments: 12,
            kept_from_secs: 210.34,
        });
        assert_eq!(
            log.dropped_line().expect("a line"),
            "this report starts at 210.3 s, the sample log's first kept segment: its 12 oldest \
             segments were deleted to keep it within --log-max-size or --log-max-age"
        );
        // Not a problem of the log: said once, apart.
        assert_eq!(log.problems(), None);
    }

    #[test]
    fn the_span_read_and_what_was_left_out() {
        let torn = LogEnd::Torn {
            offset: 100,
            ignored_bytes: 8,
        };
        let line = read(torn, Damage::default()).problems().expect("a line");
        assert!(
            line.starts_with(
                "read 0.0 to 23.1 s; the log is incomplete after that (it ends in 8 bytes"
            ),
            "{line}"
        );
        let damage = Damage {
            blocks: 2,
            bytes: 4096,
            lost_events: 7,
        };
        let line = read(LogEnd::Complete, damage).problems().expect("a line");
        assert_eq!(
            line,
            "read 0.0 to 23.1 s; 2 damaged blocks skipped (4096 bytes), and 7 later events that \
             used what they defined"
        );
        assert!(!read(LogEnd::Complete, Damage::default()).incomplete());
        assert!(read(
            LogEnd::Torn {
                offset: 1,
                ignored_bytes: 1
            },
            Damage::default()
        )
        .incomplete());
    }
}
