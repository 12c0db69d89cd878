//! The stack reader's experiment switches, from the environment: the one place that names the
//! variables (the libraries read none of them; they get a [`ReaderTuning`] in their target
//! options). Each command fills it once, when its settings are built.
//!
//! | variable                   | values                                   | unset          |
//! |----------------------------|------------------------------------------|----------------|
//! | `STACKSCOPE_READER`        | `py-spy`, `stop`, `gil` (else: default)  | default reader |
//! | `STACKSCOPE_READER_STATS`  | set, to anything: counters printed       | off            |
//! | `STACKSCOPE_SHORT_SLICES`  | `0` never, `1` always (else: adaptive)   | adaptive       |
//! | `STACKSCOPE_IDLE_REUSE`    | `0` off, anything else on                | on             |
//! | `STACKSCOPE_IDLE_AUDIT`    | `0` off, anything else on                | off            |
//! | `STACKSCOPE_STILL_READS`   | `0` off, anything else on                | on             |
//! | `STACKSCOPE_SWITCH_RINGS`  | `0` off, anything else on                | on             |
//! | `STACKSCOPE_PROVEN_STACKS` | `0` off, anything else on                | on             |
//! | `STACKSCOPE_CODE_TRUST`    | `0` off, anything else on                | on             |
//! | `STACKSCOPE_KEPT_NATIVE`   | `0` off, anything else on                | on             |
//! | `STACKSCOPE_NATIVE_AUDIT`  | `0` off, anything else on                | off            |
//!
//! What each one does: [`ReaderTuning`]'s fields (docs/performance.md measures them).

use std::ffi::OsString;

use stackscope_sampler::{ReaderChoice, ReaderTuning, ShortSlices};

/// The tuning this process's environment asks for.
pub fn reader_tuning_from_env() -> ReaderTuning {
    reader_tuning_from(|name| std::env::var_os(name))
}

/// The tuning that `var` (a variable's value by name, None when unset) asks for.
fn reader_tuning_from(var: impl Fn(&str) -> Option<OsString>) -> ReaderTuning {
    // Off only for `0`; unset is `default`.
    let switch = |name: &str, default: bool| var(name).map_or(default, |v| v != "0");
    ReaderTuning {
        reader: match var("STACKSCOPE_READER").as_ref().and_then(|v| v.to_str()) {
            Some("py-spy") => ReaderChoice::PySpy,
            Some("stop") => ReaderChoice::StopProcess,
            Some("gil") => ReaderChoice::StopGilHolders,
            _ => ReaderChoice::Default,
        },
        stats: var("STACKSCOPE_READER_STATS").is_some(),
        short_slices: match var("STACKSCOPE_SHORT_SLICES")
            .as_ref()
            .and_then(|v| v.to_str())
        {
            Some("0") => ShortSlices::Never,
            Some("1") => ShortSlices::Always,
            _ => ShortSlices::WhenLosingTicks,
        },
        idle_reuse: switch("STACKSCOPE_IDLE_REUSE", true),
        idle_audit: switch("STACKSCOPE_IDLE_AUDIT", false),
        still_reads: switch("STACKSCOPE_STILL_READS", true),
        switch_rings: switch("STACKSCOPE_SWITCH_RINGS", true),
        proven_stacks: switch("STACKSCOPE_PROVEN_STACKS", true),
        code_trust: switch("STACKSCOPE_CODE_TRUST", true),
        kept_native: switch("STACKSCOPE_KEPT_NATIVE", true),
        native_audit: switch("STACKSCOPE_NATIVE_AUDIT", false),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn tuning(vars: &[(&str, &str)]) -> ReaderTuning {
        reader_tuning_from(|name| {
            vars.iter()
                .find(|(n, _)| *n == name)
                .map(|(_, v)| OsString::from(v))
        })
    }

    #[test]
    fn nothing_set_is_the_default() {
        assert_eq!(tuning(&[]), ReaderTuning::DEFAULT);
    }

    #[test]
    fn each_variable_means_what_it_always_meant() {
        assert_eq!(
            tuning(&[("STACKSCOPE_READER", "py-spy")]).reader,
            ReaderChoice::PySpy
        );
        assert_eq!(
            tuning(&[("STACKSCOPE_READER", "stop")]).reader,
            ReaderChoice::StopProcess
        );
        assert_eq!(
            tuning(&[("STACKSCOPE_READER", "gil")]).reader,
            ReaderChoice::StopGilHolders
        );
        assert_eq!(
            tuning(&[("STACKSCOPE_READER", "x")]).reader,
            ReaderChoice::Default
        );
        // Set at all, even to 0.
        assert!(tuning(&[("STACKSCOPE_READER_STATS", "0")]).stats);
        assert_eq!(
            tuning(&[("STACKSCOPE_SHORT_SLICES", "0")]).short_slices,
            ShortSlices::Never
        );
        assert_eq!(
            tuning(&[("STACKSCOPE_SHORT_SLICES", "1")]).short_slices,
            ShortSlices::Always
        );
        assert_eq!(
            tuning(&[("STACKSCOPE_SHORT_SLICES", "2")]).short_slices,
            ShortSlices::WhenLosingTicks
        );
        assert!(!tuning(&[("STACKSCOPE_IDLE_REUSE", "0")]).idle_reuse);
        assert!(tuning(&[("STACKSCOPE_IDLE_REUSE", "1")]).idle_reuse);
        assert!(tuning(&[("STACKSCOPE_IDLE_AUDIT", "1")]).idle_audit);
        assert!(!tuning(&[("STACKSCOPE_IDLE_AUDIT", "0")]).idle_audit);
        assert!(!tuning(&[("STACKSCOPE_STILL_READS", "0")]).still_reads);
        assert!(!tuning(&[("STACKSCOPE_SWITCH_RINGS", "0")]).switch_rings);
        assert!(tuning(&[("STACKSCOPE_SWITCH_RINGS", "")]).switch_rings);
        assert!(!tuning(&[("STACKSCOPE_PROVEN_STACKS", "0")]).proven_stacks);
        assert!(tuning(&[("STACKSCOPE_PROVEN_STACKS", "1")]).proven_stacks);
        assert!(!tuning(&[("STACKSCOPE_CODE_TRUST", "0")]).code_trust);
        assert!(tuning(&[("STACKSCOPE_CODE_TRUST", "1")]).code_trust);
        assert!(!tuning(&[("STACKSCOPE_KEPT_NATIVE", "0")]).kept_native);
        assert!(tuning(&[("STACKSCOPE_KEPT_NATIVE", "1")]).kept_native);
        assert!(tuning(&[("STACKSCOPE_NATIVE_AUDIT", "1")]).native_audit);
        assert!(!tuning(&[("STACKSCOPE_NATIVE_AUDIT", "0")]).native_audit);
    }
}
