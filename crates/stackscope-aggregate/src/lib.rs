//! Aggregation of a stackscope recording: folds stack samples into interned stacks, keeps the
//! GPU timeline, tags each stack sample with the GPU's state at its instant, and summarizes the
//! recording (top functions, threads, GPU statistics, oscillation and a verdict).
//!
//! Pure: no I/O, no threads, no clock. The binary feeds [`Aggregator::handle`] the events from
//! the channel; `stackscope-report` turns what it holds into files.

mod aggregator;
mod functions;
mod gpu_stats;
mod intern;
mod meta;
mod oscillation;
mod summary;
mod tagging;
mod timeline;
mod verdict;

pub use aggregator::{AggregateConfig, Aggregator, StackView};
pub use functions::{FunctionStat, TopFunctions, TOP_FUNCTIONS};
pub use gpu_stats::GpuDeviceSummary;
pub use meta::{GpuDeviceInfo, RecordingMeta};
pub use oscillation::oscillation_period;
pub use summary::{ErrorCounts, GpuSummary, Summary, ThreadSummary, TOP_GPU_FUNCTIONS};
pub use verdict::{Verdict, VerdictClass};

#[cfg(test)]
mod tests;
