//! Reading a window of a sample log into a [`SampleTrace`], for `stackscope export` and for
//! the `--format` files `attach` and `record` write beside their outputs.

use std::path::Path;

use stackscope_aggregate::SampleTrace;
use stackscope_event::Event;
use stackscope_samplelog::RebuildError;

use super::{read_window, RebuildOptions, Sink, WindowRead};

impl Sink for SampleTrace {
    fn handle(&mut self, event: Event) {
        SampleTrace::handle(self, event);
    }
    fn finish(&mut self) {
        SampleTrace::finish(self);
    }
}

/// A window of a recording as a trace (`sink`), with the recording's meta for that window.
pub type TraceOutcome = WindowRead<SampleTrace>;

/// Reads `dir/samples.log` and feeds the events of `options.window` to a trace exactly as
/// [`super::rebuild`] feeds its aggregator (same configuration, same events, same order), so
/// that the trace's samples are those of the window's `stacks.folded`.
pub fn read_trace(dir: &Path, options: &RebuildOptions) -> Result<TraceOutcome, RebuildError> {
    read_window(dir, options, |config, header| {
        let mut trace = SampleTrace::new(config, header.start);
        trace.expect_gpu_devices(&header.expected_gpu_devices);
        trace
    })
}
