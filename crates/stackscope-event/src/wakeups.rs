//! How precisely a thread's timed waits end: its timer slack (`PR_SET_TIMERSLACK`).
//!
//! The kernel may end a timed wait (a sleep, a futex or `poll` timeout) anywhere from its
//! deadline to the deadline plus the thread's slack, and it uses that room to end it with
//! another timer's interrupt that falls inside it. A thread that polls on its own schedule
//! and can come a little late (the memory and GPU pollers) thus wakes alongside the sampler's
//! tick, on a CPU already awake, instead of waking a sleeping CPU for itself.

use std::time::Duration;

/// Lets the calling thread's timed waits end up to `by` after their deadlines (at least 1 ns:
/// 0 would restore the process default). False where the kernel refused.
pub fn let_waits_end_late(by: Duration) -> bool {
    let ns = libc::c_ulong::try_from(by.as_nanos().max(1)).unwrap_or(libc::c_ulong::MAX);
    // SAFETY: prctl(PR_SET_TIMERSLACK) takes a plain integer and touches no memory of ours.
    unsafe { libc::prctl(libc::PR_SET_TIMERSLACK, ns, 0, 0, 0) == 0 }
}

/// The calling thread's slack, as the kernel holds it.
pub fn current_slack() -> Option<Duration> {
    // SAFETY: prctl(PR_GET_TIMERSLACK) takes no pointer; it answers the slack or -1.
    let ns = unsafe { libc::prctl(libc::PR_GET_TIMERSLACK, 0, 0, 0, 0) };
    u64::try_from(ns).ok().map(Duration::from_nanos)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_thread_s_slack_is_its_own_and_reads_back() {
        let before = current_slack();
        assert!(before.is_some());
        let inside = std::thread::spawn(|| {
            assert!(let_waits_end_late(Duration::from_millis(10)));
            current_slack()
        })
        .join()
        .expect("thread");
        assert_eq!(inside, Some(Duration::from_millis(10)));
        // This thread kept its own, untouched by the other's.
        assert_eq!(current_slack(), before);
    }
}
