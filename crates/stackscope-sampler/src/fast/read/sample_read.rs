//! One sample's reads of every thread until each is whole: the first read of all of them,
//! the threads that moved read again, those that may have run stopped one by one, a thread
//! list that changed under the read rebuilt and read anew.
//!
//! Each read ([`FastReader::attempt`]) files an [`Outcome`] per thread; [`settle`] sorts
//! them into the frames that stand and the threads still to deal with ([`Settled`]), and
//! each phase below takes one kind of those.

use crate::fast::proof::quiet;
use crate::fast::read::attempt::Attempt;
use crate::fast::read::thread_model::Outcome;
use crate::fast::read::threads;
use crate::fast::{os_state, Before, FastReader, Read, ReadError};
use crate::procfs::ProcState;
use stackscope_event::Frames;

/// Reads of a thread that moved since its last sample, or held the GIL and failed the check,
/// before it is stopped.
const TRIES: usize = 3;
/// Stops of a thread caught in the middle of a call, before its stack is taken as it is.
const STOPS: usize = 3;

impl FastReader {
    /// Every listed thread's frames, whole; the list rebuilt (a few times at most) when it
    /// changed under the read. `before`: each thread's scheduler state before the read.
    pub(in crate::fast) fn read_threads(
        &mut self,
        blocking: bool,
        process_stopped: bool,
        before: &[Before],
    ) -> Result<Read, ReadError> {
        let mut rebuilds = 0;
        loop {
            if rebuilds > 0 {
                if rebuilds > 3 {
                    return Err(ReadError::ListKeepsChanging);
                }
                if !self.rebuild_list(process_stopped)? {
                    rebuilds += 1;
                    continue;
                }
            }
            rebuilds += 1;
            if let Some(read) = self.read_listed(blocking, process_stopped, before)? {
                return Ok(read);
            }
        }
    }

    /// Walks the interpreter's thread list anew; false when a thread state was freed while
    /// it was walked (walk it again).
    fn rebuild_list(&mut self, process_stopped: bool) -> Result<bool, ReadError> {
        self.stats.list_rebuilds += 1;
        match threads::rebuild(
            &mut self.remote,
            self.layout,
            &self.globals,
            &self.threads,
            None,
        ) {
            Ok(fresh) => {
                self.threads = fresh;
                self.still.clear();
                self.fill_os_thread_ids();
                Ok(true)
            }
            Err(_) if !process_stopped => Ok(false),
            Err(e) => Err(e),
        }
    }

    /// One sample's reads of the listed threads; None when the list changed under them.
    fn read_listed(
        &mut self,
        blocking: bool,
        process_stopped: bool,
        before: &[Before],
    ) -> Result<Option<Read>, ReadError> {
        // Every thread by its position, kept from sample to sample (taken out while the
        // reads borrow the reader; a read that fails leaves the next to make it anew).
        let mut all = std::mem::take(&mut self.every_thread);
        if all.len() != self.threads.len() {
            all.clear();
            all.extend(0..self.threads.len());
        }
        let first = self.first_attempt(&all, process_stopped)?;
        let stale_list = !threads::matches(&self.threads, &first);
        let gil_holder = first.gil_holder.unwrap_or(0);
        let mut results = std::mem::take(&mut self.scratch.results);
        results.clear();
        results.resize(all.len(), None);
        let mut settled = settle(&all, first, &mut results)?;
        if stale_list || settled.gone {
            return Ok(None);
        }
        let mut ran = self.reread_moved(&mut settled, &mut results, process_stopped)?;
        if settled.gone {
            return Ok(None);
        }
        // With the whole process stopped, a thread caught mid-call reads as py-spy would
        // read it.
        for (i, frames) in std::mem::take(&mut settled.midway) {
            results[i] = Some(frames);
        }
        self.keep_stopped_threads(&mut ran, before, &mut results);
        let again = std::mem::take(&mut settled.again);
        if !self.finish(blocking, process_stopped, again, ran, &mut results)? {
            return Ok(None);
        }
        self.proving_stops(blocking && !process_stopped, &mut results);
        if results.iter().any(Option::is_none) {
            return Err(ReadError::Torn);
        }
        self.every_thread = all;
        Ok(Some(Read {
            frames: results,
            gil_holder,
        }))
    }

    /// The sample's first read of every thread, the still ones taken on the GIL's word while
    /// that bet keeps paying (`quiet`); a lost bet has its threads read again for their
    /// proofs.
    fn first_attempt(
        &mut self,
        all: &[usize],
        process_stopped: bool,
    ) -> Result<Attempt, ReadError> {
        let betting = self.quiet_backoff == 0;
        let mut first = self.attempt(all, true, process_stopped)?;
        if !first.quiet_failed.is_empty() {
            // Threads taken as still may have run: those (not the others, whose reads
            // stand, the busy thread's checked copies among them) are read again for
            // what proves they did not move, each proof its own.
            self.stats.quiet_misses += 1;
            self.quiet_losses = self.quiet_losses.saturating_add(1);
            self.quiet_backoff = quiet::backoff(self.quiet_losses);
            let started = std::time::Instant::now();
            self.reread_lost_bet(&mut first, all, process_stopped)?;
            self.stats.quiet_miss_ns += started.elapsed().as_nanos() as u64;
        } else if betting {
            self.quiet_losses = 0;
        }
        if let Some(holder) = first.last_holder {
            self.expected_holder = holder;
        }
        Ok(first)
    }

    /// Threads that moved, or may have run without passing the check: read again (with the
    /// check) a couple of times before they are stopped. Answers those still read as having
    /// run, with their latest frames.
    fn reread_moved(
        &mut self,
        settled: &mut Settled,
        results: &mut [Option<Frames>],
        process_stopped: bool,
    ) -> Result<Vec<(usize, Frames)>, ReadError> {
        let mut ran = std::mem::take(&mut settled.ran);
        for _ in 1..TRIES {
            if settled.again.is_empty() && ran.is_empty() {
                break;
            }
            let mut which = std::mem::take(&mut settled.again);
            which.extend(ran.iter().map(|(i, _)| *i));
            self.stats.rereads += which.len() as u64;
            let next = self.attempt(&which, false, process_stopped)?;
            let mut again = settle(&which, next, results)?;
            // A thread read as "ran" again keeps its latest frames.
            ran.retain(|(i, _)| !which.contains(i));
            ran.append(&mut again.ran);
            settled.again = again.again;
            settled.gone |= again.gone;
            settled.midway.append(&mut again.midway);
        }
        Ok(ran)
    }

    /// A thread that was stopped (by a debugger, a test) before and after the read cannot
    /// have run in between, GIL or not: its read stands.
    fn keep_stopped_threads(
        &mut self,
        ran: &mut Vec<(usize, Frames)>,
        before: &[Before],
        results: &mut [Option<Frames>],
    ) {
        ran.retain(|(i, frames)| {
            let tid = self.threads[*i].ts.native_thread_id;
            let then = before.iter().find(|b| b.tid == tid).and_then(|b| b.state);
            let stopped = |state: Option<ProcState>| state.is_some_and(ProcState::is_stopped);
            let still = stopped(then) && stopped(os_state(&mut self.tids, &mut self.activity, tid));
            if still {
                results[*i] = Some(frames.clone());
            }
            !still
        });
    }

    /// Threads whose reads saw a stack with a short call on top that no sound read gave, due
    /// a stop to prove what they run ([`ProvingStops`]; `may`: stops are ours to make): each
    /// is stopped and read, and the sample takes that read (where a stop lands does not
    /// depend on what the thread runs). One that cannot be stopped, or read whole stopped,
    /// keeps its read.
    ///
    /// [`ProvingStops`]: crate::fast::proof::vouch::ProvingStops
    fn proving_stops(&mut self, may: bool, results: &mut [Option<Frames>]) {
        let now = self.read_at;
        let due: Vec<usize> = (0..self.threads.len())
            .filter(|&i| self.threads[i].proving.due(now, may))
            .collect();
        for i in due {
            let live = results.get(i).cloned().flatten();
            self.stats.proving_stops += 1;
            let stopped = self.stop_and_read(&[i], results);
            self.threads[i].proving.stopped();
            if !stopped.is_ok_and(|unstoppable| unstoppable.is_empty()) {
                if let Some(slot) = results.get_mut(i) {
                    *slot = live;
                }
            }
        }
    }

    /// What is left: threads never read whole (`again`) and threads that may have run
    /// (`ran`). Blocking, they are stopped one by one and read; not blocking, a torn read is
    /// an error and a read that may be stale is kept. False when the list changed.
    fn finish(
        &mut self,
        blocking: bool,
        process_stopped: bool,
        again: Vec<usize>,
        ran: Vec<(usize, Frames)>,
        results: &mut [Option<Frames>],
    ) -> Result<bool, ReadError> {
        if process_stopped && !again.is_empty() {
            return Err(ReadError::Layout(
                "a thread of the stopped process never read whole".to_owned(),
            ));
        }
        if !blocking {
            if !again.is_empty() {
                self.stats.torn += 1;
                return Err(ReadError::Torn);
            }
            // Not ours to stop: keep what was read, torn or not.
            self.stats.unverified += ran.len() as u64;
            for (i, frames) in ran {
                results[i] = Some(frames);
            }
            return Ok(true);
        }
        if again.is_empty() && ran.is_empty() {
            return Ok(true);
        }
        let mut to_stop = again;
        to_stop.extend(ran.iter().map(|(i, _)| *i));
        for i in self.stop_and_read(&to_stop, results)? {
            // Could not be stopped: gone (the list changed), or not ours to stop (another
            // tracer holds it): then its first read is all there is.
            let alive = self
                .tids
                .ours(self.threads[i].ts.native_thread_id)
                .is_some_and(|tid| crate::procfs::thread_alive(self.pid, tid));
            match ran.iter().find(|(r, _)| *r == i) {
                Some((_, frames)) if alive => {
                    self.stats.unverified += 1;
                    results[i] = Some(frames.clone());
                }
                _ => return Ok(false),
            }
        }
        Ok(true)
    }

    /// Stops the threads that may have run during the read, one by one (not the whole
    /// process), reads them and resumes them when the locks drop, whatever happens. Answers
    /// the threads it could not stop.
    fn stop_and_read(
        &mut self,
        which: &[usize],
        results: &mut [Option<Frames>],
    ) -> Result<Vec<usize>, ReadError> {
        let started = std::time::Instant::now();
        let mut left = which.to_vec();
        let mut midway = Vec::new();
        let mut unstoppable = Vec::new();
        // A thread caught in the middle of a call is let go and stopped again: a few
        // instructions later its stack is usually whole.
        for _ in 0..STOPS {
            let mut locks = Vec::with_capacity(left.len());
            let mut stopped = Vec::with_capacity(left.len());
            for &i in &left {
                let tid = self.tids.ours(self.threads[i].ts.native_thread_id);
                match tid.and_then(stop_thread) {
                    Some(lock) => {
                        locks.push(lock);
                        stopped.push(i);
                    }
                    None => unstoppable.push(i),
                }
            }
            self.stats.thread_stops += stopped.len() as u64;
            // Stopped, a thread reads at the latest on the second try (the first may use a
            // stale guess of where its frames are).
            let mut again = stopped;
            midway.clear();
            for _ in 0..2 {
                if again.is_empty() {
                    break;
                }
                let next = self.attempt(&again, false, true)?;
                let settled = settle(&again, next, results)?;
                again = settled.again;
                midway.extend(settled.midway);
            }
            drop(locks);
            if !again.is_empty() {
                self.stats.thread_stop_ns += started.elapsed().as_nanos() as u64;
                return Err(ReadError::Layout(
                    "a stopped thread's frames never read whole".to_owned(),
                ));
            }
            left = midway.iter().map(|(i, _)| *i).collect();
            if left.is_empty() {
                break;
            }
            self.stats.midway += left.len() as u64;
            std::thread::yield_now();
        }
        // Still not whole after a few stops: a stack that really starts elsewhere, or an
        // interpreter that keeps the current frame in a register for long stretches (3.12 in
        // a tight generator loop): py-spy reads such stacks the same way.
        for (i, frames) in midway {
            results[i] = Some(frames);
        }
        self.stats.thread_stop_ns += started.elapsed().as_nanos() as u64;
        Ok(unstoppable)
    }
}

/// Stops one thread (PTRACE_SEIZE and PTRACE_INTERRUPT); it runs again when the lock drops.
/// None when it cannot be: it has exited, or another tracer holds it.
fn stop_thread(tid: u64) -> Option<remoteprocess::ThreadLock> {
    let tid = remoteprocess::Tid::try_from(tid).ok()?;
    remoteprocess::Thread::new(tid).ok()?.lock().ok()
}

/// An attempt's outcomes, filed.
#[derive(Default)]
struct Settled {
    /// To read again.
    again: Vec<usize>,
    /// Read, but they may have run meanwhile.
    ran: Vec<(usize, Frames)>,
    /// Read stopped in the middle of a call or return.
    midway: Vec<(usize, Frames)>,
    /// A thread state could not be read: the list changed under us.
    gone: bool,
}

/// Files an attempt's outcomes: frames into `results`, the rest into [`Settled`].
fn settle(
    which: &[usize],
    attempt: Attempt,
    results: &mut [Option<Frames>],
) -> Result<Settled, ReadError> {
    let mut settled = Settled::default();
    for (&i, outcome) in which.iter().zip(attempt.outcomes) {
        match outcome {
            Outcome::Done(frames) => results[i] = Some(frames),
            Outcome::Ran(frames) => settled.ran.push((i, frames)),
            Outcome::Midway(frames) => settled.midway.push((i, frames)),
            Outcome::Again => settled.again.push(i),
            Outcome::Gone => settled.gone = true,
            Outcome::Broken(why) => return Err(ReadError::Layout(why)),
        }
    }
    Ok(settled)
}
