//! speedscope's file format (<https://www.speedscope.app/file-format-schema.json>): one
//! `sampled` profile per thread, named as py-spy names them (`Thread 1234 "MainThread"`, and
//! `Process 42 Thread 1234 "MainThread"` when following subprocesses), frames shared between
//! profiles, weights in seconds.
//!
//! Samples stay in time order, consecutive equal stacks merged into one with their weights
//! summed, so speedscope's "Time Order" view shows the thread's phases as they happened
//! (without the gaps where the thread slept, as py-spy's files do).

use std::io::Write;

use serde::Serialize;
use stackscope_aggregate::SampleTrace;

use super::ExportInfo;
use crate::ReportError;

pub const SCHEMA_URL: &str = "https://www.speedscope.app/file-format-schema.json";

#[derive(Serialize)]
struct File<'a> {
    #[serde(rename = "$schema")]
    schema: &'static str,
    shared: Shared<'a>,
    profiles: Vec<Profile>,
    name: String,
    #[serde(rename = "activeProfileIndex")]
    active_profile_index: usize,
    exporter: String,
}

#[derive(Serialize)]
struct Shared<'a> {
    frames: Vec<Frame<'a>>,
}

#[derive(Serialize)]
struct Frame<'a> {
    name: &'a str,
    file: &'a str,
    #[serde(skip_serializing_if = "Option::is_none")]
    line: Option<u32>,
}

#[derive(Serialize)]
struct Profile {
    #[serde(rename = "type")]
    kind: &'static str,
    name: String,
    unit: &'static str,
    #[serde(rename = "startValue")]
    start_value: f64,
    #[serde(rename = "endValue")]
    end_value: f64,
    samples: Vec<Vec<u32>>,
    weights: Vec<f64>,
}

/// Writes the trace as a speedscope JSON file.
pub fn write_speedscope<W: Write>(
    trace: &SampleTrace,
    info: &ExportInfo<'_>,
    mut w: W,
) -> Result<(), ReportError> {
    let period = info.period_secs();
    let subprocesses = trace.config().process_root;
    let mut profiles: Vec<Profile> = trace
        .threads()
        .iter()
        .filter(|t| !t.runs.is_empty())
        .map(|thread| {
            let mut samples: Vec<Vec<u32>> = Vec::new();
            let mut counts: Vec<u64> = Vec::new();
            let mut last = None;
            for run in &thread.runs {
                if last == Some(run.stack) {
                    if let Some(n) = counts.last_mut() {
                        *n += run.samples;
                        continue;
                    }
                }
                last = Some(run.stack);
                samples.push(trace.stacks()[run.stack as usize].to_vec());
                counts.push(run.samples);
            }
            let weights: Vec<f64> = counts.iter().map(|&n| n as f64 * period).collect();
            let name = if subprocesses {
                format!(
                    "Process {} Thread {} \"{}\"",
                    thread.pid,
                    thread.display_id(),
                    thread.name
                )
            } else {
                format!("Thread {} \"{}\"", thread.display_id(), thread.name)
            };
            Profile {
                kind: "sampled",
                name,
                unit: "seconds",
                start_value: 0.0,
                end_value: thread.samples() as f64 * period,
                samples,
                weights,
            }
        })
        .collect();
    profiles.sort_by(|a, b| a.name.cmp(&b.name));
    let frames = trace
        .frames()
        .iter()
        .map(|f| Frame {
            name: &f.function,
            file: &f.file,
            line: (f.line > 0).then_some(f.line),
        })
        .collect();
    let file = File {
        schema: SCHEMA_URL,
        shared: Shared { frames },
        profiles,
        name: format!(
            "stackscope: {} (pid {})",
            info.meta.command_line, info.meta.pid
        ),
        active_profile_index: 0,
        exporter: format!("stackscope@{}", env!("CARGO_PKG_VERSION")),
    };
    serde_json::to_writer(&mut w, &file)?;
    w.flush()?;
    Ok(())
}
