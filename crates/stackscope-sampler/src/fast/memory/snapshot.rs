//! One thread's part of a sample's read: what to ask for, and what came back.
//!
//! Per thread, in one system call with every other thread: its current-frame pointer (through
//! the `cframe` its thread state showed last time), a copy of its current data-stack chunk
//! (and of the frames outside it that the last sample needed), and its thread state. The
//! thread state must still name the cframe and chunk we read through; otherwise the thread
//! has moved since its last sample and is read again with the fresh words.
//!
//! Whether the copy is a stack the thread really had is decided by the GIL, in `attempt`: a
//! thread changes its frames only while it holds the GIL, so every thread but the GIL's
//! holders during the read was still while it was copied. A thread expected to hold the GIL
//! is copied several times, to be checked ([`holder`]).

use crate::fast::layout::{usize_at, word, FrameDesign, Layout};
use crate::fast::memory::extent::{Extra, Reads};
use crate::fast::memory::remote::{Batch, Slot};
use crate::fast::proof::holder::{self, Copies, Later};
use crate::fast::read::stack::Region;

/// The words of a thread state the reader uses.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub(crate) struct TsWords {
    pub next: usize,
    pub cframe: usize,
    pub thread_id: u64,
    pub native_thread_id: u64,
    pub chunk: usize,
    pub top: usize,
    pub limit: usize,
}

impl TsWords {
    /// From the first [`Layout::ts_read_len`] bytes of the thread state at `tstate`.
    pub(crate) fn parse(layout: &Layout, tstate: usize, bytes: &[u8]) -> Option<TsWords> {
        let chunked = layout.frames == FrameDesign::Chunks;
        let at = |offset: usize| {
            if chunked {
                usize_at(bytes, offset)
            } else {
                Some(0)
            }
        };
        Some(TsWords {
            next: usize_at(bytes, layout.ts_next)?,
            // 3.10 and 3.13+: no cframe; the current-frame pointer is read in the thread
            // state itself.
            cframe: if layout.current_frame_in_tstate {
                tstate
            } else {
                usize_at(bytes, layout.ts_cframe)?
            },
            thread_id: word(bytes, layout.ts_thread_id)?,
            // Filled in by the reader where the interpreter does not record it.
            native_thread_id: if layout.has_native_thread_id {
                word(bytes, layout.ts_native_thread_id)?
            } else {
                0
            },
            chunk: at(layout.ts_datastack_chunk)?,
            top: at(layout.ts_datastack_top)?,
            limit: at(layout.ts_datastack_limit)?,
        })
    }
}

/// Where one thread's ranges went in the batch.
pub(crate) struct Planned {
    guess: TsWords,
    current: Option<Slot>,
    chunk: Option<Slot>,
    extra: Vec<(Extra, Slot)>,
    /// The later copies, for a thread read with a check.
    later: Option<holder::Planned>,
    tstate: Slot,
    tstate_addr: usize,
}

/// Adds a thread's reads to `batch`, using `guess` (its thread state as last read) for the
/// addresses of its current-frame pointer and chunk, and `extra` for the ranges outside the
/// chunk its last walk needed. `check`: a seed for the gaps between the copies of a thread
/// read with a check. `still`: the thread is expected not to have moved (asleep at its last
/// reading, its Python state unchanged). How much of each is copied is decided in
/// [`extent`](crate::fast::memory::extent).
pub(crate) fn plan(
    batch: &mut Batch,
    layout: &Layout,
    tstate: usize,
    guess: TsWords,
    extra: &[Extra],
    check: Option<Copies<'_>>,
    still: bool,
) -> Planned {
    let has_frames = guess.cframe != 0;
    let reads = Reads::of(layout, &guess, extra, still, check.is_some());
    let current = has_frames.then(|| batch.add(reads.pointer, 8));
    let chunk =
        (has_frames && reads.chunk_len > 0).then(|| batch.add(reads.chunk, reads.chunk_len));
    let extra = reads
        .first_extra()
        .iter()
        .map(|&e| (e, batch.add(e.addr, e.len)))
        .collect();
    let later = match check {
        Some(copies) if has_frames => Some(holder::plan(batch, &reads, copies)),
        _ => None,
    };
    let tstate_addr = tstate;
    let tstate = batch.add(tstate, layout.ts_read_len);
    Planned {
        guess,
        current,
        chunk,
        extra,
        later,
        tstate,
        tstate_addr,
    }
}

/// A thread's read, checked.
#[derive(Debug)]
pub(crate) enum Checked {
    /// A stack to walk: from `current_frame` through `chunk` and `extra` (each with whether
    /// it is a chunk).
    Walkable {
        ts: TsWords,
        current_frame: usize,
        chunk: Region,
        extra: Vec<(Region, bool)>,
        /// The later readings of a thread read with a check.
        later: Option<Later>,
    },
    /// The guess was stale: read it again with these words.
    Again(TsWords),
    /// The thread state itself could not be read.
    Unreadable,
}

pub(crate) fn check(batch: &Batch, layout: &Layout, planned: &Planned) -> Checked {
    let Some(ts) = batch
        .get(planned.tstate)
        .and_then(|b| TsWords::parse(layout, planned.tstate_addr, b))
    else {
        return Checked::Unreadable;
    };
    let guess = planned.guess;
    let empty = || Region {
        addr: 0,
        bytes: Vec::new(),
    };
    // The thread state must still name the cframe and chunk we read through.
    if ts.cframe != guess.cframe || ts.chunk != guess.chunk {
        return Checked::Again(ts);
    }
    let Some(current_frame) = current_frame_of(batch, planned) else {
        return Checked::Again(ts);
    };
    if current_frame == 0 {
        // No Python running in this thread (not started yet, or only in C).
        return Checked::Walkable {
            ts,
            current_frame,
            chunk: empty(),
            extra: Vec::new(),
            later: planned.later.as_ref().map(|p| {
                let (start, mut later) = holder::collect(batch, layout, p, 0, &[]);
                later.agrees &= start == 0;
                later
            }),
        };
    }
    let chunk = match planned.chunk.map(|s| batch.copy(s)) {
        Some(Some(bytes)) => Region {
            addr: guess.chunk,
            bytes,
        },
        Some(None) => return Checked::Again(ts),
        // No chunk to copy (a thread whose only frame is a generator's, resumed from C):
        // its frames are read one by one.
        None => empty(),
    };
    // The current frame is in this chunk but past the copy: frames were pushed since the
    // guess. Copy again, further.
    let copied_end = chunk.addr + chunk.bytes.len();
    if chunk.addr != 0
        && current_frame >= chunk.addr
        && current_frame < ts.limit
        && current_frame + layout.fr_header_len > copied_end
    {
        return Checked::Again(ts);
    }
    let extra = extra_regions(batch, planned);
    let mut current_frame = current_frame;
    let later = planned.later.as_ref().map(|p| {
        let first: Vec<&Region> = std::iter::once(&chunk)
            .chain(extra.iter().map(|(r, _)| r))
            .collect();
        let (start, later) = holder::collect(batch, layout, p, current_frame, &first);
        current_frame = start;
        later
    });
    Checked::Walkable {
        ts,
        current_frame,
        chunk,
        extra,
        later,
    }
}

/// The thread's current frame as copied: 0 without a cframe (no Python running), `None`
/// when the word could not be read.
fn current_frame_of(batch: &Batch, planned: &Planned) -> Option<usize> {
    if planned.guess.cframe == 0 {
        return Some(0);
    }
    planned
        .current
        .and_then(|s| batch.get(s))
        .and_then(|b| usize_at(b, 0))
}

/// The ranges outside the chunk copied ahead, those that were read, with whether each is
/// a data-stack chunk rather than one frame.
fn extra_regions(batch: &Batch, planned: &Planned) -> Vec<(Region, bool)> {
    planned
        .extra
        .iter()
        .filter_map(|&(e, slot)| {
            let region = Region {
                addr: e.addr,
                bytes: batch.copy(slot)?,
            };
            Some((region, e.chunk))
        })
        .collect()
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::fast::layout::PY311;
    use crate::fast::memory::extent::SLACK;
    use crate::fast::memory::remote::Remote;

    /// A fake thread state and chunk in our own memory.
    struct Fake {
        ts: Vec<u8>,
        cframe: Box<[u64; 2]>,
        chunk: Vec<u8>,
    }

    impl Fake {
        fn new() -> Fake {
            let chunk = vec![0u8; 16384];
            let mut f = Fake {
                ts: vec![0u8; PY311.ts_read_len],
                cframe: Box::new([0, 0]),
                chunk,
            };
            let base = f.chunk.as_ptr() as usize;
            f.cframe[1] = (base + 64) as u64;
            let l = &PY311;
            let put = |ts: &mut Vec<u8>, at: usize, v: usize| {
                ts[at..at + 8].copy_from_slice(&(v as u64).to_le_bytes())
            };
            put(&mut f.ts, l.ts_cframe, f.cframe.as_ptr() as usize);
            put(&mut f.ts, l.ts_datastack_chunk, base);
            put(&mut f.ts, l.ts_datastack_top, base + 200);
            put(&mut f.ts, l.ts_datastack_limit, base + 16384);
            f
        }

        fn words(&self) -> TsWords {
            TsWords::parse(&PY311, self.ts.as_ptr() as usize, &self.ts).expect("words")
        }
    }

    #[test]
    fn a_still_thread_reads_consistent_and_a_stale_guess_asks_again() {
        let fake = Fake::new();
        let mut remote = Remote::new(std::process::id());
        let mut batch = Batch::default();
        let tstate = fake.ts.as_ptr() as usize;
        let planned = plan(&mut batch, &PY311, tstate, fake.words(), &[], None, false);
        batch.run(&mut remote).expect("run");
        match check(&batch, &PY311, &planned) {
            Checked::Walkable {
                current_frame,
                chunk,
                ..
            } => {
                assert_eq!(current_frame, fake.chunk.as_ptr() as usize + 64);
                assert_eq!(chunk.bytes.len(), 200 + SLACK);
            }
            other => panic!("expected consistent, got {other:?}"),
        }
        let mut stale = fake.words();
        stale.chunk += 4096;
        let mut batch = Batch::default();
        let planned = plan(&mut batch, &PY311, tstate, stale, &[], None, false);
        batch.run(&mut remote).expect("run");
        assert!(matches!(
            check(&batch, &PY311, &planned),
            Checked::Again(fresh) if fresh == fake.words()
        ));
    }
}
