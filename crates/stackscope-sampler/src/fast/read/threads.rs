//! The interpreter's list of thread states, as the reader follows it between samples.
//!
//! Each sample reads the list head and every known thread state in its one batch; the list
//! is walked afresh (a read per thread) only when those no longer link up: a thread started
//! or ended.

use crate::fast::error::ReadError;
use crate::fast::layout::{usize_at, Layout};
use crate::fast::memory::remote::Remote;
use crate::fast::memory::snapshot::TsWords;
use crate::fast::read::attempt::Attempt;
use crate::fast::read::request::Globals;
use crate::fast::read::thread_model::Known;

/// py-spy's bound on the list, against loops in torn links.
const MAX_THREADS: usize = 4096;

/// Whether the list read in `attempt` is still the one `known` follows.
pub(crate) fn matches(known: &[Known], attempt: &Attempt) -> bool {
    let Some(head) = attempt.head else {
        return false;
    };
    if head != known.first().map_or(0, |k| k.tstate) {
        return false;
    }
    attempt.states.iter().enumerate().all(|(i, ts)| {
        let next = known.get(i + 1).map_or(0, |k| k.tstate);
        ts.is_some_and(|t| t.next == next)
    })
}

/// Walks the list from its head (from `head`, if already read), keeping what `old` knew of
/// the threads still in it.
pub(crate) fn rebuild(
    remote: &mut Remote,
    layout: &Layout,
    globals: &Globals,
    old: &[Known],
    head: Option<usize>,
) -> Result<Vec<Known>, ReadError> {
    let mut addr = match head {
        Some(h) => h,
        None => usize_at(&remote.read(globals.head_ptr, 8).map_err(gone)?, 0)
            .ok_or(ReadError::ThreadGone)?,
    };
    let mut fresh = Vec::new();
    while addr != 0 {
        if fresh.len() >= MAX_THREADS {
            return Err(ReadError::Layout(format!(
                "the thread list is longer than {MAX_THREADS}: a loop"
            )));
        }
        let bytes = remote.read(addr, layout.ts_read_len).map_err(gone)?;
        let mut ts = TsWords::parse(layout, addr, &bytes).ok_or(ReadError::ThreadGone)?;
        let (extra, codes, sig, proof, recent, off_cpu) =
            match old.iter().find(|k| k.tstate == addr) {
                Some(k) => {
                    if ts.native_thread_id == 0 && ts.thread_id == k.ts.thread_id {
                        ts.native_thread_id = k.ts.native_thread_id;
                    }
                    // A thread state reused by a new thread is a thread that changed.
                    let same = ts.thread_id == k.ts.thread_id;
                    let sig = if same { k.sig } else { 0 };
                    let proof = k.proof.clone().filter(|_| same);
                    let recent = if same {
                        k.recent.clone()
                    } else {
                        Default::default()
                    };
                    let off_cpu = k.off_cpu.filter(|_| same);
                    (
                        k.extra.clone(),
                        k.codes.clone(),
                        sig,
                        proof,
                        recent,
                        off_cpu,
                    )
                }
                None => Default::default(),
            };
        fresh.push(Known {
            tstate: addr,
            ts,
            extra,
            // Found again at the thread's next good read.
            window_floor: 0,
            codes,
            entries: Vec::new(),
            sig,
            proof,
            // Known good again after this sample's read.
            proven_at: None,
            recent,
            off_cpu,
            // A rebuilt list starts its record of tries afresh.
            vouch: Default::default(),
            proving: Default::default(),
            walk_spare: Default::default(),
        });
        addr = ts.next;
    }
    Ok(fresh)
}

/// A thread state that cannot be read (EFAULT: unmapped) was freed while we followed the
/// list; any other failure is the system call's.
fn gone(e: std::io::Error) -> ReadError {
    if e.raw_os_error() == Some(libc::EFAULT) {
        ReadError::ThreadGone
    } else {
        ReadError::io("Failed to read the thread list", e)
    }
}
