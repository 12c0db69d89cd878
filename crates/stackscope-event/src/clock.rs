//! The one clock every event is stamped with.

use std::time::Duration;

use serde::{Deserialize, Serialize};

/// Nanoseconds of CLOCK_MONOTONIC.
///
/// Monotonic time does not jump when the wall clock is set, so intervals between samples are
/// always true; the GPU poller converts NVML's wall-clock microseconds to it once.
#[derive(
    Debug, Clone, Copy, Default, PartialEq, Eq, PartialOrd, Ord, Hash, Serialize, Deserialize,
)]
#[serde(transparent)]
pub struct Timestamp(pub u64);

impl Timestamp {
    /// The current instant.
    pub fn now() -> Timestamp {
        Timestamp(read_clock(libc::CLOCK_MONOTONIC))
    }

    /// Nanoseconds of CLOCK_REALTIME, for converting wall-clock times to this clock.
    pub fn realtime_nanos() -> u64 {
        read_clock(libc::CLOCK_REALTIME)
    }

    pub fn as_nanos(self) -> u64 {
        self.0
    }

    /// Time from `earlier` to `self`; zero when `earlier` is later.
    pub fn saturating_since(self, earlier: Timestamp) -> Duration {
        Duration::from_nanos(self.0.saturating_sub(earlier.0))
    }

    /// Seconds from `start` to `self`, negative when `self` is earlier.
    pub fn seconds_since(self, start: Timestamp) -> f64 {
        (self.0 as f64 - start.0 as f64) / 1e9
    }

    pub fn plus(self, d: Duration) -> Timestamp {
        Timestamp(self.0.saturating_add(d.as_nanos() as u64))
    }
}

fn read_clock(clock: libc::clockid_t) -> u64 {
    let mut ts = libc::timespec {
        tv_sec: 0,
        tv_nsec: 0,
    };
    // SAFETY: `ts` is a valid, writable timespec; clock_gettime cannot fail for these clocks.
    unsafe { libc::clock_gettime(clock, &mut ts) };
    ts.tv_sec as u64 * 1_000_000_000 + ts.tv_nsec as u64
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn monotonic_clock_moves_forward() {
        let a = Timestamp::now();
        let b = Timestamp::now();
        assert!(b >= a);
        assert!(a.0 > 0);
    }

    #[test]
    fn seconds_since_is_signed() {
        let a = Timestamp(2_000_000_000);
        let b = Timestamp(500_000_000);
        assert_eq!(a.seconds_since(b), 1.5);
        assert_eq!(b.seconds_since(a), -1.5);
        assert_eq!(b.saturating_since(a), Duration::ZERO);
    }
}
