//! The aggregator's thread and the files it writes: it folds every event from the channel, and
//! on request (every `--flush-interval`, SIGUSR1, the end) writes the whole output directory.

use std::path::{Path, PathBuf};
use std::sync::{Arc, Mutex, MutexGuard};
use std::thread::JoinHandle;

use anyhow::Context;
use crossbeam_channel::Receiver;
use stackscope_aggregate::{AggregateConfig, Aggregator, RecordingMeta};
use stackscope_event::{Event, Timestamp};
use stackscope_report::OutputFiles;
use stackscope_samplelog::{LogHeader, SampleLogWriter};

use crate::metrics::{self, SharedMetrics};

/// Events taken under one lock: the lock is the checkpoint writer's way in, so it is taken per
/// batch, not per event, and never held while waiting for the channel.
const BATCH: usize = 4096;

pub struct Recorder {
    state: Arc<Mutex<State>>,
    thread: JoinHandle<()>,
    out_dir: PathBuf,
}

/// What the aggregator thread owns, shared with the checkpoint writer.
struct State {
    aggregator: Aggregator,
    /// The on-disk log of every event, for `report`; `None` once writing it failed.
    log: Option<SampleLogWriter>,
    /// Why the log stopped, said once in the summary's notices.
    log_failure: Option<String>,
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
    /// Starts folding `receiver`'s events; the thread ends when every producer has dropped
    /// its sender.
    pub fn spawn(
        config: AggregateConfig,
        start: Timestamp,
        receiver: Receiver<Event>,
        out_dir: &Path,
        log_header: &LogHeader,
        metrics: Option<SharedMetrics>,
    ) -> anyhow::Result<Recorder> {
        let log = SampleLogWriter::create(out_dir, log_header)
            .with_context(|| format!("cannot create the sample log in {}", out_dir.display()))?;
        let state = Arc::new(Mutex::new(State {
            aggregator: Aggregator::new(config, start),
            log: Some(log),
            log_failure: None,
            metrics,
        }));
        let shared = state.clone();
        let thread = std::thread::Builder::new()
            .name("stackscope-aggregate".into())
            .spawn(move || fold(&receiver, &shared))
            .context("cannot start the aggregator thread")?;
        Ok(Recorder {
            state,
            thread,
            out_dir: out_dir.to_owned(),
        })
    }

    /// Writes every output as it stands now; the recording goes on.
    pub fn checkpoint(&self, meta: &RecordingMeta) -> anyhow::Result<OutputFiles> {
        let mut state = lock(&self.state);
        state.flush_log();
        let meta = state.meta_with_log_notice(meta);
        write(&self.out_dir, &state.aggregator, &meta)
    }

    /// Waits for the producers' last events, then writes the final outputs.
    pub fn finish(self, meta: &RecordingMeta) -> anyhow::Result<OutputFiles> {
        let Recorder {
            state,
            thread,
            out_dir,
        } = self;
        thread
            .join()
            .map_err(|_| anyhow::anyhow!("the aggregator thread panicked"))?;
        let mut state = lock(&state);
        state.flush_log();
        state.aggregator.finish();
        let meta = state.meta_with_log_notice(meta);
        write(&out_dir, &state.aggregator, &meta)
    }
}

fn write(
    out_dir: &Path,
    aggregator: &Aggregator,
    meta: &RecordingMeta,
) -> anyhow::Result<OutputFiles> {
    stackscope_report::write_outputs(out_dir, aggregator, meta)
        .with_context(|| format!("cannot write the recording to {}", out_dir.display()))
}

fn fold(receiver: &Receiver<Event>, state: &Mutex<State>) {
    while let Ok(first) = receiver.recv() {
        let mut state = lock(state);
        let metrics = state.metrics.clone();
        // The metrics' lock is taken once per batch too: the server waits at most a batch.
        let mut metrics = metrics.as_ref().map(metrics::lock);
        if let Some(m) = metrics.as_mut() {
            m.observe(&first);
        }
        state.handle(first);
        for event in receiver.try_iter().take(BATCH) {
            if let Some(m) = metrics.as_mut() {
                m.observe(&event);
            }
            state.handle(event);
        }
    }
}

/// A panic elsewhere must not cost the recording: the aggregate is still consistent between
/// events, so a poisoned lock is taken as it is.
fn lock(state: &Mutex<State>) -> MutexGuard<'_, State> {
    state
        .lock()
        .unwrap_or_else(|poisoned| poisoned.into_inner())
}
