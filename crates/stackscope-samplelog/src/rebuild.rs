//! Rebuilding a recording's aggregate from its sample log, for `stackscope report`.

use std::collections::{BTreeMap, BTreeSet, HashMap};
use std::path::Path;

use stackscope_aggregate::{AggregateConfig, Aggregator, RecordingMeta};
use stackscope_event::{Event, ProcessEvent, ProcessEventKind, RankInfo, Timestamp};

use crate::error::RebuildError;
use crate::header::LogHeader;
use crate::meta::{recording_meta, Coverage, OldSummary};
use crate::reader::{LogEnd, SampleLogReader};
use crate::window::Window;
use crate::LOG_FILE_NAME;

/// A GPU reading at `T` describes the time since the device's previous reading, so the first
/// reading of each device at or after the window's end still covers the window's last moments;
/// it is fed too when it is at most this late.
pub const GPU_COVER_SECS: f64 = 2.0;
/// Events are logged in the order the aggregator received them, GPU readings up to a few
/// seconds late; once a stack sample this far past the window's end is read, nothing that
/// belongs to the window can follow, and reading stops.
pub const READ_PAST_END_SECS: f64 = 30.0;

/// What `stackscope report` asks for.
#[derive(Debug, Clone, Copy, Default, PartialEq)]
pub struct RebuildOptions {
    pub window: Window,
    /// The GPU-idle threshold; the recording's own when `None`.
    pub idle_below: Option<f32>,
    /// Whether to keep samples of idle threads; the recording's choice when `None`.
    pub include_idle: Option<bool>,
}

/// A rebuilt recording: hand `aggregator` and `meta` to `stackscope_report::write_outputs`.
#[derive(Debug)]
pub struct RebuildOutcome {
    /// Fed every event of the window and finished.
    pub aggregator: Aggregator,
    pub meta: RecordingMeta,
    pub header: LogHeader,
    /// The window clipped to the recording, seconds since its start.
    pub from_secs: f64,
    pub to_secs: f64,
    /// The recording's length, as far as the log (and its summary) know.
    pub recording_secs: f64,
    pub events_read: u64,
    /// Events fed to the aggregator: those of the window, the attach events of processes
    /// alive at its start, and one GPU reading per device just after its end.
    pub events_used: u64,
    /// How reading the log ended; `None` when it stopped early, past the window.
    pub log_end: Option<LogEnd>,
}

/// Reads `dir/samples.log` and aggregates the events inside `options.window` exactly as the
/// recording did (same configuration, same order), then builds the recording's meta for that
/// window from the log's header and `dir/summary.json` (when there is one).
///
/// Over the whole window the folded profiles equal the recording's own.
pub fn rebuild(dir: &Path, options: &RebuildOptions) -> Result<RebuildOutcome, RebuildError> {
    let read = read_window(dir, options, |config, header| {
        let mut aggregator = Aggregator::new(config, header.start);
        aggregator.expect_gpu_devices(&header.expected_gpu_devices);
        aggregator
    })?;
    Ok(RebuildOutcome {
        aggregator: read.sink,
        meta: read.meta,
        header: read.header,
        from_secs: read.from_secs,
        to_secs: read.to_secs,
        recording_secs: read.recording_secs,
        events_read: read.events_read,
        events_used: read.events_used,
        log_end: read.log_end,
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

/// A window read into a sink, with what `RebuildOutcome` says about it.
pub(crate) struct WindowRead<S> {
    pub sink: S,
    pub meta: RecordingMeta,
    pub header: LogHeader,
    pub from_secs: f64,
    pub to_secs: f64,
    pub recording_secs: f64,
    pub events_read: u64,
    pub events_used: u64,
    pub log_end: Option<LogEnd>,
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
    if !path.exists() {
        return Err(RebuildError::NoLog {
            dir: dir.to_owned(),
        });
    }
    let mut reader = SampleLogReader::open(&path)?;
    let header = reader.header().clone();
    let mut config = header.aggregate_config();
    if let Some(idle_below) = options.idle_below {
        config.idle_below = idle_below;
    }
    if let Some(include_idle) = options.include_idle {
        config.include_idle = include_idle;
    }
    let mut sink = new(config, &header);
    // The log does not keep ranks; the recording's summary does, by pid.
    let old = OldSummary::read(dir);
    let ranks = old.process_ranks();
    let fed = feed_window(&mut reader, &header, window, &ranks, &mut |event| {
        sink.handle(event)
    })?;
    let (last_secs, used, stopped_early) = (fed.last_secs, fed.used, fed.stopped_early);
    sink.finish();

    let recording_secs = last_secs.max(old.duration_secs().unwrap_or(0.0));
    let from_secs = window.from.unwrap_or(0.0);
    if !stopped_early && from_secs >= recording_secs && window.from.is_some() {
        return Err(RebuildError::Window(format!(
            "--from {from_secs} is at or past the recording's end ({recording_secs:.1} s)"
        )));
    }
    let to_secs = window
        .to
        .map_or(recording_secs, |to| to.min(recording_secs));
    let log_end = if stopped_early {
        None
    } else {
        reader.end().cloned()
    };
    let meta = recording_meta(
        &header,
        &old,
        &Coverage {
            // `--from 0 --to 1000` of a 600 s recording is the whole recording too.
            whole: from_secs <= 0.0 && to_secs >= recording_secs,
            from: from_secs,
            to: to_secs,
            recording_secs,
            log_end: log_end.as_ref(),
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
        log_end,
    })
}

/// What [`feed_window`] did.
#[derive(Debug, Clone, Copy)]
pub(crate) struct Fed {
    /// The latest event time read, seconds since the start.
    pub last_secs: f64,
    /// Events handed to the sink.
    pub used: u64,
    /// Whether reading stopped past the window's end, before the log's end.
    pub stopped_early: bool,
}

/// Hands `sink` the events of `window` from `reader`, as `rebuild` feeds its aggregator: the
/// window's events in the recorded order, the attach events of processes alive at its start,
/// and each device's first GPU reading just after its end. `export` feeds a trace the same way,
/// so that an export of a window holds exactly the samples of that window's report.
pub(crate) fn feed_window(
    reader: &mut SampleLogReader,
    header: &LogHeader,
    window: Window,
    ranks: &HashMap<u32, RankInfo>,
    sink: &mut dyn FnMut(Event),
) -> Result<Fed, RebuildError> {
    let mut last_secs: f64 = 0.0;
    let mut used = 0u64;
    let mut before = ProcessesBefore::default();
    let mut covered_after_end = BTreeSet::new();
    let mut stopped_early = false;
    for event in reader.by_ref() {
        let event = match event? {
            Event::Process(mut process) if process.kind == ProcessEventKind::Attached => {
                if let Some(rank) = ranks.get(&process.pid) {
                    process.rank = *rank;
                }
                Event::Process(process)
            }
            event => event,
        };
        let secs = event_time(&event).seconds_since(header.start);
        last_secs = last_secs.max(secs);
        let keep = if window.contains(secs) {
            true
        } else if let (Event::Gpu(gpu), Some(to)) = (&event, window.to) {
            secs >= to && secs < to + GPU_COVER_SECS && covered_after_end.insert(gpu.device)
        } else {
            false
        };
        if keep {
            used += before.feed(sink);
            sink(event);
            used += 1;
            continue;
        }
        let past = matches!(window.to, Some(to) if secs >= to + READ_PAST_END_SECS);
        match event {
            Event::Process(process) if window.from.is_some_and(|from| secs < from) => {
                before.note(process, sink);
            }
            Event::Gpu(_) => {}
            _ if past => {
                stopped_early = true;
                break;
            }
            _ => {}
        }
    }
    used += before.feed(sink);
    Ok(Fed {
        last_secs,
        used,
        stopped_early,
    })
}

/// The processes attached before the window and still there at its start: their attach events
/// are fed at the window's start, so that process roots (`--subprocesses`) name their command
/// as the recording's do, and processes gone before the window do not appear at all.
#[derive(Debug, Default)]
struct ProcessesBefore {
    alive: BTreeMap<u32, ProcessEvent>,
    fed: bool,
}

impl ProcessesBefore {
    fn note(&mut self, process: ProcessEvent, sink: &mut dyn FnMut(Event)) {
        if self.fed {
            // Late, after the window began: state all the same.
            sink(Event::Process(process));
            return;
        }
        match process.kind {
            ProcessEventKind::Attached => {
                self.alive.insert(process.pid, process);
            }
            ProcessEventKind::Exited => {
                self.alive.remove(&process.pid);
            }
        }
    }

    /// Feeds the attach events once; returns how many.
    fn feed(&mut self, sink: &mut dyn FnMut(Event)) -> u64 {
        if self.fed {
            return 0;
        }
        self.fed = true;
        let mut attached: Vec<ProcessEvent> =
            std::mem::take(&mut self.alive).into_values().collect();
        attached.sort_by_key(|p| p.time);
        let count = attached.len() as u64;
        for process in attached {
            sink(Event::Process(process));
        }
        count
    }
}

fn event_time(event: &Event) -> Timestamp {
    match event {
        Event::Stack(s) => s.time,
        Event::SampleError(e) => e.time,
        Event::Gpu(g) => g.time,
        Event::Process(p) => p.time,
    }
}
