//! A still thread, read for what proves it did not move, not for its frames.
//!
//! Most threads of a training process sleep for the whole recording (a pool's idle workers, a
//! watchdog). For a thread that slept at its last reading and is not the GIL's expected
//! holder ([`crate::fast::read::thread_model::StillThreads`]), the sample copies, in the same system call as
//! every other thread's reads, only
//!
//! - its thread state (as for every thread: the list check needs its `next`), whose
//!   current-frame holder, data-stack chunk and data-stack top must be what they were;
//! - its current-frame pointer (3.11 and 3.12: in the `cframe` on its C stack; 3.10 and 3.13:
//!   in the thread state, so no range of its own), which must name the same frame;
//! - that frame's header (code object, caller, instruction, owner, and the rest of the
//!   header: every byte must be the same),
//!
//! about 400 bytes instead of the chunk's used part (one to several KiB), no walk, no code
//! object checks, and its stack as last read ([`Proof`]). The kernel's cost of a read is
//! mostly per range and page (it pins each page of each range), not per byte: the thread
//! states of still threads, allocated one after another by the thread that started them,
//! are read as few ranges ([`add_tstates`]), so that a still thread of 3.10 or 3.13 costs
//! about one range of its own (its frame's header), and one of 3.11 or 3.12 two (and the
//! `cframe` on its C stack).
//!
//! A thread that woke and came back
//! to a frame at the same address runs other code or another instruction there, or another
//! caller, or moved the data-stack top: it is read in full. What this cannot see is a change
//! under an innermost frame that is the same in every header byte and at the same data-stack
//! top (its callers returned and others of exactly the same frame sizes called the same
//! function from the same place): a thread in `handle_a() -> event.wait()` that came back
//! to wait in `handle_b()`, where both have frames of one size. So a proof stands for
//! [`PROOF_FOR`] at most (and a little more, different for each thread, so that the full
//! reads do not all fall in one sample): then the thread is read in full once, and its stack
//! is right again (docs/performance.md).

use crate::fast::layout::{usize_at, Layout};
use crate::fast::memory::extent::{self, Merged, Span};
use crate::fast::memory::remote::{Batch, Slot};
use crate::fast::memory::snapshot::TsWords;
use crate::fast::proof::gil::Ran;
use crate::fast::read::thread_model::{Known, Outcome, Proof};
use std::time::Duration;

/// How long a proof stands before its thread is read in full again: the bound on how long a
/// change that no proof can see (above) shows the thread's earlier stack.
pub(crate) const PROOF_FOR: Duration = Duration::from_secs(4);
/// Proofs of threads read in the same sample expire up to this much apart.
const PROOF_SPREAD_MS: u64 = 2000;

/// How long a proof of the thread state at `tstate` stands: [`PROOF_FOR`], and up to
/// [`PROOF_SPREAD_MS`] more, fixed for the thread.
pub(crate) fn lifetime(tstate: usize) -> Duration {
    let mixed = (tstate as u64 >> 4).wrapping_mul(0x9E37_79B9_7F4A_7C15);
    PROOF_FOR + Duration::from_millis((mixed >> 40) % PROOF_SPREAD_MS)
}

/// Where a still thread's reads went in the batch.
pub(crate) struct Planned {
    /// The range its thread state is in, and where in that range (see [`add_tstates`]).
    tstate: Option<(Slot, usize)>,
    tstate_addr: usize,
    tstate_len: usize,
    pointer: Pointer,
    header: Option<Slot>,
}

enum Pointer {
    /// A range of its own (on the thread's C stack).
    Read(Slot),
    /// At this offset in the thread state's copy.
    InTstate(usize),
    /// No current-frame holder at all (a thread that has not started).
    None,
    /// Not read: the thread did not run since its proof (nor its header read).
    Known,
}

/// Adds a still thread's reads to `batch`: the current-frame pointer and the header of the
/// frame it named last time; its thread state comes with the others', after them
/// ([`add_tstates`]). The order does not matter here: a thread that runs meanwhile is told by
/// the GIL read around the whole batch, as for every thread.
///
/// `words_only`: the thread is known not to have run since its proof was last good (its
/// switch ring, [`crate::fast::proof::switches`]); only its thread state is read, for the list check and
/// its words.
pub(crate) fn plan(
    batch: &mut Batch,
    layout: &Layout,
    tstate: usize,
    proof: &Proof,
    words_only: bool,
) -> Planned {
    let cframe = proof.ts.cframe;
    let pointer_offset = layout.cframe_current_frame;
    let pointer = if words_only {
        Pointer::Known
    } else if cframe == 0 {
        Pointer::None
    } else if cframe == tstate {
        Pointer::InTstate(pointer_offset)
    } else {
        Pointer::Read(batch.add(cframe + pointer_offset, 8))
    };
    let header = (proof.current_frame != 0 && !words_only)
        .then(|| batch.add(proof.current_frame, layout.fr_header_len));
    let tstate_len = match pointer {
        Pointer::InTstate(at) => layout.ts_read_len.max(at + 8),
        _ => layout.ts_read_len,
    };
    Planned {
        tstate: None,
        tstate_addr: tstate,
        tstate_len,
        pointer,
        header,
    }
}

/// Adds the thread states of `still` threads to `batch`: those near each other as one range
/// ([`extent::TSTATES`]: a range costs about as much as copying 700 bytes).
pub(crate) fn add_tstates(batch: &mut Batch, mut still: Vec<&mut Planned>) {
    still.sort_by_key(|p| p.tstate_addr);
    let spans = still.iter().map(|p| Span {
        addr: p.tstate_addr,
        len: p.tstate_len,
    });
    let runs: Vec<Merged> = extent::merge_near(spans, extent::TSTATES).collect();
    let mut rest = still.as_mut_slice();
    for run in runs {
        let slot = batch.add(run.span.addr, run.span.len);
        let n = run.parts.min(rest.len());
        let (these, after) = std::mem::take(&mut rest).split_at_mut(n);
        for p in these {
            p.tstate = Some((slot, p.tstate_addr - run.span.addr));
        }
        rest = after;
    }
}

/// What a still thread's reads say.
#[derive(Debug, PartialEq, Eq)]
pub(crate) enum Verdict {
    /// Where it was: its stack is the one in the proof.
    Unchanged(TsWords),
    /// It moved (or this could not be told): read it in full, with these words.
    Moved(TsWords),
    /// The thread state itself could not be read.
    Unreadable,
}

pub(crate) fn check(batch: &Batch, layout: &Layout, planned: &Planned, proof: &Proof) -> Verdict {
    let Some(ts_bytes) = planned.tstate.and_then(|(slot, at)| {
        batch
            .get(slot)
            .and_then(|b| b.get(at..at + planned.tstate_len))
    }) else {
        return Verdict::Unreadable;
    };
    let Some(ts) = TsWords::parse(layout, planned.tstate_addr, ts_bytes) else {
        return Verdict::Unreadable;
    };
    let last = proof.ts;
    if ts.cframe != last.cframe
        || ts.chunk != last.chunk
        || ts.top != last.top
        || ts.thread_id != last.thread_id
    {
        return Verdict::Moved(ts);
    }
    let pointer = match planned.pointer {
        Pointer::Read(slot) => batch.get(slot).and_then(|b| usize_at(b, 0)),
        Pointer::InTstate(at) => usize_at(ts_bytes, at),
        Pointer::None => Some(0),
        Pointer::Known => Some(proof.current_frame),
    };
    if pointer != Some(proof.current_frame) {
        return Verdict::Moved(ts);
    }
    let same_header = match (planned.header, &planned.pointer) {
        (_, Pointer::Known) => true,
        (Some(slot), _) => batch.get(slot) == Some(&proof.header[..]),
        (None, _) => proof.header.is_empty(),
    };
    if !same_header {
        return Verdict::Moved(ts);
    }
    Verdict::Unchanged(ts)
}

/// A still thread's read, filed.
pub(crate) struct Settled {
    /// Its thread state's words as read (None: unreadable).
    pub ts: Option<TsWords>,
    /// How its try ended.
    pub outcome: Outcome,
    /// It moved, or could not be read: no longer still this sample (read in full next).
    pub moved: bool,
}

/// Files a still thread's read. Unchanged, its stack is the proof's (read again, like any
/// thread's, if it may have run during the read); moved or unreadable, its proof is dropped
/// and it is read in full next.
pub(crate) fn settle(
    batch: &Batch,
    layout: &Layout,
    planned: &Planned,
    k: &mut Known,
    ran: &Ran,
) -> Settled {
    let Some(proof) = k.proof.as_ref() else {
        return Settled {
            ts: None,
            outcome: Outcome::Again,
            moved: false,
        };
    };
    let verdict = check(batch, layout, planned, proof);
    match verdict {
        Verdict::Unchanged(ts) => {
            let frames = proof.frames.clone();
            k.refresh(ts);
            let outcome = if ran.may_have_run(k.tstate) {
                Outcome::Ran(frames)
            } else {
                Outcome::Done(frames)
            };
            Settled {
                ts: Some(ts),
                outcome,
                moved: false,
            }
        }
        Verdict::Moved(ts) => {
            k.refresh(ts);
            k.proof = None;
            Settled {
                ts: Some(ts),
                outcome: Outcome::Again,
                moved: true,
            }
        }
        Verdict::Unreadable => {
            k.proof = None;
            Settled {
                ts: None,
                outcome: Outcome::Gone,
                moved: true,
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::fast::layout::{PY310, PY311};
    use crate::fast::memory::remote::Remote;
    use std::time::Instant;

    fn put(mem: &mut [u8], at: usize, v: usize) {
        mem[at..at + 8].copy_from_slice(&(v as u64).to_le_bytes());
    }

    /// A 3.11 thread in our own memory: thread state, cframe (its C stack) and a chunk with
    /// one frame.
    struct Fake311 {
        ts: Vec<u8>,
        cframe: Box<[u64; 2]>,
        chunk: Vec<u8>,
    }

    const FRAME_AT: usize = 64;

    impl Fake311 {
        fn new() -> Fake311 {
            let l = &PY311;
            let mut f = Fake311 {
                ts: vec![0u8; l.ts_read_len],
                cframe: Box::new([0, 0]),
                chunk: vec![0u8; 4096],
            };
            let base = f.chunk.as_ptr() as usize;
            f.cframe[l.cframe_current_frame / 8] = (base + FRAME_AT) as u64;
            put(&mut f.ts, l.ts_cframe, f.cframe.as_ptr() as usize);
            put(&mut f.ts, l.ts_thread_id, 7);
            put(&mut f.ts, l.ts_datastack_chunk, base);
            put(&mut f.ts, l.ts_datastack_top, base + 200);
            put(&mut f.ts, l.ts_datastack_limit, base + 4096);
            f.set_frame(0xc000, 0xc0f0);
            f
        }

        fn set_frame(&mut self, code: usize, instr: usize) {
            let l = &PY311;
            put(&mut self.chunk, FRAME_AT + l.fr_code, code);
            put(&mut self.chunk, FRAME_AT + l.fr_prev_instr, instr);
        }

        fn tstate(&self) -> usize {
            self.ts.as_ptr() as usize
        }

        fn words(&self) -> TsWords {
            TsWords::parse(&PY311, self.tstate(), &self.ts).expect("words")
        }

        /// What a full read of it now would record.
        fn proof(&self) -> Proof {
            let l = &PY311;
            Proof {
                ts: self.words(),
                current_frame: self.chunk.as_ptr() as usize + FRAME_AT,
                header: self.chunk[FRAME_AT..FRAME_AT + l.fr_header_len].to_vec(),
                frames: Vec::new().into(),
                expires: Instant::now() + PROOF_FOR,
            }
        }
    }

    fn read(layout: &Layout, tstate: usize, proof: &Proof) -> (Verdict, usize) {
        let mut batch = Batch::default();
        let mut planned = plan(&mut batch, layout, tstate, proof, false);
        add_tstates(&mut batch, vec![&mut planned]);
        let mut remote = Remote::new(std::process::id());
        batch.run(&mut remote).expect("our own memory");
        (
            check(&batch, layout, &planned, proof),
            remote.bytes as usize,
        )
    }

    #[test]
    fn a_thread_that_did_not_move_reads_unchanged_from_a_few_hundred_bytes() {
        let fake = Fake311::new();
        let proof = fake.proof();
        let (verdict, bytes) = read(&PY311, fake.tstate(), &proof);
        assert_eq!(verdict, Verdict::Unchanged(fake.words()));
        assert_eq!(bytes, 8 + PY311.fr_header_len + PY311.ts_read_len);
    }

    /// Woke, returned, and called again: the frame at the same address now runs other code,
    /// or the same code at another instruction, or the data stack grew or shrank.
    #[test]
    fn any_change_of_the_innermost_frame_or_the_stack_top_is_a_move() {
        let mut fake = Fake311::new();
        let proof = fake.proof();
        fake.set_frame(0xd000, 0xc0f0);
        assert!(matches!(
            read(&PY311, fake.tstate(), &proof).0,
            Verdict::Moved(_)
        ));
        fake.set_frame(0xc000, 0xc0f2);
        assert!(matches!(
            read(&PY311, fake.tstate(), &proof).0,
            Verdict::Moved(_)
        ));
        fake.set_frame(0xc000, 0xc0f0);
        assert!(matches!(
            read(&PY311, fake.tstate(), &proof).0,
            Verdict::Unchanged(_)
        ));
        // A call pushed a frame: the pointer names it.
        let base = fake.chunk.as_ptr() as usize;
        fake.cframe[PY311.cframe_current_frame / 8] = (base + 400) as u64;
        assert!(matches!(
            read(&PY311, fake.tstate(), &proof).0,
            Verdict::Moved(_)
        ));
        fake.cframe[PY311.cframe_current_frame / 8] = (base + FRAME_AT) as u64;
        put(&mut fake.ts, PY311.ts_datastack_top, base + 264);
        match read(&PY311, fake.tstate(), &proof).0 {
            Verdict::Moved(ts) => assert_eq!(ts.top, base + 264),
            other => panic!("expected a move, got {other:?}"),
        }
    }

    /// 3.10 keeps the current frame in the thread state: two ranges, not three.
    #[test]
    fn a_pointer_in_the_thread_state_needs_no_range_of_its_own() {
        let l = &PY310;
        let mut frame = vec![0u8; l.fr_header_len];
        put(&mut frame, l.fr_code, 0xc000);
        let mut ts = vec![0u8; l.ts_read_len];
        put(&mut ts, l.ts_thread_id, 7);
        put(&mut ts, l.cframe_current_frame, frame.as_ptr() as usize);
        let tstate = ts.as_ptr() as usize;
        let words = TsWords::parse(l, tstate, &ts).expect("words");
        let proof = Proof {
            ts: words,
            current_frame: frame.as_ptr() as usize,
            header: frame.clone(),
            frames: Vec::new().into(),
            expires: Instant::now() + PROOF_FOR,
        };
        let (verdict, bytes) = read(l, tstate, &proof);
        assert_eq!(verdict, Verdict::Unchanged(words));
        assert_eq!(bytes, l.fr_header_len + l.ts_read_len);
        // f_lasti moved.
        frame[l.fr_prev_instr] ^= 1;
        assert!(matches!(read(l, tstate, &proof).0, Verdict::Moved(_)));
    }

    /// A proof stands for [`PROOF_FOR`] and up to half as long again, fixed per thread and
    /// spread across threads, and not past its end.
    #[test]
    fn a_proof_stands_for_a_while_and_a_little_more_spread_across_threads() {
        let lifetimes: Vec<Duration> = (0..64).map(|t| lifetime(0x7f00_0000 + t * 1296)).collect();
        assert!(lifetimes
            .iter()
            .all(|&d| d >= PROOF_FOR && d < PROOF_FOR + Duration::from_millis(PROOF_SPREAD_MS)));
        assert_eq!(lifetime(0x7f00_0000), lifetimes[0]);
        let distinct: std::collections::HashSet<Duration> = lifetimes.iter().copied().collect();
        assert!(distinct.len() > 32, "{lifetimes:?}");
        let taken = Instant::now();
        let mut proof = Fake311::new().proof();
        proof.expires = taken + lifetimes[0];
        assert!(proof.stands(taken));
        assert!(proof.stands(taken + PROOF_FOR - Duration::from_millis(1)));
        assert!(!proof.stands(taken + lifetimes[0]));
    }

    /// Thread states close together are one range; one far away another; each thread reads
    /// its own words from its range.
    #[test]
    fn thread_states_close_together_are_read_as_one_range() {
        let l = &PY310;
        let stride = l.ts_read_len + 200;
        let mut mem = vec![0u8; 16384];
        let base = mem.as_ptr() as usize;
        for t in 0..3 {
            put(&mut mem, t * stride + l.ts_thread_id, 100 + t);
        }
        let mut tstates: Vec<usize> = (0..3).map(|t| base + t * stride).collect();
        tstates.push(base + 8192);
        let proofs: Vec<Proof> = tstates
            .iter()
            .map(|&a| {
                // SAFETY: `a` is the start of `ts_read_len` bytes of `mem`, alive.
                let bytes = unsafe { std::slice::from_raw_parts(a as *const u8, l.ts_read_len) };
                Proof {
                    ts: TsWords::parse(l, a, bytes).expect("words"),
                    current_frame: 0,
                    header: Vec::new(),
                    frames: Vec::new().into(),
                    expires: Instant::now() + PROOF_FOR,
                }
            })
            .collect();
        let mut batch = Batch::default();
        // Asked for out of order: the far one first.
        let mut planned: Vec<Planned> = tstates
            .iter()
            .zip(&proofs)
            .rev()
            .map(|(&t, p)| plan(&mut batch, l, t, p, false))
            .collect();
        planned.reverse();
        add_tstates(&mut batch, planned.iter_mut().collect());
        let mut remote = Remote::new(std::process::id());
        batch.run(&mut remote).expect("our own memory");
        assert_eq!(remote.syscalls, 1);
        assert_eq!(
            remote.bytes as usize,
            2 * stride + l.ts_read_len + l.ts_read_len,
            "two ranges: three thread states with their gaps, and the far one"
        );
        for ((p, proof), t) in planned.iter().zip(&proofs).zip(0..) {
            match check(&batch, l, p, proof) {
                Verdict::Unchanged(ts) if t < 3 => assert_eq!(ts.thread_id, 100 + t as u64),
                Verdict::Unchanged(ts) => assert_eq!(ts.thread_id, 0),
                other => panic!("thread {t}: {other:?}"),
            }
        }
    }
}
