//! The GPU side of a recording: the GPU state of each stack sample's instant (the one tag, the
//! idle and SM-activity rules, the tagger that applies them), the timeline of readings, the
//! per-device and whole-recording statistics, and the oscillation search.
//!
//! Depends on nothing else in the crate: the fold, the verdicts and `top` all build on it.

pub mod cycle;
mod device_stats;
mod mean;
mod oscillation;
mod resample;
mod state;
mod tagging;
mod timeline;

pub use cycle::{bursts_of_grid, cycle, short_bursts_of_grid, short_cycle, Cycle};
pub use device_stats::GpuDeviceSummary;
pub use mean::UtilizationResult;
pub use oscillation::oscillation_period;
pub use resample::resample_mean;
pub use state::{is_idle, is_low, GpuTag, DEFAULT_IDLE_BELOW, MIN_SIDE_SAMPLES, SM_LOW_SHARE};
pub use tagging::{GpuTagger, HOLD_LIMIT_NANOS, MAX_PENDING, MAX_READINGS_PER_DEVICE, REACH_NANOS};
pub use timeline::GpuTimeline;
