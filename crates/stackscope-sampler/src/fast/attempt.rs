//! One try at reading a set of threads: the snapshot, the walks, the code objects, and for
//! each thread its frames, or why it must be read again.
//!
//! One system call copies every thread's frames, framed by two reads of the GIL ([`gil`]):
//! the threads that cannot have run in between have their stacks as copied. A thread that may
//! have run (the GIL's holder) is kept too if it was read with a check and passes it: its
//! current frame the same before and after the copy, every frame the walk used the same in a
//! second copy (code, caller, and instruction but for the innermost frame's, which moves as
//! it runs), and the walk reaching its first frame. Otherwise it is handed back as
//! [`Outcome::Ran`], to be read again (with a check), and at last stopped.

use stackscope_event::Frames;

use super::addrmap::AddrMap;
use super::code::{CodeCache, CodeId};
use super::gil::{GilWords, Ran};
use super::holder::{self, Later};
use super::layout::{common, usize_at, FrameDesign, GilHolder, Layout};
use super::quiet;
use super::recent;
use super::remote::{Batch, Remote, Slot};
use super::snapshot::{self, Checked, TsWords};
use super::stack::{self, Need, RawFrame, Walk};
use super::still;
use super::thread_model::{Known, Outcome, Proof, StillThreads};

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

/// Where the process-wide words are.
pub(crate) struct Globals {
    pub head_ptr: usize,
    /// The `_gil_runtime_state`.
    pub gil: usize,
    /// 3.11's `tstate_current` (0 for 3.12, whose holder comes from the GIL itself).
    pub tstate_current: usize,
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
}

/// What an attempt reads and how.
pub(crate) struct Request<'a> {
    pub layout: &'a Layout,
    pub globals: &'a Globals,
    /// Read the thread list head and the GIL holder too.
    pub with_list: bool,
    /// The threads asked for cannot run (we stopped them): no GIL bracketing needed.
    pub stopped: bool,
    /// Which threads to read with a check: those likely to hold the GIL during the read.
    pub check: Check<'a>,
    /// Whether a still thread is read for its proof alone ([`still`]).
    pub still_reads: bool,
    /// Whether a still thread may be taken as still on the GIL's word alone ([`quiet`]).
    pub quiet: bool,
    /// Threads (by their place in the list) whose switch rings show they have not run since
    /// their proofs were last good: only their thread states are read ([`still::plan`]).
    pub words_only: &'a [usize],
}

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Check<'a> {
    /// These thread states.
    Threads(&'a [usize]),
    All,
}

/// Reads the threads `threads[i]` for each i in `which`.
pub(crate) fn attempt(
    remote: &mut Remote,
    codes: &mut CodeCache,
    threads: &mut [Known],
    still: &mut StillThreads,
    which: &[usize],
    req: &Request<'_>,
    stats: &mut WalkStats,
) -> std::io::Result<Attempt> {
    let layout = req.layout;
    let bracket = !req.stopped;
    let mut batch = remote.batch();
    // First the GIL, then everything else, then the GIL again: the kernel copies the ranges
    // in order.
    let gil_before = bracket.then(|| batch.add(req.globals.gil, common::GIL_LEN));
    let list_slots = req.with_list.then(|| {
        let head = batch.add(req.globals.head_ptr, 8);
        let holder = match layout.gil_holder {
            GilHolder::TstateCurrent => Some(batch.add(req.globals.tstate_current, 8)),
            GilHolder::LastHolderWhileLocked => Some(batch.add(req.globals.gil, common::GIL_LEN)),
        };
        (head, holder)
    });
    // Gaps between the copies of checked threads: random, not repeatable.
    let mut seed = std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .map_or(0x9E37_79B9, |d| d.as_nanos() as u64);
    let plans: Vec<Plan> = which
        .iter()
        .map(|&i| {
            let k = &threads[i];
            let is_still = still.is_still(i);
            let with_check = !req.stopped
                && match req.check {
                    Check::All => true,
                    Check::Threads(t) => t.contains(&k.tstate),
                };
            match &k.proof {
                Some(_) if req.quiet && !with_check && bracket && quiet::possible(k, is_still) => {
                    Plan::Quiet
                }
                Some(proof) if is_still && !with_check => Plan::Still(still::plan(
                    &mut batch,
                    layout,
                    k.tstate,
                    proof,
                    req.words_only.contains(&i),
                )),
                _ => {
                    let check = with_check.then_some(&mut seed);
                    let full = snapshot::plan(
                        &mut batch, layout, k.tstate, k.ts, &k.extra, check, is_still,
                    );
                    Plan::Full(full)
                }
            }
        })
        .collect();
    // The code objects the threads ran last time, most likely still on their stacks: their
    // identity comes with the snapshot, so a steady sample needs no second call. (A still
    // thread's stack comes with its names: a code object on a stack cannot be freed.)
    let (id_start, id_end) = layout.code_identity_range();
    let mut code_slots: AddrMap<Slot> = AddrMap::default();
    for (&i, plan) in which.iter().zip(&plans) {
        if matches!(plan, Plan::Still(_) | Plan::Quiet) {
            continue;
        }
        for &code in &threads[i].codes {
            code_slots
                .entry(code)
                .or_insert_with(|| batch.add(code + id_start, id_end - id_start));
        }
    }
    let mut plans = plans;
    let still_plans: Vec<&mut still::Planned> = plans
        .iter_mut()
        .filter_map(|p| match p {
            Plan::Still(s) => Some(s),
            Plan::Full(_) | Plan::Quiet => None,
        })
        .collect();
    still::add_tstates(&mut batch, still_plans);
    let gil_after = bracket.then(|| batch.add(req.globals.gil, common::GIL_LEN));
    batch.run(remote)?;

    let gil_words = |batch: &Batch, slot: Option<Slot>| {
        slot.and_then(|s| batch.get(s)).and_then(GilWords::parse)
    };
    let before = gil_words(&batch, gil_before);
    let after = gil_words(&batch, gil_after);
    let ran = if bracket {
        Ran::between(before, after)
    } else {
        Ran::NONE
    };
    let head = list_slots.and_then(|(h, _)| usize_at(batch.get(h)?, 0));
    let gil_holder = list_slots
        .and_then(|(_, g)| g)
        .and_then(|g| batch.get(g))
        .and_then(|b| match layout.gil_holder {
            GilHolder::TstateCurrent => usize_at(b, 0),
            GilHolder::LastHolderWhileLocked => {
                GilWords::parse(b).map(|g| if g.locked == 1 { g.last_holder } else { 0 })
            }
        });
    let mut ids: AddrMap<Option<CodeId>> = code_slots
        .iter()
        .map(|(&addr, &slot)| (addr, batch.get(slot).and_then(|b| CodeId::parse(layout, b))))
        .collect();

    let mut quiet_failed = Vec::new();
    let mut states = Vec::with_capacity(which.len());
    let mut outcomes: Vec<Option<Outcome>> = Vec::with_capacity(which.len());
    let mut walks: Vec<Walking> = Vec::new();
    for (pos, (&i, plan)) in which.iter().zip(&plans).enumerate() {
        let planned = match plan {
            Plan::Full(planned) => planned,
            Plan::Quiet => {
                let k = &threads[i];
                // Its thread state as known (for the list check): unchanged if it did not run.
                states.push(Some(k.ts));
                match k.proof.as_ref().filter(|_| quiet::holds(k, after)) {
                    Some(proof) => {
                        stats.quiet += 1;
                        outcomes.push(Some(Outcome::Done(proof.frames.clone())));
                    }
                    None => {
                        quiet_failed.push(pos);
                        outcomes.push(Some(Outcome::Again));
                    }
                }
                continue;
            }
            Plan::Still(planned) => {
                let still::Settled { ts, outcome, moved } =
                    still::settle(&batch, layout, planned, &mut threads[i], &ran);
                if moved {
                    still.moved(i);
                }
                stats.unchanged += u64::from(ts.is_some() && matches!(outcome, Outcome::Done(_)));
                states.push(ts);
                outcomes.push(Some(outcome));
                continue;
            }
        };
        match snapshot::check(&batch, layout, planned) {
            Checked::Walkable {
                ts,
                current_frame,
                chunk,
                extra,
                later,
            } => {
                states.push(Some(ts));
                threads[i].refresh(ts);
                let mut walk = Walk::new(current_frame, chunk);
                for (region, is_chunk) in extra {
                    walk.add_region(region, is_chunk);
                }
                walks.push(Walking {
                    pos,
                    walk,
                    later,
                    ts,
                    start: current_frame,
                });
                outcomes.push(None);
            }
            Checked::Again(fresh) => {
                states.push(Some(fresh));
                threads[i].refresh(fresh);
                outcomes.push(Some(Outcome::Again));
            }
            Checked::Unreadable => {
                states.push(None);
                outcomes.push(Some(Outcome::Gone));
            }
        }
    }
    // The batch stays until the checks are done: the later copies are read in it.

    // Walk every thread as far as the copies go, then read what the walks still need,
    // all threads together, until every walk is complete.
    let mut read_late = vec![false; which.len()];
    let mut pending: Vec<usize> = (0..walks.len()).collect();
    let mut rounds = 0;
    while !pending.is_empty() {
        let mut needs: Vec<(usize, Need)> = Vec::new();
        for &w in &pending {
            let Walking { pos, walk, .. } = &mut walks[w];
            match walk.advance(layout) {
                Ok(None) => {}
                Ok(Some(need)) if rounds < max_rounds(layout) => needs.push((w, need)),
                Ok(Some(_)) => outcomes[*pos] = Some(broken("too many frames outside")),
                Err(e) => outcomes[*pos] = Some(broken(&format!("{e:?}"))),
            }
        }
        if needs.is_empty() {
            break;
        }
        rounds += 1;
        stats.rounds += 1;
        let mut round = Batch::default();
        let slots: Vec<(Slot, Option<Slot>)> = needs
            .iter()
            .map(|(_, need)| {
                let frame = round.add(need.frame, layout.fr_header_len);
                let chunk = need.chunk.map(|c| round.add(c, common::MIN_CHUNK_BYTES));
                (frame, chunk)
            })
            .collect();
        round.run(remote)?;
        pending.clear();
        for ((w, need), (frame, chunk)) in needs.into_iter().zip(slots) {
            let Walking { pos, walk, .. } = &mut walks[w];
            read_late[*pos] = true;
            walk.supply(
                need,
                round.get(frame).map(<[u8]>::to_vec),
                chunk.and_then(|c| round.get(c)).map(<[u8]>::to_vec),
            );
            if walk.can_continue(need, layout) {
                pending.push(w);
            } else {
                outcomes[*pos] = Some(broken("cannot read a frame"));
            }
        }
    }

    // One more call if needed: the identity of code objects not read with the snapshot, and
    // the GIL once more when frames were read after the snapshot, since those reads are
    // only good for threads that did not run until then either.
    let mut late = Batch::default();
    let mut late_codes: AddrMap<Slot> = AddrMap::default();
    for Walking { pos, walk, .. } in &walks {
        if outcomes[*pos].is_some() {
            continue;
        }
        for f in &walk.frames {
            if !ids.contains_key(&f.code) {
                late_codes
                    .entry(f.code)
                    .or_insert_with(|| late.add(f.code + id_start, id_end - id_start));
            }
        }
    }
    let any_late = read_late.iter().any(|&l| l);
    let gil_late = (bracket && any_late).then(|| late.add(req.globals.gil, common::GIL_LEN));
    if !late.is_empty() {
        late.run(remote)?;
    }
    let ran_late = if bracket && any_late {
        Ran::between(before, gil_words(&late, gil_late))
    } else {
        Ran::NONE
    };
    for (&addr, &slot) in &late_codes {
        ids.insert(addr, late.get(slot).and_then(|b| CodeId::parse(layout, b)));
    }
    drop(late);
    // Only code objects on a stack read now are loaded: one checked ahead that is no longer
    // on any may have been freed, and its bytes are anything.
    let mut missing: Vec<(usize, CodeId)> = Vec::new();
    for Walking { walk, .. } in &walks {
        for f in &walk.frames {
            if let Some(Some(id)) = ids.get(&f.code) {
                if codes.get(f.code, id).is_none() && !missing.iter().any(|(a, _)| *a == f.code) {
                    missing.push((f.code, *id));
                }
            }
        }
    }
    codes.load(remote, layout, &missing)?;

    for w in &walks {
        let (pos, walk) = (&w.pos, &w.walk);
        if outcomes[*pos].is_some() {
            continue;
        }
        let known = &mut threads[which[*pos]];
        known.proof = None;
        let checked_ok =
            passes_check(layout, w, &batch) && instructions_in_code(layout, &ids, &walk.frames);
        let may_have_run = (ran.may_have_run(known.tstate) && !checked_ok)
            || (read_late[*pos] && ran_late.may_have_run(known.tstate));
        let outcome = match recent::name(layout, codes, &ids, &walk.frames, &mut known.recent) {
            Ok(frames) if may_have_run => Outcome::Ran(frames),
            Ok(frames) if req.stopped && !walk.ends_at_first_frame(layout) => {
                Outcome::Midway(frames)
            }
            Ok(frames) => Outcome::Done(frames),
            // A thread that ran can read as anything: read it again, stopped.
            Err(_) if may_have_run => Outcome::Ran(Frames::default()),
            Err(why) => Outcome::Broken(why),
        };
        if matches!(
            outcome,
            Outcome::Done(_) | Outcome::Ran(_) | Outcome::Midway(_)
        ) {
            let mut extra = walk.outside_ranges(layout);
            if layout.frames == FrameDesign::Objects {
                // 3.10: a frame that came and went (a leaf call's, made again at the same
                // address from its code object's spare frame) is likely there next time:
                // keep a few of the last ranges this walk did not use.
                let keep = (extra.len() + RECENT_FRAMES).min(stack::max_extra(layout));
                for e in &known.extra {
                    if extra.len() >= keep {
                        break;
                    }
                    if !extra.contains(e) {
                        extra.push(*e);
                    }
                }
                extra = stack::coalesce(extra);
            }
            known.extra = extra;
            known.sig = signature(&walk.frames) ^ walk.chunk_digest(known.ts.top);
            // This walk's code objects, then a few of the earlier walks' that it did not
            // use: a leaf call that comes and goes between samples keeps its identity read
            // with the snapshot instead of costing a call of its own after it.
            let earlier = std::mem::take(&mut known.codes);
            for f in &walk.frames {
                if !known.codes.contains(&f.code) && known.codes.len() < MAX_CODES_AHEAD {
                    known.codes.push(f.code);
                }
            }
            let keep = (known.codes.len() + EARLIER_CODES_AHEAD).min(MAX_CODES_AHEAD);
            for code in earlier {
                if known.codes.len() >= keep {
                    break;
                }
                if !known.codes.contains(&code) {
                    known.codes.push(code);
                }
            }
        }
        if let Outcome::Done(frames) = &outcome {
            // A stack read whole from one copy is what later still reads are checked against.
            let header = match w.start {
                0 => Some(Vec::new()),
                start => walk.header(start, layout).map(<[u8]>::to_vec),
            };
            if let (true, None, Some(header)) = (req.still_reads, &w.later, header) {
                known.proof = Some(Proof {
                    ts: w.ts,
                    current_frame: w.start,
                    header,
                    frames: frames.clone(),
                    expires: std::time::Instant::now() + still::lifetime(known.tstate),
                });
            }
        }
        outcomes[*pos] = Some(outcome);
    }
    // A walk that failed in a thread that may have run followed torn links: read it again.
    for (pos, &i) in which.iter().enumerate() {
        if let Some(Outcome::Broken(_)) = outcomes[pos] {
            if ran.may_have_run(threads[i].tstate) {
                outcomes[pos] = Some(Outcome::Ran(Frames::default()));
            }
        }
    }
    // What this read found good is good as of the GIL read after it.
    for (pos, &i) in which.iter().enumerate() {
        let good = bracket && matches!(outcomes[pos], Some(Outcome::Done(_)));
        threads[i].proven_at = if good { after } else { None };
    }
    remote.recycle(batch);
    Ok(Attempt {
        head,
        states,
        gil_holder,
        last_holder: after.map(|g| g.last_holder),
        gil_after: after,
        quiet_failed,
        outcomes: outcomes
            .into_iter()
            .map(|o| o.unwrap_or(Outcome::Again))
            .collect(),
    })
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

/// A thread's walk in progress.
struct Walking {
    /// Its position in the threads asked for.
    pos: usize,
    walk: Walk,
    /// The later readings, for a thread read with a check.
    later: Option<Later>,
    /// Its thread state's words, as read.
    ts: TsWords,
    /// Where the walk started: the current-frame pointer as read.
    start: usize,
}

/// One thread's part of an attempt.
enum Plan {
    /// Its frames copied, to be walked.
    Full(snapshot::Planned),
    /// A still thread: only what proves it did not move.
    Still(still::Planned),
    /// A still thread taken as still if the GIL shows no switch: nothing read.
    Quiet,
}

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
        let start = f.code + layout.co_code_adaptive;
        let end = start.saturating_add(2 * id.units() as usize);
        f.prev_instr + 2 >= start && f.prev_instr < end
    })
}

fn broken(why: &str) -> Outcome {
    Outcome::Broken(why.to_owned())
}
