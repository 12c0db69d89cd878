//! Each thread's OS state around a sample's read: read (or reused, or deferred) before it,
//! and judged after it, when the read showed whether the thread's Python state moved.

use crate::fast::read::activity::{self, Activity};
use crate::fast::read::reader::{FastReader, Strategy};
use crate::fast::read::state_before::{Before, StateFrom};
use crate::namespace::TidMap;
use crate::procfs::ProcState;

impl FastReader {
    /// Each thread's OS state before the read, and which threads this sample takes as still
    /// ([`FastReader::still`]). A thread that slept a moment ago, still does if its Python
    /// state has not changed (checked after the read, [`FastReader::state_after`]) and it was
    /// not the GIL's holder: its last reading stands. `defer_holder`: the GIL's expected
    /// holder's state is read after the read, if it turns out not to hold the GIL then; a
    /// caller about to stop the process cannot defer it (stopped, every thread reads `t`).
    pub(in crate::fast) fn states_before(
        &mut self,
        now: std::time::Instant,
        defer_holder: bool,
    ) -> Vec<Before> {
        let mut before = std::mem::take(&mut self.spare_before);
        before.clear();
        for (i, k) in self.threads.iter().enumerate() {
            let tid = k.ts.native_thread_id;
            // Our id for it (they differ for a process in a container).
            let own = self.tids.ours(tid);
            // A thread with a stack on record, under the reuse rules.
            let reusable = self.reuse_states && k.sig != 0;
            // The GIL's holder at the end of the last read is busy by the idle rule if it still
            // holds the GIL at the end of this one, whatever the OS says: its state is read only if
            // it turns out not to (after the read). On a process with one busy thread that saves
            // the only `/proc` read of most samples.
            let deferred = defer_holder && reusable && k.tstate == self.expected_holder;
            let (state, how, still) = if deferred {
                (None, StateFrom::Deferred, false)
            } else {
                let earlier = reusable
                    .then(|| own.and_then(|own| self.activity.recent_sleep(own, now)))
                    .flatten();
                match earlier {
                    Some(state) => {
                        let audited = if self.audit {
                            own.and_then(|own| self.activity.peek(own))
                        } else {
                            None
                        };
                        (Some(state), StateFrom::Reused { audited }, true)
                    }
                    None => {
                        let state = own.and_then(|own| self.activity.state_now(own));
                        // Asleep now, as read: as likely where it was as one whose reading is
                        // reused (every sleeper's reading expires within 100-400 ms, and
                        // reading them all in full then cost a sample about as much as all
                        // the others).
                        (
                            state,
                            StateFrom::Read,
                            reusable && activity::is_asleep(state),
                        )
                    }
                }
            };
            // A proof stands for a while only ([`proof::still::PROOF_FOR`]): past it, the thread is
            // read in full once, which a change no proof sees cannot hide from.
            let still = match how {
                StateFrom::Deferred => false,
                _ => still && k.proof.as_ref().is_some_and(|p| p.stands(now)),
            };
            self.still.set(i, still);
            before.push(Before {
                tid,
                state,
                how,
                tstate: k.tstate,
                sig: k.sig,
            });
        }
        before
    }

    /// The OS state a thread is judged by after the read: `before` (None: a thread new this
    /// sample), read now where that does not stand. `same`: its Python state did not change.
    /// `caller_stopped`: the process is still stopped, where every thread reads as stopped:
    /// `before` stands (unknown for the GIL's last holder, busy if it still holds it).
    pub(in crate::fast) fn state_after(
        &mut self,
        before: Option<&Before>,
        tid: u64,
        (owns_gil, same): (bool, bool),
        caller_stopped: bool,
    ) -> Option<ProcState> {
        if caller_stopped {
            return before.and_then(|b| b.state);
        }
        let Some(before) = before else {
            // A thread new this sample: read now unless we stopped the process.
            return match self.strategy {
                Strategy::StopGilHolders => os_state(&mut self.tids, &mut self.activity, tid),
                Strategy::StopProcess => None,
            };
        };
        if self.audit {
            self.stats.idle_decisions += 1;
        }
        match before.how {
            // Busy, whatever its state (unknown: a stopped holder reads busy).
            StateFrom::Deferred if owns_gil => None,
            StateFrom::Deferred => os_state(&mut self.tids, &mut self.activity, tid),
            // A reused state stands only for a thread that did not move: one whose Python
            // state changed, or that holds the GIL, is read at once.
            StateFrom::Reused { audited } if same && !owns_gil => {
                // The audit's question: would reading now have decided otherwise?
                if self.audit
                    && crate::idle::is_active(before.state, owns_gil)
                        != crate::idle::is_active(audited, owns_gil)
                {
                    self.stats.idle_disagreed += 1;
                }
                before.state
            }
            StateFrom::Reused { .. } => {
                self.stats.stat_reused = self.stats.stat_reused.saturating_sub(1);
                os_state(&mut self.tids, &mut self.activity, tid)
            }
            StateFrom::Read => before.state,
        }
    }
}

/// The scheduler state of the thread the interpreter knows as `native_thread_id`, now, under
/// our id for it (they differ for a process in a container): [`Activity::state_now`].
pub(in crate::fast) fn os_state(
    tids: &mut TidMap,
    activity: &mut Activity,
    native_thread_id: u64,
) -> Option<ProcState> {
    tids.ours(native_thread_id)
        .and_then(|tid| activity.state_now(tid))
}
