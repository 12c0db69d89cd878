//! The session against a real Python process: what the sampler sends arrives whole, and
//! dropping the session ends the producers and leaves the target running.

use std::path::PathBuf;
use std::process::{Child, Command};
use std::sync::atomic::Ordering;
use std::time::{Duration, Instant};

use stackscope_event::Event;
use stackscope_gpu::GpuSelection;
use stackscope_sampler::{procfs, Root, SamplerConfig, StopReason, TargetOptions};

use super::{GpuSource, Producers, Session, Wake};
use crate::config::GpuSettings;
use crate::signals::Signals;

/// A Python process with one busy thread; killed on Drop.
struct Target {
    child: Child,
    _dir: tempfile::TempDir,
}

impl Drop for Target {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

fn python_target() -> Target {
    let dir = tempfile::tempdir().expect("a temporary directory");
    let ready: PathBuf = dir.path().join("ready");
    let script = format!(
        "import os\n\
         def spin_here():\n    \
             while True:\n        \
                 sum(range(100))\n\
         open({ready:?} + '.tmp', 'w').close()\n\
         os.replace({ready:?} + '.tmp', {ready:?})\n\
         spin_here()\n",
        ready = ready.display().to_string()
    );
    let child = Command::new("python3")
        .args(["-c", &script])
        .spawn()
        .expect("python3 runs");
    let deadline = Instant::now() + Duration::from_secs(30);
    while !ready.exists() {
        assert!(Instant::now() < deadline, "the target never became ready");
        std::thread::sleep(Duration::from_millis(10));
    }
    Target { child, _dir: dir }
}

fn start(target: &Target, rate_hz: f64) -> Session {
    let options = TargetOptions {
        blocking: true,
        locals: false,
        native: false,
        tuning: crate::config::reader_tuning_from_env(),
    };
    let pid = target.child.id();
    let root = Root::attach(pid, &options, false).expect("attaches to python3");
    let gpu = GpuSettings {
        selection: GpuSelection::Off,
        nvml_lib: None,
        idle_below: 30.0,
    };
    Session::start(
        Signals::install().expect("signal handlers"),
        Producers {
            pid,
            gpu: &gpu,
            gpu_source: GpuSource::Nvml,
            memory_rate_hz: stackscope_memory::DEFAULT_RATE_HZ,
            sampler: Some((
                root,
                SamplerConfig {
                    rate_hz,
                    duration: None,
                    follow_children: false,
                    options,
                },
            )),
        },
    )
    .expect("the session starts")
}

fn stacks_in(batch: &[Event]) -> u64 {
    batch
        .iter()
        .filter(|e| matches!(e, Event::Stack(s) if s.frames.iter().any(|f| &*f.function == "spin_here")))
        .count() as u64
}

#[test]
fn dropping_the_session_ends_the_producers_and_leaves_the_target_running() {
    let target = python_target();
    let pid = target.child.id();
    let mut session = start(&target, 200.0);
    let done = session.sampler.as_ref().expect("a sampler").done().clone();
    // Wait for the first batch with a stack in it: the sampler runs and reads.
    let deadline = Instant::now() + Duration::from_secs(30);
    let mut seen = 0;
    while seen == 0 {
        match session.wait(Some(deadline)) {
            Wake::Batch(batch) => seen += stacks_in(&batch),
            Wake::Deadline => panic!("no stack within 30 s"),
            _ => {}
        }
    }
    assert!(session.running());
    let stats = session.sampler_stats.clone();
    drop(session);
    // The sampling thread has ended (its end channel is disconnected)...
    assert!(matches!(
        done.try_recv(),
        Err(crossbeam_channel::TryRecvError::Disconnected)
    ));
    let ticks = stats.ticks.load(Ordering::Relaxed);
    std::thread::sleep(Duration::from_millis(50));
    assert_eq!(
        stats.ticks.load(Ordering::Relaxed),
        ticks,
        "no tick after the drop"
    );
    // ...and the target runs on, not stopped by a ptrace stop left behind.
    assert!(procfs::is_alive(pid));
    assert!(!procfs::is_stopped(pid));
}

#[test]
fn stopping_hands_over_every_sample_sent_in_batches() {
    let target = python_target();
    let mut session = start(&target, 500.0);
    let mut batches = 0u64;
    let mut received = 0u64;
    let deadline = Instant::now() + Duration::from_secs(60);
    // Enough samples for several batches, whether cut by count or by age.
    while received < 300 {
        match session.wait(Some(deadline)) {
            Wake::Batch(batch) => {
                batches += 1;
                received += stacks_in(&batch);
            }
            Wake::Deadline => panic!("only {received} stacks within 60 s"),
            _ => {}
        }
    }
    let stopped = session.stop();
    // The last partial batch went out as the sampler stopped.
    for batch in session.waiting() {
        batches += 1;
        received += stacks_in(&batch);
    }
    let report = stopped.sampler.expect("the sampler's report");
    assert_eq!(report.stop, StopReason::Requested);
    assert_eq!(report.dropped, 0);
    assert_eq!(received, report.stacks_sent, "every stack sent arrived");
    // Batched: far fewer hand-overs than samples (one thread, one stack a sample).
    assert!(
        batches * 4 <= received,
        "{batches} batches for {received} samples"
    );
}

#[test]
fn the_memory_side_reads_the_target_beside_the_sampler() {
    let target = python_target();
    let pid = target.child.id();
    let mut session = start(&target, 100.0);
    let deadline = Instant::now() + Duration::from_secs(30);
    let mut readings = 0;
    let mut with_rollup = 0;
    while readings < 3 {
        match session.wait(Some(deadline)) {
            Wake::Batch(batch) => {
                for event in &batch {
                    if let Event::Memory(m) = event {
                        assert_eq!(m.pid, pid);
                        assert!(m.rss_bytes > 0);
                        readings += 1;
                        with_rollup += usize::from(m.private_bytes.is_some());
                    }
                }
            }
            Wake::Deadline => panic!("only {readings} memory readings within 30 s"),
            _ => {}
        }
    }
    // The first reading of a process has its smaps_rollup.
    assert!(with_rollup >= 1);
    let stopped = session.stop();
    assert_eq!(stopped.memory.dropped, 0);
    assert!(!session.running());
}
