//! Deciding that a job hangs, and what its GPU says about the hang: the one hang rule, used by
//! `watch`, the metrics endpoint's `stackscope_hung` and a recording's summary.
//!
//! The rule: no thread's Python stack changed for the threshold, and no thread kept working
//! meanwhile ([`is_hung`]). A thread that keeps using CPU in compiled code under one frozen
//! line (`while True: zlib.compress(data, 9)`, a decoder, a numpy or torch op) is working, not
//! stuck ([`FrozenActivity`]): the scheduler has it running while it does not hold the GIL
//! (the C call released it). Unless what it runs is a wait: a spinning CUDA synchronisation or
//! collective (its native frames say so, or the GPU reads busy while it spins). A thread that
//! runs Python on one frozen line holds the GIL: a spin (`while not done: pass`), which makes
//! no progress a person would count.
//!
//! The GPU does not veto a hang, it classifies it ([`HangGpu`]): a rank stuck in a collective
//! keeps an NCCL kernel spinning, so the GPU reads 100% "utilized" while nothing moves. One
//! report per hang: a new one only after progress resumed.

use std::collections::HashMap;

use serde::{Deserialize, Serialize};
use stackscope_event::Timestamp;

use crate::gpu::GpuTag;

/// How long a process must not move to count as hung where no `--hang-after` says (the
/// metrics endpoint of `attach` and `top`, a recording's summary).
pub const DEFAULT_HANG_AFTER_SECS: f64 = 300.0;
/// A recording must span this long for "nothing moved in it" to say anything.
pub const MIN_STUCK_SECS: f64 = 3.0;
/// A recording that moved, then froze for its last this many seconds, is stuck...
pub const STUCK_TAIL_SECS: f64 = 30.0;
/// ... or for this share of it at its end, where that is longer.
pub const STUCK_TAIL_SHARE: f64 = 0.25;
/// Slack for "the whole recording": threads are first read over the first tick or two.
const WHOLE_RECORDING_SLACK_SECS: f64 = 1.0;

/// The one hang rule: stacks unchanged for `unchanged_nanos` hang past `hang_after_nanos`,
/// unless a thread kept `working` meanwhile ([`FrozenActivity::working`]).
pub fn is_hung(unchanged_nanos: u64, hang_after_nanos: u64, working: bool) -> bool {
    !working && unchanged_nanos >= hang_after_nanos
}

/// Native functions of a thread spinning in a wait: a CUDA synchronisation or a collective,
/// which keep a CPU busy while the thread waits on the GPU or a peer.
pub const SPIN_WAITS: [&str; 8] = [
    "cudaStreamSynchronize",
    "cudaDeviceSynchronize",
    "cudaEventSynchronize",
    "cuStreamSynchronize",
    "cuEventSynchronize",
    "cuCtxSynchronize",
    "nccl",
    "ProcessGroupNCCL",
];

/// Whether a frame is a native one of [`SPIN_WAITS`] (names are case-sensitive).
pub fn is_spin_wait(function: &str, native: bool) -> bool {
    native && SPIN_WAITS.iter().any(|w| function.contains(w))
}

/// Whether one read finds a thread working in compiled code: the scheduler has it running (it
/// uses CPU) without the GIL (a C call that released it, not Python bytecode spinning on one
/// line), and what it runs is no wait: no spin wait on its native stack, and no GPU reading
/// busy while it spins (`gpu_busy`: a synchronisation or collective spinning until the GPU is
/// done).
pub fn works_at_read(running: bool, holds_gil: bool, spin_wait: bool, gpu_busy: bool) -> bool {
    running && !holds_gil && !spin_wait && !gpu_busy
}

/// A thread read this many times since the stacks last changed can be said to keep working.
const MIN_WORKING_READS: u32 = 2;
/// Whether a thread keeps working is judged on its latest reads, this many at most: a thread
/// that worked for an hour under one frozen line and then blocked is stuck a few reads later.
const WORKING_WINDOW: u32 = 8;

/// Each thread's latest reads since any thread's Python stack last changed, and which found it
/// working ([`works_at_read`]): the CPU-use facts of the hang rule, kept alike by `watch`, the
/// metrics endpoint and a recording's summary.
#[derive(Debug, Clone, Default)]
pub struct FrozenActivity {
    /// By `(pid, thread)`: reads (up to [`WORKING_WINDOW`]), and a bit per read, the latest
    /// lowest, set where it was working.
    threads: HashMap<(u32, u64), (u32, u32)>,
}

impl FrozenActivity {
    /// A stack changed: what was counted is about a moving job.
    pub fn moved(&mut self) {
        self.threads.clear();
    }

    /// One read of thread `thread` of `pid`.
    pub fn read(&mut self, pid: u32, thread: u64, working: bool) {
        let (reads, bits) = self.threads.entry((pid, thread)).or_default();
        *reads = (*reads + 1).min(WORKING_WINDOW);
        *bits = ((*bits << 1) | u32::from(working)) & ((1 << WORKING_WINDOW) - 1);
    }

    /// The threads that keep working: read at least [`MIN_WORKING_READS`] times, working in at
    /// least half of their latest reads.
    pub fn working(&self) -> Vec<(u32, u64)> {
        let mut out: Vec<(u32, u64)> = self
            .threads
            .iter()
            .filter(|(_, &(reads, bits))| {
                reads >= MIN_WORKING_READS && bits.count_ones() * 2 >= reads
            })
            .map(|(&key, _)| key)
            .collect();
        out.sort_unstable();
        out
    }

    pub fn any_working(&self) -> bool {
        !self.working().is_empty()
    }

    /// Forgets a process that ended.
    pub fn forget(&mut self, pid: u32) {
        self.threads.retain(|(p, _), _| *p != pid);
    }
}

/// A recording whose target did not move: `summary.json`'s `stuck`.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct Stuck {
    /// Seconds no thread's Python stack changed, up to the recording's end.
    pub unchanged_secs: f64,
    /// Whether that was the whole recording.
    pub whole_recording: bool,
    /// Where the threads are frozen, the busiest first.
    pub threads: Vec<FrozenThread>,
}

/// One thread of a stuck target.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct FrozenThread {
    pub pid: u32,
    pub thread: String,
    /// Its innermost Python frame, `function (file:line)`.
    pub frame: String,
}

impl Stuck {
    /// Whether a recording whose threads' stacks were unchanged for `unchanged_secs` at its end,
    /// out of `span_secs` sampled, is stuck: nothing kept `working` meanwhile, and it was
    /// unchanged for the whole recording (at least [`MIN_STUCK_SECS`]), or for its last
    /// [`STUCK_TAIL_SECS`] or last [`STUCK_TAIL_SHARE`] of it where that is longer (at most
    /// [`DEFAULT_HANG_AFTER_SECS`], the hang rule's own threshold). `Some(whole)`.
    pub fn judge(unchanged_secs: f64, span_secs: f64, working: bool) -> Option<bool> {
        let whole = !working
            && span_secs >= MIN_STUCK_SECS
            && unchanged_secs + WHOLE_RECORDING_SLACK_SECS >= span_secs;
        let tail = STUCK_TAIL_SECS
            .max(span_secs * STUCK_TAIL_SHARE)
            .min(DEFAULT_HANG_AFTER_SECS);
        let hung = is_hung((unchanged_secs * 1e9) as u64, (tail * 1e9) as u64, working);
        (whole || hung).then_some(whole)
    }

    /// "no thread's Python stack changed for 8.0 s (the whole recording). Frozen: MainThread
    /// (pid 1048) at evaluate (stuck.py:30)".
    pub fn sentence(&self) -> String {
        let frozen: Vec<String> = self
            .threads
            .iter()
            .map(|t| format!("{} (pid {}) at {}", t.thread, t.pid, t.frame))
            .collect();
        format!(
            "no thread's Python stack changed for {:.1} s{}. Frozen: {}",
            self.unchanged_secs,
            if self.whole_recording {
                " (the whole recording)"
            } else {
                " (to the end of the recording)"
            },
            frozen.join("; ")
        )
    }
}

/// The GPU over a hang, as a hang report's JSON writes it.
#[derive(Debug, Clone, Copy, PartialEq, Serialize, Deserialize)]
pub struct HangGpu {
    /// `idle`, `busy_low_sm` or `busy` (never `unknown`: without GPU data there is no
    /// `HangGpu`).
    pub state: GpuTag,
    pub mean_utilization: f64,
    pub mean_sm_active_pct: Option<f64>,
}

impl HangGpu {
    /// Classifies a hang by the GPU's mean utilization and SM activity over it. Without GPM,
    /// `frozen_in_cuda_wait` (a stack frozen in a CUDA synchronisation or a collective) stands
    /// for low SM activity.
    pub fn classify(
        mean_utilization: f64,
        mean_sm_active_pct: Option<f64>,
        idle_below: f64,
        frozen_in_cuda_wait: bool,
    ) -> HangGpu {
        let state = GpuTag::of(mean_utilization, idle_below, || mean_sm_active_pct);
        let state = match state {
            GpuTag::Busy if mean_sm_active_pct.is_none() && frozen_in_cuda_wait => {
                GpuTag::BusyLowSm
            }
            state => state,
        };
        HangGpu {
            state,
            mean_utilization,
            mean_sm_active_pct,
        }
    }

    /// What the hang is, in words: "the GPU idles (3% utilization): the job waits on
    /// something on the host (a lock, a peer, I/O)".
    pub fn sentence(&self) -> String {
        let util = self.mean_utilization;
        let sm = self
            .mean_sm_active_pct
            .map_or(String::new(), |sm| format!(", SM activity {sm:.0}%"));
        match self.state {
            GpuTag::Idle => format!(
                "the GPU idles ({util:.0}% utilization{sm}): the job waits on something on the \
                 host (a lock, a peer, I/O)"
            ),
            GpuTag::BusyLowSm => format!(
                "the GPU reads busy ({util:.0}% utilization{sm}) while nothing moves: stuck in a \
                 kernel or a collective (the NCCL signature: a peer that never comes)"
            ),
            GpuTag::Busy => format!(
                "the GPU is busy ({util:.0}% utilization{sm}): a kernel is still working; the \
                 stacks wait on it"
            ),
            GpuTag::Unknown => "no GPU reading covers the hang".to_owned(),
        }
    }
}

#[derive(Debug, Clone, Copy, PartialEq)]
pub enum HangEvent {
    /// Nothing moved for `unchanged_secs` seconds.
    Hung { unchanged_secs: f64 },
    /// The stacks changed again after a hang was reported.
    Resumed,
}

/// One report per hang, from when the job last moved ([`crate::ProcessMotion::last_move`]).
pub struct HangDetector {
    hang_after_nanos: u64,
    last_change: Option<Timestamp>,
    reported: bool,
}

impl HangDetector {
    pub fn new(hang_after_secs: f64) -> HangDetector {
        HangDetector {
            hang_after_nanos: (hang_after_secs * 1e9) as u64,
            last_change: None,
            reported: false,
        }
    }

    /// Takes one observation at `time`: the job last moved at `moved_at`; whether a thread
    /// kept `working` since ([`FrozenActivity::any_working`]).
    pub fn observe(
        &mut self,
        time: Timestamp,
        moved_at: Timestamp,
        working: bool,
    ) -> Option<HangEvent> {
        if self.last_change.is_none_or(|last| moved_at > last) {
            self.last_change = Some(moved_at);
            if self.reported {
                self.reported = false;
                return Some(HangEvent::Resumed);
            }
        }
        let unchanged = time.0.saturating_sub(moved_at.0);
        if !self.reported && is_hung(unchanged, self.hang_after_nanos, working) {
            self.reported = true;
            return Some(HangEvent::Hung {
                unchanged_secs: unchanged as f64 / 1e9,
            });
        }
        None
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn at(secs: u64) -> Timestamp {
        Timestamp(secs * 1_000_000_000)
    }

    #[test]
    fn one_report_per_hang_and_another_after_progress() {
        let mut d = HangDetector::new(5.0);
        assert_eq!(d.observe(at(0), at(0), false), None);
        assert_eq!(d.observe(at(4), at(0), false), None);
        assert_eq!(
            d.observe(at(5), at(0), false),
            Some(HangEvent::Hung {
                unchanged_secs: 5.0
            })
        );
        assert_eq!(d.observe(at(9), at(0), false), None, "reported once");
        assert_eq!(d.observe(at(10), at(10), false), Some(HangEvent::Resumed));
        assert_eq!(d.observe(at(14), at(10), false), None);
        assert!(matches!(
            d.observe(at(15), at(10), false),
            Some(HangEvent::Hung { .. })
        ));
    }

    #[test]
    fn changing_stacks_never_hang() {
        let mut d = HangDetector::new(2.0);
        for s in 0..100 {
            assert_eq!(d.observe(at(s), at(s.saturating_sub(s % 2)), false), None);
        }
    }

    /// `while True: zlib.compress(data, 9)`: one frozen line, the thread always running.
    #[test]
    fn a_thread_that_keeps_using_cpu_under_a_frozen_stack_is_working_not_stuck() {
        let mut d = HangDetector::new(2.0);
        let mut activity = FrozenActivity::default();
        for s in 0..10 {
            activity.read(1, 7, works_at_read(true, false, false, false));
            assert_eq!(
                d.observe(at(s), at(0), activity.any_working()),
                None,
                "{s} s"
            );
        }
        // It stops using CPU (blocks on a lock): the hang is found once waiting reads are
        // most of its latest eight.
        let hung = (10..40).find(|&s| {
            activity.read(1, 7, works_at_read(false, false, false, false));
            d.observe(at(s), at(0), activity.any_working()).is_some()
        });
        assert_eq!(hung, Some(14), "5 waiting reads of the latest 8");
        // Spinning in a CUDA wait, or while the GPU reads busy, is waiting; so is Python
        // spinning on one line (it holds the GIL).
        let spin = is_spin_wait("cudaStreamSynchronize", true);
        assert!(!works_at_read(true, false, spin, false));
        assert!(!works_at_read(true, false, false, true));
        assert!(!works_at_read(true, true, false, false));
        assert!(!is_spin_wait("cudaStreamSynchronize", false));
    }

    #[test]
    fn the_gpu_classifies_a_hang_and_vetoes_none() {
        let idle = HangGpu::classify(3.0, Some(1.0), 30.0, false);
        assert_eq!(idle.state, GpuTag::Idle);
        assert!(idle.sentence().contains("waits on something on the host"));
        let nccl = HangGpu::classify(100.0, Some(1.0), 30.0, false);
        assert_eq!(nccl.state, GpuTag::BusyLowSm);
        assert!(nccl
            .sentence()
            .contains("stuck in a kernel or a collective"));
        assert!(nccl.sentence().contains("SM activity 1%"));
        assert_eq!(
            HangGpu::classify(100.0, Some(90.0), 30.0, false).state,
            GpuTag::Busy
        );
        // Without GPM, a stack frozen in a CUDA wait stands for idle SMs.
        assert_eq!(
            HangGpu::classify(99.0, None, 30.0, true).state,
            GpuTag::BusyLowSm
        );
        assert_eq!(
            HangGpu::classify(99.0, None, 30.0, false).state,
            GpuTag::Busy
        );
        assert!(is_hung(5, 5, false) && !is_hung(4, 5, false) && !is_hung(5, 5, true));
    }

    #[test]
    fn a_recording_is_stuck_when_nothing_moved_in_all_of_it_or_for_the_threshold() {
        assert_eq!(Stuck::judge(7.99, 8.0, false), Some(true));
        assert_eq!(Stuck::judge(7.99, 8.0, true), None, "a thread kept working");
        assert_eq!(Stuck::judge(2.0, 8.0, false), None, "moved 6 s in");
        assert_eq!(Stuck::judge(1.9, 2.0, false), None, "too short to say");
        // Worked 3 s, then froze 33 s of 36: frozen for its last 30 s.
        assert_eq!(Stuck::judge(33.0, 36.0, false), Some(false));
        assert_eq!(Stuck::judge(29.0, 36.0, false), None);
        // The last quarter, where that is longer than 30 s: 50 s of 200 s.
        assert_eq!(Stuck::judge(50.0, 200.0, false), Some(false));
        assert_eq!(Stuck::judge(45.0, 200.0, false), None);
        // At most the hang rule's threshold, however long the recording.
        assert_eq!(
            Stuck::judge(DEFAULT_HANG_AFTER_SECS, 3600.0, false),
            Some(false)
        );
    }
}
