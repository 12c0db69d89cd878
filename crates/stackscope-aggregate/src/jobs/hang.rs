//! Deciding that a job hangs, and what its GPU says about the hang: the one hang rule, used by
//! `watch`, the metrics endpoint's `stackscope_hung` and a recording's summary.
//!
//! The rule: no thread's Python stack changed for the threshold ([`is_hung`]). The GPU does not
//! veto a hang, it classifies it ([`HangGpu`]): a rank stuck in a collective keeps an NCCL
//! kernel spinning, so the GPU reads 100% "utilized" while nothing moves. One report per hang:
//! a new one only after progress resumed.

use serde::{Deserialize, Serialize};
use stackscope_event::Timestamp;

use crate::gpu::GpuTag;

/// How long a process must not move to count as hung where no `--hang-after` says (the
/// metrics endpoint of `attach` and `top`, a recording's summary).
pub const DEFAULT_HANG_AFTER_SECS: f64 = 300.0;
/// A recording must span this long for "nothing moved in it" to say anything.
pub const MIN_STUCK_SECS: f64 = 3.0;
/// Slack for "the whole recording": threads are first read over the first tick or two.
const WHOLE_RECORDING_SLACK_SECS: f64 = 1.0;

/// The one hang rule: stacks unchanged for `unchanged_nanos` hang past `hang_after_nanos`.
pub fn is_hung(unchanged_nanos: u64, hang_after_nanos: u64) -> bool {
    unchanged_nanos >= hang_after_nanos
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
    /// out of `span_secs` sampled, is stuck: unchanged for the whole recording (at least
    /// [`MIN_STUCK_SECS`]), or for [`DEFAULT_HANG_AFTER_SECS`] at its end. `Some(whole)`.
    pub fn judge(unchanged_secs: f64, span_secs: f64) -> Option<bool> {
        let whole =
            span_secs >= MIN_STUCK_SECS && unchanged_secs + WHOLE_RECORDING_SLACK_SECS >= span_secs;
        let hung = is_hung(
            (unchanged_secs * 1e9) as u64,
            (DEFAULT_HANG_AFTER_SECS * 1e9) as u64,
        );
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

    /// Takes one observation at `time`: the job last moved at `moved_at`.
    pub fn observe(&mut self, time: Timestamp, moved_at: Timestamp) -> Option<HangEvent> {
        if self.last_change.is_none_or(|last| moved_at > last) {
            self.last_change = Some(moved_at);
            if self.reported {
                self.reported = false;
                return Some(HangEvent::Resumed);
            }
        }
        let unchanged = time.0.saturating_sub(moved_at.0);
        if !self.reported && is_hung(unchanged, self.hang_after_nanos) {
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
        assert_eq!(d.observe(at(0), at(0)), None);
        assert_eq!(d.observe(at(4), at(0)), None);
        assert_eq!(
            d.observe(at(5), at(0)),
            Some(HangEvent::Hung {
                unchanged_secs: 5.0
            })
        );
        assert_eq!(d.observe(at(9), at(0)), None, "reported once");
        assert_eq!(d.observe(at(10), at(10)), Some(HangEvent::Resumed));
        assert_eq!(d.observe(at(14), at(10)), None);
        assert!(matches!(
            d.observe(at(15), at(10)),
            Some(HangEvent::Hung { .. })
        ));
    }

    #[test]
    fn changing_stacks_never_hang() {
        let mut d = HangDetector::new(2.0);
        for s in 0..100 {
            assert_eq!(d.observe(at(s), at(s.saturating_sub(s % 2))), None);
        }
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
        assert!(is_hung(5, 5) && !is_hung(4, 5));
    }

    #[test]
    fn a_recording_is_stuck_when_nothing_moved_in_all_of_it_or_for_the_threshold() {
        assert_eq!(Stuck::judge(7.99, 8.0), Some(true));
        assert_eq!(Stuck::judge(2.0, 8.0), None, "moved 6 s in");
        assert_eq!(Stuck::judge(1.9, 2.0), None, "too short to say");
        assert_eq!(Stuck::judge(DEFAULT_HANG_AFTER_SECS, 3600.0), Some(false));
    }
}
