//! Interned stacks: each distinct frame and each distinct stack is stored once, with counts.
//!
//! A recording can last days at 100 Hz over dozens of threads, but a program has only so many
//! distinct stacks; interning keeps memory proportional to the latter.

use foldhash::HashMap;
use std::sync::Arc;

use stackscope_event::{FileOrigin, Frame, Frames, LastStacks};

use super::limits::{Limits, FRAME_TABLE_FULL, OTHER_PROCESSES, OTHER_THREADS, STACK_TABLE_FULL};
use crate::gpu::GpuTag;

/// Index of an interned frame (a thread root or a code frame).
pub type FrameId = u32;
/// Index of an interned stack.
pub type StackId = u32;
/// Index of an interned function, identified by `(function, file)`.
pub type FunctionId = u32;

/// Sample counts of one stack, by GPU state.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct StackCounts {
    pub all: u64,
    pub gpu_idle: u64,
    pub gpu_busy: u64,
    pub gpu_unknown: u64,
    /// Of `gpu_busy`, the samples taken while SM activity was low.
    pub gpu_low_sm: u64,
    /// Of all, the samples of the start-up a `record` leaves out of the verdict.
    pub startup: u64,
}

#[derive(Debug)]
pub struct FrameEntry {
    /// The label as written into folded lines, already made safe for the format.
    pub label: String,
    /// The function this frame runs; `None` for the thread root, which is not code.
    pub function: Option<FunctionId>,
    /// Where its code comes from; [`FileOrigin::Native`] for roots and placeholders too.
    pub origin: FileOrigin,
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

/// Placeholder frames, created on first use and never counted against a cap.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Special {
    StackFull,
    FrameFull,
    OtherThreads,
    OtherProcesses,
}

impl Special {
    const ALL: usize = 4;

    fn label(self) -> &'static str {
        match self {
            Special::StackFull => STACK_TABLE_FULL,
            Special::FrameFull => FRAME_TABLE_FULL,
            Special::OtherThreads => OTHER_THREADS,
            Special::OtherProcesses => OTHER_PROCESSES,
        }
    }
}

/// What the caps turned away, for the summary's `caps_reached`.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct TableOverflow {
    /// Samples of a new stack counted as `[stack table full]`.
    pub stack_samples: u64,
    /// Samples with at least one new frame shown as `[frame table full]`.
    pub frame_samples: u64,
    /// Samples of a thread whose new name was rooted at `[other threads]`.
    pub thread_root_samples: u64,
    /// Processes rooted at `[other processes]`.
    pub process_roots: u64,
}

#[derive(Debug)]
pub struct StackTable {
    limits: Limits,
    frames: Vec<FrameEntry>,
    frame_ids: HashMap<Frame, FrameId>,
    thread_ids: HashMap<String, FrameId>,
    process_ids: HashMap<String, FrameId>,
    /// Roots of threads whose name is not known yet, one per thread: renamed once it is.
    unnamed_roots: usize,
    functions: Vec<FunctionKey>,
    function_ids: HashMap<FunctionKey, FunctionId>,
    stacks: Vec<StackEntry>,
    stack_ids: HashMap<Box<[FrameId]>, StackId>,
    specials: [Option<FrameId>; Special::ALL],
    overflow: TableOverflow,
    /// Reused between calls so interning a sample does not allocate once its stack is known.
    scratch: Vec<FrameId>,
    /// Each thread's (each root list's) last stack, as read and as interned.
    last: LastStacks<[FrameId; 2], StackId>,
}

impl Default for StackTable {
    fn default() -> Self {
        StackTable::new(Limits::default())
    }
}

/// Make a label safe for the folded format: ';' separates frames and a newline ends a line.
pub fn sanitize_label(label: &str) -> String {
    label.replace(';', ":").replace(['\n', '\r'], " ")
}

impl StackTable {
    pub fn new(limits: Limits) -> StackTable {
        StackTable {
            limits: limits.sane(),
            frames: Vec::new(),
            frame_ids: HashMap::default(),
            thread_ids: HashMap::default(),
            process_ids: HashMap::default(),
            unnamed_roots: 0,
            functions: Vec::new(),
            function_ids: HashMap::default(),
            stacks: Vec::new(),
            stack_ids: HashMap::default(),
            specials: [None; Special::ALL],
            overflow: TableOverflow::default(),
            scratch: Vec::new(),
            last: LastStacks::default(),
        }
    }

    /// Interns one sample's stack under `roots` (a process root, a thread root, outermost
    /// first). `frames` is innermost first, as the sampler reads it; a thread's stack shared
    /// with its last sample is found by its pointer.
    pub fn intern(&mut self, roots: &[FrameId], frames: &Frames) -> StackId {
        let last_key = match roots {
            [thread] => Some([*thread, FrameId::MAX]),
            [process, thread] => Some([*process, *thread]),
            _ => None,
        };
        if let Some(id) = last_key.and_then(|k| self.last.get(&k, frames)) {
            return id;
        }
        let overflowed = (self.overflow.frame_samples, self.overflow.stack_samples);
        let id = self.intern_uncached(roots, frames);
        // A sample that met a full table is counted each time: it is never taken from memory.
        if let Some(k) = last_key {
            if overflowed == (self.overflow.frame_samples, self.overflow.stack_samples) {
                self.last.remember(k, frames, id);
            }
        }
        id
    }

    fn intern_uncached(&mut self, roots: &[FrameId], frames: &[Frame]) -> StackId {
        let mut key = std::mem::take(&mut self.scratch);
        key.clear();
        key.extend_from_slice(roots);
        let mut frame_overflow = false;
        for frame in frames.iter().rev() {
            let id = match self.frame_ids.get(frame) {
                Some(&id) => id,
                None => self.new_frame(frame).unwrap_or_else(|| {
                    frame_overflow = true;
                    self.special(Special::FrameFull)
                }),
            };
            key.push(id);
        }
        if frame_overflow {
            self.overflow.frame_samples += 1;
        }
        let id = match self.stack_ids.get(key.as_slice()) {
            Some(&id) => id,
            None => self.new_stack(&mut key, roots.len()),
        };
        self.scratch = key;
        id
    }

    /// A new stack, or past the cap the `[stack table full]` stack under the same roots; when
    /// even the room kept for those is gone, the one root-less `[stack table full]` stack.
    /// The table never holds more than `max_stacks`.
    fn new_stack(&mut self, key: &mut Vec<FrameId>, roots: usize) -> StackId {
        let room = self.limits.max_stacks.saturating_sub(self.stacks.len());
        // Room kept for the placeholders, so that samples of a thread met after the table
        // filled up still show under their own thread.
        let reserve = (self.limits.max_stacks / 16).clamp(2, 1024);
        if room > reserve {
            return self.insert_stack(key);
        }
        self.overflow.stack_samples += 1;
        let full = self.special(Special::StackFull);
        key.truncate(roots);
        key.push(full);
        if let Some(&id) = self.stack_ids.get(key.as_slice()) {
            return id;
        }
        if room > 1 {
            return self.insert_stack(key);
        }
        key.clear();
        key.push(full);
        match self.stack_ids.get(key.as_slice()) {
            Some(&id) => id,
            // Reached with exactly one slot left: the last slot is this stack's.
            None => self.insert_stack(key),
        }
    }

    fn insert_stack(&mut self, key: &[FrameId]) -> StackId {
        let id = self.stacks.len() as StackId;
        let boxed: Box<[FrameId]> = key.into();
        self.stacks.push(StackEntry {
            frames: boxed.clone(),
            counts: StackCounts::default(),
        });
        self.stack_ids.insert(boxed, id);
        id
    }

    /// The root frame of a thread's stacks, by the name shown for it; past the cap on distinct
    /// names, `[other threads]`.
    pub fn thread_root(&mut self, name: &str) -> FrameId {
        if let Some(&id) = self.thread_ids.get(name) {
            return id;
        }
        if self.thread_ids.len() >= self.limits.max_thread_roots {
            self.overflow.thread_root_samples += 1;
            return self.special(Special::OtherThreads);
        }
        let id = self.push_frame(FrameEntry {
            label: sanitize_label(name),
            function: None,
            origin: FileOrigin::Native,
        });
        self.thread_ids.insert(name.to_owned(), id);
        id
    }

    /// Whether `root` is a thread's own root, not the shared `[other threads]` one that
    /// samples past the cap go to (each counted).
    pub fn is_thread_root(&self, root: FrameId) -> bool {
        !self.specials.contains(&Some(root))
    }

    /// A root of its own for one thread whose name is not known yet (labelled by its id, as
    /// `thread 2561`), to be given the name with [`StackTable::name_thread_root`] once it is
    /// read: then every sample of the thread is under its name. Past the cap on distinct
    /// roots, `[other threads]`, which is never renamed.
    pub fn unnamed_thread_root(&mut self, label: &str) -> FrameId {
        if self.thread_ids.len() + self.unnamed_roots >= self.limits.max_thread_roots {
            self.overflow.thread_root_samples += 1;
            return self.special(Special::OtherThreads);
        }
        self.unnamed_roots += 1;
        self.push_frame(FrameEntry {
            label: sanitize_label(label),
            function: None,
            origin: FileOrigin::Native,
        })
    }

    /// Gives a root made by [`StackTable::unnamed_thread_root`] its thread's name. Folded
    /// lines are made at write time, so the thread's earlier stacks print under the name;
    /// lines that become equal to the named root's are merged there.
    pub fn name_thread_root(&mut self, root: FrameId, name: &str) {
        self.relabel_root(root, name);
    }

    /// The root frame of a process's stacks (`process PID COMMAND`); past the cap,
    /// `[other processes]`. Callers cache it per process, so the overflow counts processes.
    pub fn process_root(&mut self, label: &str) -> FrameId {
        if let Some(&id) = self.process_ids.get(label) {
            return id;
        }
        if self.process_ids.len() >= self.limits.max_processes {
            self.overflow.process_roots += 1;
            return self.special(Special::OtherProcesses);
        }
        let id = self.push_frame(FrameEntry {
            label: sanitize_label(label),
            function: None,
            origin: FileOrigin::Native,
        });
        self.process_ids.insert(label.to_owned(), id);
        id
    }

    /// The root frame of a group of like processes (`kinds.rs`): one frame of its own, whose
    /// label [`StackTable::relabel_root`] keeps up with the group's counts.
    pub fn group_root(&mut self, label: &str) -> FrameId {
        self.push_frame(FrameEntry {
            label: sanitize_label(label),
            function: None,
            origin: FileOrigin::Native,
        })
    }

    /// Gives a root frame (a thread's, a process's, a group's) another label: folded lines are
    /// made at write time, so every stack under it prints under the new one, and lines that
    /// become equal to another root's are merged there. Code frames and placeholders keep
    /// theirs.
    pub fn relabel_root(&mut self, root: FrameId, label: &str) {
        if self.specials.contains(&Some(root)) {
            return;
        }
        if let Some(frame) = self.frames.get_mut(root as usize) {
            if frame.function.is_none() {
                frame.label = sanitize_label(label);
            }
        }
    }

    /// Forgets the last stack remembered under a pair of roots whose thread ended.
    pub fn forget_roots(&mut self, process: Option<FrameId>, thread: FrameId) {
        let key = match process {
            Some(process) => [process, thread],
            None => [thread, FrameId::MAX],
        };
        self.last.forget(&key);
    }

    /// Interns a frame not seen before; `None` when the frame table is full.
    fn new_frame(&mut self, frame: &Frame) -> Option<FrameId> {
        if self.frame_ids.len() >= self.limits.max_frames {
            return None;
        }
        let function = self.intern_function(FunctionKey {
            function: frame.function.clone(),
            file: frame.file.clone(),
        });
        let id = self.push_frame(FrameEntry {
            label: sanitize_label(&frame.label()),
            function: Some(function),
            origin: frame.origin,
        });
        self.frame_ids.insert(frame.clone(), id);
        Some(id)
    }

    fn special(&mut self, special: Special) -> FrameId {
        if let Some(id) = self.specials[special as usize] {
            return id;
        }
        // Not code: no function, so placeholders never show among the top functions.
        let id = self.push_frame(FrameEntry {
            label: special.label().to_owned(),
            function: None,
            origin: FileOrigin::Native,
        });
        self.specials[special as usize] = Some(id);
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
    /// Counts one sample of the start-up a `record` leaves out.
    pub fn count_startup(&mut self, stack: StackId) {
        if let Some(entry) = self.stacks.get_mut(stack as usize) {
            entry.counts.startup += 1;
        }
    }

    pub fn count_tag(&mut self, stack: StackId, tag: GpuTag) {
        if let Some(entry) = self.stacks.get_mut(stack as usize) {
            match tag {
                GpuTag::Idle => entry.counts.gpu_idle += 1,
                GpuTag::Busy => entry.counts.gpu_busy += 1,
                GpuTag::BusyLowSm => {
                    entry.counts.gpu_busy += 1;
                    entry.counts.gpu_low_sm += 1;
                }
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

    /// Distinct code frames (not roots, not placeholders): what `max_frames` caps.
    pub fn code_frame_count(&self) -> usize {
        self.frame_ids.len()
    }

    pub fn thread_root_count(&self) -> usize {
        self.thread_ids.len()
    }

    pub fn process_root_count(&self) -> usize {
        self.process_ids.len()
    }

    pub fn overflow(&self) -> &TableOverflow {
        &self.overflow
    }

    /// Folded lines of `weighted` stacks (a count, or bytes), sorted by stack; stacks of no
    /// weight left out. Distinct frames can print alike (a native and a Python frame of one
    /// name), so equal lines are merged to keep the folded format's one-line-per-stack rule.
    pub fn folded_lines<'a>(
        &self,
        weighted: impl Iterator<Item = (&'a StackEntry, u64)>,
    ) -> Vec<(String, u64)> {
        let mut lines: Vec<(String, u64)> = weighted
            .filter(|&(_, weight)| weight > 0)
            .map(|(stack, weight)| (self.folded_stack(stack), weight))
            .collect();
        lines.sort_unstable();
        lines.dedup_by(|later, earlier| {
            if later.0 == earlier.0 {
                earlier.1 += later.1;
                true
            } else {
                false
            }
        });
        lines
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

    fn intern(table: &mut StackTable, thread: &str, frames: &[Frame]) -> StackId {
        let root = table.thread_root(thread);
        table.intern(&[root], &frames.into())
    }

    #[test]
    fn same_stack_interns_once() {
        let mut table = StackTable::default();
        let frames = vec![
            Frame::python("inner", "a.py", 3),
            Frame::python("outer", "a.py", 10),
        ];
        let a = intern(&mut table, "MainThread", &frames);
        let b = intern(&mut table, "MainThread", &frames.clone());
        let c = intern(&mut table, "worker", &frames);
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
        let id = intern(&mut table, "Main;Thread", &frames);
        let line = table.folded_stack(&table.stacks()[id as usize]);
        assert_eq!(line, "Main:Thread;outer (a.py:10);in:ner (a.py:3)");
    }

    #[test]
    fn process_root_comes_first() {
        let mut table = StackTable::default();
        let process = table.process_root("process 7 python a;b.py");
        let thread = table.thread_root("MainThread");
        let id = table.intern(
            &[process, thread],
            &vec![Frame::python("f", "a.py", 1)].into(),
        );
        let line = table.folded_stack(&table.stacks()[id as usize]);
        assert_eq!(line, "process 7 python a:b.py;MainThread;f (a.py:1)");
    }

    #[test]
    fn lines_of_one_function_share_its_id() {
        let mut table = StackTable::default();
        intern(&mut table, "t", &[Frame::python("f", "a.py", 1)]);
        intern(&mut table, "t", &[Frame::python("f", "a.py", 2)]);
        intern(&mut table, "t", &[Frame::python("f", "b.py", 2)]);
        assert_eq!(table.function_count(), 2);
        assert_eq!(table.stacks().len(), 3);
    }

    #[test]
    fn a_thread_that_stays_put_gets_its_last_stack_back() {
        let mut table = StackTable::default();
        let deep: Vec<Frame> = (1..=31)
            .map(|n| Frame::python(&format!("f{n}"), "a.py", n))
            .collect();
        let first = intern(&mut table, "t", &deep);
        // The same frames (the same strings), and equal ones built afresh: the same stack.
        assert_eq!(intern(&mut table, "t", &deep), first);
        let rebuilt: Vec<Frame> = (1..=31)
            .map(|n| Frame::python(&format!("f{n}"), "a.py", n))
            .collect();
        assert_eq!(intern(&mut table, "t", &rebuilt), first);
        // One line moved: another stack; and back: the first one again.
        let mut moved = deep.clone();
        moved[0].line = 99;
        let other = intern(&mut table, "t", &moved);
        assert_ne!(other, first);
        assert_eq!(intern(&mut table, "t", &deep), first);
        // Another thread in the same place: its own stack, under its own root.
        let elsewhere = intern(&mut table, "u", &deep);
        assert_ne!(elsewhere, first);
        assert_eq!(line_of(&table, elsewhere).split(';').next(), Some("u"));
        assert_eq!(table.stacks().len(), 3);
    }

    fn small(max_stacks: usize, max_frames: usize, max_thread_roots: usize) -> StackTable {
        StackTable::new(Limits {
            max_stacks,
            max_frames,
            max_thread_roots,
            ..Limits::default()
        })
    }

    fn line_of(table: &StackTable, id: StackId) -> String {
        table.folded_stack(&table.stacks()[id as usize])
    }

    #[test]
    fn full_stack_table_counts_new_stacks_under_their_thread() {
        let mut table = small(64, 10_000, 100);
        // Reserve of 4 for placeholders (64 / 16): 60 ordinary stacks.
        for line in 1..=100 {
            intern(&mut table, "main", &[Frame::python("f", "a.py", line)]);
        }
        assert_eq!(table.stacks().len(), 61);
        let id = intern(&mut table, "main", &[Frame::python("f", "a.py", 1)]);
        assert_eq!(line_of(&table, id), "main;f (a.py:1)", "known stacks stay");
        let id = intern(&mut table, "main", &[Frame::python("g", "a.py", 1)]);
        assert_eq!(line_of(&table, id), "main;[stack table full]");
        assert_eq!(table.overflow().stack_samples, 41);
        // Other threads get their own placeholder while the reserve lasts, then share one.
        for thread in 0..10 {
            let id = intern(&mut table, &format!("t{thread}"), &[]);
            let line = line_of(&table, id);
            if thread < 2 {
                assert_eq!(line, format!("t{thread};[stack table full]"));
            } else {
                assert_eq!(line, "[stack table full]");
            }
        }
        assert_eq!(table.stacks().len(), 64, "never past max_stacks");
    }

    #[test]
    fn full_frame_table_shows_a_placeholder() {
        let mut table = small(1_000, 2, 100);
        let frames = [Frame::python("a", "x.py", 1), Frame::python("b", "x.py", 1)];
        intern(&mut table, "main", &frames);
        let id = intern(
            &mut table,
            "main",
            &[Frame::python("c", "x.py", 1), Frame::python("b", "x.py", 1)],
        );
        assert_eq!(line_of(&table, id), "main;b (x.py:1);[frame table full]");
        assert_eq!(table.code_frame_count(), 2);
        assert_eq!(table.function_count(), 2);
        assert_eq!(table.overflow().frame_samples, 1);
    }

    #[test]
    fn thread_roots_past_the_cap_are_other_threads() {
        let mut table = small(1_000, 1_000, 2);
        for n in 0..5 {
            intern(&mut table, &format!("Thread-{n}"), &[]);
        }
        assert_eq!(table.thread_root_count(), 2);
        let lines: Vec<String> = table
            .stacks()
            .iter()
            .map(|s| table.folded_stack(s))
            .collect();
        assert_eq!(lines, vec!["Thread-0", "Thread-1", OTHER_THREADS]);
        assert_eq!(table.overflow().thread_root_samples, 3);
    }
}
