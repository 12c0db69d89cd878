//! Waits that are the point. In a job without a loop (a server, a script) the time its threads
//! spend waiting, on a backend, a lock, a reply, is its latency; without `--idle` those samples
//! are left out of the profile, which then shows only the little that ran. When they outnumber
//! the samples kept, the summary says where most of them wait and that `--idle` counts them.

use foldhash::HashMap;
use serde::{Deserialize, Serialize};

use crate::fold::{Aggregator, FrameId, StackId, StackTable};
use crate::jobs::place_in;
use crate::roles::{Role, ThreadRole};

/// Waiting samples left out, and where most of them wait.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct WaitsLeftOut {
    /// Samples of waiting threads left out (`idle_samples_skipped`).
    pub left_out: u64,
    /// Samples kept.
    pub kept: u64,
    /// Where most waiting samples wait: the innermost frame of the job's own code, else the
    /// innermost frame of code (`slow_backend (server.py:12)`).
    pub at: String,
    /// The share of all waiting samples that wait there.
    pub share: f64,
    /// The thread (or pool of threads) that waits there most.
    pub thread: String,
}

impl Aggregator {
    /// Where the waits left out wait, when they outnumber the samples kept in a job with no
    /// loop; `None` with `--idle` (they are kept), with a loop (its step already reads its
    /// waits) or when waits are the lesser part.
    pub(super) fn waits_left_out(&self, roles: &[ThreadRole]) -> Option<WaitsLeftOut> {
        let has_loop = roles.iter().any(|r| r.role == Role::Trainer);
        if self.config.include_idle || has_loop || self.idle_skipped <= self.samples {
            return None;
        }
        let mut by_place: HashMap<FrameId, (u64, HashMap<&str, u64>)> = HashMap::default();
        let mut waits = 0u64;
        for thread in self.threads.iter() {
            for (&stack, counts) in &thread.activity.stacks {
                let waiting = counts.all().waiting;
                let Some(at) = wait_place(&self.table, stack).filter(|_| waiting > 0) else {
                    continue;
                };
                waits += waiting;
                let place = by_place.entry(at).or_default();
                place.0 += waiting;
                *place.1.entry(thread.name.as_str()).or_default() += waiting;
            }
        }
        let (&at, (n, threads)) = by_place.iter().max_by_key(|(_, (n, _))| *n)?;
        let thread = threads.iter().max_by_key(|(_, n)| **n).map(|(t, _)| *t)?;
        Some(WaitsLeftOut {
            left_out: self.idle_skipped,
            kept: self.samples,
            at: self.table.frame(at)?.label.clone(),
            share: *n as f64 / waits.max(1) as f64,
            thread: thread.to_owned(),
        })
    }
}

/// The frame a stack waits at, as its owner reads it (`jobs::place_in`).
fn wait_place(table: &StackTable, stack: StackId) -> Option<FrameId> {
    let entry = table.stacks().get(stack as usize)?;
    place_in(entry.frames.iter().rev().copied(), |f| {
        table
            .frame(f)
            .filter(|e| e.function.is_some())
            .map(|e| e.origin)
    })
}
