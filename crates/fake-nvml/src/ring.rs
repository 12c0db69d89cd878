//! The driver-side ring of timestamped samples, as the real driver keeps one per device.

use std::collections::VecDeque;

/// One tick of the fake device.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Tick {
    /// Wall-clock microseconds (CLOCK_REALTIME), as NVML stamps its samples.
    pub time_us: u64,
    pub gpu: u32,
    pub memory: u32,
}

/// A bounded ring: the oldest tick falls out when a new one arrives at capacity.
#[derive(Debug)]
pub struct Ring {
    capacity: usize,
    ticks: VecDeque<Tick>,
}

impl Ring {
    pub fn new(capacity: usize) -> Ring {
        Ring {
            capacity: capacity.max(1),
            ticks: VecDeque::with_capacity(capacity.max(1)),
        }
    }

    pub fn capacity(&self) -> usize {
        self.capacity
    }

    pub fn push(&mut self, tick: Tick) {
        if self.ticks.len() == self.capacity {
            self.ticks.pop_front();
        }
        self.ticks.push_back(tick);
    }

    /// Ticks strictly newer than `last_seen_us`, oldest first (NVML's lastSeenTimeStamp rule).
    pub fn newer_than(&self, last_seen_us: u64) -> Vec<Tick> {
        self.ticks
            .iter()
            .filter(|t| t.time_us > last_seen_us)
            .copied()
            .collect()
    }

    pub fn latest(&self) -> Option<Tick> {
        self.ticks.back().copied()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn tick(time_us: u64) -> Tick {
        Tick {
            time_us,
            gpu: time_us as u32,
            memory: 0,
        }
    }

    #[test]
    fn keeps_only_the_newest() {
        let mut ring = Ring::new(3);
        for t in 1..=5 {
            ring.push(tick(t));
        }
        assert_eq!(ring.newer_than(0), vec![tick(3), tick(4), tick(5)]);
        assert_eq!(ring.newer_than(4), vec![tick(5)]);
        assert!(ring.newer_than(5).is_empty());
        assert_eq!(ring.latest(), Some(tick(5)));
    }
}
