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

/// Events taken under one lock: the lock is the checkpoint writer's way in, so it is taken per
/// batch, not per event, and never held while waiting for the channel.
const BATCH: usize = 4096;

pub struct Recorder {
    state: Arc<Mutex<Aggregator>>,
    thread: JoinHandle<()>,
    out_dir: PathBuf,
}

impl Recorder {
    /// Starts folding `receiver`'s events; the thread ends when every producer has dropped
    /// its sender.
    pub fn spawn(
        config: AggregateConfig,
        start: Timestamp,
        receiver: Receiver<Event>,
        out_dir: &Path,
    ) -> anyhow::Result<Recorder> {
        let state = Arc::new(Mutex::new(Aggregator::new(config, start)));
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
        let aggregator = lock(&self.state);
        write(&self.out_dir, &aggregator, meta)
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
        let mut aggregator = lock(&state);
        aggregator.finish();
        write(&out_dir, &aggregator, meta)
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

fn fold(receiver: &Receiver<Event>, state: &Mutex<Aggregator>) {
    while let Ok(first) = receiver.recv() {
        let mut aggregator = lock(state);
        aggregator.handle(first);
        for event in receiver.try_iter().take(BATCH) {
            aggregator.handle(event);
        }
    }
}

/// A panic elsewhere must not cost the recording: the aggregate is still consistent between
/// events, so a poisoned lock is taken as it is.
fn lock(state: &Mutex<Aggregator>) -> MutexGuard<'_, Aggregator> {
    state
        .lock()
        .unwrap_or_else(|poisoned| poisoned.into_inner())
}
