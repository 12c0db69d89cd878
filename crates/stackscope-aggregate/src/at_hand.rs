//! A map of counts by key whose latest entry is kept at hand, out of the map: what a thread
//! counts by stack. A thread that waits keeps coming back with the stack of its last sample,
//! sample after sample; its counts there are then one field away, with no hashing, and go back
//! into the map only when it moves. The map and the entry at hand are one map to a reader.

use std::hash::Hash;

use foldhash::HashMap;

/// Counts by key, the latest key's out of the map; at most `cap` keys in all.
#[derive(Debug, Clone)]
pub struct AtHand<K, V> {
    map: HashMap<K, V>,
    latest: Option<(K, V)>,
}

impl<K, V> Default for AtHand<K, V> {
    fn default() -> Self {
        AtHand {
            map: HashMap::default(),
            latest: None,
        }
    }
}

impl<K: Hash + Eq + Copy, V: Default> AtHand<K, V> {
    /// Keys held, the one at hand included.
    pub fn len(&self) -> usize {
        self.map.len() + usize::from(self.latest.is_some())
    }

    pub fn is_empty(&self) -> bool {
        self.len() == 0
    }

    pub fn get(&self, key: &K) -> Option<&V> {
        match &self.latest {
            Some((k, v)) if k == key => Some(v),
            _ => self.map.get(key),
        }
    }

    /// The counts of `key`, taken in hand: a new key's start at the default while fewer than
    /// `cap` keys are held; `None` for a new key past it.
    pub fn at(&mut self, key: K, cap: usize) -> Option<&mut V> {
        if !matches!(&self.latest, Some((k, _)) if *k == key) {
            if let Some((k, v)) = self.latest.take() {
                self.map.insert(k, v);
            }
            let value = match self.map.remove(&key) {
                Some(value) => value,
                None if self.map.len() < cap => V::default(),
                None => return None,
            };
            self.latest = Some((key, value));
        }
        self.latest.as_mut().map(|(_, v)| v)
    }

    /// The counts of `key` where they are, not taken in hand (adding another map's).
    pub fn get_mut_or_new(&mut self, key: K, cap: usize) -> Option<&mut V> {
        if matches!(&self.latest, Some((k, _)) if *k == key) {
            return self.latest.as_mut().map(|(_, v)| v);
        }
        if !self.map.contains_key(&key) && self.len() >= cap {
            return None;
        }
        Some(self.map.entry(key).or_default())
    }

    /// Every key with its counts, in no order.
    pub fn iter(&self) -> impl Iterator<Item = (&K, &V)> {
        self.map
            .iter()
            .chain(self.latest.as_ref().map(|(k, v)| (k, v)))
    }

    pub fn keys(&self) -> impl Iterator<Item = &K> {
        self.iter().map(|(k, _)| k)
    }
}

impl<'a, K: Hash + Eq + Copy, V: Default> IntoIterator for &'a AtHand<K, V> {
    type Item = (&'a K, &'a V);
    type IntoIter = Box<dyn Iterator<Item = (&'a K, &'a V)> + 'a>;

    fn into_iter(self) -> Self::IntoIter {
        Box::new(self.iter())
    }
}

#[cfg(test)]
impl<K: Hash + Eq + Copy, V: Default> std::ops::Index<&K> for AtHand<K, V> {
    type Output = V;

    /// Panics on a key not held, as a map does: tests know what they counted.
    fn index(&self, key: &K) -> &V {
        self.get(key).expect("key held")
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_entry_at_hand_is_read_with_the_map() {
        let mut m: AtHand<u32, u64> = AtHand::default();
        for _ in 0..5 {
            *m.at(1, 8).expect("room") += 1;
        }
        assert_eq!(m.len(), 1);
        assert_eq!(m.get(&1), Some(&5));
        *m.at(2, 8).expect("room") += 1;
        *m.at(1, 8).expect("room") += 1;
        assert_eq!((m[&1], m[&2], m.len()), (6, 1, 2));
        let mut all: Vec<(u32, u64)> = m.iter().map(|(&k, &v)| (k, v)).collect();
        all.sort();
        assert_eq!(all, vec![(1, 6), (2, 1)]);
    }

    #[test]
    fn past_the_cap_a_new_key_is_not_held() {
        let mut m: AtHand<u32, u64> = AtHand::default();
        *m.at(1, 2).expect("room") += 1;
        *m.at(2, 2).expect("room") += 1;
        assert!(m.at(3, 2).is_none());
        assert!(m.get_mut_or_new(3, 2).is_none());
        // Keys already held are still counted, in hand or not.
        *m.at(1, 2).expect("held") += 1;
        *m.get_mut_or_new(2, 2).expect("held") += 1;
        assert_eq!((m[&1], m[&2], m.len()), (2, 2, 2));
    }
}
