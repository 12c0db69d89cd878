//! What a verdict is: its classes, the utilization thresholds between them, and the sentence
//! that names the code behind one. Shared by the recording's verdict (`recording.rs`), the
//! low-SM verdict (`low_sm.rs`) and the merged recordings' headline (`merged.rs`).

use serde::{Deserialize, Serialize};

use crate::fold::FunctionStat;

/// Below this mean utilization the GPU is starved.
pub const STARVED_BELOW: f64 = 30.0;
/// Below this (and at or above [`STARVED_BELOW`]) an oscillating GPU points at the CPU side.
pub const PREPROCESSING_BELOW: f64 = 60.0;
/// Above this the GPU itself is the bottleneck.
pub const GPU_BOUND_ABOVE: f64 = 85.0;
/// How many GPU-idle functions the verdict names.
const NAMED_FUNCTIONS: usize = 3;
/// After the first, a function is named only with at least this share of the GPU-idle samples:
/// a 1% function in the verdict reads as a finding when it is noise.
const NAMED_MIN_SHARE: f64 = 0.05;

#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum VerdictClass {
    /// The GPU waits on data loading or the input pipeline.
    Starved,
    /// The trainer waits for its next batch while its feeders (DataLoader workers) are busy:
    /// the input pipeline cannot keep up. See `by_roles.rs`.
    InputPipeline,
    /// The trainer loads its data itself (reads or decodes in its own loop) while the GPU
    /// waits. See `by_step.rs`.
    InlineLoading,
    /// The trainer waits for the GIL another thread of its process holds. See `by_step.rs`.
    GilContention,
    /// The GPU idles for seconds at regular intervals while the trainer does something else
    /// (a checkpoint, evaluation, logging). See `by_roles.rs`.
    PeriodicStall,
    /// The GPU alternates with CPU-side work: preprocessing or Python between steps.
    CpuPreprocessing,
    /// Many small kernels or Python control flow keep the GPU partly busy.
    SmallKernels,
    /// The GPU is the bottleneck.
    GpuBound,
    /// Without GPU data: the loop mostly runs its own computation; its input keeps up.
    ComputeBound,
    /// Kernels run most of the time but on a small part of the GPU (utilization high, GPM SM
    /// activity low): launch-bound, small ops, or synchronisation. See `low_sm.rs`.
    LowSmActivity,
    /// The target did not move (no thread's Python stack changed): a hang, not a performance
    /// problem. See `jobs/hang.rs`.
    Stuck,
    /// No utilization data.
    Unknown,
}

#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct Verdict {
    pub class: VerdictClass,
    /// One or two sentences for a person, naming the top GPU-idle functions.
    pub text: String,
}

/// "While `when`, Python was mostly in f (file) 60%, g (file) 20%.": the top function, and up
/// to [`NAMED_FUNCTIONS`] with at least [`NAMED_MIN_SHARE`] of the samples `functions` counts.
pub(crate) fn code_sentence(functions: &[FunctionStat], when: &str, when_capital: &str) -> String {
    let named: Vec<String> = functions
        .iter()
        .filter(|f| f.self_samples > 0)
        .enumerate()
        .filter(|(i, f)| *i == 0 || f.self_share >= NAMED_MIN_SHARE)
        .map(|(_, f)| f)
        .take(NAMED_FUNCTIONS)
        .map(|f| format!("{} ({}) {:.0}%", f.function, f.file, f.self_share * 100.0))
        .collect();
    if named.is_empty() {
        format!("No stack samples were taken {when}.")
    } else {
        format!("{when_capital}, Python was mostly in {}.", named.join(", "))
    }
}
