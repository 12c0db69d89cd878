//! The C types and constants of the NVML API that the fake exports, mirrored from `nvml.h` (as
//! bound by `nvml-wrapper-sys` 0.10, which is what `nvml-wrapper` 0.13 reads them with).
//!
//! The layouts must match byte for byte: the caller allocates these structs and the fake fills
//! them. The tests at the bottom compare every size and field offset with `nvml-wrapper-sys`.

use std::ffi::{c_char, c_int, c_uint, c_ulong, c_ulonglong, c_ushort, c_void};

/// `nvmlReturn_t`: a C enum, passed as an unsigned int.
pub type NvmlReturn = c_uint;
/// `nvmlDevice_t`: an opaque pointer. The fake hands out small integers cast to pointers.
pub type NvmlDevice = *mut c_void;

pub const SUCCESS: NvmlReturn = 0;
pub const ERROR_UNINITIALIZED: NvmlReturn = 1;
pub const ERROR_INVALID_ARGUMENT: NvmlReturn = 2;
pub const ERROR_NOT_SUPPORTED: NvmlReturn = 3;
pub const ERROR_NOT_FOUND: NvmlReturn = 6;
pub const ERROR_INSUFFICIENT_SIZE: NvmlReturn = 7;
pub const ERROR_DRIVER_NOT_LOADED: NvmlReturn = 9;
pub const ERROR_GPU_IS_LOST: NvmlReturn = 15;
pub const ERROR_ARGUMENT_VERSION_MISMATCH: NvmlReturn = 25;
pub const ERROR_UNKNOWN: NvmlReturn = 999;

/// `nvmlSamplingType_t` values the fake keeps a ring for.
pub const GPU_UTILIZATION_SAMPLES: c_uint = 1;
pub const MEMORY_UTILIZATION_SAMPLES: c_uint = 2;

/// `nvmlValueType_t`: utilization samples are unsigned ints, as on the real driver.
pub const VALUE_TYPE_UNSIGNED_INT: c_uint = 1;

/// `nvmlClockType_t`.
pub const CLOCK_GRAPHICS: c_uint = 0;
pub const CLOCK_SM: c_uint = 1;
pub const CLOCK_MEM: c_uint = 2;
pub const CLOCK_VIDEO: c_uint = 3;

/// `nvmlClocksEventReasonGpuIdle`: the bit the driver sets when nothing runs.
pub const CLOCKS_EVENT_REASON_GPU_IDLE: c_ulonglong = 0x1;

/// `NVML_VALUE_NOT_AVAILABLE` as an unsigned int: "no MIG instance".
pub const NO_INSTANCE: c_uint = 0xFFFF_FFFF;

/// `nvmlUtilization_t`.
#[repr(C)]
#[derive(Debug, Clone, Copy, Default)]
pub struct Utilization {
    pub gpu: c_uint,
    pub memory: c_uint,
}

/// `nvmlMemory_t` (what `nvmlDeviceGetMemoryInfo` fills).
#[repr(C)]
#[derive(Debug, Clone, Copy, Default)]
pub struct Memory {
    pub total: c_ulonglong,
    pub free: c_ulonglong,
    pub used: c_ulonglong,
}

/// `nvmlMemory_v2_t` (what `nvmlDeviceGetMemoryInfo_v2` fills; nvml-wrapper 0.13 calls this one).
#[repr(C)]
#[derive(Debug, Clone, Copy, Default)]
pub struct MemoryV2 {
    pub version: c_uint,
    pub total: c_ulonglong,
    pub reserved: c_ulonglong,
    pub free: c_ulonglong,
    pub used: c_ulonglong,
}

/// `nvmlValue_t`: the untagged union a sample's value lives in; the type travels separately.
#[repr(C)]
#[derive(Clone, Copy)]
pub union Value {
    pub d_val: f64,
    pub si_val: c_int,
    pub ui_val: c_uint,
    pub ul_val: c_ulong,
    pub ull_val: c_ulonglong,
    pub sll_val: i64,
    pub us_val: c_ushort,
}

/// `nvmlSample_t`: one entry of the driver's sample ring.
#[repr(C)]
#[derive(Clone, Copy)]
pub struct Sample {
    /// CPU wall-clock time in microseconds.
    pub time_stamp: c_ulonglong,
    pub sample_value: Value,
}

/// `nvmlProcessInfo_t` (the same layout as `nvmlProcessInfo_v2_t`), filled by the `_v3`
/// running-process calls.
#[repr(C)]
#[derive(Debug, Clone, Copy)]
pub struct ProcessInfo {
    pub pid: c_uint,
    pub used_gpu_memory: c_ulonglong,
    pub gpu_instance_id: c_uint,
    pub compute_instance_id: c_uint,
}

/// `nvmlProcessUtilizationSample_t`.
#[repr(C)]
#[derive(Debug, Clone, Copy)]
pub struct ProcessUtilizationSample {
    pub pid: c_uint,
    pub time_stamp: c_ulonglong,
    pub sm_util: c_uint,
    pub mem_util: c_uint,
    pub enc_util: c_uint,
    pub dec_util: c_uint,
}

/// `nvmlGpmSample_t`: an opaque pointer; the fake's points at a boxed [`crate::api_gpm`] sample.
pub type GpmSampleHandle = *mut c_void;

/// `NVML_GPM_METRICS_GET_VERSION` and `NVML_GPM_SUPPORT_VERSION`.
pub const GPM_METRICS_GET_VERSION: c_uint = 1;
pub const GPM_SUPPORT_VERSION: c_uint = 1;
/// `nvmlGpmMetricId_t` values the fake computes.
pub const GPM_METRIC_SM_UTIL: c_uint = 2;
pub const GPM_METRIC_SM_OCCUPANCY: c_uint = 3;
pub const GPM_METRIC_ANY_TENSOR_UTIL: c_uint = 5;
pub const GPM_METRIC_DRAM_BW_UTIL: c_uint = 10;
/// `NVML_GPM_METRIC_MAX`: the length of `nvmlGpmMetricsGet_t::metrics`.
pub const GPM_METRIC_MAX: usize = 210;

/// `nvmlGpmMetric_t`'s `metricInfo`: names the driver owns.
#[repr(C)]
#[derive(Debug, Clone, Copy)]
pub struct GpmMetricInfo {
    pub short_name: *mut c_char,
    pub long_name: *mut c_char,
    pub unit: *mut c_char,
}

/// `nvmlGpmMetric_t`: one requested metric, with its own return code.
#[repr(C)]
#[derive(Debug, Clone, Copy)]
pub struct GpmMetric {
    pub metric_id: c_uint,
    pub nvml_return: NvmlReturn,
    pub value: f64,
    pub metric_info: GpmMetricInfo,
}

/// `nvmlGpmMetricsGet_t`.
#[repr(C)]
#[derive(Debug, Clone, Copy)]
pub struct GpmMetricsGet {
    pub version: c_uint,
    pub num_metrics: c_uint,
    pub sample1: GpmSampleHandle,
    pub sample2: GpmSampleHandle,
    pub metrics: [GpmMetric; GPM_METRIC_MAX],
}

/// `nvmlGpmSupport_t`.
#[repr(C)]
#[derive(Debug, Clone, Copy)]
pub struct GpmSupport {
    pub version: c_uint,
    pub is_supported_device: c_uint,
}

#[cfg(test)]
mod tests {
    use std::mem::{align_of, offset_of, size_of};

    use nvml_wrapper_sys::bindings as sys;

    use super::*;

    macro_rules! same_layout {
        ($ours:ty, $theirs:ty, [$(($a:ident, $b:ident)),* $(,)?]) => {{
            assert_eq!(size_of::<$ours>(), size_of::<$theirs>(), "size of {}", stringify!($ours));
            assert_eq!(align_of::<$ours>(), align_of::<$theirs>(), "align of {}", stringify!($ours));
            $(assert_eq!(
                offset_of!($ours, $a),
                offset_of!($theirs, $b),
                "offset of {}.{}", stringify!($ours), stringify!($a)
            );)*
        }};
    }

    #[test]
    fn layouts_match_nvml_wrapper_sys() {
        same_layout!(
            Utilization,
            sys::nvmlUtilization_t,
            [(gpu, gpu), (memory, memory)]
        );
        same_layout!(
            Memory,
            sys::nvmlMemory_t,
            [(total, total), (free, free), (used, used)]
        );
        same_layout!(
            MemoryV2,
            sys::nvmlMemory_v2_t,
            [
                (version, version),
                (total, total),
                (reserved, reserved),
                (free, free),
                (used, used)
            ]
        );
        same_layout!(Value, sys::nvmlValue_t, []);
        same_layout!(
            Sample,
            sys::nvmlSample_t,
            [(time_stamp, timeStamp), (sample_value, sampleValue)]
        );
        same_layout!(
            ProcessInfo,
            sys::nvmlProcessInfo_t,
            [
                (pid, pid),
                (used_gpu_memory, usedGpuMemory),
                (gpu_instance_id, gpuInstanceId),
                (compute_instance_id, computeInstanceId)
            ]
        );
        same_layout!(
            ProcessUtilizationSample,
            sys::nvmlProcessUtilizationSample_t,
            [
                (pid, pid),
                (time_stamp, timeStamp),
                (sm_util, smUtil),
                (mem_util, memUtil),
                (enc_util, encUtil),
                (dec_util, decUtil)
            ]
        );
    }

    #[test]
    fn gpm_layouts_and_constants_match_nvml_wrapper_sys() {
        same_layout!(
            GpmMetricInfo,
            sys::nvmlGpmMetric_t__bindgen_ty_1,
            [(short_name, shortName), (long_name, longName), (unit, unit)]
        );
        same_layout!(
            GpmMetric,
            sys::nvmlGpmMetric_t,
            [
                (metric_id, metricId),
                (nvml_return, nvmlReturn),
                (value, value),
                (metric_info, metricInfo)
            ]
        );
        same_layout!(
            GpmMetricsGet,
            sys::nvmlGpmMetricsGet_t,
            [
                (version, version),
                (num_metrics, numMetrics),
                (sample1, sample1),
                (sample2, sample2),
                (metrics, metrics)
            ]
        );
        same_layout!(
            GpmSupport,
            sys::nvmlGpmSupport_t,
            [(version, version), (is_supported_device, isSupportedDevice)]
        );
        assert_eq!(GPM_METRICS_GET_VERSION, sys::NVML_GPM_METRICS_GET_VERSION);
        assert_eq!(GPM_SUPPORT_VERSION, sys::NVML_GPM_SUPPORT_VERSION);
        assert_eq!(
            GPM_METRIC_SM_UTIL,
            sys::nvmlGpmMetricId_t_NVML_GPM_METRIC_SM_UTIL
        );
        assert_eq!(
            GPM_METRIC_SM_OCCUPANCY,
            sys::nvmlGpmMetricId_t_NVML_GPM_METRIC_SM_OCCUPANCY
        );
        assert_eq!(
            GPM_METRIC_ANY_TENSOR_UTIL,
            sys::nvmlGpmMetricId_t_NVML_GPM_METRIC_ANY_TENSOR_UTIL
        );
        assert_eq!(
            GPM_METRIC_DRAM_BW_UTIL,
            sys::nvmlGpmMetricId_t_NVML_GPM_METRIC_DRAM_BW_UTIL
        );
        assert_eq!(
            GPM_METRIC_MAX,
            sys::nvmlGpmMetricId_t_NVML_GPM_METRIC_MAX as usize
        );
    }

    #[test]
    fn constants_match_nvml_wrapper_sys() {
        assert_eq!(SUCCESS, sys::nvmlReturn_enum_NVML_SUCCESS);
        assert_eq!(
            ERROR_UNINITIALIZED,
            sys::nvmlReturn_enum_NVML_ERROR_UNINITIALIZED
        );
        assert_eq!(
            ERROR_INVALID_ARGUMENT,
            sys::nvmlReturn_enum_NVML_ERROR_INVALID_ARGUMENT
        );
        assert_eq!(
            ERROR_NOT_SUPPORTED,
            sys::nvmlReturn_enum_NVML_ERROR_NOT_SUPPORTED
        );
        assert_eq!(ERROR_NOT_FOUND, sys::nvmlReturn_enum_NVML_ERROR_NOT_FOUND);
        assert_eq!(
            ERROR_INSUFFICIENT_SIZE,
            sys::nvmlReturn_enum_NVML_ERROR_INSUFFICIENT_SIZE
        );
        assert_eq!(
            ERROR_DRIVER_NOT_LOADED,
            sys::nvmlReturn_enum_NVML_ERROR_DRIVER_NOT_LOADED
        );
        assert_eq!(
            ERROR_GPU_IS_LOST,
            sys::nvmlReturn_enum_NVML_ERROR_GPU_IS_LOST
        );
        assert_eq!(ERROR_UNKNOWN, sys::nvmlReturn_enum_NVML_ERROR_UNKNOWN);
        assert_eq!(
            ERROR_ARGUMENT_VERSION_MISMATCH,
            sys::nvmlReturn_enum_NVML_ERROR_ARGUMENT_VERSION_MISMATCH
        );
        assert_eq!(
            GPU_UTILIZATION_SAMPLES,
            sys::nvmlSamplingType_enum_NVML_GPU_UTILIZATION_SAMPLES
        );
        assert_eq!(
            MEMORY_UTILIZATION_SAMPLES,
            sys::nvmlSamplingType_enum_NVML_MEMORY_UTILIZATION_SAMPLES
        );
        assert_eq!(
            VALUE_TYPE_UNSIGNED_INT,
            sys::nvmlValueType_enum_NVML_VALUE_TYPE_UNSIGNED_INT
        );
        assert_eq!(CLOCK_GRAPHICS, sys::nvmlClockType_enum_NVML_CLOCK_GRAPHICS);
        assert_eq!(CLOCK_SM, sys::nvmlClockType_enum_NVML_CLOCK_SM);
        assert_eq!(CLOCK_MEM, sys::nvmlClockType_enum_NVML_CLOCK_MEM);
        assert_eq!(CLOCK_VIDEO, sys::nvmlClockType_enum_NVML_CLOCK_VIDEO);
    }
}
