//! `stackscope merge`: dumps (`dump --json`) or recordings gathered from many nodes, merged
//! into one view: the grouped dump of the whole job, or one profile with a root per rank and a
//! table of ranks.

use std::collections::HashMap;
use std::io::Write;
use std::path::{Path, PathBuf};

use anyhow::{bail, Context};
use serde_json::Value;
use stackscope_aggregate::{
    merge_dumps, merge_recordings, HostedProcess, MergedRecordings, RecordingInput,
};
use stackscope_event::ProcessDump;
use stackscope_report::{runs_of_one_host, RecordingSpan};

use crate::config::{ensure_writable_dir, MergeConfig, MergeInputs};

pub fn run(config: MergeConfig) -> anyhow::Result<()> {
    match &config.inputs {
        MergeInputs::Dumps(files) => merge_dump_files(files, config.json),
        MergeInputs::Recordings(dirs) => merge_recording_dirs(dirs, &config.output, config.json),
    }
}

fn merge_dump_files(files: &[PathBuf], json: bool) -> anyhow::Result<()> {
    let mut processes: Vec<(String, ProcessDump)> = Vec::new();
    for file in files {
        let text =
            std::fs::read(file).with_context(|| format!("cannot read {}", file.display()))?;
        let value: Value = serde_json::from_slice(&text).with_context(|| {
            format!(
                "{} is not JSON: merge takes the output of `stackscope dump --json`",
                file.display()
            )
        })?;
        let mut dumps = dumps_of(value).with_context(|| {
            format!(
                "{} is not a dump: merge takes the output of `stackscope dump --json`",
                file.display()
            )
        })?;
        // A dump written by an older stackscope has no host: the file's name stands for it.
        let fallback = file_label(file);
        stackscope_aggregate::in_reading_order(&mut dumps);
        for dump in dumps {
            let host = dump.host.clone().unwrap_or_else(|| fallback.clone());
            processes.push((host, dump));
        }
    }
    let hosted: Vec<HostedProcess<'_>> = processes
        .iter()
        .map(|(host, process)| HostedProcess { host, process })
        .collect();
    let merged = merge_dumps(&hosted);
    let out = std::io::stdout().lock();
    if json {
        stackscope_report::write_merged_dump_json(&merged, out)
    } else {
        stackscope_report::write_merged_dump_text(&merged, out)
    }
    .context("cannot write the merged dump")
}

/// The processes of one `dump --json` output: one process, a tree (`{"processes": [...]}`,
/// also what `watch` writes as hang-*.json), or a list of either.
fn dumps_of(value: Value) -> anyhow::Result<Vec<ProcessDump>> {
    match value {
        Value::Array(items) => {
            let mut out = Vec::new();
            for item in items {
                out.extend(dumps_of(item)?);
            }
            Ok(out)
        }
        Value::Object(mut map) if map.contains_key("processes") => {
            let processes = map.remove("processes").unwrap_or(Value::Null);
            Ok(serde_json::from_value(processes)?)
        }
        other => Ok(vec![serde_json::from_value(other)?]),
    }
}

fn file_label(path: &Path) -> String {
    path.file_stem()
        .or_else(|| path.file_name())
        .map(|s| s.to_string_lossy().into_owned())
        .unwrap_or_else(|| path.display().to_string())
}

fn merge_recording_dirs(dirs: &[PathBuf], out_dir: &Path, json: bool) -> anyhow::Result<()> {
    let (inputs, spans): (Vec<RecordingInput>, Vec<RecordingSpan>) = dirs
        .iter()
        .map(|dir| read_recording(dir))
        .collect::<anyhow::Result<Vec<_>>>()?
        .into_iter()
        .unzip();
    let mut merged = merge_recordings(&inputs);
    if merged.all.is_empty() {
        bail!("the recordings hold no samples: nothing to merge");
    }
    // Runs of one host one after another are no peers of each other: `compare` is their tool.
    let runs_of = runs_of_one_host(&spans);
    if runs_of.is_some() {
        merged.most_different = None;
    }
    ensure_writable_dir(out_dir)?;
    let files =
        stackscope_report::write_merged_recordings(out_dir, &merged, dirs, runs_of.as_deref())
            .with_context(|| format!("cannot write the merged report to {}", out_dir.display()))?;
    write_page(out_dir, &merged, dirs, &inputs);
    let mut stdout = std::io::stdout().lock();
    if json {
        serde_json::to_writer_pretty(&mut stdout, &files.summary)?;
        writeln!(stdout)?;
    } else {
        stackscope_report::write_rank_table(&merged, runs_of.as_deref(), &mut stdout)?;
        writeln!(stdout, "\nMerged report: {}", out_dir.display())?;
    }
    Ok(())
}

/// Writes report.html, which needs every recording's sample log (older recordings have none);
/// the other files stand without it, so a log that cannot be read costs the page only.
fn write_page(
    out_dir: &Path,
    merged: &MergedRecordings,
    dirs: &[PathBuf],
    inputs: &[RecordingInput],
) {
    match stackscope_report::write_merged_report_html(out_dir, merged, dirs, inputs) {
        Ok(stackscope_report::MergedHtml::Written(_)) => {}
        Ok(stackscope_report::MergedHtml::NoSampleLog(missing)) => eprintln!(
            "stackscope: no report.html: {} is missing (the recording predates sample logs)",
            missing.display()
        ),
        Err(e) => eprintln!("stackscope: no report.html: {e}"),
    }
}

/// What `merge` reads of a recording directory, and when and where it was made.
fn read_recording(dir: &Path) -> anyhow::Result<(RecordingInput, RecordingSpan)> {
    let summary: Value = std::fs::read(dir.join("summary.json"))
        .ok()
        .and_then(|bytes| serde_json::from_slice(&bytes).ok())
        .with_context(|| {
            format!(
                "{} has no readable summary.json: merge takes the output directories of \
                 `stackscope attach` or `record`",
                dir.display()
            )
        })?;
    let all = read_folded(&dir.join("stacks.folded"))?
        .with_context(|| format!("{} has no stacks.folded", dir.display()))?;
    let u32_of = |v: &Value, key: &str| {
        v.get(key)
            .and_then(Value::as_u64)
            .and_then(|n| u32::try_from(n).ok())
    };
    let process_ranks: HashMap<u32, u32> = summary
        .get("processes")
        .and_then(Value::as_array)
        .into_iter()
        .flatten()
        .filter_map(|p| Some((u32_of(p, "pid")?, u32_of(p, "rank")?)))
        .collect();
    let host = summary
        .get("host")
        .and_then(Value::as_str)
        .map(str::to_owned)
        .unwrap_or_else(|| file_label(dir));
    let span = RecordingSpan {
        host: host.clone(),
        started_at: summary
            .get("started_at")
            .and_then(Value::as_str)
            .unwrap_or_default()
            .to_owned(),
        duration_secs: summary
            .get("duration_secs")
            .and_then(Value::as_f64)
            .unwrap_or(0.0),
    };
    let input = RecordingInput {
        host,
        pid: u32_of(&summary, "pid").unwrap_or(0),
        rank: u32_of(&summary, "rank"),
        process_ranks,
        all,
        gpu_idle: read_folded(&dir.join("stacks-gpu-idle.folded"))?,
        gpu_busy: read_folded(&dir.join("stacks-gpu-busy.folded"))?,
        trainer: trainer_of(&summary),
        bottleneck: bottleneck_of(&summary),
    };
    Ok((input, span))
}

/// The trainer while the GPU idled, from a summary's `gpu.while_idle.trainer`: its pid, and
/// `main (train.py:136) waiting in Queue.get` (the frame alone when it ran there).
fn trainer_of(summary: &Value) -> Option<(u32, String)> {
    let trainer = summary.pointer("/gpu/while_idle/trainer")?;
    let pid = u32::try_from(trainer.get("pid")?.as_u64()?).ok()?;
    let frame = trainer.get("frame")?.as_str()?;
    let line = match trainer.get("waiting_in").and_then(Value::as_str) {
        Some(callee) => {
            // The call's function is what is read; its library file is long and known.
            let function = match callee.rfind(" (") {
                Some(at) if callee.ends_with(')') => &callee[..at],
                _ => callee,
            };
            format!("{frame} waiting in {function}")
        }
        None => frame.to_owned(),
    };
    Some((pid, line))
}

/// `input_pipeline: steps up to 3.4x faster`, from `gpu.if_fixed`.
fn bottleneck_of(summary: &Value) -> Option<String> {
    let fixed = summary.pointer("/gpu/if_fixed")?;
    let bottleneck = fixed.get("bottleneck")?.as_str()?;
    let speedup = fixed.get("speedup_up_to")?.as_f64()?;
    Some(format!("{bottleneck}: steps up to {speedup:.1}x faster"))
}

/// Folded lines `stack COUNT`; `None` when the file is not there.
fn read_folded(path: &Path) -> anyhow::Result<Option<Vec<(String, u64)>>> {
    let text = match std::fs::read_to_string(path) {
        Ok(text) => text,
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => return Ok(None),
        Err(e) => return Err(e).with_context(|| format!("cannot read {}", path.display())),
    };
    Ok(Some(
        text.lines()
            .filter_map(|line| {
                let (stack, count) = line.rsplit_once(' ')?;
                Some((stack.to_owned(), count.parse().ok()?))
            })
            .collect(),
    ))
}

#[cfg(test)]
mod tests {
    use super::*;

    const ONE: &str = r#"{"pid": 7, "command_line": "python t.py", "python_version": "3.11.7",
        "rank": 3, "local_rank": 1, "world_size": 8, "host": "node-a", "threads": []}"#;

    #[test]
    fn one_process_a_tree_a_hang_report_and_a_list_are_all_dumps() {
        let one: Value = serde_json::from_str(ONE).expect("json");
        let dumps = dumps_of(one.clone()).expect("one process");
        assert_eq!(dumps.len(), 1);
        assert_eq!(dumps[0].rank.rank, Some(3));
        assert_eq!(dumps[0].host.as_deref(), Some("node-a"));
        let tree = serde_json::json!({"processes": [one.clone(), one.clone()], "stragglers": []});
        assert_eq!(dumps_of(tree).expect("tree").len(), 2);
        let hang = serde_json::json!({"detected_at": "x", "pid": 1, "processes": [one.clone()]});
        assert_eq!(dumps_of(hang).expect("hang report").len(), 1);
        assert_eq!(
            dumps_of(Value::Array(vec![one.clone(), one]))
                .expect("list")
                .len(),
            2
        );
        assert!(dumps_of(serde_json::json!({"hello": 1})).is_err());
    }

    #[test]
    fn the_trainer_line_comes_from_the_summarys_while_idle() {
        let summary = serde_json::json!({"gpu": {"while_idle": {"trainer": {
            "pid": 448, "thread": "MainThread", "frame": "main (train.py:136)",
            "waiting_in": "_BaseDataLoaderIter.__next__ (torch/utils/data/dataloader.py:741)",
            "share": 0.99}, "feeders": []}}});
        assert_eq!(
            trainer_of(&summary),
            Some((
                448,
                "main (train.py:136) waiting in _BaseDataLoaderIter.__next__".to_owned()
            ))
        );
        let ran = serde_json::json!({"gpu": {"while_idle": {"trainer": {
            "pid": 7, "thread": "MainThread", "frame": "busy (t.py:47)",
            "waiting_in": null, "share": 1.0}}}});
        assert_eq!(trainer_of(&ran), Some((7, "busy (t.py:47)".to_owned())));
        assert_eq!(trainer_of(&serde_json::json!({"gpu": null})), None);
    }
}
