//! The NVML entry points every driver library has: init, device lookup, names, memory, the
//! current utilization and the running processes.
//!
//! Each follows `nvml.h`'s contract for its pointers and buffer sizes. None may panic: a panic
//! cannot unwind into C, so every failure is a return code.

use std::ffi::{c_char, c_uint, CStr};

use crate::ffi::{self, Memory, MemoryV2, NvmlDevice, NvmlReturn, ProcessInfo, Utilization};
use crate::script::Call;
use crate::state::{self, with_device};

/// Writes `value` through `ptr`, or INVALID_ARGUMENT for a null pointer.
///
/// # Safety
/// `ptr` is null or valid for a write of `T`.
pub(crate) unsafe fn put<T>(ptr: *mut T, value: T) -> NvmlReturn {
    if ptr.is_null() {
        return ffi::ERROR_INVALID_ARGUMENT;
    }
    // SAFETY: non-null, and valid for writes per the caller's contract.
    unsafe { ptr.write(value) };
    ffi::SUCCESS
}

/// Copies `text` and its NUL into a caller's buffer of `length` bytes.
///
/// # Safety
/// `buf` is null or valid for `length` bytes of writes.
unsafe fn put_str(buf: *mut c_char, length: c_uint, text: &str) -> NvmlReturn {
    if buf.is_null() {
        return ffi::ERROR_INVALID_ARGUMENT;
    }
    let bytes = text.as_bytes();
    if bytes.len() + 1 > length as usize {
        return ffi::ERROR_INSUFFICIENT_SIZE;
    }
    // SAFETY: `bytes.len() + 1 <= length` bytes fit in `buf` per the caller's contract.
    unsafe {
        std::ptr::copy_nonoverlapping(bytes.as_ptr().cast::<c_char>(), buf, bytes.len());
        buf.add(bytes.len()).write(0);
    }
    ffi::SUCCESS
}

/// Fills a caller's array following NVML's size protocol: with a null array or too small a
/// count, stores the needed count and answers INSUFFICIENT_SIZE (SUCCESS when nothing is
/// needed); else copies and stores the count written.
///
/// # Safety
/// `count` is null or valid for a read and write; `out` is null or valid for `*count` writes.
pub(crate) unsafe fn put_array<T: Copy>(
    out: *mut T,
    count: *mut c_uint,
    items: &[T],
) -> NvmlReturn {
    if count.is_null() {
        return ffi::ERROR_INVALID_ARGUMENT;
    }
    // SAFETY: `count` is non-null and valid per the caller's contract.
    let room = unsafe { count.read() } as usize;
    // SAFETY: as above.
    unsafe { count.write(items.len() as c_uint) };
    if items.is_empty() {
        return ffi::SUCCESS;
    }
    if out.is_null() || room < items.len() {
        return ffi::ERROR_INSUFFICIENT_SIZE;
    }
    // SAFETY: `out` has room for `room >= items.len()` elements.
    unsafe { std::ptr::copy_nonoverlapping(items.as_ptr(), out, items.len()) };
    ffi::SUCCESS
}

#[no_mangle]
pub extern "C" fn nvmlInit_v2() -> NvmlReturn {
    state::init()
}

#[no_mangle]
pub extern "C" fn nvmlInit() -> NvmlReturn {
    state::init()
}

#[no_mangle]
pub extern "C" fn nvmlInitWithFlags(_flags: c_uint) -> NvmlReturn {
    state::init()
}

#[no_mangle]
pub extern "C" fn nvmlShutdown() -> NvmlReturn {
    state::shutdown()
}

#[no_mangle]
pub extern "C" fn nvmlErrorString(result: NvmlReturn) -> *const c_char {
    let text: &'static CStr = match result {
        ffi::SUCCESS => c"Success",
        ffi::ERROR_UNINITIALIZED => c"Uninitialized",
        ffi::ERROR_INVALID_ARGUMENT => c"Invalid Argument",
        ffi::ERROR_NOT_SUPPORTED => c"Not Supported",
        ffi::ERROR_NOT_FOUND => c"Not Found",
        ffi::ERROR_INSUFFICIENT_SIZE => c"Insufficient Size",
        ffi::ERROR_DRIVER_NOT_LOADED => c"Driver Not Loaded",
        ffi::ERROR_GPU_IS_LOST => c"GPU is lost",
        _ => c"Unknown Error",
    };
    text.as_ptr()
}

#[no_mangle]
pub unsafe extern "C" fn nvmlSystemGetDriverVersion(
    version: *mut c_char,
    length: c_uint,
) -> NvmlReturn {
    match state::shared() {
        // SAFETY: the caller passes a buffer of `length` bytes (nvml.h).
        Ok(shared) => unsafe { put_str(version, length, &shared.script.driver_version) },
        Err(code) => code,
    }
}

#[no_mangle]
pub unsafe extern "C" fn nvmlSystemGetNVMLVersion(
    version: *mut c_char,
    length: c_uint,
) -> NvmlReturn {
    match state::shared() {
        // SAFETY: the caller passes a buffer of `length` bytes (nvml.h).
        Ok(_) => unsafe { put_str(version, length, "12.550.54.15") },
        Err(code) => code,
    }
}

#[no_mangle]
pub unsafe extern "C" fn nvmlDeviceGetCount_v2(count: *mut c_uint) -> NvmlReturn {
    match state::shared() {
        // SAFETY: the caller passes a writable count (nvml.h).
        Ok(shared) => unsafe { put(count, shared.devices.len() as c_uint) },
        Err(code) => code,
    }
}

#[no_mangle]
pub unsafe extern "C" fn nvmlDeviceGetCount(count: *mut c_uint) -> NvmlReturn {
    // SAFETY: same contract.
    unsafe { nvmlDeviceGetCount_v2(count) }
}

#[no_mangle]
pub unsafe extern "C" fn nvmlDeviceGetHandleByIndex_v2(
    index: c_uint,
    device: *mut NvmlDevice,
) -> NvmlReturn {
    match state::shared() {
        Ok(shared) if (index as usize) < shared.devices.len() => {
            // SAFETY: the caller passes a writable handle (nvml.h).
            unsafe { put(device, state::handle_of(index as usize)) }
        }
        Ok(_) => ffi::ERROR_INVALID_ARGUMENT,
        Err(code) => code,
    }
}

#[no_mangle]
pub unsafe extern "C" fn nvmlDeviceGetHandleByIndex(
    index: c_uint,
    device: *mut NvmlDevice,
) -> NvmlReturn {
    // SAFETY: same contract.
    unsafe { nvmlDeviceGetHandleByIndex_v2(index, device) }
}

#[no_mangle]
pub unsafe extern "C" fn nvmlDeviceGetIndex(device: NvmlDevice, index: *mut c_uint) -> NvmlReturn {
    // SAFETY: the caller passes a writable index (nvml.h).
    with_device(device, None, |_, dev| unsafe { put(index, dev.index) })
}

#[no_mangle]
pub unsafe extern "C" fn nvmlDeviceGetName(
    device: NvmlDevice,
    name: *mut c_char,
    length: c_uint,
) -> NvmlReturn {
    // SAFETY: the caller passes a buffer of `length` bytes (nvml.h).
    with_device(device, None, |_, dev| unsafe {
        put_str(name, length, &dev.name)
    })
}

#[no_mangle]
pub unsafe extern "C" fn nvmlDeviceGetUUID(
    device: NvmlDevice,
    uuid: *mut c_char,
    length: c_uint,
) -> NvmlReturn {
    // SAFETY: the caller passes a buffer of `length` bytes (nvml.h).
    with_device(device, None, |_, dev| unsafe {
        put_str(uuid, length, &dev.uuid)
    })
}

#[no_mangle]
pub unsafe extern "C" fn nvmlDeviceGetUtilizationRates(
    device: NvmlDevice,
    utilization: *mut Utilization,
) -> NvmlReturn {
    with_device(device, Some(Call::UtilizationRates), |_, dev| {
        let tick = dev.latest();
        let value = Utilization {
            gpu: tick.gpu,
            memory: tick.memory,
        };
        // SAFETY: the caller passes a writable struct (nvml.h).
        unsafe { put(utilization, value) }
    })
}

/// Total and used memory now (used climbs where the script says so).
fn memory_of(shared: &crate::state::Shared, dev: &crate::state::FakeDevice) -> (u64, u64) {
    dev.script.memory_at(shared.started.elapsed())
}

#[no_mangle]
pub unsafe extern "C" fn nvmlDeviceGetMemoryInfo(
    device: NvmlDevice,
    memory: *mut Memory,
) -> NvmlReturn {
    with_device(device, Some(Call::Memory), |shared, dev| {
        let (total, used) = memory_of(shared, dev);
        let value = Memory {
            total,
            free: total - used,
            used,
        };
        // SAFETY: the caller passes a writable struct (nvml.h).
        unsafe { put(memory, value) }
    })
}

#[no_mangle]
pub unsafe extern "C" fn nvmlDeviceGetMemoryInfo_v2(
    device: NvmlDevice,
    memory: *mut MemoryV2,
) -> NvmlReturn {
    with_device(device, Some(Call::Memory), |shared, dev| {
        if memory.is_null() {
            return ffi::ERROR_INVALID_ARGUMENT;
        }
        // SAFETY: non-null, and a valid struct per nvml.h; the caller set its version field.
        let version = unsafe { (*memory).version };
        let (total, used) = memory_of(shared, dev);
        let value = MemoryV2 {
            version,
            total,
            reserved: 0,
            free: total - used,
            used,
        };
        // SAFETY: as above.
        unsafe { put(memory, value) }
    })
}

/// The running-process calls: the scripted pids, each with an even share of the used memory.
///
/// # Safety
/// `count` and `infos` follow nvml.h's contract for the running-process calls.
unsafe fn running_processes(
    device: NvmlDevice,
    count: *mut c_uint,
    infos: *mut ProcessInfo,
    graphics: bool,
) -> NvmlReturn {
    with_device(device, Some(Call::Processes), |shared, dev| {
        let list = if graphics {
            &dev.script.graphics_processes
        } else {
            &dev.script.processes
        };
        let pids = list.pids();
        let (_, used) = memory_of(shared, dev);
        let share = used / (pids.len().max(1) as u64);
        let items: Vec<ProcessInfo> = pids
            .into_iter()
            .map(|pid| ProcessInfo {
                pid,
                used_gpu_memory: share,
                gpu_instance_id: ffi::NO_INSTANCE,
                compute_instance_id: ffi::NO_INSTANCE,
            })
            .collect();
        // SAFETY: forwarded from the caller.
        unsafe { put_array(infos, count, &items) }
    })
}

#[no_mangle]
pub unsafe extern "C" fn nvmlDeviceGetComputeRunningProcesses_v3(
    device: NvmlDevice,
    count: *mut c_uint,
    infos: *mut ProcessInfo,
) -> NvmlReturn {
    // SAFETY: forwarded from the caller.
    unsafe { running_processes(device, count, infos, false) }
}

/// `_v2` takes `nvmlProcessInfo_v2_t`, the same layout as `_v3`'s.
#[no_mangle]
pub unsafe extern "C" fn nvmlDeviceGetComputeRunningProcesses_v2(
    device: NvmlDevice,
    count: *mut c_uint,
    infos: *mut ProcessInfo,
) -> NvmlReturn {
    // SAFETY: forwarded from the caller.
    unsafe { running_processes(device, count, infos, false) }
}

#[no_mangle]
pub unsafe extern "C" fn nvmlDeviceGetGraphicsRunningProcesses_v3(
    device: NvmlDevice,
    count: *mut c_uint,
    infos: *mut ProcessInfo,
) -> NvmlReturn {
    // SAFETY: forwarded from the caller.
    unsafe { running_processes(device, count, infos, true) }
}

#[no_mangle]
pub unsafe extern "C" fn nvmlDeviceGetGraphicsRunningProcesses_v2(
    device: NvmlDevice,
    count: *mut c_uint,
    infos: *mut ProcessInfo,
) -> NvmlReturn {
    // SAFETY: forwarded from the caller.
    unsafe { running_processes(device, count, infos, true) }
}
