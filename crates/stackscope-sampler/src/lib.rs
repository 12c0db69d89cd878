//! Attaches to a live Python process from outside and reads every thread's Python stack.
//!
//! [`PythonTarget`] is one attached process: it finds the interpreter (through py-spy's
//! layouts), and reads consistent stacks by stopping the process only for the reads (the stop is
//! a guard whose Drop resumes every thread, so an error or a panic never leaves the target
//! stopped). [`Sampler`] runs a target on its own thread at a fixed rate and streams
//! [`stackscope_event::Event`]s to the aggregator without ever blocking; [`dump`] reads every
//! thread once, for the `dump` command.

pub mod batch;
mod caps;
mod cputime;
mod dump;
mod ends;
mod error;
mod fast;
mod ident_reuse;
mod idle;
mod leader;
pub mod namespace;
mod origin;
mod permission;
mod proc_events;
pub mod procfs;
mod root;
mod sampler;
mod slice;
mod target;
mod timer;
mod tree;
mod tuning;

pub use caps::cap_notice;
pub use dump::{dump_process, dump_target, dump_tree, rlock_owner};
pub use ends::EndWatch;
pub use error::{classify_sample_error, AttachError, SampleFailure};
pub use procfs::descendants;
pub use root::{python_descendants, OtherProcess, Root};
pub use sampler::{reader_name, Sampler, SamplerConfig, SamplerReport, SamplerStats, StopReason};
pub use stackscope_event::{FrameDump, LocalVariable, ProcessDump, ThreadDump, ThreadState};
pub use target::{
    check_supported_version, IdleAudit, KeptStats, PythonTarget, TargetOptions, ThreadStack,
};
pub use timer::{SampleTimer, Tick};
pub use tree::ProcessSet;
pub use tuning::{ReaderChoice, ReaderTuning, ShortSlices};
