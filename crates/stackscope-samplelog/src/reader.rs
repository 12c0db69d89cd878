//! [`SampleLogReader`]: the events of a sample log, back as [`Event`]s.

use std::fs::File;
use std::io::BufReader;
use std::path::{Path, PathBuf};

use stackscope_event::Event;

use crate::block::{
    read_block, read_full, BlockRead, BLOCK_HEAD_LEN, FORMAT_VERSION, MAGIC, PREFIX_LEN,
};
use crate::error::{DecodeError, LogError};
use crate::header::LogHeader;
use crate::record::{decode, Record};
use crate::replay::Replay;
use crate::varint::Bytes;

const READ_BUFFER: usize = 256 * 1024;

/// How reading a log ended.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum LogEnd {
    /// Every byte belonged to a valid block.
    Complete,
    /// The file ends inside a block, as after a crash or `kill -9`, or while the recording is
    /// still writing it: the records of that last block are not read.
    Torn { offset: u64, ignored_bytes: u64 },
    /// A block failed its checksum, or a record in it did not decode. Reading stops there:
    /// the records after it refer to definitions and times that may be in the lost part, so
    /// nothing after a damaged block is trusted.
    Corrupt {
        offset: u64,
        ignored_bytes: u64,
        why: String,
    },
}

impl LogEnd {
    /// Bytes at the end of the file that were not read.
    pub fn ignored_bytes(&self) -> u64 {
        match self {
            LogEnd::Complete => 0,
            LogEnd::Torn { ignored_bytes, .. } | LogEnd::Corrupt { ignored_bytes, .. } => {
                *ignored_bytes
            }
        }
    }
}

/// Reads a sample log: [`SampleLogReader::open`] reads the header, then iterating yields the
/// events in the order they were appended. A torn or damaged tail ends the iteration quietly
/// (see [`SampleLogReader::end`]); only an I/O error is yielded as an error, once, and ends it.
#[derive(Debug)]
pub struct SampleLogReader {
    path: PathBuf,
    input: BufReader<File>,
    header: LogHeader,
    /// The current block's payload and the read position in it.
    block: Vec<u8>,
    pos: usize,
    /// File offset of the current block's payload.
    payload_offset: u64,
    /// File offset of the next block.
    next_offset: u64,
    replay: Replay,
    events: u64,
    end: Option<LogEnd>,
    failed: bool,
}

impl SampleLogReader {
    pub fn open(path: &Path) -> Result<SampleLogReader, LogError> {
        let read_error = |source| LogError::Read {
            path: path.to_owned(),
            source,
        };
        let header_error = |why: &str| LogError::Header {
            path: path.to_owned(),
            why: why.to_owned(),
        };
        let file = File::open(path).map_err(read_error)?;
        let mut input = BufReader::with_capacity(READ_BUFFER, file);
        let mut prefix = [0u8; PREFIX_LEN];
        let got = read_full(&mut input, &mut prefix).map_err(read_error)?;
        let magic_len = got.min(MAGIC.len());
        if prefix[..magic_len] != MAGIC[..magic_len] {
            return Err(LogError::NotALog {
                path: path.to_owned(),
            });
        }
        if got < PREFIX_LEN {
            return Err(header_error("the file ends before its header"));
        }
        let version = u16::from_le_bytes([prefix[MAGIC.len()], prefix[MAGIC.len() + 1]]);
        if version != FORMAT_VERSION {
            return Err(LogError::Version {
                path: path.to_owned(),
                found: version,
                supported: FORMAT_VERSION,
            });
        }
        let mut block = Vec::new();
        let len = match read_block(&mut input, &mut block).map_err(read_error)? {
            BlockRead::Block(len) => len,
            BlockRead::End | BlockRead::Torn => {
                return Err(header_error("the file ends inside its header"))
            }
            BlockRead::Corrupt => return Err(header_error("its header block is damaged")),
        };
        let mut bytes = Bytes::new(&block);
        let header = match decode(&mut bytes) {
            Ok(Record::Header(header)) => header,
            Ok(_) => return Err(header_error("its first record is not a header")),
            Err(e) => return Err(header_error(&e.to_string())),
        };
        let pos = bytes.position();
        let next_offset = PREFIX_LEN as u64 + len;
        Ok(SampleLogReader {
            path: path.to_owned(),
            input,
            header,
            block,
            pos,
            payload_offset: (PREFIX_LEN + BLOCK_HEAD_LEN) as u64,
            next_offset,
            replay: Replay::default(),
            events: 0,
            end: None,
            failed: false,
        })
    }

    pub fn header(&self) -> &LogHeader {
        &self.header
    }

    pub fn path(&self) -> &Path {
        &self.path
    }

    /// Events yielded so far.
    pub fn events_read(&self) -> u64 {
        self.events
    }

    /// How reading ended; `None` until the iteration has ended (or when it ended on an I/O
    /// error).
    pub fn end(&self) -> Option<&LogEnd> {
        self.end.as_ref()
    }

    /// Decodes the next record of the current block; `Ok(None)` for a definition.
    fn next_in_block(&mut self) -> Result<Option<Event>, DecodeError> {
        let mut bytes = Bytes::new(&self.block[self.pos..]);
        let record = decode(&mut bytes)?;
        let consumed = bytes.position();
        let event = self.replay.apply(record)?;
        self.pos += consumed;
        Ok(event)
    }

    fn file_len(&self) -> u64 {
        self.input.get_ref().metadata().map_or(0, |m| m.len())
    }

    fn stop(&mut self, offset: u64, corrupt: Option<String>) {
        let ignored_bytes = self.file_len().saturating_sub(offset);
        self.end = Some(match corrupt {
            None => LogEnd::Torn {
                offset,
                ignored_bytes,
            },
            Some(why) => LogEnd::Corrupt {
                offset,
                ignored_bytes,
                why,
            },
        });
        self.block.clear();
        self.pos = 0;
    }
}

impl Iterator for SampleLogReader {
    type Item = Result<Event, LogError>;

    fn next(&mut self) -> Option<Self::Item> {
        loop {
            if self.end.is_some() || self.failed {
                return None;
            }
            if self.pos < self.block.len() {
                match self.next_in_block() {
                    Ok(Some(event)) => {
                        self.events += 1;
                        return Some(Ok(event));
                    }
                    Ok(None) => continue,
                    Err(e) => {
                        let offset = self.payload_offset + self.pos as u64;
                        self.stop(offset, Some(format!("a record does not decode: {e}")));
                        return None;
                    }
                }
            }
            let offset = self.next_offset;
            match read_block(&mut self.input, &mut self.block) {
                Ok(BlockRead::Block(len)) => {
                    self.pos = 0;
                    self.payload_offset = offset + BLOCK_HEAD_LEN as u64;
                    self.next_offset = offset + len;
                }
                Ok(BlockRead::End) => {
                    self.block.clear();
                    self.pos = 0;
                    self.end = Some(LogEnd::Complete);
                }
                Ok(BlockRead::Torn) => self.stop(offset, None),
                Ok(BlockRead::Corrupt) => self.stop(
                    offset,
                    Some("a block's length or checksum is wrong".to_owned()),
                ),
                Err(source) => {
                    self.failed = true;
                    return Some(Err(LogError::Read {
                        path: self.path.clone(),
                        source,
                    }));
                }
            }
        }
    }
}
