//! The GPU side of a recording: starts the NVML poller when asked and able, and turns a
//! machine without NVML into one line of explanation rather than an error.

use std::sync::atomic::AtomicBool;
use std::sync::Arc;

use crossbeam_channel::Sender;
use stackscope_event::Batch;
use stackscope_gpu::{GpuConfig, GpuPoller, GpuSelection};

use crate::config::GpuSettings;

/// What the recording learns from the GPU side when it ends.
pub struct GpuReport {
    pub devices: Vec<stackscope_event::GpuDeviceInfo>,
    /// Why there is no GPU data, when there is none.
    pub unavailable: Option<String>,
    pub notices: Vec<String>,
    pub dropped: u64,
}

pub enum GpuHandle {
    Polling(GpuPoller),
    /// `stackscope demo`'s simulated device, never used elsewhere.
    Simulated(crate::demo::sim_gpu::SimulatedGpu),
    Unavailable(String),
}

impl GpuHandle {
    /// Starts polling the target's GPUs. Never fails: without NVML the recording goes on with
    /// stacks alone and says why once.
    pub fn start(
        settings: &GpuSettings,
        pid: u32,
        sender: Sender<Batch>,
        stop: Arc<AtomicBool>,
    ) -> GpuHandle {
        if matches!(settings.selection, GpuSelection::Off) {
            return GpuHandle::Unavailable("GPU polling is off (--gpu off)".into());
        }
        let config = GpuConfig {
            selection: settings.selection.clone(),
            nvml_lib: settings.nvml_lib.clone(),
            // The pids we hold are those of our /proc: the host's, unless stackscope itself
            // runs in a container.
            unmatched_pids: stackscope_sampler::namespace::nvml_pid_note(),
            ..GpuConfig::default()
        };
        let target_pids = Arc::new(move || process_tree(pid));
        match GpuPoller::start(&config, target_pids, sender, stop) {
            Ok(poller) => GpuHandle::Polling(poller),
            Err(e) => {
                eprintln!("stackscope: GPU data unavailable: {e}");
                GpuHandle::Unavailable(e.to_string())
            }
        }
    }

    /// The simulated GPU of `stackscope demo`, following the phases the loop writes to
    /// `phase_file`.
    pub fn simulated(
        phase_file: std::path::PathBuf,
        sender: Sender<Batch>,
        stop: Arc<AtomicBool>,
    ) -> GpuHandle {
        match crate::demo::sim_gpu::SimulatedGpu::start(phase_file, sender, stop) {
            Ok(gpu) => GpuHandle::Simulated(gpu),
            Err(e) => GpuHandle::Unavailable(format!("cannot start the simulated GPU: {e}")),
        }
    }

    pub fn is_enabled(&self) -> bool {
        matches!(self, GpuHandle::Polling(_) | GpuHandle::Simulated(_))
    }

    /// What the GPU side knows so far, for a checkpoint while it runs.
    pub fn snapshot(&self) -> GpuReport {
        match self {
            GpuHandle::Polling(poller) => GpuReport {
                devices: poller.current_devices(),
                unavailable: None,
                notices: poller.notices(),
                dropped: poller.dropped(),
            },
            GpuHandle::Simulated(gpu) => GpuReport::simulated(gpu.dropped()),
            GpuHandle::Unavailable(why) => GpuReport::unavailable(why),
        }
    }

    pub fn join(self) -> GpuReport {
        match self {
            GpuHandle::Polling(poller) => {
                let report = poller.join();
                GpuReport {
                    devices: report.devices,
                    unavailable: None,
                    notices: report.notices,
                    dropped: report.dropped,
                }
            }
            GpuHandle::Simulated(gpu) => GpuReport::simulated(gpu.join()),
            GpuHandle::Unavailable(why) => GpuReport::unavailable(&why),
        }
    }
}

impl GpuReport {
    fn simulated(dropped: u64) -> GpuReport {
        GpuReport {
            devices: vec![crate::demo::sim_gpu::device_info()],
            unavailable: None,
            notices: vec![crate::demo::sim_gpu::NOTICE.to_owned()],
            dropped,
        }
    }

    pub(crate) fn unavailable(why: &str) -> GpuReport {
        GpuReport {
            devices: Vec::new(),
            unavailable: Some(why.to_owned()),
            notices: Vec::new(),
            dropped: 0,
        }
    }
}

/// The target and its descendants: a training job's CUDA context often lives in a child (and
/// its DataLoader workers' memory in others: the memory side follows the same tree).
pub(crate) fn process_tree(pid: u32) -> Vec<u32> {
    let mut all = vec![pid];
    all.extend(stackscope_sampler::descendants(pid));
    all
}
