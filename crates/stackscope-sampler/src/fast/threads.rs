//! The interpreter's list of thread states, as the reader follows it between samples.
//!
//! Each sample reads the list head and every known thread state in its one batch; the list
//! is walked afresh (a read per thread) only when those no longer link up: a thread started
//! or ended.

use anyhow::Context;

use super::attempt::{Attempt, Globals, Known};
use super::layout::{usize_at, Layout};
use super::remote::Remote;
use super::snapshot::TsWords;

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
) -> anyhow::Result<Vec<Known>> {
    let mut addr = match head {
        Some(h) => h,
        None => usize_at(&remote.read(globals.head_ptr, 8)?, 0)
            .context("Failed to copy PyThreadState head pointer")?,
    };
    let mut fresh = Vec::new();
    while addr != 0 {
        if fresh.len() >= MAX_THREADS {
            anyhow::bail!("Max thread recursion depth reached");
        }
        let bytes = remote
            .read(addr, layout.ts_read_len)
            .context("Failed to copy PyThreadState")?;
        let mut ts =
            TsWords::parse(layout, addr, &bytes).context("Failed to copy PyThreadState")?;
        let (extra, codes, sig) = match old.iter().find(|k| k.tstate == addr) {
            Some(k) => {
                if ts.native_thread_id == 0 && ts.thread_id == k.ts.thread_id {
                    ts.native_thread_id = k.ts.native_thread_id;
                }
                // A thread state reused by a new thread is a thread that changed.
                let sig = if ts.thread_id == k.ts.thread_id {
                    k.sig
                } else {
                    0
                };
                (k.extra.clone(), k.codes.clone(), sig)
            }
            None => Default::default(),
        };
        fresh.push(Known {
            tstate: addr,
            ts,
            extra,
            codes,
            sig,
            still: false,
        });
        addr = ts.next;
    }
    Ok(fresh)
}
