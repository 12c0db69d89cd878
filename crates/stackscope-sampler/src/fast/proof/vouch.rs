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
//!
//! A read also keeps the frames its thread was in when the read began, when they had
//! returned by the time they were copied ([`returned_callee`]): the current-frame pointer is
//! read first and the frames a microsecond later, and a short call in a tight loop has often
//! returned by then. The stack with them on top is kept when a sound read gave it, but for the
//! lines of their callers (which were at the calls then). Such a stack is seldom proven by
//! the later copies, so a thread whose reads name one no sound read gave is stopped now and
//! then to prove what it runs ([`ProvingStops`]); 3.10 too.

use std::time::{Duration, Instant};

use crate::fast::layout::{i32_at, FrameDesign, Layout};
use crate::fast::proof::holder::Later;
use crate::fast::read::request::Request;
use crate::fast::read::stack::{RawFrame, Walk};
use crate::fast::read::thread_model::Known;

/// The tries a thread's record weighs: past them, the record is halved.
pub(crate) const WINDOW: u8 = 16;
/// Of [`WINDOW`] tries, at least this many found: a miss costs a second read (about as much
/// as a checked one) and a hit saves the later copies (about half of one), so tries pay from
/// two found in three; three in four leaves a margin.
pub(crate) const MIN_HITS: u8 = 12;
/// A thread whose tries do not pay is tried again after this many reads, then twice as
/// many after each retry that misses, up to [`RETRY`]: a run of misses (a stretch of stacks
/// not proven yet) ends soon, while a thread whose stacks are seldom found is soon tried
/// seldom.
pub(crate) const RETRY_FIRST: u8 = 4;
/// A thread whose tries do not pay is tried once in this many reads, at the least.
pub(crate) const RETRY: u8 = 32;

/// How a thread's reads without later copies have gone lately.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub(crate) struct Record {
    tries: u8,
    hits: u8,
    /// Reads since the last try.
    since: u8,
    /// Reads to wait before the next retry, while tries do not pay (0: [`RETRY_FIRST`]).
    wait: u8,
}

impl Record {
    /// Whether the next read of the thread, as the GIL's expected holder, is a try: its first
    /// tries, while they pay, and a retry now and then when they do not ([`RETRY_FIRST`]).
    fn worth_a_try(&self) -> bool {
        self.learning() || self.pays() || self.since >= self.wait.max(RETRY_FIRST)
    }

    /// Whether the thread's first tries are still being made, whatever they find.
    fn learning(&self) -> bool {
        self.tries < WINDOW / 4
    }

    /// A stack of the thread was proven that no sound read gave before: what its tries found
    /// so far says less of the next ones, which start learning again.
    pub(crate) fn renew(&mut self) {
        *self = Record::default();
    }

    /// One read of the thread: a try found or missed, or a read with later copies.
    ///
    /// A retry (a try made while tries did not pay) that finds its stack forgives half the
    /// misses on record, and one that misses doubles the wait for the next: misses come in
    /// runs (a stretch of stacks not yet proven, whose sound reads then prove them), and
    /// without that a thread found nineteen times in twenty would, after a run of four
    /// misses, be read with its later copies for the next hundred reads and more.
    fn count(&mut self, tried: bool, found: bool) {
        if !tried {
            self.since = self.since.saturating_add(1);
            return;
        }
        let retry = !self.pays() && !self.learning();
        self.since = 0;
        self.tries += 1;
        self.hits += u8::from(found);
        if retry && found {
            self.tries -= (self.tries - self.hits) / 2;
            self.wait = RETRY_FIRST;
        } else if retry {
            self.wait = self.wait.max(RETRY_FIRST).saturating_mul(2).min(RETRY);
        }
        if self.tries >= WINDOW {
            self.tries /= 2;
            self.hits /= 2;
        }
    }

    /// Whether the tries on record found their stacks often enough to go on ([`MIN_HITS`] in
    /// [`WINDOW`]).
    fn pays(&self) -> bool {
        u16::from(self.hits) * u16::from(WINDOW) >= u16::from(MIN_HITS) * u16::from(self.tries)
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

/// The frame the thread was in when the read began (its current-frame pointer was read
/// first), when that frame had returned by the time its frames were copied: as copied, its
/// code object 0 where the frame no longer has one (3.14+ clears it as the frame returns).
/// That is a checked read's frame that returned to the walk's `start` during the later
/// readings ([`Later::returned`]); or, read without later copies, the frame at `start`
/// itself when it has no code (the walk passes over it, to its caller).
///
/// The later copies keep a stack only if its innermost frame stays through all of them,
/// and a frame copied a moment after the pointer was read may have returned meanwhile; so
/// without this a call shorter than that (a small function called in a loop) would seldom
/// be on top of a read: its time would go to its caller. The stack with it on top is kept
/// when a sound read gave that stack ([`keeps_returned`]).
pub(crate) fn returned_callee(
    layout: &Layout,
    walk: &Walk,
    later: Option<&Later>,
    start: usize,
) -> Option<Returned> {
    if let Some(callee) = later.and_then(|l| l.returned) {
        let (frame, caller) = walk.frame_at(callee, layout).filter(|&(_, c)| c == start)?;
        return Some(Returned {
            frames: vec![frame],
            caller,
        });
    }
    // Cleared frames from the current one down (3.14+, which clears a frame's code object
    // as it returns; 3.13's frames with no code object are entry frames, not returned ones):
    // each returned since, the callers of the inner ones among them.
    if layout.minor < 14 {
        return None;
    }
    let mut frames = Vec::new();
    let mut at = start;
    while let Some((frame, caller)) = walk.frame_at(at, layout).filter(|(f, _)| f.code == 0) {
        frames.push(frame);
        if frames.len() > MAX_RETURNED {
            return None;
        }
        at = caller;
    }
    (!frames.is_empty()).then_some(Returned { frames, caller: at })
}

/// Whether the frame at `start`, as copied, had stopped running: 3.11 to 3.13 keep its
/// value stack's depth at -1 while it runs and save it when it returns (or calls a Python
/// function: then the pointer, read first, would have named the callee, unless the call was
/// made in the microsecond between). Such a frame's slot still holds it whole, and its caller
/// may have moved on from the call. Not known for other versions (3.14+ clear a returning
/// frame's code object instead: [`returned_callee`]).
pub(crate) fn stopped_running(layout: &Layout, walk: &Walk, start: usize) -> bool {
    let Some(offset) = layout.fr_stacktop() else {
        return false;
    };
    walk.header(start, layout)
        .and_then(|header| i32_at(header, offset))
        .is_some_and(|depth| depth >= 0)
}

/// Cleared frames followed down from the current one, at most.
const MAX_RETURNED: usize = 4;

/// The frames the thread was in when its read began, returned since ([`returned_callee`]),
/// innermost first, and the address of the outermost one's caller. Its stack is that
/// caller's walk with them on top, when the walk starts at that caller.
#[derive(Debug, Clone)]
pub(crate) struct Returned {
    pub frames: Vec<RawFrame>,
    pub caller: usize,
}

/// Whether a read may keep the frames it returned from on top at all: the reader allows it
/// ([`crate::ReaderTuning::proven_stacks`], the sample's first read). Each frame must then lie
/// in its own code, and the stack must be, frame for frame, one a sound read gave (but for the
/// lines of their callers): a torn view (the caller already past the call while the callee's
/// slot still holds it; 3.10: a frame object freed and made again) names a stack no sound
/// read saw, but for the same call again. Unlike [`may_vouch`], 3.10 too: the caller, and
/// the frames under it, passed the check.
pub(crate) fn keeps_returned(req: &Request<'_>) -> bool {
    req.vouch
}

/// Counts one of the thread's reads: a try (`skipped_copies`) found or `missed`, or a read
/// with later copies.
pub(crate) fn after_read(k: &mut Known, skipped_copies: bool, missed: bool) {
    k.vouch.count(skipped_copies, !missed);
}

/// At most one proving of a thread begins in this long, after one that proved a new stack:
/// a stop costs the thread a few hundred microseconds, and proves the stack it lands in.
pub(crate) const PROVING_EVERY: Duration = Duration::from_millis(250);

/// After a proving that proved nothing new, the next waits twice as long, up to this: a
/// loop whose stacks stay unproven (a short call of a share too small for a stop to land in
/// it often) is stopped a few times a minute, not a few times a second.
pub(crate) const PROVING_EVERY_MAX: Duration = Duration::from_secs(8);

/// Stops of one proving, at most, one a sample: until one proves a stack not proven before.
/// A stop lands anywhere in the thread's loop, most often in a stack already proven; one
/// landing in a call on top a fifth of the time misses it six times in a row one time in
/// four, and four times in a row two times in five: enough that, of three one-line callees
/// called in turn, one could stay unproven through a recording's first seconds, its samples
/// given to its caller. Stops in one sample would land where the first did: a thread let go
/// runs again only after the reader's next wait, when it shares the reader's CPU.
pub(crate) const PROVING_TRIES: u8 = 6;

/// Stops of a thread that prove its stacks with a short call on top: a stack a read saw with
/// a callee that returned meanwhile on top ([`returned_callee`]), which no sound read gave
/// yet, is given to the caller for that sample, and the thread is stopped (now and then) and
/// read, which proves whatever stack the stop lands in. A callee on top a fair share of the
/// time is soon proven, and from then on kept ([`keeps_returned`]).
#[derive(Debug, Clone, Copy, Default)]
pub(crate) struct ProvingStops {
    wanted: bool,
    /// When the last proving began.
    last: Option<Instant>,
    /// Stops left to the proving under way (0: none).
    tries_left: u8,
    /// How long after the last proving began the next may (0: [`PROVING_EVERY`]).
    spacing: Duration,
    /// A sound read proved a stack not proven before, since the last stop.
    learned: bool,
}

impl ProvingStops {
    /// A read saw a stack with a returned callee on top that no sound read gave.
    pub(crate) fn want(&mut self) {
        self.wanted = true;
    }

    /// A sound read of the thread proved a stack not proven before.
    pub(crate) fn learned(&mut self) {
        self.learned = true;
    }

    /// Whether the thread is to be stopped now (`may`: stops are ours to make this sample):
    /// one was wanted since the last answer, and a proving is under way, or none began in
    /// [`PROVING_EVERY`]. Each answer takes the want.
    pub(crate) fn due(&mut self, now: Instant, may: bool) -> bool {
        let wanted = std::mem::take(&mut self.wanted);
        if !(may && wanted) {
            return false;
        }
        if self.tries_left > 0 {
            return true;
        }
        let spaced = self
            .last
            .is_none_or(|t| now.duration_since(t) >= self.spacing());
        if spaced {
            self.last = Some(now);
            self.tries_left = PROVING_TRIES;
            self.learned = false;
        }
        spaced
    }

    /// The thread was stopped and read: the proving ends when that proved a new stack (the
    /// next may begin after [`PROVING_EVERY`]), or its tries are spent (the next waits twice
    /// as long as this one did, up to [`PROVING_EVERY_MAX`]).
    pub(crate) fn stopped(&mut self) {
        if std::mem::take(&mut self.learned) {
            self.tries_left = 0;
            self.spacing = PROVING_EVERY;
            return;
        }
        self.tries_left = self.tries_left.saturating_sub(1);
        if self.tries_left == 0 {
            self.spacing = (self.spacing() * 2).min(PROVING_EVERY_MAX);
        }
    }

    /// How long after the last proving began the next may.
    fn spacing(&self) -> Duration {
        self.spacing.max(PROVING_EVERY)
    }
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
        for _ in 0..RETRY_FIRST {
            assert!(!r.worth_a_try());
            r.count(false, false);
        }
        assert!(r.worth_a_try());
        // A retry that finds its stack brings tries back at once, after a short run of misses.
        r.count(true, true);
        assert!(r.worth_a_try(), "{r:?}");
        // Hits keep them.
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

    /// The share of `reads` reads that are tries, for a thread whose try `n` would find its
    /// stack when `finds(n)`.
    fn share_tried(reads: u32, finds: impl Fn(u32) -> bool) -> f64 {
        let mut r = Record::default();
        let mut tried = 0;
        for n in 0..reads {
            let attempt = r.worth_a_try();
            tried += u32::from(attempt);
            r.count(attempt, finds(n));
        }
        f64::from(tried) / f64::from(reads)
    }

    /// A number that looks random, from `n`.
    fn scatter(n: u32) -> u32 {
        n.wrapping_mul(0x9E37_79B9)
            .rotate_left(13)
            .wrapping_mul(0x85EB_CA6B)
            >> 7
    }

    #[test]
    fn runs_of_misses_pause_tries_briefly_and_poor_finders_stay_checked() {
        // Found 19 reads in 20, the misses in runs of `run` (a stretch of new stacks).
        for run in [1, 2, 4, 6] {
            let share = share_tried(4000, |n| n % (20 * run) >= run);
            assert!(share > 0.9, "runs of {run}: {share}");
        }
        // Found one read in `k`, spread out or in one run: tries seldom pay, and are made
        // seldom.
        for k in [2, 3, 4, 8] {
            let spread = share_tried(4000, |n| scatter(n).is_multiple_of(k));
            let bunched = share_tried(4000, |n| n % (8 * k) < 8);
            assert!(spread < 0.25, "one in {k}: {spread}");
            assert!(bunched < 0.25, "one in {k}, bunched: {bunched}");
        }
    }

    #[test]
    fn provings_are_spaced_and_stop_once_a_stop_proves_a_new_stack() {
        let mut p = ProvingStops::default();
        let t0 = Instant::now();
        assert!(!p.due(t0, true), "not wanted");
        p.want();
        assert!(!p.due(t0, false), "not ours to stop");
        assert!(!p.due(t0, true), "the want went with the answer");
        // A proving: stops while wanted, one a sample, until its tries are spent.
        for _ in 0..PROVING_TRIES {
            p.want();
            assert!(p.due(t0, true));
            p.stopped();
        }
        // It proved nothing: the next waits twice as long.
        p.want();
        assert!(!p.due(t0 + PROVING_EVERY, true), "too soon for the next");
        let t1 = t0 + 2 * PROVING_EVERY;
        p.want();
        assert!(p.due(t1, true));
        // That one ends at the first stop that proves a new stack,
        p.learned();
        p.stopped();
        p.want();
        assert!(!p.due(t1, true), "proven");
        // and the next may begin a quarter second later.
        let mut last = t1 + PROVING_EVERY;
        p.want();
        assert!(p.due(last, true));
        // Provings that prove nothing space out, up to the longest spacing.
        let mut spacing = PROVING_EVERY;
        for _ in 0..8 {
            for _ in 0..PROVING_TRIES {
                p.stopped();
            }
            spacing = (spacing * 2).min(PROVING_EVERY_MAX);
            p.want();
            assert!(!p.due(last + spacing - Duration::from_millis(1), true));
            last += spacing;
            p.want();
            assert!(p.due(last, true));
        }
        assert_eq!(spacing, PROVING_EVERY_MAX);
    }
}
