//! `stackscope dump`: every thread's stack, once, as text or JSON.

use anyhow::Context;
use stackscope_sampler::{dump_process, dump_tree, TargetOptions};

use crate::config::DumpConfig;

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
    stackscope_aggregate::in_reading_order(&mut processes);
    // Only locals can hold a secret; without --locals there are none to hide.
    if !config.show_secrets {
        stackscope_report::redact_secrets(&mut processes);
    }
    let out = std::io::stdout().lock();
    if config.json {
        stackscope_report::write_dump_json(&processes, config.subprocesses, out)
    } else {
        stackscope_report::write_dump_text(&processes, out)
    }
    .context("cannot write the dump")
}
