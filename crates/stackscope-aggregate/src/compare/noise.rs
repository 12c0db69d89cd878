//! The noise of a share, and when a change between two shares is a change: the one rule every
//! figure of `compare` is judged by.
//!
//! A share `p` read from `n` samples has the binomial standard error `sqrt(p(1-p)/n)`, were the
//! samples independent. They are not: a thread stays in a phase for many samples at 100 Hz,
//! more at 1000 Hz, so a faster rate adds samples, not information. The samples count as
//! independent at most [`INDEPENDENT_PER_SEC`] a second (a Python loop's phases and NVML's
//! readings last about a tenth of a second); a 1000 Hz and a 100 Hz recording of the same
//! length then weigh the same. The share is smoothed (`(k+1)/(n+2)`) so that a function absent
//! from one side still has noise. A GPU that runs in bursts adds the uncertainty of one burst
//! more or less in the window.
//!
//! A change is `moved` when it is beyond [`NOISE_Z`] standard errors of the difference and at
//! least one point.

use serde::{Deserialize, Serialize};

use super::CompareInput;

/// Samples taken closer together than a tenth of a second count as one.
pub const INDEPENDENT_PER_SEC: f64 = 10.0;
/// How many standard errors of the difference a change must exceed: about 95%.
pub const NOISE_Z: f64 = 2.0;
/// A share must move at least one point to be called moved, however many samples.
const MIN_SHARE_MOVE: f64 = 0.01;
/// Utilization must move at least one percentage point.
const MIN_PERCENT_MOVE: f64 = 1.0;
/// Below this busy share a ratio of busy shares says nothing (a GPU that never worked).
pub(crate) const MIN_RATIO_BASE: f64 = 0.02;

/// One figure of one recording with its standard error, in the figure's own unit.
#[derive(Debug, Clone, Copy, PartialEq)]
pub(crate) struct Measured {
    pub value: f64,
    pub se: f64,
    pub min_move: f64,
}

impl Measured {
    /// A share `p` of `n` samples taken over `secs` seconds.
    pub fn share(p: f64, n: f64, secs: f64) -> Measured {
        let n_eff = n.min(secs * INDEPENDENT_PER_SEC).max(1.0);
        let smoothed = (p.clamp(0.0, 1.0) * n_eff + 1.0) / (n_eff + 2.0);
        Measured {
            value: p,
            se: (smoothed * (1.0 - smoothed) / n_eff).sqrt(),
            min_move: MIN_SHARE_MOVE,
        }
    }

    /// A share of a recording's wall time (the loop's step: every tick is a sample of it).
    pub fn wall_share(p: f64, input: &CompareInput) -> Measured {
        let secs = input.summary.duration_secs.max(0.0);
        Measured::share(p, secs * input.summary.rate_hz, secs)
    }

    /// A share of a recording's kept samples.
    pub fn sample_share(p: f64, input: &CompareInput) -> Measured {
        Measured::share(p, input.summary.samples as f64, input.summary.duration_secs)
    }

    /// A share of the GPU's time, read from its readings; `burst_secs`, when the GPU runs in
    /// bursts, adds one burst more or less in the window.
    pub fn gpu_share(p: f64, input: &CompareInput, burst_secs: Option<f64>) -> Measured {
        let secs = input.summary.duration_secs.max(1e-9);
        let mut m = Measured::share(p, input.gpu_readings as f64, secs);
        if let Some(burst) = burst_secs {
            m.se = m.se.hypot(burst / (2.0 * secs));
        }
        m
    }

    /// A percentage read with the noise of `share` (utilization is a share of 100).
    pub fn percent(value: f64, share: &Measured) -> Measured {
        Measured {
            value,
            se: share.se * 100.0,
            min_move: MIN_PERCENT_MOVE,
        }
    }
}

/// One figure before and after, its change and the change's noise.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct Change {
    pub before: f64,
    pub after: f64,
    /// `after - before`.
    pub change: f64,
    /// How far the change could go by chance at these sample counts ([`NOISE_Z`] standard
    /// errors).
    pub noise: f64,
    /// Whether the change is beyond its noise.
    pub moved: bool,
}

impl Change {
    pub(crate) fn of(before: &Measured, after: &Measured) -> Change {
        let change = after.value - before.value;
        let noise = NOISE_Z * before.se.hypot(after.se);
        let min_move = before.min_move.max(after.min_move);
        Change {
            before: before.value,
            after: after.value,
            change,
            noise,
            moved: change.abs() > noise && change.abs() >= min_move,
        }
    }

    /// Moved up beyond noise.
    pub fn rose(&self) -> bool {
        self.moved && self.change > 0.0
    }

    /// Moved down beyond noise.
    pub fn fell(&self) -> bool {
        self.moved && self.change < 0.0
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_faster_rate_adds_samples_not_information() {
        let slow = Measured::share(0.3, 2_000.0, 20.0);
        let fast = Measured::share(0.3, 20_000.0, 20.0);
        assert_eq!(slow.se, fast.se);
        // A few samples are noisier than their seconds allow.
        assert!(Measured::share(0.3, 50.0, 20.0).se > slow.se);
    }

    #[test]
    fn a_change_within_noise_is_not_a_change() {
        let a = Measured::share(0.30, 2_000.0, 20.0);
        let b = Measured::share(0.33, 2_000.0, 20.0);
        assert!(!Change::of(&a, &b).moved);
        let c = Measured::share(0.60, 2_000.0, 20.0);
        let moved = Change::of(&a, &c);
        assert!(moved.rose() && !moved.fell(), "{moved:?}");
        assert!((moved.change - 0.30).abs() < 1e-12);
    }

    #[test]
    fn an_absent_function_still_has_noise() {
        let none = Measured::share(0.0, 2_000.0, 20.0);
        assert!(none.se > 0.0);
        let tiny = Measured::share(0.004, 2_000.0, 20.0);
        assert!(!Change::of(&none, &tiny).moved);
    }
}
