//! Asking the scheduler for short time slices on the sampling thread, while the sampler is
//! losing ticks.
//!
//! A sample is due at a given instant and takes a tenth of a millisecond; the target's
//! threads spin for as long as they are let. On Linux 6.12 and later the fair scheduler
//! (EEVDF) takes a thread's `sched_runtime` as the slice it asks for, and a waking thread
//! that asked for a shorter slice than the running one's gets the CPU first instead of waiting
//! out the other's slice. `perf sched timehist` of a 1000 Hz attach to four spinning threads
//! on two cores showed why ticks are lost: now and then the timer wakes the sampler on the CPU
//! a target thread holds while the other CPU idles, and the sampler waits out that thread's
//! slice (1.5 to 4 ms: 3% of wake-ups waited more than a millisecond, 1% more than 2.8 ms).
//!
//! Asking for short slices all the time took the ticks sampled there from 86-93% to 98-99%,
//! but a sampler that preempts the target's running thread on every wake-up takes its time
//! from the job (its GIL holder) instead of from an idle CPU. So by default
//! ([`crate::ShortSlices::WhenLosingTicks`]) the sampler asks for short slices only after a
//! wake-up that came a whole period late, for the next [`Adaptive::WINDOW`] ticks, then gives
//! the default slice back: at 100 Hz a wake-up 10 ms late almost never happens, and nothing
//! changes. [`crate::ReaderTuning::short_slices`] can say never (`STACKSCOPE_SHORT_SLICES=0`
//! to the binary) or always (`=1`) (docs/performance.md, "Short slices"). The thread's nice
//! value and policy are left as they are; older kernels ignore
//! the field for fair threads, and a failure changes nothing.

use std::time::Duration;

use crate::timer::Tick;

/// The slice asked for: the scheduler's smallest (0.1 ms), about one sample's work.
const SLICE_NS: u64 = 100_000;

/// `struct sched_attr` as the kernel defines it (the first version, 48 bytes, and the
/// utilisation clamps of the second, which the kernel accepts as zero).
#[repr(C)]
#[derive(Default)]
struct SchedAttr {
    size: u32,
    sched_policy: u32,
    sched_flags: u64,
    sched_nice: i32,
    sched_priority: u32,
    sched_runtime: u64,
    sched_deadline: u64,
    sched_period: u64,
    sched_util_min: u32,
    sched_util_max: u32,
}

/// The calling thread's scheduling attributes, with short slices asked for. Answers whether
/// the kernel took them.
pub(crate) fn ask_for_short_slices() -> bool {
    set_slice(SLICE_NS)
}

/// Gives the calling thread back the scheduler's default slice (a fair thread's
/// `sched_runtime` of 0). Answers whether the kernel took it.
pub(crate) fn restore_default_slice() -> bool {
    set_slice(0)
}

/// Sets the calling thread's `sched_runtime` (0: the default slice), keeping the rest of its
/// attributes. Only a fair-scheduled thread (SCHED_OTHER, SCHED_BATCH): a real-time one stays
/// as set.
fn set_slice(runtime_ns: u64) -> bool {
    let Some(mut attr) = attributes()
        .filter(|a| matches!(a.sched_policy as i32, libc::SCHED_OTHER | libc::SCHED_BATCH))
    else {
        return false;
    };
    attr.sched_runtime = runtime_ns;
    // SAFETY: `attr` is a valid `sched_attr` as read back by `attributes`, with its size set.
    let set = unsafe { libc::syscall(libc::SYS_sched_setattr, 0, &attr as *const SchedAttr, 0) };
    set == 0
}

/// Short slices only while ticks are being lost: a tick whose wake-up came a whole period
/// late turns them on for the next [`Adaptive::WINDOW`] ticks, after which the default comes
/// back. Such wake-ups come in runs (while a target thread keeps the sampler's CPU).
#[derive(Debug, Default)]
pub(crate) struct Adaptive {
    /// Ticks left with short slices (0: default slices).
    left: u32,
}

impl Adaptive {
    /// Ticks with short slices after a late wake-up: a quarter of a second at 1000 Hz.
    pub(crate) const WINDOW: u32 = 250;

    /// Accounts for `tick` at `period`: one that slept and woke a whole period late asks for
    /// short slices (a tick that did not sleep is late from the last sample's overrun, which a
    /// slice does not help).
    pub(crate) fn tick(&mut self, tick: &Tick, period: Duration) -> Change {
        if tick.slept && tick.lateness >= period {
            let change = if self.left == 0 && ask_for_short_slices() {
                Change::Short
            } else {
                Change::None
            };
            if self.left > 0 || change == Change::Short {
                self.left = Self::WINDOW;
            }
            return change;
        }
        if self.left > 0 {
            self.left -= 1;
            if self.left == 0 {
                restore_default_slice();
                return Change::Default;
            }
        }
        Change::None
    }

    /// Whether short slices are on.
    #[cfg(test)]
    pub(crate) fn is_short(&self) -> bool {
        self.left > 0
    }
}

/// What a tick changed.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Change {
    None,
    Short,
    Default,
}

/// The calling thread's scheduling attributes, with `size` set to the struct we pass.
fn attributes() -> Option<SchedAttr> {
    let mut attr = SchedAttr::default();
    let size = std::mem::size_of::<SchedAttr>() as u32;
    // SAFETY: `attr` is a writable `sched_attr` of `size` bytes; pid 0 is this thread.
    let got = unsafe {
        libc::syscall(
            libc::SYS_sched_getattr,
            0,
            &mut attr as *mut SchedAttr,
            size,
            0,
        )
    };
    attr.size = size;
    (got == 0).then_some(attr)
}

/// The slice the calling thread asked for, in nanoseconds (None where it cannot be read).
#[cfg(test)]
pub(crate) fn current_slice() -> Option<u64> {
    attributes().map(|a| a.sched_runtime)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn woke(lateness: Duration) -> Tick {
        Tick {
            lateness,
            skipped: 0,
            slept: true,
        }
    }

    fn overran(lateness: Duration) -> Tick {
        Tick {
            slept: false,
            ..woke(lateness)
        }
    }

    #[test]
    fn a_thread_keeps_its_nice_value_and_gets_its_slice_where_the_kernel_has_them() {
        std::thread::spawn(|| {
            // Kernels from 6.12 report a fair thread's slice (0.75 to 3 ms by default);
            // older ones report 0 and ignore what is asked.
            let before = current_slice().expect("sched_getattr");
            // SAFETY: reading this thread's own nice value.
            let nice_before = unsafe { libc::getpriority(libc::PRIO_PROCESS, 0) };
            let took = ask_for_short_slices();
            // SAFETY: as above.
            let nice_after = unsafe { libc::getpriority(libc::PRIO_PROCESS, 0) };
            assert_eq!(nice_before, nice_after);
            assert!(took, "sched_setattr refused a fair thread's own attributes");
            if before == 0 {
                eprintln!("skipped: this kernel has no per-thread slices (before 6.12)");
                return;
            }
            assert_ne!(before, SLICE_NS);
            assert_eq!(current_slice(), Some(SLICE_NS));
        })
        .join()
        .expect("thread");
    }

    #[test]
    fn a_late_wake_up_asks_for_short_slices_for_a_while_and_an_overrun_does_not() {
        std::thread::spawn(|| {
            let before = current_slice().expect("sched_getattr");
            if before == 0 {
                eprintln!("skipped: this kernel has no per-thread slices (before 6.12)");
                return;
            }
            let period = Duration::from_millis(1);
            let mut slices = Adaptive::default();
            // On time, or late by less than a period: nothing asked.
            assert_eq!(
                slices.tick(&woke(Duration::from_micros(300)), period),
                Change::None
            );
            assert_eq!(current_slice(), Some(before));
            // Late because the last sample overran (no sleep): a slice would not help.
            assert_eq!(slices.tick(&overran(3 * period), period), Change::None);
            assert!(!slices.is_short());
            // A wake-up a whole period late: short slices, for the window.
            assert_eq!(slices.tick(&woke(period), period), Change::Short);
            assert_eq!(current_slice(), Some(SLICE_NS));
            for _ in 0..Adaptive::WINDOW / 2 {
                assert_eq!(slices.tick(&woke(Duration::ZERO), period), Change::None);
            }
            // Another late one renews the window without asking again.
            assert_eq!(slices.tick(&woke(2 * period), period), Change::None);
            for _ in 1..Adaptive::WINDOW {
                assert_eq!(slices.tick(&woke(Duration::ZERO), period), Change::None);
                assert!(slices.is_short());
            }
            assert_eq!(slices.tick(&woke(Duration::ZERO), period), Change::Default);
            assert!(!slices.is_short());
            assert_eq!(current_slice(), Some(before));
        })
        .join()
        .expect("thread");
    }
}
