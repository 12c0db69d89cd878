//! Two recordings (or two windows of one) side by side: did the change help?
//!
//! Everything compared is a share of each recording's own samples or of its own wall time, so a
//! 1000 Hz recording compares with a 100 Hz one and 20 s with 10 minutes; every change carries
//! its noise ([`noise`]), and a change within it is not called one. What is compared, in the
//! order a job's owner asks:
//!
//! 1. the run: duration, samples, rate, processes and workers (as they are, not compared);
//! 2. the GPU: mean utilization and its busy seconds per wall second (`gpu`), the work the
//!    change was for;
//! 3. the loop's step, part by part (`step`), and the part BEFORE's verdict named its
//!    bottleneck (`bottleneck`);
//! 4. functions, by their inclusive share of the samples, stacks matched across the recordings
//!    by [`crate::JobProcesses`] (process by role, thread by name, frame by function);
//! 5. a verdict on the change ([`change`]): helped, no change, worse or mixed.
//!
//! Mismatched recordings (idle threads kept in one only, other Python versions, other GPU
//! models) are compared all the same and said (`mismatches`).

mod change;
mod functions;
mod noise;
mod side;

use serde::{Deserialize, Serialize};

use crate::jobs::FrameMatch;
use crate::roles::step::StepBreakdown;
use crate::summary::Summary;
use crate::verdict::Verdict;

pub use change::{ChangeClass, ChangeVerdict};
pub use functions::{FunctionChange, MatchedStack, COMPARED_FUNCTIONS};
pub use noise::{Change, INDEPENDENT_PER_SEC, NOISE_Z};
pub use side::Side;

/// One side of the comparison as the binary read it: a recording's summary for a window, and
/// its folded stacks.
#[derive(Debug, Clone)]
pub struct CompareInput {
    /// How the user named it: `run1`, `run1@0-30`.
    pub label: String,
    pub dir: String,
    /// The window, seconds since the recording's start.
    pub from_secs: f64,
    pub to_secs: f64,
    /// The summary of that window, as `stackscope report` would write it.
    pub summary: Summary,
    /// Whether samples of idle threads were kept (`--idle`).
    pub include_idle: bool,
    /// Whether it holds native frames (`--native`).
    pub native: bool,
    /// Every folded line of the window (`root;thread;frames COUNT`).
    pub folded: Vec<(String, u64)>,
    /// GPU readings in the window (all devices).
    pub gpu_readings: u64,
}

/// How to compare.
#[derive(Debug, Clone, Copy, Default)]
pub struct CompareOptions {
    pub frames: FrameMatch,
}

/// `compare.json`.
#[derive(Debug, Clone, Serialize, Deserialize)]
pub struct Comparison {
    pub before: Side,
    pub after: Side,
    /// What differs between the recordings besides the change: said, not silently compared.
    pub mismatches: Vec<String>,
    /// `None` unless both recordings have GPU data.
    pub gpu: Option<GpuChange>,
    /// The loop's step, part by part; `None` unless both recordings found the loop.
    pub step: Option<StepChange>,
    /// BEFORE's bottleneck part of the step, when its verdict named one on the host.
    pub bottleneck: Option<BottleneckChange>,
    /// Functions by inclusive share of each recording's samples, those that moved most first.
    pub functions: Vec<FunctionChange>,
    pub change: ChangeOutcome,
}

#[derive(Debug, Clone, Serialize, Deserialize)]
pub struct GpuChange {
    /// Mean utilization, percent.
    pub mean_utilization: Change,
    /// The GPU's busy seconds per wall second: the share of time at or above `idle_below`.
    pub busy_share: Change,
    /// AFTER's busy share over BEFORE's: how much more work the GPU did per second.
    pub busy_ratio: Option<f64>,
}

/// `gpu.step`'s parts, each compared.
#[derive(Debug, Clone, Serialize, Deserialize)]
pub struct StepChange {
    pub input_wait: Change,
    pub inline_load: Change,
    pub gpu_wait: Change,
    pub python: Change,
    pub gil_wait: Change,
    pub other_wait: Change,
}

impl StepChange {
    /// The parts with their names, in `gpu.step`'s order.
    pub fn parts(&self) -> [(&'static str, &Change); 6] {
        [
            ("input_wait", &self.input_wait),
            ("inline_load", &self.inline_load),
            ("gpu_wait", &self.gpu_wait),
            ("python", &self.python),
            ("gil_wait", &self.gil_wait),
            ("other_wait", &self.other_wait),
        ]
    }

    /// The part named `name`.
    pub fn part(&self, name: &str) -> Option<&Change> {
        self.parts()
            .into_iter()
            .find(|(n, _)| *n == name)
            .map(|(_, c)| c)
    }
}

#[derive(Debug, Clone, Serialize, Deserialize)]
pub struct BottleneckChange {
    /// The step's part: `input_wait`, `inline_load`, `gil_wait`.
    pub part: String,
    pub share: Change,
}

#[derive(Debug, Clone, Serialize, Deserialize)]
pub struct ChangeOutcome {
    pub verdict: ChangeVerdict,
    /// Whether the change made things worse beyond noise: the GPU's busy share fell, or
    /// BEFORE's bottleneck grew (what `--fail-if-worse` acts on).
    pub worse: bool,
}

/// Compares two recordings.
pub fn compare(before: &CompareInput, after: &CompareInput, options: CompareOptions) -> Comparison {
    let sides = [Side::of(before), Side::of(after)];
    let gpu = gpu_change(before, after);
    let step = step_change(before, after);
    let bottleneck = bottleneck_change(&sides[0], step.as_ref());
    let functions = functions::changes(before, after, options.frames);
    let mismatches = side::mismatches(before, after);
    let [before_side, after_side] = sides;
    let verdict = change::verdict(&change::Moves {
        before: &before_side,
        after: &after_side,
        gpu: gpu.as_ref(),
        step: step.as_ref(),
        bottleneck: bottleneck.as_ref(),
        functions: &functions,
    });
    let worse = change::is_worse(gpu.as_ref(), bottleneck.as_ref());
    Comparison {
        before: before_side,
        after: after_side,
        mismatches,
        gpu,
        step,
        bottleneck,
        functions,
        change: ChangeOutcome { verdict, worse },
    }
}

/// The matched stacks of both recordings, as shares of each one's samples, for the
/// differential flamegraph and the page.
pub fn diff_stacks(
    before: &CompareInput,
    after: &CompareInput,
    options: CompareOptions,
) -> Vec<MatchedStack> {
    functions::diff_stacks(before, after, options.frames)
}

fn gpu_change(before: &CompareInput, after: &CompareInput) -> Option<GpuChange> {
    let (b, a) = (before.summary.gpu.as_ref()?, after.summary.gpu.as_ref()?);
    let (bm, am) = (b.mean_utilization?, a.mean_utilization?);
    // A share of the GPU's time, with the noise of its readings and of its bursts.
    let measured = |input: &CompareInput, share: f64| {
        let cycle_busy = input
            .summary
            .gpu
            .as_ref()
            .and_then(|g| g.cycle.as_ref())
            .map(|c| c.busy_secs);
        noise::Measured::gpu_share(share, input, cycle_busy)
    };
    let busy = |input: &CompareInput, idle: Option<f64>| measured(input, 1.0 - idle.unwrap_or(0.0));
    let busy_share = Change::of(&busy(before, b.idle_share), &busy(after, a.idle_share));
    // The mean utilization is read as the share of the GPU's time it is (a share of 100).
    let util = |input: &CompareInput, mean: f64| {
        noise::Measured::percent(mean, &measured(input, mean / 100.0))
    };
    let mean_utilization = Change::of(&util(before, bm), &util(after, am));
    let busy_ratio =
        (busy_share.before > noise::MIN_RATIO_BASE).then(|| busy_share.after / busy_share.before);
    Some(GpuChange {
        mean_utilization,
        busy_share,
        busy_ratio,
    })
}

fn step_of(input: &CompareInput) -> Option<StepBreakdown> {
    input.summary.gpu.as_ref().and_then(|g| g.step)
}

fn step_change(before: &CompareInput, after: &CompareInput) -> Option<StepChange> {
    let (b, a) = (step_of(before)?, step_of(after)?);
    let part = |pick: fn(&StepBreakdown) -> f64| {
        Change::of(
            &noise::Measured::wall_share(pick(&b), before),
            &noise::Measured::wall_share(pick(&a), after),
        )
    };
    Some(StepChange {
        input_wait: part(|s| s.input_wait),
        inline_load: part(|s| s.inline_load),
        gpu_wait: part(|s| s.gpu_wait),
        python: part(|s| s.python),
        gil_wait: part(|s| s.gil_wait),
        other_wait: part(|s| s.other_wait),
    })
}

fn bottleneck_change(before: &Side, step: Option<&StepChange>) -> Option<BottleneckChange> {
    // The step's part that BEFORE's bottleneck is: what fixing it should shrink.
    let part = before.if_fixed.as_ref()?.step_part()?;
    Some(BottleneckChange {
        part: part.to_owned(),
        share: step?.part(part)?.clone(),
    })
}

/// The verdict of a recording, as `compare.json` keeps it per side.
fn verdict_of(summary: &Summary) -> Option<Verdict> {
    summary.gpu.as_ref().map(|g| g.verdict.clone())
}

#[cfg(test)]
mod tests;
