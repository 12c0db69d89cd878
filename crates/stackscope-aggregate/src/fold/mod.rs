//! The fold: the [`Aggregator`] that owns a recording's state, fed event by event, and the
//! tables it folds stack samples into (interned frames and stacks, time buckets, threads,
//! processes, per-function counts), each under its cap ([`Limits`]).
//!
//! Builds on `gpu/` (each kept sample's tag, the timeline); knows nothing of verdicts.

mod activity;
mod aggregator;
mod buckets;
mod ends;
mod functions;
mod intern;
mod kinds;
mod limits;
mod meta;
mod motion;
mod process_groups;
mod processes;
mod reads;
mod root_labels;
mod tagged;
mod thread_kinds;
mod threads;

pub use activity::{Activity, PhaseCounts, RunWait};
pub use aggregator::{AggregateConfig, Aggregator, ErrorCounts, StackView};
pub use buckets::{
    Bucket, BucketCounts, Lane, LaneCounts, TimeBuckets, BASE_BUCKET_NANOS, MAX_BUCKETS,
    MAX_ENTRIES, MAX_LANES,
};
pub use functions::{top_functions, FunctionStat, TopFunctions, TOP_FUNCTIONS};
pub use intern::{
    FrameEntry, FrameId, FunctionId, FunctionKey, StackCounts, StackEntry, StackId, StackTable,
};
pub(crate) use kinds::kind_label;
pub use kinds::{is_group_pid, parse_group_label, GroupRoot, GROUP_PIDS_FROM};
pub use limits::{Limits, FRAME_TABLE_FULL, OTHER_PROCESSES, OTHER_THREADS, STACK_TABLE_FULL};
pub use meta::{GpuDeviceInfo, RecordingMeta};
pub use motion::ProcessMotion;
pub use root_labels::{shorten, ROOT_COMMAND_CHARS};
pub use thread_kinds::Released;
