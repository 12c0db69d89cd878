//! Rebuilding a recording's aggregate from its sample log, for `stackscope report`.

use std::collections::{BTreeMap, BTreeSet};
use std::path::Path;

use stackscope_aggregate::{Aggregator, RecordingMeta};
use stackscope_event::{Event, ProcessEvent, ProcessEventKind, Timestamp};

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
    let mut aggregator = Aggregator::new(config, header.start);
    aggregator.expect_gpu_devices(&header.expected_gpu_devices);

    let mut last_secs: f64 = 0.0;
    let mut used = 0u64;
    let mut before = ProcessesBefore::default();
    let mut covered_after_end = BTreeSet::new();
    let mut stopped_early = false;
    // The log does not keep ranks; the recording's summary does, by pid.
    let old = OldSummary::read(dir);
    let ranks = old.process_ranks();
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
            used += before.feed(&mut aggregator);
            aggregator.handle(event);
            used += 1;
            continue;
        }
        let past = matches!(window.to, Some(to) if secs >= to + READ_PAST_END_SECS);
        match event {
            Event::Process(process) if window.from.is_some_and(|from| secs < from) => {
                before.note(process, &mut aggregator);
            }
            Event::Gpu(_) => {}
            _ if past => {
                stopped_early = true;
                break;
            }
            _ => {}
        }
    }
    used += before.feed(&mut aggregator);
    aggregator.finish();

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
    Ok(RebuildOutcome {
        aggregator,
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

/// The processes attached before the window and still there at its start: their attach events
/// are fed at the window's start, so that process roots (`--subprocesses`) name their command
/// as the recording's do, and processes gone before the window do not appear at all.
#[derive(Debug, Default)]
struct ProcessesBefore {
    alive: BTreeMap<u32, ProcessEvent>,
    fed: bool,
}

impl ProcessesBefore {
    fn note(&mut self, process: ProcessEvent, aggregator: &mut Aggregator) {
        if self.fed {
            // Late, after the window began: state all the same.
            aggregator.handle(Event::Process(process));
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
    fn feed(&mut self, aggregator: &mut Aggregator) -> u64 {
        if self.fed {
            return 0;
        }
        self.fed = true;
        let mut attached: Vec<ProcessEvent> =
            std::mem::take(&mut self.alive).into_values().collect();
        attached.sort_by_key(|p| p.time);
        let count = attached.len() as u64;
        for process in attached {
            aggregator.handle(Event::Process(process));
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
