//! The low-SM verdict: utilization high while SM activity (GPM, Hopper and later) is low, by
//! the rule in `gpu/state.rs` ([`crate::gpu::is_low`]).
//!
//! Kept apart from `recording.rs` so that the utilization classes there and this one evolve
//! independently: [`low_sm_verdict`] overrides the utilization class only where SM activity is
//! known and low.

use super::class::{Verdict, VerdictClass, PREPROCESSING_BELOW};
use super::idle_path::IdlePath;
use crate::fold::FunctionStat;
use crate::gpu::is_low;

/// The verdict when utilization is high (at or above [`PREPROCESSING_BELOW`]) while SM activity
/// is low; `None` otherwise (no GPM, or SM activity that keeps up), leaving the utilization
/// classes to decide. `low_sm_functions` are the functions of the stack samples taken while the
/// GPU was busy with low SM activity, by self share of those samples; `low_sm_path`, when
/// given, the call path that sets those samples apart from the other GPU-busy ones, named
/// instead (see `idle_path.rs`).
pub fn low_sm_verdict(
    mean_utilization: f64,
    mean_sm_active: Option<f64>,
    low_sm_functions: &[FunctionStat],
    low_sm_path: Option<&IdlePath>,
) -> Option<Verdict> {
    let sm = mean_sm_active?;
    if mean_utilization < PREPROCESSING_BELOW || !is_low(mean_utilization, sm) {
        return None;
    }
    Some(Verdict {
        class: VerdictClass::LowSmActivity,
        text: format!(
            "Kernels keep the GPU busy (mean utilization {mean_utilization:.0}%) but on a small \
             part of it (mean SM activity {sm:.0}%): launch-bound, small ops, or \
             synchronisation. Fewer, larger kernels help (batching, fusion, CUDA graphs, \
             torch.compile); a bigger GPU does not. {}",
            match low_sm_path {
                Some(path) => path.low_sm_sentence(),
                None => code_sentence(low_sm_functions),
            }
        ),
    })
}

fn code_sentence(functions: &[FunctionStat]) -> String {
    super::class::code_sentence(
        functions,
        "while SM activity was low",
        "While SM activity was low",
    )
}

#[cfg(test)]
mod tests {
    use super::*;

    fn stat(function: &str, share: f64) -> FunctionStat {
        FunctionStat {
            function: function.to_owned(),
            file: "train.py".to_owned(),
            self_samples: (share * 100.0) as u64,
            self_share: share,
            total_samples: (share * 100.0) as u64,
            total_share: share,
        }
    }

    #[test]
    fn low_only_against_high_utilization() {
        let code = [stat("launch_tiny_kernels", 0.8), stat("step", 0.1)];
        let v = low_sm_verdict(97.0, Some(20.0), &code, None).expect("low SM activity");
        assert_eq!(v.class, VerdictClass::LowSmActivity);
        assert!(v.text.contains("mean SM activity 20%"), "{}", v.text);
        assert!(
            v.text
                .contains("launch_tiny_kernels (train.py) 80%, step (train.py) 10%"),
            "{}",
            v.text
        );
        // SM activity that keeps up with utilization, or no GPM, or a starved GPU: not this
        // class.
        assert!(low_sm_verdict(97.0, Some(90.0), &code, None).is_none());
        assert!(low_sm_verdict(97.0, None, &code, None).is_none());
        assert!(low_sm_verdict(20.0, Some(2.0), &code, None).is_none());
        let v = low_sm_verdict(70.0, Some(10.0), &[], None).expect("low");
        assert!(v.text.contains("No stack samples"), "{}", v.text);
    }

    #[test]
    fn a_low_sm_path_is_named_instead_of_the_functions() {
        let path = IdlePath {
            functions: vec![super::super::idle_path::PathFunction {
                function: "launch_loop".to_owned(),
                file: "train.py".to_owned(),
            }],
            idle_samples: 90,
            idle_share: 0.9,
            busy_samples: 5,
            busy_share: 0.05,
        };
        let v = low_sm_verdict(97.0, Some(20.0), &[], Some(&path)).expect("low");
        assert!(
            v.text
                .contains("What sets low-SM time apart is launch_loop (train.py): in 90%"),
            "{}",
            v.text
        );
    }
}
