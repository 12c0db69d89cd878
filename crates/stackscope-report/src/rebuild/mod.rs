//! Rebuilding a recording's aggregate (for `stackscope report`) or trace (for `export`) from
//! its sample log. This is where the log's codec (`stackscope-samplelog`, which knows nothing
//! of aggregation) and the aggregate meet: the codec says which events belong to a window
//! ([`stackscope_samplelog::feed_window`]), this module feeds them to an [`Aggregator`] or a
//! [`stackscope_aggregate::SampleTrace`] configured as the recording was, and builds the
//! recording's meta from the log's header and `summary.json`.

mod log_read;
mod meta;
mod trace;

use std::path::Path;

use stackscope_aggregate::{AggregateConfig, Aggregator, RecordingMeta};
use stackscope_event::Event;
use stackscope_samplelog::{
    feed_window, log_exists, LogHeader, RebuildError, SampleLogReader, Window, LOG_FILE_NAME,
};

pub use log_read::{Dropped, LogRead};
use meta::{recording_meta, Coverage, OldSummary};
pub use trace::{read_trace, TraceOutcome};

/// The aggregator configuration the recording ran with, as its log's header keeps it.
pub fn aggregate_config(header: &LogHeader) -> AggregateConfig {
    AggregateConfig {
        include_idle: header.include_idle,
        idle_below: header.idle_below,
        gpu_enabled: header.gpu_enabled,
        process_root: header.process_root,
        leave_out_startup: header.leave_out_startup.unwrap_or(false),
        processes_apart: header.processes_apart,
        threads_apart: header.threads_apart,
    }
}

/// What `stackscope report` asks for.
#[derive(Debug, Clone, Copy, Default, PartialEq)]
pub struct RebuildOptions {
    pub window: Window,
    /// The GPU-idle threshold; the recording's own when `None`.
    pub idle_below: Option<f32>,
    /// Whether to keep samples of idle threads; the recording's choice when `None`.
    pub include_idle: Option<bool>,
    /// Keep like processes apart, whatever the recording did (`--processes-apart`).
    pub processes_apart: bool,
    /// Keep every thread apart, whatever the recording did (`--threads-apart`).
    pub threads_apart: bool,
}

/// A rebuilt recording: hand `sink` (the aggregator) and `meta` to
/// `stackscope_report::write_outputs`.
pub type RebuildOutcome = WindowRead<Aggregator>;

/// Reads `dir/samples.log` and aggregates the events inside `options.window` exactly as the
/// recording did (same configuration, same order), then builds the recording's meta for that
/// window from the log's header and `dir/summary.json` (when there is one).
///
/// Over the whole window the folded profiles equal the recording's own.
pub fn rebuild(dir: &Path, options: &RebuildOptions) -> Result<RebuildOutcome, RebuildError> {
    read_window(dir, options, |config, header| {
        let mut aggregator = Aggregator::new(config, header.start);
        aggregator.expect_gpu_devices(&header.expected_gpu_devices);
        aggregator
    })
}

/// What takes a window's events: the aggregator for `report`, a trace for `export`.
pub(crate) trait Sink {
    fn handle(&mut self, event: Event);
    /// The end of the window: tag what is still held.
    fn finish(&mut self);
}

impl Sink for Aggregator {
    fn handle(&mut self, event: Event) {
        Aggregator::handle(self, event);
    }
    fn finish(&mut self) {
        Aggregator::finish(self);
    }
}

/// A window of a recording read into a sink (the aggregator of [`RebuildOutcome`], the trace
/// of [`TraceOutcome`]), with what is known about the window.
#[derive(Debug)]
pub struct WindowRead<S> {
    /// Fed every event of the window and finished.
    pub sink: S,
    pub meta: RecordingMeta,
    pub header: LogHeader,
    /// The window clipped to the recording, seconds since its start.
    pub from_secs: f64,
    pub to_secs: f64,
    /// The recording's length, as far as the log (and its summary, when the log is whole)
    /// know.
    pub recording_secs: f64,
    pub events_read: u64,
    /// Events fed to the sink: those of the window, the attach events of processes alive at
    /// its start, and one GPU reading per device just after its end.
    pub events_used: u64,
    /// What of the log was read.
    pub log: LogRead,
}

/// Reads `dir/samples.log`, feeds the window's events to the sink `new` makes from the
/// recording's configuration (with `options`' overrides), finishes it, and builds the meta.
pub(crate) fn read_window<S: Sink>(
    dir: &Path,
    options: &RebuildOptions,
    new: impl FnOnce(AggregateConfig, &LogHeader) -> S,
) -> Result<WindowRead<S>, RebuildError> {
    let window = options.window;
    window.validate().map_err(RebuildError::Window)?;
    let path = dir.join(LOG_FILE_NAME);
    // One file, or segments of a log kept within --log-max-size/--log-max-age.
    if !log_exists(dir) {
        return Err(RebuildError::NoLog {
            dir: dir.to_owned(),
        });
    }
    let mut reader = SampleLogReader::open(&path)?;
    let header = reader.header().clone();
    let dropped = dropped_segments(&reader, &header);
    if let (Some(dropped), Some(to)) = (dropped, window.to) {
        if to <= dropped.kept_from_secs {
            return Err(RebuildError::Window(format!(
                "--to {to} is before the sample log's first kept segment, at {:.1} s: its \
                 older segments were deleted to keep it within --log-max-size or --log-max-age",
                dropped.kept_from_secs
            )));
        }
    }
    let old = OldSummary::read(dir);
    let mut config = window_config(&header, options, &old);
    // Start-up is the recording's beginning, deleted with the oldest segments.
    if dropped.is_some() {
        config.leave_out_startup = false;
    }
    let mut sink = new(config, &header);
    // The log does not keep ranks; the recording's summary does, by pid.
    let ranks = old.process_ranks();
    let fed = feed_window(&mut reader, &header, window, &ranks, &mut |event| {
        sink.handle(event)
    })?;
    let (last_secs, used, stopped_early) = (fed.last_secs, fed.used, fed.stopped_early);
    sink.finish();
    let log = LogRead {
        last_secs,
        end: if stopped_early {
            None
        } else {
            reader.end().cloned()
        },
        damage: reader.damage(),
        dropped,
    };
    if reader.events_read() == 0 {
        return Err(RebuildError::NothingRead {
            path,
            why: log.why_empty(),
        });
    }
    // A log that ends early covers what was read of it, whatever the summary says.
    let recording_secs = if log.incomplete() {
        last_secs
    } else {
        last_secs.max(old.duration_secs().unwrap_or(0.0))
    };
    let (from_secs, to_secs) = window_bounds(window, recording_secs, stopped_early)?;
    // What was deleted of the log is not in the report: it starts where the log does.
    let from_secs = from_secs.max(dropped.map_or(0.0, |d| d.kept_from_secs));
    let meta = recording_meta(
        &header,
        &old,
        &Coverage {
            // `--from 0 --to 1000` of a 600 s recording is the whole recording too.
            whole: from_secs <= 0.0 && to_secs >= recording_secs,
            from: from_secs,
            to: to_secs,
            recording_secs,
            log: &log,
        },
    );
    Ok(WindowRead {
        sink,
        meta,
        header,
        from_secs,
        to_secs,
        recording_secs,
        events_read: reader.events_read(),
        events_used: used,
        log,
    })
}

/// Where the log starts when its oldest segments were deleted, and how many were.
fn dropped_segments(reader: &SampleLogReader, header: &LogHeader) -> Option<Dropped> {
    let kept_from = reader.kept_from()?;
    let first = reader.first_segment()?;
    Some(Dropped {
        segments: first.index.saturating_sub(1),
        kept_from_secs: kept_from.seconds_since(header.start).max(0.0),
    })
}

/// The recording's configuration from the log's header, with `options`' overrides, for a
/// rebuild of `options.window`.
fn window_config(
    header: &LogHeader,
    options: &RebuildOptions,
    old: &OldSummary,
) -> AggregateConfig {
    let mut config = aggregate_config(header);
    if let Some(idle_below) = options.idle_below {
        config.idle_below = idle_below;
    }
    if let Some(include_idle) = options.include_idle {
        config.include_idle = include_idle;
    }
    config.processes_apart |= options.processes_apart;
    config.threads_apart |= options.threads_apart;
    // A log from before the header said: a recording that knows its command's exit started
    // the job itself (`record`).
    if header.leave_out_startup.is_none() {
        config.leave_out_startup = old.launched();
    }
    // Start-up is the recording's beginning: a window that starts later has none.
    if options.window.from.is_some_and(|from| from > 0.0) {
        config.leave_out_startup = false;
    }
    config
}

/// The window's start and end in seconds, the end no later than the recording's; a `--from`
/// at or past the end of a log read to its end is an error.
fn window_bounds(
    window: Window,
    recording_secs: f64,
    stopped_early: bool,
) -> Result<(f64, f64), RebuildError> {
    let from_secs = window.from.unwrap_or(0.0);
    if !stopped_early && from_secs >= recording_secs && window.from.is_some() {
        return Err(RebuildError::Window(format!(
            "--from {from_secs} is at or past the recording's end ({recording_secs:.1} s)"
        )));
    }
    let to_secs = window
        .to
        .map_or(recording_secs, |to| to.min(recording_secs));
    Ok((from_secs, to_secs))
}

#[cfg(test)]
mod tests {
    use super::*;

    /// The sample log's crate cannot name the aggregate's default (neither depends on the
    /// other), so its header's default is checked against it here, where both meet.
    #[test]
    fn a_default_header_rebuilds_with_the_default_config() {
        assert_eq!(
            aggregate_config(&LogHeader::default()),
            AggregateConfig::default()
        );
        assert_eq!(
            LogHeader::default().idle_below,
            stackscope_aggregate::DEFAULT_IDLE_BELOW
        );
    }
}
