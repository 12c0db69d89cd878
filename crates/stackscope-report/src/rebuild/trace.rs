//! Reading a window of a sample log into a [`SampleTrace`], for `stackscope export` and for
//! the `--format` files `attach` and `record` write beside their outputs.

use std::path::Path;

use stackscope_aggregate::{RecordingMeta, SampleTrace};
use stackscope_event::Event;

use stackscope_samplelog::{LogHeader, RebuildError};

use super::{read_window, LogRead, RebuildOptions, Sink};

impl Sink for SampleTrace {
    fn handle(&mut self, event: Event) {
        SampleTrace::handle(self, event);
    }
    fn finish(&mut self) {
        SampleTrace::finish(self);
    }
}

/// A window of a recording as a trace, with the recording's meta for that window.
#[derive(Debug)]
pub struct TraceOutcome {
    pub trace: SampleTrace,
    pub meta: RecordingMeta,
    pub header: LogHeader,
    /// The window clipped to the recording, seconds since its start.
    pub from_secs: f64,
    pub to_secs: f64,
    pub events_read: u64,
    /// What of the log was read.
    pub log: LogRead,
}

/// Reads `dir/samples.log` and feeds the events of `options.window` to a trace exactly as
/// [`super::rebuild`] feeds its aggregator (same configuration, same events, same order), so
/// that the trace's samples are those of the window's `stacks.folded`.
pub fn read_trace(dir: &Path, options: &RebuildOptions) -> Result<TraceOutcome, RebuildError> {
    let read = read_window(dir, options, |config, header| {
        let mut trace = SampleTrace::new(config, header.start);
        trace.expect_gpu_devices(&header.expected_gpu_devices);
        trace
    })?;
    Ok(TraceOutcome {
        trace: read.sink,
        meta: read.meta,
        header: read.header,
        from_secs: read.from_secs,
        to_secs: read.to_secs,
        events_read: read.events_read,
        log: read.log,
    })
}
