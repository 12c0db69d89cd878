//! Judging an attempt's walks: whether each thread's stack as walked can be kept (its check
//! passed, or it cannot have run), and what a kept walk tells the next read of its thread
//! (ranges copied ahead, its signature, its code objects, its proof of stillness).

use stackscope_event::Frames;

use crate::fast::layout::{FrameDesign, Layout};
use crate::fast::memory::addrmap::AddrMap;
use crate::fast::memory::extent;
use crate::fast::memory::remote::Batch;
use crate::fast::objects::code::{CodeCache, CodeId};
use crate::fast::proof::gil::Ran;
use crate::fast::proof::holder;
use crate::fast::proof::still;
use crate::fast::proof::vouch::{self, Returned};
use crate::fast::read::attempt::WalkStats;
use crate::fast::read::part::{Part, Walking};
use crate::fast::read::recent;
use crate::fast::read::request::Request;
use crate::fast::read::stack::{RawFrame, Walk};
use crate::fast::read::thread_model::{Known, Outcome, Proof};

/// What a walk is judged by: the first batch (the later copies of checked threads), the
/// code objects' identities, and who can have run during the copies and until the late
/// reads.
pub(super) struct Judged<'a> {
    pub(super) batch: &'a Batch,
    pub(super) ids: &'a AddrMap<Option<CodeId>>,
    pub(super) ran: &'a Ran,
    pub(super) ran_late: &'a Ran,
}

/// Judges each walk not already answered, and records in its thread what the next read
/// needs: the ranges outside its chunk, its signature, its code objects, and its proof.
pub(super) fn record(
    codes: &mut CodeCache,
    threads: &mut [Known],
    walks: &[Walking],
    parts: &mut [Part],
    req: &Request<'_>,
    judged: &Judged<'_>,
    stats: &mut WalkStats,
) {
    let layout = req.layout;
    for w in walks {
        let part = &mut parts[w.pos];
        if part.outcome.is_some() {
            continue;
        }
        let known = &mut threads[part.i];
        known.proof = None;
        let in_code = instructions_in_code(layout, judged.ids, &w.walk.frames);
        if !in_code {
            doubt_codes_outside(codes, layout, judged.ids, &w.walk.frames);
        }
        let checked_ok = passes_check(layout, w, judged.batch) && in_code;
        let ran_late = part.read_late && judged.ran_late.may_have_run(known.tstate);
        // Sound: a stack the thread had as copied, torn or not.
        let sound = (!judged.ran.may_have_run(known.tstate) || checked_ok) && !ran_late;
        let named = recent::name(layout, codes, judged.ids, &w.walk.frames, &mut known.recent);
        let complete = w.walk.ends_at_first_frame(layout);
        let may_vouch = !sound && !ran_late && vouch::may_vouch(req, complete, in_code);
        let kept = keep(codes, known, w, named, sound, may_vouch, req, judged);
        part.vouched = kept.vouched;
        let may_have_run = !sound && !kept.vouched;
        let kept_returned = sound && !kept.callees.is_empty();
        count_vouch(stats, part, may_have_run, kept_returned);
        part.vouched |= kept_returned;
        let (named, callees) = (kept.named, kept.callees);
        let outcome = match named {
            Ok(frames) if may_have_run => Outcome::Ran(frames),
            Ok(frames) if req.stopped && !complete => Outcome::Midway(frames),
            Ok(frames) => Outcome::Done(frames),
            // A thread that ran can read as anything: read it again, stopped.
            Err(_) if may_have_run => Outcome::Ran(Frames::default()),
            Err(why) => Outcome::Broken(why),
        };
        vouch::after_read(known, part.skipped_copies, may_have_run);
        if matches!(
            outcome,
            Outcome::Done(_) | Outcome::Ran(_) | Outcome::Midway(_)
        ) {
            remember_walk(known, &w.walk, &callees, layout);
        }
        known.window_floor = match &outcome {
            Outcome::Done(_) => extent::window_floor(&w.walk.frames, known.ts.chunk, known.ts.top),
            // A check that failed may have failed for its window: whole copies next time.
            _ => 0,
        };
        if let Outcome::Done(frames) = &outcome {
            if sound && known.recent.prove(frames) {
                known.proving.learned();
                known.vouch.renew();
            }
            if req.still_reads && !part.vouched {
                known.proof = proof_of(known.tstate, w, frames, layout);
            }
        }
        part.outcome = Some(outcome);
    }
}

/// The stack a read keeps, and on whose word.
struct Kept {
    named: Result<Frames, String>,
    /// Kept, though the thread may have run, on a stack a sound read gave ([`vouch`]).
    vouched: bool,
    /// The frames the thread was in when the read began, kept on top (innermost first).
    callees: Vec<RawFrame>,
}

/// The stack read `w` keeps: `named` (its walk's), or, with the frame the thread was in
/// when the read began on top ([`keep_returned`]), or for a read that may be torn
/// (`may_vouch`), the stack a sound read gave that it names ([`RecentStacks::proven_for`]).
///
/// [`RecentStacks::proven_for`]: crate::fast::read::recent::RecentStacks::proven_for
#[allow(clippy::too_many_arguments)]
fn keep(
    codes: &mut CodeCache,
    known: &mut Known,
    w: &Walking,
    named: Result<Frames, String>,
    sound: bool,
    may_vouch: bool,
    req: &Request<'_>,
    judged: &Judged<'_>,
) -> Kept {
    let with_callee = match (&w.returned, &named) {
        (Some(callee), Ok(_)) if sound || may_vouch => {
            keep_returned(codes, known, w, callee, req, judged)
        }
        _ => None,
    };
    let vouched_as = match &named {
        Ok(frames) if may_vouch => with_callee
            .as_ref()
            .map(|(stack, _)| stack.clone())
            .or_else(|| known.recent.is_proven(frames).then(|| frames.clone()))
            .or_else(|| keep_stale_top(codes, known, w, req, judged)),
        _ => None,
    };
    let callees = with_callee
        .as_ref()
        .map(|(_, callees)| callees.clone())
        .unwrap_or_default();
    Kept {
        vouched: vouched_as.is_some(),
        named: vouched_as
            .or(with_callee.map(|(stack, _)| stack))
            .map_or(named, Ok),
        callees,
    }
}

/// The stack of read `w` with the frames the thread was in when the read began on top
/// ([`vouch::returned_callee`]), and those frames with their code objects: when that stack is
/// one a sound read gave, but for the lines of the frames under the innermost that returned
/// since ([`vouch::keeps_returned`]). One no sound read gave has the thread stopped soon to
/// prove what it runs ([`vouch::ProvingStops`]).
fn keep_returned(
    codes: &mut CodeCache,
    known: &mut Known,
    w: &Walking,
    returned: &Returned,
    req: &Request<'_>,
    judged: &Judged<'_>,
) -> Option<(Frames, Vec<RawFrame>)> {
    let layout = req.layout;
    // The walk must start at their caller (not pass over it).
    if w.walk.frames.first().map(|f| f.addr) != Some(returned.caller) {
        return None;
    }
    if !vouch::keeps_returned(req) {
        return None;
    }
    let callees: Option<Vec<RawFrame>> = returned
        .frames
        .iter()
        .map(|&f| with_code(layout, judged.ids, f))
        .collect();
    let Some(callees) = callees else {
        // A cleared frame whose code object is none of those read: a stop walks the
        // thread, and its code objects are read with the next samples.
        if returned.frames.iter().any(|f| f.code == 0) {
            known.proving.want();
        }
        return None;
    };
    let mut raw = Vec::with_capacity(w.walk.frames.len() + callees.len());
    raw.extend_from_slice(&callees);
    raw.extend_from_slice(&w.walk.frames);
    let found = recent::find_proven(
        layout,
        codes,
        judged.ids,
        &raw,
        callees.len(),
        &mut known.recent,
    );
    if found.as_ref().is_none_or(|f| f.relaxed) {
        known.proving.want();
    }
    found.map(|f| (f.stack, callees))
}

/// For a copy that may be torn and names no stack a sound read gave, whose innermost frame
/// had stopped running when copied ([`vouch::stopped_running`]: 3.11 to 3.13, whose
/// returned frames keep their slots whole): the stack it names when a sound read gave it but
/// for the caller's line (the caller moved on from the call after the current-frame pointer,
/// read first, named the callee). Else the read is made again with later copies, at the cost
/// of a second system call.
///
/// The copy of the frames under the innermost is one stack the thread had (they do not
/// change while their callees run). A frame still running must match line for line: a
/// function called from two lines, one not proven yet, would otherwise be given to the
/// proven one for good. A caller that made a call that returned from two lines is given the
/// proven one too, so a relaxed match asks for the thread to be stopped now and then to
/// prove what it runs ([`vouch::ProvingStops`], whose spacing bounds the stops).
fn keep_stale_top(
    codes: &mut CodeCache,
    known: &mut Known,
    w: &Walking,
    req: &Request<'_>,
    judged: &Judged<'_>,
) -> Option<Frames> {
    let starts_there = w.walk.frames.first().map(|f| f.addr) == Some(w.start);
    if w.returned.is_some()
        || !starts_there
        || !vouch::stopped_running(req.layout, &w.walk, w.start)
    {
        return None;
    }
    let found = recent::find_proven(
        req.layout,
        codes,
        judged.ids,
        &w.walk.frames,
        1,
        &mut known.recent,
    )?;
    if found.relaxed {
        known.proving.want();
    }
    Some(found.stack)
}

/// `frame` with its code object, when its instruction lies in it: the frame's own, or, for a
/// frame whose code object was cleared as it returned (3.14+), the one of the code objects
/// read for this attempt whose bytecode holds its instruction.
fn with_code(layout: &Layout, ids: &AddrMap<Option<CodeId>>, frame: RawFrame) -> Option<RawFrame> {
    if frame.code != 0 {
        return instructions_in_code(layout, ids, std::slice::from_ref(&frame)).then_some(frame);
    }
    if layout.frames != FrameDesign::Chunks {
        return None;
    }
    let mut holders = ids.iter().filter_map(|(&code, id)| {
        let id = id.as_ref()?;
        instruction_in(layout, code, id, frame.prev_instr).then_some(code)
    });
    let code = holders.next()?;
    holders
        .next()
        .is_none()
        .then_some(RawFrame { code, ..frame })
}

/// Counts a read kept on a sound read's word, a likely holder read without later copies
/// that must be read again (`may_have_run`), and a stack kept with the callee its read
/// returned from on top (`kept_returned`).
fn count_vouch(stats: &mut WalkStats, part: &Part, may_have_run: bool, kept_returned: bool) {
    stats.vouched += u64::from(part.vouched);
    stats.returned_kept += u64::from(kept_returned);
    stats.vouch_misses += u64::from(part.skipped_copies && may_have_run);
}

/// Records in `known` what its walk tells the next read: the ranges outside its chunk, its
/// signature, and the code objects to check ahead.
fn remember_walk(known: &mut Known, walk: &Walk, callees: &[RawFrame], layout: &Layout) {
    let mut extra = walk.outside_ranges(layout);
    if layout.frames == FrameDesign::Objects {
        // 3.10: a frame that came and went (a leaf call's, made again at the same address
        // from its code object's spare frame) is likely there next time: keep a few of the
        // last ranges this walk did not use.
        let keep = (extra.len() + RECENT_FRAMES).min(extent::max_extra(layout));
        for e in &known.extra {
            if extra.len() >= keep {
                break;
            }
            if !extra.contains(e) {
                extra.push(*e);
            }
        }
        extra = extent::coalesce(extra);
    }
    known.extra = extra;
    known.sig = signature(&walk.frames) ^ walk.chunk_digest(known.ts.top);
    known.entries.clear();
    if layout.frames == FrameDesign::Chunks {
        // The stack handed on has the callee it returned from on top, when it was kept.
        known
            .entries
            .extend(callees.iter().chain(&walk.frames).map(|f| f.entry));
        // The thread's first frame was entered from C, as every call from C is.
        if let Some(outermost) = known.entries.last_mut() {
            *outermost = true;
        }
    }
    // This walk's code objects, then a few of the earlier walks' that it did not use: a leaf
    // call that comes and goes between samples keeps its identity read with the snapshot
    // instead of costing a call of its own after it.
    // Built behind the earlier list in the same vector, which then drops its front: no
    // allocation a sample once the vector has grown.
    let codes = &mut known.codes;
    let earlier = codes.len();
    for f in callees.iter().chain(&walk.frames) {
        if codes.len() - earlier >= MAX_CODES_AHEAD {
            break;
        }
        if !codes[earlier..].contains(&f.code) {
            codes.push(f.code);
        }
    }
    let keep = (codes.len() - earlier + EARLIER_CODES_AHEAD).min(MAX_CODES_AHEAD);
    for i in 0..earlier {
        if codes.len() - earlier >= keep {
            break;
        }
        let code = codes[i];
        if !codes[earlier..].contains(&code) {
            codes.push(code);
        }
    }
    codes.drain(..earlier);
}

/// A stack read whole from one copy (no check's later copies) is what later still reads
/// of thread `tstate` are checked against.
fn proof_of(tstate: usize, w: &Walking, frames: &Frames, layout: &Layout) -> Option<Proof> {
    let header = match w.start {
        0 => Some(Vec::new()),
        start => w.walk.header(start, layout).map(<[u8]>::to_vec),
    };
    match (&w.later, header) {
        (None, Some(header)) => Some(Proof {
            ts: w.ts,
            current_frame: w.start,
            header,
            frames: frames.clone(),
            expires: std::time::Instant::now() + still::lifetime(tstate),
        }),
        _ => None,
    }
}

/// A thread's Python state in one word: every frame's address, code object and instruction
/// (3.10: `f_lasti`), innermost first (the reader adds the used chunk's bytes, 3.11+). Equal words: the thread ran no Python in between, or
/// came back to exactly where it was. Never 0.
pub(crate) fn signature(frames: &[RawFrame]) -> u64 {
    // Not a keyed hash: equal words are only ever compared for one thread, never a table key.
    const K: u64 = 0x517c_c1b7_2722_0a95;
    let mix = |h: u64, v: usize| (h.rotate_left(5) ^ v as u64).wrapping_mul(K);
    let mut h: u64 = 0xcbf2_9ce4_8422_2325;
    for f in frames {
        h = mix(mix(mix(h, f.addr), f.code), f.prev_instr);
    }
    mix(h, frames.len()) | 1
}

/// 3.10: frames a thread's last walks used but its latest did not, still copied ahead.
const RECENT_FRAMES: usize = 8;

/// At most this many code objects per thread are checked ahead, with the snapshot.
const MAX_CODES_AHEAD: usize = 128;

/// Of those, at most this many that its last walk did not use.
const EARLIER_CODES_AHEAD: usize = 8;

/// Whether a thread read with a check passes it ([`holder`]).
fn passes_check(layout: &Layout, w: &Walking, batch: &Batch) -> bool {
    let Some(later) = &w.later else {
        return false;
    };
    later.agrees
        && w.walk.ends_at_first_frame(layout)
        && holder::same_frames(layout, &w.walk, later, batch)
}

/// Whether every frame's instruction lies in its own code object's bytecode (or one unit
/// before it: not started yet). A frame caught while being set up, its code already the new
/// one and its instruction still the old occupant's, fails this.
fn instructions_in_code(
    layout: &Layout,
    ids: &AddrMap<Option<CodeId>>,
    frames: &[RawFrame],
) -> bool {
    frames.iter().all(|f| {
        let Some(Some(id)) = ids.get(&f.code) else {
            return false;
        };
        if layout.frames == FrameDesign::Objects {
            // 3.10: `f_lasti` is an index, -1 before the first instruction; the bytecode
            // is a separate object whose size we do not read.
            let lasti = f.prev_instr as isize;
            return (-1..1 << 26).contains(&lasti);
        }
        instruction_in(layout, f.code, id, f.prev_instr)
    })
}

/// Has the cache read again the identity of each code object a frame's instruction lies
/// outside of: one it trusted may be another object's by now.
fn doubt_codes_outside(
    codes: &mut CodeCache,
    layout: &Layout,
    ids: &AddrMap<Option<CodeId>>,
    frames: &[RawFrame],
) {
    for f in frames {
        if !instructions_in_code(layout, ids, std::slice::from_ref(f)) {
            codes.doubt(f.code);
        }
    }
}

/// Whether `instr` lies in the bytecode of the code object at `code` (or one unit before it:
/// not started yet). 3.11+.
fn instruction_in(layout: &Layout, code: usize, id: &CodeId, instr: usize) -> bool {
    let start = code + layout.co_code_adaptive;
    let end = start.saturating_add(2 * id.units() as usize);
    instr + 2 >= start && instr < end
}
