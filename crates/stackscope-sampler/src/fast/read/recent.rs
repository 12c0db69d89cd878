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
    // First each frame's names (by address) and line, with no reference counted: a busy
    // thread is most often back at a stack it had, and handing that on costs one count
    // instead of two per frame, on counts the consumer's thread drops on its own core.
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

/// One frame of a walk, named: its strings by address (alive as long as the code cache or a
/// stack holds them, so an address names one string), and its line.
pub(crate) struct SeenFrame {
    pub code: usize,
    pub function: *const str,
    pub file: *const str,
    pub line: u32,
}

/// How many distinct stacks a thread's [`RecentStacks`] keeps: a busy loop goes round a few.
const RECENT_STACKS: usize = 8;

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
        let pos = self.stacks.iter().position(|(stack, _)| {
            stack.len() == seen.len()
                && stack.iter().zip(seen).all(|(f, s)| {
                    f.line == s.line
                        && std::ptr::addr_eq(Arc::as_ptr(&f.function), s.function)
                        && std::ptr::addr_eq(Arc::as_ptr(&f.file), s.file)
                })
        })?;
        // Newest first: a loop's stacks stay near the front.
        self.stacks[..=pos].rotate_right(1);
        Some(self.stacks[0].0.clone())
    }

    /// Keeps `stack`, not yet known to be sound.
    pub(crate) fn remember(&mut self, stack: &Frames) {
        if self.stacks.len() == RECENT_STACKS {
            self.stacks.pop();
        }
        self.stacks.insert(0, (stack.clone(), false));
    }

    /// Marks `stack` (one handed out by [`name`], this very one) as given by a sound read.
    pub(crate) fn prove(&mut self, stack: &Frames) {
        if let Some(entry) = self.stacks.iter_mut().find(|(s, _)| Arc::ptr_eq(s, stack)) {
            entry.1 = true;
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
        // Found again, it keeps its mark; pushed out, it is gone with it.
        let again = recent.find(&seen(&at_10)).expect("known");
        assert!(recent.is_proven(&again));
        for line in 0..RECENT_STACKS as u32 {
            recent.remember(&vec![Frame::python("f", "b.py", line)].into());
        }
        assert!(!recent.any_proven());
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
