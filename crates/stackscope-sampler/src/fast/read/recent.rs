//! Naming a walk's frames, and a thread's last few distinct stacks, so that a thread back at one of them is handed that
//! very stack (`Frames` is shared): one reference count for the sample instead of two per
//! frame, on counts the consumer's thread drops on its own core, and the consumer then
//! finds the stack by its address ([`stackscope_event`]'s `LastStacks`).

use std::sync::Arc;

use stackscope_event::{Frame, Frames};

use crate::fast::layout::{FrameDesign, Layout};
use crate::fast::memory::addrmap::AddrMap;
use crate::fast::objects::code::{CodeCache, CodeId};
use crate::fast::read::stack::RawFrame;

/// Names and lines for a walk's frames: one of the thread's recent stacks when it is the
/// same, frame for frame, else a new one.
pub(crate) fn name(
    layout: &Layout,
    codes: &mut CodeCache,
    ids: &AddrMap<Option<CodeId>>,
    raw: &[RawFrame],
    recent: &mut RecentStacks,
) -> Result<Frames, String> {
    let seen = recent.last.see(layout, codes, ids, raw)?;
    let stack = name_seen(codes, &seen, recent);
    recent.last.give_back(seen);
    stack
}

/// The stack `seen` names: one of `recent`'s, else a new one, remembered.
fn name_seen(
    codes: &CodeCache,
    seen: &[SeenFrame],
    recent: &mut RecentStacks,
) -> Result<Frames, String> {
    if let Some(stack) = recent.find(seen) {
        return Ok(stack);
    }
    let mut out = Vec::with_capacity(seen.len());
    for s in seen {
        // Found good by the first pass, a moment ago, or named as the last walk named it
        // while the cache dropped nothing ([`LastNamed`]): the entry is there.
        let names = codes.checked(s.code).and_then(|info| info.names.as_ref());
        let Some(names) = names else {
            return Err("Failed to copy PyCodeObject".to_owned());
        };
        out.push(Frame {
            function: names.function.clone(),
            file: names.file.clone(),
            line: s.line,
            native: false,
            origin: names.origin,
        });
    }
    let stack: Frames = out.into();
    recent.remember(&stack);
    Ok(stack)
}

/// The stack a sound read gave that is `raw`'s, but for the lines of its innermost frame's
/// `callers` first callers ([`RecentStacks::proven_for`]), if any; nothing is remembered of
/// `raw` otherwise.
pub(crate) fn find_proven(
    layout: &Layout,
    codes: &mut CodeCache,
    ids: &AddrMap<Option<CodeId>>,
    raw: &[RawFrame],
    callers: usize,
    recent: &mut RecentStacks,
) -> Option<Proven> {
    let seen = recent.last.see(layout, codes, ids, raw).ok()?;
    let proven = recent.proven_for(&seen, callers);
    recent.last.give_back(seen);
    proven
}

/// A stack a sound read gave, found for a read ([`RecentStacks::proven_for`]).
#[derive(Debug, Clone)]
pub(crate) struct Proven {
    pub stack: Frames,
    /// Found with its callers' lines relaxed: the read's differ. A caller that makes the call
    /// from two lines, one of them not proven yet, reads as the proven one until a sound read
    /// gives the other ([`crate::fast::proof::vouch::ProvingStops`]).
    pub relaxed: bool,
}

/// One frame named through the code cache; none when its code object's strings could not be
/// read (py-spy leaves such a frame out).
fn see_frame(
    layout: &Layout,
    codes: &mut CodeCache,
    id: &CodeId,
    f: &RawFrame,
) -> Option<SeenFrame> {
    // Byte offset of the instruction from the bytecode's start, as py-spy computes it
    // (3.10: twice `f_lasti`, an index of two-byte code units).
    let lasti = match layout.frames {
        FrameDesign::Chunks => (f.prev_instr.wrapping_sub(f.code) as isize as i32)
            .wrapping_sub(layout.co_code_adaptive as i32),
        FrameDesign::Objects => (f.prev_instr as isize as i32).wrapping_mul(2),
    };
    let info = codes.get(f.code, id)?;
    let names = info.names.as_ref()?;
    Some(SeenFrame {
        code: f.code,
        function: addr(&names.function),
        file: addr(&names.file),
        line: u32::try_from(info.lines.line(lasti)).unwrap_or(0),
    })
}

/// How the thread's last walk was named, frame by frame (innermost first, as walked): a busy
/// thread's walk is most often the last one's but for its innermost frames, and a frame at the
/// same depth from the outermost, in the same code object (its identity as read this sample) at
/// the same instruction, is named as it was, without a look in the code cache or the line
/// table, whose entries lie all over the heap and are cold after a 10 ms sleep.
///
/// Kept only while the code cache drops or replaces nothing ([`CodeCache::epoch`]): the
/// entries it named from are then still there, as they were, their strings alive, so an
/// address still names the string it named.
#[derive(Debug, Clone, Default)]
pub(crate) struct LastNamed {
    epoch: u64,
    frames: Vec<Named>,
    /// The vector the next naming fills, swapped with `frames`: no allocation a sample.
    spare: Vec<Named>,
    /// The list [`LastNamed::see`] answers in, given back after use
    /// ([`LastNamed::give_back`]).
    seen_spare: Vec<SeenFrame>,
}

#[derive(Debug, Clone, Copy)]
struct Named {
    code: usize,
    prev_instr: usize,
    id: CodeId,
    /// None: left out (its strings could not be read).
    seen: Option<SeenFrame>,
}

impl LastNamed {
    /// Names `raw`'s frames (an error when one's code object was not identified this sample),
    /// taking from the last naming what it can and looking up the rest ([`see_frame`]).
    fn see(
        &mut self,
        layout: &Layout,
        codes: &mut CodeCache,
        ids: &AddrMap<Option<CodeId>>,
        raw: &[RawFrame],
    ) -> Result<Vec<SeenFrame>, String> {
        if self.epoch != codes.epoch() {
            self.frames.clear();
        }
        let mut next = std::mem::take(&mut self.spare);
        next.clear();
        let mut seen = std::mem::take(&mut self.seen_spare);
        seen.clear();
        seen.reserve(raw.len());
        for (i, f) in raw.iter().enumerate() {
            let Some(Some(id)) = ids.get(&f.code) else {
                self.spare = next;
                self.seen_spare = seen;
                return Err("Failed to copy PyCodeObject".to_owned());
            };
            let named = self
                .same_at(raw.len(), i, f, id)
                .or_else(|| see_frame(layout, codes, id, f));
            seen.extend(named);
            next.push(Named {
                code: f.code,
                prev_instr: f.prev_instr,
                id: *id,
                seen: named,
            });
        }
        self.spare = std::mem::replace(&mut self.frames, next);
        self.epoch = codes.epoch();
        Ok(seen)
    }

    /// Takes back the list [`LastNamed::see`] answered, for the next naming.
    fn give_back(&mut self, seen: Vec<SeenFrame>) {
        self.seen_spare = seen;
    }

    /// The last naming of the frame `i` of a walk of `len` frames (innermost first), when the
    /// last walk had the same frame as deep from the outermost (the same code object, `id` as
    /// read this sample, at the same instruction) and named it. One it left out is looked up
    /// again: its code object may be loaded since, or load this time.
    fn same_at(&self, len: usize, i: usize, f: &RawFrame, id: &CodeId) -> Option<SeenFrame> {
        (i + self.frames.len())
            .checked_sub(len)
            .and_then(|j| self.frames.get(j))
            .filter(|n| n.code == f.code && n.prev_instr == f.prev_instr && n.id == *id)
            .and_then(|n| n.seen)
    }
}

/// One frame of a walk, named: its strings by address (alive as long as the code cache or a
/// stack holds them, so an address names one string), and its line.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) struct SeenFrame {
    pub code: usize,
    pub function: usize,
    pub file: usize,
    pub line: u32,
}

/// A string's address: what names it while something holds it.
fn addr(s: &Arc<str>) -> usize {
    Arc::as_ptr(s).cast::<u8>() as usize
}

/// A frame as stacks are compared: its strings by address, and its line.
pub(crate) trait FrameKey {
    fn key(&self) -> (usize, usize, u32);
}

impl FrameKey for SeenFrame {
    fn key(&self) -> (usize, usize, u32) {
        (self.function, self.file, self.line)
    }
}

impl FrameKey for Frame {
    fn key(&self) -> (usize, usize, u32) {
        (addr(&self.function), addr(&self.file), self.line)
    }
}

/// How many of the innermost frame's callers' lines two stacks compared may differ in (the
/// second frame's line, the third's, and so on): 0, all lines the same.
#[derive(Clone, Copy, PartialEq, Eq)]
struct Relaxed(usize);

/// Whether `stack` is `other`, frame for frame: the same strings (by address), and the same
/// `lines`.
fn same<K: FrameKey>(stack: &[Frame], other: &[K], relaxed: Relaxed) -> bool {
    stack.len() == other.len()
        && stack.iter().zip(other).enumerate().all(|(i, (f, o))| {
            let (function, file, line) = o.key();
            addr(&f.function) == function
                && addr(&f.file) == file
                && (f.line == line || (1..=relaxed.0).contains(&i))
        })
}

/// How many distinct stacks a thread's [`RecentStacks`] keeps: a busy loop goes round a few.
const RECENT_STACKS: usize = 16;

/// A thread's last few distinct stacks, newest first, each with whether a sound read gave it
/// (one that cannot be torn: [`crate::fast::proof::vouch`]). Each holds its strings, so an
/// address in it cannot name another string while it is here.
#[derive(Debug, Clone, Default)]
pub(crate) struct RecentStacks {
    stacks: Vec<(Frames, bool)>,
    /// How the last walk was named.
    last: LastNamed,
}

impl RecentStacks {
    /// The stack that is `seen`, frame for frame, if it is one of these.
    pub(crate) fn find(&mut self, seen: &[SeenFrame]) -> Option<Frames> {
        let pos = self
            .stacks
            .iter()
            .position(|(stack, _)| same(stack, seen, Relaxed(0)))?;
        // Newest first: a loop's stacks stay near the front.
        self.stacks[..=pos].rotate_right(1);
        Some(self.stacks[0].0.clone())
    }

    /// The stack a sound read gave that is `stack`: `stack` itself, or else the only one that
    /// is `stack` but for the lines of its innermost frame's `callers` first callers (the
    /// second frame's, and so on), if there is just one.
    ///
    /// A read whose innermost frame was the thread's current frame when the read began (its
    /// current-frame pointer, read first) had the thread inside that call then, so its caller
    /// was at the call; its frames are copied a moment later, when the callee may have
    /// returned (its slot still holding it) and the caller moved on. The caller's line is then
    /// the one at which a sound read saw it call that function; and so for callers of the
    /// caller that returned too.
    pub(crate) fn proven_for<K: FrameKey>(&self, stack: &[K], callers: usize) -> Option<Proven> {
        let proven = || self.stacks.iter().filter(|(_, proven)| *proven);
        if let Some((s, _)) = proven().find(|(s, _)| same(s, stack, Relaxed(0))) {
            return Some(Proven {
                stack: s.clone(),
                relaxed: false,
            });
        }
        if stack.len() < 2 || callers == 0 {
            return None;
        }
        let mut like = proven().filter(|(s, _)| same(s, stack, Relaxed(callers)));
        let (first, _) = like.next()?;
        like.next().is_none().then(|| Proven {
            stack: first.clone(),
            relaxed: true,
        })
    }

    /// Keeps `stack`, not yet known to be sound, in place of the oldest that no sound read
    /// gave (else the oldest): torn reads name stacks of their own, and must not push out
    /// the ones that keep later reads ([`crate::fast::proof::vouch`]).
    pub(crate) fn remember(&mut self, stack: &Frames) {
        if self.stacks.len() == RECENT_STACKS {
            let oldest_unproven = self.stacks.iter().rposition(|(_, proven)| !proven);
            self.stacks
                .remove(oldest_unproven.unwrap_or(RECENT_STACKS - 1));
        }
        self.stacks.insert(0, (stack.clone(), false));
    }

    /// Marks `stack` (one handed out by [`name`], this very one) as given by a sound read;
    /// answers whether it was not before.
    pub(crate) fn prove(&mut self, stack: &Frames) -> bool {
        match self.stacks.iter_mut().find(|(s, _)| Arc::ptr_eq(s, stack)) {
            Some(entry) => !std::mem::replace(&mut entry.1, true),
            None => false,
        }
    }

    /// Whether `stack` (one handed out by [`name`]) was given by a sound read.
    pub(crate) fn is_proven(&self, stack: &Frames) -> bool {
        self.stacks
            .iter()
            .any(|(s, proven)| *proven && Arc::ptr_eq(s, stack))
    }

    /// Whether frame `i` of the walk `raw` (its code object `id`, as read this sample) is
    /// one the last naming found in `codes`, which has dropped nothing since: it is there.
    pub(crate) fn named_before(
        &self,
        codes: &CodeCache,
        raw: &[RawFrame],
        i: usize,
        id: &CodeId,
    ) -> bool {
        let last = &self.last;
        last.epoch == codes.epoch()
            && raw
                .get(i)
                .is_some_and(|f| last.same_at(raw.len(), i, f, id).is_some())
    }

    /// Whether any of these stacks was given by a sound read.
    pub(crate) fn any_proven(&self) -> bool {
        self.stacks.iter().any(|(_, proven)| *proven)
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::fast::objects::linetable::LineTable;

    fn seen(stack: &Frames) -> Vec<SeenFrame> {
        stack
            .iter()
            .map(|f| SeenFrame {
                code: 0,
                function: addr(&f.function),
                file: addr(&f.file),
                line: f.line,
            })
            .collect()
    }

    /// A cache with an outer function and an inner one ([`lines_of`]), and the identities of
    /// both as read this sample.
    fn two_frames() -> (CodeCache, AddrMap<Option<CodeId>>) {
        let mut codes = CodeCache::new(
            crate::fast::objects::filenames::FileNames::new(
                1,
                false,
                crate::origin::Origins::default(),
            ),
            true,
        );
        codes.insert_named(OUTER, CodeId::for_test(1), ("outer", "a.py"), lines_of());
        codes.insert_named(INNER, CodeId::for_test(2), ("inner", "a.py"), lines_of());
        let mut ids = AddrMap::default();
        ids.insert(OUTER, Some(CodeId::for_test(1)));
        ids.insert(INNER, Some(CodeId::for_test(2)));
        (codes, ids)
    }

    /// Lines 1 to 3 by byte offset: before 10, before 20, the rest.
    fn lines_of() -> LineTable {
        LineTable::from_entries(1, vec![(10, 1), (20, 2), (1000, 3)])
    }

    const OUTER: usize = 0x1000;
    const INNER: usize = 0x2000;

    /// 3.10's frames: the instruction is an index of two-byte units.
    fn walk(inner_at: usize, outer_at: usize) -> Vec<RawFrame> {
        [(INNER, inner_at), (OUTER, outer_at)]
            .map(|(code, at)| RawFrame {
                addr: code + 0x10,
                code,
                prev_instr: at,
                entry: false,
            })
            .to_vec()
    }

    fn lines(stack: &Frames) -> Vec<(String, u32)> {
        stack
            .iter()
            .map(|f| (f.function.to_string(), f.line))
            .collect()
    }

    #[test]
    fn frames_named_as_the_last_walk_named_them_skip_the_cache_while_it_drops_nothing() {
        let layout = Layout::for_version(3, 10).expect("3.10's layout");
        let (mut codes, mut ids) = two_frames();
        let mut recent = RecentStacks::default();
        let first = name(layout, &mut codes, &ids, &walk(2, 6), &mut recent).expect("named");
        assert_eq!(lines(&first), [("inner".into(), 1), ("outer".into(), 2)]);
        assert_eq!(codes.hits, 2, "both frames looked up");
        // The same walk: the same stack, and nothing looked up.
        let again = name(layout, &mut codes, &ids, &walk(2, 6), &mut recent).expect("named");
        assert!(Arc::ptr_eq(&first, &again));
        assert_eq!(codes.hits, 2);
        // So a load need not look them up either: the cache has them.
        let (inner, outer) = (CodeId::for_test(2), CodeId::for_test(1));
        assert!(recent.named_before(&codes, &walk(2, 6), 0, &inner));
        assert!(recent.named_before(&codes, &walk(2, 6), 1, &outer));
        assert!(!recent.named_before(&codes, &walk(3, 6), 0, &inner));
        assert!(!recent.named_before(&codes, &walk(2, 6), 1, &CodeId::for_test(9)));
        assert!(!recent.named_before(&codes, &walk(2, 6), 2, &outer));
        // The inner frame moved on: only it is looked up, and its new line read.
        let moved = name(layout, &mut codes, &ids, &walk(7, 6), &mut recent).expect("named");
        assert_eq!(lines(&moved), [("inner".into(), 2), ("outer".into(), 2)]);
        assert_eq!(codes.hits, 3);
        // One frame deeper, the same two below it: the new one alone is looked up.
        let mut deeper = walk(7, 6);
        deeper.insert(
            0,
            RawFrame {
                addr: 0x3010,
                code: INNER,
                prev_instr: 12,
                entry: false,
            },
        );
        let stack = name(layout, &mut codes, &ids, &deeper, &mut recent).expect("named");
        assert_eq!(lines(&stack)[0], ("inner".into(), 3));
        assert_eq!(codes.hits, 4);
        // Another object read at the outer frame's address: looked up, found not to be
        // the one cached, dropped, and its frame left out.
        ids.insert(OUTER, Some(CodeId::for_test(9)));
        let other = name(layout, &mut codes, &ids, &walk(7, 6), &mut recent).expect("named");
        assert_eq!(lines(&other), [("inner".into(), 2)]);
        assert_eq!(codes.replaced, 1);
        // The object cached is back: its frame is looked up (the last naming was of another).
        ids.insert(OUTER, Some(CodeId::for_test(1)));
        codes.insert_named(OUTER, CodeId::for_test(1), ("outer", "a.py"), lines_of());
        let back = name(layout, &mut codes, &ids, &walk(7, 6), &mut recent).expect("named");
        assert_eq!(lines(&back), [("inner".into(), 2), ("outer".into(), 2)]);
        assert_eq!(codes.hits, 5);
        // The cache drops an entry (a snapshot read another object at the inner frame's
        // address), and has it again: nothing of the last naming is taken.
        codes.note_read(INNER, Some(&CodeId::for_test(8)), std::time::Instant::now());
        assert!(!recent.named_before(&codes, &walk(7, 6), 1, &outer));
        codes.insert_named(INNER, CodeId::for_test(2), ("inner", "a.py"), lines_of());
        name(layout, &mut codes, &ids, &walk(7, 6), &mut recent).expect("named");
        assert_eq!(codes.hits, 7);
        // A frame the cache could not name (its code object's load failed) is looked up
        // again, and not skipped by a load: once loaded, it is named.
        let (mut codes, mut ids) = two_frames();
        codes.note_read(INNER, Some(&CodeId::for_test(8)), std::time::Instant::now());
        let mut recent = RecentStacks::default();
        let gap = name(layout, &mut codes, &ids, &walk(7, 6), &mut recent).expect("named");
        assert_eq!(lines(&gap), [("outer".into(), 2)]);
        assert!(!recent.named_before(&codes, &walk(7, 6), 0, &inner));
        assert!(recent.named_before(&codes, &walk(7, 6), 1, &outer));
        codes.insert_named(INNER, CodeId::for_test(2), ("inner", "a.py"), lines_of());
        let loaded = name(layout, &mut codes, &ids, &walk(7, 6), &mut recent).expect("named");
        assert_eq!(lines(&loaded), [("inner".into(), 2), ("outer".into(), 2)]);
        // A frame whose code object was not identified fails the naming, as before.
        ids.remove(&INNER);
        assert!(name(layout, &mut codes, &ids, &walk(7, 6), &mut recent).is_err());
    }

    #[test]
    fn a_thread_back_at_a_stack_gets_that_very_stack_and_a_new_line_is_a_new_stack() {
        let (run, spin) = (
            Frame::python("run", "a.py", 3),
            Frame::python("spin", "a.py", 10),
        );
        let at_10: Frames = vec![spin.clone(), run.clone()].into();
        let mut at_11_frames = vec![spin.clone(), run.clone()];
        at_11_frames[0].line = 11;
        let at_11: Frames = at_11_frames.into();
        let mut recent = RecentStacks::default();
        assert!(recent.find(&seen(&at_10)).is_none());
        recent.remember(&at_10);
        recent.remember(&at_11);
        let again = recent.find(&seen(&at_10)).expect("line 10 is known");
        assert!(Arc::ptr_eq(&again, &at_10));
        let again = recent.find(&seen(&at_11)).expect("line 11 is known");
        assert!(Arc::ptr_eq(&again, &at_11));
        // The same names and lines in strings of their own are not the same frames: the
        // addresses are what is compared, and an equal copy is still a stack of its own.
        let copy: Frames = vec![Frame::python("spin", "a.py", 10), run.clone()].into();
        assert!(recent.find(&seen(&copy)).is_none());
        // One frame fewer is another stack.
        let shorter: Frames = vec![run.clone()].into();
        assert!(recent.find(&seen(&shorter)).is_none());
    }

    #[test]
    fn a_stack_is_sound_once_proven_and_only_that_very_stack() {
        let at_10: Frames = vec![Frame::python("spin", "a.py", 10)].into();
        let at_11: Frames = vec![Frame::python("spin", "a.py", 11)].into();
        let mut recent = RecentStacks::default();
        recent.remember(&at_10);
        recent.remember(&at_11);
        assert!(!recent.any_proven());
        recent.prove(&at_10);
        assert!(recent.is_proven(&at_10));
        assert!(!recent.is_proven(&at_11));
        assert!(recent.any_proven());
        // An equal stack of its own strings is another stack, never proven by this one.
        let copy: Frames = vec![Frame::python("spin", "a.py", 10)].into();
        assert!(!recent.is_proven(&copy));
        recent.prove(&copy);
        assert!(!recent.is_proven(&copy));
        // Found again, it keeps its mark.
        let again = recent.find(&seen(&at_10)).expect("known");
        assert!(recent.is_proven(&again));
        // Stacks no sound read gave (a torn read's among them) push out their like first.
        let torn: Vec<Frames> = (0..RECENT_STACKS as u32)
            .map(|line| vec![Frame::python("f", "b.py", line)].into())
            .collect();
        for stack in &torn {
            recent.remember(stack);
        }
        assert!(
            recent.is_proven(&at_10),
            "a proven stack outlives unproven ones"
        );
        assert!(
            recent.find(&seen(&torn[0])).is_none(),
            "the oldest unproven went"
        );
        // Once all are proven, the oldest goes.
        for stack in &torn[1..] {
            recent.prove(stack);
        }
        recent.remember(&vec![Frame::python("g", "b.py", 1)].into());
        assert!(!recent.is_proven(&at_10));
    }

    #[test]
    fn a_callers_line_is_taken_from_the_one_proven_stack_that_calls_the_same_way() {
        let (leaf, run) = (
            Frame::python("leaf", "a.py", 2),
            Frame::python("run", "a.py", 9),
        );
        let spin = |line| Frame {
            line,
            ..Frame::python("spin", "a.py", 0)
        };
        let share = |stack: &[&Frame], line: u32| -> Frames {
            // The same strings as the others: frames compare by the strings' addresses.
            let mut frames: Vec<Frame> = stack.iter().map(|f| (*f).clone()).collect();
            frames[1].line = line;
            frames.into()
        };
        let base = spin(10);
        let called_at_10 = share(&[&leaf, &base, &run], 10);
        let torn_at_11 = share(&[&leaf, &base, &run], 11);
        let mut recent = RecentStacks::default();
        recent.remember(&called_at_10);
        // Not proven: nothing stands in for it.
        assert!(recent.proven_for(&torn_at_11[..], 1).is_none());
        recent.prove(&called_at_10);
        let found = recent
            .proven_for(&torn_at_11[..], 1)
            .expect("the caller's line at the call");
        assert!(Arc::ptr_eq(&found.stack, &called_at_10) && found.relaxed);
        let found = recent.proven_for(&called_at_10[..], 1).expect("itself");
        assert!(Arc::ptr_eq(&found.stack, &called_at_10) && !found.relaxed);
        // Called from two lines: which one is not known.
        let called_at_12 = share(&[&leaf, &base, &run], 12);
        recent.remember(&called_at_12);
        recent.prove(&called_at_12);
        assert!(recent.proven_for(&torn_at_11[..], 1).is_none());
        // Only the caller's line may differ: not the callee's, nor the frames under.
        let mut deeper: Vec<Frame> = called_at_10.to_vec();
        deeper[2].line = 3;
        let deeper: Frames = deeper.into();
        assert!(recent.proven_for(&deeper[..], 1).is_none());
    }

    #[test]
    fn only_the_last_few_stacks_are_kept() {
        let mut recent = RecentStacks::default();
        let stacks: Vec<Frames> = (0..=RECENT_STACKS as u32)
            .map(|line| vec![Frame::python("f", "a.py", line)].into())
            .collect();
        for s in &stacks {
            recent.remember(s);
        }
        assert!(
            recent.find(&seen(&stacks[0])).is_none(),
            "the oldest is gone"
        );
        assert!(recent.find(&seen(&stacks[RECENT_STACKS])).is_some());
        assert!(recent.find(&seen(&stacks[1])).is_some());
    }
}
