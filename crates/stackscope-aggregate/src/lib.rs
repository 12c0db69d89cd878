//! Aggregation of a stackscope recording: folds stack samples into interned stacks, keeps the
//! GPU timeline, tags each stack sample with the GPU's state at its instant, and summarizes the
//! recording (top functions, threads, processes, GPU statistics, oscillation and a verdict).
//!
//! Memory does not grow with the recording's length: stacks are held once each with counts,
//! the GPU timeline coarsens with age, and every table has a cap ([`Limits`]) past which
//! samples are still counted, in placeholders, and the summary says so.
//!
//! [`top`] holds `stackscope top`'s live table, tagged by the same [`GpuTagger`] as the
//! recording, so the two agree on one run.
//!
//! Pure: no I/O, no threads, no clock. The binary feeds [`Aggregator::handle`] the events from
//! the channel; `stackscope-report` turns what it holds into files.

mod aggregator;
mod buckets;
mod device_stats;
mod functions;
mod gpu_mean;
mod gpu_stats;
mod grouping;
mod hang;
mod helpers;
mod idle_path;
mod intern;
mod limits;
mod merge;
mod meta;
mod oscillation;
mod processes;
mod ranks;
mod sm_activity;
mod summary;
mod tagging;
mod threads;
mod timeline;
pub mod top;
mod trace;
mod verdict;

pub use aggregator::{AggregateConfig, Aggregator, StackView};
pub use buckets::{
    Bucket, BucketCounts, Lane, LaneCounts, TimeBuckets, BASE_BUCKET_NANOS, MAX_BUCKETS,
    MAX_ENTRIES, MAX_LANES,
};
pub use device_stats::GpuDeviceSummary;
pub use functions::{FunctionStat, TopFunctions, TOP_FUNCTIONS};
pub use grouping::{find_stragglers, group_threads, Straggler, ThreadGroup, ThreadRef};
pub use hang::{HangDetector, HangEvent};
pub use helpers::helper_kind;
pub use idle_path::{idle_path, idle_path_by, IdlePath, PathFunction, MIN_RISE};
pub use intern::{
    FrameEntry, FrameId, FunctionId, FunctionKey, GpuTag, StackCounts, StackEntry, StackId,
    StackTable,
};
pub use limits::{Limits, FRAME_TABLE_FULL, OTHER_PROCESSES, OTHER_THREADS, STACK_TABLE_FULL};
pub use merge::{
    merge_dumps, rank_ranges, HostedProcess, MergedDump, MergedGroup, ProcessPlace, RankStraggler,
};
pub use meta::{GpuDeviceInfo, RecordingMeta};
pub use oscillation::oscillation_period;
pub use processes::ROOT_COMMAND_CHARS;
pub use ranks::{merge_recordings, rerooted, MergedRecordings, OddRank, RankRow, RecordingInput};
pub use sm_activity::SM_LOW_SHARE;
pub use summary::{
    ErrorCounts, GpuSummary, ProcessSummary, Summary, ThreadSummary, TOP_GPU_FUNCTIONS,
};
pub use tagging::{GpuTagger, HOLD_LIMIT_NANOS, MAX_PENDING, REACH_NANOS};
pub use trace::{GpuState, Run, SampleTrace, TraceThread};
pub use verdict::{Verdict, VerdictClass};

#[cfg(test)]
mod tests;
#[cfg(test)]
mod tests_sm;
#[cfg(test)]
mod thread_naming_tests;
