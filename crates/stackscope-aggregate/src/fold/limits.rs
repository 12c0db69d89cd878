//! Caps on what the aggregate holds, so that its memory does not grow with a recording's length.
//!
//! A recording of days at 100 Hz holds distinct stacks, not samples; but a target that keeps
//! creating threads, processes or code (generated functions, `exec`'d strings) would still make
//! those tables grow for ever. Each table has a cap; past it, samples are still counted (in a
//! placeholder such as `[stack table full]`), so every total stays right, and the summary says
//! which cap was reached in `caps_reached`.

/// Label of the stack that counts samples whose stack is new once the stack table is full.
pub const STACK_TABLE_FULL: &str = "[stack table full]";
/// Label of the frame that stands for a new frame once the frame table is full.
pub const FRAME_TABLE_FULL: &str = "[frame table full]";
/// Root of new threads' stacks once the thread roots are capped, and the name of the entry in
/// the thread list that the least recently seen threads are folded into.
pub const OTHER_THREADS: &str = "[other threads]";
/// Root of new processes' stacks once the process roots are capped, and the entry in the
/// process list that the least recently active processes are folded into.
pub const OTHER_PROCESSES: &str = "[other processes]";

/// The caps. [`Limits::default`] is what a recording uses; tests pass small ones to
/// [`crate::Aggregator::with_limits`] to reach them quickly.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Limits {
    /// Distinct stacks, the `[stack table full]` placeholders included.
    pub max_stacks: usize,
    /// Distinct code frames (`function`, `file`, `line`); functions are at most as many.
    pub max_frames: usize,
    /// Distinct thread names used as flamegraph roots. Roots cannot be forgotten (their stacks
    /// hold counts), so a target that names each new thread differently is cut off here.
    pub max_thread_roots: usize,
    /// Threads in the per-thread table; past it the least recently seen are folded together.
    pub max_threads: usize,
    /// Processes in the per-process table, and distinct process roots (`--subprocesses`).
    pub max_processes: usize,
    /// GPU timeline points kept in memory per device; older readings are merged past it.
    pub max_gpu_points: usize,
}

impl Default for Limits {
    /// Sized so that a busy real program never reaches them (a large training job has a few
    /// thousand distinct stacks) while the whole aggregate stays within some tens of MiB.
    fn default() -> Self {
        Limits {
            max_stacks: 200_000,
            max_frames: 100_000,
            max_thread_roots: 1_000,
            max_threads: 10_000,
            max_processes: 10_000,
            max_gpu_points: 20_000,
        }
    }
}

impl Limits {
    /// Caps too small to work with are raised to a floor: a table needs room for its
    /// placeholders, and the timeline for a first point plus a pair to merge.
    pub(crate) fn sane(self) -> Limits {
        Limits {
            max_stacks: self.max_stacks.max(4),
            max_frames: self.max_frames.max(1),
            max_thread_roots: self.max_thread_roots.max(1),
            max_threads: self.max_threads.max(1),
            max_processes: self.max_processes.max(1),
            max_gpu_points: self.max_gpu_points.max(4),
        }
    }
}
