//! The verdict's call path, live: which code sets the GPU-idle samples apart from the GPU-busy
//! ones since start, in the same words as the recording's verdict and summary.json
//! (`stackscope_aggregate::idle_path`, over an aggregate of the same events).

use stackscope_aggregate::{idle_path, AggregateConfig, Aggregator};
use stackscope_event::{Event, Timestamp};

pub struct IdleCode {
    config: AggregateConfig,
    aggregator: Aggregator,
}

impl IdleCode {
    pub fn new(idle_below: f32, gpu_enabled: bool) -> IdleCode {
        let config = AggregateConfig {
            idle_below,
            gpu_enabled,
            ..AggregateConfig::default()
        };
        IdleCode {
            aggregator: Aggregator::new(config.clone(), Timestamp::now()),
            config,
        }
    }

    pub fn handle(&mut self, event: &Event) {
        if self.config.gpu_enabled {
            self.aggregator.handle(event.clone());
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
}
