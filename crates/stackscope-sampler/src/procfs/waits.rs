//! Whether a blocked thread waits with no time limit, by the system call it is blocked in
//! (`/proc/PID/task/TID/syscall`): a futex wait whose timeout argument (the 4th) is null. A
//! wait with a time limit shows its timeout, or, once a signal or a tracer's stop has
//! interrupted it, the kernel's `restart_syscall`, which only timed waits resume through.

use std::fs;
use std::time::Duration;

/// `futex` on x86_64.
const FUTEX: &str = "202";

/// A thread found running is read again this many times, [`AGAIN_AFTER`] apart: one just
/// resumed from a stop (a dump's) is back in its wait within microseconds.
const READS: u32 = 50;
const AGAIN_AFTER: Duration = Duration::from_millis(2);

/// Whether thread `tid` of `pid` is blocked in a futex wait with no time limit.
pub fn waits_without_limit(pid: u32, tid: u64) -> bool {
    let path = format!("/proc/{pid}/task/{tid}/syscall");
    for _ in 0..READS {
        match fs::read_to_string(&path) {
            Ok(line) if line.starts_with("running") => std::thread::sleep(AGAIN_AFTER),
            Ok(line) => return untimed_futex_wait(&line),
            Err(_) => return false,
        }
    }
    false
}

fn untimed_futex_wait(syscall: &str) -> bool {
    let mut fields = syscall.split_whitespace();
    fields.next() == Some(FUTEX) && fields.nth(3).is_some_and(|timeout| timeout == "0x0")
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn only_a_futex_wait_without_a_timeout_has_no_limit() {
        // lock.acquire() and lock.acquire(timeout=1000) of CPython 3.11, then the latter once
        // a stop interrupted it.
        let forever = "202 0x55f4a84cae50 0x189 0x0 0x0 0x0 0xffffffff 0x7f2b06527950 0x7f2b06";
        let timed = "202 0x55f4a85409f0 0x89 0x0 0x7f2b05d269f0 0x0 0xffffffff 0x7f2b05d269";
        let restarted = "219 0x55d72c47e860 0x89 0x0 0x7f9a63b989f0 0x0 0xffffffff 0x7f9a63b9";
        assert!(untimed_futex_wait(forever));
        assert!(!untimed_futex_wait(timed));
        assert!(!untimed_futex_wait(restarted));
        assert!(!untimed_futex_wait("running"));
        assert!(!untimed_futex_wait("202 0x1"));
    }
}
