//! The sampling clock: a fixed schedule that reports how late each tick is.

use std::time::{Duration, Instant};

/// One tick of the schedule.
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct Tick {
    /// How far past its scheduled instant this tick fired.
    pub lateness: Duration,
    /// Ticks skipped because the sampler fell more than a whole period behind.
    pub skipped: u64,
    /// Whether the timer slept until this tick (its lateness is then the wake-up's), rather
    /// than finding it already due after the last sample.
    pub slept: bool,
}

/// Fires at `rate` Hz on a fixed schedule (not "sleep one period after each sample", which
/// would drift by the sampling cost). Each tick falls at a random instant within its period:
/// a strictly periodic sampler aliases with a target whose loop has a period near a multiple of
/// ours (a 20 ms training step sampled every 10 ms sees the same two instants of it forever),
/// while one random instant per period keeps the exact rate and sees every phase equally.
/// When a sample overruns so far that whole periods passed, it skips them rather than firing a
/// burst, and says how many it skipped.
pub struct SampleTimer {
    period: Duration,
    /// The start of the current period.
    slot: Instant,
    /// The instant chosen within it.
    next: Instant,
    random: XorShift,
}

impl SampleTimer {
    pub fn new(rate_hz: f64) -> SampleTimer {
        let period = Duration::from_secs_f64(1.0 / rate_hz);
        let slot = Instant::now();
        let mut random = XorShift::seeded();
        let next = slot + random.within(period);
        SampleTimer {
            period,
            slot,
            next,
            random,
        }
    }

    pub fn period(&self) -> Duration {
        self.period
    }

    /// The instant the next tick is due.
    pub fn next_tick(&self) -> Instant {
        self.next
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
        let slept = self.next > now;
        if slept {
            std::thread::sleep(self.next - now);
        }
        Some(self.fire(Instant::now(), slept))
    }

    /// Fires the tick now, for a caller that waited for [`SampleTimer::next_tick`] itself
    /// (on a channel, with that deadline).
    pub fn tick_now(&mut self) -> Tick {
        self.fire(Instant::now(), false)
    }

    /// Accounts for a tick that fires at `now`.
    fn fire(&mut self, now: Instant, slept: bool) -> Tick {
        let lateness = now.saturating_duration_since(self.next);
        // `now` falls in the period `behind` after the current one.
        let into = now.saturating_duration_since(self.slot);
        let behind = into.as_nanos() / self.period.as_nanos().max(1);
        if behind == 0 {
            // On time: the next tick at a random instant of the next period.
            self.slot += self.period;
            self.next = self.slot + self.random.within(self.period);
            return Tick {
                lateness,
                skipped: 0,
                slept,
            };
        }
        // Late into a later period: the periods in between get no sample, and the one `now`
        // falls in gets its tick at a random instant of what is left of it. Skipping that one
        // too would lose a sample whenever a tick drawn near the end of its period wakes a
        // little late (at 1000 Hz, a 100 us wake-up latency would cost a tenth of the ticks).
        let skipped = u64::try_from(behind - 1).unwrap_or(u64::MAX);
        let advance = u32::try_from(behind).unwrap_or(u32::MAX);
        self.slot += self.period * advance;
        let left = (self.slot + self.period).saturating_duration_since(now);
        self.next = now + self.random.within(left);
        Tick {
            lateness,
            skipped,
            slept,
        }
    }
}

/// A tiny xorshift generator: the timer needs cheap, unpredictable offsets, not cryptography.
struct XorShift(u64);

impl XorShift {
    fn seeded() -> XorShift {
        let nanos = std::time::SystemTime::now()
            .duration_since(std::time::UNIX_EPOCH)
            .map(|d| d.as_nanos() as u64)
            .unwrap_or(0x9E37_79B9_7F4A_7C15);
        XorShift(nanos | 1)
    }

    fn next(&mut self) -> u64 {
        let mut x = self.0;
        x ^= x << 13;
        x ^= x >> 7;
        x ^= x << 17;
        self.0 = x;
        x
    }

    /// A uniformly random duration in [0, span).
    fn within(&mut self, span: Duration) -> Duration {
        let nanos = u64::try_from(span.as_nanos()).unwrap_or(u64::MAX).max(1);
        Duration::from_nanos(self.next() % nanos)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn an_on_time_tick_skips_nothing_and_lands_in_the_next_period() {
        let mut timer = SampleTimer::new(100.0);
        let slot = timer.slot;
        assert!(timer.next >= slot && timer.next < slot + Duration::from_millis(10));
        timer.next = slot + Duration::from_millis(5);
        let scheduled = timer.next;
        let tick = timer.fire(scheduled + Duration::from_micros(100), true);
        assert_eq!(tick.lateness, Duration::from_micros(100));
        assert_eq!(tick.skipped, 0);
        assert!(timer.next >= slot + Duration::from_millis(10));
        assert!(timer.next < slot + Duration::from_millis(20));
    }

    #[test]
    fn an_overrun_skips_the_missed_ticks_instead_of_bursting() {
        let mut timer = SampleTimer::new(100.0);
        let slot = timer.slot;
        let tick = timer.fire(slot + Duration::from_millis(35), true);
        // Periods 1 and 2 get no sample.
        assert_eq!(tick.skipped, 2);
        // The next tick falls in what is left of period 3, the one now is in.
        assert!(timer.next >= slot + Duration::from_millis(35));
        assert!(timer.next < slot + Duration::from_millis(40));
        // And the one after in period 4.
        let at = timer.next;
        assert_eq!(timer.fire(at, true).skipped, 0);
        assert!(timer.next >= slot + Duration::from_millis(40));
        assert!(timer.next < slot + Duration::from_millis(50));
    }

    #[test]
    fn a_tick_a_little_late_into_the_next_period_costs_no_sample() {
        let mut timer = SampleTimer::new(1000.0);
        let start = timer.slot;
        let mut ticks = 0u64;
        let mut skipped = 0u64;
        // Every tick wakes 300 us late (a loaded machine): still one sample a period.
        for _ in 0..1000 {
            let at = timer.next + Duration::from_micros(300);
            let tick = timer.fire(at, true);
            ticks += 1;
            skipped += tick.skipped;
        }
        assert_eq!(skipped, 0);
        let span = timer.slot - start;
        assert!(
            span <= Duration::from_millis(1001),
            "{ticks} ticks over {span:?}"
        );
    }

    #[test]
    fn ticks_keep_the_rate_but_not_a_fixed_phase() {
        let mut timer = SampleTimer::new(100.0);
        let start = timer.slot;
        let mut offsets = Vec::new();
        for _ in 0..1000 {
            let at = timer.next;
            offsets.push((at - start).as_nanos() % 10_000_000);
            timer.fire(at, true);
        }
        // 1000 ticks span 1000 periods: the rate is exact.
        assert!(timer.slot - start == Duration::from_millis(10_000));
        // And the phase within the period is spread out, not stuck.
        let early = offsets.iter().filter(|o| **o < 5_000_000).count();
        assert!(
            (350..650).contains(&early),
            "{early} of 1000 in the first half"
        );
    }

    #[test]
    fn a_deadline_before_the_tick_wakes_early() {
        let mut timer = SampleTimer::new(1.0);
        // The tick's instant is drawn at random within the second: pin it well past the
        // deadline (a draw under 20 ms made this test fail about once in fifty runs).
        let tick_at = Instant::now() + Duration::from_millis(800);
        timer.next = tick_at;
        let got = timer.wait(Some(Instant::now() + Duration::from_millis(20)));
        assert!(got.is_none());
        assert!(Instant::now() < tick_at, "slept until the tick");
        assert_eq!(timer.next, tick_at, "the tick was spent");
    }
}
