//! A hang report: what `watch` writes when the job's stacks stop changing (a text for people
//! and its JSON, both owner-only), and the reports it keeps.

use std::io::Write;
use std::os::unix::fs::{DirBuilderExt, PermissionsExt};
use std::path::{Path, PathBuf};

use anyhow::Context;
use chrono::{DateTime, Local};
use serde::Serialize;
use stackscope_aggregate::{
    find_stragglers, hang_cause, headline, is_spin_wait, HangCause, HangGpu, LateStart,
};
use stackscope_event::{ProcessDump, ProcessEnded, Timestamp};
use stackscope_sampler::{dump_process, dump_tree, TargetOptions};

use super::history::Past;
use super::memory::MemoryClimb;
use crate::config::WatchConfig;

/// A hang as found: how long nothing moved, since when, and the GPU over it.
pub(super) struct Hang {
    pub unchanged_secs: f64,
    pub frozen_since: Timestamp,
    pub gpu: HangGpuReading,
}

/// What the GPU did when a hang was found.
#[derive(Default)]
pub(super) struct HangGpuReading {
    /// The recording's rule at the instant (`gpu_idle` of the report's JSON).
    pub idle: Option<bool>,
    /// The devices' mean utilization at the instant (`gpu_mean_utilization`).
    pub utilization: Option<f32>,
    /// The means of utilization and SM activity over the last few seconds, which classify
    /// the hang; `None` without GPU data.
    pub recent: Option<(f64, Option<f64>)>,
}

/// Whether any thread of `processes` has a native frame in a CUDA wait or in NCCL: with no
/// GPM reading, such a stack stands for SMs doing nothing.
fn frozen_in_cuda_wait(processes: &[ProcessDump]) -> bool {
    processes
        .iter()
        .flat_map(|p| &p.threads)
        .flat_map(|t| &t.frames)
        .any(|f| is_spin_wait(&f.function, f.native))
}

/// The report's dump: the full picture (native frames under the Python ones, and locals);
/// where those cannot be read (a process whose native stacks cannot be unwound, an
/// interpreter whose locals no reader here reads), the Python stacks alone, rather than no
/// report.
fn dump_for_report(config: &WatchConfig) -> anyhow::Result<Vec<ProcessDump>> {
    let dump = |locals_and_native: bool| -> anyhow::Result<Vec<ProcessDump>> {
        let options = TargetOptions {
            blocking: true,
            locals: locals_and_native,
            native: locals_and_native,
            tuning: config.tuning,
        };
        Ok(if config.subprocesses {
            dump_tree(config.pid, &options)?
        } else {
            vec![dump_process(config.pid, &options)?]
        })
    };
    dump(true).or_else(|full| {
        let stacks = dump(false)?;
        eprintln!("stackscope: the hang report has no locals or native frames: {full:#}");
        Ok(stacks)
    })
}

/// Writes the report's two files; gives the text's path and the GPU's class of the hang.
pub(super) fn write_hang_report(
    config: &WatchConfig,
    hang: &Hang,
    past: &Past,
) -> anyhow::Result<(PathBuf, Option<HangGpu>)> {
    let mut processes = dump_for_report(config)?;
    stackscope_aggregate::in_reading_order(&mut processes);
    let gpu = hang.gpu.recent.map(|(utilization, sm_active)| {
        HangGpu::classify(
            utilization,
            sm_active,
            f64::from(config.gpu.idle_below),
            frozen_in_cuda_wait(&processes),
        )
    });
    // The report stays on disk: secrets stay out of it unless asked for.
    if !config.show_secrets {
        stackscope_report::redact_secrets(&mut processes);
    }
    let now = chrono::Local::now();
    // The wall clock of the last move, from the monotonic one: the dump above may have taken
    // a while on a loaded machine.
    let frozen_for = Timestamp::now().0.saturating_sub(hang.frozen_since.0);
    let since = now - chrono::Duration::milliseconds((frozen_for / 1_000_000) as i64);
    let replaced = past.tree.replaced_before(past.began.wall);
    let mut cause = hang_cause(
        &processes,
        &past.tree.vanished_since(hang.frozen_since),
        &replaced,
        gpu.as_ref(),
    );
    cause.name_lock_holders(&processes, stackscope_sampler::rlock_owner);
    let facts = Facts {
        now,
        since,
        unseen: Unseen {
            watching_since: past.began.wall,
            frozen_before: past.began.frozen_before(hang.frozen_since),
            replaced,
        },
        cause,
        gpu,
        ended: ended_with_memory(past),
        processes,
    };
    let base = report_base(&config.out_dir, &now.format("%Y%m%d-%H%M%S").to_string());
    let text = report_text(config, hang, &facts)?;
    let json = serde_json::to_vec_pretty(&report_json(config, hang, &facts))?;
    let text_path = write_owner_only(&config.out_dir, &format!("{base}.txt"), &text)?;
    write_owner_only(&config.out_dir, &format!("{base}.json"), &json)?;
    Ok((text_path, facts.gpu))
}

/// What a report says, gathered once for its text and its JSON.
struct Facts {
    now: DateTime<Local>,
    /// When the stacks last moved, on the wall clock.
    since: DateTime<Local>,
    unseen: Unseen,
    cause: HangCause,
    gpu: Option<HangGpu>,
    ended: Vec<Ended>,
    processes: Vec<ProcessDump>,
}

/// What the watch could not see: what happened before it began, of which the start times of
/// the processes still there tell a part.
struct Unseen {
    watching_since: DateTime<Local>,
    /// Nothing moved while watched: the job may have been stuck for long before.
    frozen_before: bool,
    /// Workers that replaced one that ended before the watch began.
    replaced: Vec<LateStart>,
}

impl Unseen {
    /// When the job last moved, as the first line says it: `08:58:40`, or `before 08:58:12,
    /// when watching began` where nothing moved while watched.
    fn since(&self, since: &DateTime<Local>) -> String {
        if self.frozen_before {
            format!(
                "before {}, when watching began",
                clock(&self.watching_since)
            )
        } else {
            clock(since)
        }
    }

    /// "watching since 08:58:12; what happened before is unknown", and the workers that
    /// replaced one then.
    fn write(&self, text: &mut Vec<u8>) -> std::io::Result<()> {
        writeln!(
            text,
            "watching since {}; what happened before is unknown",
            clock(&self.watching_since)
        )?;
        for late in &self.replaced {
            writeln!(text, "{}", late.sentence())?;
        }
        Ok(())
    }
}

fn clock(at: &DateTime<Local>) -> String {
    at.format("%H:%M:%S").to_string()
}

/// The report's text: first why, where it can be said; then the facts.
fn report_text(config: &WatchConfig, hang: &Hang, facts: &Facts) -> anyhow::Result<Vec<u8>> {
    let mut text = Vec::new();
    let since = facts.unseen.since(&facts.since);
    writeln!(text, "{}", headline(&facts.cause, &facts.processes, &since))?;
    if let Some(gpu) = &facts.gpu {
        writeln!(text, "{}", gpu.sentence())?;
    }
    writeln!(
        text,
        "\nstackscope hang report, {}\nprocess {}: stacks unchanged for {:.0} s{}",
        facts.now.to_rfc3339(),
        config.pid,
        hang.unchanged_secs,
        if facts.unseen.frozen_before {
            " (all the time it was watched)"
        } else {
            ""
        },
    )?;
    facts.unseen.write(&mut text)?;
    for Ended { ended: p, memory } in &facts.ended {
        let (pid, how) = (p.pid, p.how.describe());
        let (role, from, to) = (&p.role, &p.started, &p.ended);
        writeln!(
            text,
            "{role} pid {pid} ended: {how} (seen from {from} to {to})"
        )?;
        if let Some(memory) = memory {
            writeln!(text, "  its memory: {}", memory.sentence())?;
        }
    }
    writeln!(text)?;
    let notes = stackscope_report::DumpNotes::default();
    stackscope_report::write_dump_text(&facts.processes, &notes, &mut text)?;
    Ok(text)
}

fn report_json(config: &WatchConfig, hang: &Hang, facts: &Facts) -> serde_json::Value {
    serde_json::json!({
        "detected_at": facts.now.to_rfc3339(),
        "pid": config.pid,
        "unchanged_secs": hang.unchanged_secs,
        "frozen_since": facts.since.to_rfc3339(),
        "frozen_before_watching": facts.unseen.frozen_before,
        "watching_since": facts.unseen.watching_since.to_rfc3339(),
        "replaced_before_watching": facts.unseen.replaced,
        "hang_after_secs": config.hang_after_secs,
        "cause": facts.cause,
        "processes_ended": facts.ended,
        "gpu": facts.gpu,
        "gpu_idle": hang.gpu.idle,
        "gpu_mean_utilization": hang.gpu.utilization,
        "stragglers": find_stragglers(&facts.processes),
        "processes": facts.processes,
    })
}

/// `processes_ended`, each with its memory's climb where the memory poller read it.
fn ended_with_memory(past: &Past) -> Vec<Ended> {
    past.tree
        .processes_ended()
        .into_iter()
        .map(|ended| Ended {
            memory: past.memory.climb(ended.pid),
            ended,
        })
        .collect()
}

/// One entry of `processes_ended`: how the process ended, and its memory's last minutes.
#[derive(Serialize)]
struct Ended {
    #[serde(flatten)]
    ended: ProcessEnded,
    #[serde(skip_serializing_if = "Option::is_none")]
    memory: Option<MemoryClimb>,
}

/// `hang-STAMP`, or `hang-STAMP-2`, `-3`... where a report of the same second is there.
fn report_base(dir: &Path, stamp: &str) -> String {
    let taken = |base: &str| {
        dir.join(format!("{base}.txt")).exists() || dir.join(format!("{base}.json")).exists()
    };
    let mut base = format!("hang-{stamp}");
    let mut n = 2u32;
    while taken(&base) {
        base = format!("hang-{stamp}-{n}");
        n += 1;
    }
    base
}

/// Writes `name` atomically, readable by its owner only (0600): a hang report holds the
/// job's locals. The temporary file is made 0600 before a byte goes in, and renamed so.
fn write_owner_only(dir: &Path, name: &str, bytes: &[u8]) -> anyhow::Result<PathBuf> {
    Ok(stackscope_report::write_atomic(dir, name, |w| {
        w.get_ref()
            .set_permissions(std::fs::Permissions::from_mode(0o600))?;
        Ok(w.write_all(bytes)?)
    })?)
}

/// Creates watch's output directory owner-only (0700) when it is not there; one that is
/// there keeps its mode.
pub(super) fn create_private_dir(dir: &Path) -> anyhow::Result<()> {
    if dir.exists() {
        return Ok(());
    }
    std::fs::DirBuilder::new()
        .recursive(true)
        .mode(0o700)
        .create(dir)
        .with_context(|| format!("cannot write to output directory {}", dir.display()))
}

/// Removes the oldest hang reports (`hang-*.txt` and `hang-*.json`, by pairs) of `dir` beyond
/// the newest `keep`.
pub(super) fn prune_reports(dir: &Path, keep: usize) -> anyhow::Result<()> {
    let mut bases: Vec<String> = Vec::new();
    for entry in std::fs::read_dir(dir)? {
        let name = entry?.file_name();
        let Some(name) = name.to_str() else { continue };
        let base = name
            .strip_suffix(".txt")
            .or_else(|| name.strip_suffix(".json"));
        if let Some(base) = base.filter(|b| b.starts_with("hang-")) {
            if !bases.iter().any(|b| b == base) {
                bases.push(base.to_owned());
            }
        }
    }
    if bases.len() <= keep {
        return Ok(());
    }
    bases.sort_by_key(|b| report_order(b));
    for base in &bases[..bases.len() - keep] {
        for ext in ["txt", "json"] {
            match std::fs::remove_file(dir.join(format!("{base}.{ext}"))) {
                Err(e) if e.kind() != std::io::ErrorKind::NotFound => return Err(e.into()),
                _ => {}
            }
        }
    }
    Ok(())
}

/// Reports in the order written: `hang-STAMP` before `hang-STAMP-2` before `hang-STAMP-10`.
fn report_order(base: &str) -> (String, u32) {
    let stamp_len = "hang-YYYYmmdd-HHMMSS".len();
    match (base.get(..stamp_len), base.get(stamp_len..)) {
        (Some(stamp), Some(rest)) => (
            stamp.to_owned(),
            rest.strip_prefix('-')
                .and_then(|n| n.parse().ok())
                .unwrap_or(if rest.is_empty() { 1 } else { u32::MAX }),
        ),
        _ => (base.to_owned(), 0),
    }
}
#[cfg(test)]
mod tests {
    use super::*;
    use stackscope_testkit::dumps;

    fn frame(function: &str, native: bool) -> stackscope_event::FrameDump {
        if native {
            stackscope_event::FrameDump {
                native: true,
                ..dumps::frame(function, "libcudart.so", 0)
            }
        } else {
            dumps::frame(function, "train.py", 7)
        }
    }

    fn process(frames: Vec<stackscope_event::FrameDump>) -> ProcessDump {
        let main = stackscope_event::ThreadDump {
            active: true,
            ..dumps::thread("MainThread", 1, Default::default(), frames)
        };
        dumps::process(1, "python3 train.py", vec![main])
    }

    #[test]
    fn a_native_cuda_wait_or_collective_is_a_frozen_stack() {
        for wait in [
            "cudaStreamSynchronize",
            "cuEventSynchronize",
            "ncclAllReduce",
            "c10d::ProcessGroupNCCL::WorkNCCL::wait",
        ] {
            let p = process(vec![frame(wait, true), frame("step", false)]);
            assert!(frozen_in_cuda_wait(&[p]), "{wait}");
        }
        // A Python function of that name is no native wait; names are case-sensitive.
        let p = process(vec![frame("cudaDeviceSynchronize", false)]);
        assert!(!frozen_in_cuda_wait(&[p]));
        let p = process(vec![frame("NCCL_helper", true), frame("futex_wait", true)]);
        assert!(!frozen_in_cuda_wait(&[p]));
    }

    fn names(dir: &Path) -> Vec<String> {
        let mut names: Vec<String> = std::fs::read_dir(dir)
            .expect("read dir")
            .map(|e| e.expect("entry").file_name().to_string_lossy().into_owned())
            .collect();
        names.sort();
        names
    }

    #[test]
    fn the_oldest_reports_beyond_keep_go_by_pairs() {
        let tmp = tempfile::tempdir().expect("tempdir");
        let dir = tmp.path();
        for base in [
            "hang-20240101-120000",
            "hang-20240101-120000-2",
            "hang-20240101-120000-10",
            "hang-20240102-090000",
        ] {
            std::fs::write(dir.join(format!("{base}.txt")), "t").expect("write");
            std::fs::write(dir.join(format!("{base}.json")), "j").expect("write");
        }
        // Not reports: left alone.
        std::fs::write(dir.join("notes.txt"), "n").expect("write");
        std::fs::write(dir.join("hang-notes.md"), "n").expect("write");
        prune_reports(dir, 4).expect("prune");
        assert_eq!(names(dir).len(), 10, "nothing beyond 4 reports");
        prune_reports(dir, 2).expect("prune");
        assert_eq!(
            names(dir),
            vec![
                "hang-20240101-120000-10.json",
                "hang-20240101-120000-10.txt",
                "hang-20240102-090000.json",
                "hang-20240102-090000.txt",
                "hang-notes.md",
                "notes.txt",
            ]
        );
        // A lone half of a pair counts as a report too.
        std::fs::remove_file(dir.join("hang-20240102-090000.txt")).expect("rm");
        prune_reports(dir, 1).expect("prune");
        assert_eq!(
            names(dir),
            vec!["hang-20240102-090000.json", "hang-notes.md", "notes.txt"]
        );
    }

    #[test]
    fn a_job_that_never_moved_while_watched_is_stuck_since_before_the_watch() {
        let began = chrono::Local::now();
        let unseen = |frozen_before| Unseen {
            watching_since: began,
            frozen_before,
            replaced: Vec::new(),
        };
        let later = began + chrono::Duration::seconds(30);
        assert_eq!(unseen(false).since(&later), clock(&later));
        assert_eq!(
            unseen(true).since(&later),
            format!("before {}, when watching began", clock(&began))
        );
        let mut text = Vec::new();
        unseen(true).write(&mut text).expect("write");
        assert_eq!(
            String::from_utf8(text).expect("utf-8"),
            format!(
                "watching since {}; what happened before is unknown\n",
                clock(&began)
            )
        );
    }

    #[test]
    fn a_second_report_in_the_same_second_gets_a_new_name() {
        let tmp = tempfile::tempdir().expect("tempdir");
        let dir = tmp.path();
        assert_eq!(report_base(dir, "20240101-120000"), "hang-20240101-120000");
        std::fs::write(dir.join("hang-20240101-120000.json"), "j").expect("write");
        assert_eq!(
            report_base(dir, "20240101-120000"),
            "hang-20240101-120000-2"
        );
    }

    #[test]
    fn reports_are_owner_only_in_an_owner_only_directory() {
        let tmp = tempfile::tempdir().expect("tempdir");
        let dir = tmp.path().join("a/hangs");
        create_private_dir(&dir).expect("create");
        let mode = |p: &Path| std::fs::metadata(p).expect("metadata").permissions().mode() & 0o777;
        assert_eq!(mode(&dir), 0o700);
        let path = write_owner_only(&dir, "hang-x.txt", b"report").expect("write");
        assert_eq!(mode(&path), 0o600);
        assert_eq!(std::fs::read(&path).expect("read"), b"report");
        // A directory that is there keeps its mode.
        let shared = tmp.path().join("shared");
        std::fs::create_dir(&shared).expect("mkdir");
        std::fs::set_permissions(&shared, std::fs::Permissions::from_mode(0o755)).expect("chmod");
        create_private_dir(&shared).expect("there");
        assert_eq!(mode(&shared), 0o755);
    }
}
