//! The aggregate of a recording and the files it writes: it folds every batch the session
//! hands it, and on request (every `--flush-interval`, SIGUSR1, the end) writes the whole
//! output directory. It runs on the consumer's thread: folding and writing never overlap, so
//! nothing is shared and nothing is locked.

use std::path::{Path, PathBuf};

use anyhow::Context;
use stackscope_aggregate::{AggregateConfig, Aggregator, RecordingMeta};
use stackscope_event::{Batch, Event, Timestamp};
use stackscope_report::{OutputFiles, SamplesLogSummary};
use stackscope_samplelog::{InternLimits, LogHeader, LogLimits, SampleLogWriter};

use crate::metrics::{self, SharedMetrics};

pub struct Recorder {
    state: State,
    out_dir: PathBuf,
}

/// What the aggregator thread owns, shared with the checkpoint writer.
struct State {
    aggregator: Aggregator,
    /// The on-disk log of every event, for `report`; `None` once writing it failed.
    log: Option<SampleLogWriter>,
    /// Why the log stopped, said once in the summary's notices.
    log_failure: Option<String>,
    /// What the log kept, as last known (`summary.json`'s `samples_log`).
    samples_log: Option<SamplesLogSummary>,
    /// The recording's start, which `samples_log` counts from.
    start: Timestamp,
    /// `--metrics-addr`'s state, fed the same events.
    metrics: Option<SharedMetrics>,
}

impl State {
    fn handle(&mut self, event: Event) {
        // The log sees events in the order the aggregate does: `report` over the whole
        // recording must give back exactly the same profile.
        if let Some(log) = self.log.as_mut() {
            if let Err(e) = log.append(&event) {
                self.log_failure = Some(format!("the sample log stopped: {e}"));
                self.log = None;
            }
        }
        self.aggregator.handle(event);
    }

    fn flush_log(&mut self) {
        if let Some(log) = self.log.as_mut() {
            if let Err(e) = log.flush() {
                self.log_failure = Some(format!("the sample log stopped: {e}"));
                self.log = None;
            }
        }
        // A log that stopped keeps its last account.
        if let Some(log) = self.log.as_ref() {
            self.samples_log = Some(SamplesLogSummary::of(
                log.log_limits(),
                log.segments(),
                self.start,
            ));
        }
    }

    fn meta_with_log_notice(&self, meta: &RecordingMeta) -> RecordingMeta {
        let mut meta = meta.clone();
        if let Some(why) = &self.log_failure {
            meta.notices.push(why.clone());
        }
        meta
    }
}

impl Recorder {
    /// Creates the sample log; the outputs are written at checkpoints and at the end.
    pub fn create(
        config: AggregateConfig,
        start: Timestamp,
        out_dir: &Path,
        log_header: &LogHeader,
        log_limits: LogLimits,
        metrics: Option<SharedMetrics>,
    ) -> anyhow::Result<Recorder> {
        let log =
            SampleLogWriter::create_with(out_dir, log_header, InternLimits::default(), log_limits)
                .with_context(|| {
                    format!("cannot create the sample log in {}", out_dir.display())
                })?;
        let samples_log = SamplesLogSummary::of(log_limits, log.segments(), start);
        Ok(Recorder {
            state: State {
                aggregator: Aggregator::new(config, start),
                log: Some(log),
                log_failure: None,
                samples_log: Some(samples_log),
                start,
                metrics,
            },
            out_dir: out_dir.to_owned(),
        })
    }

    /// Folds one batch of events.
    pub fn handle(&mut self, batch: Batch) {
        let metrics = self.state.metrics.clone();
        // The metrics' lock is taken once per batch: the server waits at most a batch.
        let mut metrics = metrics.as_ref().map(metrics::lock);
        for event in batch {
            if let Some(m) = metrics.as_mut() {
                m.observe(&event);
            }
            self.state.handle(event);
        }
    }

    /// Writes every output as it stands now; the recording goes on.
    pub fn checkpoint(&mut self, meta: &RecordingMeta) -> anyhow::Result<OutputFiles> {
        self.state.flush_log();
        let meta = self.state.meta_with_log_notice(meta);
        let written = write(&self.out_dir, &self.state, &meta);
        crate::heap::give_back_freed();
        written
    }

    /// Writes the final outputs, once the producers' last events have been handled; gives
    /// them and what the sample log kept.
    pub fn finish(
        mut self,
        meta: &RecordingMeta,
    ) -> anyhow::Result<(OutputFiles, Option<SamplesLogSummary>)> {
        self.state.flush_log();
        self.state.aggregator.finish();
        let meta = self.state.meta_with_log_notice(meta);
        let written = write(&self.out_dir, &self.state, &meta)?;
        Ok((written, self.state.samples_log))
    }
}

fn write(out_dir: &Path, state: &State, meta: &RecordingMeta) -> anyhow::Result<OutputFiles> {
    stackscope_report::write_outputs_with_log(
        out_dir,
        &state.aggregator,
        meta,
        state.samples_log.as_ref(),
    )
    .with_context(|| format!("cannot write the recording to {}", out_dir.display()))
}
