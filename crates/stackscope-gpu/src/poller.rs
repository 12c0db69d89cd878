//! The poller thread: opens NVML, picks the devices, and polls them at a fixed interval until
//! told to stop, sending every reading to the aggregator without ever blocking. The thread,
//! its schedule, the hand-over and the drop count are the shared producer's
//! ([`stackscope_event::producer`]); what is here is what a poll reads.

use std::path::Path;
use std::sync::atomic::AtomicBool;
use std::sync::{Arc, Mutex, MutexGuard};
use std::time::{Duration, Instant};

use crossbeam_channel::Sender;
use nvml_wrapper::error::NvmlError;
use nvml_wrapper::{Device, Nvml};
use serde::Serialize;
use stackscope_event::producer::{FirstPoll, Flow, Producer, Schedule, Ticker};
use stackscope_event::{Batch, Event, Timestamp};

use crate::clock::ClockOffset;
use crate::config::{GpuConfig, GpuSelection};
use crate::devices::{choose, lists_any, read_info, GpuDeviceInfo};
use crate::error::GpuError;
use crate::gpm::GpmReader;
use crate::metric::Metric;
use crate::poll::DeviceState;

/// The target's pids (the process and its descendants), asked again whenever needed.
pub type TargetPids = Arc<dyn Fn() -> Vec<u32> + Send + Sync>;

/// The handle of a running poller.
///
/// Stopping is the caller's: set the `stop` flag given to [`GpuPoller::start`], then
/// [`GpuPoller::join`]. The thread makes one last poll after it sees the flag, so the driver
/// samples of the recording's final moments are not lost. Dropping the handle without joining
/// leaves the thread running until the flag is set.
pub struct GpuPoller {
    devices: Vec<GpuDeviceInfo>,
    /// The devices polled now, which the thread changes in `Auto`.
    current: Arc<Mutex<Vec<GpuDeviceInfo>>>,
    /// What choosing the devices had to say, before the thread's own notices.
    start_notices: Vec<String>,
    producer: Producer,
}

/// What the poller reports when it ends.
#[derive(Debug, Clone, Default, PartialEq, Serialize)]
pub struct PollerReport {
    /// The devices polled at the end (in `Auto`, narrowed to the target's once it showed up).
    pub devices: Vec<GpuDeviceInfo>,
    /// Readings the channel refused because it was full.
    pub dropped: u64,
    /// One line per metric switched off, device lost, or change of devices.
    pub notices: Vec<String>,
    /// Polls made (each reads every polled device once).
    pub polls: u64,
}

fn lock<T>(mutex: &Mutex<T>) -> MutexGuard<'_, T> {
    // The data is plain lists; a panic while one was held leaves nothing half-updated worth
    // refusing to read.
    mutex
        .lock()
        .unwrap_or_else(|poisoned| poisoned.into_inner())
}

impl GpuPoller {
    /// Opens NVML, picks the devices and starts the poller thread.
    ///
    /// Fails when there will be no GPU data: no library, init failed, no devices, a listed index
    /// that does not exist. The caller then says so in one line and records stacks alone.
    pub fn start(
        config: &GpuConfig,
        target_pids: TargetPids,
        sender: Sender<Batch>,
        stop: Arc<AtomicBool>,
    ) -> Result<GpuPoller, GpuError> {
        if config.selection == GpuSelection::Off {
            return Err(GpuError::Disabled);
        }
        let nvml = open(&config.library())?;
        let count = nvml.device_count().map_err(GpuError::Count)?;
        if count == 0 {
            return Err(GpuError::NoDevices);
        }
        let clock = ClockOffset::measure();
        let since_us = clock.to_wall_us(Timestamp::now());
        let mut notices = Vec::new();

        let mut states = device_states(&nvml, count, &config.selection, since_us, &mut notices)?;
        let handles = open_handles(&nvml, count);
        let with_target = if config.selection == GpuSelection::Auto {
            devices_with_target(&handles, &mut states, &target_pids(), &mut notices)
        } else {
            Vec::new()
        };
        drop(handles);
        // Without the host's pids the target is found on no device: say why, once.
        if let (GpuSelection::Auto, Some(why), true) = (
            &config.selection,
            &config.unmatched_pids,
            with_target.is_empty(),
        ) {
            notices.push(format!("{why}; polling all visible devices"));
        }
        let mut polled = choose(&config.selection, count, &with_target)?;
        polled.retain(|&index| states.get(index as usize).is_some_and(Option::is_some));
        if polled.is_empty() {
            return Err(GpuError::NoDevices);
        }
        let devices = infos(&states, &polled);

        let current = Arc::new(Mutex::new(devices.clone()));
        let worker = Worker {
            auto: config.selection == GpuSelection::Auto,
            pids_match: config.unmatched_pids.is_none() || !with_target.is_empty(),
            remap_interval: config.remap_interval,
            clock,
            states,
            polled,
            target_pids,
            current: Arc::clone(&current),
        };
        // The driver's ring covers the time since the previous poll: nothing to read at once.
        let schedule = Schedule::every(config.poll_interval, FirstPoll::AfterInterval);
        let producer = Producer::spawn("stackscope-gpu", schedule, sender, stop, move |ticker| {
            worker.run(nvml, &ticker)
        })
        .map_err(GpuError::Spawn)?;
        Ok(GpuPoller {
            devices,
            current,
            start_notices: notices,
            producer,
        })
    }

    /// The devices chosen at start.
    pub fn devices(&self) -> &[GpuDeviceInfo] {
        &self.devices
    }

    /// The devices polled now (differs from [`GpuPoller::devices`] once `Auto` narrowed).
    pub fn current_devices(&self) -> Vec<GpuDeviceInfo> {
        lock(&self.current).clone()
    }

    /// Readings the channel refused so far.
    pub fn dropped(&self) -> u64 {
        self.producer.dropped()
    }

    /// The notices so far, oldest first.
    pub fn notices(&self) -> Vec<String> {
        let mut notices = self.start_notices.clone();
        notices.extend(self.producer.notices());
        notices
    }

    /// Polls made so far.
    pub fn polls(&self) -> u64 {
        self.producer.polls()
    }

    /// Waits for the thread (after the caller set `stop`) and reports.
    pub fn join(self) -> PollerReport {
        let GpuPoller {
            current,
            mut start_notices,
            producer,
            ..
        } = self;
        let report = producer.join();
        start_notices.extend(report.notices);
        if report.panicked {
            start_notices.push("the GPU poller thread failed; GPU data ends early".into());
        }
        let devices = lock(&current).clone();
        PollerReport {
            devices,
            dropped: report.dropped,
            notices: start_notices,
            polls: report.polls,
        }
    }
}

/// Loads and initializes NVML from `lib`, naming the failure.
fn open(lib: &Path) -> Result<Nvml, GpuError> {
    Nvml::builder()
        .lib_path(lib.as_os_str())
        .init()
        .map_err(|error| match error {
            NvmlError::LibloadingError(e) => GpuError::Load {
                lib: lib.to_path_buf(),
                reason: without_prefix(&e.to_string(), lib),
            },
            NvmlError::FailedToLoadSymbol(reason) => GpuError::NotNvml {
                lib: lib.to_path_buf(),
                reason: without_prefix(&reason, lib),
            },
            source => GpuError::Init {
                lib: lib.to_path_buf(),
                source,
            },
        })
}

/// dlerror's text starts with the path, which the message already names.
fn without_prefix(reason: &str, lib: &Path) -> String {
    let prefix = format!("{}: ", lib.display());
    reason.strip_prefix(&prefix).unwrap_or(reason).to_string()
}

/// A state for every device, not only the chosen ones (`Auto` may switch to others); `None`
/// for one that cannot be opened, which is an error only when the selection names it.
fn device_states(
    nvml: &Nvml,
    count: u32,
    selection: &GpuSelection,
    since_us: u64,
    notices: &mut Vec<String>,
) -> Result<Vec<Option<DeviceState>>, GpuError> {
    let mut states = Vec::with_capacity(count as usize);
    for index in 0..count {
        match nvml.device_by_index(index) {
            Ok(device) => states.push(Some(DeviceState::new(read_info(index, &device), since_us))),
            Err(source) => {
                if let GpuSelection::Devices(list) = selection {
                    if list.contains(&index) {
                        return Err(GpuError::Device { index, source });
                    }
                }
                notices.push(format!(
                    "device {index} cannot be opened ({source}); skipping it"
                ));
                states.push(None);
            }
        }
    }
    Ok(states)
}

fn open_handles(nvml: &Nvml, count: u32) -> Vec<Option<Device<'_>>> {
    (0..count).map(|i| nvml.device_by_index(i).ok()).collect()
}

fn infos(states: &[Option<DeviceState>], indices: &[u32]) -> Vec<GpuDeviceInfo> {
    indices
        .iter()
        .filter_map(|&i| states.get(i as usize)?.as_ref().map(|s| s.info.clone()))
        .collect()
}

/// The devices whose process lists show any of `pids`.
fn devices_with_target(
    handles: &[Option<Device<'_>>],
    states: &mut [Option<DeviceState>],
    pids: &[u32],
    notices: &mut Vec<String>,
) -> Vec<u32> {
    if pids.is_empty() {
        return Vec::new();
    }
    let mut found = Vec::new();
    for (handle, state) in handles.iter().zip(states.iter_mut()) {
        if let (Some(device), Some(state)) = (handle, state) {
            if lists_any(device, &mut state.metrics, notices, pids) == Some(true) {
                found.push(state.info.index);
            }
        }
    }
    found
}

/// Everything the poller thread owns.
struct Worker {
    auto: bool,
    /// Whether NVML lists the target under the pids we know it by: false while stackscope,
    /// in a PID namespace of its own, has found the target on no device yet.
    pids_match: bool,
    remap_interval: Duration,
    clock: ClockOffset,
    states: Vec<Option<DeviceState>>,
    polled: Vec<u32>,
    target_pids: TargetPids,
    current: Arc<Mutex<Vec<GpuDeviceInfo>>>,
}

impl Worker {
    /// The thread's body: the device handles and GPM readers borrow `nvml`, so they live here,
    /// around the producer's loop, and go before the library shuts down.
    fn run(mut self, nvml: Nvml, ticker: &Ticker) {
        let handles = open_handles(&nvml, self.states.len() as u32);
        let mut gpm: Vec<GpmReader<'_>> = handles.iter().map(|_| GpmReader::new()).collect();
        let mut next_remap = Instant::now() + self.remap_interval;
        ticker.run(|tick| {
            if self.auto && !tick.last && Instant::now() >= next_remap {
                self.remap(&handles, tick.notices);
                next_remap = Instant::now() + self.remap_interval;
            }
            // One hand-over per poll, whatever the number of devices and readings.
            *tick.batch = self.poll_once(&handles, &mut gpm, tick.notices);
            if self.all_lost() {
                Flow::Stop
            } else {
                Flow::Continue
            }
        });
        // GPM samples are freed through the library: before it shuts down.
        drop(gpm);
        drop(handles);
        // Shutting down explicitly; an error here changes nothing for the recording.
        let _ = nvml.shutdown();
    }

    /// Reads every chosen device once.
    fn poll_once<'nvml>(
        &mut self,
        handles: &[Option<Device<'nvml>>],
        gpm: &mut [GpmReader<'nvml>],
        notices: &mut Vec<String>,
    ) -> Batch {
        let wants_pids = self.polled.iter().any(|&i| {
            self.state(i)
                .is_some_and(|s| s.metrics.is_on(Metric::ProcessUtilization))
        });
        let pids = if wants_pids && self.pids_match {
            (self.target_pids)()
        } else {
            Vec::new()
        };
        for (index, reader) in gpm.iter_mut().enumerate() {
            if !self.polled.contains(&(index as u32)) {
                reader.reset();
            }
        }
        let mut batch = Batch::new();
        for &index in &self.polled {
            let (Some(Some(device)), Some(Some(state)), Some(gpm)) = (
                handles.get(index as usize),
                self.states.get_mut(index as usize),
                gpm.get_mut(index as usize),
            ) else {
                continue;
            };
            if state.metrics.is_lost() {
                continue;
            }
            batch.extend(
                state
                    .poll(device, gpm, &pids, self.clock, notices)
                    .into_iter()
                    .map(Event::Gpu),
            );
        }
        batch
    }

    /// `Auto`: narrows (or moves) polling to the devices the target now shows up on. While it
    /// shows up nowhere the current choice stays, so a job that closed its context keeps its
    /// GPU in the timeline.
    fn remap(&mut self, handles: &[Option<Device<'_>>], notices: &mut Vec<String>) {
        let pids = (self.target_pids)();
        let found = devices_with_target(handles, &mut self.states, &pids, notices);
        self.pids_match |= !found.is_empty();
        if found.is_empty() || found == self.polled {
            return;
        }
        let list: Vec<String> = found.iter().map(u32::to_string).collect();
        notices.push(format!(
            "the target appeared on device {}; polling only {} from now on",
            list.join(", "),
            if found.len() == 1 { "it" } else { "those" }
        ));
        self.polled = found;
        *lock(&self.current) = infos(&self.states, &self.polled);
    }

    fn state(&self, index: u32) -> Option<&DeviceState> {
        self.states.get(index as usize)?.as_ref()
    }

    fn all_lost(&self) -> bool {
        self.polled
            .iter()
            .all(|&i| self.state(i).is_none_or(|s| s.metrics.is_lost()))
    }
}
