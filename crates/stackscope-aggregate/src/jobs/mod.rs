//! Whole jobs, across processes and nodes: a dump's threads grouped and its stragglers named,
//! dumps and recordings of many ranks merged, helper processes recognised, hangs detected.
//!
//! Works on dumps and folded lines, not on the fold; of the rest of the crate it uses only
//! `gpu` (a hang is classified in the samples' own GPU states, [`crate::GpuTag`]).

mod cause;
mod grouping;
mod hang;
mod helpers;
mod identity;
mod late_start;
mod locked;
mod merge;
mod place;
mod rank_sets;
mod ranks;
mod view;

pub use cause::{
    hang_cause, headline, rank_list, stuck_at, HangCause, LockWait, PeersWaiting, Vanished,
};
pub use grouping::{find_stragglers, group_threads, Straggler, ThreadGroup, ThreadRef};
pub use hang::{
    is_hung, is_spin_wait, works_at_read, FrozenActivity, FrozenThread, HangDetector, HangEvent,
    HangGpu, Stuck, DEFAULT_HANG_AFTER_SECS, SPIN_WAITS, STUCK_TAIL_SECS, STUCK_TAIL_SHARE,
};
pub use helpers::{helper_by_command_line, helper_kind, process_role};
pub use identity::{
    command_key, frame_key, function_of, process_root_pid, split_process_root, thread_key,
    FrameMatch, JobProcesses, ProcessIdentity,
};
pub use late_start::{late_starts, LateStart, ProcessStart, LATE_GAP_SECS};
pub use locked::{all_wait_on_locks, rlocks_at_wait, HeldBy, LockedProcess};
pub use merge::{
    merge_dumps, rank_on, HostedProcess, MergedDump, MergedGroup, ProcessPlace, RankStraggler,
};
pub use place::place_in;
pub use rank_sets::{rank_ranges, MissingRanks};
pub use ranks::{merge_recordings, rerooted, MergedRecordings, OddRank, RankRow, RecordingInput};
pub use view::{in_reading_order, is_main_thread, MAIN_THREAD};
