//! Each thread's scheduler state, from `/proc/PID/task/TID/stat`. py-spy calls a thread active when
//! the scheduler says `R`; a thread stopped by a tracer or a signal (`t`, `T`) cannot run.
//!
//! py-spy lists `/proc/PID/task` and opens, reads and closes every thread's stat file for
//! every sample. The files stay open here and are re-read in place (`pread` at offset 0 makes
//! procfs render them afresh): one system call per thread. A file whose thread has exited
//! answers ESRCH, even if its id was reused, so it is opened again.
//!
//! A thread that slept at its last reading, within [`REUSE_FOR`], and whose Python state has
//! not changed since is taken as still asleep without reading again ([`Activity::recent_sleep`]):
//! the reader decides that, since only it knows whether the Python state changed. When the
//! window is up, the state is renewed if the thread has not been on a CPU since it was read:
//! told by its switch ring ([`crate::fast::proof::switches`], a load from memory) where it has one, and
//! otherwise by its `schedstat` (a system call; each such renewal then doubles the window, up
//! to [`MAX_REUSE_FOR`], since a thread that has slept for long is likely to sleep on and these
//! renewals were most of what a sleeping thread cost: docs/performance.md).

use std::fs::File;
use std::os::unix::fs::FileExt;
use std::time::{Duration, Instant};

use crate::fast::memory::addrmap::TidMap;
use crate::fast::proof::switches::{OffCpu, Seen, SwitchRings};
use crate::procfs::{ProcState, StatLine};

/// How long a sleeping thread's state is taken as still true while its Python state does not
/// change (docs/performance.md: the error this allows, measured).
pub(crate) const REUSE_FOR: Duration = Duration::from_millis(100);
/// The longest window, reached by a thread renewed twice in a row without having run (300 ms
/// off any CPU): the error the reuse allows for such a thread (docs/performance.md).
pub(crate) const MAX_REUSE_FOR: Duration = Duration::from_millis(400);

struct Entry {
    file: File,
    /// The state last read, when, and the thread's CPU time then (clock ticks).
    last: Option<(Option<ProcState>, Instant, Option<u64>)>,
    /// Since when its CPU time has not moved, as far as the readings tell.
    quiet_since: Option<Instant>,
    /// Its `schedstat` file (opened for a thread once it is seen asleep) and what it said
    /// just before the last `stat` reading that found it asleep.
    sched: Option<File>,
    sched_then: Option<Sched>,
    /// How long the last reading or renewal stands: [`REUSE_FOR`] after a `stat` reading,
    /// doubled by each `schedstat` renewal up to [`MAX_REUSE_FOR`].
    window: Duration,
    /// Where its switch ring stood just before the last `stat` reading that found it asleep,
    /// with the thread off every CPU: while the ring has not moved, it has not run since.
    mark: Option<OffCpu>,
}

/// A thread's `/proc/PID/task/TID/schedstat`: nanoseconds on a CPU, nanoseconds waiting for
/// one, times switched in. The kernel updates the first at every switch out and scheduler
/// tick, the last at every switch in: a thread whose line reads the same has not been on a
/// CPU in between (it slept, or woke and still waits for a CPU), so a sleeping state read
/// before is still true but for that wait. Rendering it costs the kernel far less than `stat`
/// (three numbers, no permission check, no memory statistics).
#[derive(Clone, Copy, PartialEq, Eq, Debug)]
struct Sched {
    run_ns: u64,
    switches: u64,
}

/// Whether a state read says the thread sleeps ([`ProcState::is_asleep`]).
pub(crate) fn is_asleep(state: Option<ProcState>) -> bool {
    state.is_some_and(ProcState::is_asleep)
}

pub(crate) struct Activity {
    pid: u32,
    files: TidMap<Entry>,
    /// The quiet sleepers' switch rings (also what a lost GIL bet asks, [`crate::fast::proof::lost_bet`]).
    pub switches: SwitchRings,
    pub reads: u64,
    /// States taken from an earlier read instead.
    pub reused: u64,
    /// Of those, states renewed past their window because the thread had not run: by its
    /// switch ring, or by a `schedstat` reading.
    pub renewed: u64,
    pub ring_renewed: u64,
    pub sched_reads: u64,
    /// States told by switch rings instead of a reading ([`Activity::state_now`]); with
    /// `audit`, each is read too, and those whose reading says otherwise (runs, or not) are
    /// counted.
    pub ring_states: u64,
    /// Whether [`Activity::state_now`] asks the rings at all (off: it reads every state).
    pub ring_states_on: bool,
    pub audit: bool,
    pub ring_disagreed: u64,
}

impl Activity {
    /// `switch_rings`: [`crate::ReaderTuning::switch_rings`].
    pub(crate) fn new(pid: u32, switch_rings: bool) -> Activity {
        Activity::with_rings(pid, SwitchRings::new(pid, switch_rings))
    }

    pub(crate) fn with_rings(pid: u32, switches: SwitchRings) -> Activity {
        Activity {
            pid,
            files: TidMap::default(),
            switches,
            reads: 0,
            reused: 0,
            renewed: 0,
            ring_renewed: 0,
            sched_reads: 0,
            ring_states: 0,
            ring_states_on: true,
            audit: false,
            ring_disagreed: 0,
        }
    }

    /// The state of thread `tid` now: told by its switch ring where that tells it as its
    /// `stat` would, read ([`Activity::state`]) otherwise. A cold `stat` reading costs about
    /// 30 µs on the project's VM, a ring's latest record a load. A thread on a CPU, or
    /// preempted from one, is `R`. One that switched out of its own accord is asleep or
    /// stopped, or woken since and waiting for a CPU (`R` again, which no record tells): only
    /// its `stat` says which, so it is read.
    pub(crate) fn state_now(&mut self, tid: u64) -> Option<ProcState> {
        if !self.ring_states_on {
            return self.state(tid);
        }
        let told = match self.switches.seen(tid) {
            Some(Seen::OnCpu | Seen::Preempted) => ProcState::RUNNING,
            Some(Seen::Blocked) | None => return self.state(tid),
        };
        self.ring_states += 1;
        // The reading on record is older than what the ring told: reused, it would hide a
        // thread that ran since (its CPU time moved unread). The next reading starts anew.
        if let Some(entry) = self.files.get_mut(&tid) {
            entry.last = None;
        }
        if self.audit
            && self
                .peek(tid)
                .is_some_and(|s| s.is_running() != told.is_running())
        {
            self.ring_disagreed += 1;
        }
        Some(told)
    }

    /// The scheduler state letter of thread `tid` (`R` running, `S` sleeping, `t` stopped by
    /// a tracer, ...); None when it cannot be read (py-spy then counts the thread as active).
    pub(crate) fn state(&mut self, tid: u64) -> Option<ProcState> {
        // A quiet sleeper's schedstat first (the baseline of later renewals; a thread that
        // keeps waking, such as one that waits for the GIL by turns, never gets that far): a
        // wake-up between the two readings then shows as a change later, rather than hiding
        // in the baseline.
        // Where it can have a switch ring, the ring stands in for the schedstat: where the
        // ring is as the thread sleeps, taken before the reading, so that a ring that has not
        // moved since covers the moment of the reading too.
        let now = Instant::now();
        let (sched, mark) = match self.files.get_mut(&tid) {
            Some(e)
                if is_asleep(e.last.and_then(|(s, _, _)| s))
                    && e.quiet_since
                        .is_some_and(|q| now.saturating_duration_since(q) >= REUSE_FOR) =>
            {
                match self.switches.off_cpu(tid) {
                    Some(mark) => (None, Some(mark)),
                    None => {
                        self.sched_reads += 1;
                        (read_sched(self.pid, tid, e), None)
                    }
                }
            }
            _ => (None, None),
        };
        let (state, cpu) = self.read(tid);
        if let Some(e) = self.files.get_mut(&tid) {
            let same = cpu.is_some() && e.last.is_some_and(|(_, _, c)| c == cpu);
            if !same {
                e.quiet_since = Some(now);
            }
            e.last = Some((state, now, cpu));
            e.window = REUSE_FOR;
            // A thread that was awake at the reading before has no baseline yet: the next
            // reading (if it still sleeps) takes one.
            e.sched_then = if is_asleep(state) { sched } else { None };
            e.mark = if is_asleep(state) { mark } else { None };
        }
        state
    }

    /// The state of `tid` as last read, if that was within its window before `now`
    /// ([`REUSE_FOR`] after a reading), said it slept (`S`, `D`, ...), and the thread's CPU
    /// time has not moved for [`REUSE_FOR`] either (a thread that loops around a C call
    /// releasing the GIL sleeps for a moment each time it waits for the GIL, in the same
    /// Python state: it keeps being read). A running, stopped or unreadable one is read every
    /// time.
    ///
    /// When the window is up, a thread with a switch ring is renewed for another
    /// [`REUSE_FOR`] if its ring has not moved since the sleeping state was read. One without
    /// has its `schedstat` read (a third of a `stat` reading's cost): if it has not been on a
    /// CPU since, the state is renewed for twice the window, up to [`MAX_REUSE_FOR`]. The
    /// error: a thread that woke and runs C code without touching Python reads as asleep
    /// until its window is up, at most [`REUSE_FOR`] with a ring, or after a reading, and
    /// [`MAX_REUSE_FOR`] after 300 ms of `schedstat` renewals; one whose Python state moves is
    /// read at once (the reader's rule).
    pub(crate) fn recent_sleep(&mut self, tid: u64, now: Instant) -> Option<ProcState> {
        let pid = self.pid;
        let entry = self.files.get_mut(&tid)?;
        let (state, at, cpu) = entry.last?;
        let asleep = is_asleep(state);
        let quiet = cpu.is_some()
            && entry
                .quiet_since
                .is_some_and(|q| now.saturating_duration_since(q) >= REUSE_FOR);
        if !(asleep && quiet) {
            return None;
        }
        if now.saturating_duration_since(at) <= entry.window {
            self.reused += 1;
            return state;
        }
        if let Some(mark) = entry.mark {
            // A ring that moved: the thread ran, read it again (a schedstat would say so too).
            if !self.switches.still_off(tid, mark) {
                return None;
            }
            entry.last = Some((state, now, cpu));
            self.reused += 1;
            self.renewed += 1;
            self.ring_renewed += 1;
            return state;
        }
        let then = entry.sched_then?;
        self.sched_reads += 1;
        if read_sched(pid, tid, entry) == Some(then) {
            entry.last = Some((state, now, cpu));
            entry.window = (entry.window * 2).min(MAX_REUSE_FOR);
            self.reused += 1;
            self.renewed += 1;
            return state;
        }
        None
    }

    /// Reads the state without remembering it (the idle audit's reference reading).
    pub(crate) fn peek(&mut self, tid: u64) -> Option<ProcState> {
        let reads = self.reads;
        let (state, _) = self.read(tid);
        self.reads = reads;
        state
    }

    /// The state letter and the CPU time (utime + stime, clock ticks).
    fn read(&mut self, tid: u64) -> (Option<ProcState>, Option<u64>) {
        for _ in 0..2 {
            let entry = match self.files.get(&tid) {
                Some(e) => e,
                None => {
                    // The thread's own file: `/proc/TID/stat` is the whole process's view,
                    // which adds up every thread's CPU time on each read (a cost that grows
                    // with the threads, paid for each of them).
                    let path = format!("/proc/{}/task/{tid}/stat", self.pid);
                    let Ok(file) = File::open(path) else {
                        return (None, None);
                    };
                    self.files.entry(tid).or_insert(Entry {
                        file,
                        last: None,
                        quiet_since: None,
                        sched: None,
                        sched_then: None,
                        window: REUSE_FOR,
                        mark: None,
                    })
                }
            };
            let mut buf = [0u8; 512];
            self.reads += 1;
            match entry.file.read_at(&mut buf, 0) {
                Ok(n) if n > 0 => return (state(&buf[..n]), cpu_ticks(&buf[..n])),
                _ => {
                    self.files.remove(&tid);
                }
            }
        }
        (None, None)
    }

    /// Threads with an open file or a switch ring.
    #[cfg(test)]
    pub(crate) fn len(&self) -> usize {
        self.files.len() + self.switches.len()
    }

    /// Closes the files of threads no longer sampled.
    pub(crate) fn retain(&mut self, live: &[u64]) {
        if self.files.len() > live.len() {
            self.files.retain(|tid, _| live.contains(tid));
        }
        self.switches.retain(live);
    }
}

/// The thread's schedstat line, its file opened on first use and kept; None when it cannot be
/// read (no such file, too many open files, a kernel without schedstats shows zeros).
fn read_sched(pid: u32, tid: u64, entry: &mut Entry) -> Option<Sched> {
    if entry.sched.is_none() {
        entry.sched = File::open(format!("/proc/{pid}/task/{tid}/schedstat")).ok();
    }
    let mut buf = [0u8; 96];
    let n = match entry.sched.as_ref()?.read_at(&mut buf, 0) {
        Ok(n) if n > 0 => n,
        _ => {
            entry.sched = None;
            return None;
        }
    };
    let sched = parse_sched(buf.get(..n)?)?;
    (sched.switches != 0).then_some(sched)
}

fn parse_sched(line: &[u8]) -> Option<Sched> {
    let mut fields = std::str::from_utf8(line).ok()?.split_ascii_whitespace();
    let run_ns = fields.next()?.parse().ok()?;
    let _waited_ns: u64 = fields.next()?.parse().ok()?;
    let switches = fields.next()?.parse().ok()?;
    Some(Sched { run_ns, switches })
}

/// The state ([`StatLine::state`]).
fn state(stat: &[u8]) -> Option<ProcState> {
    StatLine::parse(stat)?.state()
}

/// utime + stime ([`StatLine::cpu_ticks`]).
fn cpu_ticks(stat: &[u8]) -> Option<u64> {
    StatLine::parse(stat)?.cpu_ticks()
}

/// Whether a state read says the thread can run: running, runnable or asleep, not stopped by
/// a signal or a tracer, not exiting, and read at all.
pub(crate) fn is_awake_or_asleep(state: Option<ProcState>) -> bool {
    state.is_some_and(|s| s.is_running() || s.is_asleep())
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::fast::test_threads::sleeper;

    #[test]
    fn our_own_thread_runs_and_a_missing_one_is_unknown() {
        let mut activity = Activity::new(std::process::id(), true);
        let tid = nix::unistd::gettid().as_raw() as u64;
        assert_eq!(activity.state(tid), Some(ProcState(b'R')));
        assert_eq!(activity.state(tid), Some(ProcState(b'R')));
        assert_eq!(activity.state(u64::from(u32::MAX - 1)), None);
        // A running thread's state is never reused.
        assert_eq!(activity.recent_sleep(tid, Instant::now()), None);
        activity.retain(&[]);
        assert!(activity.files.is_empty());
    }

    /// A thread on a CPU is `R` by its ring, no reading made; one that blocked is read.
    #[test]
    fn a_ring_stands_for_a_reading_where_it_tells_as_much() {
        let mut activity = Activity::new(std::process::id(), true);
        let (tid, go, thread) = sleeper();
        std::thread::sleep(Duration::from_millis(20));
        // Its ring, opened while it sleeps, has no switch yet to tell by.
        assert_eq!(activity.state_now(tid), Some(ProcState(b'S')));
        assert_eq!(activity.reads, 1);
        go.send(()).unwrap();
        let deadline = Instant::now() + Duration::from_secs(5);
        while activity.ring_states == 0 && Instant::now() < deadline {
            assert_eq!(activity.state_now(tid), Some(ProcState(b'R')));
        }
        assert!(activity.ring_states > 0, "never told by its ring");
        std::thread::sleep(Duration::from_millis(60));
        // Blocked: asleep or stopped, which only a reading tells.
        let (reads, told) = (activity.reads, activity.ring_states);
        assert_eq!(activity.state_now(tid), Some(ProcState(b'S')));
        assert_eq!((activity.reads, activity.ring_states), (reads + 1, told));
        go.send(()).unwrap();
        activity.ring_states_on = false;
        let deadline = Instant::now() + Duration::from_secs(5);
        while activity.state_now(tid) != Some(ProcState(b'R')) && Instant::now() < deadline {}
        assert_eq!(activity.ring_states, told, "rings off: read");
        drop(go);
        thread.join().unwrap();
    }

    #[test]
    fn the_state_follows_the_last_parenthesis() {
        assert_eq!(state(b"12 (a) b) S 1 2"), Some(ProcState(b'S')));
        assert_eq!(state(b"12 (x) R 1"), Some(ProcState(b'R')));
        assert_eq!(state(b"garbage"), None);
        let line = b"12 (a) b) S 1 2 3 4 5 6 7 8 9 10 70 30 0 0";
        assert_eq!(cpu_ticks(line), Some(100));
    }

    #[test]
    fn schedstat_gives_run_time_and_switches() {
        assert_eq!(
            parse_sched(b"279983773 364475451 6058\n"),
            Some(Sched {
                run_ns: 279983773,
                switches: 6058
            })
        );
        assert_eq!(parse_sched(b"12 34"), None);
        assert_eq!(parse_sched(b"x 1 2"), None);
    }

    /// Moves the thread's last reading back past its window, as if that long had passed.
    fn age(activity: &mut Activity, tid: u64) {
        let e = activity.files.get_mut(&tid).unwrap();
        let (state, at, cpu) = e.last.unwrap();
        e.last = Some((state, at - e.window - Duration::from_millis(1), cpu));
    }

    /// With a switch ring, a sleeper's state is renewed by a look at its ring, with no
    /// `schedstat` read, for [`REUSE_FOR`] at a time; once it has run, its ring has moved and
    /// it is read again at the end of the window.
    #[test]
    fn a_sleeper_with_a_switch_ring_is_renewed_by_its_ring() {
        let (tid, go, thread) = sleeper();
        let pid = std::process::id();
        let mut activity = Activity::new(pid, true);
        std::thread::sleep(Duration::from_millis(20));
        assert_eq!(activity.state(tid), Some(ProcState(b'S')));
        std::thread::sleep(REUSE_FOR + Duration::from_millis(20));
        // Quiet for a window: this reading takes the ring's mark instead of a schedstat.
        assert_eq!(activity.state(tid), Some(ProcState(b'S')));
        assert_eq!(activity.switches.refused, 0, "perf_event_open refused");
        assert!(activity.files[&tid].mark.is_some());
        let (reads, sched_reads) = (activity.reads, activity.sched_reads);
        for renewals in 1..=3 {
            age(&mut activity, tid);
            assert_eq!(
                activity.recent_sleep(tid, Instant::now()),
                Some(ProcState(b'S'))
            );
            assert_eq!(
                (activity.ring_renewed, activity.renewed, activity.reads),
                (renewals, renewals, reads)
            );
            // No doubling: a look at the ring costs next to nothing.
            assert_eq!(activity.files[&tid].window, REUSE_FOR);
        }
        assert_eq!(activity.sched_reads, sched_reads);
        // It runs and sleeps again: within the window its state still stands (the reader
        // reads a thread whose Python state moved), past it the ring says it ran.
        go.send(()).unwrap();
        std::thread::sleep(Duration::from_millis(60));
        assert_eq!(
            activity.recent_sleep(tid, Instant::now()),
            Some(ProcState(b'S'))
        );
        age(&mut activity, tid);
        assert_eq!(activity.recent_sleep(tid, Instant::now()), None);
        assert_eq!(activity.ring_renewed, 3);
        // Read again, it sleeps, with a new mark from after its run.
        let old = activity.files[&tid].mark;
        assert_eq!(activity.state(tid), Some(ProcState(b'S')));
        let new = activity.files[&tid].mark;
        assert!(new.is_some() && new != old);
        drop(go);
        thread.join().unwrap();
    }

    /// A sleeping thread's state is renewed past [`REUSE_FOR`] while it does not run, and
    /// read afresh once it has.
    #[test]
    fn a_sleeper_that_has_not_run_keeps_its_state_and_one_that_ran_is_read() {
        // Asleep until told, then a moment of work, then asleep again.
        let (tid, go_tx, sleeper) = sleeper();
        let pid = std::process::id();
        let mut activity = Activity::with_rings(pid, SwitchRings::new(pid, false));
        // Asleep at two readings (the second takes the schedstat baseline)...
        std::thread::sleep(Duration::from_millis(20));
        assert_eq!(activity.state(tid), Some(ProcState(b'S')));
        std::thread::sleep(REUSE_FOR + Duration::from_millis(20));
        assert_eq!(activity.state(tid), Some(ProcState(b'S')));
        // ... then past the reuse window: renewed, not read.
        std::thread::sleep(REUSE_FOR + Duration::from_millis(20));
        let reads = activity.reads;
        assert_eq!(
            activity.recent_sleep(tid, Instant::now()),
            Some(ProcState(b'S'))
        );
        assert_eq!((activity.reads, activity.renewed), (reads, 1));
        // Renewed for twice the window: still standing past another REUSE_FOR, with no read
        // (the renewal moved back in time rather than a sleep, which a loaded machine can
        // stretch past the window).
        let e = activity.files.get_mut(&tid).unwrap();
        let (state, at, cpu) = e.last.unwrap();
        e.last = Some((state, at - REUSE_FOR - Duration::from_millis(20), cpu));
        let sched_reads = activity.sched_reads;
        assert_eq!(
            activity.recent_sleep(tid, Instant::now()),
            Some(ProcState(b'S'))
        );
        assert_eq!(
            (activity.reads, activity.sched_reads, activity.renewed),
            (reads, sched_reads, 1)
        );
        // The window doubles at each renewal, to the bound and no further.
        for expected in [Duration::from_millis(400), MAX_REUSE_FOR, MAX_REUSE_FOR] {
            let e = activity.files.get_mut(&tid).unwrap();
            let (state, at, cpu) = e.last.unwrap();
            e.last = Some((state, at - e.window - Duration::from_millis(1), cpu));
            assert_eq!(
                activity.recent_sleep(tid, Instant::now()),
                Some(ProcState(b'S'))
            );
            assert_eq!(activity.files[&tid].window, expected);
        }
        // It runs: once the window is up, its schedstat moved and the state is not reused.
        let renewed = activity.renewed;
        go_tx.send(()).unwrap();
        std::thread::sleep(MAX_REUSE_FOR + Duration::from_millis(40));
        assert_eq!(activity.recent_sleep(tid, Instant::now()), None);
        assert_eq!(activity.renewed, renewed);
        drop(go_tx);
        sleeper.join().unwrap();
    }
}
