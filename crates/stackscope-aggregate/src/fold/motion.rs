//! Whether the target moved: when any thread's Python stack last changed, and whether a thread
//! kept working since, for a recording's "stuck" verdict (the hang rule of `jobs/hang.rs`,
//! applied to a whole recording).

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
}
