//! `stackscope watch`: stays attached at a low rate for as long as the job runs, and writes a
//! hang report by itself when the job's stacks stop changing.

use std::io::Write;
use std::os::unix::fs::{DirBuilderExt, PermissionsExt};
use std::path::{Path, PathBuf};

use anyhow::Context;
use stackscope_aggregate::{
    find_stragglers, hang_cause, headline, is_spin_wait, works_at_read, HangDetector, HangEvent,
    HangGpu,
};
use stackscope_event::{Batch, ProcessDump, Timestamp};
use stackscope_sampler::{
    dump_process, dump_tree, procfs, ProcessSet, Root, SampleTimer, TargetOptions,
};

mod history;

use history::TreeHistory;

use crate::config::{ensure_writable_dir, WatchConfig};
use crate::metrics::{self, MetricsEndpoint, MetricsState};
use crate::session::{GpuSource, Producers, Session, Wake};
use crate::signals::{Request, Signals};

pub fn run(config: WatchConfig) -> anyhow::Result<()> {
    let signals = Signals::install()?;
    let options = TargetOptions {
        tuning: config.tuning,
        ..TargetOptions::default()
    };
    let root = Root::attach(config.pid, &options, config.subprocesses)?;
    create_private_dir(&config.out_dir)?;
    ensure_writable_dir(&config.out_dir)?;
    // The one fold of the run: the stacks' motion and the GPU's state, which the hang rule
    // reads here and the metrics endpoint (when asked for) serves.
    let endpoint = MetricsEndpoint::serve(
        config.metrics_addr.as_deref(),
        MetricsState::new(config.hang_after_secs, config.gpu.idle_below),
    )?;
    let live = &endpoint.state;
    let mut set = ProcessSet::from_root(root, config.subprocesses, options);
    let mut history = TreeHistory::new(config.pid);
    for target in set.targets() {
        history.appeared(target.pid(), Timestamp::now());
    }
    // The GPU side and the signals; watch reads the stacks itself, at its own low rate.
    let mut session = gpu_session(signals, &config)?;
    let mut detector = HangDetector::new(config.hang_after_secs);
    let mut timer = SampleTimer::new(config.rate_hz);
    announce(&config);
    let mut reports = 0u32;
    while !session.signals().stop_requested() {
        match session.wait(Some(timer.next_tick())) {
            Wake::Batch(batch) => {
                take_gpu_readings(&mut metrics::lock(live), batch);
                continue;
            }
            Wake::Signal(Request::Stop) => break,
            Wake::Deadline => {}
            Wake::Signal(Request::Checkpoint) | Wake::SamplerEnded | Wake::Extra(()) => continue,
        }
        timer.tick_now();
        let now = Timestamp::now();
        history.poll();
        for attached in set.rescan(now) {
            history.appeared(attached.pid, now);
        }
        if read_stacks(&mut set, now, &mut history, &mut metrics::lock(live)).is_none() {
            eprintln!(
                "stackscope: process {} exited; stopped watching",
                config.pid
            );
            break;
        }
        // A launcher that has not started Python yet (or whose Python processes have all
        // ended) has no stacks to be stuck in.
        if set.targets().is_empty() {
            continue;
        }
        let (moved_at, gpu, working) = hang_inputs(&metrics::lock(live), now, &config);
        let Some(moved_at) = moved_at else { continue };
        match detector.observe(now, moved_at, working) {
            Some(HangEvent::Hung { unchanged_secs }) => {
                let hang = Hang {
                    unchanged_secs,
                    frozen_since: moved_at,
                    gpu,
                };
                report_hang(&config, &hang, &history)?;
                reports += 1;
            }
            Some(HangEvent::Resumed) => {
                eprintln!("stackscope: process {} makes progress again", config.pid);
            }
            None => {}
        }
    }
    session.stop();
    eprintln!("stackscope: {reports} hang report(s) written");
    Ok(())
}

/// The session of the GPU side and the signals, without a sampler thread.
fn gpu_session(signals: Signals, config: &WatchConfig) -> anyhow::Result<Session> {
    Session::start(
        signals,
        Producers {
            pid: config.pid,
            gpu: &config.gpu,
            gpu_source: GpuSource::Nvml,
            sampler: None,
        },
    )
}

/// Says on stderr what is watched, at what rate, and where a hang report goes.
fn announce(config: &WatchConfig) {
    eprintln!(
        "stackscope: watching process {} at {} Hz; a hang report goes to {} when its stacks stop \
         changing for {} s",
        config.pid,
        config.rate_hz,
        config.out_dir.display(),
        config.hang_after_secs
    );
}

/// What the hang rule reads at `now`: when the stacks last moved, the GPU's state, and
/// whether any thread works at this read.
fn hang_inputs(
    live: &MetricsState,
    now: Timestamp,
    config: &WatchConfig,
) -> (Option<Timestamp>, HangGpuReading, bool) {
    let gpu = live.gpu().map(|gpu| HangGpuReading {
        idle: gpu.tag_at(now).idle(),
        utilization: gpu.utilization_at(now),
        recent: gpu.recent_means(gpu_window_start(now, config.hang_after_secs)),
    });
    (
        live.last_move(),
        gpu.unwrap_or_default(),
        live.any_working(),
    )
}

/// Writes the hang report, prunes the old ones (a failure there only warns) and says on
/// stdout where the report is.
fn report_hang(config: &WatchConfig, hang: &Hang, history: &TreeHistory) -> anyhow::Result<()> {
    let (path, classified) = write_hang_report(config, hang, history)?;
    if let Err(e) = prune_reports(&config.out_dir, config.keep_reports) {
        eprintln!(
            "stackscope: cannot remove old hang reports from {}: {e:#}",
            config.out_dir.display()
        );
    }
    println!(
        "stackscope: process {} looks hung (stacks unchanged for {:.0} s{}): report {}",
        config.pid,
        hang.unchanged_secs,
        match classified {
            Some(g) => format!(", GPU {}", g.state.name()),
            None => String::new(),
        },
        path.display()
    );
    Ok(())
}

/// Reads every thread's stack in every followed process into `live`, with whether each works
/// at this read (`works_at_read`; the GPU's state now says whether a spin is a GPU wait);
/// processes gone go to `history`. `None` once the root is gone. Threads stopped by someone
/// else count as unchanged.
fn read_stacks(
    set: &mut ProcessSet,
    now: Timestamp,
    history: &mut TreeHistory,
    live: &mut MetricsState,
) -> Option<()> {
    let gpu_busy = live
        .gpu()
        .is_some_and(|gpu| gpu.tag_at(now).idle() == Some(false));
    let mut gone = Vec::new();
    for target in set.targets_mut() {
        let pid = target.pid();
        if procfs::is_stopped(pid) {
            continue;
        }
        match target.read_stacks() {
            Ok(stacks) => {
                for s in &stacks {
                    let spin_wait = s.frames.iter().any(|f| is_spin_wait(&f.function, f.native));
                    let working =
                        works_at_read(s.thread.active, s.thread.owns_gil, spin_wait, gpu_busy);
                    live.observe_stack(pid, s.thread.python_thread_id, &s.frames, now, working);
                }
                let alive: Vec<u64> = stacks.iter().map(|s| s.thread.python_thread_id).collect();
                live.keep_threads(pid, &alive, now);
            }
            Err(_) if !procfs::is_alive(pid) => gone.push(pid),
            // A torn read says nothing about progress.
            Err(_) => live.add_errors(1),
        }
    }
    for pid in gone {
        live.forget(pid, now);
        set.remove(pid, now);
        history.vanished(pid, now);
    }
    set.has_root().then_some(())
}

/// Takes a batch of GPU readings into the run's state: `watch` asks its tagger for the GPU
/// state at the instant it read the stacks, by the recording's rule (the mean of the devices
/// with a reading covering that instant, or the nearest within reach).
fn take_gpu_readings(live: &mut MetricsState, batch: Batch) {
    for event in batch {
        live.observe(&event);
    }
}

/// A hang as found: how long nothing moved, since when, and the GPU over it.
struct Hang {
    unchanged_secs: f64,
    frozen_since: Timestamp,
    gpu: HangGpuReading,
}

/// What the GPU did when a hang was found.
#[derive(Default)]
struct HangGpuReading {
    /// The recording's rule at the instant (`gpu_idle` of the report's JSON).
    idle: Option<bool>,
    /// The devices' mean utilization at the instant (`gpu_mean_utilization`).
    utilization: Option<f32>,
    /// The means of utilization and SM activity over the last few seconds, which classify
    /// the hang; `None` without GPU data.
    recent: Option<(f64, Option<f64>)>,
}

/// The GPU readings that classify a hang are those of the hang's last seconds: as long as
/// --hang-after, within 2 to 5 s (the tagger holds about 5 s of readings, and the poller reads
/// twice a second).
fn gpu_window_start(now: Timestamp, hang_after_secs: f64) -> Timestamp {
    let window = hang_after_secs.clamp(2.0, 5.0);
    Timestamp(now.0.saturating_sub((window * 1e9) as u64))
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

/// Writes the report's two files; gives the text's path and the GPU's class of the hang.
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

fn write_hang_report(
    config: &WatchConfig,
    hang: &Hang,
    history: &TreeHistory,
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
    let cause = hang_cause(
        &processes,
        &history.vanished_since(hang.frozen_since),
        gpu.as_ref(),
    );
    let ended = history.processes_ended();
    let base = report_base(&config.out_dir, &now.format("%Y%m%d-%H%M%S").to_string());
    let mut text = Vec::new();
    // First why, where it can be said; then the facts.
    let why = headline(&cause, &processes, &since.format("%H:%M:%S").to_string());
    writeln!(text, "{why}")?;
    if let Some(gpu) = &gpu {
        writeln!(text, "{}", gpu.sentence())?;
    }
    writeln!(
        text,
        "\nstackscope hang report, {}\nprocess {}: stacks unchanged for {:.0} s",
        now.to_rfc3339(),
        config.pid,
        hang.unchanged_secs,
    )?;
    for p in &ended {
        let (pid, how) = (p.pid, p.how.describe());
        let (role, from, to) = (&p.role, &p.started, &p.ended);
        writeln!(
            text,
            "{role} pid {pid} ended: {how} (seen from {from} to {to})"
        )?;
    }
    writeln!(text)?;
    stackscope_report::write_dump_text(&processes, &mut text)?;
    let json = serde_json::json!({
        "detected_at": now.to_rfc3339(),
        "pid": config.pid,
        "unchanged_secs": hang.unchanged_secs,
        "frozen_since": since.to_rfc3339(),
        "hang_after_secs": config.hang_after_secs,
        "cause": cause,
        "processes_ended": ended,
        "gpu": gpu,
        "gpu_idle": hang.gpu.idle,
        "gpu_mean_utilization": hang.gpu.utilization,
        "stragglers": find_stragglers(&processes),
        "processes": processes,
    });
    let json = serde_json::to_vec_pretty(&json)?;
    let text_path = write_owner_only(&config.out_dir, &format!("{base}.txt"), &text)?;
    write_owner_only(&config.out_dir, &format!("{base}.json"), &json)?;
    Ok((text_path, gpu))
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
fn create_private_dir(dir: &Path) -> anyhow::Result<()> {
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
fn prune_reports(dir: &Path, keep: usize) -> anyhow::Result<()> {
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
    use stackscope_event::{Event, GpuSample};
    use stackscope_testkit::dumps;

    const SEC: u64 = 1_000_000_000;

    fn reading(time: u64, device: u32, utilization: f32) -> Event {
        Event::Gpu(GpuSample {
            time: Timestamp(time),
            device,
            utilization: Some(utilization),
            ..GpuSample::default()
        })
    }

    #[test]
    fn the_gpu_state_at_an_instant_is_the_recordings_rule() {
        let batch = vec![
            reading(SEC, 0, 10.0),
            reading(SEC, 1, 30.0),
            reading(2 * SEC, 0, 90.0),
            reading(2 * SEC, 1, 90.0),
        ];
        let mut live = MetricsState::new(300.0, 30.0);
        take_gpu_readings(&mut live, batch);
        let gpu = live.gpu().expect("watch tags its stacks");
        // The readings covering the instant decide, by the devices' mean: 20% is idle.
        assert_eq!(gpu.tag_at(Timestamp(SEC / 2)).idle(), Some(true));
        assert_eq!(gpu.utilization_at(Timestamp(SEC / 2)), Some(20.0));
        assert_eq!(gpu.tag_at(Timestamp(3 * SEC / 2)).idle(), Some(false));
        // Long after the last reading there is no GPU data: no veto of a hang, whatever the
        // last reading said.
        assert_eq!(gpu.tag_at(Timestamp(10 * SEC)).idle(), None);
    }

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

    #[test]
    fn the_gpu_window_is_the_hangs_last_seconds() {
        let now = Timestamp(100 * SEC);
        assert_eq!(gpu_window_start(now, 1.0), Timestamp(98 * SEC));
        assert_eq!(gpu_window_start(now, 3.0), Timestamp(97 * SEC));
        assert_eq!(gpu_window_start(now, 600.0), Timestamp(95 * SEC));
        assert_eq!(gpu_window_start(Timestamp(SEC), 600.0), Timestamp(0));
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
