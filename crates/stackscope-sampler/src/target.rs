//! One attached Python process.

use std::collections::HashMap;
use std::sync::Arc;

use py_spy::{PythonSpy, StackTrace};
use stackscope_event::{Frame, Frames, ThreadInfo};
use stackscope_native::{EntryFrame, NativeUnwinder};

use crate::caps::CapHits;
use crate::error::{classify_sample_error, read_failure, stop_failure, AttachError, SampleFailure};
use crate::fast::{FastReader, Misfits, OsTids};
use crate::ident_reuse::{IdentOwners, NamesByIdent};
use crate::idle;
use crate::leader::LiveThreadsStop;
use crate::namespace::TidMap;
use crate::origin::Origins;
use crate::procfs;
use crate::tuning::ReaderTuning;

/// The Python versions whose interpreter layouts stackscope reads.
const SUPPORTED: &str = "3.6 to 3.15";

/// The newest minor version py-spy's reader reads: a later one is read by ours alone, when
/// it knows the interpreter's `_Py_DebugOffsets`.
const PY_SPY_NEWEST_MINOR: u64 = 14;

/// Fails for a version stackscope cannot read. A version only our reader reads (3.15) passes
/// here and is refused at attach when the reader does not know its table.
pub fn check_supported_version(pid: u32, major: u64, minor: u64) -> Result<(), AttachError> {
    if major == 3 && (6..=15).contains(&minor) {
        Ok(())
    } else {
        Err(AttachError::UnsupportedVersion {
            pid,
            version: format!("{major}.{minor}"),
            supported: SUPPORTED,
        })
    }
}

/// How to read the target.
#[derive(Debug, Clone)]
pub struct TargetOptions {
    /// Stop the process for each read (consistent stacks) rather than read it while it runs.
    pub blocking: bool,
    /// Also read each frame's local variables (for `dump --locals`).
    pub locals: bool,
    /// Also unwind each thread's native (C/C++) stack and merge it with the Python frames.
    pub native: bool,
    /// The stack reader's experiment switches (default: none asked for).
    pub tuning: ReaderTuning,
}

impl Default for TargetOptions {
    fn default() -> Self {
        TargetOptions {
            blocking: true,
            locals: false,
            native: false,
            tuning: ReaderTuning::DEFAULT,
        }
    }
}

/// One thread's stack as read, before it becomes an event.
#[derive(Debug, Clone)]
pub struct ThreadStack {
    pub thread: ThreadInfo,
    /// The thread's id in its own PID namespace, where that differs from
    /// `thread.os_thread_id` (ours): a process in a container.
    pub ns_thread_id: Option<u64>,
    /// Innermost first.
    pub frames: Frames,
    /// py-spy's frames, kept only when locals were asked for.
    pub raw: Option<StackTrace>,
}

/// An attached Python process.
pub struct PythonTarget {
    pid: u32,
    /// The id the process is read through: `pid`, or a live thread's id when the leader
    /// thread has exited (see [`crate::leader`]).
    read_pid: u32,
    spy: PythonSpy,
    version: String,
    command_line: String,
    /// The executable when we attached: a different one later means the process exec'd and
    /// every address we hold is stale.
    exe: Option<std::path::PathBuf>,
    keep_raw: bool,
    /// Local variables were asked for ([`TargetOptions::locals`]).
    locals: bool,
    blocking: bool,
    /// As attached with ([`TargetOptions::tuning`]).
    tuning: ReaderTuning,
    /// Set with `native`: the process's modules, unwind tables and symbols, cached.
    native: Option<NativeUnwinder>,
    names: IdentOwners,
    /// The idents of the last read's threads, sorted: a read with the same threads has none
    /// ended to release.
    live_idents: Vec<u64>,
    /// The list the next sample's idents are sorted in (kept: it does not allocate).
    spare_idents: Vec<u64>,
    /// Each live thread's name as py-spy's reader reads it, shared from sample to sample.
    thread_names: NamesByIdent,
    strings: StringCache,
    /// Our own reader, for the versions it knows (with locals and native frames from 3.13,
    /// before which py-spy reads those); py-spy's reader otherwise.
    fast: Option<FastReader>,
    /// When our reader is tried again, where a first read of ours failed at attach.
    fast_retry: Option<attach::FastRetry>,
    /// Samples in a row the fast reader failed for a misfit of its layout; past a limit
    /// py-spy's reader takes over.
    misfits: Misfits,
    /// OS thread ids for py-spy's reads of 3.10 and older, made when first needed.
    os_tids: Option<OsTids>,
    /// The interpreter's thread ids (its namespace's) to ours, for a process in a container.
    tids: TidMap,
    /// The process's own pid, where it differs from `pid`.
    ns_pid: Option<u32>,
    /// `--native`: each thread's last merged stack, kept while it does not run.
    kept: native_kept::NativeKept,
}

impl PythonTarget {
    pub fn pid(&self) -> u32 {
        self.pid
    }

    /// The interpreter's version, e.g. `3.11.7`.
    pub fn python_version(&self) -> &str {
        &self.version
    }

    /// The process's pid in its own PID namespace (a container), where it differs from ours.
    pub fn ns_pid(&self) -> Option<u32> {
        self.ns_pid
    }

    pub fn command_line(&self) -> &str {
        &self.command_line
    }

    /// The options this target was attached with.
    pub fn options(&self) -> TargetOptions {
        TargetOptions {
            blocking: self.blocking,
            locals: self.locals,
            native: self.native.is_some(),
            tuning: self.tuning,
        }
    }

    /// Which stack reader reads this target: `"stackscope"` (our own, for the CPython
    /// versions it has layouts for) or `"py-spy"`. For diagnostics and benchmarks.
    pub fn reader(&self) -> &'static str {
        if self.fast.is_some() {
            "stackscope"
        } else {
            "py-spy"
        }
    }

    /// Our reader's idle bookkeeping so far, for tests and benchmarks: thread states reused
    /// from an earlier reading, and, with [`ReaderTuning::idle_audit`] set at attach,
    /// idle decisions made and those a fresh reading would have changed.
    /// From now on, also read every reused thread state and count the idle decisions that
    /// differ from a fresh reading ([`idle_audit`](PythonTarget::idle_audit); our reader only;
    /// [`ReaderTuning::idle_audit`] at attach does the same). It costs a `/proc` read per thread
    /// per sample: for tests.
    pub fn audit_idle_decisions(&mut self) {
        if let Some(fast) = self.fast.as_mut() {
            fast.set_audit(true);
        }
    }

    pub fn idle_audit(&self) -> Option<IdleAudit> {
        let s = self.fast.as_ref()?.stats();
        Some(IdleAudit {
            samples: s.samples,
            stat_reads: s.stat_reads,
            reused: s.stat_reused,
            decisions: s.idle_decisions,
            disagreed: s.idle_disagreed,
            ring_states: s.ring_states,
            ring_disagreed: s.ring_disagreed,
            unchanged: s.unchanged,
            bets_lost: s.quiet_misses,
            ring_proven: s.switch_proven,
            rings_refused: s.rings_refused,
            vouched: s.vouched,
            vouch_misses: s.vouch_misses,
            returned_kept: s.returned_kept,
            proving_stops: s.proving_stops,
            native: self.kept.stats,
        })
    }

    /// Whether our reader's last read saw, afresh, one of the process's threads running or
    /// asleep (not stopped): then nobody had stopped the process. False for py-spy's reader.
    pub fn seen_running(&self) -> bool {
        !self.reads_deep()
            && self.native.is_none()
            && self.fast.as_ref().is_some_and(|f| f.seen_running())
    }

    /// Whether the process has exec'd another program since we attached.
    pub fn has_execed(&self) -> bool {
        let now = procfs::exe(self.read_pid).ok();
        now.is_some() && now != self.exe
    }

    /// Whether the process must be attached again to be read: it exec'd, or the live thread
    /// it was read through (its leader having exited) has exited too.
    pub fn needs_reattach(&self) -> bool {
        self.has_execed()
            || (self.read_pid != self.pid
                && !procfs::thread_alive(self.pid, u64::from(self.read_pid)))
    }

    /// Keeps py-spy's shape of each stack's frames, for a dump: they carry each file's
    /// absolute path. From 3.13 our reader's deep read makes them; before, py-spy's reader
    /// reads from now on (a one-off read needs no speed).
    pub fn keep_raw_frames(&mut self) {
        if self.fast.as_ref().is_some_and(|f| f.reads_deep()) {
            self.keep_raw = true;
        } else if self.py_spy_reads() {
            self.keep_raw = true;
            self.fast = None;
        }
    }

    /// Whether py-spy's reader reads this interpreter's version (else ours alone does).
    fn py_spy_reads(&self) -> bool {
        self.spy.version.minor <= PY_SPY_NEWEST_MINOR
    }

    /// Whether the process's leader thread has exited (it is read through another thread).
    pub fn leader_exited(&self) -> bool {
        self.read_pid != self.pid
    }

    /// Reads every Python thread's stack once. With blocking on, the process is stopped for
    /// the read and resumed before this returns, whatever happened.
    pub fn read_stacks(&mut self) -> Result<Vec<ThreadStack>, SampleFailure> {
        let mut stacks = self.read_stacks_uncached_names()?;
        for ident in self.names.check(stacks.iter_mut().map(|s| &mut s.thread)) {
            // py-spy looks a name up again once its ident is no longer in the cache.
            self.spy.python_thread_names.remove(&ident);
            self.spy.python_thread_ids.remove(&ident);
            if let Some(fast) = self.fast.as_mut() {
                fast.forget_thread_name(ident);
            }
        }
        crate::ident_reuse::name_the_main_thread(
            stacks.iter_mut().map(|s| &mut s.thread),
            self.pid,
        );
        self.release_ended_threads(&stacks);
        Ok(stacks)
    }

    /// Lets go of what is kept for the threads that ended: those not in this read (a read has
    /// every thread of the interpreter's list). Our reader releases its own per-thread tables
    /// as it reads the list.
    fn release_ended_threads(&mut self, stacks: &[ThreadStack]) {
        let mut live = std::mem::take(&mut self.spare_idents);
        live.clear();
        live.extend(stacks.iter().map(|s| s.thread.python_thread_id));
        live.sort_unstable();
        live.dedup();
        if live == self.live_idents {
            // The same threads as last time: nothing ended, and the tables (large and cold
            // after a period's sleep) need not be walked.
            self.spare_idents = live;
            return;
        }
        let alive = |ident: &u64| live.binary_search(ident).is_ok();
        self.names.release(&live);
        self.thread_names.release(&live);
        // py-spy keeps its names (and, built with `unwind`, OS ids) by ident until its next
        // lookup of names, which a target whose threads all have names never needs.
        self.spy.python_thread_names.retain(|ident, _| alive(ident));
        self.spy.python_thread_ids.retain(|ident, _| alive(ident));
        self.spare_idents = std::mem::replace(&mut self.live_idents, live);
    }

    /// How often this target's caches of its code reached their caps since the last call
    /// ([`crate::caps`]).
    pub(crate) fn take_caps(&mut self) -> CapHits {
        let mut caps = self.strings.caps.take();
        caps.add(self.names.take_caps());
        if let Some(fast) = self.fast.as_mut() {
            caps.add(fast.take_caps());
        }
        caps
    }

    /// Entries kept per thread now, over every per-thread table of this target (idents, names,
    /// py-spy's caches, our reader's names and open files): for tests that a thread's entries
    /// go when it ends.
    #[cfg(test)]
    pub(crate) fn thread_entries(&self) -> usize {
        self.names.len()
            + self.thread_names.len()
            + self.spy.python_thread_names.len()
            + self.spy.python_thread_ids.len()
            + self.fast.as_ref().map_or(0, FastReader::thread_entries)
    }

    fn read_stacks_uncached_names(&mut self) -> Result<Vec<ThreadStack>, SampleFailure> {
        self.retry_fast_reader();
        if self.reads_deep() {
            return self.read_stacks_deep();
        }
        if self.native.is_some() {
            return self.read_stacks_with_native();
        }
        if let Some(stacks) = self.read_stacks_fast() {
            return stacks;
        }
        // Each thread's state before py-spy stops the process (once stopped, all read `t`),
        // under our ids (they differ from the interpreter's in a container).
        let states = idle::states(self.pid);
        // py-spy cannot stop a process whose leader exited: stop its live threads ourselves.
        let stop = if self.blocking && self.leader_exited() {
            Some(LiveThreadsStop::new(self.read_pid).map_err(|e| stop_failure(self.pid, e))?)
        } else {
            None
        };
        let traces = self
            .spy
            .get_stack_traces()
            .map_err(|e| classify_sample_error(self.pid, &e));
        drop(stop);
        let mut traces = traces?;
        for trace in traces.iter_mut() {
            trace.os_thread_id = trace.os_thread_id.and_then(|tid| self.tids.ours(tid));
        }
        self.fill_os_thread_ids(&mut traces);
        Ok(traces
            .into_iter()
            .map(|trace| {
                let frames: Vec<Frame> =
                    trace.frames.iter().map(|f| self.strings.frame(f)).collect();
                let state = trace.os_thread_id.and_then(|tid| states.get(&tid).copied());
                let active = idle::is_active(state, trace.owns_gil);
                self.thread_stack(trace, frames, active)
            })
            .collect())
    }

    /// py-spy (built without its `unwind` feature) leaves the OS thread id of a 3.10-or-older
    /// thread unknown: find it from the thread's `pthread_t` ([`OsTids`]).
    fn fill_os_thread_ids(&mut self, traces: &mut [StackTrace]) {
        if traces.iter().all(|t| t.os_thread_id.is_some()) {
            return;
        }
        let pid = self.pid;
        let tids = self.os_tids.get_or_insert_with(|| OsTids::new(pid));
        let pthreads: Vec<u64> = traces.iter().map(|t| t.thread_id).collect();
        for (trace, tid) in traces.iter_mut().zip(tids.tids(&pthreads)) {
            if trace.os_thread_id.is_none() {
                // The process's own id: ours where they differ (a container).
                trace.os_thread_id = tid.and_then(|t| self.tids.ours(t));
            }
        }
    }

    /// Reads with our own reader when there is one. None: py-spy's reader is to read this
    /// sample (there is no fast reader, or it has just been given up on).
    fn read_stacks_fast(&mut self) -> Option<Result<Vec<ThreadStack>, SampleFailure>> {
        let fast = self.fast.as_mut()?;
        match fast.read(self.blocking) {
            Ok(threads) => {
                self.misfits.read_ok();
                Some(Ok(threads
                    .into_iter()
                    .map(|t| {
                        let active = t.active;
                        let ns_thread_id = t.os_thread_id.and_then(|tid| self.tids.own(tid));
                        ThreadStack {
                            thread: ThreadInfo {
                                os_thread_id: t.os_thread_id,
                                python_thread_id: t.thread_id,
                                name: t.name,
                                active,
                                owns_gil: t.owns_gil,
                            },
                            ns_thread_id,
                            frames: t.frames,
                            raw: None,
                        }
                    })
                    .collect()))
            }
            Err(e) => Some(Err(self.fast_failed(&e))),
        }
    }

    /// What a failed read of our reader means, and whether the reader is given up for
    /// py-spy's: a layout that does not match this build of the interpreter fails every
    /// sample the same way; a torn read, a thread gone, a thread list that kept changing
    /// come and go, however many in a row.
    fn fast_failed(&mut self, e: &crate::fast::ReadError) -> SampleFailure {
        let failure = read_failure(self.pid, e);
        // A version py-spy does not read keeps our reader whatever happens: there is no
        // other.
        if matches!(failure, SampleFailure::Transient { .. })
            && self.misfits.failed(e)
            && self.py_spy_reads()
        {
            self.fast = None;
        }
        failure
    }

    /// Stops the process once for both reads: the Python frames, then each thread's native
    /// stack, which must come from the same instant to be merged. Whether a thread runs is
    /// read from /proc before the stop, since during it every thread reads as stopped.
    fn read_stacks_with_native(&mut self) -> Result<Vec<ThreadStack>, SampleFailure> {
        let pid = self.pid;
        let states = idle::states(pid);
        let stop: Box<dyn std::any::Any> = if self.leader_exited() {
            Box::new(LiveThreadsStop::new(self.read_pid).map_err(|e| stop_failure(pid, e))?)
        } else {
            Box::new(self.spy.process.lock().map_err(|e| stop_failure(pid, e))?)
        };
        let mut traces = self
            .spy
            .get_stack_traces()
            .map_err(|e| classify_sample_error(pid, &e))?;
        self.fill_os_thread_ids(&mut traces);
        let mut stacks = Vec::with_capacity(traces.len());
        for mut trace in traces {
            trace.os_thread_id = trace.os_thread_id.and_then(|tid| self.tids.ours(tid));
            let unwound = match (self.native.as_mut(), trace.os_thread_id) {
                (Some(unwinder), Some(tid)) => u32::try_from(tid)
                    .ok()
                    .and_then(|tid| unwinder.unwind(tid).ok()),
                _ => None,
            };
            let frames: Frames = match unwound {
                Some(native) => {
                    let python: Vec<EntryFrame> = trace
                        .frames
                        .iter()
                        .map(|f| EntryFrame {
                            frame: self.strings.frame(f),
                            entry: f.is_entry || f.is_shim_entry,
                        })
                        .collect();
                    self.merged(&python, &native)
                }
                // A thread whose native stack cannot be walked still has its Python frames.
                None => trace.frames.iter().map(|f| self.strings.frame(f)).collect(),
            };
            let state = trace.os_thread_id.and_then(|tid| states.get(&tid).copied());
            let active = idle::is_active(state, trace.owns_gil);
            stacks.push(self.thread_stack(trace, frames, active));
        }
        drop(stop);
        Ok(stacks)
    }

    fn thread_stack(
        &mut self,
        trace: StackTrace,
        frames: impl Into<Frames>,
        active: bool,
    ) -> ThreadStack {
        let thread = ThreadInfo {
            os_thread_id: trace.os_thread_id,
            python_thread_id: trace.thread_id,
            name: trace
                .thread_name
                .as_deref()
                .map(|n| self.thread_names.name(trace.thread_id, n)),
            active,
            owns_gil: trace.owns_gil,
        };
        ThreadStack {
            ns_thread_id: thread.os_thread_id.and_then(|tid| self.tids.own(tid)),
            thread,
            frames: frames.into(),
            raw: self.keep_raw.then_some(trace),
        }
    }
}

/// See [`PythonTarget::idle_audit`].
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct IdleAudit {
    pub samples: u64,
    pub stat_reads: u64,
    pub reused: u64,
    pub decisions: u64,
    pub disagreed: u64,
    /// States told by switch rings instead of a reading, and those a fresh reading
    /// contradicted (runs, or not).
    pub ring_states: u64,
    pub ring_disagreed: u64,
    /// Stacks of still threads taken from their last read, after a read of what proves they
    /// did not move.
    pub unchanged: u64,
    /// Samples in which still threads taken as still on the GIL's word may have run, and of
    /// their threads those shown still by their switch rings; threads that could not have a
    /// ring.
    pub bets_lost: u64,
    pub ring_proven: u64,
    pub rings_refused: u64,
    /// Threads that may have run during their read, kept on a stack a sound read of them
    /// gave; likely holders read without later copies that had to be read again with them.
    pub vouched: u64,
    pub vouch_misses: u64,
    /// Checked reads kept with the callee that returned during their later copies on top;
    /// threads stopped to prove such stacks.
    pub returned_kept: u64,
    pub proving_stops: u64,
    /// `--native`: threads unwound and threads given their kept stack instead
    /// ([`KeptStats`]).
    pub native: KeptStats,
}

/// Hands out one shared copy of each function and file name, so that a stack costs pointers
/// and the aggregator can compare frames cheaply. Bounded: a target that generates code
/// endlessly (exec of fresh strings) must not grow us without limit.
#[derive(Default)]
struct StringCache {
    names: HashMap<String, Arc<str>>,
    /// Decides each py-spy frame's origin from its full path.
    origins: Origins,
    /// Times the cache was full and emptied.
    caps: CapHits,
}

impl StringCache {
    const MAX_ENTRIES: usize = 100_000;

    fn intern(&mut self, s: &str) -> Arc<str> {
        if let Some(shared) = self.names.get(s) {
            return shared.clone();
        }
        if self.names.len() >= Self::MAX_ENTRIES {
            self.caps.hit(self.names.len());
            self.names.clear();
        }
        let shared: Arc<str> = Arc::from(s);
        self.names.insert(s.to_owned(), shared.clone());
        shared
    }

    /// Native file names are build paths (`/tmp/python-build.123/Python-3.11.7/Python/ceval.c`):
    /// the last two components say which file it is.
    fn shorten_native(&mut self, mut frame: Frame) -> Frame {
        if frame.native && frame.file.matches('/').count() > 1 {
            let short: Vec<&str> = frame.file.rsplitn(3, '/').take(2).collect();
            let short = format!("{}/{}", short[1], short[0]);
            frame.file = self.intern(&short);
        }
        frame
    }

    fn frame(&mut self, f: &py_spy::Frame) -> Frame {
        let file = f.short_filename.as_deref().unwrap_or(&f.filename);
        Frame {
            function: self.intern(&f.name),
            file: self.intern(file),
            line: u32::try_from(f.line).unwrap_or(0),
            native: false,
            origin: self.origins.of(&f.filename),
        }
    }
}

mod attach;
mod deep_read;
mod native_kept;
pub use native_kept::KeptStats;
#[cfg(test)]
mod fast_failures;
#[cfg(test)]
mod thread_churn;

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn versions_outside_the_layouts_we_read_are_refused() {
        assert!(check_supported_version(1, 3, 11).is_ok());
        assert!(check_supported_version(1, 3, 6).is_ok());
        assert!(check_supported_version(1, 3, 14).is_ok());
        let err = check_supported_version(1, 2, 7).unwrap_err();
        assert!(err.to_string().contains("Python 2.7"), "{err}");
        assert!(err.to_string().contains("does not support"), "{err}");
        assert!(check_supported_version(1, 3, 15).is_ok());
        assert!(check_supported_version(1, 3, 16).is_err());
    }

    #[test]
    fn equal_strings_share_one_allocation() {
        let mut cache = StringCache::default();
        let a = cache.intern("train_step");
        let b = cache.intern("train_step");
        assert!(Arc::ptr_eq(&a, &b));
    }

    /// Code generated without end fills the cache to its cap, and each time it is emptied is
    /// counted, with the entries let go.
    #[test]
    fn a_full_string_cache_is_counted() {
        let mut cache = StringCache::default();
        for n in 0..StringCache::MAX_ENTRIES + 10 {
            cache.intern(&format!("<generated {n}>"));
        }
        assert_eq!(cache.names.len(), 10);
        assert_eq!(
            cache.caps.take(),
            CapHits {
                reached: 1,
                evicted: StringCache::MAX_ENTRIES as u64
            }
        );
    }
}
