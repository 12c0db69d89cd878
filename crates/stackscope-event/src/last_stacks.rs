//! Each thread's last stack and what it was filed as: most threads of a sample are where
//! they were (a worker in its loop, a thread asleep). The sampler hands such a thread on with
//! the very stack of its last sample ([`Frames`] is shared), so telling it is where it was
//! costs one pointer comparison; a stack built afresh with the same frames is still found,
//! at the cost of comparing a pointer and a line per frame (`Arc<str>` equality looks at the
//! pointers first), where filing it again would hash every frame's strings.

use std::hash::Hash;
use std::sync::Arc;

use crate::{Frame, Frames};

/// Threads whose last stack is kept; past it the memory starts again (a churn of short
/// threads must not grow it without end).
const MAX_THREADS: usize = 4096;

/// Per thread key `K`, its last frames and their id `I`.
#[derive(Debug)]
pub struct LastStacks<K, I> {
    last: foldhash::HashMap<K, (Frames, I)>,
}

impl<K, I> Default for LastStacks<K, I> {
    fn default() -> Self {
        LastStacks {
            last: foldhash::HashMap::default(),
        }
    }
}

impl<K: Eq + Hash, I: Copy> LastStacks<K, I> {
    /// The id `frames` were filed as, if they are the thread's last stack.
    pub fn get(&self, key: &K, frames: &[Frame]) -> Option<I> {
        self.last
            .get(key)
            // The same shared stack first: one comparison, whatever its depth.
            .filter(|(last, _)| std::ptr::eq(&**last, frames) || **last == *frames)
            .map(|(_, id)| *id)
    }

    /// Remembers `frames`, filed as `id`, as the thread's last stack (shared, not copied).
    pub fn remember(&mut self, key: K, frames: &Frames, id: I) {
        if self.last.len() >= MAX_THREADS && !self.last.contains_key(&key) {
            self.last.clear();
        }
        self.last.insert(key, (Arc::clone(frames), id));
    }

    /// Forgets one thread's stack: it ended.
    pub fn forget(&mut self, key: &K) {
        self.last.remove(key);
    }

    /// Forgets every thread's stack (the ids they were filed as are void).
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
