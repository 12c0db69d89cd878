//! Reading a thread that may be running Python while we read it (the GIL's holder) without
//! stopping it, and telling whether the copy is a stack it had.
//!
//! The thread's current-frame pointer and its frames are copied [`COPIES`] times in the same
//! system call, with reads of random length in between. A walk counts only if
//!
//! - it starts from a frame that stayed on the stack through all the copies: at each later
//!   reading of the pointer, that frame is the current one or the caller of the current one
//!   (a call was made since); or, when the first frame read as current had returned by the
//!   second reading, its caller, if that stays too;
//! - every frame it went through reads the same in every copy: code, caller, and instruction
//!   (but for the innermost frame's, which moves as it runs);
//! - it reaches the thread's first frame.
//!
//! A running thread passes this most of the time (its frames below the innermost do not
//! change while it runs above them). The random gaps matter: a thread looping over the same
//! calls passes through the same short-lived memory states (a caller already at its next call
//! while the callee's slot still holds the previous callee) at a fixed period, and copies a
//! fixed distance apart could all catch the same one. A thread that fails is read again, and
//! stopped if it keeps failing.

use crate::fast::layout::{usize_at, Layout};
use crate::fast::memory::remote::{Batch, Slot};
use crate::fast::read::stack::{Extra, Region, Walk};

/// Copies of a checked thread's frames, the first included. A torn view (a caller already at
/// its next call while the callee's slot still holds the callee that returned) passes only if
/// every copy catches the same one, and each copy divides the odds by 10 to 20: on the
/// adversarial fixture of tests/integration/reader_consistency.rs (a thread calling two
/// one-line functions in turn, as fast as Python goes, 3.12.1, debug build) torn stacks were
/// 1.7e-3 of reads with 2 copies, 9.4e-5 with 3, 1.3e-5 with 4 (one in 77,000 reads, and one
/// in a CI run), and none in 305,675 reads with 8. Each copy costs one more range of the batch's
/// one system call (about a microsecond for a stack of a few kilobytes).
pub(crate) const COPIES: usize = 8;
/// The random gap between copies is a read of up to this many bytes.
const MAX_GAP: u64 = 2048;

/// Where the later copies of a checked thread went in the batch: each copy's current-frame
/// pointer, and its ranges (the chunk, the extra ranges), the same number for every copy,
/// each with where it starts in the target. Flat, so that planning allocates twice per
/// thread and not twice per copy.
pub(crate) struct Planned {
    pointers: Vec<Slot>,
    ranges: Vec<(usize, Slot)>,
}

/// What a thread's reads look like: the current-frame pointer, the chunk, the extra ranges.
pub(crate) struct Reads<'a> {
    pub pointer: usize,
    pub chunk: usize,
    pub chunk_len: usize,
    /// How much of the chunk may be read from its start (up to its limit).
    pub chunk_room: usize,
    pub extra: &'a [Extra],
    pub max_extra: usize,
}

/// Adds the later copies after the first, each followed by a gap of random length: the
/// chunk's copy runs on past what the walk needs, where the chunk has room, or else a
/// range of its own is read (ranges cost more than bytes: each is looked up and pinned).
pub(crate) fn plan(batch: &mut Batch, reads: &Reads<'_>, seed: &mut u64) -> Planned {
    let extra = &reads.extra[..reads.extra.len().min(reads.max_extra)];
    let per_copy = usize::from(reads.chunk_len > 0) + extra.len();
    let mut pointers = Vec::with_capacity(COPIES - 1);
    let mut ranges = Vec::with_capacity((COPIES - 1) * per_copy);
    for _ in 1..COPIES {
        let gap = ((next(seed) % MAX_GAP) & !7) as usize;
        pointers.push(batch.add(reads.pointer, 8));
        let mut gap_read = gap == 0;
        if reads.chunk_len > 0 {
            let with_gap = reads.chunk_len + gap;
            let len = if with_gap <= reads.chunk_room {
                gap_read = true;
                with_gap
            } else {
                reads.chunk_len
            };
            ranges.push((reads.chunk, batch.add(reads.chunk, len)));
        }
        ranges.extend(extra.iter().map(|e| (e.addr, batch.add(e.addr, e.len))));
        if !gap_read && reads.chunk_len > 0 {
            // Harmless bytes to read: the chunk's own start.
            let _ = batch.add(reads.chunk, gap.min(reads.chunk_len));
        }
    }
    Planned { pointers, ranges }
}

/// The later readings of a checked thread.
#[derive(Debug)]
pub(crate) struct Later {
    /// Whether the walk's start stayed on the stack through every reading.
    pub agrees: bool,
    /// Each later copy's current-frame pointer as read (None: unreadable).
    pointers: Vec<Option<usize>>,
    /// The later copies' ranges, copy after copy, the same number each: where they start in
    /// the target and their slots in the batch read (not copied out: seven copies of a
    /// stack are tens of kilobytes).
    ranges: Vec<(usize, Slot)>,
}

impl Later {
    /// Each later copy's ranges.
    fn copies(&self) -> impl Iterator<Item = &[(usize, Slot)]> {
        let per_copy = self.ranges.len() / self.pointers.len().max(1);
        (0..self.pointers.len()).map(move |i| &self.ranges[i * per_copy..(i + 1) * per_copy])
    }
}

/// The frame header at `frame`, from whichever of `ranges` holds it.
fn header_in<'b>(
    batch: &'b Batch,
    layout: &Layout,
    ranges: &[(usize, Slot)],
    frame: usize,
) -> Option<&'b [u8]> {
    ranges.iter().find_map(|&(addr, slot)| {
        let start = frame.checked_sub(addr)?;
        batch
            .get(slot)?
            .get(start..start.checked_add(layout.fr_header_len)?)
    })
}

/// Reads back the later copies and picks where the walk starts: `current` (the pointer read
/// with the first copy, `first` its ranges) or, if it returned, its caller. Answers the start
/// and the readings.
pub(crate) fn collect(
    batch: &Batch,
    layout: &Layout,
    planned: &Planned,
    current: usize,
    first: &[&Region],
) -> (usize, Later) {
    let pointers: Vec<Option<usize>> = planned
        .pointers
        .iter()
        .map(|&p| batch.get(p).and_then(|b| usize_at(b, 0)))
        .collect();
    let mut later = Later {
        agrees: false,
        pointers,
        ranges: planned.ranges.clone(),
    };
    let caller_in_copy = |ranges: &[(usize, Slot)], frame: usize| {
        header_in(batch, layout, ranges, frame).and_then(|h| usize_at(h, layout.fr_previous))
    };
    // A frame stays if at every later reading it is the current frame or its caller.
    let stays = |start: usize| {
        later
            .pointers
            .iter()
            .zip(later.copies())
            .all(|(p, ranges)| match p {
                Some(p) => *p == start || caller_in_copy(ranges, *p) == Some(start),
                None => false,
            })
    };
    let returned_to = first
        .iter()
        .find_map(|r| r.get(current, layout.fr_header_len))
        .and_then(|h| usize_at(h, layout.fr_previous));
    let (start, agrees) = if stays(current) {
        (current, true)
    } else if returned_to.is_some_and(|c| c != 0 && stays(c)) {
        (returned_to.unwrap_or(current), true)
    } else {
        (current, false)
    };
    later.agrees = agrees;
    (start, later)
}

/// Whether every frame of the walk reads the same in every later copy (`batch`: the one
/// the copies were read in).
pub(crate) fn same_frames(layout: &Layout, walk: &Walk, later: &Later, batch: &Batch) -> bool {
    walk.frames.iter().enumerate().all(|(depth, f)| {
        let Some(first) = walk.header(f.addr, layout) else {
            return false;
        };
        later.copies().all(|ranges| {
            let Some(again) = header_in(batch, layout, ranges, f.addr) else {
                return false;
            };
            let same =
                |offset: usize| first.get(offset..offset + 8) == again.get(offset..offset + 8);
            same(layout.fr_code)
                && same(layout.fr_previous)
                && (depth == 0 || same(layout.fr_prev_instr))
                && first.get(layout.fr_owner) == again.get(layout.fr_owner)
        })
    })
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

#[cfg(test)]
mod tests {
    use super::*;
    use crate::fast::layout::PY311;

    fn frame_at(mem: &mut [u8], at: usize, code: u64, previous: u64) {
        let l = &PY311;
        mem[at + l.fr_code..at + l.fr_code + 8].copy_from_slice(&code.to_le_bytes());
        mem[at + l.fr_previous..at + l.fr_previous + 8].copy_from_slice(&previous.to_le_bytes());
    }

    fn later(pointers: &[usize], mem: &[u8], base: usize) -> (Planned, Batch) {
        // Not read from a process: the slots are filled from our own memory below.
        let mut batch = Batch::default();
        let (mut slots, mut ranges) = (Vec::new(), Vec::new());
        let cells: Vec<Box<u64>> = pointers.iter().map(|&p| Box::new(p as u64)).collect();
        for cell in &cells {
            slots.push(batch.add(&**cell as *const u64 as usize, 8));
            let c = batch.add(mem.as_ptr() as usize, mem.len());
            ranges.push((mem.as_ptr() as usize, c));
        }
        let mut remote = crate::fast::memory::remote::Remote::new(std::process::id());
        batch.run(&mut remote).expect("run");
        drop(cells);
        let _ = base;
        (
            Planned {
                pointers: slots,
                ranges,
            },
            batch,
        )
    }

    #[test]
    fn a_call_made_meanwhile_keeps_the_caller_as_start() {
        let mut mem = vec![0u8; 512];
        let base = mem.as_ptr() as usize;
        let (caller, callee) = (base + 32, base + 160);
        frame_at(&mut mem, 32, 0xc000, 0);
        frame_at(&mut mem, 160, 0xd000, caller as u64);
        let region = Region {
            addr: base,
            bytes: mem.clone(),
        };
        let first = vec![&region];
        let (planned, batch) = later(&[callee, caller], &mem, base);
        let (start, later) = collect(&batch, &PY311, &planned, caller, &first);
        assert_eq!(start, caller);
        assert!(later.agrees);
        // The callee was current first and had returned by the second reading: its caller.
        let (planned, batch) = later_from(&[caller, caller], &mem);
        let (start, later) = collect(&batch, &PY311, &planned, callee, &first);
        assert_eq!(start, caller);
        assert!(later.agrees);
        // Something else entirely: no agreement.
        let (planned, batch) = later_from(&[base + 400, caller], &mem);
        let (_, later) = collect(&batch, &PY311, &planned, callee, &first);
        assert!(!later.agrees);
    }

    fn later_from(pointers: &[usize], mem: &[u8]) -> (Planned, Batch) {
        later(pointers, mem, mem.as_ptr() as usize)
    }

    #[test]
    fn gaps_vary() {
        let mut seed = 42;
        let gaps: std::collections::HashSet<u64> =
            (0..100).map(|_| (next(&mut seed) % MAX_GAP) & !7).collect();
        assert!(gaps.len() > 50);
    }
}
