//! stackscope's GPU side: polls NVML on its own thread and sends [`Event::Gpu`] readings, on the
//! recording's monotonic clock, to the aggregator.
//!
//! - [`GpuPoller::start`] loads NVML (`libnvidia-ml.so.1`, or [`GpuConfig::nvml_lib`]) through
//!   `nvml-wrapper`, picks the devices ([`GpuSelection`]: in `Auto` those on which the target
//!   runs a compute context, all of them while it runs on none, re-checked every
//!   [`GpuConfig::remap_interval`]) and starts the thread. Any failure there is a [`GpuError`]:
//!   the caller prints it in one line and records stacks alone.
//! - Every [`GpuConfig::poll_interval`] the thread reads each device: the driver's own ring of
//!   timestamped utilization samples (`nvmlDeviceGetSamples`), one [`GpuSample`] per ring sample,
//!   falling back to `nvmlDeviceGetUtilizationRates` where the ring is missing; and memory,
//!   power, SM clock, throttle reasons and the target's per-process utilization, attached to the
//!   newest sample of the poll. Where the device has GPM (Hopper and later), SM activity, SM
//!   occupancy, tensor activity and DRAM bandwidth over the interval since the previous poll
//!   (two GPM samples' difference) go with that newest sample too.
//! - A call missing from the driver library (nvml-wrapper resolves symbols lazily, so that fails
//!   only the call) or answering NOT_SUPPORTED switches that one metric off on that one device
//!   with one notice ([`GpuPoller::notices`]); a lost device is a notice too. Polling never ends
//!   over a metric.
//! - NVML stamps samples in wall-clock microseconds; [`ClockOffset`] converts them with an offset
//!   measured once at start.
//! - Sending never blocks: a full channel counts a drop ([`GpuPoller::dropped`]).
//!
//! # Without a GPU
//!
//! `crates/fake-nvml` builds `libfake_nvml.so`, a scripted stand-in for the driver library, and
//! `crates/fake-nvml-minimal` builds `libfake_nvml_minimal.so`, the same without the optional
//! calls (an old driver). Both land in `target/<profile>/` with `cargo build --workspace`. To
//! run against one, point [`GpuConfig::nvml_lib`] (the binary: `--nvml-lib` or
//! `STACKSCOPE_NVML_LIB`) at it and put its script in `STACKSCOPE_FAKE_NVML` (a JSON file, or
//! inline JSON) before NVML is initialized; fake-nvml's crate docs give the script's schema.
//! This crate's `tests/` do so, each scenario in a process of its own because the fake's state
//! is process-wide.
//!
//! [`Event::Gpu`]: stackscope_event::Event::Gpu
//! [`GpuSample`]: stackscope_event::GpuSample

mod clock;
mod config;
mod devices;
mod error;
mod gpm;
mod metric;
mod poll;
mod poller;

pub use clock::ClockOffset;
pub use config::{GpuConfig, GpuSelection, DEFAULT_NVML_LIB};
pub use devices::GpuDeviceInfo;
pub use error::{GpuError, MetricError};
pub use poller::{GpuPoller, PollerReport, TargetPids};
