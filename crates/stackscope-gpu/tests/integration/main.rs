//! The GPU poller against the fake NVML libraries, one test binary: the poller's scenarios and
//! GPM. Each scenario runs in a process of its own (see `support`), selected by its path here.

mod support;

mod fake_nvml;
mod gpm;
