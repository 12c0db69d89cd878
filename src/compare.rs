//! `stackscope compare`: two recordings (or two windows of one) side by side, with a verdict on
//! the change; `--fail-if-worse` exits [`exit::WORSE`] when the change made things worse.

use std::process::ExitCode;

use anyhow::Context;
use stackscope_aggregate::compare::{compare, diff_stacks, CompareOptions};
use stackscope_report::compare::ComparedRecording;
use stackscope_report::compare::{read_compared, write_compare_files, write_compare_text};

use crate::config::{ensure_writable_dir, CompareConfig, ComparedSide};
use crate::exit::{self, UsageError};

pub fn run(config: CompareConfig) -> anyhow::Result<ExitCode> {
    // Both sides are read before anything is written: a bad one leaves no output behind.
    let before = read_side(&config.before)?;
    let after = read_side(&config.after)?;
    let options = CompareOptions {
        frames: config.frames,
    };
    let comparison = compare(&before.input, &after.input, options);
    let stacks = diff_stacks(&before.input, &after.input, options);
    ensure_writable_dir(&config.output)?;
    write_compare_files(&config.output, &comparison, &stacks, [&before, &after])
        .with_context(|| format!("cannot write the comparison to {}", config.output.display()))?;
    let mut stdout = std::io::stdout().lock();
    write_compare_text(&comparison, &config.output, &mut stdout)
        .context("cannot print the comparison")?;
    if config.fail_if_worse && comparison.change.worse {
        return Ok(ExitCode::from(exit::WORSE));
    }
    Ok(ExitCode::SUCCESS)
}

fn read_side(side: &ComparedSide) -> anyhow::Result<ComparedRecording> {
    if let Some(sources) = merged_from(&side.dir) {
        return Err(UsageError(format!(
            "{} is a merged recording (of {sources} recordings), which keeps no sample log: \
             compare the recordings it was merged from, a rank's before and after",
            side.dir.display()
        ))
        .into());
    }
    read_compared(&side.dir, side.window, &side.label)
        .with_context(|| format!("cannot read the recording {}", side.label))
}

/// How many recordings `dir` was merged from, when it is `merge`'s output without a sample log.
fn merged_from(dir: &std::path::Path) -> Option<usize> {
    if stackscope_samplelog::log_exists(dir) {
        return None;
    }
    let text = std::fs::read(dir.join("summary.json")).ok()?;
    let summary: serde_json::Value = serde_json::from_slice(&text).ok()?;
    summary["merged_from"].as_array().map(Vec::len)
}
