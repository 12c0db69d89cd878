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
//! The crate's parts, each depending only on those listed before it:
//!
//! - `at_hand.rs`: counts by key with the latest key's at hand, what a thread counts by stack;
//! - `gpu/`: the GPU state of an instant (the one [`GpuTag`], the idle rule [`is_idle`] with
//!   [`DEFAULT_IDLE_BELOW`], the SM-activity rule), the [`GpuTagger`], the timeline and the
//!   GPU statistics;
//! - `gil/`: the GIL at each sample (held, waited for, run without), decided from the whole
//!   read the sample came in;
//! - `jobs/`: dumps and recordings of whole jobs (grouping, stragglers, merging ranks, hangs);
//! - `fold/`: the [`Aggregator`] and the tables it folds samples into;
//! - `roles/`: the job read by roles (the trainer, its feeders, helpers) and what each did
//!   while the GPU idled;
//! - `verdict/`: what a recording's (or merged recordings') figures say;
//! - `summary.rs`: `summary.json`, built from all of the above; [`compare`]: two summaries
//!   and their stacks side by side (`stackscope compare`); `trace.rs` and [`top`]: the
//!   exports' sample trace and `stackscope top`'s table, on `gpu/` and the fold.
//!
//! Pure: no I/O, no threads, no clock. The binary feeds [`Aggregator::handle`] the events from
//! the channel; `stackscope-report` turns what it holds into files.

mod at_hand;
pub mod compare;
mod compiled;
mod fold;
mod gil;
mod gpu;
mod jobs;
mod memory;
mod roles;
mod summary;
pub mod top;
mod trace;
mod verdict;

pub use compiled::{compiled_code, CompiledCode};
pub use fold::{is_group_pid, parse_group_label, GroupRoot, Released, GROUP_PIDS_FROM};
pub use fold::{
    shorten, AggregateConfig, Aggregator, Bucket, BucketCounts, ErrorCounts, FrameEntry, FrameId,
    FunctionId, FunctionKey, FunctionStat, GpuDeviceInfo, Lane, LaneCounts, Limits, ProcessMotion,
    RecordingMeta, StackCounts, StackEntry, StackId, StackTable, StackView, TimeBuckets,
    TopFunctions, BASE_BUCKET_NANOS, FRAME_TABLE_FULL, MAX_BUCKETS, MAX_ENTRIES, MAX_LANES,
    OTHER_PROCESSES, OTHER_THREADS, ROOT_COMMAND_CHARS, STACK_TABLE_FULL, TOP_FUNCTIONS,
};
pub use gil::{
    GilCounts, GilProcess, GilRead, GilSample, GilState, GilSummary, GilThread, ReadGroups, RunsAt,
    RUNS_HERE,
};
pub use gpu::{
    is_idle, is_low, oscillation_period, Cycle, GpuDeviceSummary, GpuTag, GpuTagger,
    DEFAULT_IDLE_BELOW, HOLD_LIMIT_NANOS, MAX_PENDING, REACH_NANOS, SM_LOW_SHARE,
};
pub use jobs::place_in;
pub use jobs::{
    all_wait_on_locks, late_starts, rlocks_at_wait, HeldBy, LateStart, LockedProcess, ProcessStart,
    LATE_GAP_SECS,
};
pub use jobs::{
    command_key, find_stragglers, frame_key, function_of, group_threads, hang_cause, headline,
    helper_by_command_line, helper_kind, in_reading_order, is_hung, is_main_thread, is_spin_wait,
    merge_dumps, merge_recordings, process_role, process_root_pid, rank_list, rank_on, rank_ranges,
    rerooted, split_process_root, stuck_at, thread_key, works_at_read, FrameMatch, FrozenActivity,
    FrozenThread, HangCause, HangDetector, HangEvent, HangGpu, HostedProcess, JobProcesses,
    LockWait, MergedDump, MergedGroup, MergedRecordings, MissingRanks, OddRank, PeersWaiting,
    ProcessIdentity, ProcessPlace, RankRow, RankStraggler, RecordingInput, Straggler, Stuck,
    ThreadGroup, ThreadRef, Vanished, DEFAULT_HANG_AFTER_SECS, MAIN_THREAD, SPIN_WAITS,
    STUCK_TAIL_SECS, STUCK_TAIL_SHARE,
};
pub use memory::{
    growth_rate, rate_text as memory_rate_text, size_text as memory_size_text, CgroupMemory,
    CgroupPoint, FoldedProcessMemory, MemoryFinding, MemoryFindingKind, MemoryPoint, MemorySummary,
    ProcessMemory,
};
pub use roles::step::{GilHolder, StepBreakdown};
pub use roles::while_idle::{FeedersWhileIdle, TrainerWhileIdle, WhileIdle};
pub use roles::{of as roles_of, step_of, while_idle_of, LoopFoundBy, Role, Roles, ThreadRole};
pub use summary::{
    process_name, GpuSummary, ProcessGroupSummary, ProcessSummary, Summary, ThreadSummary,
    WaitsLeftOut, TOP_GPU_FUNCTIONS,
};
pub use trace::{GilRun, GilTrack, Run, SampleTrace, TraceThread};
pub use verdict::{
    headline_verdict, idle_path, idle_path_by, IdlePath, IfFixed, PathFunction, RecordingVerdict,
    Verdict, VerdictClass, HIGHLY_BOUND, MIN_RISE, MODERATELY_BOUND, VERDICTS_IN_HEADLINE,
};

#[cfg(test)]
mod tests;
#[cfg(test)]
mod tests_loop;
#[cfg(test)]
mod tests_roles;
#[cfg(test)]
mod tests_sm;
#[cfg(test)]
mod thread_naming_tests;
