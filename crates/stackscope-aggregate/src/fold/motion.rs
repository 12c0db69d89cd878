//! Whether the target moved: the one answer to "did this thread's stack change?"
//! ([`same_python_stack`]), for a recording's "stuck" verdict ([`Motion`], the hang rule of
//! `jobs/hang.rs` applied to a whole recording) and for the live runs (`watch`'s hang reports,
//! the metrics endpoint's `stackscope_hung`) through [`ProcessMotion`].

use std::collections::{BTreeMap, HashMap};

use stackscope_event::{Frames, Timestamp};

use crate::jobs::FrozenActivity;

/// When the recording's samples began and ended, and when a thread's stack last changed (or a
/// thread appeared).
#[derive(Debug, Clone, Default)]
pub struct Motion {
    pub first: Option<Timestamp>,
    pub latest: Timestamp,
    pub moved_at: Timestamp,
    /// Each thread's reads since the last change: whether one keeps working.
    pub activity: FrozenActivity,
}

impl Motion {
    /// Notes a sample at `time` of thread `thread` of `pid`; `moved` when its thread's Python
    /// stack differs from its last sample's (a thread's first sample moves too: a thread
    /// appeared); `working` as `works_at_read` says.
    pub fn sample(&mut self, time: Timestamp, moved: bool, thread: (u32, u64), working: bool) {
        if self.first.is_none() {
            self.first = Some(time);
            self.moved_at = time;
        }
        self.latest = self.latest.max(time);
        if moved {
            self.moved_at = self.moved_at.max(time);
            self.activity.moved();
        }
        self.activity.read(thread.0, thread.1, working);
    }

    /// Seconds from the last change to the latest sample.
    pub fn unchanged_secs(&self) -> f64 {
        self.latest.0.saturating_sub(self.moved_at.0) as f64 / 1e9
    }

    /// Seconds from the first sample to the latest.
    pub fn span_secs(&self) -> f64 {
        self.first.map_or(0.0, |first| {
            self.latest.0.saturating_sub(first.0) as f64 / 1e9
        })
    }
}

/// Whether two stacks of one thread are at the same place by their Python frames (native
/// frames move under a thread stuck in Python). The sampler hands an unchanged stack over as
/// the same shared slice, so the usual answer costs a pointer comparison.
pub fn same_python_stack(a: &Frames, b: &Frames) -> bool {
    if std::sync::Arc::ptr_eq(a, b) {
        return true;
    }
    let b_python = b.iter().filter(|f| !f.native);
    a.iter().filter(|f| !f.native).eq(b_python)
}

/// Each thread's last Python stack, and when a thread of each process last moved: what the
/// live runs ask of the hang rule. A thread's first stack moves (it appeared), and so does a
/// thread's end ([`ProcessMotion::keep_threads`]).
#[derive(Debug, Default)]
pub struct ProcessMotion {
    threads: HashMap<(u32, u64), Frames>,
    moved_at: BTreeMap<u32, Timestamp>,
    /// Each process's threads' reads since it last moved: whether one keeps working.
    activity: BTreeMap<u32, FrozenActivity>,
    /// When anything last moved, a process's end included.
    last_move: Option<Timestamp>,
}

impl ProcessMotion {
    /// Notes thread `thread` of process `pid` at `frames` at `time`, `working` or not at this
    /// read (`works_at_read`); whether it moved.
    pub fn sample(
        &mut self,
        pid: u32,
        thread: u64,
        frames: &Frames,
        time: Timestamp,
        working: bool,
    ) -> bool {
        let moved = match self.threads.get(&(pid, thread)) {
            Some(last) => !same_python_stack(last, frames),
            None => true,
        };
        if moved {
            self.threads.insert((pid, thread), frames.clone());
        }
        let moved_at = self.moved_at.entry(pid).or_insert(time);
        let activity = self.activity.entry(pid).or_default();
        if moved {
            *moved_at = (*moved_at).max(time);
            activity.moved();
        }
        activity.read(pid, thread, working);
        if moved {
            self.moved(time);
        }
        moved
    }

    /// Whether a thread of `pid` kept working since it last moved.
    pub fn working(&self, pid: u32) -> bool {
        self.activity
            .get(&pid)
            .is_some_and(FrozenActivity::any_working)
    }

    /// Whether a thread of any process kept working: the job is busy, not stuck.
    pub fn any_working(&self) -> bool {
        self.activity.values().any(FrozenActivity::any_working)
    }

    fn moved(&mut self, time: Timestamp) {
        self.last_move = Some(self.last_move.map_or(time, |last| last.max(time)));
    }

    /// Forgets the threads of `pid` not in `alive` (a full read of the process found them
    /// gone): a thread that ended is a change, at `time`.
    pub fn keep_threads(&mut self, pid: u32, alive: &[u64], time: Timestamp) {
        let before = self.threads.len();
        self.threads
            .retain(|&(p, thread), _| p != pid || alive.contains(&thread));
        if self.threads.len() != before {
            if let Some(moved_at) = self.moved_at.get_mut(&pid) {
                *moved_at = (*moved_at).max(time);
            }
            self.moved(time);
        }
    }

    /// A process no longer followed, since `time`: its end moved the job.
    pub fn forget(&mut self, pid: u32, time: Timestamp) {
        self.threads.retain(|&(p, _), _| p != pid);
        self.activity.remove(&pid);
        if self.moved_at.remove(&pid).is_some() {
            self.moved(time);
        }
    }

    /// When a thread of `pid` last moved; `None` before its first sample.
    pub fn moved_at(&self, pid: u32) -> Option<Timestamp> {
        self.moved_at.get(&pid).copied()
    }

    /// The processes followed, by pid, with when each last moved.
    pub fn processes(&self) -> impl Iterator<Item = (u32, Timestamp)> + '_ {
        self.moved_at.iter().map(|(&pid, &at)| (pid, at))
    }

    /// When the job last moved: a thread's stack changed, a thread or a process appeared or
    /// ended. `None` before the first sample.
    pub fn last_move(&self) -> Option<Timestamp> {
        self.last_move
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use stackscope_event::Frame;

    #[test]
    fn the_last_change_and_native_frames_that_do_not_count() {
        let at = |line| -> Frames { vec![Frame::python("f", "a.py", line)].into() };
        let mut with_native = vec![Frame::python("f", "a.py", 1)];
        with_native.insert(
            0,
            Frame {
                native: true,
                ..Frame::python("futex_wait", "libc.so.6", 0)
            },
        );
        let with_native: Frames = with_native.into();
        assert!(same_python_stack(&at(1), &with_native));
        assert!(!same_python_stack(&at(1), &at(2)));
        let mut m = Motion::default();
        m.sample(Timestamp(1_000_000_000), true, (1, 1), false);
        m.sample(Timestamp(2_000_000_000), true, (1, 1), false);
        m.sample(Timestamp(9_000_000_000), false, (1, 1), false);
        assert_eq!(m.unchanged_secs(), 7.0);
        assert_eq!(m.span_secs(), 8.0);
    }

    #[test]
    fn a_process_moves_when_a_thread_changes_appears_or_ends() {
        let at = |line| -> Frames { vec![Frame::python("f", "a.py", line)].into() };
        let secs = |s: u64| Timestamp(s * 1_000_000_000);
        let mut m = ProcessMotion::default();
        assert!(m.sample(1, 10, &at(1), secs(1), false));
        assert!(!m.sample(1, 10, &at(1), secs(2), false));
        assert_eq!(m.moved_at(1), Some(secs(1)));
        // A second thread appears: the process moved.
        assert!(m.sample(1, 11, &at(1), secs(3), false));
        assert_eq!(m.moved_at(1), Some(secs(3)));
        assert!(m.sample(2, 10, &at(5), secs(4), false));
        assert!(m.sample(2, 10, &at(6), secs(5), false));
        assert_eq!(m.last_move(), Some(secs(5)));
        // Thread 11 ended.
        m.keep_threads(1, &[10], secs(6));
        assert_eq!(m.moved_at(1), Some(secs(6)));
        m.keep_threads(1, &[10], secs(7));
        assert_eq!(m.moved_at(1), Some(secs(6)));
        assert_eq!(m.last_move(), Some(secs(6)));
        m.forget(1, secs(8));
        assert_eq!(m.processes().collect::<Vec<_>>(), vec![(2, secs(5))]);
        assert_eq!(
            m.last_move(),
            Some(secs(8)),
            "a process's end moves the job"
        );
    }
}
