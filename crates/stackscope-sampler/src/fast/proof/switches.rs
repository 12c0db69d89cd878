//! Whether a thread has been on a CPU since a moment, told by the kernel's record of its
//! context switches, without a system call.
//!
//! When the GIL shows that some thread other than its holder ran since the last sample, any
//! thread may have run, and every sleeper used to be read again for its still proof: three
//! ranges of a `process_vm_readv` each, on pages nobody touched for a while, about 3.4 µs a
//! thread on the project's VM (docs/performance.md). A thread cannot run Python, nor take the
//! GIL, without the scheduler switching it in. So each watched thread gets a `perf_event`
//! ring of its own (a dummy software event with `context_switch`: the kernel writes an 8-byte
//! `PERF_RECORD_SWITCH` at each switch in and out of that thread, and nothing else), mapped
//! read-only into our memory. A thread whose latest record was a switch out at one moment,
//! and whose ring has not moved since, has been off every CPU in between: reading that costs
//! a load from its ring's header page.
//!
//! Opening a ring needs what `perf_event_open` asks of us for another process's thread: the
//! right to trace it, and `perf_event_paranoid` at most 2 (the event counts nothing in the
//! kernel, so it asks for no more), or `CAP_PERFMON`. Each ring is two pages of locked memory,
//! counted against `perf_event_mlock_kb` unless we have `CAP_IPC_LOCK`. Where a ring cannot
//! be had, the thread is simply not watched and is read as before;
//! [`crate::ReaderTuning::switch_rings`] off (`STACKSCOPE_SWITCH_RINGS=0` to the binary)
//! watches none.

use std::io;
use std::sync::atomic::{fence, Ordering};

use crate::fast::memory::addrmap::TidMap;

/// `perf_event_attr`, as far as version 8 of the structure (128 bytes).
#[repr(C)]
#[derive(Default)]
struct PerfEventAttr {
    kind: u32,
    size: u32,
    config: u64,
    sample_period: u64,
    sample_type: u64,
    read_format: u64,
    flags: u64,
    wakeup_events: u32,
    bp_type: u32,
    config1: u64,
    config2: u64,
    branch_sample_type: u64,
    sample_regs_user: u64,
    sample_stack_user: u32,
    clockid: i32,
    sample_regs_intr: u64,
    aux_watermark: u32,
    sample_max_stack: u16,
    reserved_2: u16,
    aux_sample_size: u32,
    reserved_3: u32,
    sig_data: u64,
    config3: u64,
}

const PERF_TYPE_SOFTWARE: u32 = 1;
const PERF_COUNT_SW_DUMMY: u64 = 9;
const FLAG_EXCLUDE_KERNEL: u64 = 1 << 5;
const FLAG_EXCLUDE_HV: u64 = 1 << 6;
/// Also a record when the thread exits (or starts one): a ring whose thread is gone moves,
/// so a new thread given the same id is never taken for the old one still asleep.
const FLAG_TASK: u64 = 1 << 13;
const FLAG_CONTEXT_SWITCH: u64 = 1 << 26;
const PERF_FLAG_FD_CLOEXEC: libc::c_ulong = 8;
const PERF_RECORD_SWITCH: u32 = 14;
const PERF_RECORD_MISC_SWITCH_OUT: u16 = 1 << 13;
/// Set on a switch out by preemption (the thread still runnable), from Linux 4.17 on; before,
/// a preempted thread's switch out reads as one of its own accord.
const PERF_RECORD_MISC_SWITCH_OUT_PREEMPT: u16 = 1 << 14;
/// `data_head`'s place in the ring's header page (`struct perf_event_mmap_page`).
const DATA_HEAD_OFFSET: usize = 1024;
/// Each record is its header alone: type, misc, size.
const RECORD_LEN: u64 = 8;

/// One thread's ring: its header page and one page of records.
struct Ring {
    fd: libc::c_int,
    map: *mut libc::c_void,
    page: usize,
    /// Whether the thread was seen off every CPU after the ring was opened (its `syscall`
    /// file, below): until its first switch, that is the ring's latest word on it.
    off_at_open: bool,
}

// SAFETY: the mapping and the descriptor belong to the ring alone; the kernel writes the
// pages, we only read them.
unsafe impl Send for Ring {}

impl Ring {
    fn open(tid: u64) -> io::Result<Ring> {
        let attr = PerfEventAttr {
            kind: PERF_TYPE_SOFTWARE,
            size: std::mem::size_of::<PerfEventAttr>() as u32,
            config: PERF_COUNT_SW_DUMMY,
            flags: FLAG_EXCLUDE_KERNEL | FLAG_EXCLUDE_HV | FLAG_CONTEXT_SWITCH | FLAG_TASK,
            ..Default::default()
        };
        // SAFETY: `attr` is a valid perf_event_attr of the size it says; the call reads it.
        let fd = unsafe {
            libc::syscall(
                libc::SYS_perf_event_open,
                &attr as *const PerfEventAttr,
                tid as libc::pid_t,
                -1 as libc::c_int,
                -1 as libc::c_int,
                PERF_FLAG_FD_CLOEXEC,
            )
        };
        if fd < 0 {
            return Err(io::Error::last_os_error());
        }
        let fd = fd as libc::c_int;
        // SAFETY: sysconf has no preconditions.
        let page = unsafe { libc::sysconf(libc::_SC_PAGESIZE) } as usize;
        // Read-only: the kernel then keeps writing over the oldest records, and never waits
        // for us to say we read them.
        // SAFETY: a fresh shared mapping of the event's descriptor, of the size it allows
        // (a header page and a power of two of data pages).
        let map = unsafe {
            libc::mmap(
                std::ptr::null_mut(),
                2 * page,
                libc::PROT_READ,
                libc::MAP_SHARED,
                fd,
                0,
            )
        };
        if map == libc::MAP_FAILED {
            let err = io::Error::last_os_error();
            // SAFETY: our own descriptor, closed once.
            unsafe { libc::close(fd) };
            return Err(err);
        }
        Ok(Ring {
            fd,
            map,
            page,
            off_at_open: false,
        })
    }

    /// The ring's head (bytes written so far) and whether its latest record is a switch
    /// out: the thread off every CPU as of that record.
    fn latest(&self) -> (u64, bool) {
        let (head, record) = self.latest_record();
        let out = match record {
            Some(Record::Switch { out, .. }) => out,
            Some(Record::Other) => false,
            None => self.off_at_open,
        };
        (head, out)
    }

    /// The ring's head, and its latest record (None: there is none yet).
    fn latest_record(&self) -> (u64, Option<Record>) {
        // SAFETY: the header page is mapped for as long as the ring lives; `data_head` is a
        // naturally aligned u64 the kernel updates, read as a volatile load.
        let head = unsafe {
            std::ptr::read_volatile(self.map.cast::<u8>().add(DATA_HEAD_OFFSET).cast::<u64>())
        };
        // The records before `head` are complete once we have seen it.
        fence(Ordering::Acquire);
        if head < RECORD_LEN {
            return (head, None);
        }
        let at = ((head - RECORD_LEN) % self.page as u64) as usize;
        // SAFETY: `at` is 8-aligned and at least 8 bytes before the end of the one data page
        // (records are 8 bytes, the page a multiple of 8), which follows the header page.
        let record = unsafe {
            std::ptr::read_volatile(self.map.cast::<u8>().add(self.page + at).cast::<[u8; 8]>())
        };
        let kind = u32::from_ne_bytes([record[0], record[1], record[2], record[3]]);
        let misc = u16::from_ne_bytes([record[4], record[5]]);
        let record = if kind == PERF_RECORD_SWITCH {
            Record::Switch {
                out: misc & PERF_RECORD_MISC_SWITCH_OUT != 0,
                preempted: misc & PERF_RECORD_MISC_SWITCH_OUT_PREEMPT != 0,
            }
        } else {
            Record::Other
        };
        (head, Some(record))
    }
}

/// A ring's latest record, as far as it matters here.
#[derive(Debug, Clone, Copy)]
enum Record {
    Switch {
        out: bool,
        preempted: bool,
    },
    /// The thread's exit (or the start of one of its own).
    Other,
}

/// Where a thread is, as the latest switch of its ring tells it.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Seen {
    /// Switched in, and not out since: on a CPU now. Its stat would say `R`.
    OnCpu,
    /// Switched out by preemption: runnable, waiting for a CPU. Its stat would say `R`.
    Preempted,
    /// Switched out of its own accord: asleep (`S`, `D`, ...) or stopped (`t`, `T`), which
    /// only its stat tells apart; or woken since and still waiting for a CPU (`R`), which
    /// no record tells, for as long as that wait lasts (and, before Linux 4.17, preempted).
    Blocked,
}

impl Drop for Ring {
    fn drop(&mut self) {
        // SAFETY: the mapping and descriptor were made in `open` and are released once.
        unsafe {
            libc::munmap(self.map, 2 * self.page);
            libc::close(self.fd);
        }
    }
}

/// A moment at which a thread was off every CPU, as its ring told it: the ring's head then.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) struct OffCpu(u64);

/// Whether thread `tid` of `pid` is off every CPU as its `/proc/PID/task/TID/syscall` is
/// read: the kernel renders the system call a thread is blocked in only after making sure it
/// is not running (`wait_task_inactive`), and writes `running` otherwise.
fn seen_off_cpu(pid: u32, tid: u64) -> bool {
    match std::fs::read(format!("/proc/{pid}/task/{tid}/syscall")) {
        Ok(text) => !text.is_empty() && !text.starts_with(b"running"),
        Err(_) => false,
    }
}

/// The rings of the threads watched, by our id of each thread.
pub(crate) struct SwitchRings {
    pid: u32,
    rings: TidMap<Option<Ring>>,
    enabled: bool,
    /// Rings opened, and threads that could not have one.
    pub opened: u64,
    pub refused: u64,
}

impl SwitchRings {
    /// Rings for the threads of `pid` where `enabled` ([`crate::ReaderTuning::switch_rings`]),
    /// for none otherwise.
    pub(crate) fn new(pid: u32, enabled: bool) -> SwitchRings {
        SwitchRings {
            pid,
            rings: TidMap::default(),
            enabled,
            opened: 0,
            refused: 0,
        }
    }

    /// If thread `tid` is off every CPU now (as of its latest switch), that moment; its ring
    /// is opened on first use (None for a thread that cannot have one).
    pub(crate) fn off_cpu(&mut self, tid: u64) -> Option<OffCpu> {
        let (head, out) = self.ring(tid)?.latest();
        out.then_some(OffCpu(head))
    }

    /// Where thread `tid` is now, as its latest switch tells it; its ring is opened on first
    /// use. None: no ring, no switch since it was opened, or its exit.
    pub(crate) fn seen(&mut self, tid: u64) -> Option<Seen> {
        match self.ring(tid)?.latest_record().1? {
            Record::Switch { out: false, .. } => Some(Seen::OnCpu),
            Record::Switch {
                preempted: true, ..
            } => Some(Seen::Preempted),
            Record::Switch { .. } => Some(Seen::Blocked),
            Record::Other => None,
        }
    }

    /// Thread `tid`'s ring, opened on first use (None for a thread that cannot have one).
    fn ring(&mut self, tid: u64) -> Option<&Ring> {
        if !self.enabled {
            return None;
        }
        let pid = self.pid;
        self.rings
            .entry(tid)
            .or_insert_with(|| match Ring::open(tid) {
                Ok(mut ring) => {
                    self.opened += 1;
                    // A ring knows a thread from its first switch on; one asleep since before
                    // has none: ask the kernel whether it is off the CPU now that the ring is open.
                    ring.off_at_open = seen_off_cpu(pid, tid);
                    Some(ring)
                }
                Err(_) => {
                    self.refused += 1;
                    None
                }
            })
            .as_ref()
    }

    /// Whether thread `tid` has stayed off every CPU since `then`: its ring has not moved.
    pub(crate) fn still_off(&self, tid: u64, then: OffCpu) -> bool {
        match self.rings.get(&tid) {
            Some(Some(ring)) => ring.latest().0 == then.0,
            _ => false,
        }
    }

    /// Threads with a ring (or refused one).
    #[cfg(test)]
    pub(crate) fn len(&self) -> usize {
        self.rings.len()
    }

    /// Closes the rings of threads no longer sampled.
    pub(crate) fn retain(&mut self, live: &[u64]) {
        if self.rings.len() > live.len() {
            self.rings.retain(|tid, _| live.contains(tid));
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::sync::mpsc;
    use std::time::Duration;

    /// A thread of ours asleep on a channel is off the CPU, and stays so by its ring until it
    /// is woken and runs; then a new moment off the CPU comes once it sleeps again.
    #[test]
    fn a_sleeping_thread_stays_off_until_it_runs() {
        let (tid_tx, tid_rx) = mpsc::channel();
        let (go_tx, go_rx) = mpsc::channel::<()>();
        let (done_tx, done_rx) = mpsc::channel::<()>();
        let sleeper = std::thread::spawn(move || {
            tid_tx.send(nix::unistd::gettid().as_raw() as u64).unwrap();
            while go_rx.recv().is_ok() {
                done_tx.send(()).unwrap();
            }
        });
        let tid = tid_rx.recv().unwrap();
        let mut rings = SwitchRings::new(std::process::id(), true);
        // Asleep when its ring is opened: off the CPU, as its syscall file says.
        std::thread::sleep(Duration::from_millis(20));
        let first = rings.off_cpu(tid).expect("asleep, before any switch");
        assert_eq!(
            (rings.opened, rings.refused),
            (1, 0),
            "perf_event_open refused"
        );
        assert!(rings.still_off(tid, first));
        go_tx.send(()).unwrap();
        done_rx.recv().unwrap();
        std::thread::sleep(Duration::from_millis(20));
        assert!(!rings.still_off(tid, first), "it ran");
        let then = rings
            .off_cpu(tid)
            .expect("asleep again, after a switch out");
        std::thread::sleep(Duration::from_millis(20));
        assert!(rings.still_off(tid, then));
        assert_eq!(rings.off_cpu(tid), Some(then));
        go_tx.send(()).unwrap();
        done_rx.recv().unwrap();
        std::thread::sleep(Duration::from_millis(20));
        assert!(!rings.still_off(tid, then), "it ran");
        let later = rings.off_cpu(tid).expect("asleep again");
        assert_ne!(later, then);
        assert!(rings.still_off(tid, later));
        drop(go_tx);
        sleeper.join().unwrap();
        rings.retain(&[]);
        assert!(rings.rings.is_empty());
        assert!(
            !rings.still_off(tid, later),
            "a thread no longer watched is not known off"
        );
    }

    /// A thread that exits moves its ring: its id, given to a new thread, is not taken for
    /// the old one still asleep.
    #[test]
    fn a_thread_that_exits_is_not_still_off() {
        let (tid, go, thread) = crate::fast::test_threads::sleeper();
        let mut rings = SwitchRings::new(std::process::id(), true);
        std::thread::sleep(Duration::from_millis(20));
        let then = rings.off_cpu(tid).expect("asleep");
        assert!(rings.still_off(tid, then));
        drop(go);
        thread.join().unwrap();
        assert!(!rings.still_off(tid, then), "it ran to its end");
    }

    /// A thread that spins is on a CPU (or preempted from one) by its ring; once it sleeps
    /// again, it has blocked.
    #[test]
    fn a_ring_tells_a_running_thread_from_a_blocked_one() {
        let (tid, go, thread) = crate::fast::test_threads::sleeper();
        let mut rings = SwitchRings::new(std::process::id(), true);
        std::thread::sleep(Duration::from_millis(20));
        // Asleep since before its ring: no switch to tell by.
        assert_eq!(rings.seen(tid), None);
        assert_eq!(rings.refused, 0, "perf_event_open refused");
        go.send(()).unwrap();
        // It spins for 20 ms once it is switched in.
        let deadline = std::time::Instant::now() + Duration::from_secs(5);
        let mut on = None;
        while on.is_none() && std::time::Instant::now() < deadline {
            on = rings
                .seen(tid)
                .filter(|s| matches!(s, Seen::OnCpu | Seen::Preempted));
        }
        assert!(on.is_some(), "never seen on a CPU");
        std::thread::sleep(Duration::from_millis(60));
        assert_eq!(rings.seen(tid), Some(Seen::Blocked));
        drop(go);
        thread.join().unwrap();
        assert_eq!(rings.seen(tid), None, "its exit is its latest record");
    }
}
