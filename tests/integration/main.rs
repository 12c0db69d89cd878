//! The integration tests: the real `stackscope` binary against live Python fixtures from
//! `fixtures/`, one module per area, all in one test binary (as ripgrep lays out its tests) so
//! that the suite compiles and links one executable instead of one per file, and one test
//! harness packs every test onto the machine's cores.
//!
//! Run one area with `cargo test --test integration attach::`, or one test by its name.
//! Helpers every area shares live in `common`: they are the only state the areas share (the
//! `serial()` lock that keeps CPU-bound fixtures from competing is one lock for the whole
//! suite). No test changes the process's environment, current directory or signal handlers.

mod common;

mod attach;
mod compare;
mod compare_page;
mod compiled_code;
mod containers;
mod damaged_logs;
mod dump;
mod epoch_workers;
mod errors;
mod export;
mod gil_shapes;
mod gpu;
mod hang_causes;
mod hang_diagnosis;
mod hangs_after;
mod log_limit;
mod long_recordings;
mod loop_no_gpu;
mod memory;
mod memory_gpu;
mod memory_kills;
mod multinode;
mod origins;
mod proc_trees;
mod py_versions;
mod pyspy_scenarios;
mod readme;
mod record;
mod report;
mod report_gil_page;
mod report_html;
mod report_memory_page;
mod report_page;
mod report_views;
mod roles;
mod rough_edges;
mod servers;
mod shapes;
mod subprocesses;
mod thread_names;
mod top;
mod version;
mod watch;
mod watch_gpu;
