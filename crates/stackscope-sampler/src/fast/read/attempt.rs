//! One try at reading a set of threads: the snapshot, the walks, the code objects, and for
//! each thread its frames, or why it must be read again.
//!
//! One system call copies every thread's frames, framed by two reads of the GIL ([`crate::fast::proof::gil`]):
//! the threads that cannot have run in between have their stacks as copied. A thread that may
//! have run (the GIL's holder) is kept too if it was read with a check and passes it: its
//! current frame the same before and after the copy, every frame the walk used the same in a
//! second copy (code, caller, and instruction but for the innermost frame's, which moves as
//! it runs), and the walk reaching its first frame. Otherwise it is handed back as
//! [`Outcome::Ran`], to be read again (with a check), and at last stopped.

use std::time::Instant;

use stackscope_event::Frames;

use crate::fast::layout::{common, FrameDesign, GilHolder, Layout};
use crate::fast::memory::addrmap::AddrMap;
use crate::fast::memory::extent;
use crate::fast::memory::remote::{Batch, Remote, Slot};
use crate::fast::memory::snapshot::{self, Checked, TsWords};
use crate::fast::objects::code::{CodeCache, CodeId};
use crate::fast::proof::gil::{GilWords, Ran};
use crate::fast::proof::holder::Copies;
use crate::fast::proof::quiet;
use crate::fast::proof::still;
use crate::fast::proof::vouch;
use crate::fast::read::judge::{record, Judged};
use crate::fast::read::part::{Part, Plan, Walking};
use crate::fast::read::recent::RecentStacks;
use crate::fast::read::request::{Check, Globals, Request};
use crate::fast::read::stack::{Need, Walk};
use crate::fast::read::thread_model::{Known, Outcome, StillThreads};

mod bracket;

use bracket::{gil_words, Bracket};

pub(crate) struct Attempt {
    /// `interp->threads.head`, when the list was read.
    pub head: Option<usize>,
    /// Each thread's state as read (for the list check), in the order asked.
    pub states: Vec<Option<TsWords>>,
    /// The thread state py-spy would call the GIL's holder, when the globals were read.
    pub gil_holder: Option<usize>,
    /// The GIL's last holder at the end of the read: likely the holder next time too.
    pub last_holder: Option<usize>,
    /// The GIL's words at the end of the read (None: not bracketed, or not read).
    pub gil_after: Option<GilWords>,
    /// Threads planned with no reads ([`quiet`]) that may have run, by their position in
    /// the threads asked for: to be read again without that bet.
    pub quiet_failed: Vec<usize>,
    pub outcomes: Vec<Outcome>,
}

/// Counters kept across attempts.
#[derive(Debug, Default, Clone)]
pub(crate) struct WalkStats {
    /// Reads after the snapshot, for frames outside the copies.
    pub rounds: u64,
    /// Still threads found where they were, their stacks taken from their last read.
    pub unchanged: u64,
    /// Still threads taken as still on the GIL's word, nothing of them read ([`quiet`]).
    pub quiet: u64,
    /// Threads that may have run, kept on a stack a sound read gave ([`vouch`]).
    pub vouched: u64,
    /// Likely holders read without later copies whose stack no sound read had given.
    pub vouch_misses: u64,
    /// Checked reads kept with the callee that returned during their later copies on top.
    pub returned_kept: u64,
}

/// The lists an attempt fills and empties, kept by the reader from one attempt to the next:
/// after a sleep, an allocation is a cold walk through the allocator's lists.
#[derive(Default)]
pub(crate) struct AttemptLists {
    parts: Vec<Part>,
    walks: Vec<Walking>,
    code_ids: AddrMap<Slot>,
    trusted: AddrMap<CodeId>,
    ids: AddrMap<Option<CodeId>>,
}

/// Reads the threads `threads[i]` for each i in `req.which`, in phases: plan every thread's
/// ranges into one batch ([`plan`]), run it, read the GIL and list words around it
/// ([`Bracket::read`]), check each thread's copy ([`check`]), walk the frames with rounds of
/// later reads ([`walk`]), read what the walks still need to be judged ([`read_late`]), load
/// new code objects, and judge and record each walk ([`record`]).
pub(crate) fn attempt(
    remote: &mut Remote,
    codes: &mut CodeCache,
    threads: &mut [Known],
    still: &mut StillThreads,
    req: &Request<'_>,
    lists: &mut AttemptLists,
    stats: &mut WalkStats,
) -> std::io::Result<Attempt> {
    let layout = req.layout;
    let now = req.now;
    let mut batch = remote.batch();
    let ranges = plan(&mut batch, codes, threads, still, req, lists);
    batch.run(remote)?;
    let mut bracket = Bracket::read(&batch, layout, &ranges, std::mem::take(&mut lists.ids));
    bracket.note_ids(codes, &ranges.code_ids, now);
    ranges.give_back(lists);
    let quiet_failed = check(&batch, layout, threads, still, &bracket, lists, stats);
    let AttemptLists { parts, walks, .. } = lists;
    // The batch stays until the checks are done: the later copies are read in it.
    walk(remote, layout, walks, parts, stats)?;
    let ran_late = read_late(remote, codes, now, req, walks, parts, &mut bracket)?;
    let named = |w: &Walking| &threads[parts[w.pos].i].recent;
    load_codes(remote, codes, layout, walks, named, &bracket.ids, now)?;
    let judged = Judged {
        batch: &batch,
        ids: &bracket.ids,
        ran: &bracket.ran,
        ran_late: &ran_late,
    };
    record(codes, threads, walks, parts, req, &judged, stats);
    for w in walks.drain(..) {
        let spare = w.walk.recycle(|bytes| batch.take_back(bytes));
        threads[parts[w.pos].i].walk_spare = spare;
    }
    remote.recycle(batch);
    let attempt = finish(threads, parts, &bracket, !req.stopped, quiet_failed);
    lists.ids = bracket.ids;
    Ok(attempt)
}

/// Where the process-wide words went in the first batch.
pub(super) struct Ranges {
    gil_before: Option<Slot>,
    /// The list head, and the word that names the GIL's holder.
    list: Option<(Slot, Option<Slot>)>,
    /// The identity of the code objects the threads ran last time, but for those the cache
    /// trusts ([`CodeCache::trusted`]).
    code_ids: AddrMap<Slot>,
    /// Those, as the cache holds them.
    trusted: AddrMap<CodeId>,
    gil_after: Option<Slot>,
}

impl Ranges {
    /// Hands the maps back, emptied, for the next attempt.
    fn give_back(self, lists: &mut AttemptLists) {
        let Ranges {
            mut code_ids,
            mut trusted,
            ..
        } = self;
        code_ids.clear();
        trusted.clear();
        lists.code_ids = code_ids;
        lists.trusted = trusted;
    }
}

/// Plans the first batch: the GIL, the list words, each thread's ranges, the identity of
/// the code objects the threads ran last time, still threads' states, and the GIL again (the
/// kernel copies the ranges in that order).
fn plan(
    batch: &mut Batch,
    codes: &CodeCache,
    threads: &[Known],
    still: &StillThreads,
    req: &Request<'_>,
    lists: &mut AttemptLists,
) -> Ranges {
    let layout = req.layout;
    let now = req.now;
    let bracket = !req.stopped;
    let (gil_before, list) = plan_globals(batch, layout, req.globals, bracket, req.with_list);
    let mut seed = req.seed;
    let parts = &mut lists.parts;
    parts.clear();
    parts.extend(req.which.iter().map(|&i| {
        let (plan, skipped_copies) =
            plan_thread(batch, &threads[i], still.is_still(i), i, req, &mut seed);
        Part {
            i,
            plan,
            state: None,
            outcome: None,
            read_late: false,
            skipped_copies,
            vouched: false,
        }
    }));
    // The code objects the threads ran last time, most likely still on their stacks: their
    // identity comes with the snapshot, so a steady sample needs no second call. (A still
    // thread's stack comes with its names: a code object on a stack cannot be freed.) Those
    // the cache found good a moment ago are not read at all.
    // Sized once: most of them are trusted once settled, the rest read; grown insert by
    // insert, the maps were rehashed two or three times a sample.
    let codes_known: usize = parts.iter().map(|p| threads[p.i].codes.len()).sum();
    let mut code_ids = std::mem::take(&mut lists.code_ids);
    let mut trusted = std::mem::take(&mut lists.trusted);
    code_ids.clear();
    trusted.clear();
    trusted.reserve(codes_known);
    for part in parts.iter() {
        if matches!(part.plan, Plan::Still(_) | Plan::Quiet) {
            continue;
        }
        for &code in &threads[part.i].codes {
            if code_ids.contains_key(&code) || trusted.contains_key(&code) {
                continue;
            }
            match trusted_or_read(codes, now, layout, batch, code) {
                Ok(id) => {
                    trusted.insert(code, id);
                }
                Err(slot) => {
                    code_ids.insert(code, slot);
                }
            }
        }
    }
    let still_plans: Vec<&mut still::Planned> = parts
        .iter_mut()
        .filter_map(|p| match &mut p.plan {
            Plan::Still(s) => Some(s),
            Plan::Full(_) | Plan::Quiet => None,
        })
        .collect();
    still::add_tstates(batch, still_plans);
    let gil_after = bracket.then(|| batch.add(req.globals.gil, common::GIL_LEN));
    Ranges {
        gil_before,
        list,
        code_ids,
        trusted,
        gil_after,
    }
}

/// The process-wide words a read starts with: the GIL's (when `bracket`), then the list head
/// and the word that names the GIL's holder (when `with_list`). Where the GIL's words name the
/// holder (3.12+), those just read for the bracket serve: the same bytes an iovec sooner, and
/// an iovec (a page pinned again) less.
fn plan_globals(
    batch: &mut Batch,
    layout: &Layout,
    globals: &Globals,
    bracket: bool,
    with_list: bool,
) -> (Option<Slot>, Option<(Slot, Option<Slot>)>) {
    let gil_before = bracket.then(|| batch.add(globals.gil, common::GIL_LEN));
    let list = with_list.then(|| {
        let head = batch.add(globals.head_ptr, 8);
        let holder = match layout.gil_holder {
            GilHolder::TstateCurrent => batch.add(globals.tstate_current, 8),
            GilHolder::LastHolderWhileLocked => {
                gil_before.unwrap_or_else(|| batch.add(globals.gil, common::GIL_LEN))
            }
        };
        (head, Some(holder))
    });
    (gil_before, list)
}

/// How thread `k` (the `i`th of the list; `is_still` this sample) is read: taken as still on
/// the GIL's word, for its proof alone, or copied in full (with a check for a likely holder,
/// but for one whose stacks a sound read gave: [`vouch`]). Answers the plan, and whether a
/// likely holder's later copies were left out.
fn plan_thread(
    batch: &mut Batch,
    k: &Known,
    is_still: bool,
    i: usize,
    req: &Request<'_>,
    seed: &mut u64,
) -> (Plan, bool) {
    let layout = req.layout;
    let bracket = !req.stopped;
    let with_check = !req.stopped
        && match req.check {
            Check::All => true,
            Check::Threads(t) => t.contains(&k.tstate),
        };
    match &k.proof {
        Some(_) if req.quiet && !with_check && bracket && quiet::possible(k, is_still) => {
            (Plan::Quiet, false)
        }
        Some(proof) if is_still && !with_check => {
            let words_only = req.words_only.contains(&i);
            let plan = still::plan(batch, layout, k.tstate, proof, words_only);
            (Plan::Still(plan), false)
        }
        _ => {
            let skips = with_check && vouch::skips_copies(k, req);
            let check = (with_check && !skips).then_some(Copies {
                seed,
                window_floor: k.window_floor,
            });
            let plan = snapshot::plan(batch, layout, k.tstate, k.ts, &k.extra, check, is_still);
            (Plan::Full(plan), skips)
        }
    }
}

/// The identity of the code object at `code` as the cache holds it, when the cache trusts it
/// ([`CodeCache::trusted`]); else the range of `batch` that reads it.
fn trusted_or_read(
    codes: &CodeCache,
    now: Instant,
    layout: &Layout,
    batch: &mut Batch,
    code: usize,
) -> Result<CodeId, Slot> {
    codes.trusted(code, now).ok_or_else(|| {
        let (start, end) = layout.code_identity_range();
        batch.add(code + start, end - start)
    })
}

/// Checks each thread's copy: a thread taken as still on the GIL's word is done or lost its
/// bet; a still one is where it was or not; a full copy is a stack to walk, or must be read
/// again. Fills `lists.walks` (emptied first) with the walks to make, from `lists.parts`;
/// answers the threads whose bets were lost (by position).
fn check(
    batch: &Batch,
    layout: &Layout,
    threads: &mut [Known],
    still: &mut StillThreads,
    bracket: &Bracket,
    lists: &mut AttemptLists,
    stats: &mut WalkStats,
) -> Vec<usize> {
    let AttemptLists { parts, walks, .. } = lists;
    walks.clear();
    let mut quiet_failed = Vec::new();
    for (pos, part) in parts.iter_mut().enumerate() {
        let Part {
            i,
            plan,
            state,
            outcome,
            ..
        } = part;
        let k = &mut threads[*i];
        match plan {
            Plan::Quiet => {
                // Its thread state as known (for the list check): unchanged if it did not run.
                *state = Some(k.ts);
                match k.proof.as_ref().filter(|_| quiet::holds(k, bracket.after)) {
                    Some(proof) => {
                        stats.quiet += 1;
                        *outcome = Some(Outcome::Done(proof.frames.clone()));
                    }
                    None => {
                        quiet_failed.push(pos);
                        *outcome = Some(Outcome::Again);
                    }
                }
            }
            Plan::Still(planned) => {
                let settled = still::settle(batch, layout, planned, k, &bracket.ran);
                if settled.moved {
                    still.moved(*i);
                }
                stats.unchanged +=
                    u64::from(settled.ts.is_some() && matches!(settled.outcome, Outcome::Done(_)));
                *state = settled.ts;
                *outcome = Some(settled.outcome);
            }
            Plan::Full(planned) => match check_copy(batch, layout, planned, k, pos) {
                (ts, Ok(walking)) => {
                    *state = ts;
                    walks.push(walking);
                }
                (ts, Err(answer)) => {
                    *state = ts;
                    *outcome = Some(answer);
                }
            },
        }
    }
    quiet_failed
}

/// Checks a thread's full copy (`k`'s, at `pos` in the attempt): its thread state as read,
/// and a walk to make, or why there is none (read it again; the list changed).
fn check_copy(
    batch: &Batch,
    layout: &Layout,
    planned: &snapshot::Planned,
    k: &mut Known,
    pos: usize,
) -> (Option<TsWords>, Result<Walking, Outcome>) {
    match snapshot::check(batch, layout, planned) {
        Checked::Walkable {
            ts,
            current_frame,
            chunk,
            extra,
            later,
        } => {
            k.refresh(ts);
            let spare = std::mem::take(&mut k.walk_spare);
            let mut walk = Walk::with_spare(current_frame, chunk, spare);
            for (region, is_chunk) in extra {
                walk.add_region(region, is_chunk);
            }
            let returned = vouch::returned_callee(layout, &walk, later.as_ref(), current_frame);
            let walking = Walking {
                pos,
                walk,
                later,
                ts,
                start: current_frame,
                returned,
            };
            (Some(ts), Ok(walking))
        }
        Checked::Again(fresh) => {
            k.refresh(fresh);
            (Some(fresh), Err(Outcome::Again))
        }
        Checked::Unreadable => (None, Err(Outcome::Gone)),
    }
}

/// Walks every thread as far as the copies go, then reads what the walks still need, all
/// threads together, until every walk is complete; a walk that cannot go on is broken.
fn walk(
    remote: &mut Remote,
    layout: &Layout,
    walks: &mut [Walking],
    parts: &mut [Part],
    stats: &mut WalkStats,
) -> std::io::Result<()> {
    let mut rounds = 0;
    // Most walks end within their copies: then nothing here allocates.
    let mut needs = advance(layout, walks, parts, 0..walks.len(), rounds);
    let mut pending: Vec<usize> = Vec::new();
    while !needs.is_empty() {
        rounds += 1;
        stats.rounds += 1;
        let mut round = Batch::default();
        let slots: Vec<(Slot, Option<Slot>)> = needs
            .iter()
            .map(|(_, need)| {
                let frame = round.add(need.frame, layout.fr_header_len);
                let chunk = need.chunk.map(|c| round.add(c, extent::OLDER_CHUNK_COPY));
                (frame, chunk)
            })
            .collect();
        round.run(remote)?;
        pending.clear();
        for ((w, need), (frame, chunk)) in needs.into_iter().zip(slots) {
            let Walking { pos, walk, .. } = &mut walks[w];
            parts[*pos].read_late = true;
            walk.supply(
                need,
                round.get(frame).map(<[u8]>::to_vec),
                chunk.and_then(|c| round.get(c)).map(<[u8]>::to_vec),
            );
            if walk.can_continue(need, layout) {
                pending.push(w);
            } else {
                parts[*pos].outcome = Some(broken("cannot read a frame"));
            }
        }
        needs = advance(layout, walks, parts, pending.iter().copied(), rounds);
    }
    Ok(())
}

/// Takes each of the walks `going` as far as its copies go: answers what those that need
/// more must read (none after `rounds` of reads past the limit: those are broken).
fn advance(
    layout: &Layout,
    walks: &mut [Walking],
    parts: &mut [Part],
    going: impl Iterator<Item = usize>,
    rounds: usize,
) -> Vec<(usize, Need)> {
    let mut needs = Vec::new();
    for w in going {
        let Walking { pos, walk, .. } = &mut walks[w];
        let outcome = &mut parts[*pos].outcome;
        match walk.advance(layout) {
            Ok(None) => {}
            Ok(Some(need)) if rounds < max_rounds(layout) => needs.push((w, need)),
            Ok(Some(_)) => *outcome = Some(broken("too many frames outside")),
            Err(e) => *outcome = Some(broken(&format!("{e:?}"))),
        }
    }
    needs
}

/// One more call if needed: the identity of code objects not read with the snapshot (into
/// `bracket.ids`), and the GIL once more when frames were read after the snapshot, since
/// those reads are only good for threads that did not run until then either. Answers the
/// threads that can have run until then.
fn read_late(
    remote: &mut Remote,
    codes: &mut CodeCache,
    now: Instant,
    req: &Request<'_>,
    walks: &[Walking],
    parts: &[Part],
    bracket: &mut Bracket,
) -> std::io::Result<Ran> {
    let layout = req.layout;
    let mut late = Batch::default();
    let mut late_codes: AddrMap<Slot> = AddrMap::default();
    for w in walks {
        if parts[w.pos].outcome.is_some() {
            continue;
        }
        for f in w.frames() {
            if bracket.ids.contains_key(&f.code) || late_codes.contains_key(&f.code) {
                continue;
            }
            match trusted_or_read(codes, now, layout, &mut late, f.code) {
                Ok(id) => {
                    bracket.ids.insert(f.code, Some(id));
                }
                Err(slot) => {
                    late_codes.insert(f.code, slot);
                }
            }
        }
    }
    let bracketed = !req.stopped;
    let any_late = parts.iter().any(|p| p.read_late);
    let gil_late = (bracketed && any_late).then(|| late.add(req.globals.gil, common::GIL_LEN));
    if !late.is_empty() {
        late.run(remote)?;
    }
    let ran_late = if bracketed && any_late {
        Ran::between(bracket.before, gil_words(&late, gil_late))
    } else {
        Ran::NONE
    };
    for (&addr, &slot) in &late_codes {
        bracket
            .ids
            .insert(addr, late.get(slot).and_then(|b| CodeId::parse(layout, b)));
    }
    bracket.note_ids(codes, &late_codes, now);
    Ok(ran_late)
}

/// Loads the code objects new to the cache. Only those on a stack read now: one checked
/// ahead that is no longer on any may have been freed, and its bytes are anything. A frame
/// its thread's last naming found in the cache, which dropped nothing since, is not looked
/// up ([`RecentStacks::named_before`]).
fn load_codes<'a>(
    remote: &mut Remote,
    codes: &mut CodeCache,
    layout: &Layout,
    walks: &'a [Walking],
    named: impl Fn(&'a Walking) -> &'a RecentStacks,
    ids: &AddrMap<Option<CodeId>>,
    now: Instant,
) -> std::io::Result<()> {
    let mut missing: Vec<(usize, CodeId)> = Vec::new();
    for w in walks {
        let recent = named(w);
        for (i, f) in w.frames().enumerate() {
            if let Some(Some(id)) = ids.get(&f.code) {
                // The walk's own frames come first: `i` is a frame of it, or past its end.
                if recent.named_before(codes, &w.walk.frames, i, id) {
                    continue;
                }
                if codes.get(f.code, id).is_none() && !missing.iter().any(|(a, _)| *a == f.code) {
                    missing.push((f.code, *id));
                }
            }
        }
    }
    codes.load(remote, layout, &missing, now)
}

/// The attempt's answer: a broken walk of a thread that may have run followed torn links
/// (read it again); what this read found good is good as of the GIL read after it.
fn finish(
    threads: &mut [Known],
    parts: &mut Vec<Part>,
    bracket: &Bracket,
    bracketed: bool,
    quiet_failed: Vec<usize>,
) -> Attempt {
    let mut states = Vec::with_capacity(parts.len());
    let mut outcomes = Vec::with_capacity(parts.len());
    for part in parts.drain(..) {
        let k = &mut threads[part.i];
        let mut outcome = part.outcome;
        if matches!(outcome, Some(Outcome::Broken(_))) && bracket.ran.may_have_run(k.tstate) {
            outcome = Some(Outcome::Ran(Frames::default()));
        }
        // A stack kept on a sound read's word is good for this sample, not for a bet later.
        let good = bracketed && !part.vouched && matches!(outcome, Some(Outcome::Done(_)));
        k.proven_at = if good { bracket.after } else { None };
        states.push(part.state);
        outcomes.push(outcome.unwrap_or(Outcome::Again));
    }
    Attempt {
        head: bracket.head,
        states,
        gil_holder: bracket.gil_holder,
        last_holder: bracket.after.map(|g| g.last_holder),
        gil_after: bracket.after,
        quiet_failed,
        outcomes,
    }
}

/// Walks may need at most this many reads after the snapshot (one per generator frame or
/// older chunk on the way down, for every thread at once).
const MAX_ROUNDS: usize = 256;

/// 3.10 reads each frame not copied ahead in a round of its own: as many as py-spy's depth
/// limit (once per new stack; later samples copy the frames ahead).
fn max_rounds(layout: &Layout) -> usize {
    match layout.frames {
        FrameDesign::Chunks => MAX_ROUNDS,
        FrameDesign::Objects => 4096,
    }
}

fn broken(why: &str) -> Outcome {
    Outcome::Broken(why.to_owned())
}

#[cfg(test)]
mod tests;
