//! The verdict read from the trainer's step (`roles/step.rs`): the class its breakdown decides,
//! confirmed by the GPU's mean (a GPU kept busy is not held back by its input, whatever the
//! loop waits on), and what fixing the bottleneck buys: `summary.json`'s `gpu.if_fixed`.
//!
//! The breakdown holds where the GPU's cycle cannot be seen (NVML averages utilization over
//! 1/6 s to 1 s, so steps of 50-300 ms show none).
//!
//! - `input_pipeline`: the loop waits for batches from its feeders;
//! - `inline_loading`: the loop loads data itself;
//! - `gil_contention`: the loop waits for the GIL another thread holds.
//!
//! The largest of the three decides at [`HIGHLY_BOUND`] of the step or more while the GPU is
//! not kept busy (mean utilization up to [`GPU_BOUND_ABOVE`]), and at [`MODERATELY_BOUND`] or
//! more while the GPU is mostly idle (below [`PREPROCESSING_BELOW`]): a loop that waits 5% of
//! its time while the GPU is 80% busy is held back by the GPU, not by its input. In
//! TensorBoard's words: "highly input-bound" at [`HIGHLY_BOUND`] or more, "moderately" below.
//!
//! What fixing it buys is Amdahl's bound: removing a share `s` of the loop's time makes steps
//! up to `1 / (1 - s)` faster. While the loop waits for them, `n` worker pipelines deliver a
//! batch per step `T` together, one each per `n * T` (computing or reading: a worker that
//! waits on storage is a pipeline all the same); keeping up with steps of `(1 - s) * T` takes
//! `n / (1 - s)` of them. Loading inline (one pipeline, the loop's own, loading `s` of the
//! step) takes `s / (1 - s)`.

use serde::{Deserialize, Serialize};

use super::class::{Verdict, VerdictClass, GPU_BOUND_ABOVE, PREPROCESSING_BELOW};
use crate::gpu::Cycle;
use crate::roles::step::{GilHolder, StepBreakdown};
use crate::roles::while_idle::WhileIdle;
use crate::roles::Role;

/// At or above this share of the step, the loop is "highly" bound by its bottleneck.
pub const HIGHLY_BOUND: f64 = 0.20;
/// At or above this share (and below [`HIGHLY_BOUND`]), "moderately".
pub const MODERATELY_BOUND: f64 = 0.05;
/// The CPUs the loop itself takes once it no longer waits: it runs its step on one.
const LOOP_CPUS: f64 = 1.0;
/// A speed-up is never said to be more than this: a share of nearly 1 gives no honest bound.
const MAX_SPEEDUP: f64 = 50.0;

/// `summary.json`'s `gpu.if_fixed`: what removing the bottleneck would buy.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct IfFixed {
    /// `input_pipeline`, `inline_loading`, `gil_contention`, `gpu` (GPU-bound: nothing on
    /// the host side to fix), `compute` (without GPU data: the loop's own computation), or
    /// `periodic_stall`.
    pub bottleneck: String,
    /// The bottleneck's share of the loop's wall time.
    pub share: f64,
    /// Amdahl's bound on the steps' speed-up from removing it.
    pub speedup_up_to: f64,
    /// Worker pipelines feeding the loop now (processes or pool threads; 0 when it loads
    /// inline).
    pub workers_now: Option<u32>,
    /// Worker pipelines that would deliver batches as fast as the loop would take them.
    pub workers_needed: Option<u32>,
    /// CPUs the job's process may run on (its affinity, capped by its cgroup's quota).
    pub cpus_usable: Option<f64>,
    /// Of the feeders' samples, the share that ran: the CPU a worker pipeline takes.
    #[serde(skip)]
    pub feeders_busy: f64,
    /// Whether the feeders are threads of the loop's own process (sharing its GIL).
    #[serde(skip)]
    pub threads_only: bool,
}

impl IfFixed {
    /// The part of the loop's step that the bottleneck is (`input_wait` for an input
    /// pipeline); `None` for one not on the host (the GPU, a periodic stall).
    pub fn step_part(&self) -> Option<&'static str> {
        HOST_BOTTLENECKS
            .iter()
            .find(|(_, name, _)| *name == self.bottleneck)
            .map(|(_, _, part)| *part)
    }

    /// Ends `verdict`'s text with [`IfFixed::sentence`], naming the feeders' function.
    pub fn say_in(&self, verdict: &mut Verdict, while_idle: &WhileIdle) {
        let function = while_idle
            .feeders
            .iter()
            .find_map(|f| f.function.as_deref())
            .map(super::by_roles::function_name);
        verdict.text.push(' ');
        verdict.text.push_str(&self.sentence(function));
    }

    /// "Fed in time, steps would be up to 3.4x faster; about 7 workers would keep up (this job
    /// may use 16 CPUs)."
    pub fn sentence(&self, feeders_function: Option<&str>) -> String {
        let cpus = self
            .cpus_usable
            .map(|c| format!(" (this job may use {} CPUs)", cpus_words(c)))
            .unwrap_or_default();
        let speedup = format!("up to {:.1}x faster", self.speedup_up_to);
        let workers = |needed: u32| {
            // Workers that mostly wait on storage take little CPU: what they would run must fit.
            let cpus_needed = f64::from(needed) * self.feeders_busy;
            if self.threads_only && cpus_needed > 1.0 {
                let function = feeders_function.unwrap_or("the feeders' function");
                return format!(
                    "about {needed} feeder threads would keep up, but threads share one GIL: \
                     {function} must hold it less (worker processes, or code that releases \
                     it), or get cheaper."
                );
            }
            // Fed in time, the loop itself keeps one CPU busy beside them.
            let too_many = self
                .cpus_usable
                .is_some_and(|c| cpus_needed + LOOP_CPUS > c);
            if too_many {
                let function = feeders_function.map_or("the feeders' function".to_owned(), |f| {
                    format!("the feeders' function ({f})")
                });
                format!(
                    "about {needed} {} would keep up, more than the CPUs it may use{cpus}: \
                     {function} itself must get cheaper.",
                    plural(needed, "worker")
                )
            } else {
                format!(
                    "about {needed} {} would keep up{cpus}.",
                    plural(needed, "worker")
                )
            }
        };
        match (self.bottleneck.as_str(), self.workers_needed) {
            ("input_pipeline", Some(n)) => {
                format!("Fed in time, steps would be {speedup}; {}", workers(n))
            }
            ("inline_loading", Some(n)) => format!(
                "Loaded ahead by workers, steps would be {speedup}; {}",
                workers(n)
            ),
            ("gil_contention", _) => format!(
                "Without waiting for the GIL, steps would be {speedup}: the GIL's holder must \
                 hold it less (its work in a process, or in code that releases the GIL)."
            ),
            ("gpu", _) => "Faster input buys nothing: the GPU is the bottleneck.".to_owned(),
            ("compute", _) => {
                "Faster input buys nothing: the loop's own computation is the bottleneck."
                    .to_owned()
            }
            ("periodic_stall", _) => {
                format!("Without the stall, steps would be {speedup} on average.")
            }
            _ => format!("Fixed, steps would be {speedup}."),
        }
    }
}

/// "1 worker", "7 workers".
fn plural(n: u32, word: &str) -> String {
    if n == 1 {
        word.to_owned()
    } else {
        format!("{word}s")
    }
}

/// "16", "1.5".
fn cpus_words(cpus: f64) -> String {
    if (cpus - cpus.round()).abs() < 0.05 {
        format!("{:.0}", cpus)
    } else {
        format!("{cpus:.1}")
    }
}

/// The bottlenecks on the host that the step shows: the class, its name in `if_fixed`, and
/// the part of the step that is its time.
const HOST_BOTTLENECKS: [(VerdictClass, &str, &str); 3] = [
    (VerdictClass::InputPipeline, "input_pipeline", "input_wait"),
    (VerdictClass::InlineLoading, "inline_loading", "inline_load"),
    (VerdictClass::GilContention, "gil_contention", "gil_wait"),
];

/// The bottleneck the breakdown points at, with its share of the step.
pub(super) fn bottleneck(step: &StepBreakdown) -> (VerdictClass, f64) {
    HOST_BOTTLENECKS
        .iter()
        .map(|(class, _, part)| (*class, step.part(part)))
        .max_by(|a, b| a.1.total_cmp(&b.1))
        .unwrap_or((VerdictClass::InputPipeline, 0.0))
}

/// "highly input-bound" or "moderately input-bound".
pub fn boundness(share: f64, what: &str) -> String {
    if share >= HIGHLY_BOUND {
        format!("highly {what}-bound")
    } else {
        format!("moderately {what}-bound")
    }
}

/// The class the step decides, when its bottleneck is enough of it for the GPU's mean.
pub fn step_class(mean: f64, step: &StepBreakdown) -> Option<(VerdictClass, f64)> {
    let least = if mean > GPU_BOUND_ABOVE {
        return None;
    } else if mean < PREPROCESSING_BELOW {
        MODERATELY_BOUND
    } else {
        HIGHLY_BOUND
    };
    let (class, share) = bottleneck(step);
    (share >= least).then_some((class, share))
}

/// What fixing the class's bottleneck buys.
pub fn if_fixed(
    class: VerdictClass,
    step: &StepBreakdown,
    while_idle: &WhileIdle,
    cpus_usable: Option<f64>,
    cycle: Option<&Cycle>,
) -> Option<IfFixed> {
    let feeders: Vec<_> = while_idle
        .feeders
        .iter()
        .filter(|f| f.role != Role::Helper)
        .collect();
    let workers_now: u32 = feeders.iter().map(|f| f.pipelines() as u32).sum();
    // Threads of one interpreter run Python one at a time: a pool has one GIL to share.
    let threads_only = !feeders.is_empty() && feeders.iter().all(|f| f.role == Role::FeederThread);
    // The loop loading inline is its own pipeline: what it runs of its loading.
    let feeders_busy = match class {
        VerdictClass::InlineLoading => 1.0,
        _ => feeders.iter().map(|f| f.busy_share).fold(0.0, f64::max),
    };
    let host = HOST_BOTTLENECKS.iter().find(|(c, _, _)| *c == class);
    let (bottleneck, share) = match (class, host) {
        (_, Some((_, name, part))) => (*name, step.part(part)),
        (VerdictClass::GpuBound, None) => ("gpu", 0.0),
        (VerdictClass::ComputeBound, None) => ("compute", 0.0),
        // The stall's share of the GPU's cycle: time the loop does not feed the GPU at all.
        (VerdictClass::PeriodicStall, None) => (
            "periodic_stall",
            cycle.map_or(0.0, |c| c.idle_secs / c.period_secs.max(f64::EPSILON)),
        ),
        _ => return None,
    };
    let speedup_up_to = (1.0 / (1.0 - share).max(1.0 / MAX_SPEEDUP)).max(1.0);
    let workers_needed = match class {
        VerdictClass::InputPipeline if workers_now > 0 => {
            Some(pipelines(f64::from(workers_now) * speedup_up_to).max(workers_now))
        }
        VerdictClass::InlineLoading => Some(pipelines(share * speedup_up_to).max(1)),
        VerdictClass::GpuBound | VerdictClass::ComputeBound => Some(workers_now),
        _ => None,
    };
    Some(IfFixed {
        bottleneck: bottleneck.to_owned(),
        share,
        speedup_up_to,
        workers_now: Some(workers_now),
        workers_needed,
        cpus_usable,
        feeders_busy,
        threads_only,
    })
}

/// Whole pipelines for a fractional need: a need a tenth over a whole number rounds up.
fn pipelines(need: f64) -> u32 {
    (need - 0.1).ceil().max(0.0) as u32
}

/// The verdict of a bottleneck the step decides, of `subject` ("The training loop"). `trainer_words` say where the loop waits or
/// runs, `feeders_words` who feeds it and how busy, `gpu_words` the GPU's mean and cycle.
#[allow(clippy::too_many_arguments)]
pub fn step_verdict(
    subject: &str,
    class: VerdictClass,
    share: f64,
    step: &StepBreakdown,
    gil_holder: Option<&GilHolder>,
    trainer_words: &str,
    feeders_words: Option<&str>,
    gpu_words: &str,
) -> Verdict {
    let pct = share * 100.0;
    let text = match class {
        VerdictClass::InputPipeline => format!(
            "{subject} is {} ({pct:.0}% of its time waiting for its next batch): it \
             waits for its next batch {trainer_words}{}; the input pipeline cannot keep up. \
             {gpu_words}",
            boundness(share, "input"),
            feeders_words.map_or(String::new(), |f| format!("; {f}")),
        ),
        VerdictClass::InlineLoading => format!(
            "{subject} is {} ({pct:.0}% of its time loading data itself): while it \
             loads, it {trainer_words}, and the GPU waits. {gpu_words}",
            boundness(share, "input"),
        ),
        _ => {
            let holder = gil_holder.map_or("another thread".to_owned(), |h| match &h.frame {
                Some(frame) => format!("{} (at {frame})", h.thread),
                None => h.thread.clone(),
            });
            format!(
                "{subject} waits for the GIL {pct:.0}% of its time, held by {holder}; \
                 it {trainer_words}. {gpu_words}"
            )
        }
    };
    Verdict {
        class,
        text: format!("{} The loop's time: {}.", text.trim_end(), step.describe()),
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::roles::while_idle::FeedersWhileIdle;

    fn feeders(n: u32, busy: f64) -> WhileIdle {
        WhileIdle {
            trainer: None,
            feeders: vec![FeedersWhileIdle {
                role: Role::DataloaderWorker,
                pids: (0..n).collect(),
                processes: 0,
                threads: 2,
                busy_share: busy,
                function: Some("augment_pixels (train.py:56)".to_owned()),
                share: 0.97,
            }],
        }
    }

    #[test]
    fn workers_needed_keep_up_with_the_faster_step() {
        let step = StepBreakdown {
            input_wait: 0.78,
            python: 0.22,
            ..StepBreakdown::default()
        };
        let (class, share) = step_class(21.0, &step).expect("a class");
        assert_eq!(class, VerdictClass::InputPipeline);
        assert!((share - 0.78).abs() < 1e-9);
        let fixed = if_fixed(class, &step, &feeders(2, 0.99), Some(16.0), None).expect("if fixed");
        assert!((fixed.speedup_up_to - 1.0 / 0.22).abs() < 1e-9);
        // 2 workers, steps 4.5x faster: 9 workers.
        assert_eq!(fixed.workers_needed, Some(9));
        assert_eq!(fixed.workers_now, Some(2));
        let words = fixed.sentence(Some("augment_pixels"));
        assert_eq!(
            words,
            "Fed in time, steps would be up to 4.5x faster; about 9 workers would keep up \
             (this job may use 16 CPUs)."
        );
        let few = if_fixed(class, &step, &feeders(2, 0.99), Some(1.5), None).expect("if fixed");
        let words = few.sentence(Some("augment_pixels"));
        assert!(words.contains("(this job may use 1.5 CPUs)"), "{words}");
        assert!(
            words.contains("augment_pixels) itself must get cheaper"),
            "{words}"
        );
        // 9 workers 45% busy take 4.05 CPUs, and the loop, fed, one more: 5 are not enough.
        let tight = if_fixed(class, &step, &feeders(2, 0.45), Some(5.0), None).expect("fixed");
        assert!(
            tight.sentence(None).contains("more than the CPUs"),
            "{tight:?}"
        );
        let room = if_fixed(class, &step, &feeders(2, 0.45), Some(5.5), None).expect("fixed");
        assert!(
            !room.sentence(None).contains("more than the CPUs"),
            "{room:?}"
        );
    }

    #[test]
    fn a_busy_gpu_is_not_held_back_by_input_and_small_shares_decide_nothing() {
        let step = StepBreakdown {
            input_wait: 0.3,
            python: 0.7,
            ..StepBreakdown::default()
        };
        assert_eq!(step_class(95.0, &step), None);
        // 5% of waits on a GPU 80% busy: the GPU holds the loop back, not its input.
        let moderate = StepBreakdown {
            input_wait: 0.06,
            python: 0.94,
            ..StepBreakdown::default()
        };
        assert_eq!(step_class(81.0, &moderate), None);
        assert_eq!(
            step_class(40.0, &moderate).map(|c| c.0),
            Some(VerdictClass::InputPipeline)
        );
        let quiet = StepBreakdown {
            input_wait: 0.04,
            gpu_wait: 0.96,
            ..StepBreakdown::default()
        };
        assert_eq!(step_class(50.0, &quiet), None);
        let fixed =
            if_fixed(VerdictClass::GpuBound, &quiet, &feeders(4, 0.3), None, None).expect("gpu");
        assert_eq!(fixed.speedup_up_to, 1.0);
        assert_eq!(fixed.workers_needed, Some(4));
        assert!(fixed.sentence(None).contains("Faster input buys nothing"));
    }

    #[test]
    fn inline_loading_needs_workers_and_is_said_in_tensorboards_words() {
        let step = StepBreakdown {
            inline_load: 0.75,
            python: 0.25,
            ..StepBreakdown::default()
        };
        let (class, share) = step_class(25.0, &step).expect("a class");
        assert_eq!(class, VerdictClass::InlineLoading);
        let fixed = if_fixed(class, &step, &WhileIdle::default(), Some(4.0), None).expect("fixed");
        assert_eq!(fixed.workers_now, Some(0));
        assert_eq!(fixed.workers_needed, Some(3));
        assert_eq!(boundness(share, "input"), "highly input-bound");
        assert_eq!(boundness(0.07, "input"), "moderately input-bound");
    }
}
