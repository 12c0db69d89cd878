//! The verdict's call path, live: which code sets the GPU-idle samples apart from the GPU-busy
//! ones since start, in the same words as the recording's verdict and summary.json
//! (`stackscope_aggregate::idle_path`, over an aggregate of the same events); and, from the
//! same aggregate, the job's roles and what the trainer and its feeders did while the GPU
//! idled (`roles_of`, `while_idle_of`). Its stack samples come tagged from `top`'s table.

use stackscope_aggregate::{
    idle_path, roles_of, step_of, while_idle_of, AggregateConfig, Aggregator, GpuTag,
    StepBreakdown, WhileIdle,
};
use stackscope_event::{Event, StackSample, Timestamp};

pub struct IdleCode {
    config: AggregateConfig,
    /// The target's own process: its main thread is the trainer when no thread stands out.
    root_pid: u32,
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
        IdleCode {
            root_pid,
            aggregator: Aggregator::new(config.clone(), Timestamp::now()),
            config,
        }
    }

    /// Takes an event other than a stack sample (the GPU's readings, errors, processes).
    pub fn handle(&mut self, event: &Event) {
        if self.config.gpu_enabled && !matches!(event, Event::Stack(_)) {
            self.aggregator.handle(event.clone());
        }
    }

    /// Takes a stack sample as the table tagged it.
    pub fn handle_tagged(&mut self, sample: StackSample, tag: GpuTag) {
        if self.config.gpu_enabled {
            self.aggregator.handle_tagged(sample, tag);
        }
    }

    /// Tags what is still held: the target ended.
    pub fn finish(&mut self) {
        self.aggregator.finish();
    }

    /// Forgets everything (the `r` key).
    pub fn reset(&mut self) {
        self.aggregator = Aggregator::new(self.config.clone(), Timestamp::now());
    }

    /// "What sets GPU-idle time apart is load_batch → decode_images (train.py): ...", when a
    /// path stands out.
    pub fn sentence(&self) -> Option<String> {
        if !self.config.gpu_enabled {
            return None;
        }
        idle_path(self.aggregator.stack_table()).map(|path| path.sentence())
    }

    /// What the trainer and its feeders did while the GPU idled since start, once the GPU
    /// idled while they were sampled, and the trainer's step broken down.
    pub fn while_idle(&self) -> Option<(WhileIdle, Option<StepBreakdown>)> {
        if !self.config.gpu_enabled {
            return None;
        }
        let roles = roles_of(&self.aggregator, self.root_pid);
        let while_idle = while_idle_of(&self.aggregator, &roles);
        let step = step_of(&self.aggregator, &roles).map(|(step, _)| step.breakdown);
        (while_idle.trainer.is_some() || !while_idle.feeders.is_empty())
            .then_some((while_idle, step))
    }
}
