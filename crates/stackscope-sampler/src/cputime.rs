//! Where the sampling thread's CPU time goes, tick by tick, for [`crate::ReaderTuning::stats`]
//! (`STACKSCOPE_READER_STATS=1` to the binary): asleep and waking, reading, and the rest
//! (events, batches). Waking is measured because on a VM it is not small: the kernel charges
//! a thread woken on an idle CPU from the moment of its wake-up, so the CPU's way out of idle
//! (timer reprogramming, each a trap to the host) counts as the thread's (docs/performance.md,
//! "What waking costs").

/// This thread's CPU time in nanoseconds (0 if the clock cannot be read).
pub(crate) fn thread_ns() -> u64 {
    let mut t = libc::timespec {
        tv_sec: 0,
        tv_nsec: 0,
    };
    // SAFETY: `t` is a valid timespec for the call to fill.
    if unsafe { libc::clock_gettime(libc::CLOCK_THREAD_CPUTIME_ID, &mut t) } != 0 {
        return 0;
    }
    (t.tv_sec as u64)
        .saturating_mul(1_000_000_000)
        .saturating_add(t.tv_nsec as u64)
}

/// What the sampling thread's time since the last mark was spent on.
#[derive(Debug, Clone, Copy)]
pub(crate) enum Phase {
    /// In the timer's sleep: going to sleep, and everything charged to the thread on waking.
    Wait,
    /// Reading every target's stacks (with the events made of them, and the scan for new
    /// children when one is due).
    Read,
    /// The rest: batches handed over, statistics, targets that ended.
    Other,
}

/// The sampling thread's CPU time by [`Phase`], printed when dropped.
pub(crate) struct TickCosts {
    on: bool,
    last: u64,
    wait: u64,
    read: u64,
    other: u64,
    ticks: u64,
}

impl TickCosts {
    pub(crate) fn new(on: bool) -> TickCosts {
        TickCosts {
            on,
            last: if on { thread_ns() } else { 0 },
            wait: 0,
            read: 0,
            other: 0,
            ticks: 0,
        }
    }

    /// Charges the time since the last mark to `phase`.
    pub(crate) fn mark(&mut self, phase: Phase) {
        if !self.on {
            return;
        }
        let now = thread_ns();
        let spent = now.saturating_sub(self.last);
        self.last = now;
        match phase {
            Phase::Wait => self.wait += spent,
            Phase::Read => {
                self.read += spent;
                self.ticks += 1;
            }
            Phase::Other => self.other += spent,
        }
    }

    /// The line printed at the end, once there was a tick.
    pub(crate) fn summary(&self) -> Option<String> {
        if !self.on || self.ticks == 0 {
            return None;
        }
        let per = |ns: u64| ns as f64 / self.ticks as f64 / 1e3;
        Some(format!(
            "sampling thread's CPU a tick over {} ticks: {:.1} us asleep and waking, \
             {:.1} us reading, {:.1} us the rest",
            self.ticks,
            per(self.wait),
            per(self.read),
            per(self.other)
        ))
    }
}

impl Drop for TickCosts {
    fn drop(&mut self) {
        if let Some(line) = self.summary() {
            use std::io::Write;
            let _ = writeln!(std::io::stderr(), "stackscope: {line}");
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn thread_time_moves_with_work_and_not_with_sleep() {
        let start = thread_ns();
        let mut x = 0u64;
        for i in 0..5_000_000u64 {
            x = std::hint::black_box(x.wrapping_mul(31).wrapping_add(i));
        }
        let worked = thread_ns() - start;
        assert!(
            worked > 100_000,
            "5M multiplies took {worked} ns of thread time"
        );
        let before = thread_ns();
        std::thread::sleep(std::time::Duration::from_millis(50));
        let slept = thread_ns() - before;
        assert!(
            slept < 20_000_000,
            "a 50 ms sleep cost {slept} ns of thread time"
        );
    }

    #[test]
    fn phases_are_charged_the_time_since_the_last_mark() {
        let mut costs = TickCosts::new(true);
        std::thread::sleep(std::time::Duration::from_millis(20));
        costs.mark(Phase::Wait);
        let mut x = 0u64;
        for i in 0..5_000_000u64 {
            x = std::hint::black_box(x.wrapping_mul(31).wrapping_add(i));
        }
        costs.mark(Phase::Read);
        costs.mark(Phase::Other);
        assert_eq!(costs.ticks, 1);
        assert!(costs.read > 100_000, "read {}", costs.read);
        assert!(
            costs.wait < costs.read,
            "wait {} read {}",
            costs.wait,
            costs.read
        );
        let line = costs.summary().expect("a tick was counted");
        assert!(line.contains("over 1 ticks"), "{line}");
        assert!(TickCosts::new(false).summary().is_none());
    }
}
