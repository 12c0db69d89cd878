//! Reading a thread that may be running Python while we read it (the GIL's holder) without
//! stopping it, and telling whether the copy is a stack it had.
//!
//! The thread's current-frame pointer and its frames are copied [`COPIES`] times in the same
//! system call, with reads of random length in between (what each copy holds is decided in
//! [`extent`]). A walk counts only if
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
//! change while it runs above them).
//!
//! The later copies hold only the top of the stack: from the frame
//! [`extent::WINDOW_FRAMES`] below the top of the thread's last stack read whole, to a little
//! past where its thread state last put the top ([`extent::LATER_SLACK`]). A frame older than
//! that window is not copied again: the walk's start stayed on the stack at every reading, so
//! the thread did not return below it while it was read, and only the start and its callers
//! down to the window's floor can have been caught changing. Where the window does not hold
//! the start and its caller (the stack shrank since), the check fails and the thread is read
//! again with whole copies. The random gaps matter: a thread looping over the same calls
//! passes through the same short-lived memory states (a caller already at its next call
//! while the callee's slot still holds the previous callee) at a fixed period, and copies a
//! fixed distance apart could all catch the same one. A thread that fails is read again, and
//! stopped if it keeps failing.

use crate::fast::layout::{usize_at, Layout};
use crate::fast::memory::extent::{self, Reads, Window, COPIES};
use crate::fast::memory::remote::{Batch, Slot};
use crate::fast::read::stack::{Region, Walk};

/// A walk leaving the window is checked only if at least its start and the start's caller
/// were compared.
const MIN_COMPARED: usize = 2;

/// Where the later copies of a checked thread went in the batch: each copy's current-frame
/// pointer, and its ranges (the chunk, the extra ranges), the same number for every copy,
/// each with where it starts in the target. Flat, so that planning allocates twice per
/// thread and not twice per copy.
pub(crate) struct Planned {
    pointers: Vec<Slot>,
    ranges: Vec<(usize, Slot)>,
    window: Option<Window>,
}

/// How a thread read with a check is copied later: the seed of the random gaps between its
/// copies, and where its later copies start ([`Known::window_floor`], 0: at the chunk's start).
///
/// [`Known::window_floor`]: crate::fast::read::thread_model::Known::window_floor
pub(crate) struct Copies<'a> {
    pub seed: &'a mut u64,
    pub window_floor: usize,
}

/// Adds the later copies after the first, each followed by a gap of random length, as
/// [`extent::later_copy`] and [`extent::later_ranges`] lay them out.
pub(crate) fn plan(batch: &mut Batch, reads: &Reads<'_>, copies: Copies<'_>) -> Planned {
    let later = extent::later_copy(reads, copies.window_floor);
    let extra = extent::later_extra(reads, &later);
    let per_copy = usize::from(later.len > 0) + extra.len();
    let mut pointers = Vec::with_capacity(COPIES - 1);
    let mut ranges = Vec::with_capacity((COPIES - 1) * per_copy);
    for _ in 1..COPIES {
        let gap = extent::gap(copies.seed);
        pointers.push(batch.add(reads.pointer, 8));
        let read = extent::later_ranges(reads, &later, gap);
        if let Some(c) = read.chunk {
            ranges.push((c.addr, batch.add(c.addr, c.len)));
        }
        ranges.extend(extra.iter().map(|e| (e.addr, batch.add(e.addr, e.len))));
        if let Some(g) = read.gap {
            let _ = batch.add(g.addr, g.len);
        }
    }
    Planned {
        pointers,
        ranges,
        window: later.window,
    }
}

/// The later readings of a checked thread.
#[derive(Debug)]
pub(crate) struct Later {
    /// Whether the walk's start stayed on the stack through every reading.
    pub agrees: bool,
    /// The frame that was current at the first reading, when it returned during the later
    /// ones and the walk starts at its caller: the thread was in it when it was copied
    /// ([`crate::fast::proof::vouch`] says when it is kept).
    pub returned: Option<usize>,
    /// Each later copy's current-frame pointer as read (None: unreadable).
    pointers: Vec<Option<usize>>,
    /// The later copies' ranges, copy after copy, the same number each: where they start in
    /// the target and their slots in the batch read (not copied out).
    ranges: Vec<(usize, Slot)>,
    window: Option<Window>,
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
        returned: None,
        pointers,
        ranges: planned.ranges.clone(),
        window: planned.window,
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
    } else if let Some(caller) = returned_to.filter(|&c| c != 0 && stays(c)) {
        later.returned = Some(current);
        (caller, true)
    } else {
        (current, false)
    };
    later.agrees = agrees;
    (start, later)
}

/// Whether every frame of the walk down to the later copies' window reads the same in every
/// later copy (`batch`: the one the copies were read in).
pub(crate) fn same_frames(layout: &Layout, walk: &Walk, later: &Later, batch: &Batch) -> bool {
    for (depth, f) in walk.frames.iter().enumerate() {
        if later.below_window(walk, f.addr) {
            return depth >= MIN_COMPARED;
        }
        if !same_in_every_copy(layout, walk, later, batch, depth, f.addr) {
            return false;
        }
    }
    true
}

impl Later {
    /// Whether the frame at `addr` is older than the later copies' window.
    fn below_window(&self, walk: &Walk, addr: usize) -> bool {
        self.window
            .is_some_and(|w| (w.chunk..w.floor).contains(&addr) || walk.in_older_chunk(addr))
    }
}

/// Whether the frame at `addr`, `depth` from the top of the walk, reads the same in every
/// later copy: code, caller and owner, and instruction but for the innermost frame's.
fn same_in_every_copy(
    layout: &Layout,
    walk: &Walk,
    later: &Later,
    batch: &Batch,
    depth: usize,
    addr: usize,
) -> bool {
    let Some(first) = walk.header(addr, layout) else {
        return false;
    };
    later.copies().all(|ranges| {
        let Some(again) = header_in(batch, layout, ranges, addr) else {
            return false;
        };
        let same = |offset: usize| first.get(offset..offset + 8) == again.get(offset..offset + 8);
        same(layout.fr_code)
            && same(layout.fr_previous)
            && (depth == 0 || same(layout.fr_prev_instr))
            && first.get(layout.fr_owner) == again.get(layout.fr_owner)
    })
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
                window: None,
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
        assert_eq!(later.returned, None);
        // The callee was current first and had returned by the second reading: its caller,
        // and the callee named as the frame the thread was in when the read began.
        let (planned, batch) = later_from(&[caller, caller], &mem);
        let (start, later) = collect(&batch, &PY311, &planned, callee, &first);
        assert_eq!(start, caller);
        assert!(later.agrees);
        assert_eq!(later.returned, Some(callee));
        // Something else entirely: no agreement.
        let (planned, batch) = later_from(&[base + 400, caller], &mem);
        let (_, later) = collect(&batch, &PY311, &planned, callee, &first);
        assert!(!later.agrees);
    }

    fn later_from(pointers: &[usize], mem: &[u8]) -> (Planned, Batch) {
        later(pointers, mem, mem.as_ptr() as usize)
    }

    /// Five frames at these offsets of a chunk, each called by the one before.
    const FRAMES: [usize; 5] = [32, 160, 288, 416, 544];

    fn five_frames(mem: &mut [u8]) {
        let base = mem.as_ptr() as usize;
        for (i, &at) in FRAMES.iter().enumerate() {
            let previous = if i == 0 { 0 } else { base + FRAMES[i - 1] };
            frame_at(mem, at, 0xc000 + 0x100 * i as u64, previous as u64);
        }
    }

    /// The walk of [`five_frames`] from the innermost, over a copy of `mem`.
    fn walk_of(mem: &[u8]) -> Walk {
        let base = mem.as_ptr() as usize;
        let region = Region {
            addr: base,
            bytes: mem.to_vec(),
        };
        let mut walk = Walk::new(base + FRAMES[4], region);
        assert_eq!(walk.advance(&PY311), Ok(None));
        assert_eq!(walk.frames.len(), 5);
        walk
    }

    /// Later copies of `mem` from `floor` (an offset), as [`plan`] lays them out for a window
    /// there, read after `change` is made to `mem`.
    fn windowed(mem: &mut [u8], floor: usize, change: impl FnOnce(&mut [u8])) -> (Later, Batch) {
        let base = mem.as_ptr() as usize;
        let current = Box::new((base + FRAMES[4]) as u64);
        change(mem);
        let mut batch = Batch::default();
        let (mut pointers, mut ranges) = (Vec::new(), Vec::new());
        for _ in 1..COPIES {
            pointers.push(batch.add(&*current as *const u64 as usize, 8));
            let at = base + floor;
            ranges.push((at, batch.add(at, mem.len() - floor)));
        }
        let mut remote = crate::fast::memory::remote::Remote::new(std::process::id());
        batch.run(&mut remote).expect("run");
        let planned = Planned {
            pointers,
            ranges,
            window: Some(Window {
                chunk: base,
                floor: base + floor,
            }),
        };
        let (start, later) = collect(&batch, &PY311, &planned, base + FRAMES[4], &[]);
        assert_eq!(start, base + FRAMES[4]);
        assert!(later.agrees);
        (later, batch)
    }

    fn set_code(mem: &mut [u8], at: usize, code: u64) {
        let offset = at + PY311.fr_code;
        mem[offset..offset + 8].copy_from_slice(&code.to_le_bytes());
    }

    #[test]
    fn frames_in_the_window_are_compared_and_older_ones_are_not() {
        let mut mem = vec![0u8; 1024];
        five_frames(&mut mem);
        let walk = walk_of(&mem);
        // The window holds the top three frames; one below it changed: not compared.
        let (later, batch) = windowed(&mut mem, FRAMES[2], |m| set_code(m, FRAMES[1], 0xf000));
        assert!(same_frames(&PY311, &walk, &later, &batch));
        // One inside it changed: the check fails.
        let (later, batch) = windowed(&mut mem, FRAMES[2], |m| set_code(m, FRAMES[3], 0xf000));
        assert!(!same_frames(&PY311, &walk, &later, &batch));
    }

    #[test]
    fn a_window_without_the_starts_caller_fails_the_check() {
        let mut mem = vec![0u8; 1024];
        five_frames(&mut mem);
        let walk = walk_of(&mem);
        let (later, batch) = windowed(&mut mem, FRAMES[4], |_| {});
        assert!(!same_frames(&PY311, &walk, &later, &batch));
        let (later, batch) = windowed(&mut mem, FRAMES[3], |_| {});
        assert!(same_frames(&PY311, &walk, &later, &batch));
    }
}
