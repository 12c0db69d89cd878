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

use super::remote::{Batch, Remote, Slot};

/// How much of a `struct pthread` is searched for the id field.
const SEARCH: usize = 1024;
/// glibc's offset of `tid` in `struct pthread` on x86_64: tried first.
const GLIBC_TID: usize = 720;

pub(crate) struct OsTids {
    pid: u32,
    remote: Remote,
    offset: Option<usize>,
}

impl OsTids {
    pub(crate) fn new(pid: u32) -> OsTids {
        OsTids {
            pid,
            remote: Remote::new(pid),
            offset: None,
        }
    }

    /// The OS thread id of each `pthread_t` (None where it cannot be told).
    pub(crate) fn tids(&mut self, pthreads: &[u64]) -> Vec<Option<u64>> {
        let tasks = tasks(self.pid);
        if self.offset.is_none() {
            self.offset = self.calibrate(pthreads, &tasks);
        }
        let Some(offset) = self.offset else {
            return vec![None; pthreads.len()];
        };
        let mut batch = Batch::default();
        let slots: Vec<Slot> = pthreads
            .iter()
            .map(|&p| batch.add((p as usize).wrapping_add(offset), 4))
            .collect();
        if batch.run(&mut self.remote).is_err() {
            return vec![None; pthreads.len()];
        }
        slots
            .iter()
            .map(|&s| {
                let b = batch.get(s)?;
                let tid = u64::from(u32::from_le_bytes(b.try_into().ok()?));
                tasks.contains(&tid).then_some(tid)
            })
            .collect()
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
        let fits = |offset: usize| {
            let mut seen = HashSet::new();
            structs.iter().all(|s| {
                s.get(offset..offset + 4)
                    .and_then(|b| b.try_into().ok())
                    .map(|b| u64::from(u32::from_le_bytes(b)))
                    .is_some_and(|tid| tasks.contains(&tid) && seen.insert(tid))
            })
        };
        if fits(GLIBC_TID) {
            return Some(GLIBC_TID);
        }
        (0..SEARCH - 4).step_by(4).find(|&o| fits(o))
    }
}

/// The thread ids `/proc/PID/task` lists.
fn tasks(pid: u32) -> HashSet<u64> {
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
