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
    let seen = see(layout, codes, ids, raw)?;
    if let Some(stack) = recent.find(&seen) {
        return Ok(stack);
    }
    let mut out = Vec::with_capacity(seen.len());
    for s in &seen {
        // Found good by the first pass, a moment ago.
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
    recent: &RecentStacks,
) -> Option<Proven> {
    let seen = see(layout, codes, ids, raw).ok()?;
    recent.proven_for(&seen, callers)
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

/// Each frame's names (by address) and line, with no reference counted: a busy thread is
/// most often back at a stack it had, and handing that on costs one count instead of two per
/// frame, on counts the consumer's thread drops on its own core.
fn see(
    layout: &Layout,
    codes: &mut CodeCache,
    ids: &AddrMap<Option<CodeId>>,
    raw: &[RawFrame],
) -> Result<Vec<SeenFrame>, String> {
    let mut seen: Vec<SeenFrame> = Vec::with_capacity(raw.len());
    for f in raw {
        let Some(Some(id)) = ids.get(&f.code) else {
            return Err("Failed to copy PyCodeObject".to_owned());
        };
        // Byte offset of the instruction from the bytecode's start, as py-spy computes it
        // (3.10: twice `f_lasti`, an index of two-byte code units).
        let lasti = match layout.frames {
            FrameDesign::Chunks => (f.prev_instr.wrapping_sub(f.code) as isize as i32)
                .wrapping_sub(layout.co_code_adaptive as i32),
            FrameDesign::Objects => (f.prev_instr as isize as i32).wrapping_mul(2),
        };
        let Some(info) = codes.get(f.code, id) else {
            // Its strings could not be read: py-spy leaves such a frame out.
            continue;
        };
        let Some(names) = &info.names else { continue };
        seen.push(SeenFrame {
            code: f.code,
            function: Arc::as_ptr(&names.function),
            file: Arc::as_ptr(&names.file),
            line: u32::try_from(info.lines.line(lasti)).unwrap_or(0),
        });
    }
    Ok(seen)
}

/// One frame of a walk, named: its strings by address (alive as long as the code cache or a
/// stack holds them, so an address names one string), and its line.
pub(crate) struct SeenFrame {
    pub code: usize,
    pub function: *const str,
    pub file: *const str,
    pub line: u32,
}

/// A frame as stacks are compared: its strings by address, and its line.
pub(crate) trait FrameKey {
    fn key(&self) -> (*const str, *const str, u32);
}

impl FrameKey for SeenFrame {
    fn key(&self) -> (*const str, *const str, u32) {
        (self.function, self.file, self.line)
    }
}

impl FrameKey for Frame {
    fn key(&self) -> (*const str, *const str, u32) {
        (
            Arc::as_ptr(&self.function),
            Arc::as_ptr(&self.file),
            self.line,
        )
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
            std::ptr::addr_eq(Arc::as_ptr(&f.function), function)
                && std::ptr::addr_eq(Arc::as_ptr(&f.file), file)
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

    /// Whether any of these stacks was given by a sound read.
    pub(crate) fn any_proven(&self) -> bool {
        self.stacks.iter().any(|(_, proven)| *proven)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn seen(stack: &Frames) -> Vec<SeenFrame> {
        stack
            .iter()
            .map(|f| SeenFrame {
                code: 0,
                function: Arc::as_ptr(&f.function),
                file: Arc::as_ptr(&f.file),
                line: f.line,
            })
            .collect()
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
