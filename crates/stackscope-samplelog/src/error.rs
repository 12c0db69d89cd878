//! The errors of the sample log: writing it, opening it, and rebuilding a report from it.

use std::io;
use std::path::PathBuf;

/// Why a record's bytes do not decode. Inside a block whose checksum holds this means a writer
/// of another format version, so the reader stops there as it would at a corrupt block.
#[derive(Debug, Clone, Copy, PartialEq, Eq, thiserror::Error)]
pub enum DecodeError {
    #[error("the record ends early")]
    Truncated,
    #[error("a number does not fit its field")]
    Overflow,
    #[error("a string is not UTF-8")]
    Utf8,
    #[error("unknown record tag {0:#04x}")]
    UnknownTag(u8),
    #[error("unknown {what} {value}")]
    UnknownValue { what: &'static str, value: u8 },
    #[error("a reference to {what} {id}, which was never defined")]
    UndefinedId { what: &'static str, id: u64 },
    #[error("a {0} record where none may be")]
    Misplaced(&'static str),
    #[error("a {what} table grew past the largest a writer ever makes")]
    TableTooLarge { what: &'static str },
    /// A block that a format-2 writer would not write: one that does not open with a block
    /// start, or whose block start does not add up.
    #[error("{0}")]
    Unsynced(&'static str),
}

/// An error of the log as a file: creating, writing, opening it.
#[derive(Debug, thiserror::Error)]
pub enum LogError {
    #[error("cannot create the sample log {}: {source}", path.display())]
    Create { path: PathBuf, source: io::Error },
    #[error("cannot write the sample log {}: {source}", path.display())]
    Write { path: PathBuf, source: io::Error },
    #[error(
        "the sample log {} is unusable after an earlier write error; later events are not logged",
        path.display()
    )]
    Poisoned { path: PathBuf },
    #[error("cannot read the sample log {}: {source}", path.display())]
    Read { path: PathBuf, source: io::Error },
    #[error("{} is not a stackscope sample log", path.display())]
    NotALog { path: PathBuf },
    #[error(
        "{} is a sample log of format version {found}; this stackscope reads version {supported}",
        path.display()
    )]
    Version {
        path: PathBuf,
        found: u16,
        supported: u16,
    },
    #[error("the sample log {} has no complete header: {why}", path.display())]
    Header { path: PathBuf, why: String },
}

/// An error of `stackscope report`: the log, the window asked for, or the old summary.
#[derive(Debug, thiserror::Error)]
pub enum RebuildError {
    #[error(transparent)]
    Log(#[from] LogError),
    #[error(
        "{} holds no sample log ({}): it is not a stackscope output directory, or the recording \
         predates the sample log",
        dir.display(),
        crate::LOG_FILE_NAME
    )]
    NoLog { dir: PathBuf },
    #[error("bad time window: {0}")]
    Window(String),
    #[error("nothing could be read from the sample log {}: {why}", path.display())]
    NothingRead { path: PathBuf, why: String },
}
