//! How much of the target's memory a read copies: the one place where it is decided.
//!
//! A thread's read is a few ranges of one batched `process_vm_readv` (`remote`): its
//! current-frame pointer, its current data-stack chunk, the ranges outside the chunk that its
//! last walk needed, its thread state, and, for the GIL's expected holder, later copies of the
//! top of its stack. Each range has a cost of its own (the kernel looks up and pins its pages,
//! about a microsecond, or as much as copying 700 bytes), and each byte a small one (about
//! 0.3 µs a KB; docs/performance.md). The rules here weigh the two, and each says why it is
//! what it is:
//!
//! - the first copy of a chunk ([`Reads::of`]): its used part as the thread state last showed
//!   it and [`SLACK`] past it, so that frames pushed since rarely need a second read, or no
//!   slack for a thread expected still; never past the chunk's limit nor [`MAX_COPY`];
//! - the ranges outside the chunk copied ahead ([`Extra`], at most [`max_extra`]), and an
//!   older chunk a walk reaches ([`OLDER_CHUNK_COPY`]);
//! - the later copies of a checked thread ([`COPIES`] in all): a window from the frame
//!   [`WINDOW_FRAMES`] below the top of its last stack to [`LATER_SLACK`] past its top
//!   ([`later_copy`]), each followed by a random gap ([`gap`], [`later_ranges`]);
//! - ranges near each other read as one ([`merge_near`]): frames outside the chunk
//!   ([`FRAMES`], [`coalesce`]) and still threads' thread states ([`TSTATES`]).
//!
//! The modules that read (`snapshot`, `holder`, `still`, `stack`, `attempt`) ask here rather
//! than compute a range's extent themselves, so that a change of what a read copies is made,
//! and weighed, in one place.

use crate::fast::layout::{common, FrameDesign, Layout};
use crate::fast::memory::snapshot::TsWords;
use crate::fast::read::stack::RawFrame;

/// A range of the target's memory to read: where it starts and how many bytes.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) struct Span {
    pub addr: usize,
    pub len: usize,
}

impl Span {
    /// Where it ends (saturating: an address read from the target can be anything).
    fn end(&self) -> usize {
        self.addr.saturating_add(self.len)
    }
}

// ---- The first copy of a thread's current chunk.

/// Room copied past the chunk's used part as the thread state last showed it, for the
/// frames pushed since (a few small frames): most samples then need no second read.
pub(crate) const SLACK: usize = 512;
/// At most this much of one chunk is copied (a chunk is usually 16 KiB; one made for a
/// frame with a huge stack can be larger, and its far frames are read one by one).
pub(crate) const MAX_COPY: usize = 1 << 20;

/// How much of the current chunk may be copied from its start: up to its limit, at most
/// [`MAX_COPY`]; 0 without a chunk, or for words that cannot be a chunk's (torn).
pub(crate) fn room(ts: &TsWords) -> usize {
    if ts.chunk == 0 || ts.limit < ts.chunk {
        return 0;
    }
    (ts.limit - ts.chunk).min(MAX_COPY)
}

/// The bytes of the current chunk to copy: its used part, and `slack` past it, within its
/// [`room`]; 0 when the words are torn (a top below the chunk or above its limit).
fn copy_len(ts: &TsWords, slack: usize) -> usize {
    if ts.chunk == 0 || ts.top < ts.chunk || ts.limit < ts.top {
        return 0;
    }
    (ts.top - ts.chunk + slack).min(room(ts))
}

/// The length of the first copy of the current chunk. `still`: the thread is expected not to
/// have moved, so its chunk is copied without [`SLACK`] (about half the bytes of a shallow
/// stack; one that did push frames is read again). `checked`: it is read with a check, as the
/// GIL's expected holder: it keeps the slack even when expected still, since it may be running
/// and its later copies end where this one does ([`later_copy`]).
pub(crate) fn first_copy_len(ts: &TsWords, still: bool, checked: bool) -> usize {
    copy_len(ts, if still && !checked { 0 } else { SLACK })
}

// ---- Ranges outside the current chunk.

/// A range to copy ahead, as the last walk of a thread used it.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) struct Extra {
    pub addr: usize,
    pub len: usize,
    /// A data-stack chunk (from its start), rather than one frame.
    pub chunk: bool,
}

/// At most this many extra ranges (frames and older chunks outside the current chunk,
/// remembered from the last sample) are read with a thread.
pub(crate) const MAX_EXTRA: usize = 64;
/// 3.10, where every frame is its own object and so its own range: py-spy's depth limit.
pub(crate) const MAX_EXTRA_OBJECTS: usize = 4096;

/// The bound on extra ranges for a layout.
pub(crate) fn max_extra(layout: &Layout) -> usize {
    match layout.frames {
        FrameDesign::Chunks => MAX_EXTRA,
        FrameDesign::Objects => MAX_EXTRA_OBJECTS,
    }
}

/// How much of an older chunk a walk that reaches below the current one copies: the smallest
/// chunk CPython makes, which holds all of a chunk but one made for a single huge frame, and
/// stays inside any chunk (frames past it are read one by one).
pub(crate) const OLDER_CHUNK_COPY: usize = common::MIN_CHUNK_BYTES;

/// What one thread's first copy reads: the current-frame pointer, the chunk, the extra ranges,
/// and what the later copies of a checked thread are cut from.
pub(crate) struct Reads<'a> {
    pub pointer: usize,
    pub chunk: usize,
    pub chunk_len: usize,
    /// How much of the chunk may be read from its start (up to its limit).
    pub chunk_room: usize,
    /// The top of the chunk's used part, as the thread state last showed it.
    pub top: usize,
    pub extra: &'a [Extra],
    pub max_extra: usize,
}

impl<'a> Reads<'a> {
    /// The reads of a thread from `guess` (its thread state as last read) and `extra` (the
    /// ranges outside the chunk its last walk needed); `still` and `checked` as for
    /// [`first_copy_len`]. A thread without a cframe runs no Python: no extra ranges.
    pub(crate) fn of(
        layout: &Layout,
        guess: &TsWords,
        extra: &'a [Extra],
        still: bool,
        checked: bool,
    ) -> Reads<'a> {
        Reads {
            pointer: guess.cframe + layout.cframe_current_frame,
            chunk: guess.chunk,
            chunk_len: first_copy_len(guess, still, checked),
            chunk_room: room(guess),
            top: guess.top,
            extra: if guess.cframe != 0 { extra } else { &[] },
            max_extra: max_extra(layout),
        }
    }

    /// The extra ranges read, at most [`Reads::max_extra`] of them.
    pub(crate) fn first_extra(&self) -> &'a [Extra] {
        &self.extra[..self.extra.len().min(self.max_extra)]
    }
}

// ---- The later copies of a checked thread.

/// Copies of a checked thread's frames, the first included. A torn view (a caller already at
/// its next call while the callee's slot still holds the callee that returned) passes only if
/// every copy catches the same one, and each copy divides the odds by 10 to 20: on the
/// adversarial fixture of tests/integration/reader_consistency.rs (a thread calling two
/// one-line functions in turn, as fast as Python goes, 3.12.1, debug build) torn stacks were
/// 1.7e-3 of reads with 2 copies, 9.4e-5 with 3, 1.3e-5 with 4 (one in 77,000 reads, and one
/// in a CI run), and none in 305,675 reads with 8. Each copy costs one more range of the batch's
/// one system call (about a microsecond for a stack of a few kilobytes).
pub(crate) const COPIES: usize = 8;
/// The random gap between copies is a read of up to this many bytes: copies a fixed distance
/// apart could all catch the same short-lived state of a thread looping at a fixed period.
const MAX_COPY_GAP: u64 = 1024;
/// The later copies start at the frame this many below the top of the thread's last stack
/// read whole: that frame and the ones above it are compared in every copy.
pub(crate) const WINDOW_FRAMES: usize = 3;
/// The later copies run this far past the top of the chunk's used part as the thread state
/// last showed it (the first copy runs further, [`SLACK`], to find frames pushed since): a
/// frame of the walk above that makes the check fail, and the next read copies the window
/// anew.
pub(crate) const LATER_SLACK: usize = 256;

/// Where the later copies of a thread start in its current chunk, when not at the chunk's
/// start: frames of the chunk below `floor`, and every frame of an older chunk, are older
/// than the window.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) struct Window {
    pub chunk: usize,
    pub floor: usize,
}

/// Where the later copies of a thread should start next time, from its stack just read
/// whole (`frames`, innermost first): the frame [`WINDOW_FRAMES`] below the top, if it lies
/// in the used part of the current chunk (from `chunk` to `top`, as the thread state shows
/// them); 0 otherwise (the chunk's start).
pub(crate) fn window_floor(frames: &[RawFrame], chunk: usize, top: usize) -> usize {
    frames
        .get(WINDOW_FRAMES)
        .map(|f| f.addr)
        .filter(|&a| a > chunk && a < top)
        .unwrap_or(0)
}

/// The window the later copies hold, when the floor lies inside the part of the chunk the
/// first copy reads (above its start); None: they copy all of it.
fn window_of(reads: &Reads<'_>, floor: usize) -> Option<Window> {
    let inside = floor > reads.chunk && floor < reads.top.min(reads.chunk + reads.chunk_len);
    inside.then_some(Window {
        chunk: reads.chunk,
        floor,
    })
}

/// What each later copy holds of the chunk: `len` bytes (without the gap) from `from` past
/// its start, and the window they make (None: the whole first copy).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) struct LaterCopy {
    pub window: Option<Window>,
    pub from: usize,
    pub len: usize,
}

/// The later copies' part of the chunk, from where they start next (`floor`,
/// [`window_floor`]; 0: the chunk's start): the window from the floor to [`LATER_SLACK`] past
/// the top, within the first copy; or, with no window, all of the first copy.
pub(crate) fn later_copy(reads: &Reads<'_>, floor: usize) -> LaterCopy {
    let window = window_of(reads, floor);
    let (from, len) = match window {
        Some(w) => {
            let end = (reads.top + LATER_SLACK).min(reads.chunk + reads.chunk_len);
            (w.floor - reads.chunk, end - w.floor)
        }
        None => (0, reads.chunk_len),
    };
    LaterCopy { window, from, len }
}

/// The extra ranges each later copy reads again: those of the first copy, but older chunks
/// when there is a window (they lie below it, and are not compared).
pub(crate) fn later_extra(reads: &Reads<'_>, later: &LaterCopy) -> Vec<Extra> {
    reads
        .first_extra()
        .iter()
        .filter(|e| later.window.is_none() || !e.chunk)
        .copied()
        .collect()
}

/// The next random gap between copies: a multiple of 8 under [`MAX_COPY_GAP`].
pub(crate) fn gap(seed: &mut u64) -> usize {
    ((next(seed) % MAX_COPY_GAP) & !7) as usize
}

/// xorshift64: cheap, and random enough to break a phase lock.
fn next(seed: &mut u64) -> u64 {
    let mut x = *seed | 1;
    x ^= x << 13;
    x ^= x >> 7;
    x ^= x << 17;
    *seed = x;
    x
}

/// One later copy's ranges of the chunk, in the order they are read.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) struct LaterRanges {
    /// The copy of the chunk's part (None: nothing of the chunk to copy).
    pub chunk: Option<Span>,
    /// The gap as a read of its own, after the copy's other ranges (None: the copy ran on
    /// through the gap, or there is no gap).
    pub gap: Option<Span>,
}

/// Where one later copy reads the chunk, with a gap of `gap` bytes after it: the copy runs on
/// through the gap where the chunk has room, or else the gap is a range of its own (ranges cost
/// more than bytes: each is looked up and pinned), harmless bytes at the chunk's start.
pub(crate) fn later_ranges(reads: &Reads<'_>, later: &LaterCopy, gap: usize) -> LaterRanges {
    if later.len == 0 {
        return LaterRanges {
            chunk: None,
            gap: None,
        };
    }
    let addr = reads.chunk + later.from;
    if later.from + later.len + gap <= reads.chunk_room {
        return LaterRanges {
            chunk: Some(Span {
                addr,
                len: later.len + gap,
            }),
            gap: None,
        };
    }
    LaterRanges {
        chunk: Some(Span {
            addr,
            len: later.len,
        }),
        gap: (gap != 0).then_some(Span {
            addr: reads.chunk,
            len: gap.min(reads.chunk_len),
        }),
    }
}

// ---- Ranges near each other, read as one.

/// When ranges are merged: at most `gap` bytes apart, into a range at most `max_len` long.
/// Both gaps are under a page, so every page of a merged range holds one of its parts and is
/// mapped wherever they were.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) struct Merge {
    pub gap: usize,
    pub max_len: usize,
}

/// Frames outside the current chunk (3.10's frame objects, mostly a few hundred bytes apart).
///
/// The two rules differ in their gap by history, not by need: both were 1 KiB at first (this
/// one came first), and the thread states' was lowered to 512 bytes once a range's cost was
/// measured (about 700 copied bytes: a longer gap costs more to copy than the range it
/// saves). Frames were not measured again; their value is kept so that the reader copies what
/// it did.
pub(crate) const FRAMES: Merge = Merge {
    gap: 1024,
    max_len: 64 * 1024,
};
/// Still threads' thread states, allocated one after another by the thread that started them:
/// 3.10's and 3.13's are read as few ranges, while 3.11's, 1.2-1.3 KiB apart when started one
/// after another, are read one by one (see [`FRAMES`] for why 512).
pub(crate) const TSTATES: Merge = Merge {
    gap: 512,
    max_len: 64 * 1024,
};

/// A range made of `parts` consecutive ranges of those merged.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) struct Merged {
    pub span: Span,
    pub parts: usize,
}

/// Merges `spans`, sorted by address, where each overlaps or lies within `rule.gap` of the
/// range made so far and the range stays within `rule.max_len`: one iovec instead of one per
/// part, which is most of the kernel's cost of a read, without copying much more.
pub(crate) fn merge_near<I>(spans: I, rule: Merge) -> impl Iterator<Item = Merged>
where
    I: IntoIterator<Item = Span>,
{
    let mut spans = spans.into_iter().peekable();
    std::iter::from_fn(move || {
        let first = spans.next()?;
        let mut merged = Merged {
            span: first,
            parts: 1,
        };
        let fits = |made: &Span, s: &Span| {
            let end = made.end().max(s.end());
            s.addr <= made.end().saturating_add(rule.gap) && end - made.addr <= rule.max_len
        };
        while let Some(s) = spans.next_if(|s| fits(&merged.span, s)) {
            merged.span.len = merged.span.end().max(s.end()) - merged.span.addr;
            merged.parts += 1;
        }
        Some(merged)
    })
}

/// Merges frame ranges near each other ([`FRAMES`]) into one range. A chunk's range is never
/// merged, nor a frame's across one: it must stay a chunk's, from the chunk's start, whose
/// header names the older chunk the walk goes down to.
pub(crate) fn coalesce(mut ranges: Vec<Extra>) -> Vec<Extra> {
    ranges.sort_by_key(|e| e.addr);
    let mut out: Vec<Extra> = Vec::with_capacity(ranges.len());
    for run in ranges.chunk_by(|a, b| !a.chunk && !b.chunk) {
        let spans = run.iter().map(|e| Span {
            addr: e.addr,
            len: e.len,
        });
        out.extend(merge_near(spans, FRAMES).map(|m| Extra {
            addr: m.span.addr,
            len: m.span.len,
            chunk: run.first().is_some_and(|e| e.chunk),
        }));
    }
    out
}

#[cfg(test)]
mod tests;
