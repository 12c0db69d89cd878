//! Each thread's last few stacks and what they were filed as: most threads of a sample are
//! where they were (a worker in its loop, a thread asleep), or back at a stack they had a
//! moment ago (a busy loop goes round a few). The sampler hands such a thread on with the very
//! stack it handed before ([`Frames`] is shared), so telling it is back there costs a pointer
//! comparison per stack kept; a stack built afresh with the same frames as the thread's last
//! is still found, at the cost of comparing a pointer and a line per frame (`Arc<str>`
//! equality looks at the pointers first), where filing it again would hash every frame's
//! strings.

use std::hash::Hash;
use std::sync::Arc;

use crate::{Frame, Frames};

/// Threads whose stacks are kept; past it the memory starts again (a churn of short threads
/// must not grow it without end).
const MAX_THREADS: usize = 4096;

/// Stacks kept per thread, newest first: a busy loop's few, as the sampler's own memory of a
/// thread's stacks hands them back.
const PER_THREAD: usize = 8;

/// Per thread key `K`, its last few frames and their ids `I`.
#[derive(Debug)]
pub struct LastStacks<K, I> {
    last: foldhash::HashMap<K, Vec<(Frames, I)>>,
}

impl<K, I> Default for LastStacks<K, I> {
    fn default() -> Self {
        LastStacks {
            last: foldhash::HashMap::default(),
        }
    }
}

impl<K: Eq + Hash, I: Copy> LastStacks<K, I> {
    /// The id `frames` were filed as, if they are one of the thread's last stacks: the very
    /// stack (by its address), or frames equal to its newest.
    pub fn get(&self, key: &K, frames: &[Frame]) -> Option<I> {
        let kept = self.last.get(key)?;
        // The same shared stack first: one comparison each, whatever its depth.
        let shared = kept
            .iter()
            .find(|(stack, _)| std::ptr::eq(&**stack, frames));
        shared
            .or_else(|| kept.first().filter(|(newest, _)| **newest == *frames))
            .map(|(_, id)| *id)
    }

    /// Remembers `frames`, filed as `id`, as the thread's newest stack (shared, not copied).
    pub fn remember(&mut self, key: K, frames: &Frames, id: I) {
        if self.last.len() >= MAX_THREADS && !self.last.contains_key(&key) {
            self.last.clear();
        }
        let kept = self.last.entry(key).or_default();
        // One entry a stack: the same frames built afresh (cut to a depth, say) replace it.
        kept.retain(|(stack, _)| !Arc::ptr_eq(stack, frames) && **stack != **frames);
        kept.truncate(PER_THREAD - 1);
        kept.insert(0, (Arc::clone(frames), id));
    }

    /// Forgets one thread's stacks: it ended.
    pub fn forget(&mut self, key: &K) {
        self.last.remove(key);
    }

    /// Forgets every thread's stacks (the ids they were filed as are void).
    pub fn clear(&mut self) {
        self.last.clear();
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_thread_where_it_was_gets_its_id_back_and_a_moved_one_does_not() {
        let mut last = LastStacks::<u32, u32>::default();
        let asleep: Frames = vec![Frame::python("wait", "w.py", 10)].into();
        let moved: Frames = vec![Frame::python("wait", "w.py", 11)].into();
        assert_eq!(last.get(&1, &asleep), None);
        last.remember(1, &asleep, 7);
        assert_eq!(last.get(&1, &asleep), Some(7));
        // Equal frames built afresh are the same stack.
        assert_eq!(last.get(&1, &[Frame::python("wait", "w.py", 10)]), Some(7));
        assert_eq!(last.get(&1, &moved), None);
        assert_eq!(last.get(&2, &asleep), None);
        last.remember(1, &moved, 8);
        assert_eq!(last.get(&1, &moved), Some(8));
        last.clear();
        assert_eq!(last.get(&1, &moved), None);
    }

    #[test]
    fn the_same_shared_stack_is_found_without_looking_at_its_frames() {
        let mut last = LastStacks::<u32, u32>::default();
        let deep: Frames = (0..50)
            .map(|i| Frame::python("f", "deep.py", i))
            .collect::<Vec<_>>()
            .into();
        last.remember(1, &deep, 3);
        assert_eq!(last.get(&1, &deep), Some(3));
        // A shorter stack at the same address is not the same stack.
        assert_eq!(last.get(&1, &deep[..49]), None);
        assert_eq!(
            Arc::strong_count(&deep),
            2,
            "remembered by sharing, not copying"
        );
    }

    #[test]
    fn a_thread_back_at_a_stack_it_had_a_moment_ago_gets_its_id_back() {
        let mut last = LastStacks::<u32, usize>::default();
        let stacks: Vec<Frames> = (0..=PER_THREAD)
            .map(|line| vec![Frame::python("spin", "s.py", line as u32)].into())
            .collect();
        for (id, stack) in stacks.iter().enumerate().take(PER_THREAD) {
            last.remember(1, stack, id);
        }
        // Every one kept is found by its address, the oldest too.
        for (id, stack) in stacks.iter().enumerate().take(PER_THREAD) {
            assert_eq!(last.get(&1, stack), Some(id));
        }
        // Built afresh, only the newest is compared frame by frame.
        assert_eq!(last.get(&1, &[Frame::python("spin", "s.py", 7)]), Some(7));
        assert_eq!(last.get(&1, &[Frame::python("spin", "s.py", 0)]), None);
        // One more drops the oldest; one remembered again moves to the front, once.
        last.remember(1, &stacks[PER_THREAD], PER_THREAD);
        assert_eq!(last.get(&1, &stacks[0]), None);
        last.remember(1, &stacks[1], 1);
        assert_eq!(last.last[&1].len(), PER_THREAD);
        assert_eq!(last.get(&1, &[Frame::python("spin", "s.py", 1)]), Some(1));
        // The same frames built afresh take the place of the stack they equal.
        let again: Frames = vec![Frame::python("spin", "s.py", 3)].into();
        last.remember(1, &again, 3);
        assert_eq!(last.last[&1].len(), PER_THREAD);
        assert_eq!(last.get(&1, &again), Some(3));
        assert!(
            !last.last[&1]
                .iter()
                .any(|(s, _)| Arc::ptr_eq(s, &stacks[3])),
            "its old copy is let go"
        );
        // Another thread's stacks are its own.
        assert_eq!(last.get(&2, &stacks[1]), None);
    }

    #[test]
    fn the_memory_starts_again_past_its_bound() {
        let mut last = LastStacks::<usize, usize>::default();
        let frames: Frames = vec![Frame::python("f", "f.py", 1)].into();
        for t in 0..MAX_THREADS {
            last.remember(t, &frames, t);
        }
        last.remember(MAX_THREADS, &frames, 0);
        assert_eq!(last.last.len(), 1);
        assert_eq!(last.get(&0, &frames), None);
    }
}
