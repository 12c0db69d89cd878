//! The GPM entry points (Hopper and later): the support query, sample alloc/get/free and the
//! metrics between two samples, with per-metric return codes.
//!
//! A device without a `gpm` section in the script answers the support query with "not
//! supported" and `nvmlGpmSampleGet` with NOT_SUPPORTED, like an Ampere card; `unsupported:
//! ["gpm"]` makes both calls answer NOT_SUPPORTED (a MIG setup without GPM). Like the real
//! counters, the ticker sums each metric's pattern tick by tick; a sample copies the sums, and
//! `nvmlGpmMetricsGet` gives the mean over the ticks between its two samples. `fake-nvml-minimal` is built without this module, so it lacks
//! these symbols like a driver library older than GPM.

use std::ffi::{c_char, c_uint, c_void};
use std::sync::atomic::Ordering;

use crate::api::put;
use crate::ffi::{self, GpmMetricsGet, GpmSampleHandle, GpmSupport, NvmlDevice, NvmlReturn};
use crate::script::{Call, GpmMetric};
use crate::state::{lock, shared, with_device, GpmCounters};

/// What a GPM sample handle points at.
#[derive(Debug, Default)]
struct FakeGpmSample {
    /// The device and its counters once `nvmlGpmSampleGet` filled it.
    taken: Option<(u32, GpmCounters)>,
}

/// `nvmlGpmQueryDeviceSupport`.
#[no_mangle]
pub unsafe extern "C" fn nvmlGpmQueryDeviceSupport(
    device: NvmlDevice,
    support: *mut GpmSupport,
) -> NvmlReturn {
    with_device(device, Some(Call::Gpm), |_, dev| {
        if support.is_null() {
            return ffi::ERROR_INVALID_ARGUMENT;
        }
        // SAFETY: non-null, and a valid struct per nvml.h.
        let version = unsafe { (*support).version };
        if version != ffi::GPM_SUPPORT_VERSION {
            return ffi::ERROR_ARGUMENT_VERSION_MISMATCH;
        }
        // SAFETY: as above.
        unsafe { (*support).is_supported_device = c_uint::from(dev.script.gpm.is_some()) };
        ffi::SUCCESS
    })
}

/// `nvmlGpmSampleAlloc`: an empty sample, freed by `nvmlGpmSampleFree`.
#[no_mangle]
pub unsafe extern "C" fn nvmlGpmSampleAlloc(sample: *mut GpmSampleHandle) -> NvmlReturn {
    if let Err(code) = shared() {
        return code;
    }
    let handle = Box::into_raw(Box::<FakeGpmSample>::default()).cast::<c_void>();
    // SAFETY: the caller passes a writable handle (nvml.h).
    let code = unsafe { put(sample, handle) };
    if code != ffi::SUCCESS {
        // SAFETY: just made by Box::into_raw and handed to no one.
        drop(unsafe { Box::from_raw(handle.cast::<FakeGpmSample>()) });
    }
    code
}

/// `nvmlGpmSampleFree`.
#[no_mangle]
pub unsafe extern "C" fn nvmlGpmSampleFree(sample: GpmSampleHandle) -> NvmlReturn {
    if sample.is_null() {
        return ffi::ERROR_INVALID_ARGUMENT;
    }
    // SAFETY: a handle from nvmlGpmSampleAlloc, freed once (nvml.h's contract).
    drop(unsafe { Box::from_raw(sample.cast::<FakeGpmSample>()) });
    ffi::SUCCESS
}

/// `nvmlGpmSampleGet`: stamps the sample with the device and the time. With
/// `gpm.lost_after_samples: N`, call N + 1 finds the device lost (GPU_IS_LOST), between the
/// two samples of an interval.
#[no_mangle]
pub unsafe extern "C" fn nvmlGpmSampleGet(
    device: NvmlDevice,
    sample: GpmSampleHandle,
) -> NvmlReturn {
    with_device(device, Some(Call::Gpm), |_, dev| {
        let Some(gpm) = dev.script.gpm.as_ref() else {
            return ffi::ERROR_NOT_SUPPORTED;
        };
        if sample.is_null() {
            return ffi::ERROR_INVALID_ARGUMENT;
        }
        let taken = dev.gpm_samples.fetch_add(1, Ordering::SeqCst);
        if gpm.lost_after_samples.is_some_and(|n| taken >= n) {
            // The device fell off the bus since the previous sample: this call is the first
            // to see it, and every later call on the device sees it too.
            dev.gpm_lost.store(true, Ordering::SeqCst);
            return ffi::ERROR_GPU_IS_LOST;
        }
        // SAFETY: a live handle from nvmlGpmSampleAlloc (nvml.h's contract).
        let sample = unsafe { &mut *sample.cast::<FakeGpmSample>() };
        sample.taken = Some((dev.index, *lock(&dev.gpm_counters)));
        ffi::SUCCESS
    })
}

/// `nvmlGpmMetricsGet`: every requested metric the device has gets its pattern's value at the
/// second sample's time; others get NOT_SUPPORTED as their own return code.
#[no_mangle]
pub unsafe extern "C" fn nvmlGpmMetricsGet(request: *mut GpmMetricsGet) -> NvmlReturn {
    if request.is_null() {
        return ffi::ERROR_INVALID_ARGUMENT;
    }
    // SAFETY: non-null, a valid struct per nvml.h.
    let request = unsafe { &mut *request };
    if request.version != ffi::GPM_METRICS_GET_VERSION {
        return ffi::ERROR_ARGUMENT_VERSION_MISMATCH;
    }
    let count = request.num_metrics as usize;
    if count > ffi::GPM_METRIC_MAX || request.sample1.is_null() || request.sample2.is_null() {
        return ffi::ERROR_INVALID_ARGUMENT;
    }
    // SAFETY: live handles from nvmlGpmSampleAlloc (nvml.h's contract).
    let (first, second) = unsafe {
        (
            (*request.sample1.cast::<FakeGpmSample>()).taken,
            (*request.sample2.cast::<FakeGpmSample>()).taken,
        )
    };
    let (Some((device, earlier)), Some((second_device, later))) = (first, second) else {
        return ffi::ERROR_INVALID_ARGUMENT;
    };
    if device != second_device {
        return ffi::ERROR_INVALID_ARGUMENT;
    }
    with_device(state_handle(device), None, |_, dev| {
        let Some(gpm) = dev.script.gpm.as_ref() else {
            return ffi::ERROR_NOT_SUPPORTED;
        };
        let means = later.mean_since(&earlier);
        for metric in request.metrics.iter_mut().take(count) {
            let (slot, name, which) = match metric.metric_id {
                ffi::GPM_METRIC_SM_UTIL => (0, c"sm_util", GpmMetric::SmActive),
                ffi::GPM_METRIC_SM_OCCUPANCY => (1, c"sm_occupancy", GpmMetric::SmOccupancy),
                ffi::GPM_METRIC_ANY_TENSOR_UTIL => (2, c"any_tensor_util", GpmMetric::TensorActive),
                ffi::GPM_METRIC_DRAM_BW_UTIL => (3, c"dram_bw_util", GpmMetric::DramBw),
                _ => {
                    metric.nvml_return = ffi::ERROR_NOT_SUPPORTED;
                    continue;
                }
            };
            if gpm.unsupported_metrics.contains(&which) {
                metric.nvml_return = ffi::ERROR_NOT_SUPPORTED;
                continue;
            }
            metric.nvml_return = ffi::SUCCESS;
            metric.value = means[slot];
            // The driver owns the names; the caller only reads them.
            metric.metric_info.short_name = name.as_ptr().cast_mut();
            metric.metric_info.long_name = name.as_ptr().cast_mut();
            metric.metric_info.unit = c"%".as_ptr().cast_mut().cast::<c_char>();
        }
        ffi::SUCCESS
    })
}

/// The handle of device `index`, to reuse [`with_device`]'s checks (lost, initialized).
fn state_handle(index: u32) -> NvmlDevice {
    crate::state::handle_of(index as usize)
}
