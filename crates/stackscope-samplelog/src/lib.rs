//! stackscope's on-disk sample log (`samples.log` in the output directory): its codec, and
//! which of its events belong to a time window.
//!
//! The aggregate a recording keeps in memory is folded: it can say where the time went over
//! the whole recording but not over "the hour before the loss spiked". The sample log keeps
//! every event (stack samples, sampling errors, GPU readings at full resolution, process
//! events, memory and cgroup readings) compactly on disk, so that any time window can be aggregated afterwards.
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
//! `[length u32][CRC-32 u32][records]` (see `block.rs`); the first block holds the header, and
//! every other opens with a block start (format 2, see `sync.rs`): the epoch, the time bases,
//! the table sizes and a copy of the previous block's definitions, so that a block can be read
//! without the one before it.
//! Records (see `record.rs`) are a tag byte and varint fields. Strings, frames and stacks are
//! interned: each is written once, when first seen, and referred to by id; a stack is a list of
//! frame ids independent of the thread. Threads are defined once and again when their name or
//! OS id changes. A stack sample of a known stack and thread is a tag (with the active and
//! GIL flags), a zigzag time delta in nanoseconds, a thread id and a stack id: about 4 to 7
//! bytes. Interning tables are capped ([`InternLimits`]); past a cap the writer writes a reset
//! record and starts them afresh, so memory stays bounded on both sides.
//!
//! # Segments
//!
//! Without limits the log is one file, `samples.log`. With a size or an age limit
//! ([`LogLimits`], [`SampleLogWriter::create_with`]) it is written in segments, each a log that
//! decodes on its own: `samples.log` is the one being written, the closed ones are
//! `samples.log.000001`, `samples.log.000002`, ..., and the oldest are deleted, whole, while
//! the log is over a limit (see `segments.rs`). [`SampleLogReader::open`] of `samples.log`
//! reads every segment beside it, oldest first ([`log_files`]), and says where the log starts
//! when older segments were deleted ([`SampleLogReader::kept_from`]).
//!
//! # Reading and damage
//!
//! [`SampleLogReader`] yields the events back. A block that fails its checksum (or whose
//! records do not decode) in the middle of the log is skipped: the reader goes on at the next
//! good block, whose block start puts times and tables right, and counts what it skipped in
//! [`Damage`] (the stretches, their bytes, and the events after them that use a definition lost
//! with them: none when one block was lost, whose definitions the next block copies). The
//! writer resets its tables every [`RESET_EVERY_BLOCKS`], which bounds what several lost blocks
//! in a row cost. Reading stops quietly at a block that is incomplete (a crash, `kill -9`, or a
//! recording still running) or damaged with no good block after it, and says so in [`LogEnd`]
//! with the bytes left out. A format-1 log (before block starts) is read as it was written:
//! its reader stops at the first damaged block.
//!
//! # Reports
//!
//! The codec stands alone: it does not know the aggregate. [`feed_window`] hands a callback the
//! events of a [`Window`] in the recorded order (an event at `t` seconds after the start is in
//! the window when `from <= t < to`; besides those, the attach events of processes alive at the
//! window's start are fed first, so process roots keep their command, and each device's first
//! GPU reading at or just after `to`, which covers the window's last moments; memory and
//! cgroup readings are instants, fed when inside the window only). With no `from`
//! and no `to` every event is fed in the recorded order. `stackscope_report::rebuild` and
//! `stackscope_report::read_trace`, where the log and the aggregate meet, feed them to an
//! aggregator or a trace configured as the recording was (the header keeps `include_idle`,
//! `idle_below`, `gpu_enabled`, `process_root`), and write into [`report_dir`]:
//! `DIR/report-FROM-TO/` by default (`report-0-end`, `report-600-1200`), never `DIR` itself,
//! so a report never overwrites the recording's own files.

mod block;
mod error;
mod feed;
mod header;
mod intern;
mod memory_record;
mod reader;
mod record;
mod replay;
mod segments;
pub mod stretch;
mod sync;
mod varint;
mod window;
mod writer;

pub use block::{BLOCK_TARGET, FORMAT_VERSION, MAGIC};
pub use error::{DecodeError, LogError, RebuildError};
pub use feed::{feed_window, Fed, GPU_COVER_SECS, READ_PAST_END_SECS};
pub use header::LogHeader;
pub use intern::{InternLimits, TableSizes};
pub use reader::{Damage, LogEnd, SampleLogReader, SegmentStart};
pub use segments::{log_exists, log_files, segment_file_name, LogLimits, SegmentStats};
pub use window::{report_dir, Window};
pub use writer::{
    SampleLogWriter, WriterStats, MAX_STACK_DEPTH, MAX_STRING_LEN, RESET_EVERY_BLOCKS,
};

/// The log's file name in the output directory.
pub const LOG_FILE_NAME: &str = "samples.log";
