//! Interned stacks: each distinct frame and each distinct stack is stored once, with counts.
//!
//! A recording can last days at 100 Hz over dozens of threads, but a program has only so many
//! distinct stacks; interning keeps memory proportional to the latter.

use std::collections::HashMap;
use std::sync::Arc;

use stackscope_event::Frame;

/// Index of an interned frame (a thread root or a code frame).
pub type FrameId = u32;
/// Index of an interned stack.
pub type StackId = u32;
/// Index of an interned function, identified by `(function, file)`.
pub type FunctionId = u32;

/// Which GPU state a kept sample was tagged with.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum GpuTag {
    Idle,
    Busy,
    Unknown,
}

/// Sample counts of one stack, by GPU state.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct StackCounts {
    pub all: u64,
    pub gpu_idle: u64,
    pub gpu_busy: u64,
    pub gpu_unknown: u64,
}

#[derive(Debug)]
pub struct FrameEntry {
    /// The label as written into folded lines, already made safe for the format.
    pub label: String,
    /// The function this frame runs; `None` for the thread root, which is not code.
    pub function: Option<FunctionId>,
}

#[derive(Debug)]
pub struct StackEntry {
    /// Root first: the thread root, then frames outermost to innermost.
    pub frames: Box<[FrameId]>,
    pub counts: StackCounts,
}

/// The function a frame belongs to; recursion and different lines of it count as one.
#[derive(Debug, Clone, PartialEq, Eq, Hash)]
pub struct FunctionKey {
    pub function: Arc<str>,
    pub file: Arc<str>,
}

#[derive(Debug, Default)]
pub struct StackTable {
    frames: Vec<FrameEntry>,
    frame_ids: HashMap<Frame, FrameId>,
    thread_ids: HashMap<String, FrameId>,
    functions: Vec<FunctionKey>,
    function_ids: HashMap<FunctionKey, FunctionId>,
    stacks: Vec<StackEntry>,
    stack_ids: HashMap<Box<[FrameId]>, StackId>,
    /// Reused between calls so interning a sample does not allocate once its stack is known.
    scratch: Vec<FrameId>,
}

/// Make a label safe for the folded format: ';' separates frames and a newline ends a line.
pub fn sanitize_label(label: &str) -> String {
    label.replace(';', ":").replace(['\n', '\r'], " ")
}

impl StackTable {
    /// Interns one sample's stack. `frames` is innermost first, as the sampler reads it.
    pub fn intern(&mut self, thread_name: &str, frames: &[Frame]) -> StackId {
        let mut key = std::mem::take(&mut self.scratch);
        key.clear();
        key.push(self.intern_thread(thread_name));
        for frame in frames.iter().rev() {
            let id = self.intern_frame(frame);
            key.push(id);
        }
        let id = match self.stack_ids.get(key.as_slice()) {
            Some(&id) => id,
            None => {
                let id = self.stacks.len() as StackId;
                let boxed: Box<[FrameId]> = key.as_slice().into();
                self.stacks.push(StackEntry {
                    frames: boxed.clone(),
                    counts: StackCounts::default(),
                });
                self.stack_ids.insert(boxed, id);
                id
            }
        };
        self.scratch = key;
        id
    }

    fn intern_thread(&mut self, name: &str) -> FrameId {
        if let Some(&id) = self.thread_ids.get(name) {
            return id;
        }
        let id = self.push_frame(FrameEntry {
            label: sanitize_label(name),
            function: None,
        });
        self.thread_ids.insert(name.to_owned(), id);
        id
    }

    fn intern_frame(&mut self, frame: &Frame) -> FrameId {
        if let Some(&id) = self.frame_ids.get(frame) {
            return id;
        }
        let function = self.intern_function(FunctionKey {
            function: frame.function.clone(),
            file: frame.file.clone(),
        });
        let id = self.push_frame(FrameEntry {
            label: sanitize_label(&frame.label()),
            function: Some(function),
        });
        self.frame_ids.insert(frame.clone(), id);
        id
    }

    fn intern_function(&mut self, key: FunctionKey) -> FunctionId {
        if let Some(&id) = self.function_ids.get(&key) {
            return id;
        }
        let id = self.functions.len() as FunctionId;
        self.functions.push(key.clone());
        self.function_ids.insert(key, id);
        id
    }

    fn push_frame(&mut self, entry: FrameEntry) -> FrameId {
        let id = self.frames.len() as FrameId;
        self.frames.push(entry);
        id
    }

    /// Adds one sample of `stack` to the `all` count.
    pub fn count(&mut self, stack: StackId) {
        if let Some(entry) = self.stacks.get_mut(stack as usize) {
            entry.counts.all += 1;
        }
    }

    /// Adds one sample of `stack` to the count of its GPU state.
    pub fn count_tag(&mut self, stack: StackId, tag: GpuTag) {
        if let Some(entry) = self.stacks.get_mut(stack as usize) {
            match tag {
                GpuTag::Idle => entry.counts.gpu_idle += 1,
                GpuTag::Busy => entry.counts.gpu_busy += 1,
                GpuTag::Unknown => entry.counts.gpu_unknown += 1,
            }
        }
    }

    pub fn stacks(&self) -> &[StackEntry] {
        &self.stacks
    }

    pub fn frame(&self, id: FrameId) -> Option<&FrameEntry> {
        self.frames.get(id as usize)
    }

    pub fn function(&self, id: FunctionId) -> Option<&FunctionKey> {
        self.functions.get(id as usize)
    }

    pub fn function_count(&self) -> usize {
        self.functions.len()
    }

    /// The folded line of a stack, without its count: `thread;outer;...;inner`.
    pub fn folded_stack(&self, stack: &StackEntry) -> String {
        let mut line = String::new();
        for (i, &id) in stack.frames.iter().enumerate() {
            if i > 0 {
                line.push(';');
            }
            if let Some(frame) = self.frame(id) {
                line.push_str(&frame.label);
            }
        }
        line
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn same_stack_interns_once() {
        let mut table = StackTable::default();
        let frames = vec![
            Frame::python("inner", "a.py", 3),
            Frame::python("outer", "a.py", 10),
        ];
        let a = table.intern("MainThread", &frames);
        let b = table.intern("MainThread", &frames.clone());
        let c = table.intern("worker", &frames);
        assert_eq!(a, b);
        assert_ne!(a, c);
        assert_eq!(table.stacks().len(), 2);
        // Two threads share the code frames: 2 roots + 2 frames.
        assert_eq!(table.frames.len(), 4);
        assert_eq!(table.function_count(), 2);
    }

    #[test]
    fn folded_stack_is_root_first_and_sanitized() {
        let mut table = StackTable::default();
        let frames = vec![
            Frame::python("in;ner", "a.py", 3),
            Frame::python("outer", "a.py", 10),
        ];
        let id = table.intern("Main;Thread", &frames);
        let line = table.folded_stack(&table.stacks()[id as usize]);
        assert_eq!(line, "Main:Thread;outer (a.py:10);in:ner (a.py:3)");
    }

    #[test]
    fn lines_of_one_function_share_its_id() {
        let mut table = StackTable::default();
        table.intern("t", &[Frame::python("f", "a.py", 1)]);
        table.intern("t", &[Frame::python("f", "a.py", 2)]);
        table.intern("t", &[Frame::python("f", "b.py", 2)]);
        assert_eq!(table.function_count(), 2);
        assert_eq!(table.stacks().len(), 3);
    }
}
