//! A process whose every thread waits on a lock and none runs: what one look at a process can
//! say of a deadlock (a deadlock if it lasts, which `watch` confirms), and who holds the locks
//! where a lock records it.
//!
//! The rule ([`all_wait_on_locks`]): the process has threads, and each is idle, blocked in a
//! lock's wait (a lock, a condition, a semaphore, a queue of the process's own) with no time
//! limit, none in one of `multiprocessing`'s, which another process may release. (A wait with
//! a time limit ends by itself: `Event.wait(5)` in a loop is a thread at work.)
//!
//! Owners ([`LockedProcess::of`]): a `threading.RLock` records the thread that holds it (its
//! `threading.get_ident()`); a `threading.Lock` records none. The locks read are the RLocks
//! among the variables of each thread's innermost Python frame, where `with lock:` or
//! `lock.acquire()` waits, as a dump with locals shows them (`<_thread.RLock at 0x7f...>`). A
//! thread waits on those of them another thread holds; the reading of a lock's owner is the
//! caller's (it reads the target's memory).

use serde::Serialize;
use stackscope_event::{FrameDump, ProcessDump, ThreadDump, ThreadState};

/// The type of a `threading.RLock` as the target names it.
const RLOCK_TYPE: &str = "_thread.RLock";

/// Whether every thread of `process` waits on a lock of its own with no time limit
/// (`without_limit`, which the caller reads from the OS) and none runs.
pub fn all_wait_on_locks(
    process: &ProcessDump,
    without_limit: impl Fn(&ThreadDump) -> bool,
) -> bool {
    let waits_forever = |t: &ThreadDump| waits_on_own_lock(t) && without_limit(t);
    !process.threads.is_empty() && process.threads.iter().all(waits_forever)
}

/// Idle, blocked on a lock, and not on one of `multiprocessing`'s (shared between processes:
/// a worker waiting for its turn at a queue it shares with its siblings).
fn waits_on_own_lock(thread: &ThreadDump) -> bool {
    let shared = innermost_python(thread).is_some_and(|f| {
        let path = f.path.as_deref().unwrap_or(&f.file);
        path.contains("multiprocessing/")
    });
    thread.state == ThreadState::WaitingOnLock && !thread.active && !shared
}

fn innermost_python(thread: &ThreadDump) -> Option<&FrameDump> {
    thread.frames.iter().find(|f| !f.native)
}

/// The addresses of the RLocks among the variables of `thread`'s innermost Python frame
/// (none without locals).
pub fn rlocks_at_wait(thread: &ThreadDump) -> Vec<u64> {
    let Some(locals) = innermost_python(thread).and_then(|f| f.locals.as_ref()) else {
        return Vec::new();
    };
    let mut found: Vec<u64> = locals
        .iter()
        .filter_map(|l| rlock_address(l.repr.as_deref()?))
        .collect();
    found.sort_unstable();
    found.dedup();
    found
}

/// The address in a variable's text when it is an RLock: `<_thread.RLock at 0x7f3e380b6b80>`.
fn rlock_address(repr: &str) -> Option<u64> {
    let hex = repr
        .strip_prefix('<')?
        .strip_prefix(RLOCK_TYPE)?
        .strip_prefix(" at 0x")?
        .strip_suffix('>')?;
    u64::from_str_radix(hex, 16).ok()
}

/// A process whose every thread waits on a lock: `dump`'s line and JSON.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct LockedProcess {
    pub pid: u32,
    pub threads: usize,
    /// The threads whose lock's owner is known, with the threads that hold it.
    pub waits: Vec<HeldBy>,
}

/// A waiting thread and who holds what it waits on.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct HeldBy {
    pub thread: String,
    pub held_by: Vec<String>,
}

impl LockedProcess {
    /// The facts of `process` (every thread of which waits on a lock), with each RLock's owner
    /// as `owner_of` reads it from the target (`Some(0)`: held by no thread; `None`: not
    /// read). `with_locals` is the same process read with locals, where owners are looked for.
    pub fn of(
        process: &ProcessDump,
        with_locals: &ProcessDump,
        mut owner_of: impl FnMut(u64) -> Option<u64>,
    ) -> LockedProcess {
        let waits = process
            .threads
            .iter()
            .filter_map(|t| {
                let read = with_locals
                    .threads
                    .iter()
                    .find(|w| w.python_thread_id == t.python_thread_id)?;
                let held_by = holders(read, process, &mut owner_of);
                (!held_by.is_empty()).then(|| HeldBy {
                    thread: t.display_name(),
                    held_by,
                })
            })
            .collect();
        LockedProcess {
            pid: process.pid,
            threads: process.threads.len(),
            waits,
        }
    }

    /// "All 2 threads of process 42 wait on locks and none runs: a deadlock if it lasts, which
    /// `watch` confirms. MainThread waits on an RLock held by ring-1; ring-1 on one held by
    /// MainThread."
    pub fn sentence(&self) -> String {
        let who = match self.threads {
            1 => format!("The only thread of process {} waits on a lock", self.pid),
            n => format!(
                "All {n} threads of process {} wait on locks and none runs",
                self.pid
            ),
        };
        format!(
            "{who}: a deadlock if it lasts, which `watch` confirms. {}",
            self.owners_sentence()
        )
    }

    fn owners_sentence(&self) -> String {
        if self.waits.is_empty() {
            return "Who holds the locks is not known: only a threading.RLock records its \
                    owner, read where the waiting frame holds it in a variable."
                .to_owned();
        }
        let waits: Vec<String> = self
            .waits
            .iter()
            .enumerate()
            .map(|(i, w)| {
                let what = if i == 0 {
                    "waits on an RLock"
                } else {
                    "on one"
                };
                format!("{} {what} held by {}", w.thread, w.held_by.join(" or "))
            })
            .collect();
        format!("{}.", waits.join("; "))
    }
}

/// The threads that hold the RLocks `thread` waits at (those held by another thread), by
/// name; a holder that is no thread of the process any more is said so.
pub(super) fn holders(
    thread: &ThreadDump,
    process: &ProcessDump,
    owner_of: &mut impl FnMut(u64) -> Option<u64>,
) -> Vec<String> {
    let mut names: Vec<String> = rlocks_at_wait(thread)
        .into_iter()
        .filter_map(&mut *owner_of)
        .filter(|&owner| owner != 0 && owner != thread.python_thread_id)
        .map(|owner| thread_named(process, owner))
        .collect();
    names.dedup();
    names
}

fn thread_named(process: &ProcessDump, ident: u64) -> String {
    process
        .threads
        .iter()
        .find(|t| t.python_thread_id == ident)
        .map_or_else(
            || format!("thread {ident:#x}, which has ended"),
            ThreadDump::display_name,
        )
}

#[cfg(test)]
mod tests {
    use super::*;
    use stackscope_event::LocalVariable;
    use stackscope_testkit::dumps;

    fn local(name: &str, repr: &str) -> LocalVariable {
        LocalVariable {
            name: name.into(),
            repr: Some(repr.into()),
            arg: true,
        }
    }

    /// A thread of ident `ident` blocked at `with second:` in `transfer(first, second)`.
    fn waiting(name: &str, ident: u64, first: u64, second: u64) -> ThreadDump {
        let mut frame = dumps::frame("transfer", "bank.py", 12);
        frame.locals = Some(vec![
            local("first", &format!("<_thread.RLock at {first:#x}>")),
            local("second", &format!("<_thread.RLock at {second:#x}>")),
            local("amount", "12"),
        ]);
        ThreadDump {
            python_thread_id: ident,
            ..dumps::thread(name, ident, ThreadState::WaitingOnLock, vec![frame])
        }
    }

    /// Threads `0..n` in a ring: thread i holds lock i and waits on lock i + 1.
    fn ring(n: u64) -> (ProcessDump, impl Fn(u64) -> Option<u64>) {
        let threads = (0..n)
            .map(|i| waiting(&format!("t{i}"), 0x100 + i, 0x10 + i, 0x10 + (i + 1) % n))
            .collect();
        let owner = move |lock: u64| (lock >= 0x10 && lock < 0x10 + n).then(|| 0x100 + lock - 0x10);
        (dumps::process(42, "python3 bank.py", threads), owner)
    }

    #[test]
    fn every_thread_of_a_ring_waits_on_the_next_ones_rlock() {
        for n in [2, 3, 5] {
            let (process, owner) = ring(n);
            assert!(all_wait_on_locks(&process, |_| true));
            let locked = LockedProcess::of(&process, &process, owner);
            assert_eq!(locked.waits.len(), n as usize);
            for (i, wait) in locked.waits.iter().enumerate() {
                assert_eq!(wait.held_by, vec![format!("t{}", (i + 1) % n as usize)]);
            }
            let line = locked.sentence();
            assert!(
                line.starts_with(&format!(
                    "All {n} threads of process 42 wait on locks and none runs: a deadlock if \
                     it lasts, which `watch` confirms. t0 waits on an RLock held by t1; t1 on \
                     one held by t"
                )),
                "{line}"
            );
        }
    }

    #[test]
    fn without_owners_the_line_says_what_is_known() {
        let (process, _) = ring(2);
        let locked = LockedProcess::of(&process, &process, |_| None);
        assert!(locked.waits.is_empty());
        assert!(locked.sentence().ends_with(
            "Who holds the locks is not known: only a threading.RLock records its owner, read \
             where the waiting frame holds it in a variable."
        ));
        // A holder that ended while holding the lock.
        let locked = LockedProcess::of(&process, &process, |_| Some(0x999));
        assert_eq!(
            locked.waits[0].held_by,
            vec!["thread 0x999, which has ended"]
        );
    }

    #[test]
    fn one_running_thread_or_a_shared_lock_is_no_deadlock() {
        let (mut process, _) = ring(2);
        process.threads[1].active = true;
        assert!(!all_wait_on_locks(&process, |_| true));
        let (mut process, _) = ring(2);
        process.threads[1].state = ThreadState::Sleeping;
        assert!(!all_wait_on_locks(&process, |_| true));
        // A pool's worker waiting for its turn at the queue it shares with its siblings.
        let worker = dumps::thread(
            "MainThread",
            7,
            ThreadState::WaitingOnLock,
            vec![
                dumps::frame("SimpleQueue.get", "multiprocessing/queues.py", 364),
                dumps::frame("worker", "multiprocessing/pool.py", 114),
            ],
        );
        let pool_worker = dumps::process(7, "python3 pool.py", vec![worker]);
        assert!(!all_wait_on_locks(&pool_worker, |_| true));
        assert!(!all_wait_on_locks(
            &dumps::process(8, "python3", vec![]),
            |_| true
        ));
        // A wait with a time limit ends by itself.
        let (process, _) = ring(2);
        assert!(!all_wait_on_locks(&process, |t| t.python_thread_id != 0x101));
    }

    #[test]
    fn only_rlocks_are_read() {
        assert_eq!(
            rlock_address("<_thread.RLock at 0x7f3e380b6b80>"),
            Some(0x7f3e_380b_6b80)
        );
        assert_eq!(rlock_address("<_thread.lock at 0x7f3e380b6b80>"), None);
        assert_eq!(rlock_address("\"<_thread.RLock at 0x1>\""), None);
    }
}
