//! Converting NVML's sample times (wall-clock microseconds) to the recording's clock
//! (CLOCK_MONOTONIC nanoseconds, [`Timestamp`]).
//!
//! The offset between the two clocks is measured once when polling starts, so every sample is
//! converted the same way and the intervals between them stay exact.

use stackscope_event::Timestamp;

/// How many read triples [`ClockOffset::measure`] takes; it keeps the tightest.
const TRIALS: usize = 7;

/// CLOCK_REALTIME minus CLOCK_MONOTONIC, in nanoseconds.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct ClockOffset {
    realtime_minus_monotonic_ns: i128,
}

impl ClockOffset {
    /// Measures the offset now. Each trial reads monotonic, realtime, monotonic; the trial with
    /// the smallest gap between its two monotonic reads (the one least disturbed by preemption)
    /// gives the offset, against the midpoint of that gap.
    pub fn measure() -> ClockOffset {
        let mut best: Option<(u64, i128)> = None;
        for _ in 0..TRIALS {
            let before = Timestamp::now().as_nanos();
            let real = Timestamp::realtime_nanos();
            let after = Timestamp::now().as_nanos();
            let gap = after.saturating_sub(before);
            let mid = i128::from(before) + i128::from(gap / 2);
            let offset = i128::from(real) - mid;
            match best {
                Some((best_gap, _)) if best_gap <= gap => {}
                _ => best = Some((gap, offset)),
            }
        }
        ClockOffset {
            realtime_minus_monotonic_ns: best.map_or(0, |(_, offset)| offset),
        }
    }

    /// An offset given directly (tests, or a caller that measured it itself).
    pub fn from_nanos(realtime_minus_monotonic_ns: i128) -> ClockOffset {
        ClockOffset {
            realtime_minus_monotonic_ns,
        }
    }

    pub fn as_nanos(self) -> i128 {
        self.realtime_minus_monotonic_ns
    }

    /// The monotonic instant of an NVML timestamp (wall-clock µs), clamped to the clock's range.
    pub fn to_monotonic(self, wall_us: u64) -> Timestamp {
        let ns = i128::from(wall_us) * 1000 - self.realtime_minus_monotonic_ns;
        Timestamp(ns.clamp(0, i128::from(u64::MAX)) as u64)
    }

    /// The NVML timestamp (wall-clock µs) of a monotonic instant: the inverse of
    /// [`ClockOffset::to_monotonic`], to the microsecond.
    pub fn to_wall_us(self, time: Timestamp) -> u64 {
        let ns = i128::from(time.as_nanos()) + self.realtime_minus_monotonic_ns;
        (ns / 1000).clamp(0, i128::from(u64::MAX)) as u64
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn converts_with_a_known_offset() {
        // Wall clock 1_700_000_000.000_000 s, monotonic 1000 s at the same instant.
        let offset = ClockOffset::from_nanos(1_700_000_000_000_000_000 - 1_000_000_000_000);
        assert_eq!(
            offset.to_monotonic(1_700_000_000_000_000),
            Timestamp(1_000_000_000_000)
        );
        // 166 ms of wall clock later is 166 ms of monotonic clock later.
        assert_eq!(
            offset.to_monotonic(1_700_000_000_166_000),
            Timestamp(1_000_166_000_000)
        );
        assert_eq!(
            offset.to_wall_us(Timestamp(1_000_166_000_000)),
            1_700_000_000_166_000
        );
    }

    #[test]
    fn clamps_instead_of_wrapping() {
        let offset = ClockOffset::from_nanos(5_000);
        assert_eq!(
            offset.to_monotonic(1),
            Timestamp(0),
            "before the clock's start"
        );
        let offset = ClockOffset::from_nanos(-5_000);
        assert_eq!(offset.to_monotonic(u64::MAX), Timestamp(u64::MAX));
    }

    #[test]
    fn measured_offset_maps_now_to_now() {
        let offset = ClockOffset::measure();
        let before = Timestamp::now();
        let wall_us = Timestamp::realtime_nanos() / 1000;
        let after = Timestamp::now();
        let converted = offset.to_monotonic(wall_us);
        // Truncating to µs loses up to 1 µs; allow a few ms for preemption between the reads.
        let slack = 5_000_000;
        assert!(
            converted.as_nanos() + slack >= before.as_nanos()
                && converted.as_nanos() <= after.as_nanos() + slack,
            "{before:?} <= {converted:?} <= {after:?}"
        );
        assert!(offset.as_nanos() > 0, "realtime is ahead of monotonic");
    }

    #[test]
    fn round_trips_to_the_microsecond() {
        let offset = ClockOffset::measure();
        let now = Timestamp::now();
        let back = offset.to_monotonic(offset.to_wall_us(now));
        assert!(now.as_nanos().abs_diff(back.as_nanos()) < 1000);
    }
}
