//! Each thread's last stack and what it was filed as: most threads of a sample are where
//! they were (a worker in its loop, a thread asleep), and comparing their frames with the
//! last ones costs a pointer and a line per frame (`Arc<str>` equality looks at the pointers
//! first, and the sampler hands out the same strings for the same code) where filing them
//! again would hash every frame's strings.

use std::collections::HashMap;
use std::hash::Hash;

use crate::Frame;

/// Threads whose last stack is kept; past it the memory starts again (a churn of short
/// threads must not grow it without end).
const MAX_THREADS: usize = 4096;

/// Per thread key `K`, its last frames and their id `I`.
#[derive(Debug)]
pub struct LastStacks<K, I> {
    last: HashMap<K, (Vec<Frame>, I)>,
}

impl<K, I> Default for LastStacks<K, I> {
    fn default() -> Self {
        LastStacks {
            last: HashMap::new(),
        }
    }
}

impl<K: Eq + Hash, I: Copy> LastStacks<K, I> {
    /// The id `frames` were filed as, if they are the thread's last stack.
    pub fn get(&self, key: &K, frames: &[Frame]) -> Option<I> {
        self.last
            .get(key)
            .filter(|(last, _)| last.as_slice() == frames)
            .map(|(_, id)| *id)
    }

    /// Remembers `frames`, filed as `id`, as the thread's last stack (its vector is reused:
    /// no allocation once it has grown).
    pub fn remember(&mut self, key: K, frames: &[Frame], id: I) {
        if self.last.len() >= MAX_THREADS && !self.last.contains_key(&key) {
            self.last.clear();
        }
        match self.last.entry(key) {
            std::collections::hash_map::Entry::Occupied(mut e) => {
                let (last, last_id) = e.get_mut();
                last.clear();
                last.extend_from_slice(frames);
                *last_id = id;
            }
            std::collections::hash_map::Entry::Vacant(e) => {
                e.insert((frames.to_vec(), id));
            }
        }
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
        let asleep = vec![Frame::python("wait", "w.py", 10)];
        let moved = vec![Frame::python("wait", "w.py", 11)];
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
    fn the_memory_starts_again_past_its_bound() {
        let mut last = LastStacks::<usize, usize>::default();
        let frames = vec![Frame::python("f", "f.py", 1)];
        for t in 0..MAX_THREADS {
            last.remember(t, &frames, t);
        }
        last.remember(MAX_THREADS, &frames, 0);
        assert_eq!(last.last.len(), 1);
        assert_eq!(last.get(&0, &frames), None);
    }
}
