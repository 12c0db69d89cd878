//! `stackscope watch`: stays attached at a low rate for as long as the job runs, and writes a
//! hang report by itself when the job's stacks stop changing.

use stackscope_aggregate::{is_spin_wait, works_at_read, HangDetector, HangEvent};
use stackscope_event::{Batch, Timestamp};
use stackscope_sampler::{procfs, ProcessSet, Root, SampleTimer, TargetOptions};

mod history;
mod memory;
mod report;

use history::Past;
use memory::MemoryHistory;
use report::{create_private_dir, prune_reports, write_hang_report, Hang, HangGpuReading};

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
    let mut past = Past::new(config.pid);
    for target in set.targets() {
        past.appeared(target.pid(), Timestamp::now());
    }
    // The GPU and memory sides and the signals; watch reads the stacks itself, at its own low
    // rate.
    let mut session = pollers_session(signals, &config)?;
    let mut detector = HangDetector::new(config.hang_after_secs);
    let mut timer = SampleTimer::new(config.rate_hz);
    announce(&config);
    let mut reports = 0u32;
    while !session.signals().stop_requested() {
        match session.wait(Some(timer.next_tick())) {
            Wake::Batch(batch) => {
                take_batch(&mut metrics::lock(live), &mut past.memory, batch);
                continue;
            }
            Wake::Signal(Request::Stop) => break,
            Wake::Deadline => {}
            Wake::Signal(Request::Checkpoint) | Wake::SamplerEnded | Wake::Extra(()) => continue,
        }
        timer.tick_now();
        let now = Timestamp::now();
        past.tree.poll();
        past.memory.prune(now);
        for attached in set.rescan(now) {
            past.appeared(attached.pid, now);
        }
        if read_stacks(&mut set, now, &mut past, &mut metrics::lock(live)).is_none() {
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
        past.read_at(now);
        let (moved_at, gpu, working) = hang_inputs(&metrics::lock(live), now, &config);
        let Some(moved_at) = moved_at else { continue };
        match detector.observe(now, moved_at, working) {
            Some(HangEvent::Hung { unchanged_secs }) => {
                let hang = Hang {
                    unchanged_secs,
                    frozen_since: moved_at,
                    gpu,
                };
                report_hang(&config, &hang, &past)?;
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

/// The session of the GPU and memory pollers and the signals, without a sampler thread.
fn pollers_session(signals: Signals, config: &WatchConfig) -> anyhow::Result<Session> {
    Session::start(
        signals,
        Producers {
            pid: config.pid,
            gpu: &config.gpu,
            gpu_source: GpuSource::Nvml,
            memory_rate_hz: config.memory_rate_hz,
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
fn report_hang(config: &WatchConfig, hang: &Hang, past: &Past) -> anyhow::Result<()> {
    let (path, classified) = write_hang_report(config, hang, past)?;
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
/// and what each process ran into its memory's history; processes gone go to `past`. `None`
/// once the root is gone. Threads stopped by someone else count as unchanged.
fn read_stacks(
    set: &mut ProcessSet,
    now: Timestamp,
    past: &mut Past,
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
                past.memory.read(pid, now, &stacks);
            }
            Err(_) if !procfs::is_alive(pid) => gone.push(pid),
            // A torn read says nothing about progress.
            Err(_) => live.add_errors(1),
        }
    }
    for pid in gone {
        live.forget(pid, now);
        set.remove(pid, now);
        past.vanished(pid, now);
    }
    set.has_root().then_some(())
}

/// Takes a batch of readings into the run's state: `watch` asks its tagger for the GPU state
/// at the instant it read the stacks, by the recording's rule (the mean of the devices with a
/// reading covering that instant, or the nearest within reach); memory readings go to the
/// processes' memory history too, for the climb of one that vanishes.
fn take_batch(live: &mut MetricsState, memory: &mut MemoryHistory, batch: Batch) {
    for event in batch {
        memory.observe(&event);
        live.observe(&event);
    }
}

/// The GPU readings that classify a hang are those of the hang's last seconds: as long as
/// --hang-after, within 2 to 5 s (the tagger holds about 5 s of readings, and the poller reads
/// twice a second).
fn gpu_window_start(now: Timestamp, hang_after_secs: f64) -> Timestamp {
    let window = hang_after_secs.clamp(2.0, 5.0);
    Timestamp(now.0.saturating_sub((window * 1e9) as u64))
}

#[cfg(test)]
mod tests {
    use super::*;
    use stackscope_event::{Event, GpuSample};

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
        take_batch(&mut live, &mut MemoryHistory::default(), batch);
        let gpu = live.gpu().expect("watch tags its stacks");
        // The readings covering the instant decide, by the devices' mean: 20% is idle.
        assert_eq!(gpu.tag_at(Timestamp(SEC / 2)).idle(), Some(true));
        assert_eq!(gpu.utilization_at(Timestamp(SEC / 2)), Some(20.0));
        assert_eq!(gpu.tag_at(Timestamp(3 * SEC / 2)).idle(), Some(false));
        // Long after the last reading there is no GPU data: no veto of a hang, whatever the
        // last reading said.
        assert_eq!(gpu.tag_at(Timestamp(10 * SEC)).idle(), None);
    }

    #[test]
    fn the_gpu_window_is_the_hangs_last_seconds() {
        let now = Timestamp(100 * SEC);
        assert_eq!(gpu_window_start(now, 1.0), Timestamp(98 * SEC));
        assert_eq!(gpu_window_start(now, 3.0), Timestamp(97 * SEC));
        assert_eq!(gpu_window_start(now, 600.0), Timestamp(95 * SEC));
        assert_eq!(gpu_window_start(Timestamp(SEC), 600.0), Timestamp(0));
    }
}
