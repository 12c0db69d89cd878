//! Where a thread is blocked in a system call, from `/proc/PID/task/TID/syscall`: the kernel
//! renders it only once the thread is off its CPU (`wait_task_inactive`), as the call's number,
//! its six arguments, then the user stack pointer and instruction pointer the thread will return
//! to; `running` for a thread on a CPU, `-1 SP PC` for one blocked outside any call.

/// The user stack pointer and instruction pointer of a thread blocked in a system call: the
/// registers its native stack is unwound from, as `PTRACE_GETREGS` reads them during a stop.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) struct SyscallSite {
    pub sp: u64,
    pub pc: u64,
}

/// Where thread `tid` of `pid` is blocked in a system call now; None when it runs, is
/// blocked outside any call, or the file cannot be read.
pub(crate) fn blocked_in_syscall(pid: u32, tid: u64) -> Option<SyscallSite> {
    let text = std::fs::read(format!("/proc/{pid}/task/{tid}/syscall")).ok()?;
    parse(std::str::from_utf8(&text).ok()?)
}

fn parse(text: &str) -> Option<SyscallSite> {
    let fields: Vec<&str> = text.split_whitespace().collect();
    // The number, six arguments, the stack and instruction pointers.
    let [nr, .., sp, pc] = fields.as_slice() else {
        return None;
    };
    if fields.len() != 9 || nr.starts_with('-') {
        return None;
    }
    let hex = |s: &str| u64::from_str_radix(s.strip_prefix("0x")?, 16).ok();
    Some(SyscallSite {
        sp: hex(sp)?,
        pc: hex(pc)?,
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_blocked_call_gives_its_stack_and_instruction_pointers() {
        let text = "230 0x1 0x0 0x7ffd18e5c5f0 0x0 0x0 0x0 0x7fff4caf3ec0 0x7f418eeed545\n";
        assert_eq!(
            parse(text),
            Some(SyscallSite {
                sp: 0x7fff_4caf_3ec0,
                pc: 0x7f41_8eee_d545
            })
        );
    }

    #[test]
    fn running_or_outside_a_call_gives_none() {
        assert_eq!(parse("running\n"), None);
        assert_eq!(parse("-1 0x7fff4caf3ec0 0x7f418eeed545\n"), None);
        assert_eq!(parse(""), None);
        assert_eq!(parse("230 0x1 0x7fff4caf3ec0 zz\n"), None);
    }

    #[test]
    fn a_thread_of_ours_asleep_in_a_call_is_found_there() {
        let (tx, rx) = std::sync::mpsc::channel::<()>();
        let (tid_tx, tid_rx) = std::sync::mpsc::channel();
        let sleeper = std::thread::spawn(move || {
            // SAFETY: gettid has no preconditions.
            tid_tx.send(unsafe { libc::gettid() } as u64).ok();
            rx.recv().ok();
        });
        let tid = tid_rx.recv().expect("the thread's id");
        let pid = std::process::id();
        // Until it blocks in its futex wait, it reads as running.
        let deadline = std::time::Instant::now() + std::time::Duration::from_secs(10);
        let mut site = None;
        while site.is_none() && std::time::Instant::now() < deadline {
            site = blocked_in_syscall(pid, tid);
            std::thread::sleep(std::time::Duration::from_millis(5));
        }
        let site = site.expect("the thread blocks in a system call");
        assert_ne!(site.sp, 0);
        assert_ne!(site.pc, 0);
        assert_eq!(blocked_in_syscall(pid, tid), Some(site), "it has not moved");
        tx.send(()).ok();
        sleeper.join().ok();
    }
}
