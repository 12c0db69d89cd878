//! Asking the scheduler for short time slices on the sampling thread: a measured trade-off,
//! off unless `STACKSCOPE_SHORT_SLICES=1`.
//!
//! A sample is due at a given instant and takes a tenth of a millisecond; the target's
//! threads spin for as long as they are let. On Linux 6.12 and later the fair scheduler
//! (EEVDF) takes a thread's `sched_runtime` as the slice it asks for, and a waking thread
//! that asked for a shorter slice than the running one's gets the CPU first instead of waiting
//! out the other's slice. At 1000 Hz on two cores shared with four spinning threads that took
//! the ticks sampled from 93% to 99%, and the target's slowdown from about 0% to 8-11%: the
//! sampler no longer waits for a CPU the target leaves free (its threads take turns on the
//! GIL), it takes the GIL holder's (docs/performance.md). A job's speed is worth more than
//! its thousandth tick, so it is not the default. The thread's nice value and policy are left
//! as they are. Older kernels ignore the field for fair threads; a failure changes nothing.

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
    // Only a fair-scheduled thread (SCHED_OTHER, SCHED_BATCH): a real-time one stays as set.
    let Some(mut attr) = attributes()
        .filter(|a| matches!(a.sched_policy as i32, libc::SCHED_OTHER | libc::SCHED_BATCH))
    else {
        return false;
    };
    attr.sched_runtime = SLICE_NS;
    // SAFETY: `attr` is a valid `sched_attr` as read back by `attributes`, with its size set.
    let set = unsafe { libc::syscall(libc::SYS_sched_setattr, 0, &attr as *const SchedAttr, 0) };
    set == 0
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
}
