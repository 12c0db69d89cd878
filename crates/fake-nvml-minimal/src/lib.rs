//! `libfake_nvml_minimal.so`: the fake NVML of `crates/fake-nvml` without its optional calls
//! (the sample ring, per-process utilization, power, clocks, throttle reasons: `api_optional.rs`),
//! so it lacks those symbols the way an old driver library does. See `fake-nvml`'s crate docs for
//! the script it follows.
//!
//! A second package rather than only a feature of the first, so that one `cargo build
//! --workspace` leaves both libraries in the target directory. It compiles fake-nvml's modules
//! from their files, at this crate's root so their `crate::` paths hold.

// C entry points with NVML's names; their safety contract is nvml.h's.
#![allow(non_snake_case, clippy::missing_safety_doc)]
// Without the optional calls, parts of the shared modules (sample types, ring queries, script
// fields for power and clocks) go unused here.
#![allow(dead_code)]

#[path = "../../fake-nvml/src/api.rs"]
mod api;
#[path = "../../fake-nvml/src/ffi.rs"]
mod ffi;
#[path = "../../fake-nvml/src/pattern.rs"]
mod pattern;
#[path = "../../fake-nvml/src/ring.rs"]
mod ring;
#[path = "../../fake-nvml/src/script.rs"]
mod script;
#[path = "../../fake-nvml/src/state.rs"]
mod state;
