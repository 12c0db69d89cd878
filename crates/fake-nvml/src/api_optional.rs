//! The NVML entry points an old or cut-down driver library may lack: the sample ring,
//! per-process utilization, power, clocks and throttle reasons.
//!
//! `fake-nvml-minimal` is built without this module, so its library is missing exactly these
//! symbols, the way an old `libnvidia-ml.so` would be.

use std::ffi::{c_uint, c_ulonglong};

use crate::api::{put, put_array};
use crate::ffi::{self, NvmlDevice, NvmlReturn, ProcessUtilizationSample, Sample, Value};
use crate::ring::Tick;
use crate::script::Call;
use crate::state::{lock, with_device};

/// `nvmlDeviceGetSamples` for GPU and memory utilization, from the device's ring.
///
/// With `samples` null it stores the ring's capacity in `*sample_count` (enough for any later
/// call, as the real driver does); otherwise it copies the ticks newer than
/// `last_seen_time_stamp`, NOT_FOUND when there are none, INSUFFICIENT_SIZE when they do not fit.
#[no_mangle]
pub unsafe extern "C" fn nvmlDeviceGetSamples(
    device: NvmlDevice,
    sample_type: c_uint,
    last_seen_time_stamp: c_ulonglong,
    sample_val_type: *mut c_uint,
    sample_count: *mut c_uint,
    samples: *mut Sample,
) -> NvmlReturn {
    with_device(device, Some(Call::Samples), |_, dev| {
        let pick: fn(&Tick) -> c_uint = match sample_type {
            ffi::GPU_UTILIZATION_SAMPLES => |t| t.gpu,
            ffi::MEMORY_UTILIZATION_SAMPLES => |t| t.memory,
            _ => return ffi::ERROR_NOT_SUPPORTED,
        };
        if sample_count.is_null() {
            return ffi::ERROR_INVALID_ARGUMENT;
        }
        // SAFETY: the caller passes a writable value type (nvml.h).
        let code = unsafe { put(sample_val_type, ffi::VALUE_TYPE_UNSIGNED_INT) };
        if code != ffi::SUCCESS {
            return code;
        }
        let ring = lock(&dev.ring);
        if samples.is_null() {
            // SAFETY: non-null, writable per nvml.h.
            return unsafe { put(sample_count, ring.capacity() as c_uint) };
        }
        let ticks = ring.newer_than(last_seen_time_stamp);
        drop(ring);
        if ticks.is_empty() {
            return ffi::ERROR_NOT_FOUND;
        }
        let items: Vec<Sample> = ticks
            .iter()
            .map(|t| Sample {
                time_stamp: t.time_us,
                sample_value: Value { ui_val: pick(t) },
            })
            .collect();
        // SAFETY: `sample_count` is valid; `samples` holds `*sample_count` entries (nvml.h).
        unsafe { put_array(samples, sample_count, &items) }
    })
}

/// `nvmlDeviceGetProcessUtilization`: one entry per scripted pid with the mean utilization of
/// the ticks newer than `last_seen_time_stamp`, leaving out idle processes as the driver does.
#[no_mangle]
pub unsafe extern "C" fn nvmlDeviceGetProcessUtilization(
    device: NvmlDevice,
    utilization: *mut ProcessUtilizationSample,
    process_samples_count: *mut c_uint,
    last_seen_time_stamp: c_ulonglong,
) -> NvmlReturn {
    with_device(device, Some(Call::ProcessUtilization), |_, dev| {
        if process_samples_count.is_null() {
            return ffi::ERROR_INVALID_ARGUMENT;
        }
        let ticks = lock(&dev.ring).newer_than(last_seen_time_stamp);
        let Some(newest) = ticks.last() else {
            return ffi::ERROR_NOT_FOUND;
        };
        let n = ticks.len() as u64;
        let sm = (ticks.iter().map(|t| u64::from(t.gpu)).sum::<u64>() / n) as c_uint;
        let mem = (ticks.iter().map(|t| u64::from(t.memory)).sum::<u64>() / n) as c_uint;
        if sm == 0 && mem == 0 {
            return ffi::ERROR_NOT_FOUND;
        }
        let items: Vec<ProcessUtilizationSample> = dev
            .script
            .processes
            .pids()
            .into_iter()
            .map(|pid| ProcessUtilizationSample {
                pid,
                time_stamp: newest.time_us,
                sm_util: sm,
                mem_util: mem,
                enc_util: 0,
                dec_util: 0,
            })
            .collect();
        if items.is_empty() {
            return ffi::ERROR_NOT_FOUND;
        }
        if utilization.is_null() {
            // SAFETY: non-null, writable per nvml.h.
            unsafe { process_samples_count.write(items.len() as c_uint) };
            return ffi::ERROR_INSUFFICIENT_SIZE;
        }
        // SAFETY: `utilization` holds `*process_samples_count` entries (nvml.h).
        unsafe { put_array(utilization, process_samples_count, &items) }
    })
}

/// `nvmlDeviceGetPowerUsage`, in milliwatts.
#[no_mangle]
pub unsafe extern "C" fn nvmlDeviceGetPowerUsage(
    device: NvmlDevice,
    power: *mut c_uint,
) -> NvmlReturn {
    with_device(device, Some(Call::Power), |_, dev| {
        let milliwatts = (dev.script.power_w.max(0.0) * 1000.0).round() as c_uint;
        // SAFETY: the caller passes a writable value (nvml.h).
        unsafe { put(power, milliwatts) }
    })
}

#[no_mangle]
pub unsafe extern "C" fn nvmlDeviceGetClockInfo(
    device: NvmlDevice,
    clock_type: c_uint,
    clock: *mut c_uint,
) -> NvmlReturn {
    with_device(device, Some(Call::Clock), |_, dev| {
        let mhz = match clock_type {
            ffi::CLOCK_GRAPHICS | ffi::CLOCK_SM => dev.script.sm_clock_mhz,
            ffi::CLOCK_MEM => dev.script.mem_clock_mhz,
            ffi::CLOCK_VIDEO => 1500,
            _ => return ffi::ERROR_INVALID_ARGUMENT,
        };
        // SAFETY: the caller passes a writable value (nvml.h).
        unsafe { put(clock, mhz) }
    })
}

/// `nvmlDeviceGetCurrentClocksThrottleReasons` (the name nvml-wrapper 0.13 calls).
#[no_mangle]
pub unsafe extern "C" fn nvmlDeviceGetCurrentClocksThrottleReasons(
    device: NvmlDevice,
    reasons: *mut c_ulonglong,
) -> NvmlReturn {
    with_device(device, Some(Call::Throttle), |_, dev| {
        let mask = dev.script.throttle_reasons.unwrap_or_else(|| {
            if dev.latest().gpu == 0 {
                ffi::CLOCKS_EVENT_REASON_GPU_IDLE
            } else {
                0
            }
        });
        // SAFETY: the caller passes a writable value (nvml.h).
        unsafe { put(reasons, mask) }
    })
}

/// The newer name of the same call (NVML 12.2+).
#[no_mangle]
pub unsafe extern "C" fn nvmlDeviceGetCurrentClocksEventReasons(
    device: NvmlDevice,
    reasons: *mut c_ulonglong,
) -> NvmlReturn {
    // SAFETY: forwarded from the caller.
    unsafe { nvmlDeviceGetCurrentClocksThrottleReasons(device, reasons) }
}
