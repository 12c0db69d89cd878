//! One thread's part of an attempt: its plan (what is read of it), its walk in progress, and
//! how its try ended. `attempt.rs` fills them in; `judge.rs` judges the walks.

use crate::fast::memory::snapshot::{self, TsWords};
use crate::fast::proof::holder::Later;
use crate::fast::proof::still;
use crate::fast::proof::vouch::Returned;
use crate::fast::read::stack::{RawFrame, Walk};
use crate::fast::read::thread_model::Outcome;

/// One thread's part of an attempt, from its plan to its outcome.
pub(super) struct Part {
    /// Its place in the thread list.
    pub(super) i: usize,
    pub(super) plan: Plan,
    /// Its thread state as read (for the list check; None: unreadable).
    pub(super) state: Option<TsWords>,
    /// How its try ended; None while its walk is still to be judged.
    pub(super) outcome: Option<Outcome>,
    /// Its walk needed frames read after the snapshot.
    pub(super) read_late: bool,
    /// Read as the GIL's likely holder without its later copies
    /// ([`crate::fast::proof::vouch`]).
    pub(super) skipped_copies: bool,
    /// Kept, though it may have run, on a stack a sound read gave: good for this sample only.
    pub(super) vouched: bool,
}

/// A thread's walk in progress.
pub(super) struct Walking {
    /// Its position in the threads asked for.
    pub(super) pos: usize,
    pub(super) walk: Walk,
    /// The later readings, for a thread read with a check.
    pub(super) later: Option<Later>,
    /// Its thread state's words, as read.
    pub(super) ts: TsWords,
    /// Where the walk started: the current-frame pointer as read.
    pub(super) start: usize,
    /// The frame the thread was in when it was copied, when it returned to the walk's start
    /// during the later readings ([`crate::fast::proof::vouch::returned_callee`]).
    pub(super) returned: Option<Returned>,
}

/// One thread's part of an attempt.
pub(super) enum Plan {
    /// Its frames copied, to be walked.
    Full(snapshot::Planned),
    /// A still thread: only what proves it did not move.
    Still(still::Planned),
    /// A still thread taken as still if the GIL shows no switch: nothing read.
    Quiet,
}

impl Walking {
    /// The frames whose code objects this walk needs known: the walk's, and the frame it
    /// returned from, if it still names its code object.
    pub(super) fn frames(&self) -> impl Iterator<Item = &RawFrame> {
        let returned = self
            .returned
            .iter()
            .flat_map(|r| &r.frames)
            .filter(|f| f.code != 0);
        self.walk.frames.iter().chain(returned)
    }
}
