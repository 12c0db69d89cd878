//! `stackscope report`: re-reads a recording's sample log and writes every output again for a
//! window of it, without recording again.

use anyhow::Context;
use stackscope_report::{rebuild, RebuildOptions};
use stackscope_samplelog::report_dir;

use crate::config::ReportConfig;

pub fn run(config: ReportConfig) -> anyhow::Result<()> {
    let window = config.window;
    let options = RebuildOptions {
        window,
        idle_below: config.idle_below,
        include_idle: None,
        processes_apart: config.processes_apart,
        threads_apart: config.threads_apart,
    };
    let rebuilt = rebuild(&config.dir, &options)
        .with_context(|| format!("cannot read the recording in {}", config.dir.display()))?;
    let out = config
        .output
        .clone()
        .unwrap_or_else(|| report_dir(&config.dir, &window));
    crate::config::ensure_writable_dir(&out)?;
    let written = stackscope_report::write_outputs(&out, &rebuilt.sink, &rebuilt.meta)
        .with_context(|| format!("cannot write the report to {}", out.display()))?;
    eprintln!(
        "stackscope: {} to {} s of the recording ({} events read)",
        fmt_secs(rebuilt.from_secs),
        fmt_secs(rebuilt.to_secs),
        rebuilt.events_read
    );
    // What of the log could not be read: damaged blocks skipped, an early end.
    if let Some(problems) = rebuilt.log.problems() {
        eprintln!("stackscope: {problems}");
    }
    let mut stdout = std::io::stdout().lock();
    stackscope_report::write_text_summary(&written.summary, &out, &mut stdout)
        .context("cannot print the summary")?;
    Ok(())
}

fn fmt_secs(secs: f64) -> String {
    format!("{secs:.1}")
}
