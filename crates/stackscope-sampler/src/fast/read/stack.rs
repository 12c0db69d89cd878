//! Walking one thread's frames through memory already copied.
//!
//! In 3.11 and 3.12 a thread's frames live in its data stack: chunks of at least 16 KiB,
//! frames pushed one after another, each linked to its caller by `previous`. The reader
//! copies the used part of the current chunk in one go and walks the links inside the copy.
//! A link that leaves the copy (a generator's frame, which lives in the generator object; a
//! frame in an older chunk; 3.12's entry shims on the C stack) is read on its own, and the
//! older chunk, whose address the current chunk's header gives, is copied whole when the walk
//! first reaches below it.

use crate::fast::layout::{self, common, i32_at, usize_at, FrameDesign, Layout};
use crate::fast::memory::extent::{max_extra, Extra};

/// A copied range of the target's memory.
#[derive(Debug, Clone)]
pub(crate) struct Region {
    pub addr: usize,
    pub bytes: Vec<u8>,
}

impl Region {
    pub(crate) fn get(&self, addr: usize, len: usize) -> Option<&[u8]> {
        let start = addr.checked_sub(self.addr)?;
        self.bytes.get(start..start.checked_add(len)?)
    }

    /// For a region copied from a chunk's start: the chunk before it.
    fn previous_chunk(&self) -> Option<usize> {
        usize_at(&self.bytes, common::CHUNK_PREVIOUS).filter(|&p| p != 0)
    }
}

/// A region, whether it is a chunk, and whether the walk found a frame in it.
#[derive(Debug, Clone)]
struct Copied {
    region: Region,
    chunk: bool,
    used: bool,
}

/// A walk's lists, empty, kept with its thread between samples ([`Walk::recycle`]).
#[derive(Debug, Clone, Default)]
pub(crate) struct WalkSpare {
    frames: Vec<RawFrame>,
    regions: Vec<Copied>,
}

/// Frames a walk makes room for at its start (24 bytes each).
const FRAMES_AHEAD: usize = 40;

/// A frame as read: its code object and the instruction it is at.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) struct RawFrame {
    pub addr: usize,
    pub code: usize,
    pub prev_instr: usize,
    /// The first frame its call of the eval loop ran (3.11+; the thread's outermost frame is
    /// one too, which the walk cannot tell until it ends): where `--native` merges in that
    /// call's native frames.
    pub entry: bool,
}

#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) enum WalkError {
    /// More frames than py-spy follows: a loop in torn links, or real runaway recursion.
    TooDeep,
    /// A link or code pointer no live frame can hold.
    Garbage(usize),
}

/// What the walk needs read next: a frame header, and maybe a whole older chunk.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) struct Need {
    pub frame: usize,
    pub chunk: Option<usize>,
}

/// Frames followed per thread before the walk is taken as broken: py-spy gives up on a thread
/// with more frames than this. The deep read (`deep.rs`) follows the same bound.
pub(crate) const MAX_FRAMES: usize = 4096;

/// Where a thread's first frame sits: `data[1]` of its first chunk (CPython leaves `data[0]`
/// of that chunk unused so that the chunk is never freed).
const FIRST_FRAME_OFFSET: usize = common::CHUNK_HEADER + 8;

/// One frame header, parsed.
struct FrameHeader {
    previous: usize,
    /// Its code object (0: none).
    code: usize,
    prev_instr: usize,
    /// It is an entry shim (or 3.15's base frame): no code of its own.
    shim: bool,
    entry: bool,
}

impl FrameHeader {
    /// Parses the header copied from `addr`; a link no live frame can hold is garbage.
    fn parse(header: &[u8], layout: &Layout, addr: usize) -> Result<FrameHeader, WalkError> {
        let field = |offset| usize_at(header, offset).ok_or(WalkError::Garbage(addr));
        // A tagged stack reference (3.14+): the tags are not part of the address.
        let code = field(layout.fr_code)? & !layout.code_tag_bits;
        let previous = field(layout.fr_previous)?;
        let prev_instr = match layout.frames {
            FrameDesign::Chunks => field(layout.fr_prev_instr)?,
            // `f_lasti`, kept with its sign (-1: not started).
            FrameDesign::Objects => i32_at(header, layout.fr_prev_instr)
                .ok_or(WalkError::Garbage(addr))? as isize
                as usize,
        };
        if previous & 7 != 0 {
            return Err(WalkError::Garbage(previous));
        }
        let shim = header
            .get(layout.fr_owner)
            .copied()
            .zip(layout.owner_shims_from)
            .is_some_and(|(o, from)| o >= from);
        let entry = layout
            .fr_is_entry
            .and_then(|at| header.get(at))
            .is_some_and(|&b| b != 0);
        Ok(FrameHeader {
            previous,
            code,
            prev_instr,
            shim,
            entry,
        })
    }

    /// Whether the walk passes over it: an entry shim (or 3.15's base frame), or 3.13+'s
    /// frames with no executable (3.14 clears a frame's executable when it returns): no code
    /// of their own, left out as py-spy leaves them out.
    fn passed_over(&self, layout: &Layout) -> bool {
        self.shim || (self.code == 0 && layout.minor >= 13)
    }

    fn raw(&self, addr: usize) -> RawFrame {
        RawFrame {
            addr,
            code: self.code,
            prev_instr: self.prev_instr,
            entry: self.entry,
        }
    }
}

pub(crate) struct Walk {
    pub frames: Vec<RawFrame>,
    /// Frame headers read so far, shims included.
    visited: usize,
    next: usize,
    regions: Vec<Copied>,
    /// The older chunk below the ones copied, not yet copied itself.
    older_chunk: Option<usize>,
    /// 3.10: the last frame read belongs to a generator (`f_gen` set).
    last_in_generator: bool,
}

impl Walk {
    /// A walk from `current_frame` (0: the thread runs no Python) over `chunk`, a copy that
    /// starts at the current chunk's start (empty at address 0 when there is none).
    #[cfg(test)]
    pub(crate) fn new(current_frame: usize, chunk: Region) -> Walk {
        Walk::with_spare(current_frame, chunk, WalkSpare::default())
    }

    /// [`Walk::new`], in the lists a walk of the same thread left ([`Walk::recycle`]): a
    /// steady sample's walk allocates nothing.
    pub(crate) fn with_spare(current_frame: usize, chunk: Region, spare: WalkSpare) -> Walk {
        let older_chunk = chunk.previous_chunk();
        let WalkSpare {
            mut frames,
            mut regions,
        } = spare;
        frames.clear();
        // Room for a training loop's usual depth at once, rather than growing through four
        // reallocations each sample.
        frames.reserve(FRAMES_AHEAD);
        regions.clear();
        regions.push(Copied {
            chunk: chunk.addr != 0,
            region: chunk,
            used: true,
        });
        Walk {
            frames,
            visited: 0,
            next: current_frame,
            regions,
            older_chunk,
            last_in_generator: false,
        }
    }

    /// Follows the links through what is copied. Answers what to read when it needs more,
    /// None once the walk is complete.
    pub(crate) fn advance(&mut self, layout: &Layout) -> Result<Option<Need>, WalkError> {
        while self.next != 0 {
            let addr = self.next;
            if addr & 7 != 0 {
                return Err(WalkError::Garbage(addr));
            }
            let Some(copied) = self
                .regions
                .iter_mut()
                .find(|r| r.region.get(addr, layout.fr_header_len).is_some())
            else {
                // Frames sit above their chunk's start; anything else (a generator's frame)
                // costs at most one needless copy of the older chunk, needed further down.
                let chunk = self.older_chunk.filter(|&c| c < addr);
                return Ok(Some(Need { frame: addr, chunk }));
            };
            copied.used = true;
            let Some(header) = copied.region.get(addr, layout.fr_header_len) else {
                return Err(WalkError::Garbage(addr));
            };
            self.visited += 1;
            if self.visited > MAX_FRAMES {
                return Err(WalkError::TooDeep);
            }
            let parsed = FrameHeader::parse(header, layout, addr)?;
            if layout.frames == FrameDesign::Objects {
                self.last_in_generator = usize_at(header, layout::FRAME_OBJECT_GEN)
                    .ok_or(WalkError::Garbage(addr))?
                    != 0;
            }
            self.next = parsed.previous;
            // The frame above one passed over is the first its call of the eval loop ran.
            if parsed.passed_over(layout) {
                if let Some(above) = self.frames.last_mut() {
                    above.entry = true;
                }
                continue;
            }
            if parsed.code == 0 || parsed.code & 7 != 0 {
                return Err(WalkError::Garbage(parsed.code));
            }
            self.frames.push(parsed.raw(addr));
        }
        Ok(None)
    }

    /// The frame at `addr` as copied, and its caller's address, if it is not a shim: its
    /// code object is 0 where the frame has none (3.14+ clears it when the frame returns, and
    /// only its instruction tells whose it was).
    pub(crate) fn frame_at(&self, addr: usize, layout: &Layout) -> Option<(RawFrame, usize)> {
        if addr & 7 != 0 {
            return None;
        }
        let parsed = FrameHeader::parse(self.header(addr, layout)?, layout, addr).ok()?;
        (!parsed.shim && parsed.code & 7 == 0).then(|| (parsed.raw(addr), parsed.previous))
    }

    /// Hands over what was read for a [`Need`]: the frame's header and, if asked for, the
    /// older chunk's first [`OLDER_CHUNK_COPY`] bytes (frames past them are read one by one).
    ///
    /// [`OLDER_CHUNK_COPY`]: crate::fast::memory::extent::OLDER_CHUNK_COPY
    pub(crate) fn supply(&mut self, need: Need, frame: Option<Vec<u8>>, chunk: Option<Vec<u8>>) {
        if let (Some(addr), Some(bytes)) = (need.chunk, chunk) {
            self.add_region(Region { addr, bytes }, true);
        }
        if let Some(bytes) = frame {
            self.add_region(
                Region {
                    addr: need.frame,
                    bytes,
                },
                false,
            );
        }
    }

    /// Adds a copy made before the walk needed it (a range the last sample's walk used).
    /// A digest of the current chunk's used part (up to `top`, the thread state's data-stack
    /// top): every frame's locals and value stack with it. A thread looping around a C call
    /// that releases the GIL comes back to the same frames and instructions every time, but
    /// rarely with the same locals. 0 when there is no chunk.
    pub(crate) fn chunk_digest(&self, top: usize) -> u64 {
        let Some(first) = self
            .regions
            .first()
            .filter(|r| r.chunk && r.region.addr != 0)
        else {
            return 0;
        };
        let region = &first.region;
        let used = top.saturating_sub(region.addr).min(region.bytes.len());
        // Whole words in two independent lanes (a chain of multiplies through one lane is
        // the slow part), then the tail; no copy per word.
        const K: u64 = 0x517c_c1b7_2722_0a95;
        let bytes = &region.bytes[..used];
        let mut pairs = bytes.chunks_exact(16);
        let (mut a, mut b): (u64, u64) = (0xcbf2_9ce4_8422_2325, 0x9e37_79b9_7f4a_7c15);
        for pair in &mut pairs {
            let (lo, hi) = pair.split_at(8);
            let lo = u64::from_le_bytes(lo.try_into().unwrap_or_default());
            let hi = u64::from_le_bytes(hi.try_into().unwrap_or_default());
            a = (a.rotate_left(5) ^ lo).wrapping_mul(K);
            b = (b.rotate_left(5) ^ hi).wrapping_mul(K);
        }
        let mut tail = [0u8; 16];
        let rest = pairs.remainder();
        tail[..rest.len()].copy_from_slice(rest);
        let lo = u64::from_le_bytes(tail[..8].try_into().unwrap_or_default());
        let hi = u64::from_le_bytes(tail[8..].try_into().unwrap_or_default());
        a = (a.rotate_left(5) ^ lo ^ rest.len() as u64).wrapping_mul(K);
        b = (b.rotate_left(5) ^ hi).wrapping_mul(K);
        (a ^ b.rotate_left(29)).wrapping_mul(K)
    }

    /// The bytes of every region the walk copied, for the next sample's copies to reuse.
    /// Hands each copy's bytes to `take_back`, and answers the walk's lists, emptied, for the
    /// thread's next walk ([`Walk::with_spare`]).
    pub(crate) fn recycle(self, mut take_back: impl FnMut(Vec<u8>)) -> WalkSpare {
        let Walk {
            mut frames,
            mut regions,
            ..
        } = self;
        for copied in regions.drain(..) {
            take_back(copied.region.bytes);
        }
        frames.clear();
        WalkSpare { frames, regions }
    }

    pub(crate) fn add_region(&mut self, region: Region, chunk: bool) {
        if chunk && Some(region.addr) == self.older_chunk {
            self.older_chunk = region.previous_chunk();
        }
        self.regions.push(Copied {
            region,
            chunk,
            used: false,
        });
    }

    /// Whether the frame at `need.frame` is now readable (else the walk cannot go on).
    pub(crate) fn can_continue(&self, need: Need, layout: &Layout) -> bool {
        self.header(need.frame, layout).is_some()
    }

    /// A frame's header as copied.
    pub(crate) fn header(&self, frame: usize, layout: &Layout) -> Option<&[u8]> {
        self.regions
            .iter()
            .find_map(|r| r.region.get(frame, layout.fr_header_len))
    }

    /// Whether `addr` lies in a chunk older than the current one, as copied for this walk.
    pub(crate) fn in_older_chunk(&self, addr: usize) -> bool {
        self.regions
            .iter()
            .skip(1)
            .any(|r| r.chunk && r.region.get(addr, 1).is_some())
    }

    /// Whether the walk ended at the thread's first frame, where every complete stack ends:
    /// the first frame slot of the chunk that has no older one (3.11+). A thread stopped in the middle
    /// of a call or a return can have its current-frame pointer already moved while the new
    /// frame's link is not yet written (the compiler may order those stores either way), and
    /// then the walk ends early. Threads whose stack starts elsewhere (a generator driven by C
    /// code with no Python frame under it) fail this too.
    pub(crate) fn ends_at_first_frame(&self, layout: &Layout) -> bool {
        // 3.10: a frame object links its caller when it is made, and a generator's frame
        // when it is resumed, before either becomes the thread's current frame; a suspended
        // generator's frame has no caller. So a walk that ends, ends at the first frame,
        // unless it ends in a generator: a resumed frame read after it was suspended again
        // (a thread runs no generator at its base, but for one driven from C).
        if layout.frames == FrameDesign::Objects {
            return !self.last_in_generator;
        }
        let Some(last) = self.frames.last() else {
            return true;
        };
        self.regions
            .iter()
            .filter(|r| r.chunk && r.region.previous_chunk().is_none())
            .any(|r| r.region.addr + FIRST_FRAME_OFFSET == last.addr)
    }

    /// The ranges outside the current chunk that held frames of this walk: worth copying
    /// with the next snapshot of the thread.
    pub(crate) fn outside_ranges(&self, layout: &Layout) -> Vec<Extra> {
        self.regions
            .iter()
            .skip(1)
            .filter(|r| r.used)
            .map(|r| Extra {
                addr: r.region.addr,
                len: r.region.bytes.len(),
                chunk: r.chunk,
            })
            .take(max_extra(layout))
            .collect()
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::fast::layout::{PY310, PY311, PY312};

    #[test]
    fn the_chunk_digest_sees_every_used_byte_and_none_past_the_top() {
        let digest = |bytes: &[u8], used: usize| {
            let walk = Walk::new(
                0,
                Region {
                    addr: 0x1000,
                    bytes: bytes.to_vec(),
                },
            );
            walk.chunk_digest(0x1000 + used)
        };
        let mem: Vec<u8> = (0..4133u32).map(|i| (i * 7 % 251) as u8).collect();
        let used = 4100;
        let base = digest(&mem, used);
        assert_eq!(base, digest(&mem, used), "the same bytes, the same digest");
        // A local changed anywhere in the used part, in a whole pair of words or in the tail.
        for at in [0, 8, 15, 2048, 4095, used - 1] {
            let mut changed = mem.clone();
            changed[at] ^= 1;
            assert_ne!(base, digest(&changed, used), "a change at byte {at}");
        }
        // Two words swapped is another state.
        let mut swapped = mem.clone();
        swapped.copy_within(16..24, 0);
        swapped[16..24].copy_from_slice(&mem[0..8]);
        assert_ne!(base, digest(&swapped, used));
        // Past the top is garbage the thread does not own: not seen.
        let mut past = mem.clone();
        past[used + 3] ^= 0xff;
        assert_eq!(base, digest(&past, used));
        // A stack one word taller is another stack, even of zeros.
        assert_ne!(digest(&[0u8; 64], 40), digest(&[0u8; 64], 48));
    }

    /// Writes a 3.11-style frame at `at` (an offset in `mem`, whose address is `base`).
    fn frame(mem: &mut [u8], base: usize, at: usize, code: usize, previous: usize, instr: usize) {
        let l = &PY311;
        mem[at + l.fr_code..at + l.fr_code + 8].copy_from_slice(&(code as u64).to_le_bytes());
        mem[at + l.fr_previous..at + l.fr_previous + 8]
            .copy_from_slice(&(previous as u64).to_le_bytes());
        mem[at + l.fr_prev_instr..at + l.fr_prev_instr + 8]
            .copy_from_slice(&(instr as u64).to_le_bytes());
        let _ = base;
    }

    /// Writes a frame of `layout` at `at`: its code, caller and owner.
    fn frame_of(
        layout: &Layout,
        mem: &mut [u8],
        at: usize,
        code: usize,
        previous: usize,
        owner: u8,
    ) {
        mem[at + layout.fr_code..at + layout.fr_code + 8]
            .copy_from_slice(&(code as u64).to_le_bytes());
        mem[at + layout.fr_previous..at + layout.fr_previous + 8]
            .copy_from_slice(&(previous as u64).to_le_bytes());
        mem[at + layout.fr_owner] = owner;
    }

    fn entries_of(layout: &Layout, mem: Vec<u8>, base: usize, current: usize) -> Vec<bool> {
        let mut walk = Walk::new(
            current,
            Region {
                addr: base,
                bytes: mem,
            },
        );
        assert_eq!(walk.advance(layout), Ok(None));
        walk.frames.iter().map(|f| f.entry).collect()
    }

    #[test]
    fn the_frame_above_an_entry_shim_entered_the_eval_loop() {
        use crate::fast::layout::PY312;
        let base = 0x10_0000;
        let mut mem = vec![0u8; 1024];
        // Innermost first: +608 called by +400, which C called (the shim at +304 below it),
        // called in turn by +96.
        frame_of(&PY312, &mut mem, 96, 0xa000, 0, 0);
        frame_of(&PY312, &mut mem, 304, 0, base + 96, 3);
        frame_of(&PY312, &mut mem, 400, 0xb000, base + 304, 0);
        frame_of(&PY312, &mut mem, 608, 0xc000, base + 400, 0);
        assert_eq!(
            entries_of(&PY312, mem, base, base + 608),
            [false, true, false]
        );
    }

    #[test]
    fn a_311_frame_says_itself_that_it_entered_the_eval_loop() {
        let base = 0x10_0000;
        let mut mem = vec![0u8; 1024];
        frame(&mut mem, base, 96, 0xa000, 0, 0);
        frame(&mut mem, base, 304, 0xb000, base + 96, 0);
        frame(&mut mem, base, 504, 0xc000, base + 304, 0);
        let is_entry = PY311.fr_is_entry.expect("3.11 has is_entry");
        mem[304 + is_entry] = 1;
        assert_eq!(
            entries_of(&PY311, mem, base, base + 504),
            [false, true, false]
        );
    }

    #[test]
    fn walks_a_chunk_then_asks_for_a_generator_frame_and_an_older_chunk() {
        let base = 0x10_0000;
        let mut mem = vec![0u8; 1024];
        // Chunk header: the older chunk at 0x8_0000.
        mem[0..8].copy_from_slice(&0x8_0000u64.to_le_bytes());
        // Frames at +32 (bottom of this chunk), +200 (its callee), +400 (the innermost),
        // whose caller is a generator frame elsewhere, whose caller is in the older chunk.
        frame(&mut mem, base, 400, 0xc000, 0x50_0000, 1);
        let walk_start = base + 400;
        let mut walk = Walk::new(
            walk_start,
            Region {
                addr: base,
                bytes: mem.clone(),
            },
        );
        let need = walk
            .advance(&PY311)
            .expect("walk")
            .expect("needs the generator frame");
        // The older chunk comes along: the walk will go down there next.
        assert_eq!(
            need,
            Need {
                frame: 0x50_0000,
                chunk: Some(0x8_0000)
            }
        );
        let mut gen = vec![0u8; 72];
        frame(&mut gen, 0x50_0000, 0, 0xd000, 0x8_0000 + 24, 2);
        let mut older = vec![0u8; 200];
        frame(&mut older, 0x8_0000, 24, 0xe000, 0, 3);
        walk.supply(need, Some(gen), Some(older));
        assert!(walk.can_continue(need, &PY311));
        assert_eq!(walk.advance(&PY311), Ok(None));
        let outside: Vec<(usize, bool)> = walk
            .outside_ranges(&PY311)
            .iter()
            .map(|e| (e.addr, e.chunk))
            .collect();
        assert_eq!(outside, [(0x8_0000, true), (0x50_0000, false)]);
        let codes: Vec<usize> = walk.frames.iter().map(|f| f.code).collect();
        assert_eq!(codes, [0xc000, 0xd000, 0xe000]);
    }

    #[test]
    fn a_loop_in_torn_links_ends_as_too_deep() {
        let base = 0x10_0000;
        let mut mem = vec![0u8; 256];
        frame(&mut mem, base, 32, 0xc000, base + 32, 1);
        let mut walk = Walk::new(
            base + 32,
            Region {
                addr: base,
                bytes: mem,
            },
        );
        assert_eq!(walk.advance(&PY311), Err(WalkError::TooDeep));
    }

    #[test]
    fn misaligned_links_are_garbage() {
        let base = 0x10_0000;
        let mut mem = vec![0u8; 256];
        frame(&mut mem, base, 32, 0xc000, base + 3, 1);
        let mut walk = Walk::new(
            base + 32,
            Region {
                addr: base,
                bytes: mem,
            },
        );
        assert!(matches!(walk.advance(&PY311), Err(WalkError::Garbage(_))));
    }

    #[test]
    fn entry_shims_are_skipped_in_3_12() {
        let l = &PY312;
        let base = 0x10_0000;
        let mut mem = vec![0u8; 256];
        let put = |mem: &mut Vec<u8>, at: usize, code: u64, prev: u64, owner: u8| {
            mem[at + l.fr_code..at + l.fr_code + 8].copy_from_slice(&code.to_le_bytes());
            mem[at + l.fr_previous..at + l.fr_previous + 8].copy_from_slice(&prev.to_le_bytes());
            mem[at + l.fr_owner] = owner;
        };
        put(&mut mem, 128, 0xc000, (base + 32) as u64, 0);
        put(&mut mem, 32, 0xd000, 0, 3);
        let mut walk = Walk::new(
            base + 128,
            Region {
                addr: base,
                bytes: mem,
            },
        );
        assert_eq!(walk.advance(l), Ok(None));
        assert_eq!(walk.frames.len(), 1);
    }

    /// 3.14+: the code object comes as a tagged stack reference, and frames owned by the
    /// interpreter (entry frames, 3) or the thread state (3.15's base frame, 4) are left out.
    #[test]
    fn tagged_executables_are_masked_and_interpreter_frames_skipped() {
        let l = &Layout {
            minor: 14,
            code_tag_bits: 3,
            ..PY312.clone()
        };
        let base = 0x10_0000;
        let mut mem = vec![0u8; 512];
        let put = |mem: &mut Vec<u8>, at: usize, code: u64, prev: u64, owner: u8| {
            mem[at + l.fr_code..at + l.fr_code + 8].copy_from_slice(&code.to_le_bytes());
            mem[at + l.fr_previous..at + l.fr_previous + 8].copy_from_slice(&prev.to_le_bytes());
            mem[at + l.fr_owner] = owner;
        };
        // Innermost (deferred reference: tag 1), its caller (untagged), an entry frame
        // (owner 3, executable None), the base frame (owner 4).
        put(&mut mem, 384, 0xc001, (base + 256) as u64, 0);
        put(&mut mem, 256, 0xd000, (base + 128) as u64, 0);
        put(&mut mem, 128, 0x9_0000, (base + 32) as u64, 3);
        put(&mut mem, 32, 0, 0, 4);
        let mut walk = Walk::new(
            base + 384,
            Region {
                addr: base,
                bytes: mem,
            },
        );
        assert_eq!(walk.advance(l), Ok(None));
        let codes: Vec<usize> = walk.frames.iter().map(|f| f.code).collect();
        assert_eq!(codes, [0xc000, 0xd000]);
    }

    /// 3.10 frame objects: a walk ending in a function's frame reaches the thread's first
    /// frame; one ending in a generator's frame (a resumed generator read after it was
    /// suspended again, its caller link cleared) does not.
    #[test]
    fn a_3_10_walk_that_ends_in_a_generator_is_not_whole() {
        let l = &PY310;
        let walk_of = |gen_of_last: u64| {
            let base = 0x10_0000;
            let mut mem = vec![0u8; 512];
            let put = |mem: &mut Vec<u8>, at: usize, code: u64, back: u64, gen: u64| {
                mem[at + l.fr_code..at + l.fr_code + 8].copy_from_slice(&code.to_le_bytes());
                mem[at + l.fr_previous..at + l.fr_previous + 8]
                    .copy_from_slice(&back.to_le_bytes());
                mem[at + layout::FRAME_OBJECT_GEN..at + layout::FRAME_OBJECT_GEN + 8]
                    .copy_from_slice(&gen.to_le_bytes());
            };
            // The innermost frame is a function's; its caller the last, maybe a generator's.
            put(&mut mem, 256, 0xc000, (base + 128) as u64, 0);
            put(&mut mem, 128, 0xd000, 0, gen_of_last);
            let mut walk = Walk::new(
                0,
                Region {
                    addr: 0,
                    bytes: Vec::new(),
                },
            );
            walk.next = base + 256;
            walk.add_region(
                Region {
                    addr: base,
                    bytes: mem,
                },
                false,
            );
            assert_eq!(walk.advance(l), Ok(None));
            assert_eq!(walk.frames.len(), 2);
            walk
        };
        assert!(walk_of(0).ends_at_first_frame(l));
        assert!(!walk_of(0x7f00_0000).ends_at_first_frame(l));
    }
}
