//! What a sample leaves out, read once for a dump: each frame's file path and local
//! variables, and which frames entered the eval loop (where a native stack is merged in).
//!
//! It is made with the process stopped, right after [`super::FastReader::read`] took the stacks,
//! for the interpreters whose `_Py_DebugOffsets` describes code objects and values (3.13 and
//! later, [`ObjectLayout`]). Speed does not matter here, plain reads do: frame by frame
//! from each thread's `current_frame`, through the same frames the sample walked (the
//! entry frames and 3.15's base frame, which hold no code, left out the same way), so the
//! Nth frame here is the Nth of the sample's stack.

use super::layout::{common, i32_at, usize_at, Layout, ObjectLayout};
use super::memory::remote::Remote;
use super::objects::code::read_strings;
use super::objects::values::{Values, MAX_REPR};
use super::read::stack::MAX_FRAMES;

/// `CO_FAST_HIDDEN` (Include/internal/pycore_code.h): a slot of a comprehension inlined
/// into its function, not a variable of the function's own.
const CO_FAST_HIDDEN: u8 = 0x10;
/// Local slots read per frame.
const MAX_LOCALS: usize = 4096;

/// One thread's frames as the deep read saw them, innermost first.
#[derive(Debug, Default)]
pub(crate) struct DeepThread {
    /// The interpreter's id of the thread (`thread_id`), as [`super::ThreadRead`] has it.
    pub thread_id: u64,
    pub frames: Vec<DeepFrame>,
}

#[derive(Debug, Default, Clone, PartialEq, Eq)]
pub(crate) struct DeepFrame {
    /// The code's file name as the interpreter holds it (an absolute path, mostly).
    pub path: Option<String>,
    /// Whether this frame is the first one its call of the eval loop ran: the one that
    /// claims the loop's native frame when stacks are merged.
    pub entry: bool,
    /// Empty unless locals were asked for.
    pub locals: Vec<Local>,
}

#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) struct Local {
    pub name: String,
    /// An argument of the function rather than a variable of its body.
    pub arg: bool,
    pub repr: String,
}

/// Reads threads' frames afresh, frame by frame, for the interpreters whose layout describes
/// code objects and values.
pub(crate) struct DeepReader<'a> {
    remote: &'a mut Remote,
    layout: &'a Layout,
    objects: ObjectLayout,
}

impl<'a> DeepReader<'a> {
    /// `None` for an interpreter whose layout does not describe objects (before 3.13).
    pub(crate) fn new(remote: &'a mut Remote, layout: &'a Layout) -> Option<DeepReader<'a>> {
        Some(DeepReader {
            objects: layout.objects?,
            remote,
            layout,
        })
    }

    /// The frames of the threads whose thread states are at `tstates`; with `locals`, their
    /// local variables too. A thread whose walk fails is left out (its stack then shows
    /// without them).
    pub(crate) fn threads(mut self, tstates: &[usize], locals: bool) -> Vec<DeepThread> {
        tstates
            .iter()
            .filter_map(|&tstate| self.thread(tstate, locals))
            .collect()
    }
    fn thread(&mut self, tstate: usize, locals: bool) -> Option<DeepThread> {
        let layout = self.layout;
        let ts = self.remote.read(tstate, layout.ts_read_len).ok()?;
        let thread_id = usize_at(&ts, layout.ts_thread_id)? as u64;
        let mut frame = usize_at(&ts, layout.cframe_current_frame)?;
        let mut frames: Vec<DeepFrame> = Vec::new();
        let mut codes = Vec::new();
        for _ in 0..MAX_FRAMES {
            if frame == 0 {
                break;
            }
            let header = self.remote.read(frame, layout.fr_header_len).ok()?;
            let owner = header.get(layout.fr_owner).copied()?;
            let code = usize_at(&header, layout.fr_code)? & !layout.code_tag_bits;
            let shim = layout.owner_shims_from.is_some_and(|from| owner >= from);
            if shim || code == 0 {
                if let Some(last) = frames.last_mut() {
                    last.entry = true;
                }
            } else {
                let locals = if locals {
                    self.locals(frame, code)
                } else {
                    Vec::new()
                };
                frames.push(DeepFrame {
                    path: None,
                    entry: false,
                    locals,
                });
                codes.push(code);
            }
            frame = usize_at(&header, layout.fr_previous)?;
        }
        if frame != 0 {
            return None;
        }
        if let Some(outermost) = frames.last_mut() {
            outermost.entry = true;
        }
        self.fill_paths(&mut frames, &codes);
        Some(DeepThread { thread_id, frames })
    }

    /// Each frame's `co_filename`.
    fn fill_paths(&mut self, frames: &mut [DeepFrame], codes: &[usize]) {
        let layout = self.layout;
        let names: Vec<usize> = codes
            .iter()
            .map(|&code| {
                self.remote
                    .read(code + layout.co_filename, 8)
                    .ok()
                    .and_then(|b| usize_at(&b, 0))
                    .unwrap_or(0)
            })
            .collect();
        if let Ok(paths) = read_strings(self.remote, layout, &names) {
            for (frame, path) in frames.iter_mut().zip(paths) {
                frame.path = path;
            }
        }
    }

    /// The frame's set local variables (arguments, then its body's), by the code object's
    /// `co_localsplusnames` and `co_localspluskinds`; unset and hidden slots left out.
    fn locals(&mut self, frame: usize, code: usize) -> Vec<Local> {
        self.try_locals(frame, code).unwrap_or_default()
    }

    fn try_locals(&mut self, frame: usize, code: usize) -> Option<Vec<Local>> {
        let o = self.objects;
        let layout = self.layout;
        let code_len = o
            .co_localsplusnames
            .max(o.co_localspluskinds)
            .max(o.co_argcount)
            + 8;
        let head = self.remote.read(code, code_len).ok()?;
        let argcount = usize::try_from(i32_at(&head, o.co_argcount)?).ok()?;
        let names_tuple = usize_at(&head, o.co_localsplusnames)?;
        let kinds_bytes = usize_at(&head, o.co_localspluskinds)?;
        let count = usize_at(&self.remote.read(names_tuple, 24).ok()?, common::OB_SIZE)?;
        if count > MAX_LOCALS {
            return None;
        }
        let name_ptrs = self
            .remote
            .read(names_tuple + o.tuple_items, 8 * count)
            .ok()?;
        let kinds = self.remote.read(kinds_bytes + o.bytes_data, count).ok()?;
        let slots = self
            .remote
            .read(frame + layout.fr_header_len, 8 * count)
            .ok()?;
        let wanted: Vec<usize> = (0..count)
            .filter(|&i| kinds.get(i).is_some_and(|k| k & CO_FAST_HIDDEN == 0))
            .filter(|&i| usize_at(&slots, 8 * i).is_some_and(|v| v != 0))
            .collect();
        let name_addrs: Vec<usize> = wanted
            .iter()
            .map(|&i| usize_at(&name_ptrs, 8 * i).unwrap_or(0))
            .collect();
        let names = read_strings(self.remote, layout, &name_addrs).ok()?;
        let mut values = Values {
            remote: self.remote,
            layout,
            objects: &o,
        };
        Some(
            wanted
                .iter()
                .zip(names)
                .filter_map(|(&i, name)| {
                    let bits = usize_at(&slots, 8 * i)?;
                    Some(Local {
                        name: name?,
                        arg: i < argcount,
                        repr: values.repr(bits, MAX_REPR),
                    })
                })
                .collect(),
        )
    }
}
