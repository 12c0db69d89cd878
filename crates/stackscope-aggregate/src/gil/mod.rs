//! The GIL at each sample: who held it, who waited for it, who ran without it. One rule, used
//! by the aggregator (the step's `gil_wait`, `summary.json`'s `gil`, the page's lanes), the
//! exports' trace (Perfetto's GIL slices) and `top`.
//!
//! The sampler reads all the threads of one process at one instant (one read, one timestamp),
//! and says of each whether it held the GIL then (`owns_gil`: CPython's own record of the
//! holder, `_PyRuntime`'s `tstate_current` or the GIL's `last_holder` while it is locked). A
//! sample's state is decided from its whole read, whatever order the threads were read in:
//!
//! - [`GilState::Held`]: it held the GIL;
//! - [`GilState::Waited`]: it did not run (asleep in the kernel) while another thread of its
//!   process held the GIL at the same read, at a stack where it runs itself ([`RunsAt`]): a
//!   thread that wants to run Python waits in `take_gil`, asleep, at the line it was running.
//!   A thread asleep where it never runs (in `Condition.wait`, `time.sleep`, a socket's read)
//!   waits for something else, whoever holds the GIL meanwhile;
//! - [`GilState::RanWithout`]: it ran without holding the GIL: native code that released it
//!   (`zlib.compress`, a tensor op, a read);
//! - [`GilState::Idle`]: it neither ran nor waited for a GIL that another thread held.
//!
//! [`ReadGroups`] holds the samples of the latest read until the read is complete (a sample of
//! another read, or [`ReadGroups::flush`]), then hands each on with its state and holder.

use crate::at_hand::AtHand;
use serde::{Deserialize, Serialize};
use stackscope_event::{Frame, StackSample, Timestamp};

/// What a thread did with the GIL at one sample.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum GilState {
    Held,
    Waited,
    RanWithout,
    Idle,
}

impl GilState {
    /// The state of a sample that `running` (the scheduler had it running or runnable) and
    /// `owns_gil`, at a stack where its thread `runs_here` ([`RunsAt`]), while `other_holds`:
    /// another thread of its process held the GIL at its read.
    pub fn of(running: bool, owns_gil: bool, runs_here: bool, other_holds: bool) -> GilState {
        match (owns_gil, running) {
            (true, _) => GilState::Held,
            (false, true) => GilState::RanWithout,
            (false, false) if other_holds && runs_here => GilState::Waited,
            (false, false) => GilState::Idle,
        }
    }
}

/// One sample as the GIL rule reads it.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct GilSample<K> {
    pub pid: u32,
    pub time: Timestamp,
    /// The sample's thread.
    pub thread: K,
    pub running: bool,
    pub owns_gil: bool,
    /// Whether its thread runs at its stack ([`RunsAt::observe`]).
    pub runs_here: bool,
}

impl<K> GilSample<K> {
    /// A stack sample as the GIL rule reads it, its thread keyed as the caller keys threads;
    /// `runs_here`: its thread runs at its stack ([`RunsAt::observe`]).
    pub fn of(sample: &StackSample, thread: K, runs_here: bool) -> GilSample<K> {
        GilSample {
            pid: sample.pid,
            time: sample.time,
            thread,
            running: sample.thread.active,
            owns_gil: sample.thread.owns_gil,
            runs_here,
        }
    }
}

/// A stack's frames as one key, for [`RunsAt`] in a view that does not intern stacks.
pub fn frames_key(frames: &[Frame]) -> u64 {
    use std::hash::{Hash, Hasher};
    let mut hasher = std::collections::hash_map::DefaultHasher::new();
    frames.hash(&mut hasher);
    hasher.finish()
}

/// A thread runs at a stack when at least this share of its samples there ran: Python it runs
/// itself, where a wait is a wait for the GIL.
pub const RUNS_HERE: f64 = 0.1;
/// Stacks remembered per thread; past it a new stack is taken as one it does not run at.
pub const MAX_STACKS_RUN_AT: usize = 4096;

/// Where one thread runs: by stack (any key: an interned stack, a frame list's id), its samples
/// and those that ran, so far.
#[derive(Debug, Clone)]
pub struct RunsAt<S> {
    /// By stack, (ran, seen); the latest stack's at hand, so that a thread that stays where it
    /// is counts there with no look-up.
    by_stack: AtHand<S, (u32, u32)>,
}

impl<S> Default for RunsAt<S> {
    fn default() -> Self {
        RunsAt {
            by_stack: Default::default(),
        }
    }
}

impl<S: std::hash::Hash + Eq + Copy> RunsAt<S> {
    /// Counts a sample at `stack`; answers whether the thread ran there at least [`RUNS_HERE`]
    /// of its samples before this one.
    /// Adds where another thread ran (one that ended, into its kind's), within the cap.
    pub fn absorb(&mut self, other: &RunsAt<S>) {
        for (&stack, &(ran, seen)) in &other.by_stack {
            if let Some(slot) = self.by_stack.get_mut_or_new(stack, MAX_STACKS_RUN_AT) {
                *slot = (slot.0.saturating_add(ran), slot.1.saturating_add(seen));
            }
        }
    }

    pub fn observe(&mut self, stack: S, running: bool) -> bool {
        let Some(slot) = self.by_stack.at(stack, MAX_STACKS_RUN_AT) else {
            return false;
        };
        let (ran, seen) = *slot;
        let runs_here = seen > 0 && f64::from(ran) >= RUNS_HERE * f64::from(seen);
        *slot = (
            ran.saturating_add(u32::from(running)),
            seen.saturating_add(1),
        );
        runs_here
    }
}

/// A sample once its read is complete: its state, and the thread that held the GIL at its
/// read when that was another thread.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct GilRead<K> {
    pub state: GilState,
    /// The holder, for a sample that [`GilState::Waited`].
    pub holder: Option<K>,
    /// The holder, for any sample that did not run while another thread held the GIL, at a
    /// stack where it runs or not: the training loop's step reads such a wait in its own code
    /// as one for the GIL where it is not waiting on the GPU (`roles/step.rs`).
    pub held_elsewhere: Option<K>,
}

/// The samples of the latest read (one process, one instant), held until it is complete.
#[derive(Debug, Clone)]
pub struct ReadGroups<K, T> {
    pending: Vec<(GilSample<K>, T)>,
}

impl<K, T> Default for ReadGroups<K, T> {
    fn default() -> Self {
        ReadGroups {
            pending: Vec::new(),
        }
    }
}

impl<K: Copy + PartialEq, T> ReadGroups<K, T> {
    /// Adds a sample; when it belongs to another read than the held ones, those are complete
    /// and handed to `out` first, in the order they came.
    pub fn push(
        &mut self,
        sample: GilSample<K>,
        item: T,
        out: &mut impl FnMut(T, GilSample<K>, GilRead<K>),
    ) {
        let same_read = self
            .pending
            .first()
            .is_none_or(|(s, _)| s.pid == sample.pid && s.time == sample.time);
        if !same_read {
            self.flush(out);
        }
        self.pending.push((sample, item));
    }

    /// Hands on the held read's samples: the read is complete (another kind of event came, or
    /// the recording ended).
    pub fn flush(&mut self, out: &mut impl FnMut(T, GilSample<K>, GilRead<K>)) {
        let holder = self
            .pending
            .iter()
            .find(|(s, _)| s.owns_gil)
            .map(|(s, _)| s.thread);
        for (sample, item) in self.pending.drain(..) {
            let other = holder.filter(|&h| h != sample.thread);
            let state = GilState::of(
                sample.running,
                sample.owns_gil,
                sample.runs_here,
                other.is_some(),
            );
            let held_elsewhere = (!sample.running && !sample.owns_gil)
                .then_some(other)
                .flatten();
            let holder = (state == GilState::Waited).then_some(other).flatten();
            out(
                item,
                sample,
                GilRead {
                    state,
                    holder,
                    held_elsewhere,
                },
            );
        }
    }

    /// Samples held.
    pub fn len(&self) -> usize {
        self.pending.len()
    }

    pub fn is_empty(&self) -> bool {
        self.pending.is_empty()
    }
}

/// `summary.json`'s `gil`: each thread's and process's GIL over the recording, as shares of
/// wall time (of its samples, which are taken at a fixed rate).
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
pub struct GilSummary {
    /// Threads with any GIL time, most held first.
    pub threads: Vec<GilThread>,
    pub by_process: Vec<GilProcess>,
}

/// One thread's GIL.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct GilThread {
    pub pid: u32,
    pub thread: String,
    pub python_thread_id: u64,
    /// Share of its samples it held the GIL.
    pub holds: f64,
    /// Share of its samples it waited for the GIL another thread of its process held.
    pub waits: f64,
    /// Share of its samples it ran without the GIL (native code that released it).
    pub runs_without: f64,
}

/// One process's GIL.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct GilProcess {
    pub pid: u32,
    /// Share of its reads at which some thread held the GIL.
    pub held: f64,
    /// Share of its reads at which a thread waited for it.
    pub contended: f64,
}

/// A thread's or process's GIL counts, by sample or by read.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct GilCounts {
    pub samples: u64,
    pub held: u64,
    pub waited: u64,
    pub ran_without: u64,
}

impl GilCounts {
    pub fn add(&mut self, state: GilState) {
        self.samples += 1;
        match state {
            GilState::Held => self.held += 1,
            GilState::Waited => self.waited += 1,
            GilState::RanWithout => self.ran_without += 1,
            GilState::Idle => {}
        }
    }

    /// Adds another's counts: a thread or process that ended, into its kind's.
    pub fn absorb(&mut self, other: &GilCounts) {
        self.samples += other.samples;
        self.held += other.held;
        self.waited += other.waited;
        self.ran_without += other.ran_without;
    }

    fn share(&self, n: u64) -> f64 {
        n as f64 / self.samples.max(1) as f64
    }

    pub fn holds(&self) -> f64 {
        self.share(self.held)
    }

    pub fn waits(&self) -> f64 {
        self.share(self.waited)
    }

    pub fn runs_without(&self) -> f64 {
        self.share(self.ran_without)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_thread_that_stays_at_a_stack_counts_every_sample_there() {
        let mut at: RunsAt<u32> = RunsAt::default();
        assert!(!at.observe(1, true));
        // 9 waits after one run: 1 of 10 ran, still where it runs.
        for _ in 0..9 {
            assert!(at.observe(1, false));
        }
        // Another stack and back: the run at stack 1 was kept, the 11th wait tips it.
        assert!(!at.observe(2, false));
        assert!(at.observe(1, false));
        assert!(!at.observe(1, false));
        let mut kind: RunsAt<u32> = RunsAt::default();
        kind.absorb(&at);
        assert_eq!(kind.by_stack.get(&1), Some(&(1, 12)));
        assert_eq!(kind.by_stack.get(&2), Some(&(0, 1)));
    }

    fn sample(pid: u32, time: u64, thread: u64, running: bool, owns_gil: bool) -> GilSample<u64> {
        GilSample {
            pid,
            time: Timestamp(time),
            thread,
            running,
            owns_gil,
            runs_here: true,
        }
    }

    fn resolve(samples: &[GilSample<u64>]) -> Vec<(u64, GilState, Option<u64>)> {
        let mut groups = ReadGroups::default();
        let mut out = Vec::new();
        let mut take = |item: u64, _: GilSample<u64>, read: GilRead<u64>| {
            out.push((item, read.state, read.holder))
        };
        for s in samples {
            groups.push(*s, s.thread, &mut take);
        }
        groups.flush(&mut take);
        out
    }

    #[test]
    fn a_waiter_read_before_its_holder_waits_for_it() {
        // One read: the waiter (1) comes before the holder (2); then a read where nobody holds.
        let got = resolve(&[
            sample(7, 100, 1, false, false),
            sample(7, 100, 2, true, true),
            sample(7, 100, 3, true, false),
            sample(7, 200, 1, false, false),
            sample(7, 200, 2, true, false),
        ]);
        assert_eq!(
            got,
            vec![
                (1, GilState::Waited, Some(2)),
                (2, GilState::Held, None),
                (3, GilState::RanWithout, None),
                (1, GilState::Idle, None),
                (2, GilState::RanWithout, None),
            ]
        );
    }

    #[test]
    fn reads_of_other_processes_and_instants_are_apart() {
        let got = resolve(&[
            sample(7, 100, 2, true, true),
            sample(8, 100, 1, false, false),
            sample(7, 110, 1, false, false),
        ]);
        assert_eq!(got[1], (1, GilState::Idle, None));
        assert_eq!(got[2], (1, GilState::Idle, None));
    }

    #[test]
    fn a_thread_asleep_where_it_never_runs_waits_for_something_else() {
        let mut sleeper = sample(7, 100, 1, false, false);
        sleeper.runs_here = false;
        let got = resolve(&[sleeper, sample(7, 100, 2, true, true)]);
        assert_eq!(got[0], (1, GilState::Idle, None));
    }

    #[test]
    fn runs_at_learns_where_a_thread_runs() {
        let mut at = RunsAt::default();
        assert!(
            !at.observe("spin", true),
            "nothing known before the first sample"
        );
        assert!(at.observe("spin", false));
        assert!(!at.observe("sleep", false));
        for _ in 0..20 {
            at.observe("sleep", false);
        }
        assert!(!at.observe("sleep", false));
    }

    #[test]
    fn counts_are_shares_of_samples() {
        let mut c = GilCounts::default();
        for state in [
            GilState::Held,
            GilState::Held,
            GilState::Waited,
            GilState::Idle,
        ] {
            c.add(state);
        }
        assert_eq!(c.holds(), 0.5);
        assert_eq!(c.waits(), 0.25);
        assert_eq!(c.runs_without(), 0.0);
    }
}
