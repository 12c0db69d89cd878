//! The GPU's state at a stack sample's instant: the one tag every command uses ([`GpuTag`]), and
//! the two rules that decide it.
//!
//! - **Idle**: utilization below `--idle-below` ([`is_idle`], default [`DEFAULT_IDLE_BELOW`]).
//!   The tagger, the per-device idle share, the idle share of the devices' mean and every
//!   command's default take the rule and the default from here.
//! - **Low SM activity** (GPM, Hopper and later): utilization counts a time slice busy when any
//!   kernel ran, however few SMs it occupied; SM activity is the share of time the SMs had
//!   work, averaged over all of them. While kernels run on all SMs the two agree; a job bound by
//!   kernel launches, tiny ops or synchronisation reads near 100% utilization with most SMs
//!   idle. The rule, for the whole recording (the low-SM verdict, `verdict/low_sm.rs`) and for
//!   each stack sample's instant alike: SM activity under [`SM_LOW_SHARE`] of utilization
//!   ([`is_low`]) means kernels ran on a small part of the GPU.

use serde::{Deserialize, Serialize};

/// The default of `--idle-below`: GPU utilization in percent below which the GPU idles.
pub const DEFAULT_IDLE_BELOW: f32 = 30.0;

/// Whether utilization `utilization` (percent) is idle against the threshold `idle_below`.
pub fn is_idle(utilization: f64, idle_below: f64) -> bool {
    utilization < idle_below
}

/// SM activity below this share of utilization is "low": while kernels ran, they kept fewer
/// than half the SMs busy.
pub const SM_LOW_SHARE: f64 = 0.5;

/// Whether SM activity `sm` (percent) is low for utilization `utilization` (percent).
pub fn is_low(utilization: f64, sm: f64) -> bool {
    sm < SM_LOW_SHARE * utilization
}

/// Fewer samples than this on either side of the GPU's state (while it idled, while it was
/// busy) say nothing about what sets the two apart: the roles' contrast and the verdict's
/// idle path both need this many on each side.
pub const MIN_SIDE_SAMPLES: u64 = 5;

/// The GPU's state at an instant or over a stretch: what a kept sample was tagged with, and
/// what the GPU did over a hang (`"gpu": {"state": ...}` of a hang report, where the names are
/// serde's: `idle`, `busy_low_sm`, `busy`).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, PartialOrd, Ord, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum GpuTag {
    /// Over a hang: the job waits on something on the host (a lock, a peer, I/O).
    Idle,
    /// Busy with SMs active; over a hang, a kernel still working.
    Busy,
    /// Busy by utilization, with GPM SM activity low ([`is_low`]): counted as busy too. Over a
    /// hang (or, without GPM, frozen in a CUDA wait): stuck in a kernel or a collective, the
    /// NCCL signature.
    BusyLowSm,
    /// No GPU data covered the sample (no GPU, or none polled then).
    Unknown,
}

impl GpuTag {
    /// The state for utilization `utilization` (percent) against `idle_below`, with SM activity
    /// (percent) where GPM reads it: asked only when the GPU is not idle.
    pub fn of(
        utilization: f64,
        idle_below: f64,
        sm_active: impl FnOnce() -> Option<f64>,
    ) -> GpuTag {
        if is_idle(utilization, idle_below) {
            return GpuTag::Idle;
        }
        match sm_active() {
            Some(sm) if is_low(utilization, sm) => GpuTag::BusyLowSm,
            _ => GpuTag::Busy,
        }
    }

    /// The name the hang report writes: `idle`, `busy_low_sm`, `busy`, `unknown` (serde's).
    pub fn name(self) -> &'static str {
        match self {
            GpuTag::Idle => "idle",
            GpuTag::Busy => "busy",
            GpuTag::BusyLowSm => "busy_low_sm",
            GpuTag::Unknown => "unknown",
        }
    }

    /// Whether the GPU idled: `None` without GPU data (neither idle nor busy).
    pub fn idle(self) -> Option<bool> {
        match self {
            GpuTag::Idle => Some(true),
            GpuTag::Busy | GpuTag::BusyLowSm => Some(false),
            GpuTag::Unknown => None,
        }
    }

    /// The tag as utilization alone reads it: low SM activity is busy. What the exports (and
    /// the runs of a [`crate::SampleTrace`]) carry.
    pub fn by_utilization(self) -> GpuTag {
        match self {
            GpuTag::BusyLowSm => GpuTag::Busy,
            tag => tag,
        }
    }

    /// The label value the exports write: `idle`, `busy`, `unknown`. Low SM activity is still
    /// "busy" by utilization, as the GPU-busy flamegraph counts it.
    pub fn as_str(self) -> &'static str {
        match self {
            GpuTag::Idle => "idle",
            GpuTag::Busy | GpuTag::BusyLowSm => "busy",
            GpuTag::Unknown => "unknown",
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn idle_below_the_threshold_and_low_sm_under_half_of_utilization() {
        assert!(is_idle(29.9, f64::from(DEFAULT_IDLE_BELOW)));
        assert!(!is_idle(30.0, f64::from(DEFAULT_IDLE_BELOW)));
        assert!(is_low(60.0, 29.9) && !is_low(60.0, 30.0));
    }

    #[test]
    fn export_labels_count_low_sm_as_busy() {
        let labels = [
            GpuTag::Idle,
            GpuTag::Busy,
            GpuTag::BusyLowSm,
            GpuTag::Unknown,
        ]
        .map(GpuTag::as_str);
        assert_eq!(labels, ["idle", "busy", "busy", "unknown"]);
        assert_eq!(GpuTag::BusyLowSm.by_utilization(), GpuTag::Busy);
        assert_eq!(GpuTag::Idle.by_utilization(), GpuTag::Idle);
        for tag in [
            GpuTag::Idle,
            GpuTag::Busy,
            GpuTag::BusyLowSm,
            GpuTag::Unknown,
        ] {
            let json = serde_json::to_string(&tag).expect("serialize");
            assert_eq!(json, format!("\"{}\"", tag.name()));
        }
    }
}
