//! Which GPUs to poll: what a device is called, and which devices the target uses.

use nvml_wrapper::Device;

use crate::config::GpuSelection;
use crate::error::GpuError;
use crate::metric::{Metric, MetricSet, Reading};

pub use stackscope_event::GpuDeviceInfo;

/// Reads a device's name and UUID; a device that will not say gets a placeholder rather than
/// being dropped, since its utilization may still read fine.
pub fn read_info(index: u32, device: &Device<'_>) -> GpuDeviceInfo {
    GpuDeviceInfo {
        index,
        name: device.name().unwrap_or_else(|_| format!("GPU {index}")),
        uuid: device.uuid().unwrap_or_else(|_| "unknown".into()),
    }
}

/// The devices to poll out of `count`, given those on which the target was found.
///
/// `Auto` takes the target's devices, or every device while it is on none; `Devices` takes
/// exactly the list, each index checked against `count`.
pub fn choose(
    selection: &GpuSelection,
    count: u32,
    with_target: &[u32],
) -> Result<Vec<u32>, GpuError> {
    if *selection == GpuSelection::Off {
        return Err(GpuError::Disabled);
    }
    if count == 0 {
        return Err(GpuError::NoDevices);
    }
    match selection {
        GpuSelection::Off => Err(GpuError::Disabled),
        GpuSelection::Auto if with_target.is_empty() => Ok((0..count).collect()),
        GpuSelection::Auto => Ok(with_target.to_vec()),
        GpuSelection::Devices(list) if list.is_empty() => Err(GpuError::NoDevices),
        GpuSelection::Devices(list) => {
            if let Some(&index) = list.iter().find(|&&index| index >= count) {
                return Err(GpuError::NoSuchDevice { index, count });
            }
            Ok(list.clone())
        }
    }
}

/// Whether any of `pids` runs a compute (or graphics) context on the device; `None` when the
/// device cannot list its processes.
pub fn lists_any(
    device: &Device<'_>,
    metrics: &mut MetricSet,
    notices: &mut Vec<String>,
    pids: &[u32],
) -> Option<bool> {
    let compute = metrics.read(Metric::ComputeProcesses, notices, || {
        device.running_compute_processes()
    });
    let graphics = metrics.read(Metric::GraphicsProcesses, notices, || {
        device.running_graphics_processes()
    });
    let mut known = false;
    for reading in [compute, graphics] {
        match reading {
            Reading::Value(list) => {
                known = true;
                if list.iter().any(|p| pids.contains(&p.pid)) {
                    return Some(true);
                }
            }
            Reading::NoData => known = true,
            Reading::Unavailable => {}
        }
    }
    known.then_some(false)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn auto_takes_the_targets_devices_else_all() {
        assert_eq!(
            choose(&GpuSelection::Auto, 3, &[]).ok(),
            Some(vec![0, 1, 2])
        );
        assert_eq!(choose(&GpuSelection::Auto, 3, &[2]).ok(), Some(vec![2]));
    }

    #[test]
    fn explicit_list_is_checked() {
        let list = GpuSelection::Devices(vec![1, 0]);
        assert_eq!(choose(&list, 2, &[1]).ok(), Some(vec![1, 0]));
        assert!(matches!(
            choose(&GpuSelection::Devices(vec![0, 2]), 2, &[]),
            Err(GpuError::NoSuchDevice { index: 2, count: 2 })
        ));
    }

    #[test]
    fn nothing_to_poll_is_an_error() {
        assert!(matches!(
            choose(&GpuSelection::Auto, 0, &[]),
            Err(GpuError::NoDevices)
        ));
        assert!(matches!(
            choose(&GpuSelection::Off, 2, &[]),
            Err(GpuError::Disabled)
        ));
    }
}
