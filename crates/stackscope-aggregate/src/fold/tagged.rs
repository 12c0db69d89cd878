//! Where a stack sample goes once the tagger knows the GPU's state at its instant: into the
//! stack table's GPU views, the time buckets and its thread's activity. A sample of the
//! start-up a `record` leaves out stays in the GPU views (the flamegraphs and the exports show
//! what ran, start-up included) and is counted as start-up, but not in its thread's activity,
//! which the roles and the verdict read.
//!
//! Start-up ends where the first busy burst begins (`gpu/cycle.rs`), which is known only once
//! the burst has lasted a moment. Until then tagged samples wait here, a bounded while: when
//! the burst is confirmed, those before its start are start-up and the rest count as usual;
//! when no burst comes (a job that never keeps the GPU busy) there is no start-up to leave out,
//! and they all count as usual.

use std::collections::VecDeque;

use stackscope_event::Timestamp;

use super::buckets::TimeBuckets;
use super::intern::{StackId, StackTable};
use super::threads::{ThreadKey, ThreadTable};
use crate::gpu::GpuTag;

/// Tagged samples that wait at most for the end of start-up; past it there is taken to be no
/// start-up (about 30 s of 64 threads at 100 Hz).
pub const MAX_STARTUP_HELD: usize = 200_000;

/// A stack sample held for its GPU tag.
#[derive(Debug, Clone, Copy)]
pub(crate) struct Held {
    /// Its interned stack; `None` for a waiting sample of a thread whose stacks are not followed.
    pub stack: Option<StackId>,
    /// Whether it counts in the profile (it ran, or `--idle`).
    pub kept: bool,
    pub running: bool,
    pub thread: ThreadKey,
    /// Whether it waited for the GIL (`gil/`).
    pub gil_waited: bool,
    /// Another thread of its process that held the GIL at the sample, for a sample that did
    /// not run ([`crate::gil::GilRead::held_elsewhere`]).
    pub gil_holder: Option<ThreadKey>,
}

/// A sample with its tag.
pub(crate) type Tagged = (Timestamp, Held, GpuTag);

/// Whether start-up is being left out, and how far it has come.
#[derive(Debug)]
pub(crate) enum Startup {
    /// Not left out (`attach`, no GPU), or given up on.
    Off,
    /// No burst yet: tagged samples wait.
    Waiting(VecDeque<Tagged>),
    /// Start-up ended at this instant.
    Over(Timestamp),
}

impl Startup {
    pub fn end(&self) -> Option<Timestamp> {
        match self {
            Startup::Over(end) => Some(*end),
            _ => None,
        }
    }
}

/// The tables a tagged sample is counted into.
pub(crate) struct Sink<'a> {
    pub table: &'a mut StackTable,
    pub buckets: &'a mut TimeBuckets,
    pub threads: &'a mut ThreadTable,
}

impl Sink<'_> {
    /// Counts one tagged sample; `in_startup` when it falls in a start-up left out.
    pub fn count(&mut self, (time, held, tag): Tagged, in_startup: bool) {
        if let (true, Some(stack)) = (held.kept, held.stack) {
            self.table.count_tag(stack, tag);
            if in_startup {
                self.table.count_startup(stack);
            }
            self.buckets.count_stack(time, stack, tag);
        }
        if !in_startup {
            if let Some(thread) = self.threads.get_mut(&held.thread) {
                thread.activity.count(
                    held.stack,
                    tag,
                    held.running,
                    held.gil_waited,
                    held.gil_holder,
                );
            }
        }
    }
}

/// Passes tagged samples through the start-up gate into `sink`. `startup_end` is where the
/// timeline says start-up ended, if it has. Returns whether the gate gave up waiting (too
/// many samples waited), so that the timeline gives up too.
pub(crate) fn pass(
    state: &mut Startup,
    startup_end: Option<Timestamp>,
    sink: &mut Sink<'_>,
    tagged: impl IntoIterator<Item = Tagged>,
) -> bool {
    let mut gave_up = false;
    settle(state, startup_end, sink);
    for sample in tagged {
        match state {
            Startup::Off => sink.count(sample, false),
            Startup::Over(end) => {
                let in_startup = sample.0 < *end;
                sink.count(sample, in_startup);
            }
            Startup::Waiting(held) => {
                held.push_back(sample);
                if held.len() > MAX_STARTUP_HELD {
                    give_up(state, sink);
                    gave_up = true;
                }
            }
        }
    }
    gave_up
}

/// Ends the wait once the timeline knows where start-up ended.
pub(crate) fn settle(state: &mut Startup, startup_end: Option<Timestamp>, sink: &mut Sink<'_>) {
    let (Startup::Waiting(_), Some(end)) = (&*state, startup_end) else {
        return;
    };
    let Startup::Waiting(held) = std::mem::replace(state, Startup::Over(end)) else {
        return;
    };
    for sample in held {
        let in_startup = sample.0 < end;
        sink.count(sample, in_startup);
    }
}

/// No start-up after all: what waited counts as usual.
pub(crate) fn give_up(state: &mut Startup, sink: &mut Sink<'_>) {
    if let Startup::Waiting(held) = std::mem::replace(state, Startup::Off) {
        for sample in held {
            sink.count(sample, false);
        }
    }
}
