//! The fake driver's state between `nvmlInit` and `nvmlShutdown`, and its sampling thread.
//!
//! Like the real library, init is reference-counted: every `nvmlInit` needs its `nvmlShutdown`,
//! and the state (script, rings, thread) lives from the first init to the last shutdown. The
//! thread is always joined at the last shutdown, because the caller may `dlclose` the library
//! right after it, and a thread still running unloaded code would crash the process.

use std::sync::atomic::{AtomicBool, AtomicU32, Ordering};
use std::sync::{Arc, Mutex, MutexGuard};
use std::thread::JoinHandle;
use std::time::{Duration, Instant, SystemTime, UNIX_EPOCH};

use crate::ffi::{self, NvmlDevice, NvmlReturn};
use crate::pattern::PatternState;
use crate::ring::{Ring, Tick};
use crate::script::{Call, DeviceScript, Script};

/// What every call sees while NVML is initialized.
pub struct Shared {
    pub started: Instant,
    pub script: Script,
    pub devices: Vec<FakeDevice>,
}

pub struct FakeDevice {
    pub index: u32,
    pub script: DeviceScript,
    pub name: String,
    pub uuid: String,
    /// The global and the per-device `unsupported` lists together.
    unsupported: Vec<Call>,
    pub ring: Mutex<Ring>,
    /// `nvmlGpmSampleGet` calls so far (`gpm.lost_after_samples` counts them).
    pub gpm_samples: AtomicU32,
    /// Set by the GPM sample call that finds the device lost (`gpm.lost_after_samples`).
    pub gpm_lost: AtomicBool,
    /// The GPM counters: SM activity, occupancy, tensor activity and DRAM bandwidth summed
    /// over the ticks so far. Like the real counters, a metric between two samples is the
    /// difference of these over the ticks between them: the mean over the interval.
    pub gpm_counters: Mutex<GpmCounters>,
}

struct Runtime {
    refs: u32,
    shared: Arc<Shared>,
    stop: Arc<AtomicBool>,
    ticker: Option<JoinHandle<()>>,
}

static RUNTIME: Mutex<Option<Runtime>> = Mutex::new(None);

/// Locks ignoring poison: a panic elsewhere must not turn every later C call into a panic
/// (a panic cannot cross the C boundary).
pub fn lock<T>(mutex: &Mutex<T>) -> MutexGuard<'_, T> {
    mutex
        .lock()
        .unwrap_or_else(|poisoned| poisoned.into_inner())
}

/// `nvmlInit`: the first call reads the script and starts the sampling thread.
pub fn init() -> NvmlReturn {
    let mut runtime = lock(&RUNTIME);
    if let Some(rt) = runtime.as_mut() {
        rt.refs += 1;
        return ffi::SUCCESS;
    }
    let script = match Script::from_env() {
        Ok(script) => script,
        Err(message) => {
            // The only way to tell a test author why init failed: the caller sees a code.
            eprintln!("fake-nvml: {message}");
            return ffi::ERROR_UNKNOWN;
        }
    };
    if script.fail_init {
        return ffi::ERROR_DRIVER_NOT_LOADED;
    }
    let shared = Arc::new(Shared::new(script));
    let stop = Arc::new(AtomicBool::new(false));
    let ticker = spawn_ticker(Arc::clone(&shared), Arc::clone(&stop));
    *runtime = Some(Runtime {
        refs: 1,
        shared,
        stop,
        ticker,
    });
    ffi::SUCCESS
}

/// `nvmlShutdown`: the last call stops and joins the sampling thread.
pub fn shutdown() -> NvmlReturn {
    let finished = {
        let mut runtime = lock(&RUNTIME);
        match runtime.as_mut() {
            None => return ffi::ERROR_UNINITIALIZED,
            Some(rt) if rt.refs > 1 => {
                rt.refs -= 1;
                return ffi::SUCCESS;
            }
            Some(_) => runtime.take(),
        }
    };
    if let Some(rt) = finished {
        rt.stop.store(true, Ordering::SeqCst);
        if let Some(handle) = rt.ticker {
            handle.thread().unpark();
            let _ = handle.join();
        }
    }
    ffi::SUCCESS
}

/// The current state, or UNINITIALIZED.
pub fn shared() -> Result<Arc<Shared>, NvmlReturn> {
    lock(&RUNTIME)
        .as_ref()
        .map(|rt| Arc::clone(&rt.shared))
        .ok_or(ffi::ERROR_UNINITIALIZED)
}

/// The handle NVML gives out for device `index`: never null, and never a real address.
pub fn handle_of(index: usize) -> NvmlDevice {
    (index + 1) as NvmlDevice
}

/// Runs `f` on the device behind `handle` when the call is allowed: initialized, a valid handle,
/// the device not lost, and `call` (if any) not scripted as unsupported.
pub fn with_device(
    handle: NvmlDevice,
    call: Option<Call>,
    f: impl FnOnce(&Shared, &FakeDevice) -> NvmlReturn,
) -> NvmlReturn {
    let shared = match shared() {
        Ok(shared) => shared,
        Err(code) => return code,
    };
    let Some(device) = (handle as usize)
        .checked_sub(1)
        .and_then(|index| shared.devices.get(index))
    else {
        return ffi::ERROR_INVALID_ARGUMENT;
    };
    if device.is_lost(shared.started.elapsed()) {
        return ffi::ERROR_GPU_IS_LOST;
    }
    if call.is_some_and(|call| device.unsupported.contains(&call)) {
        return ffi::ERROR_NOT_SUPPORTED;
    }
    f(&shared, device)
}

impl Shared {
    fn new(script: Script) -> Shared {
        let devices = script
            .devices
            .iter()
            .enumerate()
            .map(|(index, dev)| FakeDevice {
                index: index as u32,
                name: dev.name(index),
                uuid: dev.uuid(index),
                unsupported: script
                    .unsupported
                    .iter()
                    .chain(dev.unsupported.iter())
                    .copied()
                    .collect(),
                script: dev.clone(),
                ring: Mutex::new(Ring::new(script.ring_capacity)),
                gpm_samples: AtomicU32::new(0),
                gpm_lost: AtomicBool::new(false),
                gpm_counters: Mutex::new(GpmCounters::default()),
            })
            .collect();
        Shared {
            started: Instant::now(),
            script,
            devices,
        }
    }
}

impl FakeDevice {
    pub fn is_lost(&self, elapsed: Duration) -> bool {
        let lost_by_time = self
            .script
            .lost_after_s
            .is_some_and(|after| elapsed.as_secs_f64() >= after);
        lost_by_time || self.gpm_lost.load(Ordering::SeqCst)
    }

    /// The newest tick (what the "current" utilization calls report).
    pub fn latest(&self) -> Tick {
        lock(&self.ring).latest().unwrap_or(Tick {
            time_us: wall_clock_us(),
            gpu: 0,
            memory: 0,
        })
    }
}

/// Running sums of the four GPM values over the ticker's ticks, and the newest values.
#[derive(Debug, Clone, Copy, Default)]
pub struct GpmCounters {
    pub sums: [f64; 4],
    pub ticks: u64,
    pub latest: [f64; 4],
}

impl GpmCounters {
    /// The mean of each value over the ticks since `earlier`; the newest values when no tick
    /// came between.
    pub fn mean_since(&self, earlier: &GpmCounters) -> [f64; 4] {
        let ticks = self.ticks.saturating_sub(earlier.ticks);
        if ticks == 0 {
            return self.latest;
        }
        let mut mean = [0.0; 4];
        for (i, m) in mean.iter_mut().enumerate() {
            *m = (self.sums[i] - earlier.sums[i]) / ticks as f64;
        }
        mean
    }
}

/// Wall-clock microseconds, the time base of NVML's sample timestamps.
pub fn wall_clock_us() -> u64 {
    SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .map(|d| d.as_micros() as u64)
        .unwrap_or(0)
}

/// Takes the first tick now, so the ring is never empty after init, then starts the thread that
/// keeps filling every device's ring; `None` if the thread cannot be spawned (the rings then keep
/// that one tick).
fn spawn_ticker(shared: Arc<Shared>, stop: Arc<AtomicBool>) -> Option<JoinHandle<()>> {
    let mut ticker = Ticker::new(&shared);
    ticker.tick(&shared);
    std::thread::Builder::new()
        .name("fake-nvml-ticker".into())
        .spawn(move || ticker.run(&shared, &stop))
        .ok()
}

/// The sampling thread's state: each device's patterns and the last timestamp used.
struct Ticker {
    patterns: Vec<(PatternState, PatternState)>,
    /// Per device, its four GPM patterns (none without `gpm`).
    gpm: Vec<Vec<PatternState>>,
    last_us: u64,
}

impl Ticker {
    fn new(shared: &Shared) -> Ticker {
        let patterns = shared
            .devices
            .iter()
            .map(|d| {
                (
                    PatternState::new(d.script.utilization.clone()),
                    PatternState::new(d.script.memory_utilization.clone()),
                )
            })
            .collect();
        let gpm = shared
            .devices
            .iter()
            .map(|d| {
                d.script
                    .gpm
                    .iter()
                    .flat_map(|g| [&g.sm_active, &g.sm_occupancy, &g.tensor_active, &g.dram_bw])
                    .map(|p| PatternState::new(p.clone()))
                    .collect()
            })
            .collect();
        Ticker {
            patterns,
            gpm,
            last_us: 0,
        }
    }

    /// Pushes one sample per device, stamped now.
    fn tick(&mut self, shared: &Shared) {
        let elapsed = shared.started.elapsed();
        // Timestamps strictly increase, so "newer than lastSeen" never skips or repeats a tick.
        let time_us = wall_clock_us().max(self.last_us + 1);
        self.last_us = time_us;
        for (device, (gpu, memory)) in shared.devices.iter().zip(self.patterns.iter_mut()) {
            let tick = Tick {
                time_us,
                gpu: gpu.value_at(elapsed),
                memory: memory.value_at(elapsed),
            };
            lock(&device.ring).push(tick);
        }
        for (device, patterns) in shared.devices.iter().zip(self.gpm.iter_mut()) {
            if patterns.is_empty() {
                continue;
            }
            let mut counters = lock(&device.gpm_counters);
            for (i, pattern) in patterns.iter_mut().enumerate().take(4) {
                let value = f64::from(pattern.value_at(elapsed));
                counters.sums[i] += value;
                counters.latest[i] = value;
            }
            counters.ticks += 1;
        }
    }

    fn run(mut self, shared: &Shared, stop: &AtomicBool) {
        let period = Duration::from_millis(shared.script.sample_period_ms);
        let mut next = Instant::now() + period;
        loop {
            // Parking lets shutdown wake the thread at once instead of waiting out a period.
            while !stop.load(Ordering::SeqCst) {
                let now = Instant::now();
                if now >= next {
                    break;
                }
                std::thread::park_timeout(next - now);
            }
            if stop.load(Ordering::SeqCst) {
                return;
            }
            self.tick(shared);
            // A fixed schedule rather than sleep(period), so the tick rate does not drift.
            next += period;
            let now = Instant::now();
            if next <= now {
                next = now + period;
            }
        }
    }
}
