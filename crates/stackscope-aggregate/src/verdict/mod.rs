//! Verdicts: what the GPU's figures and the stacks behind them say about a recording (one
//! class of bottleneck and the code behind it), and the headline of merged recordings.
//!
//! Builds on `gpu/` (the SM-activity rule) and the fold (interned stacks, per-function counts);
//! neither knows of it.

mod by_roles;
mod by_step;
mod class;
mod idle_path;
mod low_sm;
mod merged;
mod recording;
mod without_gpu;

pub use by_step::{IfFixed, HIGHLY_BOUND, MODERATELY_BOUND};
pub use class::{Verdict, VerdictClass};
pub use idle_path::{idle_path, idle_path_by, IdlePath, PathFunction, MIN_RISE};
pub use merged::{headline_verdict, RecordingVerdict, VERDICTS_IN_HEADLINE};
pub use recording::{verdict_and_fix, VerdictInput};
pub use without_gpu::loop_verdict_and_fix;
