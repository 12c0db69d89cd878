//! OS thread ids for interpreters that do not record them (3.10 and older).
//!
//! Before 3.11 a thread state holds only `thread_id`, the thread's `pthread_t`; py-spy finds
//! the OS id by unwinding every thread's native stack (its `unwind` feature, which we do not
//! build), and without it calls every such thread active: the sleeping threads of a 3.10
//! program filled three quarters of its profile. On Linux a `pthread_t` is the address of
//! the thread's `struct pthread`, and the kernel's id of the thread is a field of it. Where
//! that field sits is found once per process, from the threads themselves: the one offset
//! at which every thread's struct holds a distinct id from `/proc/PID/task` (glibc on x86_64
//! has it at 720, musl near the start). Each sample then reads the field of every thread in
//! one system call and believes only ids that `/proc` lists.

use std::collections::HashSet;

use crate::fast::memory::remote::{Batch, Remote, Slot};
use crate::namespace::TidMap;

/// How much of a `struct pthread` is searched for the id field.
const SEARCH: usize = 1024;
/// glibc's offset of `tid` in `struct pthread` on x86_64: tried first.
const GLIBC_TID: usize = 720;

pub(crate) struct OsTids {
    pid: u32,
    remote: Remote,
    offset: Option<usize>,
    /// The field holds the id in the process's own PID namespace (a container's): checked
    /// against `/proc` under ours, and answered as the process's own, as 3.11+ records it.
    ns: TidMap,
}

impl OsTids {
    pub(crate) fn new(pid: u32) -> OsTids {
        OsTids {
            pid,
            remote: Remote::new(pid),
            offset: None,
            ns: TidMap::new(pid),
        }
    }

    /// The OS thread id of each `pthread_t` (None where it cannot be told).
    pub(crate) fn tids(&mut self, pthreads: &[u64]) -> Vec<Option<u64>> {
        let mut known = vec![0; pthreads.len()];
        self.refresh(pthreads, &mut known);
        known.into_iter().map(|t| (t != 0).then_some(t)).collect()
    }

    /// Brings `known` (the OS id last found for each `pthread_t`, 0 for none) up to date:
    /// the id fields are read again, all in one system call, since glibc hands a new thread
    /// the `struct pthread` (and so the `pthread_t`) of one that has exited. An id that
    /// changed is believed once `/proc` lists it (listed again once, for a thread just
    /// started); 0 where none is found. A thread that has exited keeps its last id.
    pub(crate) fn refresh(&mut self, pthreads: &[u64], known: &mut [u64]) {
        let mut tasks: Option<HashSet<u64>> = None;
        if self.offset.is_none() {
            let listed = tasks.get_or_insert_with(|| tasks_of(self.pid));
            self.offset = self.calibrate(pthreads, listed);
        }
        let Some(offset) = self.offset else {
            known.iter_mut().for_each(|k| *k = 0);
            return;
        };
        let mut batch = Batch::default();
        let slots: Vec<Slot> = pthreads
            .iter()
            .map(|&p| batch.add((p as usize).wrapping_add(offset), 4))
            .collect();
        let ran = batch.run(&mut self.remote).is_ok();
        let read: Vec<u64> = slots
            .iter()
            .map(|&s| {
                batch
                    .get(s)
                    .filter(|_| ran)
                    .and_then(|b| b.try_into().ok())
                    .map_or(0, |b| u64::from(u32::from_le_bytes(b)))
            })
            .collect();
        for (k, &tid) in known.iter_mut().zip(&read) {
            // 0: the kernel cleared the field as the thread exited (its thread state can
            // outlive it for a moment); it keeps the id it had, as 3.11's `native_thread_id`.
            if tid == *k || (tid == 0 && *k != 0) {
                continue;
            }
            let ours = if tid == 0 { None } else { self.ns.ours(tid) };
            let mut listed =
                ours.is_some_and(|t| tasks.get_or_insert_with(|| tasks_of(self.pid)).contains(&t));
            if !listed && tid != 0 {
                let fresh = tasks_of(self.pid);
                listed = self.ns.ours(tid).is_some_and(|t| fresh.contains(&t));
                tasks = Some(fresh);
            }
            *k = if listed { tid } else { 0 };
        }
    }

    /// The offset at which every thread's struct holds a distinct id of this process.
    fn calibrate(&mut self, pthreads: &[u64], tasks: &HashSet<u64>) -> Option<usize> {
        if pthreads.is_empty() || pthreads.contains(&0) {
            return None;
        }
        let mut batch = Batch::default();
        let slots: Vec<Slot> = pthreads
            .iter()
            .map(|&p| batch.add(p as usize, SEARCH))
            .collect();
        batch.run(&mut self.remote).ok()?;
        let structs: Vec<&[u8]> = slots
            .iter()
            .map(|&s| batch.get(s))
            .collect::<Option<Vec<_>>>()?;
        // Every struct holds a distinct listed id there, or 0 (a thread that has just
        // exited: the kernel clears the field), and most hold an id.
        let ns = &mut self.ns;
        let mut fits = |offset: usize| {
            let mut seen = HashSet::new();
            let all = structs.iter().all(|s| {
                s.get(offset..offset + 4)
                    .and_then(|b| b.try_into().ok())
                    .map(|b| u64::from(u32::from_le_bytes(b)))
                    .is_some_and(|tid| {
                        tid == 0
                            || (ns.ours(tid).is_some_and(|t| tasks.contains(&t))
                                && seen.insert(tid))
                    })
            });
            all && seen.len() * 2 >= structs.len().max(1) && !seen.is_empty()
        };
        if fits(GLIBC_TID) {
            return Some(GLIBC_TID);
        }
        (0..SEARCH - 4).step_by(4).find(|&o| fits(o))
    }
}

/// The thread ids `/proc/PID/task` lists.
fn tasks_of(pid: u32) -> HashSet<u64> {
    std::fs::read_dir(format!("/proc/{pid}/task"))
        .map(|dir| {
            dir.flatten()
                .filter_map(|e| e.file_name().to_str()?.parse().ok())
                .collect()
        })
        .unwrap_or_default()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn our_own_threads_are_found_by_their_pthread() {
        let (tx, rx) = std::sync::mpsc::channel();
        let (stop_tx, stop_rx) = std::sync::mpsc::channel::<()>();
        let handle = std::thread::spawn(move || {
            let me = unsafe { libc::pthread_self() } as u64;
            tx.send((me, nix::unistd::gettid().as_raw() as u64)).ok();
            stop_rx.recv().ok();
        });
        let (other, other_tid) = rx.recv().expect("thread starts");
        let me = unsafe { libc::pthread_self() } as u64;
        let my_tid = nix::unistd::gettid().as_raw() as u64;
        let mut tids = OsTids::new(std::process::id());
        assert_eq!(tids.tids(&[me, other]), vec![Some(my_tid), Some(other_tid)]);
        assert_eq!(tids.tids(&[0x10]), vec![None]);
        stop_tx.send(()).ok();
        handle.join().expect("join");
    }
}
