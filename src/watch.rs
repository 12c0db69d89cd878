//! `stackscope watch`: stays attached at a low rate for as long as the job runs, and writes a
//! hang report by itself when the job's stacks stop changing.

use std::collections::hash_map::DefaultHasher;
use std::hash::{Hash, Hasher};
use std::io::Write;
use std::path::PathBuf;

use stackscope_aggregate::{find_stragglers, GpuTagger, HangDetector, HangEvent};
use stackscope_event::{Batch, Event, ProcessDump, Timestamp};
use stackscope_sampler::{
    dump_process, dump_tree, procfs, ProcessSet, Root, SampleTimer, TargetOptions, ThreadStack,
};

use crate::config::{ensure_writable_dir, WatchConfig};
use crate::metrics::{self, MetricsEndpoint, SharedMetrics};
use crate::session::{GpuSource, Producers, Session, Wake};
use crate::signals::{Request, Signals};

pub fn run(config: WatchConfig) -> anyhow::Result<()> {
    let signals = Signals::install()?;
    let options = TargetOptions::default();
    let root = Root::attach(config.pid, &options, config.subprocesses)?;
    ensure_writable_dir(&config.out_dir)?;
    let metrics = MetricsEndpoint::start(
        config.metrics_addr.as_deref(),
        config.hang_after_secs,
        config.gpu.idle_below,
    )?;
    let metrics = metrics.as_ref().map(|m| &m.state);
    let mut set = ProcessSet::from_root(root, config.subprocesses, options);
    // The GPU side and the signals; watch reads the stacks itself, at its own low rate.
    let mut session = Session::start(
        signals,
        Producers {
            pid: config.pid,
            gpu: &config.gpu,
            gpu_source: GpuSource::Nvml,
            sampler: None,
        },
    )?;
    let mut gpu_state = GpuTagger::<()>::new(config.gpu.idle_below);
    let mut detector = HangDetector::new(config.hang_after_secs);
    // A busy loop that spends most of its time on a few lines repeats a stack by chance now and
    // then; a hang must be seen unchanged at least this many times, whatever --hang-after is.
    let rate_hz = config
        .rate_hz
        .max((MIN_UNCHANGED_SAMPLES / config.hang_after_secs).min(10.0));
    let mut timer = SampleTimer::new(rate_hz);
    eprintln!(
        "stackscope: watching process {} at {} Hz; a hang report goes to {} when its stacks stop \
         changing for {} s",
        config.pid,
        rate_hz,
        config.out_dir.display(),
        config.hang_after_secs
    );
    let mut reports = 0u32;
    while !session.signals().stop_requested() {
        match session.wait(Some(timer.next_tick())) {
            Wake::Batch(batch) => {
                take_gpu_readings(&mut gpu_state, batch, metrics);
                continue;
            }
            Wake::Signal(Request::Stop) => break,
            Wake::Deadline => {}
            Wake::Signal(Request::Checkpoint) | Wake::SamplerEnded | Wake::Extra(()) => continue,
        }
        timer.tick_now();
        let now = Timestamp::now();
        set.rescan(now);
        let Some(signature) = read_signature(&mut set, now, metrics) else {
            eprintln!(
                "stackscope: process {} exited; stopped watching",
                config.pid
            );
            break;
        };
        // A launcher that has not started Python yet (or whose Python processes have all
        // ended) has no stacks to be stuck in.
        if set.targets().is_empty() {
            continue;
        }
        let gpu_idle = gpu_state.tag_at(now).idle();
        match detector.observe(now, signature) {
            Some(HangEvent::Hung { unchanged_secs }) => {
                let utilization = gpu_state.utilization_at(now);
                let path = write_hang_report(&config, unchanged_secs, gpu_idle, utilization)?;
                reports += 1;
                println!(
                    "stackscope: process {} looks hung (stacks unchanged for {:.0} s{}): report {}",
                    config.pid,
                    unchanged_secs,
                    if gpu_idle == Some(true) {
                        ", GPU idle"
                    } else {
                        ""
                    },
                    path.display()
                );
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

/// Unchanged samples a hang needs at the least.
const MIN_UNCHANGED_SAMPLES: f64 = 6.0;

/// A fingerprint of every thread's stack in every followed process; `None` once the root is
/// gone. Threads stopped by someone else count as unchanged.
fn read_signature(
    set: &mut ProcessSet,
    now: Timestamp,
    metrics: Option<&SharedMetrics>,
) -> Option<u64> {
    let mut threads: Vec<ThreadKey> = Vec::new();
    let mut gone = Vec::new();
    let mut metrics = metrics.map(metrics::lock);
    for target in set.targets_mut() {
        let pid = target.pid();
        if procfs::is_stopped(pid) {
            continue;
        }
        match target.read_stacks() {
            Ok(stacks) => {
                if let Some(m) = metrics.as_mut() {
                    for s in &stacks {
                        m.observe_stack(pid, s.thread.python_thread_id, &s.frames, now);
                    }
                }
                threads.extend(stacks.into_iter().map(|s| key(pid, s)))
            }
            Err(_) if !procfs::is_alive(pid) => gone.push(pid),
            // A torn read says nothing about progress.
            Err(_) => {
                if let Some(m) = metrics.as_mut() {
                    m.add_errors(1);
                }
            }
        }
    }
    for pid in gone {
        if let Some(m) = metrics.as_mut() {
            m.forget(pid);
        }
        set.remove(pid, now);
    }
    if !set.has_root() {
        return None;
    }
    threads.sort();
    let mut hasher = DefaultHasher::new();
    threads.hash(&mut hasher);
    Some(hasher.finish())
}

/// A thread and where it is: process, Python thread id, and each frame's function, file, line.
type ThreadKey = (u32, u64, Vec<(String, String, u32)>);

fn key(pid: u32, stack: ThreadStack) -> ThreadKey {
    (
        pid,
        stack.thread.python_thread_id,
        stack
            .frames
            .iter()
            .map(|f| (f.function.to_string(), f.file.to_string(), f.line))
            .collect(),
    )
}

/// Takes a batch of GPU readings into the tagger that tags a recording's
/// samples: `watch` asks it for the GPU state at the instant it read the stacks, by the same
/// rule (the mean of the devices with a reading covering that instant, or the nearest within
/// reach).
fn take_gpu_readings(gpu: &mut GpuTagger<()>, batch: Batch, metrics: Option<&SharedMetrics>) {
    let mut metrics = metrics.map(metrics::lock);
    for event in batch {
        if let Some(m) = metrics.as_mut() {
            m.observe(&event);
        }
        if let Event::Gpu(sample) = event {
            gpu.add_gpu(&sample);
        }
    }
    // Nothing is held: releasing only forgets readings too old to matter.
    gpu.release(|_, (), _| {});
}

fn write_hang_report(
    config: &WatchConfig,
    unchanged_secs: f64,
    gpu_idle: Option<bool>,
    gpu_utilization: Option<f32>,
) -> anyhow::Result<PathBuf> {
    // The report is the full picture: native frames under the Python ones, and locals.
    let options = TargetOptions {
        blocking: true,
        locals: true,
        native: true,
    };
    let processes: Vec<ProcessDump> = if config.subprocesses {
        dump_tree(config.pid, &options)?
    } else {
        vec![dump_process(config.pid, &options)?]
    };
    let now = chrono::Local::now();
    let stamp = now.format("%Y%m%d-%H%M%S");
    let base = format!("hang-{stamp}");
    let mut text = Vec::new();
    writeln!(
        text,
        "stackscope hang report, {}\nprocess {}: stacks unchanged for {:.0} s{}\n",
        now.to_rfc3339(),
        config.pid,
        unchanged_secs,
        match (gpu_idle, gpu_utilization) {
            (Some(true), Some(m)) => format!(", GPU idle ({m:.0}% utilization)"),
            (Some(false), Some(m)) => format!(", GPU busy ({m:.0}% utilization)"),
            _ => String::new(),
        }
    )?;
    stackscope_report::write_dump_text(&processes, &mut text)?;
    let json = serde_json::json!({
        "detected_at": now.to_rfc3339(),
        "pid": config.pid,
        "unchanged_secs": unchanged_secs,
        "hang_after_secs": config.hang_after_secs,
        "gpu_idle": gpu_idle,
        "gpu_mean_utilization": gpu_utilization,
        "stragglers": find_stragglers(&processes),
        "processes": processes,
    });
    let json = serde_json::to_vec_pretty(&json)?;
    let text_path = write_atomic(&config.out_dir, &format!("{base}.txt"), &text)?;
    write_atomic(&config.out_dir, &format!("{base}.json"), &json)?;
    Ok(text_path)
}

fn write_atomic(dir: &std::path::Path, name: &str, bytes: &[u8]) -> anyhow::Result<PathBuf> {
    Ok(stackscope_report::write_atomic(dir, name, |w| {
        Ok(w.write_all(bytes)?)
    })?)
}

#[cfg(test)]
mod tests {
    use super::*;
    use stackscope_event::GpuSample;

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
        let mut gpu = GpuTagger::<()>::new(30.0);
        take_gpu_readings(&mut gpu, batch, None);
        // The readings covering the instant decide, by the devices' mean: 20% is idle.
        assert_eq!(gpu.tag_at(Timestamp(SEC / 2)).idle(), Some(true));
        assert_eq!(gpu.utilization_at(Timestamp(SEC / 2)), Some(20.0));
        assert_eq!(gpu.tag_at(Timestamp(3 * SEC / 2)).idle(), Some(false));
        // Long after the last reading there is no GPU data: no veto of a hang, whatever the
        // last reading said.
        assert_eq!(gpu.tag_at(Timestamp(10 * SEC)).idle(), None);
    }
}
