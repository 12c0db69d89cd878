//! Keeping the read of a thread that may have run while it was copied, without later copies,
//! when the stack it shows is one that a sound read of that thread found before.
//!
//! A copy of a running thread can be torn: its current-frame pointer read a moment before
//! its frames, the innermost frames as they were then and the older ones as they are now
//! ([`super::holder`]: a caller already at its next call while the callee's slot still holds
//! the callee that returned). The holder's later copies catch that, at the cost of seven more
//! copies of the top of its stack in every sample (on a 31-deep stack, 14 of a sample's 27
//! ranges and 10 of its 17 KB).
//!
//! A busy thread goes round a few stacks. Each thread keeps its last few distinct stacks
//! ([`crate::fast::read::recent::RecentStacks`]), and marks those that a sound read gave: a
//! read whose later copies agreed, or of a thread that cannot have run during it. A copy that
//! may be torn is kept when it reaches the thread's first frame, every frame's instruction
//! lies in its own code, and the stack it names is, frame for frame (function, file and
//! line), one of those marked. What that keeps is a stack the thread had, since a sound read
//! saw it; a torn copy that names it differs from the thread's stack at the moment of the
//! copy only by a call or a return made while the system call ran (microseconds). A torn copy
//! names a stack no sound read saw (the caller's line at its next call under the callee that
//! returned) unless that mix is itself a stack the thread has (the same call again on the same
//! line), and is then read again with the later copies, as any copy that fails its check is.
//!
//! Such a read is kept for the sample only. It never proves a thread still later: no proof of
//! stillness is made from it ([`crate::fast::proof::still`]) and the GIL's words after it do
//! not vouch for the thread afterwards ([`crate::fast::proof::quiet`]), since both would
//! stretch a moment's skew over many samples.
//!
//! The GIL's expected holder is then read without later copies while its stacks keep being
//! found; one that is not found is read again with them at once. Those checked reads are what
//! proves new stacks, and the later copies keep a stack only if its innermost frame stayed
//! through all of them: a frame that comes and goes within microseconds (a small function
//! called in a loop) is proven only when every reading lands in one of its calls, which may
//! never happen. A thread whose stacks are not found (fewer than [`MIN_HITS`] in
//! [`WINDOW`] tries, [`Record`]) is read with its later copies, but for one try in every
//! [`RETRY`] reads, since a stack proven meanwhile can make it worth trying again. 3.11 and
//! later only: 3.10's frames are objects of their own, freed and reused, and are always
//! checked.

use crate::fast::layout::FrameDesign;
use crate::fast::read::request::Request;
use crate::fast::read::thread_model::Known;

/// The tries a thread's record weighs: past them, the record is halved.
pub(crate) const WINDOW: u8 = 16;
/// Of [`WINDOW`] tries, at least this many found: a miss costs a second read (about as much
/// as a checked one) and a hit saves the later copies (about half of one), so tries pay from
/// two found in three; three in four leaves a margin.
pub(crate) const MIN_HITS: u8 = 12;
/// A thread whose tries do not pay is tried once in this many reads.
pub(crate) const RETRY: u8 = 32;

/// How a thread's reads without later copies have gone lately.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub(crate) struct Record {
    tries: u8,
    hits: u8,
    /// Reads since the last try.
    since: u8,
}

impl Record {
    /// Whether the next read of the thread, as the GIL's expected holder, is a try: its first
    /// tries, while they pay, and one in [`RETRY`] reads when they do not.
    fn worth_a_try(&self) -> bool {
        let learning = self.tries < WINDOW / 4;
        let pays =
            u16::from(self.hits) * u16::from(WINDOW) >= u16::from(MIN_HITS) * u16::from(self.tries);
        learning || pays || self.since >= RETRY
    }

    /// One read of the thread: a try found or missed, or a read with later copies.
    fn count(&mut self, tried: bool, found: bool) {
        if !tried {
            self.since = self.since.saturating_add(1);
            return;
        }
        self.since = 0;
        self.tries += 1;
        self.hits += u8::from(found);
        if self.tries >= WINDOW {
            self.tries /= 2;
            self.hits /= 2;
        }
    }
}

/// Whether this read may keep a copy on its stack's word at all: the reader allows it
/// ([`crate::ReaderTuning::proven_stacks`], the sample's first read) and the interpreter's
/// frames live in chunks (3.11+).
fn allowed(req: &Request<'_>) -> bool {
    req.vouch && req.layout.frames == FrameDesign::Chunks
}

/// Whether the likely holder `k` is read without later copies this time: it may be
/// ([`allowed`]), the thread has a stack a sound read gave, and its record says a try is
/// worth it ([`Record`]).
pub(crate) fn skips_copies(k: &Known, req: &Request<'_>) -> bool {
    allowed(req) && k.vouch.worth_a_try() && k.recent.any_proven()
}

/// Whether a copy that may be torn can be kept on its stack's word, before the stack is
/// looked up: it may be ([`allowed`]), the walk reached the thread's first frame
/// (`complete`), and every frame's instruction lies in its own code (`in_code`).
pub(crate) fn may_vouch(req: &Request<'_>, complete: bool, in_code: bool) -> bool {
    allowed(req) && complete && in_code
}

/// Counts one of the thread's reads: a try (`skipped_copies`) found or `missed`, or a read
/// with later copies.
pub(crate) fn after_read(k: &mut Known, skipped_copies: bool, missed: bool) {
    k.vouch.count(skipped_copies, !missed);
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn tries_go_on_while_they_pay_and_come_back_now_and_then() {
        let mut r = Record::default();
        // The first tries are made whatever they find.
        for _ in 0..WINDOW / 4 {
            assert!(r.worth_a_try());
            r.count(true, false);
        }
        assert!(!r.worth_a_try(), "{r:?}");
        // Read with later copies until a retry is due.
        for _ in 0..RETRY {
            assert!(!r.worth_a_try());
            r.count(false, false);
        }
        assert!(r.worth_a_try());
        // Hits bring tries back for good.
        for _ in 0..3 * WINDOW {
            r.count(true, true);
        }
        assert!(r.worth_a_try());
        // A thread found three times in four keeps trying; one in two does not.
        let mut three_in_four = Record::default();
        let mut one_in_two = Record::default();
        for i in 0..4 * WINDOW {
            three_in_four.count(true, i % 4 != 0);
            one_in_two.count(true, i % 2 == 0);
        }
        assert!(three_in_four.worth_a_try(), "{three_in_four:?}");
        assert!(!one_in_two.worth_a_try(), "{one_in_two:?}");
    }
}
