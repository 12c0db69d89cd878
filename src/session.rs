//! One session: the producers every command that watches a live target starts (the sampler
//! thread, the GPU poller, the memory poller, the signal handlers), their one channel, their
//! stop flag and their threads. `attach`, `record`, `top` and `watch` only consume what it hands them.
//!
//! Producers hand over batches ([`stackscope_sampler::batch`]), never block, and count what a
//! full channel refuses. The consumer waits in [`Session::wait`] on the data, the signals and
//! the sampler's end at once, with a deadline only where it has a real one (a checkpoint, a
//! refresh, a watch tick): it wakes when there is something to do, never to poll.
//!
//! Dropping the session stops the producers and joins them, whatever way the command ends,
//! so the target is never left stopped and no thread outlives its command.

use std::path::PathBuf;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;
use std::time::Instant;

use anyhow::Context;
use crossbeam_channel::{never, select, Receiver};
use stackscope_event::Batch;
use stackscope_sampler::{Root, Sampler, SamplerConfig, SamplerReport, SamplerStats};

use crate::config::GpuSettings;
use crate::gpu::{GpuHandle, GpuReport};
use crate::memory::{MemoryHandle, MemoryReport};
use crate::signals::{Request, Signals};

/// Batches the channel holds: the sampler sends four to sixteen a second (every 250 ms or
/// 64 samples), the GPU poller one per poll, the memory poller two a second, so this is well
/// over a minute of all three; the producers never wait while the consumer writes a checkpoint
/// or draws.
pub const CHANNEL_CAPACITY: usize = 1024;

/// Where a session's GPU readings come from.
pub enum GpuSource {
    /// NVML, as `--gpu` and `--nvml-lib` say.
    Nvml,
    /// `stackscope demo`'s simulated GPU, following the phases its loop writes to this file.
    Simulated(PathBuf),
}

/// What to start.
pub struct Producers<'a> {
    /// The process the GPU and memory sides follow (with its descendants).
    pub pid: u32,
    pub gpu: &'a GpuSettings,
    pub gpu_source: GpuSource,
    /// `--memory-rate`: memory readings per second; 0 is off.
    pub memory_rate_hz: f64,
    /// The sampler and what it reads; `None` for a consumer that reads stacks itself
    /// (`watch`, at its own low rate).
    pub sampler: Option<(Root, SamplerConfig)>,
}

/// Why [`Session::wait`] returned.
pub enum Wake<K> {
    /// Events from a producer.
    Batch(Batch),
    /// A signal: stop, or write a checkpoint.
    Signal(Request),
    /// The sampler ended by itself (the target exited, `--duration` passed, sampling could not
    /// go on). Said once.
    SamplerEnded,
    /// Something arrived on the consumer's own channel (`top`'s keys).
    Extra(K),
    /// The deadline passed.
    Deadline,
}

/// What the producers reported when they stopped.
pub struct Stopped {
    /// `None` without a sampler, or when it was stopped before.
    pub sampler: Option<SamplerReport>,
    pub gpu: GpuReport,
    pub memory: MemoryReport,
}

pub struct Session {
    signals: Signals,
    batches: Receiver<Batch>,
    stop: Arc<AtomicBool>,
    sampler: Option<Sampler>,
    /// The sampler's end, until it has been said; then a channel that never fires.
    sampler_done: Receiver<()>,
    sampler_stats: Arc<SamplerStats>,
    gpu: Option<GpuHandle>,
    gpu_enabled: bool,
    memory: Option<MemoryHandle>,
}

impl Session {
    /// Starts the GPU and memory sides, then the sampler. `signals` are installed by the
    /// caller before anything else, so that Ctrl-C during a slow attach is answered too.
    pub fn start(signals: Signals, producers: Producers<'_>) -> anyhow::Result<Session> {
        let (sender, batches) = crossbeam_channel::bounded(CHANNEL_CAPACITY);
        let stop = Arc::new(AtomicBool::new(false));
        let gpu = match producers.gpu_source {
            GpuSource::Nvml => {
                GpuHandle::start(producers.gpu, producers.pid, sender.clone(), stop.clone())
            }
            GpuSource::Simulated(phase_file) => {
                GpuHandle::simulated(phase_file, sender.clone(), stop.clone())
            }
        };
        let gpu_enabled = gpu.is_enabled();
        let memory = MemoryHandle::start(
            producers.memory_rate_hz,
            producers.pid,
            sender.clone(),
            stop.clone(),
        );
        let mut session = Session {
            signals,
            batches,
            stop: stop.clone(),
            sampler: None,
            sampler_done: never(),
            sampler_stats: Arc::new(SamplerStats::default()),
            gpu: Some(gpu),
            gpu_enabled,
            memory: Some(memory),
        };
        if let Some((root, config)) = producers.sampler {
            let sampler = Sampler::spawn(root, config, sender, stop)
                .context("cannot start the sampling thread")?;
            session.sampler_done = sampler.done().clone();
            session.sampler_stats = sampler.stats().clone();
            session.sampler = Some(sampler);
        }
        Ok(session)
    }

    /// Waits for the next thing to do, until `deadline` if there is one.
    pub fn wait(&mut self, deadline: Option<Instant>) -> Wake<()> {
        self.wait_with(deadline, &never())
    }

    /// [`Session::wait`], also waking for what arrives on `extra`.
    pub fn wait_with<K>(&mut self, deadline: Option<Instant>, extra: &Receiver<K>) -> Wake<K> {
        let timeout = match deadline {
            Some(at) => crossbeam_channel::at(at),
            None => never(),
        };
        let mut extra = extra.clone();
        loop {
            let mut batches_gone = false;
            select! {
                recv(self.batches) -> batch => match batch {
                    Ok(batch) => return Wake::Batch(batch),
                    // Every producer is gone: the sampler's end is said on its own channel.
                    Err(_) => batches_gone = true,
                },
                recv(self.signals.arrivals()) -> request => {
                    return Wake::Signal(request.unwrap_or(Request::Stop));
                },
                recv(self.sampler_done) -> _ => {
                    self.sampler_done = never();
                    return Wake::SamplerEnded;
                },
                recv(extra) -> item => match item {
                    Ok(item) => return Wake::Extra(item),
                    Err(_) => extra = never(),
                },
                recv(timeout) -> _ => return Wake::Deadline,
            }
            if batches_gone {
                self.batches = never();
            }
        }
    }

    /// The batches already waiting, without waiting for more.
    pub fn waiting(&self) -> impl Iterator<Item = Batch> + '_ {
        self.batches.try_iter()
    }

    /// The sampler's live counters (all zero without a sampler).
    pub fn sampler_stats(&self) -> &SamplerStats {
        &self.sampler_stats
    }

    /// Whether the GPU side runs (NVML found, or the demo's simulated device).
    pub fn gpu_enabled(&self) -> bool {
        self.gpu_enabled
    }

    /// What the GPU side knows so far.
    pub fn gpu_snapshot(&self) -> Option<GpuReport> {
        self.gpu.as_ref().map(GpuHandle::snapshot)
    }

    /// What the memory side knows so far (its drops and notices).
    pub fn memory_snapshot(&self) -> MemoryReport {
        self.memory
            .as_ref()
            .map(MemoryHandle::snapshot)
            .unwrap_or_default()
    }

    pub fn signals(&self) -> &Signals {
        &self.signals
    }

    /// Stops the producers and waits for them. Once it returns, everything they sent is on the
    /// channel ([`Session::waiting`]).
    pub fn stop(&mut self) -> Stopped {
        self.stop.store(true, Ordering::Relaxed);
        let sampler = self.sampler.take().map(Sampler::join);
        let gpu = match self.gpu.take() {
            Some(gpu) => gpu.join(),
            None => GpuReport::unavailable("the GPU side was stopped"),
        };
        let memory = self
            .memory
            .take()
            .map(MemoryHandle::join)
            .unwrap_or_default();
        Stopped {
            sampler,
            gpu,
            memory,
        }
    }

    /// Whether the producers are still running.
    #[cfg(test)]
    fn running(&self) -> bool {
        self.sampler.is_some() || self.gpu.is_some() || self.memory.is_some()
    }
}

impl Drop for Session {
    fn drop(&mut self) {
        self.stop.store(true, Ordering::Relaxed);
        if let Some(sampler) = self.sampler.take() {
            sampler.join();
        }
        if let Some(gpu) = self.gpu.take() {
            gpu.join();
        }
        if let Some(memory) = self.memory.take() {
            memory.join();
        }
    }
}

#[cfg(test)]
mod tests;
