//! What an attempt reads and how: the threads to read with a check, whether still threads
//! are proved or taken on the GIL's word, and where the process-wide words are. The reader
//! asks; `attempt.rs` reads by it and `judge.rs` judges by it.

use std::time::Instant;

use crate::fast::layout::Layout;

/// What an attempt reads and how.
pub(crate) struct Request<'a> {
    /// When the read began: what the code cache's trust is timed by.
    pub now: Instant,
    /// Seeds the random gaps between the copies of checked threads (not repeatable).
    pub seed: u64,
    pub layout: &'a Layout,
    pub globals: &'a Globals,
    /// The threads to read, by their place in the list.
    pub which: &'a [usize],
    /// Read the thread list head and the GIL holder too.
    pub with_list: bool,
    /// The threads asked for cannot run (we stopped them): no GIL bracketing needed.
    pub stopped: bool,
    /// Which threads to read with a check: those likely to hold the GIL during the read.
    pub check: Check<'a>,
    /// Whether a still thread is read for its proof alone
    /// ([`still`](crate::fast::proof::still)).
    pub still_reads: bool,
    /// Whether a still thread may be taken as still on the GIL's word alone
    /// ([`quiet`](crate::fast::proof::quiet)).
    pub quiet: bool,
    /// Threads (by their place in the list) whose switch rings show they have not run since
    /// their proofs were last good: only their thread states are read
    /// ([`still::plan`](crate::fast::proof::still::plan)).
    pub words_only: &'a [usize],
    /// Whether a copy that may be torn is kept when its stack is one a sound read of its
    /// thread gave, and the likely holders are then read without later copies
    /// ([`vouch`](crate::fast::proof::vouch)): the sample's first read, not stopped.
    pub vouch: bool,
}

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Check<'a> {
    /// These thread states.
    Threads(&'a [usize]),
    All,
}

/// Where the process-wide words are.
pub(crate) struct Globals {
    pub head_ptr: usize,
    /// The `_gil_runtime_state`.
    pub gil: usize,
    /// 3.11's `tstate_current` (0 for 3.12, whose holder comes from the GIL itself).
    pub tstate_current: usize,
}
