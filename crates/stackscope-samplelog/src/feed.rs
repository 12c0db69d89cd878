//! Which events of a sample log belong to a time window: those inside it in the recorded
//! order, the attach events of processes alive at its start, and each device's first GPU
//! reading just after its end. The codec's side of `stackscope report` and `export`; what the
//! events are fed to (an aggregate, a trace) is the report crate's business.

use std::collections::{BTreeMap, BTreeSet, HashMap};

use stackscope_event::{Event, ProcessEvent, ProcessEventKind, RankInfo, Timestamp};

use crate::error::RebuildError;
use crate::header::LogHeader;
use crate::reader::SampleLogReader;
use crate::window::Window;

/// A GPU reading at `T` describes the time since the device's previous reading, so the first
/// reading of each device at or after the window's end still covers the window's last moments;
/// it is fed too when it is at most this late.
pub const GPU_COVER_SECS: f64 = 2.0;
/// Events are logged in the order the aggregator received them, GPU and memory readings up to
/// a few seconds late; once a stack sample (or error, or process event) this far past the
/// window's end is read, nothing that belongs to the window can follow, and reading stops.
pub const READ_PAST_END_SECS: f64 = 30.0;

/// What [`feed_window`] did.
#[derive(Debug, Clone, Copy)]
pub struct Fed {
    /// The latest event time read, seconds since the start.
    pub last_secs: f64,
    /// Events handed to the sink.
    pub used: u64,
    /// Whether reading stopped past the window's end, before the log's end.
    pub stopped_early: bool,
}

/// Hands `sink` the events of `window` from `reader` (whose header is `header`), as
/// `stackscope_report::rebuild` feeds its aggregator: the
/// window's events in the recorded order (the order the recording's aggregator took them in,
/// memory and GPU readings among the stacks as they arrived), the attach events of processes
/// alive at its start, and each device's first GPU reading just after its end. `export` feeds a trace the same way,
/// so that an export of a window holds exactly the samples of that window's report.
pub fn feed_window(
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
            // Readings of the other producers' clocks come late in their own order: they do
            // not say that the tick clock has passed the window.
            Event::Gpu(_) | Event::Memory(_) | Event::Cgroup(_) => {}
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
    event.time()
}
