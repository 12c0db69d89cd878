//! `stackscope demo`: the whole story on any machine. Runs the bundled training loop
//! (`fixtures/train_sim.py`, embedded in the binary) under a simulated GPU whose utilization
//! follows the loop's phases, records it like `record` does, and writes report.html.

pub mod sim_gpu;

use std::fs;
use std::path::Path;

use anyhow::Context;

use crate::config::DemoConfig;
use crate::recording::{self, GpuSource};

const TRAIN_SIM: &str = include_str!("../../fixtures/train_sim.py");
const READY_HELPER: &str = include_str!("../../fixtures/_ready.py");
/// One step a second (600 ms loading, 400 ms computing): slow enough that the swings show on
/// the timeline, and that the simulated GPU's 100 ms readings resolve the phases.
const STEP_MS: &str = "1000";

pub fn run(config: DemoConfig) -> anyhow::Result<()> {
    // Before the loop runs for --seconds, not after.
    crate::config::ensure_writable_dir(&config.output)?;
    let scratch = tempfile::tempdir().context("cannot create a temporary directory")?;
    let script = scratch.path().join("train_sim.py");
    write(&script, TRAIN_SIM)?;
    write(&scratch.path().join("_ready.py"), READY_HELPER)?;
    let phase_file = scratch.path().join("gpu-phase");
    eprintln!(
        "stackscope demo: running the bundled training loop for {} s under a simulated GPU \
         (it follows the loop's phases; no device is read)",
        config.seconds
    );
    let command = vec![
        "python3".to_owned(),
        script.display().to_string(),
        "--seconds".to_owned(),
        config.seconds.to_string(),
        "--step-ms".to_owned(),
        STEP_MS.to_owned(),
        "--gpu-file".to_owned(),
        phase_file.display().to_string(),
    ];
    let recording = config.recording(command)?;
    let out = config.output.clone();
    let ended = recording::run_with(recording, GpuSource::Simulated(phase_file))?;
    if let Some(exit) = ended.command.filter(|e| e.code() != Some(0)) {
        anyhow::bail!(
            "the bundled training loop ended with {exit}; what was recorded is in {}",
            out.display()
        );
    }
    eprintln!(
        "stackscope demo: open {} in a browser",
        out.join(stackscope_report::html::REPORT_FILE).display()
    );
    Ok(())
}

fn write(path: &Path, text: &str) -> anyhow::Result<()> {
    fs::write(path, text).with_context(|| format!("cannot write {}", path.display()))
}
