//! What each thread did while the GPU idled and while it was busy, running or waiting: the
//! observations that roles and the verdict's `while_idle` are read from.
//!
//! Every sample of a thread counts in its totals, idle or not, and every stack is followed,
//! waits included: the trainer's waits (for its next batch, on the GPU, for the GIL) are its
//! step's breakdown (`roles/step.rs`), and any thread may turn out to be the trainer. A thread
//! that keeps waiting in one place is counted there with no look-up: its counts at its latest
//! stack are kept at hand (`at_hand.rs`), and go back into its table when it moves.
//!
//! A waiting sample taken while another thread of the same process held the GIL is counted as
//! a GIL wait too, with who held it: the GIL's holder is known only from its own sample, taken
//! within a tick of the waiter's.

use foldhash::HashMap;

use super::intern::StackId;
use super::threads::ThreadKey;
use crate::at_hand::AtHand;
use crate::gpu::GpuTag;

/// Stacks followed per thread; past it a thread's new stacks count in its totals only.
pub const MAX_STACKS_PER_THREAD: usize = 4096;
/// GIL holders counted per waiting thread (threads that come and go each hold it now and then).
pub const MAX_GIL_HOLDERS: usize = 256;

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
    /// Of the waiting samples (any GPU state), those taken while another thread of the process
    /// held the GIL.
    pub gil_waiting: u64,
    /// Of those, the ones taken while the GPU was busy.
    pub gil_waiting_gpu_busy: u64,
    /// Waiting samples taken while another thread of the process held the GIL and the GPU was
    /// not busy, at a stack where the thread runs or not (`gil/`'s `held_elsewhere`).
    pub held_elsewhere_not_busy: u64,
    /// Samples at which the thread arrived here from another stack (or from none): how often
    /// it came, where `all()` says how long it stayed. A loop enters its hand-off once a step.
    pub entries: u64,
}

impl PhaseCounts {
    fn add(&mut self, tag: GpuTag, running: bool, gil: SampleGil) {
        let busy = tag.idle() == Some(false);
        match tag.idle() {
            Some(true) => self.gpu_idle.add(running),
            Some(false) => self.gpu_busy.add(running),
            None => self.gpu_unknown.add(running),
        }
        if running {
            return;
        }
        if gil.waited {
            self.gil_waiting += 1;
            self.gil_waiting_gpu_busy += u64::from(busy);
        }
        if gil.held_elsewhere && !busy {
            self.held_elsewhere_not_busy += 1;
        }
    }

    pub fn all(&self) -> RunWait {
        self.gpu_idle.plus(self.gpu_busy).plus(self.gpu_unknown)
    }

    /// Adds another thread's counts: a thread that ended, into its kind's.
    pub fn absorb(&mut self, other: &PhaseCounts) {
        self.gpu_idle = self.gpu_idle.plus(other.gpu_idle);
        self.gpu_busy = self.gpu_busy.plus(other.gpu_busy);
        self.gpu_unknown = self.gpu_unknown.plus(other.gpu_unknown);
        self.gil_waiting += other.gil_waiting;
        self.gil_waiting_gpu_busy += other.gil_waiting_gpu_busy;
        self.held_elsewhere_not_busy += other.held_elsewhere_not_busy;
        self.entries += other.entries;
    }
}

/// What a sample did with the GIL, as its activity counts it.
#[derive(Debug, Clone, Copy, Default)]
struct SampleGil {
    /// It waited for the GIL (`gil/`).
    waited: bool,
    /// It did not run while another thread held the GIL.
    held_elsewhere: bool,
}

/// One thread's samples since start (start-up left out where a recording leaves it out).
#[derive(Debug, Clone, Default)]
pub struct Activity {
    pub totals: PhaseCounts,
    /// By stack, for followed threads; its latest stack's at hand.
    pub stacks: AtHand<StackId, PhaseCounts>,
    /// Its GIL waits by the thread that held the GIL meanwhile.
    pub gil_holders: HashMap<ThreadKey, u64>,
    /// The stack of its latest sample, to count arrivals (`PhaseCounts::entries`).
    last_stack: Option<StackId>,
}

impl Activity {
    /// Counts one tagged sample; `stack` when the thread's stacks are followed; `gil_waited`
    /// when it waited for the GIL, `gil_holder` when another thread of its process held the GIL
    /// at the sample.
    pub fn count(
        &mut self,
        stack: Option<StackId>,
        tag: GpuTag,
        running: bool,
        gil_waited: bool,
        gil_holder: Option<ThreadKey>,
    ) {
        let gil = SampleGil {
            waited: gil_waited && !running,
            held_elsewhere: gil_holder.is_some() && !running,
        };
        let entered = stack.is_none() || stack != self.last_stack;
        self.last_stack = stack;
        self.totals.add(tag, running, gil);
        self.totals.entries += u64::from(entered);
        if let (Some(holder), true) = (gil_holder, gil.held_elsewhere) {
            self.count_holder(holder, 1);
        }
        let Some(stack) = stack else {
            return;
        };
        let Some(counts) = self.stacks.at(stack, MAX_STACKS_PER_THREAD) else {
            return;
        };
        counts.add(tag, running, gil);
        counts.entries += u64::from(entered);
    }
}

impl Activity {
    /// Adds what another thread did (one that ended, into its kind's), within the caps: a
    /// stack past [`MAX_STACKS_PER_THREAD`] counts in the totals only, as it would have.
    pub fn absorb(&mut self, other: &Activity) {
        self.totals.absorb(&other.totals);
        for (&stack, counts) in &other.stacks {
            if let Some(mine) = self.stacks.get_mut_or_new(stack, MAX_STACKS_PER_THREAD) {
                mine.absorb(counts);
            }
        }
        for (&holder, &n) in &other.gil_holders {
            self.count_holder(holder, n);
        }
    }

    /// Counts `n` GIL waits while `holder` held it. Past [`MAX_GIL_HOLDERS`] holders, those
    /// counted least (at most the median) are let go: the one that held it most is what is read.
    fn count_holder(&mut self, holder: ThreadKey, n: u64) {
        if self.gil_holders.len() >= MAX_GIL_HOLDERS && !self.gil_holders.contains_key(&holder) {
            let mut counts: Vec<u64> = self.gil_holders.values().copied().collect();
            let middle = counts.len() / 2;
            let (_, &mut median, _) = counts.select_nth_unstable(middle);
            self.gil_holders.retain(|_, &mut c| c > median);
        }
        *self.gil_holders.entry(holder).or_default() += n;
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn totals_by_phase_and_stacks_when_followed() {
        let mut a = Activity::default();
        a.count(Some(1), GpuTag::Idle, false, false, None);
        a.count(Some(1), GpuTag::Idle, false, true, Some((7, 2, 0)));
        a.count(Some(2), GpuTag::BusyLowSm, true, false, Some((7, 2, 0)));
        a.count(None, GpuTag::Unknown, true, false, None);
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
        // A running sample is no GIL wait, whoever holds the GIL.
        assert_eq!(a.totals.gil_waiting, 1);
        assert_eq!(a.stacks[&1].gil_waiting, 1);
        assert_eq!(a.gil_holders[&(7, 2, 0)], 1);
        // Stack 1 was entered once (two samples in a row), stack 2 once.
        assert_eq!(a.stacks[&1].entries, 1);
        assert_eq!(a.stacks[&2].entries, 1);
        a.count(Some(1), GpuTag::Idle, true, false, None);
        assert_eq!(a.stacks[&1].entries, 2);
    }

    #[test]
    fn unchanged_waiting_samples_are_each_counted_while_at_hand_and_after() {
        let mut a = Activity::default();
        a.count(Some(7), GpuTag::Busy, true, false, None);
        for _ in 0..1000 {
            a.count(Some(3), GpuTag::Idle, false, false, Some((1, 1, 1)));
        }
        // Read while the thread still waits there: every sample is in its counts.
        let waits = a.stacks.get(&3).copied().unwrap_or_default();
        assert_eq!(waits.gpu_idle.waiting, 1000);
        assert_eq!(waits.held_elsewhere_not_busy, 1000);
        assert_eq!(waits.entries, 1);
        assert_eq!(
            a.stacks.iter().map(|(_, c)| c.all().total()).sum::<u64>(),
            1001
        );
        // It moves and comes back: the run went into the table, the new one adds to it.
        a.count(Some(7), GpuTag::Busy, true, false, None);
        for _ in 0..500 {
            a.count(Some(3), GpuTag::Unknown, false, false, None);
        }
        let waits = a.stacks.get(&3).copied().unwrap_or_default();
        assert_eq!(
            (waits.gpu_idle.waiting, waits.gpu_unknown.waiting),
            (1000, 500)
        );
        assert_eq!(waits.entries, 2);
        assert_eq!(a.stacks.get(&7).map(|c| c.gpu_busy.running), Some(2));
        assert_eq!(a.totals.all().total(), 1502);
        assert_eq!(a.gil_holders[&(1, 1, 1)], 1000);
        // A thread that ends is added to its kind's with the run it was in.
        let mut kind = Activity::default();
        kind.absorb(&a);
        assert_eq!(kind.stacks.get(&3).map(|c| c.all().waiting), Some(1500));
        assert_eq!(kind.stacks.len(), 2);
    }

    #[test]
    fn gil_holders_stay_bounded_and_keep_the_one_that_held_it_most() {
        let mut a = Activity::default();
        for _ in 0..50 {
            a.count(None, GpuTag::Idle, false, true, Some((1, 1, 1)));
        }
        // Holders that come and go, each holding it once.
        for tid in 0..100_000u64 {
            a.count(None, GpuTag::Idle, false, true, Some((1, 1000 + tid, tid)));
            assert!(a.gil_holders.len() <= MAX_GIL_HOLDERS);
        }
        let top = a
            .gil_holders
            .iter()
            .max_by_key(|(_, &n)| n)
            .map(|(k, _)| *k);
        assert_eq!(top, Some((1, 1, 1)));
    }
}
