//! The verdict of one recording: which class of bottleneck the GPU points at, and the code
//! behind it. In order: no data; stuck; SM activity low against utilization (`low_sm.rs`); the
//! trainer's step, where its bottleneck is a share of it (`by_step.rs`); the roles' reading,
//! where it explains the idle time (`by_roles.rs`); else the utilization classes here, with
//! the code that sets GPU-idle time apart (many small kernels only where the loop mostly
//! launches work). Then what fixing it buys (`gpu.if_fixed`), and that a `record`'s start-up is
//! left out.

use super::by_roles::{by_roles, feeders_sentence, place, trainer_at, while_idle_sentence};
use super::by_step::{if_fixed, step_class, step_verdict, IfFixed};
use super::class::{
    code_sentence, Verdict, VerdictClass, GPU_BOUND_ABOVE, PREPROCESSING_BELOW, STARVED_BELOW,
};
use super::idle_path::IdlePath;
use super::low_sm::low_sm_verdict;
use crate::fold::FunctionStat;
use crate::gpu::Cycle;
use crate::jobs::{HangGpu, Stuck};
use crate::roles::step::{GilHolder, Step, StepBreakdown, StepPlace};
use crate::roles::while_idle::WhileIdle;

/// The loop "mostly launches work" (the many-small-kernels reading) when at least this share
/// of its step runs its own Python.
const LAUNCHING_SHARE: f64 = 0.5;

/// What the verdict is drawn from.
#[derive(Debug, Clone, Copy)]
pub struct VerdictInput<'a> {
    /// The target did not move, and what its GPU did meanwhile: "stuck" instead of a
    /// performance verdict.
    pub stuck: Option<(&'a Stuck, HangGpu)>,
    pub mean_utilization: Option<f64>,
    /// The GPU's rhythm, when it has one.
    pub cycle: Option<&'a Cycle>,
    /// What the trainer and its feeders did while the GPU idled.
    pub while_idle: &'a WhileIdle,
    /// The start-up left out of the figures, 0 for none.
    pub startup_secs: f64,
    /// Functions of the GPU-idle samples, by self share of those samples.
    pub idle_functions: &'a [FunctionStat],
    /// The call path that sets GPU-idle time apart; named instead of the functions when found.
    pub idle_path: Option<&'a IdlePath>,
    /// The call path that sets the low-SM samples apart from the other GPU-busy ones.
    pub low_sm_path: Option<&'a IdlePath>,
    /// Mean GPM SM activity (percent) where the GPU has GPM; `None` elsewhere.
    pub mean_sm_active: Option<f64>,
    /// Functions of the samples taken while the GPU was busy with low SM activity.
    pub low_sm_functions: &'a [FunctionStat],
    /// The trainer's step broken down, when there is a trainer.
    pub step: Option<&'a Step>,
    /// Who held the GIL while the trainer waited for it.
    pub gil_holder: Option<&'a GilHolder>,
    /// CPUs the job's process may use.
    pub cpus_usable: Option<f64>,
}

#[cfg(test)]
fn verdict(input: VerdictInput<'_>) -> Verdict {
    verdict_and_fix(input).0
}

/// The verdict, and what fixing its bottleneck buys (`gpu.if_fixed`), said in its last
/// sentence too.
pub fn verdict_and_fix(input: VerdictInput<'_>) -> (Verdict, Option<IfFixed>) {
    let mut verdict = class_verdict(&input);
    let fixed = input.step.and_then(|step| {
        if_fixed(
            verdict.class,
            &step.breakdown,
            input.while_idle,
            input.cpus_usable,
            input.cycle,
        )
    });
    if let Some(fixed) = &fixed {
        fixed.say_in(&mut verdict, input.while_idle);
    }
    (with_startup(verdict, input.startup_secs), fixed)
}

fn class_verdict(input: &VerdictInput<'_>) -> Verdict {
    let Some(mean) = input.mean_utilization else {
        return Verdict {
            class: VerdictClass::Unknown,
            text: "No GPU utilization was recorded, so there is no verdict.".to_owned(),
        };
    };
    if let Some((stuck, gpu)) = input.stuck {
        return Verdict {
            class: VerdictClass::Stuck,
            text: format!(
                "The job is stuck, not slow: {}. Meanwhile {}.",
                stuck.sentence(),
                gpu.sentence()
            ),
        };
    }
    // Utilization high but SM activity low is its own class, and keeps a GPU whose SMs idle
    // from reading GPU-bound.
    if let Some(low_sm) = low_sm_verdict(
        mean,
        input.mean_sm_active,
        input.low_sm_functions,
        input.low_sm_path,
    ) {
        return low_sm;
    }
    if let Some(by_step) = by_step(mean, input) {
        return by_step;
    }
    if let Some(by_roles) = by_roles(mean, input.cycle, input.while_idle, input.idle_path) {
        return by_roles;
    }
    let verdict = by_utilization(mean, input);
    match input.step {
        Some(step) if verdict.class == VerdictClass::SmallKernels => {
            not_launching(verdict, &step.breakdown, mean)
        }
        _ => verdict,
    }
}

/// The verdict the trainer's step decides, when its bottleneck is a share of it.
fn by_step(mean: f64, input: &VerdictInput<'_>) -> Option<Verdict> {
    let step = input.step?;
    let (class, share) = step_class(mean, &step.breakdown)?;
    let rhythm = input
        .cycle
        .map_or(String::new(), |c| format!(": {}", c.describe()));
    let gpu_words = if mean < STARVED_BELOW {
        format!("The GPU is starved (mean utilization {mean:.0}%){rhythm}.")
    } else {
        format!("The GPU is partly busy (mean utilization {mean:.0}%){rhythm}.")
    };
    let feeders: Vec<String> = input
        .while_idle
        .feeders
        .iter()
        .map(feeders_sentence)
        .collect();
    let feeders = (!feeders.is_empty()).then(|| feeders.join("; "));
    // Where the step says the loop spends that part; else where it was while the GPU idled.
    let trainer_words = match (class, &step.input_at, &step.inline_at) {
        (VerdictClass::InputPipeline, Some(at), _) => place_words(at),
        (VerdictClass::InlineLoading, _, Some(at)) => loading_words(at, input.idle_path),
        _ => {
            let trainer = input.while_idle.trainer.as_ref()?;
            match class {
                VerdictClass::InputPipeline => place(trainer),
                _ => trainer_at(trainer),
            }
        }
    };
    Some(step_verdict(
        "The training loop",
        class,
        share,
        &step.breakdown,
        input.gil_holder,
        &trainer_words,
        feeders.as_deref(),
        &gpu_words,
    ))
}

/// "at WorkerLoader.__next__ (job.py:90) in Queue.get (multiprocessing/queues.py:103)".
fn place_words(at: &StepPlace) -> String {
    match &at.calls {
        Some(call) => format!("at {} in {call}", at.frame),
        None => format!("at {}", at.frame),
    }
}

/// "loads at read_record (job.py:72), waiting on reads (80% of that time waiting)"; with the
/// call path that sets the GPU's idle time apart where the place is not on it (a function both
/// phases call, such as a shared copy or tensor op): "loads in load_batch → decode_images at
/// busy (job.py:48), computing (...)".
fn loading_words(at: &StepPlace, idle_path: Option<&IdlePath>) -> String {
    let how = if at.waiting_share >= 0.5 {
        "waiting on reads"
    } else {
        "computing"
    };
    let function = at.frame.split(" (").next().unwrap_or(&at.frame);
    let path = idle_path
        .filter(|p| !p.functions.is_empty() && p.functions.iter().all(|f| f.function != function))
        .map_or(String::new(), |p| format!("in {} ", p.label()));
    format!(
        "loads {path}at {}, {how} ({:.0}% of that time waiting)",
        at.frame,
        at.waiting_share * 100.0
    )
}

/// A "many small kernels" reading stands only where the loop mostly launches work; a loop that
/// mostly waits on the GPU keeps it as busy as it can be.
fn not_launching(verdict: Verdict, step: &StepBreakdown, mean: f64) -> Verdict {
    // The GPU is the bottleneck only when it is busy most of the time.
    if step.python >= LAUNCHING_SHARE || step.gpu_wait < step.python || mean < PREPROCESSING_BELOW {
        return verdict;
    }
    Verdict {
        class: VerdictClass::GpuBound,
        text: format!(
            "The training loop waits on the GPU most of its step: the GPU is the bottleneck, \
             between its waits the loop does little. The loop's time: {}.",
            step.describe()
        ),
    }
}

/// The utilization classes, with the code that sets GPU-idle time apart.
fn by_utilization(mean: f64, input: &VerdictInput<'_>) -> Verdict {
    // The trainer's line where there is one; else the call path that sets GPU-idle time
    // apart; else the functions of the GPU-idle samples.
    let idle_code = match (while_idle_sentence(input.while_idle), input.idle_path) {
        (Some(sentence), _) => sentence,
        (None, Some(path)) => path.sentence(),
        (None, None) => idle_code_sentence(input.idle_functions),
    };
    let (class, first) = if mean < STARVED_BELOW {
        (
            VerdictClass::Starved,
            format!(
                "The GPU is starved (mean utilization {mean:.0}%): it waits on data loading or \
                 the input pipeline."
            ),
        )
    } else if mean < PREPROCESSING_BELOW {
        match input.cycle {
            Some(cycle) => (
                VerdictClass::CpuPreprocessing,
                format!(
                    "GPU utilization swings between idle and busy, {} (mean {mean:.0}%): \
                     CPU-side preprocessing or Python between steps holds it back.",
                    cycle.describe()
                ),
            ),
            None => (
                VerdictClass::SmallKernels,
                format!(
                    "The GPU is partly busy (mean utilization {mean:.0}%) without a regular \
                     cycle: likely many small kernels or Python control flow between them."
                ),
            ),
        }
    } else if mean <= GPU_BOUND_ABOVE {
        (
            VerdictClass::SmallKernels,
            format!(
                "The GPU is mostly busy (mean utilization {mean:.0}%): the gaps point at many \
                 small kernels or Python control flow between them."
            ),
        )
    } else {
        (
            VerdictClass::GpuBound,
            format!(
                "The GPU is the bottleneck (mean utilization {mean:.0}%): faster kernels or a \
                 bigger GPU help, the Python side does not."
            ),
        )
    };
    Verdict {
        class,
        text: format!("{first} {idle_code}"),
    }
}

/// The verdict, saying what start-up it leaves out.
fn with_startup(mut verdict: Verdict, startup_secs: f64) -> Verdict {
    if startup_secs > 0.0 {
        verdict.text.push_str(&format!(
            " The first {startup_secs:.1} s (start-up, before the GPU first kept busy) are left \
             out."
        ));
    }
    verdict
}

fn idle_code_sentence(functions: &[FunctionStat]) -> String {
    code_sentence(functions, "while the GPU idled", "While the GPU idled")
}

#[cfg(test)]
mod tests {
    use super::*;

    fn stat(function: &str, file: &str, share: f64) -> FunctionStat {
        FunctionStat {
            function: function.to_owned(),
            file: file.to_owned(),
            self_samples: (share * 100.0) as u64,
            self_share: share,
            total_samples: (share * 100.0) as u64,
            total_share: share,
        }
    }

    fn judge(mean: Option<f64>, period: Option<f64>) -> Verdict {
        let idle = [
            stat("load_batch", "train.py", 0.7),
            stat("decode", "io.py", 0.2),
            stat("collate", "train.py", 0.06),
            stat("log", "train.py", 0.04),
        ];
        let cycle = period.map(|p| Cycle {
            period_secs: p,
            busy_secs: p / 2.0,
            idle_secs: p / 2.0,
            cycles: 3,
        });
        verdict(VerdictInput {
            stuck: None,
            mean_utilization: mean,
            cycle: cycle.as_ref(),
            while_idle: &WhileIdle::default(),
            startup_secs: 0.0,
            idle_functions: &idle,
            idle_path: None,
            low_sm_path: None,
            mean_sm_active: None,
            low_sm_functions: &[],
            step: None,
            gil_holder: None,
            cpus_usable: None,
        })
    }

    #[test]
    fn classes_by_mean_and_oscillation() {
        assert_eq!(judge(Some(12.0), None).class, VerdictClass::Starved);
        assert_eq!(judge(Some(29.9), Some(4.0)).class, VerdictClass::Starved);
        assert_eq!(
            judge(Some(45.0), Some(4.0)).class,
            VerdictClass::CpuPreprocessing
        );
        assert_eq!(judge(Some(45.0), None).class, VerdictClass::SmallKernels);
        assert_eq!(
            judge(Some(70.0), Some(4.0)).class,
            VerdictClass::SmallKernels
        );
        assert_eq!(judge(Some(85.0), None).class, VerdictClass::SmallKernels);
        assert_eq!(judge(Some(93.0), None).class, VerdictClass::GpuBound);
        assert_eq!(judge(None, None).class, VerdictClass::Unknown);
    }

    #[test]
    fn text_names_the_top_three_idle_functions() {
        let v = judge(Some(12.0), None);
        assert!(v.text.contains("starved"), "{}", v.text);
        assert!(v.text.contains("load_batch (train.py) 70%"), "{}", v.text);
        assert!(v.text.contains("decode (io.py) 20%"), "{}", v.text);
        assert!(v.text.contains("collate (train.py)"), "{}", v.text);
        assert!(!v.text.contains("log (train.py)"), "{}", v.text);
    }

    #[test]
    fn small_shares_are_not_named_but_the_first_always_is() {
        let idle = [stat("tiny", "a.py", 0.02), stat("tinier", "a.py", 0.01)];
        let v = verdict(VerdictInput {
            stuck: None,
            mean_utilization: Some(10.0),
            cycle: None,
            while_idle: &WhileIdle::default(),
            startup_secs: 0.0,
            idle_functions: &idle,
            idle_path: None,
            low_sm_path: None,
            mean_sm_active: None,
            low_sm_functions: &[],
            step: None,
            gil_holder: None,
            cpus_usable: None,
        });
        assert!(v.text.contains("tiny (a.py) 2%"), "{}", v.text);
        assert!(!v.text.contains("tinier"), "{}", v.text);
    }

    #[test]
    fn high_utilization_with_low_sm_activity_is_not_gpu_bound() {
        let busy = [stat("launch", "train.py", 0.9)];
        let judge_sm = |sm: Option<f64>| {
            verdict(VerdictInput {
                stuck: None,
                mean_utilization: Some(97.0),
                cycle: None,
                while_idle: &WhileIdle::default(),
                startup_secs: 0.0,
                idle_functions: &[],
                idle_path: None,
                low_sm_path: None,
                mean_sm_active: sm,
                low_sm_functions: &busy,
                step: None,
                gil_holder: None,
                cpus_usable: None,
            })
        };
        let v = judge_sm(Some(18.0));
        assert_eq!(v.class, VerdictClass::LowSmActivity);
        assert!(v.text.contains("launch (train.py) 90%"), "{}", v.text);
        assert_eq!(judge_sm(Some(92.0)).class, VerdictClass::GpuBound);
        assert_eq!(judge_sm(None).class, VerdictClass::GpuBound, "no GPM");
    }

    #[test]
    fn oscillation_text_says_the_period() {
        let v = judge(Some(50.0), Some(4.04));
        assert!(v.text.contains("every ~4.0 s"), "{}", v.text);
    }

    #[test]
    fn no_idle_samples_is_said() {
        let v = verdict(VerdictInput {
            stuck: None,
            mean_utilization: Some(99.0),
            cycle: None,
            while_idle: &WhileIdle::default(),
            startup_secs: 0.0,
            idle_functions: &[],
            idle_path: None,
            low_sm_path: None,
            mean_sm_active: None,
            low_sm_functions: &[],
            step: None,
            gil_holder: None,
            cpus_usable: None,
        });
        assert_eq!(v.class, VerdictClass::GpuBound);
        assert!(v.text.contains("No stack samples"), "{}", v.text);
    }
}
