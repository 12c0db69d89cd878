//! What each thread did while the GPU idled and while it was busy, running or waiting: the
//! observations that roles and the verdict's `while_idle` are read from.
//!
//! Every sample of a thread counts in its totals, idle or not. Its stacks are followed only for
//! the threads that can matter to the verdict: those that ran at least once, and every
//! process's main thread, which is where a training loop waits for its next batch. Helper
//! threads that only ever wait (queue feeders, resource sharers) cost nothing more than today.

use foldhash::HashMap;

use super::intern::StackId;
use crate::gpu::GpuTag;

/// Stacks followed per thread; past it a thread's new stacks count in its totals only.
pub const MAX_STACKS_PER_THREAD: usize = 4096;

/// Samples that ran and samples that waited.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct RunWait {
    pub running: u64,
    pub waiting: u64,
}

impl RunWait {
    fn add(&mut self, running: bool) {
        if running {
            self.running += 1;
        } else {
            self.waiting += 1;
        }
    }

    pub fn total(&self) -> u64 {
        self.running + self.waiting
    }

    /// The share that ran; `None` without samples.
    pub fn running_share(&self) -> Option<f64> {
        let total = self.total();
        (total > 0).then(|| self.running as f64 / total as f64)
    }

    pub fn plus(self, other: RunWait) -> RunWait {
        RunWait {
            running: self.running + other.running,
            waiting: self.waiting + other.waiting,
        }
    }
}

/// Samples by the GPU's state at their instant.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct PhaseCounts {
    pub gpu_idle: RunWait,
    pub gpu_busy: RunWait,
    pub gpu_unknown: RunWait,
}

impl PhaseCounts {
    fn add(&mut self, tag: GpuTag, running: bool) {
        match tag.idle() {
            Some(true) => self.gpu_idle.add(running),
            Some(false) => self.gpu_busy.add(running),
            None => self.gpu_unknown.add(running),
        }
    }

    pub fn all(&self) -> RunWait {
        self.gpu_idle.plus(self.gpu_busy).plus(self.gpu_unknown)
    }
}

/// One thread's samples since start (start-up left out where a recording leaves it out).
#[derive(Debug, Clone, Default)]
pub struct Activity {
    pub totals: PhaseCounts,
    /// By stack, for followed threads.
    pub stacks: HashMap<StackId, PhaseCounts>,
}

impl Activity {
    /// Counts one tagged sample; `stack` when the thread's stacks are followed.
    pub fn count(&mut self, stack: Option<StackId>, tag: GpuTag, running: bool) {
        self.totals.add(tag, running);
        let Some(stack) = stack else {
            return;
        };
        let full = self.stacks.len() >= MAX_STACKS_PER_THREAD;
        match self.stacks.get_mut(&stack) {
            Some(counts) => counts.add(tag, running),
            None if !full => self.stacks.entry(stack).or_default().add(tag, running),
            None => {}
        }
    }
}

/// Whether a thread's stacks are followed when it waits: every main thread (a training loop
/// waiting for data is the verdict's answer). Threads that run are followed anyway, since their
/// running samples are interned for the flamegraph.
pub fn follows_waiting(thread_name: &str) -> bool {
    thread_name == "MainThread"
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn totals_by_phase_and_stacks_when_followed() {
        let mut a = Activity::default();
        a.count(Some(1), GpuTag::Idle, false);
        a.count(Some(1), GpuTag::Idle, false);
        a.count(Some(2), GpuTag::BusyLowSm, true);
        a.count(None, GpuTag::Unknown, true);
        assert_eq!(
            a.totals.gpu_idle,
            RunWait {
                running: 0,
                waiting: 2
            }
        );
        assert_eq!(a.totals.gpu_busy.running, 1);
        assert_eq!(a.totals.all().total(), 4);
        assert_eq!(a.stacks.len(), 2);
        assert_eq!(a.stacks[&1].gpu_idle.waiting, 2);
        assert_eq!(a.totals.gpu_busy.running_share(), Some(1.0));
    }
}
