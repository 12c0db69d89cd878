//! The writer's interning tables, bounded by [`InternLimits`].
//!
//! A string, frame or stack is written once, when first seen, and referred to by id after.
//! A target that makes endless distinct stacks (generated code, ever-new file names) would grow
//! these tables forever, so they are capped: when a sample would take a table past its limit
//! the writer writes a reset record and starts over with empty tables. The log stays readable
//! (the reader resets at the same record) and memory stays bounded on both sides; what is lost
//! is only compactness, while the flood lasts.

use foldhash::HashMap;
use std::sync::Arc;

use stackscope_event::Frame;

/// The most a table may hold before the writer resets. The defaults bound the writer's tables
/// to a few tens of MiB; the reader refuses anything past [`InternLimits::HARD`].
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct InternLimits {
    pub strings: usize,
    /// Total length of the strings, in bytes.
    pub string_bytes: usize,
    pub frames: usize,
    pub stacks: usize,
    /// Total length of the stacks, in frames.
    pub stack_frames: usize,
    pub threads: usize,
}

impl InternLimits {
    /// The largest tables a writer may use and a reader accepts.
    pub const HARD: InternLimits = InternLimits {
        strings: 1 << 22,
        string_bytes: 256 << 20,
        frames: 1 << 22,
        stacks: 1 << 22,
        stack_frames: 1 << 26,
        threads: 1 << 20,
    };

    /// Each limit no larger than [`InternLimits::HARD`]'s, and at least 1 (so that one
    /// sample always fits after a reset; a sample larger than a limit is written anyway).
    pub fn clamped(self) -> InternLimits {
        let hard = InternLimits::HARD;
        let clamp = |value: usize, max: usize| value.clamp(1, max);
        InternLimits {
            strings: clamp(self.strings, hard.strings),
            string_bytes: clamp(self.string_bytes, hard.string_bytes),
            frames: clamp(self.frames, hard.frames),
            stacks: clamp(self.stacks, hard.stacks),
            stack_frames: clamp(self.stack_frames, hard.stack_frames),
            threads: clamp(self.threads, hard.threads),
        }
    }
}

impl Default for InternLimits {
    fn default() -> Self {
        InternLimits {
            strings: 1 << 18,
            string_bytes: 16 << 20,
            frames: 1 << 18,
            stacks: 1 << 18,
            stack_frames: 1 << 22,
            // A job that starts a thread per request names a new thread at every one: a reset
            // every 4096 threads keeps their names, and the writer, at a few MiB.
            threads: 1 << 12,
        }
    }
}

/// How much the writer's tables hold now.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct TableSizes {
    pub strings: usize,
    pub string_bytes: usize,
    pub frames: usize,
    pub stacks: usize,
    pub stack_frames: usize,
    pub threads: usize,
}

/// What the writer knows of a thread, to notice a rename.
#[derive(Debug)]
pub struct ThreadEntry {
    pub id: u32,
    pub os_thread_id: Option<u64>,
    pub name: Option<Arc<str>>,
}

/// The ids given out since the last reset.
#[derive(Debug, Default)]
pub struct WriterTables {
    pub strings: HashMap<Arc<str>, u32>,
    pub string_bytes: usize,
    pub frames: HashMap<Frame, u32>,
    pub stacks: HashMap<Box<[u32]>, u32>,
    pub stack_frames: usize,
    /// By (pid, Python thread id).
    pub threads: HashMap<(u32, u64), ThreadEntry>,
}

/// What one sample may add to the tables, at most.
#[derive(Debug, Clone, Copy, Default)]
pub struct Growth {
    pub strings: usize,
    pub string_bytes: usize,
    pub frames: usize,
    pub stacks: usize,
    pub stack_frames: usize,
    pub threads: usize,
}

impl WriterTables {
    pub fn clear(&mut self) {
        // Fresh maps rather than `clear`, which would keep the peak's capacity.
        *self = WriterTables::default();
    }

    pub fn sizes(&self) -> TableSizes {
        TableSizes {
            strings: self.strings.len(),
            string_bytes: self.string_bytes,
            frames: self.frames.len(),
            stacks: self.stacks.len(),
            stack_frames: self.stack_frames,
            threads: self.threads.len(),
        }
    }

    /// Whether the tables can take `growth` without passing `limits`.
    pub fn has_room(&self, growth: &Growth, limits: &InternLimits) -> bool {
        self.strings.len() + growth.strings <= limits.strings
            && self.string_bytes + growth.string_bytes <= limits.string_bytes
            && self.frames.len() + growth.frames <= limits.frames
            && self.stacks.len() + growth.stacks <= limits.stacks
            && self.stack_frames + growth.stack_frames <= limits.stack_frames
            && self.threads.len() + growth.threads <= limits.threads
    }

    /// Whether the tables hold anything (a reset of empty tables is pointless).
    pub fn is_empty(&self) -> bool {
        self.strings.is_empty()
            && self.frames.is_empty()
            && self.stacks.is_empty()
            && self.threads.is_empty()
    }

    /// The id of `s`, and whether it is new (and must be written).
    pub fn string(&mut self, s: &Arc<str>) -> (u32, bool) {
        if let Some(&id) = self.strings.get(&**s) {
            return (id, false);
        }
        let id = self.strings.len() as u32;
        self.strings.insert(s.clone(), id);
        self.string_bytes += s.len();
        (id, true)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn limits_are_clamped_to_the_hard_ones_and_to_one() {
        let huge = InternLimits {
            strings: usize::MAX,
            string_bytes: usize::MAX,
            frames: usize::MAX,
            stacks: usize::MAX,
            stack_frames: usize::MAX,
            threads: usize::MAX,
        };
        assert_eq!(huge.clamped(), InternLimits::HARD);
        let zero = InternLimits {
            strings: 0,
            string_bytes: 0,
            frames: 0,
            stacks: 0,
            stack_frames: 0,
            threads: 0,
        };
        assert_eq!(zero.clamped().stacks, 1);
        assert_eq!(InternLimits::default().clamped(), InternLimits::default());
    }

    #[test]
    fn a_string_is_new_once() {
        let mut tables = WriterTables::default();
        let a: Arc<str> = Arc::from("a");
        assert_eq!(tables.string(&a), (0, true));
        assert_eq!(tables.string(&Arc::from("a")), (0, false));
        assert_eq!(tables.string(&Arc::from("bc")), (1, true));
        assert_eq!(tables.string_bytes, 3);
        tables.clear();
        assert!(tables.is_empty());
        assert_eq!(tables.string(&a), (0, true));
    }
}
