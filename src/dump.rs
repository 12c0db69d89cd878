//! `stackscope dump`: every thread's stack, once, as text or JSON, with what the stacks say
//! at a glance ([`notes`]).

use anyhow::{bail, Context};
use stackscope_sampler::{dump_process, dump_tree, TargetOptions};

use crate::config::DumpConfig;

pub(crate) mod notes;

pub fn run(config: DumpConfig) -> anyhow::Result<()> {
    let options = TargetOptions {
        blocking: true,
        locals: config.locals,
        native: config.native,
        tuning: config.tuning,
    };
    let mut processes = if config.subprocesses {
        dump_tree(config.pid, &options)?
    } else {
        vec![dump_process(config.pid, &options)?]
    };
    // A launcher with no Python below it: nothing was dumped, which is a failure to say.
    if processes.iter().all(|p| p.python_version.is_empty()) {
        let exe = std::fs::read_link(format!("/proc/{}/exe", config.pid))
            .map(|p| p.display().to_string())
            .unwrap_or_default();
        bail!(
            "process {} ({exe}) is not a Python process, and no Python process runs below it",
            config.pid
        );
    }
    // The shape says what was found: one Python process prints as that process (as with
    // --no-subprocesses), anything more as the tree; and the tree whenever --subprocesses asks.
    let tree = config.tree_json
        || !matches!(processes.as_slice(), [one] if !one.python_version.is_empty());
    stackscope_aggregate::in_reading_order(&mut processes);
    let notes = notes::dump_notes(&processes, &options);
    // Only locals can hold a secret; without --locals there are none to hide.
    if !config.show_secrets {
        stackscope_report::redact_secrets(&mut processes);
    }
    let out = std::io::stdout().lock();
    if config.json {
        stackscope_report::write_dump_json(&processes, &notes, tree, out)
    } else {
        stackscope_report::write_dump_text(&processes, &notes, out)
    }
    .context("cannot write the dump")
}
