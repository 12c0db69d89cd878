//! The loop's verdict where there is no GPU data (no NVML, `--gpu off`, a machine without a
//! GPU): the loop was found by its hand-offs (`roles/handoff.rs`) and its own time decides.
//! The classes are the step's (`by_step.rs`): the largest host bottleneck at [`HIGHLY_BOUND`]
//! of the loop's time or more; else `compute_bound` when the loop runs its own code most of
//! its time; else that bottleneck at [`MODERATELY_BOUND`] or more. What fixing it buys is the
//! same bound, in the same words, as with a GPU.

use super::by_roles::{feeders_sentence, trainer_at};
use super::by_step::{bottleneck, if_fixed, step_verdict, IfFixed, HIGHLY_BOUND, MODERATELY_BOUND};
use super::class::{Verdict, VerdictClass};
use crate::roles::step::{GilHolder, Step, StepBreakdown};
use crate::roles::while_idle::WhileIdle;

/// The loop "mostly computes" when its own Python is at least this share of its time.
const COMPUTES_MOST: f64 = 0.5;
/// What the verdict says of the missing GPU.
const NO_GPU_WORDS: &str = "There was no GPU data: this is read from the loop's own time.";

/// The class the loop's own time decides, with the share behind it.
pub fn loop_class(step: &StepBreakdown) -> (VerdictClass, f64) {
    let (class, share) = bottleneck(step);
    if share >= HIGHLY_BOUND {
        (class, share)
    } else if step.python >= COMPUTES_MOST {
        (VerdictClass::ComputeBound, step.python)
    } else if share >= MODERATELY_BOUND {
        (class, share)
    } else {
        (VerdictClass::Unknown, 0.0)
    }
}

/// The loop's verdict and what fixing its bottleneck buys, without GPU data. `while_idle` is
/// the loop and its feeders over the whole recording.
pub fn loop_verdict_and_fix(
    step: &Step,
    gil_holder: Option<&GilHolder>,
    while_idle: &WhileIdle,
    cpus_usable: Option<f64>,
) -> (Verdict, Option<IfFixed>) {
    let (class, share) = loop_class(&step.breakdown);
    let mut verdict = loop_verdict(class, share, step, gil_holder, while_idle);
    let fixed = if_fixed(class, &step.breakdown, while_idle, cpus_usable, None);
    if let Some(fixed) = &fixed {
        fixed.say_in(&mut verdict, while_idle);
    }
    (verdict, fixed)
}

fn loop_verdict(
    class: VerdictClass,
    share: f64,
    step: &Step,
    gil_holder: Option<&GilHolder>,
    while_idle: &WhileIdle,
) -> Verdict {
    let at = while_idle.trainer.as_ref().map(trainer_at);
    let feeders: Vec<String> = while_idle.feeders.iter().map(feeders_sentence).collect();
    let feeders = (!feeders.is_empty()).then(|| feeders.join("; "));
    let place = |p: Option<&crate::roles::step::StepPlace>| match p {
        Some(p) => match &p.calls {
            Some(call) => format!("at {} in {call}", p.frame),
            None => format!("at {}", p.frame),
        },
        None => at.clone().unwrap_or_default(),
    };
    match class {
        VerdictClass::InputPipeline | VerdictClass::InlineLoading | VerdictClass::GilContention => {
            let words = match class {
                VerdictClass::InputPipeline => place(step.input_at.as_ref()),
                VerdictClass::InlineLoading => format!("loads {}", place(step.inline_at.as_ref())),
                _ => at.unwrap_or_else(|| "runs".to_owned()),
            };
            step_verdict(
                "The loop",
                class,
                share,
                &step.breakdown,
                gil_holder,
                &words,
                feeders.as_deref(),
                NO_GPU_WORDS,
            )
        }
        VerdictClass::ComputeBound => Verdict {
            class,
            text: format!(
                "The loop mostly computes ({:.0}% of its time in its own code{}): its input \
                 keeps up{}. {NO_GPU_WORDS} The loop's time: {}.",
                share * 100.0,
                at.map_or(String::new(), |a| format!(", {a}")),
                feeders.map_or(String::new(), |f| format!("; {f}")),
                step.breakdown.describe()
            ),
        },
        _ => Verdict {
            class: VerdictClass::Unknown,
            text: format!(
                "The loop neither waits for its input nor computes most of its time. \
                 {NO_GPU_WORDS} The loop's time: {}.",
                step.breakdown.describe()
            ),
        },
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn breakdown(input_wait: f64, python: f64, gil_wait: f64) -> StepBreakdown {
        StepBreakdown {
            input_wait,
            python,
            gil_wait,
            other_wait: 1.0 - input_wait - python - gil_wait,
            ..StepBreakdown::default()
        }
    }

    #[test]
    fn the_loops_own_time_decides_the_class() {
        assert_eq!(
            loop_class(&breakdown(0.7, 0.3, 0.0)).0,
            VerdictClass::InputPipeline
        );
        assert_eq!(
            loop_class(&breakdown(0.1, 0.6, 0.25)).0,
            VerdictClass::GilContention
        );
        // A loop that mostly computes, waiting a little for its input.
        assert_eq!(
            loop_class(&breakdown(0.08, 0.9, 0.0)).0,
            VerdictClass::ComputeBound
        );
        assert_eq!(
            loop_class(&breakdown(0.08, 0.3, 0.0)).0,
            VerdictClass::InputPipeline
        );
        assert_eq!(
            loop_class(&breakdown(0.01, 0.3, 0.0)).0,
            VerdictClass::Unknown
        );
    }

    #[test]
    fn the_verdict_says_there_was_no_gpu_data_and_what_fixing_buys() {
        let step = Step {
            breakdown: breakdown(0.75, 0.25, 0.0),
            samples: 1000,
            input_at: None,
            inline_at: None,
        };
        let (verdict, fixed) = loop_verdict_and_fix(&step, None, &WhileIdle::default(), Some(4.0));
        assert_eq!(verdict.class, VerdictClass::InputPipeline);
        assert!(
            verdict.text.starts_with("The loop is highly input-bound"),
            "{}",
            verdict.text
        );
        assert!(verdict.text.contains("no GPU data"), "{}", verdict.text);
        let fixed = fixed.expect("if fixed");
        assert!((fixed.speedup_up_to - 4.0).abs() < 1e-9);
        let compute = Step {
            breakdown: breakdown(0.05, 0.95, 0.0),
            ..step
        };
        let (verdict, fixed) =
            loop_verdict_and_fix(&compute, None, &WhileIdle::default(), Some(4.0));
        assert_eq!(verdict.class, VerdictClass::ComputeBound);
        assert!(
            verdict.text.contains("Faster input buys nothing"),
            "{}",
            verdict.text
        );
        assert_eq!(fixed.map(|f| f.bottleneck), Some("compute".to_owned()));
    }
}
