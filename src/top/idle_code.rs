//! The recording's reading of the job, live: an aggregate of the same events as `top`'s
//! table (its stack samples come tagged from the table), summarized as `summary.json` is, so
//! that `top` says what the recording would in the same words: the call path that sets GPU-idle
//! samples apart (`gpu.idle_path`), what the trainer and its feeders did while the GPU idled
//! (`gpu.while_idle`), and the loop's step, feeders and verdict (`step`, `feeders`,
//! `verdict`), with GPU data or without. The roles are the summary's: `top` reads them and
//! never works them out again.

use stackscope_aggregate::{AggregateConfig, Aggregator, GpuTag, RecordingMeta, Summary};
use stackscope_event::{Event, StackSample, Timestamp};

pub struct IdleCode {
    config: AggregateConfig,
    /// What the summary is told of the recording: the target's own process (its main thread
    /// is the trainer when no thread stands out) and the CPUs it may use (`if_fixed`).
    meta: RecordingMeta,
    aggregator: Aggregator,
}

impl IdleCode {
    /// `subprocesses`: the target's tree is followed (`--subprocesses`), so its processes are
    /// told apart as a recording's are.
    pub fn new(idle_below: f32, gpu_enabled: bool, root_pid: u32, subprocesses: bool) -> IdleCode {
        let config = AggregateConfig {
            idle_below,
            gpu_enabled,
            process_root: subprocesses,
            ..AggregateConfig::default()
        };
        let meta = RecordingMeta {
            pid: root_pid,
            cpus_usable: stackscope_sampler::procfs::cpus::cpus_usable(root_pid),
            ..RecordingMeta::default()
        };
        IdleCode {
            meta,
            aggregator: Aggregator::new(config.clone(), Timestamp::now()),
            config,
        }
    }

    /// Takes an event other than a stack sample (the GPU's readings, errors, processes):
    /// without GPU data too, the processes tell the loop's feeders apart.
    pub fn handle(&mut self, event: &Event) {
        if !matches!(event, Event::Stack(_)) {
            self.aggregator.handle(event.clone());
        }
    }

    /// Takes a stack sample as the table tagged it.
    pub fn handle_tagged(&mut self, sample: StackSample, tag: GpuTag) {
        self.aggregator.handle_tagged(sample, tag);
    }

    /// Tags what is still held: the target ended.
    pub fn finish(&mut self) {
        self.aggregator.finish();
    }

    /// Forgets everything (the `r` key).
    pub fn reset(&mut self) {
        self.aggregator = Aggregator::new(self.config.clone(), Timestamp::now());
    }

    /// Whether the GPU is polled: without, the loop's reading is the one there is.
    pub fn gpu_enabled(&self) -> bool {
        self.config.gpu_enabled
    }

    /// The aggregate summarized since start, as `summary.json` would say it now.
    pub fn summary(&self) -> Summary {
        self.aggregator.summary(&self.meta)
    }
}
