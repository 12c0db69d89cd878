//! A fake `libnvidia-ml.so.1` for tests: a C library exporting the NVML calls stackscope's GPU
//! poller makes (through `nvml-wrapper`), answering from a script instead of a GPU.
//!
//! It is never linked into stackscope. Tests point the poller at it (`--nvml-lib`, env
//! `STACKSCOPE_NVML_LIB`, or `GpuConfig::nvml_lib`), so the real dynamic loading and the real
//! `nvml-wrapper` code run on a machine without a GPU.
//!
//! # Libraries
//!
//! `cargo build --workspace` (or `-p fake-nvml -p fake-nvml-minimal`) leaves two in the target
//! directory (`target/debug/`):
//!
//! - `libfake_nvml.so`: every call below.
//! - `libfake_nvml_minimal.so` (package `fake-nvml-minimal`, the same source without
//!   `api_optional.rs`): lacks `nvmlDeviceGetSamples`, `nvmlDeviceGetProcessUtilization`,
//!   `nvmlDeviceGetPowerUsage`, `nvmlDeviceGetClockInfo` and
//!   `nvmlDeviceGetCurrentClocks{Throttle,Event}Reasons` and the GPM calls
//!   (`nvmlGpmQueryDeviceSupport`, `nvmlGpmSample{Alloc,Free,Get}`, `nvmlGpmMetricsGet`), like
//!   an old driver library.
//!
//! # The script
//!
//! Read at the first `nvmlInit` from the environment variable `STACKSCOPE_FAKE_NVML`: a path to
//! a JSON file, or inline JSON when the value starts with `{`. Unset: one idle device. A script
//! that does not parse makes `nvmlInit` fail (NVML_ERROR_UNKNOWN) and prints why to stderr;
//! unknown fields are errors. Every field is optional:
//!
//! ```json
//! {
//!   "devices": [                      // default: one device with all defaults
//!     {
//!       "name": "Fake H100",          // default "Fake GPU <index>"
//!       "uuid": "GPU-fake-0",         // default "GPU-fake-<index>"
//!       "memory_total_mib": 81920,    // default 81920
//!       "memory_used_mib": 1000,      // default 1000
//!       "memory_used_mib_per_s": 0,   // used memory climbs at this rate since init (capped
//!                                     // at the total); default 0
//!       "utilization": PATTERN,       // default 0
//!       "memory_utilization": PATTERN,// default 0
//!       "power_w": 250.0,             // default 250 (reported in mW)
//!       "sm_clock_mhz": 1755,         // default 1755 (also the graphics clock)
//!       "mem_clock_mhz": 2619,        // default 2619
//!       "throttle_reasons": 0,        // default: 0x1 (GpuIdle) while utilization is 0, else 0
//!       "processes": PIDS,            // compute processes listed on this device; default []
//!       "graphics_processes": PIDS,   // graphics processes; default []
//!       "unsupported": [CALL, ...],   // NOT_SUPPORTED on this device only
//!       "lost_after_s": 2.5,          // from then on every call on it answers GPU_IS_LOST
//!       "gpm": {                      // GPM counters (Hopper); absent: "not supported"
//!         "sm_active": PATTERN,       // NVML_GPM_METRIC_SM_UTIL, default 0
//!         "sm_occupancy": PATTERN,    // NVML_GPM_METRIC_SM_OCCUPANCY, default 0
//!         "tensor_active": PATTERN,   // NVML_GPM_METRIC_ANY_TENSOR_UTIL, default 0
//!         "dram_bw": PATTERN,         // NVML_GPM_METRIC_DRAM_BW_UTIL, default 0
//!         "unsupported_metrics": ["sm_occupancy"], // per-metric NOT_SUPPORTED
//!         "lost_after_samples": 1     // the next GPM sample finds the device lost
//!       }
//!     }
//!   ],
//!   "unsupported": [CALL, ...],       // NOT_SUPPORTED on every device
//!   "fail_init": false,               // true: nvmlInit answers DRIVER_NOT_LOADED
//!   "sample_period_ms": 166,          // the ring's tick (the real driver: about 1/6 s)
//!   "ring_capacity": 120,             // ticks the ring keeps
//!   "driver_version": "550.54.15-fake"
//! }
//! ```
//!
//! - PATTERN, in percent, clamped to 0..=100: a number or `{"constant": 50}`;
//!   `{"square": {"period_s": 4.0, "low": 3, "high": 97, "duty": 0.5, "phase_s": 0}}` (`high`
//!   for the first `duty` of each period counted from init; `duty` default 0.5, `phase_s`
//!   default 0); or `{"file": "/path"}`: the file holds the current value as text and is re-read
//!   on every tick (missing, empty or not a number: the previous value stays, 0 at first). The
//!   file form lets a Python fixture drive the fake GPU: it writes `0` in its data phase and
//!   `100` in its compute phase.
//! - PIDS: a list `[123, 456]`, or `{"file": "/path"}`: pids separated by whitespace or commas,
//!   re-read on every call (missing file: none), so a test can make its target "open a CUDA
//!   context" late.
//! - The running-process calls give each listed pid an even share of the used memory
//!   (`usedGpuMemory`): with `memory_used_mib_per_s`, the one process listed on a device is a
//!   process whose GPU memory climbs.
//! - CALL: `samples`, `utilization_rates`, `memory`, `power`, `clock`, `throttle`, `processes`,
//!   `process_utilization`, `gpm` (the GPM support query and `nvmlGpmSampleGet`).
//!
//! # The sample ring
//!
//! As the real driver does, each device keeps a ring of timestamped samples. A thread started by
//! the first `nvmlInit` (and joined by the last `nvmlShutdown`) ticks every `sample_period_ms`,
//! evaluates every device's patterns at the time since init and pushes
//! (wall-clock µs, utilization, memory utilization) into the ring, dropping the oldest beyond
//! `ring_capacity`. `nvmlDeviceGetSamples(GPU_UTILIZATION_SAMPLES | MEMORY_UTILIZATION_SAMPLES)`
//! returns the ticks newer than `lastSeenTimeStamp` as unsigned ints: with a null buffer it
//! stores the ring capacity in `*sampleCount`; with none newer it answers NOT_FOUND; with too
//! small a buffer INSUFFICIENT_SIZE. `nvmlDeviceGetUtilizationRates` reports the newest tick.
//! `nvmlDeviceGetProcessUtilization` gives every listed compute pid the mean of the ticks newer
//! than `lastSeenTimeStamp` (NOT_FOUND when none or all zero, like the driver).
//!
//! # GPM
//!
//! The ticker evaluates each GPM pattern on every tick and adds it to the device's counters; a
//! sample copies the counters, and `nvmlGpmMetricsGet` gives each metric its mean over the ticks
//! between the two samples (the newest value when none came between), as the real counters'
//! difference does, and NOT_SUPPORTED as that metric's own return code for metrics in
//! `unsupported_metrics` or not among the four above.

// These are C entry points with NVML's names; their safety contract is nvml.h's.
#![allow(non_snake_case, clippy::missing_safety_doc)]

mod api;
mod api_gpm;
mod api_optional;
mod ffi;
mod pattern;
mod ring;
mod script;
mod state;
