//! The reader's model of a thread: what it knows of one between samples ([`Known`]), what
//! proves that a still one did not move ([`Proof`]), which ones this sample takes as still
//! ([`StillThreads`]), and how one try at reading a thread ended ([`Outcome`]).
//!
//! The modules that read threads (`attempt`, `still`, `quiet`, `lost_bet`, `threads`) all
//! work on these; none of them is defined by the code that drives a read.

use std::time::Instant;

use stackscope_event::Frames;

use crate::fast::memory::extent::Extra;
use crate::fast::memory::snapshot::TsWords;
use crate::fast::proof::gil::GilWords;
use crate::fast::proof::switches::OffCpu;
use crate::fast::proof::vouch;
use crate::fast::read::recent::RecentStacks;
use crate::fast::read::stack::WalkSpare;

/// A thread as the reader knows it between samples.
#[derive(Debug, Clone)]
pub(crate) struct Known {
    pub tstate: usize,
    /// Its thread state as last read: where to find its frames next time.
    pub ts: TsWords,
    /// Ranges outside its current chunk that its last walk needed.
    pub extra: Vec<Extra>,
    /// Where the later copies of a check start in its current chunk: the frame a few below
    /// the top of its last stack read whole (0: not known, the chunk's start;
    /// [`crate::fast::proof::holder`]).
    pub window_floor: usize,
    /// The code objects of its last stack: their identity is read with the next snapshot.
    pub codes: Vec<usize>,
    /// Which frames of its last stack walked were the first their call of the eval loop ran,
    /// innermost first (3.11+; empty before): what `--native` merges by. The stack it hands
    /// on is that walk's, or, for a thread proven still, the one of the walk its proof came
    /// from, which was its last.
    pub entries: Vec<bool>,
    /// Its Python state as last read ([`crate::fast::read::judge::signature`]; 0: none yet): where the
    /// sample says whether the thread moved, which decides how fresh its OS state must be.
    pub sig: u64,
    /// What its last full read showed, when that read is one to prove the next ones against
    /// (read whole, without a check, not caught mid-call).
    pub proof: Option<Proof>,
    /// The GIL's words read at the end of the read that last found its stack good (None:
    /// not known): a thread that did not take the GIL since is still there
    /// ([`crate::fast::proof::quiet`]).
    pub proven_at: Option<GilWords>,
    /// The last few distinct stacks built for it: a thread back at one of them is handed
    /// that very stack ([`RecentStacks`]).
    pub recent: RecentStacks,
    /// A moment the thread was off every CPU (our id of it, and its switch ring then), taken
    /// no later than a read that found its stack good: while the ring has not moved, that
    /// stack stands ([`crate::fast::proof::switches`]).
    pub off_cpu: Option<(u64, OffCpu)>,
    /// How its reads as the GIL's expected holder without later copies have gone
    /// ([`crate::fast::proof::vouch`]).
    pub vouch: vouch::Record,
    /// Whether to stop it to prove a stack with a short call on top, and when it was last
    /// stopped for that ([`crate::fast::proof::vouch::ProvingStops`]).
    pub proving: vouch::ProvingStops,
    /// The lists of its last walk, emptied, for its next ([`WalkSpare`]).
    pub walk_spare: WalkSpare,
}

impl Known {
    /// Takes a fresh reading of the thread state, keeping the OS thread id found for it
    /// where the interpreter does not record one (3.10).
    pub(crate) fn refresh(&mut self, ts: TsWords) {
        let old = self.ts;
        self.ts = ts;
        if ts.native_thread_id == 0 && ts.thread_id == old.thread_id {
            self.ts.native_thread_id = old.native_thread_id;
        }
    }
}

/// What a thread's last full read showed, enough to tell whether it moved since
/// ([`crate::fast::proof::still`]).
#[derive(Debug, Clone)]
pub(crate) struct Proof {
    /// Its thread state's words.
    pub ts: TsWords,
    /// Its current-frame pointer (0: no Python running).
    pub current_frame: usize,
    /// The header of the frame at `current_frame`, as copied (empty when there is none).
    pub header: Vec<u8>,
    /// The stack it had.
    pub frames: Frames,
    /// When the thread must be read in full again ([`crate::fast::proof::still::lifetime`]).
    pub expires: Instant,
}

impl Proof {
    /// Whether the proof may still stand in for a full read at `now`.
    pub(crate) fn stands(&self, now: Instant) -> bool {
        now < self.expires
    }
}

/// Which threads this sample takes as still, by their place in the thread list: asleep at
/// their last reading and not the GIL's expected holder, so most likely where they were, and
/// read for what proves that ([`crate::fast::proof::still`]). The reader sets them before each sample's
/// read; a thread whose read shows it moved is still no more (read in full next); a rebuilt
/// list has none.
#[derive(Debug, Default)]
pub(crate) struct StillThreads(Vec<bool>);

impl StillThreads {
    /// Whether thread `i` is taken as still.
    pub(crate) fn is_still(&self, i: usize) -> bool {
        self.0.get(i).copied().unwrap_or(false)
    }

    /// Takes thread `i` as still, or not.
    pub(crate) fn set(&mut self, i: usize, still: bool) {
        if i >= self.0.len() {
            self.0.resize(i + 1, false);
        }
        self.0[i] = still;
    }

    /// Thread `i` moved: read it in full from now on.
    pub(crate) fn moved(&mut self, i: usize) {
        if let Some(still) = self.0.get_mut(i) {
            *still = false;
        }
    }

    /// No thread is taken as still (the list was rebuilt).
    pub(crate) fn clear(&mut self) {
        self.0.clear();
    }
}

/// How a thread's try ended.
#[derive(Debug)]
pub(crate) enum Outcome {
    Done(Frames),
    /// It may have run while it was copied: these frames may be torn.
    Ran(Frames),
    /// Read stopped, but caught in the middle of a call or return (its stack does not reach
    /// its first frame): better read after letting it run a moment.
    Midway(Frames),
    /// Where its frames are had changed since the last sample: read again.
    Again,
    /// The thread state is gone: the thread list changed.
    Gone,
    /// Something no read of a still thread explains.
    Broken(String),
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_thread_is_still_only_while_marked_and_until_it_moves() {
        let mut still = StillThreads::default();
        assert!(!still.is_still(0));
        still.set(2, true);
        assert!(still.is_still(2));
        assert!(!still.is_still(1));
        still.moved(2);
        assert!(!still.is_still(2));
        still.set(0, true);
        still.clear();
        assert!(!still.is_still(0));
        // A thread beyond the marks is not still, and moving it changes nothing.
        still.moved(9);
        assert!(!still.is_still(9));
    }
}
