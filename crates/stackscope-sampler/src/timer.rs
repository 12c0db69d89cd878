//! The sampling clock: a fixed schedule that reports how late each tick is.

use std::time::{Duration, Instant};

/// One tick of the schedule.
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct Tick {
    /// How far past its scheduled instant this tick fired.
    pub lateness: Duration,
    /// Ticks skipped because the sampler fell more than a whole period behind.
    pub skipped: u64,
}

/// Fires at `rate` Hz on a fixed schedule (not "sleep one period after each sample", which
/// would drift by the sampling cost). When a sample overruns so far that ticks were missed, it
/// skips them rather than firing a burst, and says how many it skipped.
pub struct SampleTimer {
    period: Duration,
    next: Instant,
}

impl SampleTimer {
    pub fn new(rate_hz: f64) -> SampleTimer {
        let period = Duration::from_secs_f64(1.0 / rate_hz);
        SampleTimer {
            period,
            next: Instant::now() + period,
        }
    }

    pub fn period(&self) -> Duration {
        self.period
    }

    /// Sleeps until the next tick, waking early when `deadline` (if any) comes first: then it
    /// returns `None`.
    pub fn wait(&mut self, deadline: Option<Instant>) -> Option<Tick> {
        let now = Instant::now();
        if let Some(deadline) = deadline {
            if deadline <= self.next {
                if deadline > now {
                    std::thread::sleep(deadline - now);
                }
                return None;
            }
        }
        if self.next > now {
            std::thread::sleep(self.next - now);
        }
        Some(self.fire(Instant::now()))
    }

    /// Accounts for a tick that fires at `now`.
    fn fire(&mut self, now: Instant) -> Tick {
        let lateness = now.saturating_duration_since(self.next);
        let behind = lateness.as_nanos() / self.period.as_nanos().max(1);
        let skipped = u64::try_from(behind).unwrap_or(u64::MAX);
        self.next += self.period * (u32::try_from(behind).unwrap_or(u32::MAX).saturating_add(1));
        Tick { lateness, skipped }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn an_on_time_tick_skips_nothing() {
        let mut timer = SampleTimer::new(100.0);
        let scheduled = timer.next;
        let tick = timer.fire(scheduled + Duration::from_micros(100));
        assert_eq!(tick.skipped, 0);
        assert_eq!(tick.lateness, Duration::from_micros(100));
        assert_eq!(timer.next, scheduled + Duration::from_millis(10));
    }

    #[test]
    fn an_overrun_skips_the_missed_ticks_instead_of_bursting() {
        let mut timer = SampleTimer::new(100.0);
        let scheduled = timer.next;
        let tick = timer.fire(scheduled + Duration::from_millis(35));
        assert_eq!(tick.skipped, 3);
        // The next tick is the first scheduled instant after now, not one of the missed ones.
        assert_eq!(timer.next, scheduled + Duration::from_millis(40));
    }

    #[test]
    fn a_deadline_before_the_tick_wakes_early() {
        let mut timer = SampleTimer::new(1.0);
        let start = Instant::now();
        let got = timer.wait(Some(start + Duration::from_millis(20)));
        assert!(got.is_none());
        assert!(start.elapsed() < Duration::from_millis(500));
    }
}
