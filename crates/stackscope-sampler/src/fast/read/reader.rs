//! The reader itself ([`FastReader`]): attaching to an interpreter, and one sample's read of
//! every thread, step by step (the states before, the attempts, the states after), with what
//! it keeps between samples.

use std::time::Instant;

use py_spy::PythonSpy;
use stackscope_event::Frames;

use crate::fast::deep::DeepReader;
use crate::fast::deep::{DeepFrame, DeepThread};
use crate::fast::error::ReadError;
use crate::fast::layout::{common, debug_offsets, FrameDesign, GilHolder, Layout};
use crate::fast::memory::remote::Remote;
use crate::fast::objects::code::CodeCache;
use crate::fast::objects::filenames::FileNames;
use crate::fast::objects::names::ThreadNames;
use crate::fast::proof::gil::GilWords;
use crate::fast::read::activity::{self, Activity};
use crate::fast::read::attempt::{attempt, Attempt, AttemptLists, WalkStats};
use crate::fast::read::ostid::OsTids;
use crate::fast::read::request::{Check, Globals, Request};
use crate::fast::read::state_before::Before;
use crate::fast::read::thread_model::{Known, StillThreads};
use crate::fast::read::threads;
use crate::origin::Origins;
use crate::procfs::ProcState;

use crate::fast::stats::ReaderStats;
use crate::namespace::TidMap;
use crate::tuning::ReaderTuning;

/// How the reader keeps stacks consistent.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Strategy {
    /// Stop the whole process around each sample's reads (py-spy's way, with fewer reads).
    StopProcess,
    /// Stop nothing up front: threads that did not hold the GIL during the read are taken as
    /// read, the holder when its copies agree; a holder whose copies keep disagreeing is
    /// stopped alone for a last read. Without blocking, nothing is ever stopped and such a
    /// holder's read is kept, torn or not.
    StopGilHolders,
}

impl Strategy {
    /// The default, chosen by measurement (docs/performance.md): a ptrace stop of one thread
    /// costs that thread about 0.1 ms here, so stopping every thread for every sample slows a
    /// 1000 Hz target by a fifth, where this stops a thread in well under 1% of samples and
    /// reads the same stacks.
    pub(crate) const DEFAULT: Strategy = Strategy::StopGilHolders;
}

/// One thread, as read.
#[derive(Debug)]
pub(crate) struct ThreadRead {
    pub thread_id: u64,
    /// As the interpreter records it (3.11+, 0 before the thread has started, as py-spy
    /// reports it); for 3.10, as found from its `pthread_t`, None where it could not be.
    pub os_thread_id: Option<u64>,
    pub name: Option<std::sync::Arc<str>>,
    pub owns_gil: bool,
    /// Busy, by the one idle rule ([`crate::idle`]).
    pub active: bool,
    pub frames: Frames,
    /// Its Python state's signature as of this read (every frame's address, code and
    /// instruction; [`crate::fast::read::judge::signature`]): equal in two reads, the thread
    /// ran no Python in between or came back to exactly where it was. 0: not known.
    pub sig: u64,
}

/// Lists a sample fills and empties (each thread's OS id, ident, name and frames), kept between
/// samples: after a sleep, an allocation is a cold walk through the allocator's lists.
#[derive(Default)]
pub(in crate::fast) struct Scratch {
    tids: Vec<u64>,
    idents: Vec<u64>,
    names: Vec<Option<std::sync::Arc<str>>>,
    /// Each thread's frames as the read settles them ([`Read::frames`]).
    pub(in crate::fast) results: Vec<Option<Frames>>,
}

/// Each thread's OS state before its caller stopped the process
/// ([`FastReader::states_before_stop`]).
#[derive(Clone)]
pub(crate) struct StatesBefore(pub(in crate::fast) Vec<Before>);

pub(crate) struct FastReader {
    pub(in crate::fast) pid: u32,
    pub(in crate::fast) layout: &'static Layout,
    pub(in crate::fast) globals: Globals,
    pub(in crate::fast) modules_ptr: usize,
    pub(in crate::fast) remote: Remote,
    pub(in crate::fast) process: remoteprocess::Process,
    pub(in crate::fast) threads: Vec<Known>,
    /// The last read's list of states before it, emptied: the next fills it without
    /// allocating.
    pub(in crate::fast) spare_before: Vec<Before>,
    /// Which of `threads` this sample takes as still (set before each sample's read).
    pub(in crate::fast) still: StillThreads,
    pub(in crate::fast) codes: CodeCache,
    pub(in crate::fast) names: ThreadNames,
    pub(in crate::fast) activity: Activity,
    pub(in crate::fast) strategy: Strategy,
    /// The GIL's last holder at the end of the last read: the thread read with a check.
    pub(in crate::fast) expected_holder: usize,
    /// The threads to read with a check this sample.
    pub(in crate::fast) likely_holders: Vec<usize>,
    /// Lists a sample fills and empties, kept so that it does not allocate them anew.
    pub(in crate::fast) scratch: Scratch,
    /// `0..threads.len()`, kept between samples.
    pub(in crate::fast) every_thread: Vec<usize>,
    pub(in crate::fast) walk_stats: WalkStats,
    /// The lists each attempt fills and empties.
    pub(in crate::fast) attempt_lists: AttemptLists,
    pub(in crate::fast) stats: ReaderStats,
    /// OS thread ids from `pthread_t`s, for interpreters that do not record them (3.10).
    pub(in crate::fast) os_tids: Option<OsTids>,
    /// Whether a sleeping thread whose Python state did not change keeps its last OS state
    /// for a while ([`activity::REUSE_FOR`]); [`ReaderTuning::idle_reuse`] off reads it every
    /// time.
    pub(in crate::fast) reuse_states: bool,
    /// Whether a still thread is read only for what proves it did not move ([`still`]);
    /// [`ReaderTuning::still_reads`] off copies its frames every sample (for comparisons).
    pub(in crate::fast) still_reads: bool,
    /// [`ReaderTuning::proven_stacks`].
    pub(in crate::fast) proven_stacks: bool,
    /// Samples to go before still threads are again taken as still on the GIL's word
    /// ([`quiet`]) after a sample where that did not hold.
    pub(in crate::fast) quiet_backoff: u32,
    /// Bets lost in a row.
    pub(in crate::fast) quiet_losses: u32,
    /// Whether the last read found a thread that the OS, read afresh, showed running or
    /// asleep, or one whose Python state moved since the sample before: the process was not
    /// stopped by a signal or a debugger (the sampler then need not read the leader's state
    /// to know; a process stopped between two samples is seen stopped at the second).
    pub(in crate::fast) seen_running: bool,
    /// [`ReaderTuning::idle_audit`]: also read every reused state, and count the idle
    /// decisions it would have changed (docs/performance.md).
    pub(in crate::fast) audit: bool,
    /// [`ReaderTuning::stats`]: print the counters when dropped.
    pub(in crate::fast) print_stats: bool,
    /// Thread ids as the interpreter stores them (in the target's PID namespace) to ours.
    pub(in crate::fast) tids: TidMap,
    /// When the read under way began (or the states taken before a caller's stop for it):
    /// the one clock reading its steps share (a read takes
    /// microseconds, a few milliseconds with stops; every interval it is held against is
    /// hundreds of milliseconds or more).
    pub(in crate::fast) read_at: Instant,
    /// The state of the generator of the random gaps between checked copies
    /// ([`crate::fast::read::request::Request::seed`]): a clock reading once, then mixed.
    pub(in crate::fast) gap_seed: u64,
}

/// Why there is no reader of ours for an interpreter.
#[derive(Debug)]
pub(crate) enum Unread {
    /// Its version has no layout here (3.9 and older).
    NoLayout,
    /// Its `_Py_DebugOffsets` is not one this reader knows: why.
    Refused(String),
    /// The layout did not fit what was read.
    Failed(ReadError),
}

/// Each thread's frames, in list order, and the GIL holder's thread state.
pub(in crate::fast) struct Read {
    /// Each thread's, in the list's order; every one there (a read with a thread missing is
    /// torn), in options so that the list is the one the next read fills
    /// ([`Scratch::results`]).
    pub(in crate::fast) frames: Vec<Option<Frames>>,
    pub(in crate::fast) gil_holder: usize,
}

impl FastReader {
    /// A reader for the interpreter py-spy found, if its version has a layout table here.
    pub(crate) fn new(
        pid: u32,
        spy: &PythonSpy,
        strategy: Strategy,
        tuning: &ReaderTuning,
    ) -> Result<FastReader, Unread> {
        let (major, minor) = (spy.version.major, spy.version.minor);
        let layout = match Layout::for_version(major, minor) {
            Some(layout) => layout,
            None if major == 3 && minor >= 13 => {
                let mut remote = Remote::new(pid);
                debug_offsets::layout(&mut remote, minor, spy.addresses.interpreter_address)
                    .map_err(|refusal| Unread::Refused(refusal.0))?
            }
            None => return Err(Unread::NoLayout),
        };
        let found = spy.addresses.threadstate_address;
        let globals = Globals {
            head_ptr: spy.addresses.interpreter_address + layout.interp_threads_head,
            gil: found.wrapping_add_signed(layout.gil_offset),
            tstate_current: match layout.gil_holder {
                GilHolder::TstateCurrent => found,
                GilHolder::LastHolderWhileLocked => 0,
            },
        };
        let mut remote = Remote::new(pid).timed(tuning.stats);
        // Everything consistent rests on the GIL: make sure the table finds it.
        let gil = remote
            .read(globals.gil, common::GIL_LEN)
            .ok()
            .and_then(|b| GilWords::parse(&b));
        if found == 0 || !gil.is_some_and(|g| g.plausible()) {
            return Err(Unread::Failed(ReadError::Layout(
                "no GIL where the layout table puts it".to_owned(),
            )));
        }
        let mut reader = FastReader {
            pid,
            layout,
            globals,
            modules_ptr: spy.addresses.imports_modules_address,
            remote,
            process: remoteprocess::Process::new(pid as remoteprocess::Pid)
                .map_err(|e| Unread::Failed(ReadError::stop(e)))?,
            threads: Vec::new(),
            still: StillThreads::default(),
            codes: CodeCache::new(
                FileNames::new(
                    pid,
                    spy.dockerized,
                    Origins::of_process(pid, spy.version.major, spy.version.minor),
                ),
                tuning.code_trust,
            ),
            names: ThreadNames::new(),
            activity: Activity::new(pid, tuning.switch_rings),
            spare_before: Vec::new(),
            strategy,
            expected_holder: gil.map_or(0, |g| g.last_holder),
            likely_holders: Vec::new(),
            scratch: Scratch::default(),
            every_thread: Vec::new(),
            walk_stats: WalkStats::default(),
            attempt_lists: AttemptLists::default(),
            stats: ReaderStats::default(),
            os_tids: (!layout.has_native_thread_id).then(|| OsTids::new(pid)),
            reuse_states: strategy == Strategy::StopGilHolders && tuning.idle_reuse,
            audit: tuning.idle_audit,
            still_reads: tuning.still_reads,
            proven_stacks: tuning.proven_stacks,
            print_stats: tuning.stats,
            quiet_backoff: 0,
            quiet_losses: 0,
            seen_running: false,
            tids: TidMap::new(pid),
            read_at: Instant::now(),
            gap_seed: std::time::SystemTime::now()
                .duration_since(std::time::UNIX_EPOCH)
                .map_or(0x9E37_79B9, |d| d.as_nanos() as u64),
        };
        reader.activity.audit = reader.audit;
        // A state told by a ring stands for a reading, as a reused one does.
        reader.activity.ring_states_on = reader.reuse_states;
        reader.threads = threads::rebuild(&mut reader.remote, layout, &reader.globals, &[], None)
            .map_err(Unread::Failed)?;
        reader.fill_os_thread_ids();
        Ok(reader)
    }

    /// Finds (again) the OS thread id of each thread, where the interpreter does not record
    /// it (3.10: from its `pthread_t`): one system call.
    pub(in crate::fast) fn fill_os_thread_ids(&mut self) {
        let Some(os_tids) = self.os_tids.as_mut() else {
            return;
        };
        let pthreads: Vec<u64> = self.threads.iter().map(|k| k.ts.thread_id).collect();
        let mut tids: Vec<u64> = self.threads.iter().map(|k| k.ts.native_thread_id).collect();
        os_tids.refresh(&pthreads, &mut tids);
        for (k, tid) in self.threads.iter_mut().zip(tids) {
            k.ts.native_thread_id = tid;
        }
    }

    /// Whether the last read saw a thread not stopped (running or asleep, read afresh) or
    /// one that ran Python since the sample before ([`FastReader::seen_running`] field).
    pub(crate) fn seen_running(&self) -> bool {
        self.seen_running
    }

    /// Reads every thread once. `blocking`: stacks must be consistent (the reader may stop
    /// threads, or the process); without it nothing is stopped.
    pub(crate) fn read(&mut self, blocking: bool) -> Result<Vec<ThreadRead>, ReadError> {
        let started = Instant::now();
        self.read_at = started;
        let out = self.read_inner(blocking, None);
        self.stats.read_ns += started.elapsed().as_nanos() as u64;
        out
    }

    /// `caller_stopped`: the threads' states before the caller stopped the process.
    pub(in crate::fast) fn read_inner(
        &mut self,
        blocking: bool,
        caller_stopped: Option<Vec<Before>>,
    ) -> Result<Vec<ThreadRead>, ReadError> {
        self.stats.samples += 1;
        self.quiet_backoff = self.quiet_backoff.saturating_sub(1);
        let stopped_by_caller = caller_stopped.is_some();
        let stopped = stopped_by_caller;
        // The OS's view first: once we stop a thread, it reads as stopped.
        let before = match caller_stopped {
            Some(before) => before,
            None => self.states_before_read(true),
        };
        let awake = before
            .iter()
            .any(|b| !b.how.is_reused() && activity::is_awake_or_asleep(b.state));
        let stop = if blocking && !stopped && self.strategy == Strategy::StopProcess {
            Some(self.stop_process()?)
        } else {
            None
        };
        let stopped = stopped || stop.is_some();
        self.find_likely_holders(&before, blocking && !stopped);
        let mut result = self.read_threads(blocking, stopped, &before);
        if stop.is_none() && blocking && matches!(result, Err(ReadError::ListKeepsChanging)) {
            // Threads start and end faster than we read them (a pool that spawns a thread
            // per task): with the whole process stopped the list holds still.
            let stopped = self.stop_process()?;
            result = self.read_threads(blocking, true, &before);
            drop(stopped);
        }
        drop(stop);
        let read = result.inspect_err(|_| self.stats.errors += 1)?;
        if self.threads.iter().any(|k| k.ts.native_thread_id == 0) {
            // Threads new to the list (or to their thread state) during this read.
            self.fill_os_thread_ids();
        }
        let (out, moved) = self.thread_reads(read, &before, stopped_by_caller);
        self.seen_running = awake || moved;
        self.spare_before = before;
        Ok(out)
    }

    /// Each thread's OS state before a read, under the reuse rules, counted
    /// ([`FastReader::states_before`]).
    pub(in crate::fast) fn states_before_read(&mut self, defer_holder: bool) -> Vec<Before> {
        self.fill_os_thread_ids();
        let before = self.states_before(self.read_at, defer_holder);
        self.stats.stat_reused += before.iter().filter(|b| b.how.is_reused()).count() as u64;
        before
    }

    /// The threads to read with a check: the one that held the GIL last time, and those
    /// running now (a thread waiting for the GIL sleeps). `ask_gil`: with several running,
    /// ask the GIL which one holds it (not with the process stopped).
    /// Sets [`FastReader::likely_holders`] (kept between samples, so that filling it does not
    /// allocate).
    pub(in crate::fast) fn find_likely_holders(&mut self, before: &[Before], ask_gil: bool) {
        let mut likely = std::mem::take(&mut self.likely_holders);
        likely.clear();
        likely.push(self.expected_holder);
        for (k, b) in self.threads.iter().zip(before) {
            if b.state.is_some_and(ProcState::is_running) {
                likely.push(k.tstate);
            }
        }
        // Several threads running: only the one holding the GIL now can move its frames
        // during the read (the others would have to take the GIL, which the read's bracket
        // shows). Asking the GIL first costs a small system call; copying each running thread
        // eight times cost far more (four busy threads: three of them copied for nothing).
        if likely.len() > 1 && ask_gil {
            if let Some(holder) = self.current_holder() {
                likely.clear();
                likely.push(holder);
            }
        }
        self.likely_holders = likely;
    }

    /// Each thread as read, with its names and whether it is busy; and whether Python ran in
    /// some thread since the last sample. `caller_stopped`: the process is still stopped by
    /// the caller, and `before` says which threads run.
    pub(in crate::fast) fn thread_reads(
        &mut self,
        mut read: Read,
        before: &[Before],
        caller_stopped: bool,
    ) -> (Vec<ThreadRead>, bool) {
        let mut scratch = std::mem::take(&mut self.scratch);
        scratch.tids.clear();
        scratch.tids.extend(
            self.threads
                .iter()
                .filter_map(|k| self.tids.ours(k.ts.native_thread_id)),
        );
        self.activity.retain(&scratch.tids);
        scratch.idents.clear();
        scratch
            .idents
            .extend(self.threads.iter().map(|k| k.ts.thread_id));
        self.names.fill_names(
            &mut self.remote,
            self.layout,
            self.modules_ptr,
            &scratch.idents,
            self.read_at,
            &mut scratch.names,
        );
        // py-spy compares thread ids with the holder's.
        let gil_thread = self
            .threads
            .iter()
            .find(|k| k.tstate == read.gil_holder && read.gil_holder != 0)
            .map_or(0, |k| k.ts.thread_id);
        let mut moved = false;
        let mut out = Vec::with_capacity(self.threads.len());
        let frames_names = read.frames.drain(..).zip(scratch.names.drain(..));
        for (i, (frames, name)) in frames_names.enumerate() {
            let frames = frames.unwrap_or_default();
            let Some(known) = self.threads.get(i) else {
                break;
            };
            let ts = known.ts;
            let sig = known.sig;
            let owns_gil = ts.thread_id == gil_thread;
            let tid = ts.native_thread_id;
            // Where it was before the read (the same place unless the list changed).
            let at = match before.get(i) {
                Some(b) if b.tid == tid => Some(i),
                _ => before.iter().position(|b| b.tid == tid),
            };
            let same = match before.get(i) {
                Some(b) if b.tstate == known.tstate => b.sig == known.sig,
                _ => before
                    .iter()
                    .any(|b| b.tstate == known.tstate && b.sig == known.sig),
            };
            // Python ran since the last sample: nobody had the process stopped.
            moved |= known.sig != 0 && !same;
            let state = self.state_after(
                at.and_then(|j| before.get(j)),
                tid,
                (owns_gil, same),
                caller_stopped,
            );
            out.push(ThreadRead {
                thread_id: ts.thread_id,
                os_thread_id: (self.layout.has_native_thread_id || ts.native_thread_id != 0).then(
                    || {
                        self.tids
                            .ours(ts.native_thread_id)
                            .unwrap_or(ts.native_thread_id)
                    },
                ),
                name,
                owns_gil,
                active: crate::idle::is_active(state, owns_gil),
                frames,
                sig,
            });
        }
        scratch.results = read.frames;
        self.scratch = scratch;
        (out, moved)
    }

    /// Stops the whole process until the lock drops, counted.
    pub(in crate::fast) fn stop_process(&mut self) -> Result<remoteprocess::Lock, ReadError> {
        self.stats.process_stops += 1;
        self.process.lock().map_err(ReadError::stop)
    }

    pub(in crate::fast) fn attempt(
        &mut self,
        which: &[usize],
        with_list: bool,
        stopped: bool,
    ) -> Result<Attempt, ReadError> {
        // The first read of a sample checks the thread expected to hold the GIL; a second
        // read is only of threads that may have run: all of them.
        let quiet = with_list && self.still_reads && self.quiet_backoff == 0;
        self.attempt_with(which, with_list, stopped, !with_list, quiet, &[])
    }

    /// Reads the threads `which` (none of them taken on the GIL's word) without the list,
    /// still ones for their proofs (those of `words_only`, whose switch rings show they did
    /// not run, for their thread states alone), with the sample's check for the likely
    /// holders.
    pub(in crate::fast) fn attempt_still(
        &mut self,
        which: &[usize],
        words_only: &[usize],
        stopped: bool,
    ) -> Result<Attempt, ReadError> {
        self.attempt_with(which, false, stopped, false, false, words_only)
    }

    pub(in crate::fast) fn attempt_with(
        &mut self,
        which: &[usize],
        with_list: bool,
        stopped: bool,
        check_all: bool,
        quiet: bool,
        words_only: &[usize],
    ) -> Result<Attempt, ReadError> {
        self.stats.attempts += 1;
        // A step of a Weyl sequence: the xorshift that draws the gaps mixes it.
        self.gap_seed = self.gap_seed.wrapping_add(0x9E37_79B9_7F4A_7C15);
        let req = Request {
            now: self.read_at,
            seed: self.gap_seed,
            layout: self.layout,
            globals: &self.globals,
            which,
            with_list,
            stopped,
            check: if check_all {
                Check::All
            } else {
                Check::Threads(&self.likely_holders)
            },
            still_reads: self.still_reads,
            quiet,
            words_only,
            vouch: self.proven_stacks && with_list && !stopped,
        };
        attempt(
            &mut self.remote,
            &mut self.codes,
            &mut self.threads,
            &mut self.still,
            &req,
            &mut self.attempt_lists,
            &mut self.walk_stats,
        )
        .map_err(|e| match e.raw_os_error() {
            Some(libc::ESRCH) => ReadError::ProcessGone(self.pid),
            _ => ReadError::io("Failed to read the process's memory", e),
        })
    }

    /// The thread holding the GIL now, if it is held.
    pub(in crate::fast) fn current_holder(&mut self) -> Option<usize> {
        let bytes = self.remote.read(self.globals.gil, common::GIL_LEN).ok()?;
        let words = GilWords::parse(&bytes)?;
        (words.locked == 1 && words.last_holder != 0).then_some(words.last_holder)
    }

    /// See [`ThreadNames::forget`].
    /// Whether [`read_deep`](FastReader::read_deep) can read this interpreter.
    pub(crate) fn reads_deep(&self) -> bool {
        self.layout.objects.is_some()
    }

    /// Whether each stack read tells which of its frames entered the eval loop
    /// ([`FastReader::entry_threads`]), so that `--native` needs no deep read (3.11+).
    pub(crate) fn knows_entries(&self) -> bool {
        self.layout.frames == FrameDesign::Chunks
    }

    /// Each known thread's frames as its last stack read had them, with which of them
    /// entered the eval loop and nothing else of a deep read: what `--native` merges by.
    pub(crate) fn entry_threads(&self) -> Vec<DeepThread> {
        self.threads
            .iter()
            .map(|k| DeepThread {
                thread_id: k.ts.thread_id,
                frames: k
                    .entries
                    .iter()
                    .map(|&entry| DeepFrame {
                        entry,
                        ..DeepFrame::default()
                    })
                    .collect(),
            })
            .collect()
    }

    /// Each known thread's frames, read afresh by the deep read ([`deep`]); with `locals`,
    /// their local variables too. Meant for a stopped process, after [`FastReader::read`].
    pub(crate) fn read_deep(&mut self, locals: bool) -> Vec<DeepThread> {
        let tstates: Vec<usize> = self.threads.iter().map(|k| k.tstate).collect();
        DeepReader::new(&mut self.remote, self.layout)
            .map_or_else(Vec::new, |reader| reader.threads(&tstates, locals))
    }

    pub(crate) fn forget_thread_name(&mut self, ident: u64) {
        self.names.forget(ident);
    }

    /// Times the code cache reached its caps, handed on once ([`crate::caps`]).
    pub(crate) fn take_caps(&mut self) -> crate::caps::CapHits {
        self.codes.take_caps()
    }

    /// Entries kept per thread beyond the thread list itself: names, open `/proc` files and
    /// switch rings. Released at the read that finds a thread gone from the list.
    #[cfg(test)]
    pub(crate) fn thread_entries(&self) -> usize {
        self.names.len() + self.activity.len()
    }

    /// Turns the idle audit on or off (see the `audit` field).
    pub(crate) fn set_audit(&mut self, on: bool) {
        self.audit = on;
        self.activity.audit = on;
    }

    /// The counters so far, with the reads they took.
    pub(crate) fn stats(&self) -> ReaderStats {
        let mut s = self.stats.clone();
        s.syscalls = self.remote.syscalls;
        s.ranges = self.remote.ranges;
        s.syscall_ns = self.remote.syscall_ns;
        s.bytes = self.remote.bytes;
        s.stat_reads = self.activity.reads;
        s.stat_renewed = self.activity.renewed;
        s.ring_renewed = self.activity.ring_renewed;
        s.sched_reads = self.activity.sched_reads;
        s.ring_states = self.activity.ring_states;
        s.ring_disagreed = self.activity.ring_disagreed;
        s.rings_opened = self.activity.switches.opened;
        s.rings_refused = self.activity.switches.refused;
        s.late_rounds = self.walk_stats.rounds;
        s.unchanged = self.walk_stats.unchanged;
        s.quiet = self.walk_stats.quiet;
        s.vouched = self.walk_stats.vouched;
        s.vouch_misses = self.walk_stats.vouch_misses;
        s.returned_kept = self.walk_stats.returned_kept;
        s.code_hits = self.codes.hits;
        s.code_misses = self.codes.misses;
        s.code_replaced = self.codes.replaced;
        s.codes_cached = self.codes.len() as u64;
        s.name_lookups = self.names.lookups;
        s
    }
}

impl Drop for FastReader {
    fn drop(&mut self) {
        if self.print_stats {
            use std::io::Write;
            let _ = writeln!(
                std::io::stderr(),
                "stackscope: reader for pid {} (Python 3.{} layout from {}, {:?}): {}",
                self.pid,
                self.layout.minor,
                self.layout.source,
                self.strategy,
                self.stats()
            );
        }
    }
}

/// Prints a notice once per process of ours, however many targets meet the same case.
pub(crate) fn notice_once(message: &str) {
    static SAID: std::sync::Mutex<Vec<String>> = std::sync::Mutex::new(Vec::new());
    let mut said = SAID.lock().unwrap_or_else(|e| e.into_inner());
    if !said.iter().any(|m| m == message) {
        // Not `eprintln!`: a closed standard error (`| head`) must not end the sampling thread.
        use std::io::Write;
        let _ = writeln!(std::io::stderr(), "{message}");
        said.push(message.to_owned());
    }
}
