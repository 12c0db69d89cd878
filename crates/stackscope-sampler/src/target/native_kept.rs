//! `--native` samples that stop only the threads that ran.
//!
//! A native stack needs its thread's registers, and those need the thread ptrace-stopped:
//! `PTRACE_SEIZE`, `PTRACE_INTERRUPT`, a wait, `PTRACE_GETREGS`, `PTRACE_DETACH`, which wakes a
//! sleeping thread to stop it and lets it sleep again. That costs tens of microseconds a
//! thread a sample (docs/performance.md, "`--native`"), and most threads of a job sleep: a
//! server's pool, a DataLoader's pin-memory thread, the main thread in `join()`. A thread that
//! has not run since its stack was unwound has that very stack still. So each thread's last
//! merged stack is kept, with what proves it holds:
//!
//! - **Its switch ring.** A thread whose ring has not moved since a moment at which the kept
//!   stack held has run no instruction since: the stack holds now.
//! - **After a stop, where it sleeps.** Stopping a thread moves its ring (it is woken to stop,
//!   and goes back to sleep when let go), so right after an unwind no such moment is known
//!   yet. At the next sample, a thread that is off its CPU, blocked in a system call at the
//!   stack and instruction pointers it was unwound from (`/proc/PID/task/TID/syscall`), and
//!   whose Python state is exactly the one it had then (every frame's address, code object and
//!   instruction) is back where it was, native path and all: that sample's moment becomes the
//!   one its ring is held to.
//!
//! Kept threads are not stopped; the others are, and every thread's Python frames are read as
//! for a stopped process. A kept thread's ring is looked at again after the read: if one moved
//! during it (the thread may have run, and its frames may be torn), the kept threads are
//! stopped too and everything is read again. Without switch rings (refused, or turned off),
//! or with [`crate::ReaderTuning::kept_native`] off, every thread is stopped every sample.

use std::collections::HashMap;

use stackscope_event::Frames;
use stackscope_native::{NativeStack, Registers};

use super::deep_read::{matching_deep, read_trace};
use super::{PythonTarget, ThreadStack};
use crate::error::{stop_failure, SampleFailure};
use crate::fast::{FastReader, OffCpu, ThreadRead};
use crate::leader::ThreadsStop;
use crate::procfs::syscall::{blocked_in_syscall, SyscallSite};

/// What the kept stacks spared, and what their audit found ([`crate::PythonTarget::idle_audit`]).
#[derive(Debug, Default, Clone, Copy, PartialEq, Eq)]
pub struct KeptStats {
    /// Threads stopped and unwound.
    pub unwound: u64,
    /// Threads given their kept stack instead.
    pub kept: u64,
    /// `/proc/PID/task/TID/syscall` readings, of threads just unwound.
    pub site_reads: u64,
    /// Samples read again because a kept thread's ring moved during the read.
    pub moved: u64,
    /// With [`crate::ReaderTuning::native_audit`]: kept stacks unwound anyway, and those the
    /// fresh unwind differed from.
    pub audited: u64,
    pub audit_differed: u64,
}

/// A thread's last merged stack, and what proves it holds.
struct Kept {
    /// The registers it was unwound from.
    site: SyscallSite,
    /// Its Python state then ([`ThreadRead::sig`]).
    sig: u64,
    frames: Frames,
    /// A moment at which the stack held, as its switch ring tells (None: not known since the
    /// stop that unwound it).
    since: Option<OffCpu>,
}

/// Every Python thread's last merged stack, by our OS id of the thread.
pub(crate) struct NativeKept {
    threads: HashMap<u64, Kept>,
    enabled: bool,
    audit: bool,
    /// Print the counters when dropped ([`crate::ReaderTuning::stats`]).
    print: bool,
    samples: u64,
    pub(crate) stats: KeptStats,
}

impl NativeKept {
    /// As [`crate::ReaderTuning`] asks: `kept_native`, `native_audit` and `stats`.
    pub(crate) fn new(tuning: &crate::ReaderTuning) -> NativeKept {
        NativeKept {
            threads: HashMap::new(),
            enabled: tuning.kept_native,
            audit: tuning.native_audit,
            print: tuning.stats,
            samples: 0,
            stats: KeptStats::default(),
        }
    }

    /// The threads of `tids` whose kept stacks hold now, each with the moment its ring is
    /// held to. `pid`: the id the process is read through.
    fn holding(&mut self, pid: u32, tids: &[u64], fast: &mut FastReader) -> Holding {
        self.threads.retain(|tid, _| tids.contains(tid));
        if !self.enabled {
            return Holding::new();
        }
        let mut holding = Holding::new();
        for &tid in tids {
            let Some(kept) = self.threads.get(&tid) else {
                continue;
            };
            match kept.since {
                Some(since) if fast.still_off(tid, since) => {
                    holding.insert(tid, since);
                }
                Some(_) => {}
                None => {
                    let Some(now) = fast.off_cpu(tid) else {
                        continue;
                    };
                    self.stats.site_reads += 1;
                    if blocked_in_syscall(pid, tid) == Some(kept.site) {
                        holding.insert(tid, now);
                    }
                }
            }
        }
        holding
    }

    /// Whether this sample unwinds the kept threads anyway, for the audit: every other one.
    fn audits_now(&mut self) -> bool {
        self.samples += 1;
        self.audit && self.samples.is_multiple_of(2)
    }

    /// Whether `thread`'s kept stack holds after the read: its ring has not moved since
    /// `since` (unless it was stopped for the audit), and its Python state is the one kept.
    fn still_holds(
        &self,
        thread: &ThreadRead,
        since: OffCpu,
        stopped: bool,
        fast: &FastReader,
    ) -> bool {
        let Some(tid) = thread.os_thread_id else {
            return false;
        };
        let Some(kept) = self.threads.get(&tid) else {
            return false;
        };
        thread.sig != 0 && thread.sig == kept.sig && (stopped || fast.still_off(tid, since))
    }

    /// Keeps `frames` as thread `tid`'s stack, unwound from `registers` with Python state `sig`;
    /// with `audited`, counts whether they differ from the stack kept before.
    fn unwound(
        &mut self,
        tid: u64,
        registers: Registers,
        sig: u64,
        frames: &Frames,
        audited: bool,
    ) {
        self.stats.unwound += 1;
        if audited {
            self.stats.audited += 1;
            if self.threads.get(&tid).is_some_and(|k| k.frames != *frames) {
                self.stats.audit_differed += 1;
            }
        }
        if sig == 0 {
            self.threads.remove(&tid);
            return;
        }
        let site = SyscallSite {
            sp: registers.sp,
            pc: registers.ip,
        };
        let kept = Kept {
            site,
            sig,
            frames: frames.clone(),
            since: None,
        };
        self.threads.insert(tid, kept);
    }

    /// Thread `tid`'s kept stack, now known to hold at `since`.
    fn kept(&mut self, tid: u64, since: OffCpu) -> Option<Frames> {
        let kept = self.threads.get_mut(&tid)?;
        kept.since = Some(since);
        self.stats.kept += 1;
        Some(kept.frames.clone())
    }
}

/// The threads whose kept stacks hold this sample, each with the moment its ring is held to.
type Holding = HashMap<u64, OffCpu>;

/// One thread's native stack as a stopped sample unwound it, with the registers it started
/// from.
type Unwound = Option<(Registers, NativeStack)>;

impl PythonTarget {
    /// Every Python thread's stack with its native frames merged in (3.11+, our reader),
    /// stopping only the threads whose kept stacks do not hold.
    pub(super) fn read_stacks_native(&mut self) -> Result<Vec<ThreadStack>, SampleFailure> {
        let Some(fast) = self.fast.as_mut() else {
            return Ok(Vec::new());
        };
        // Whether a thread runs comes from before the stop, by the reader's own rules.
        let states = fast.states_before_stop();
        let tids = fast.os_thread_ids();
        let mut holding = self.kept.holding(self.read_pid, &tids, fast);
        let audit = self.kept.audits_now() && !holding.is_empty();
        let first: Vec<u64> = tids
            .iter()
            .copied()
            .filter(|tid| !holding.contains_key(tid))
            .collect();
        // The audit stops the kept threads too, before the others.
        let mut stops = Vec::new();
        if audit {
            holding = self.stop_kept_for_audit(holding, &mut stops);
        }
        stops.push(self.stop_threads(&first)?);
        let mut threads = self.read_stopped_for_native(states.clone(), &mut stops)?;
        let Some(fast) = self.fast.as_ref() else {
            return Ok(Vec::new());
        };
        let moved = holding.iter().any(|(&tid, &since)| {
            !threads
                .iter()
                .find(|t| t.os_thread_id == Some(tid))
                .is_some_and(|t| self.kept.still_holds(t, since, audit, fast))
        });
        if moved {
            // A kept thread may have run during the read: stop it too, and read again.
            self.kept.stats.moved += 1;
            let rest: Vec<u64> = if audit {
                Vec::new()
            } else {
                holding.keys().copied().collect()
            };
            stops.push(self.stop_threads(&rest)?);
            holding.clear();
            threads = self.read_stopped_for_native(states, &mut stops)?;
        }
        let unwound = self.unwind_stopped(&threads, &holding, audit);
        drop(stops);
        Ok(self.merge_kept(threads, unwound, &holding, audit))
    }

    /// For the audit, stops each thread of `holding`, each just after its ring is looked at
    /// again: one that ran since [`NativeKept::holding`] (which the sample's own look after
    /// the read would have caught) is stopped but not audited. Answers those audited.
    /// A kept thread that cannot be stopped (gone) is neither.
    fn stop_kept_for_audit(
        &mut self,
        holding: Holding,
        stops: &mut Vec<Option<ThreadsStop>>,
    ) -> Holding {
        let mut audited = Holding::with_capacity(holding.len());
        for (tid, since) in holding {
            let still = self.fast.as_ref().is_some_and(|f| f.still_off(tid, since));
            let Ok(stop) = ThreadsStop::new(self.read_pid, &[tid]) else {
                continue;
            };
            stops.push(Some(stop));
            if still {
                audited.insert(tid, since);
            }
        }
        audited
    }

    /// Stops `tids` (none: nothing to stop).
    fn stop_threads(&mut self, tids: &[u64]) -> Result<Option<ThreadsStop>, SampleFailure> {
        if tids.is_empty() {
            return Ok(None);
        }
        let pid = self.pid;
        ThreadsStop::new(self.read_pid, tids)
            .map(Some)
            .map_err(|e| stop_failure(pid, e))
    }

    /// [`FastReader::read_stopped`], letting the stopped threads go when it fails.
    fn read_stopped_for_native(
        &mut self,
        states: crate::fast::StatesBefore,
        stops: &mut Vec<Option<ThreadsStop>>,
    ) -> Result<Vec<ThreadRead>, SampleFailure> {
        let Some(fast) = self.fast.as_mut() else {
            return Ok(Vec::new());
        };
        fast.read_stopped(states).map_err(|e| {
            stops.clear();
            self.fast_failed(&e)
        })
    }

    /// Each stopped thread's native stack and the registers it was unwound from; None for a
    /// thread kept (unless audited) or that could not be unwound.
    fn unwind_stopped(
        &mut self,
        threads: &[ThreadRead],
        holding: &Holding,
        audit: bool,
    ) -> Vec<Unwound> {
        threads
            .iter()
            .map(|t| {
                let tid = t.os_thread_id?;
                if !audit && holding.contains_key(&tid) {
                    return None;
                }
                let unwinder = self.native.as_mut()?;
                let registers = unwinder.registers(u32::try_from(tid).ok()?).ok()?;
                let stack = unwinder.unwind_from(registers).ok()?;
                Some((registers, stack))
            })
            .collect()
    }

    /// Each thread's stack: its kept one where that holds, else its Python frames with its
    /// fresh native stack merged in (kept for the next samples).
    fn merge_kept(
        &mut self,
        threads: Vec<ThreadRead>,
        unwound: Vec<Unwound>,
        holding: &Holding,
        audit: bool,
    ) -> Vec<ThreadStack> {
        let mut entries = self
            .fast
            .as_ref()
            .map_or_else(Vec::new, FastReader::entry_threads);
        threads
            .into_iter()
            .zip(unwound)
            .map(|(thread, unwound)| {
                let tid = thread.os_thread_id;
                let since = tid.and_then(|t| holding.get(&t).copied());
                let deep = matching_deep(&mut entries, &thread);
                let frames = match (tid, since, deep, unwound) {
                    (Some(tid), Some(since), _, None) if !audit => self.kept.kept(tid, since),
                    (Some(tid), _, Some(deep), Some((registers, native))) => {
                        let frames = self.merge_native(&thread.frames, &deep, &native);
                        self.kept
                            .unwound(tid, registers, thread.sig, &frames, since.is_some());
                        Some(frames)
                    }
                    _ => None,
                };
                // A thread whose native stack could not be had still has its Python frames.
                let frames = frames.unwrap_or_else(|| thread.frames.clone());
                self.native_thread_stack(thread, frames)
            })
            .collect()
    }

    fn native_thread_stack(&mut self, thread: ThreadRead, frames: Frames) -> ThreadStack {
        let trace = read_trace(self.pid, &thread, thread.active, Vec::new());
        self.thread_stack(trace, frames, thread.active)
    }
}

impl Drop for NativeKept {
    fn drop(&mut self) {
        let s = self.stats;
        if self.print && s.unwound + s.kept > 0 {
            use std::io::Write;
            let _ = writeln!(
                std::io::stderr(),
                "stackscope: --native: {} threads unwound, {} given their kept stack; {} syscall \
                 sites read, {} samples read again (a kept thread moved); audit: {} of {} differed",
                s.unwound,
                s.kept,
                s.site_reads,
                s.moved,
                s.audit_differed,
                s.audited
            );
        }
    }
}
