//! stackscope's on-disk sample log (`samples.log` in the output directory) and the rebuilding
//! of a recording from it for `stackscope report`.
//!
//! The aggregate a recording keeps in memory is folded: it can say where the time went over
//! the whole recording but not over "the hour before the loss spiked". The sample log keeps
//! every event (stack samples, sampling errors, GPU readings at full resolution, process
//! events) compactly on disk, so that [`rebuild`] can aggregate any time window afterwards.
//!
//! # Writing
//!
//! The recording creates a [`SampleLogWriter`] with a [`LogHeader`], [`SampleLogWriter::append`]s
//! every event in the order the aggregator handles it, and calls [`SampleLogWriter::flush`] at
//! every checkpoint (write + fdatasync). Appending never syncs and writes to the file only
//! when a 16 KiB block fills.
//!
//! # Format
//!
//! A prefix (`STKSCPLG` and a little-endian `u16` format version), then blocks, each
//! `[length u32][CRC-32 u32][records]` (see `block.rs`); the first block holds the header.
//! Records (see `record.rs`) are a tag byte and varint fields. Strings, frames and stacks are
//! interned: each is written once, when first seen, and referred to by id; a stack is a list of
//! frame ids independent of the thread. Threads are defined once and again when their name or
//! OS id changes. A stack sample of a known stack and thread is a tag (with the active and
//! GIL flags), a zigzag time delta in nanoseconds, a thread id and a stack id: about 4 to 7
//! bytes. Interning tables are capped ([`InternLimits`]); past a cap the writer writes a reset
//! record and starts them afresh, so memory stays bounded on both sides.
//!
//! # Reading and damage
//!
//! [`SampleLogReader`] yields the events back, stopping quietly at the first block that is
//! incomplete (a crash, `kill -9`, or a recording still running) or fails its checksum, and
//! says so in [`LogEnd`] with the bytes left out. It does not skip a damaged block to read on:
//! later records refer to definitions and times that may have been in it.
//!
//! # Reports
//!
//! [`rebuild`] feeds the events of a [`Window`] into a fresh aggregator configured as the
//! recording was (the header keeps `include_idle`, `idle_below`, `gpu_enabled`,
//! `process_root`; `report` may override the first two), and builds the
//! [`stackscope_aggregate::RecordingMeta`] from the header and the recording's `summary.json`.
//! An event at `t` seconds after the start is in the window when `from <= t < to`; besides
//! those, the attach events of processes alive at the window's start are fed first (so process
//! roots keep their command), and each device's first GPU reading at or just after `to` (it
//! covers the window's last moments). With no `from` and no `to` every event is fed in the
//! recorded order, so the profiles are exactly the recording's.
//!
//! [`read_trace`] feeds the same events of a window, in the same order, to a
//! [`stackscope_aggregate::SampleTrace`] instead (every kept sample in time order, GPU-tagged
//! by the same rules) for `stackscope export`'s pprof, speedscope and Perfetto files.
//!
//! The caller writes the outputs with `stackscope_report::write_outputs` into [`report_dir`]:
//! `DIR/report-FROM-TO/` by default (`report-0-end`, `report-600-1200`), never `DIR` itself,
//! so a report never overwrites the recording's own files.

mod block;
mod error;
mod header;
mod intern;
mod meta;
mod reader;
mod rebuild;
mod record;
mod replay;
mod trace;
mod varint;
mod window;
mod writer;

pub use block::{BLOCK_TARGET, FORMAT_VERSION, MAGIC};
pub use error::{DecodeError, LogError, RebuildError};
pub use header::LogHeader;
pub use intern::{InternLimits, TableSizes};
pub use reader::{LogEnd, SampleLogReader};
pub use rebuild::{rebuild, RebuildOptions, RebuildOutcome, GPU_COVER_SECS, READ_PAST_END_SECS};
pub use trace::{read_trace, TraceOutcome};
pub use window::{report_dir, Window};
pub use writer::{SampleLogWriter, WriterStats, MAX_STACK_DEPTH, MAX_STRING_LEN};

/// The log's file name in the output directory.
pub const LOG_FILE_NAME: &str = "samples.log";
