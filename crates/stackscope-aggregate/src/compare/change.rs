//! The verdict on a change, in order:
//!
//! 1. With GPU data on both sides, the GPU's busy seconds per wall second decide: more work per
//!    second beyond noise is `helped`, less is `worse`, unless BEFORE's bottleneck moved the
//!    other way (then `mixed`).
//! 2. Where the GPU's work did not move (or there is no GPU data): BEFORE's bottleneck share of
//!    the loop's step moving is `mixed` beside an unmoved GPU, and decides alone without one.
//! 3. Otherwise `no_change`; without GPU data or a loop, functions that moved are `mixed`
//!    (the code changed; whether the job got faster is not measured).
//!
//! `worse` (what `--fail-if-worse` acts on) is the GPU's busy share falling or BEFORE's
//! bottleneck growing, each beyond noise.

use serde::{Deserialize, Serialize};

use super::{BottleneckChange, FunctionChange, GpuChange, Side, StepChange};
use crate::verdict::VerdictClass;

/// A verdict on the change.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum ChangeClass {
    Helped,
    NoChange,
    Worse,
    Mixed,
}

/// `compare.json`'s `change.verdict`.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct ChangeVerdict {
    pub class: ChangeClass,
    /// One or two sentences for a person.
    pub text: String,
}

/// What moved, for the verdict.
pub(crate) struct Moves<'a> {
    pub before: &'a Side,
    pub after: &'a Side,
    pub gpu: Option<&'a GpuChange>,
    pub step: Option<&'a StepChange>,
    pub bottleneck: Option<&'a BottleneckChange>,
    pub functions: &'a [FunctionChange],
}

/// How many moved functions a sentence names.
const NAMED_FUNCTIONS: usize = 3;
/// Below this share the loop "no longer" does what its bottleneck was.
const GONE_SHARE: f64 = 0.05;
/// A speed-up at least this part of the predicted one is "as predicted".
const AS_PREDICTED: f64 = 0.8;

pub(crate) fn is_worse(gpu: Option<&GpuChange>, bottleneck: Option<&BottleneckChange>) -> bool {
    gpu.is_some_and(|g| g.busy_share.fell()) || bottleneck.is_some_and(|b| b.share.rose())
}

pub(crate) fn verdict(m: &Moves<'_>) -> ChangeVerdict {
    if let Some(gpu) = m.gpu.filter(|g| g.busy_share.moved) {
        let up = gpu.busy_share.rose();
        // BEFORE's bottleneck moving the other way (growing while the GPU works more).
        let against = m
            .bottleneck
            .is_some_and(|b| if up { b.share.rose() } else { b.share.fell() });
        let class = match (against, up) {
            (true, _) => ChangeClass::Mixed,
            (false, true) => ChangeClass::Helped,
            (false, false) => ChangeClass::Worse,
        };
        return ChangeVerdict {
            class,
            text: gpu_text(m, gpu, class),
        };
    }
    if let Some(b) = m.bottleneck.filter(|b| b.share.moved) {
        return bottleneck_verdict(m, b);
    }
    unmoved_verdict(m)
}

/// The GPU's work moved: say how much, what became of the bottleneck, and of the prediction.
fn gpu_text(m: &Moves<'_>, gpu: &GpuChange, class: ChangeClass) -> String {
    let busy = &gpu.busy_share;
    let ratio = gpu
        .busy_ratio
        .map(|r| format!(" {}", ratio_words(r)))
        .unwrap_or_default();
    let direction = if busy.change > 0.0 { "rose" } else { "fell" };
    let mut clauses = vec![format!(
        "the GPU's work per second {direction}{ratio} (busy {} → {})",
        pct(busy.before),
        pct(busy.after)
    )];
    clauses.extend(m.bottleneck.and_then(bottleneck_clause));
    if let Some(now) = class_clause(m) {
        clauses.push(now);
    }
    let mut text = format!("{}: {}", lead(class), clauses.join("; "));
    if class == ChangeClass::Helped {
        text.push_str(&prediction(m, gpu));
    }
    text.push('.');
    text
}

fn lead(class: ChangeClass) -> &'static str {
    match class {
        ChangeClass::Helped => "The change helped",
        ChangeClass::Worse => "Worse",
        ChangeClass::Mixed => "Mixed",
        ChangeClass::NoChange => "No measurable change",
    }
}

/// `, as predicted (up to 2.3x)`, or short of it, when BEFORE's verdict said what fixing its
/// bottleneck would buy.
fn prediction(m: &Moves<'_>, gpu: &GpuChange) -> String {
    let (Some(fix), Some(ratio)) = (m.before.if_fixed.as_ref(), gpu.busy_ratio) else {
        return String::new();
    };
    if fix.speedup_up_to <= 1.0 {
        return String::new();
    }
    if ratio >= AS_PREDICTED * fix.speedup_up_to {
        format!(", as predicted (up to {:.1}x)", fix.speedup_up_to)
    } else {
        format!(
            ", short of the {:.1}x predicted for fixing it",
            fix.speedup_up_to
        )
    }
}

/// What became of BEFORE's bottleneck: "the loop no longer waits for its input (57% → 1%)".
fn bottleneck_clause(b: &BottleneckChange) -> Option<String> {
    let s = &b.share;
    if !s.moved {
        return None;
    }
    let (doing, gone) = part_words(&b.part);
    let span = format!("({} → {})", pct(s.before), pct(s.after));
    Some(if s.fell() && s.after < GONE_SHARE {
        format!("the loop {gone} {span}")
    } else if s.fell() {
        format!("the loop {doing} less {span}")
    } else {
        format!("the loop {doing} more {span}")
    })
}

/// How a part of the step reads in a sentence: what the loop does, and its absence.
fn part_words(part: &str) -> (&'static str, &'static str) {
    match part {
        "input_wait" => ("waits for its input", "no longer waits for its input"),
        "inline_load" => ("loads data itself", "no longer loads data itself"),
        "gil_wait" => ("waits for the GIL", "no longer waits for the GIL"),
        _ => ("spends time there", "no longer spends time there"),
    }
}

/// "it is now GPU-bound" when the recordings' verdicts differ.
fn class_clause(m: &Moves<'_>) -> Option<String> {
    let before = m.before.verdict.as_ref()?.class;
    let after = m.after.verdict.as_ref()?.class;
    (before != after).then(|| format!("it is now {}", class_words(after)))
}

fn class_words(class: VerdictClass) -> &'static str {
    match class {
        VerdictClass::Starved | VerdictClass::InputPipeline => "input-bound",
        VerdictClass::InlineLoading => "bound by its own data loading",
        VerdictClass::GilContention => "bound by GIL contention",
        VerdictClass::PeriodicStall => "stalled periodically",
        VerdictClass::CpuPreprocessing => "bound by CPU work between steps",
        VerdictClass::SmallKernels => "launch-bound (small kernels, Python between them)",
        VerdictClass::GpuBound => "GPU-bound",
        VerdictClass::ComputeBound => "compute-bound",
        VerdictClass::LowSmActivity => "busy on few of the GPU's SMs",
        VerdictClass::Stuck => "stuck",
        VerdictClass::Unknown => "unread (no utilization data)",
    }
}

/// The GPU's work did not move (or is not known) and BEFORE's bottleneck did.
fn bottleneck_verdict(m: &Moves<'_>, b: &BottleneckChange) -> ChangeVerdict {
    let clause = bottleneck_clause(b).unwrap_or_default();
    match m.gpu {
        Some(gpu) => ChangeVerdict {
            class: ChangeClass::Mixed,
            text: format!(
                "Mixed: {clause}, but the GPU's work per second did not move beyond its noise \
                 (busy {} → {}, ±{} points).",
                pct(gpu.busy_share.before),
                pct(gpu.busy_share.after),
                points(gpu.busy_share.noise)
            ),
        },
        None => {
            let class = if b.share.fell() {
                ChangeClass::Helped
            } else {
                ChangeClass::Worse
            };
            ChangeVerdict {
                class,
                text: format!("{}: {clause}.", lead(class)),
            }
        }
    }
}

/// Neither the GPU's work nor the bottleneck moved.
fn unmoved_verdict(m: &Moves<'_>) -> ChangeVerdict {
    let moved: Vec<String> = m
        .functions
        .iter()
        .filter(|f| f.share.moved)
        .take(NAMED_FUNCTIONS)
        .map(function_words)
        .collect();
    let step_moved = m
        .step
        .is_some_and(|s| s.parts().iter().any(|(_, c)| c.moved));
    if moved.is_empty() && !step_moved {
        return ChangeVerdict {
            class: ChangeClass::NoChange,
            text: "No measurable change: nothing moved beyond its noise at these sample counts."
                .to_owned(),
        };
    }
    let code = if moved.is_empty() {
        "the loop's step moved".to_owned()
    } else {
        format!("the code moved: {}", moved.join(", "))
    };
    match m.gpu {
        Some(gpu) => ChangeVerdict {
            class: ChangeClass::NoChange,
            text: format!(
                "No measurable change in the GPU's work per second (busy {} → {}, ±{} \
                 points); {code}.",
                pct(gpu.busy_share.before),
                pct(gpu.busy_share.after),
                points(gpu.busy_share.noise)
            ),
        },
        None => ChangeVerdict {
            class: ChangeClass::Mixed,
            text: format!(
                "Mixed: {code}; with no GPU data on both sides, whether the job got faster is \
                 not measured."
            ),
        },
    }
}

/// "costly_part (cost.py) 33% → 50%".
fn function_words(f: &FunctionChange) -> String {
    let file = if f.file.is_empty() {
        String::new()
    } else {
        format!(" ({})", f.file)
    };
    format!(
        "{}{file} {} → {}",
        f.function,
        pct(f.share.before),
        pct(f.share.after)
    )
}

/// "2.1x", or "to 0.48x" for a fall.
fn ratio_words(ratio: f64) -> String {
    if ratio >= 1.0 {
        format!("{ratio:.1}x")
    } else {
        format!("to {ratio:.2}x")
    }
}

/// A share as a whole percentage: "43%".
pub(crate) fn pct(share: f64) -> String {
    format!("{:.0}%", share * 100.0)
}

/// A share's change as percentage points: "6".
pub(crate) fn points(share: f64) -> String {
    format!("{:.0}", share * 100.0)
}
