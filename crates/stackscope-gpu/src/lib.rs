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
//!   newest sample of the poll.
//! - A call missing from the driver library (nvml-wrapper resolves symbols lazily, so that fails
//!   only the call) or answering NOT_SUPPORTED switches that one metric off on that one device
//!   with one notice ([`GpuPoller::notices`]); a lost device is a notice too. Polling never ends
//!   over a metric.
//! - NVML stamps samples in wall-clock microseconds; [`ClockOffset`] converts them with an offset
//!   measured once at start.
//! - Sending never blocks: a full channel counts a drop ([`GpuPoller::dropped`]).
//!
//! Tests run all of this against `crates/fake-nvml`, a scripted stand-in for the driver library.
//!
//! [`Event::Gpu`]: stackscope_event::Event::Gpu
//! [`GpuSample`]: stackscope_event::GpuSample

mod clock;
mod config;
mod devices;
mod error;
mod metric;
mod poll;
mod poller;

pub use clock::ClockOffset;
pub use config::{GpuConfig, GpuSelection, DEFAULT_NVML_LIB};
pub use devices::GpuDeviceInfo;
pub use error::{GpuError, MetricError};
pub use poller::{GpuPoller, PollerReport, TargetPids};
