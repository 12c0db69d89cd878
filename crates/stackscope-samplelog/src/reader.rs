//! [`SampleLogReader`]: the events of a sample log, back as [`Event`]s.
//!
//! A block that fails its checksum, or whose records do not decode, is damage. In a format-2
//! log the reader skips it and goes on at the next good block (`block::find_block`), whose
//! block start puts the tables and times right again (`sync.rs`); it counts what it skipped
//! ([`Damage`]). A format-1 log has no block starts: its reader stops at the damage.
//!
//! A log kept in segments (`segments.rs`) is read segment after segment, oldest first, each
//! with tables and times of its own; the attach events a segment repeats at its start are
//! skipped when the segment before it was read. A segment that cannot be read, or whose end is
//! torn or damaged, counts as damage, and reading goes on with the next.

use std::collections::{BTreeSet, VecDeque};
use std::fs::File;
use std::io::{BufReader, Seek, SeekFrom};
use std::path::{Path, PathBuf};

use stackscope_event::{Event, ProcessEventKind, Timestamp};

use crate::block::{
    find_block, read_block, read_full, BlockRead, BLOCK_HEAD_LEN, FORMAT_VERSION, MAGIC,
    OLDEST_FORMAT, PREFIX_LEN,
};
use crate::error::{DecodeError, LogError};
use crate::header::LogHeader;
use crate::record::{decode, Record, SegmentRecord};
use crate::replay::Replay;
use crate::segments::log_files;
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
    /// A block failed its checksum, or a record in it did not decode, and nothing after it
    /// could be read: no good block follows it (format 2), or the format cannot go on past
    /// damage (format 1, whose records after it refer to definitions and times that may be in
    /// the lost part).
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

/// The damage a reader went past, in the middle of a format-2 log.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct Damage {
    /// Damaged stretches skipped: each a block (or, where a block's length was what was
    /// damaged, the bytes up to the next good block).
    pub blocks: u64,
    pub bytes: u64,
    /// Events after the damage that use a definition that was in it, left out.
    pub lost_events: u64,
}

/// Where the oldest segment read of a segmented log starts.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct SegmentStart {
    /// Its number: 1 for the recording's first segment, more when older ones were deleted.
    pub index: u64,
    /// Its start, on the event clock.
    pub start: Timestamp,
}

/// Reads a sample log: [`SampleLogReader::open`] reads the header, then iterating yields the
/// events in the order they were appended. Damage in the middle is skipped where the format
/// allows ([`SampleLogReader::damage`]); a torn or damaged tail ends the iteration quietly
/// (see [`SampleLogReader::end`]); only an I/O error is yielded as an error, once, and ends it.
/// A log kept in segments is read whole, oldest segment first.
#[derive(Debug)]
pub struct SampleLogReader {
    /// The log as named: `samples.log`.
    path: PathBuf,
    /// The file being read: `path`, or one of its segments.
    file_path: PathBuf,
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
    /// The file's format: 2 goes on past damage, 1 stops there.
    version: u16,
    /// Format 2: the current block's first record, a block start, is still to come.
    at_block_start: bool,
    damage: Damage,
    /// The segments still to read, oldest first.
    rest: VecDeque<PathBuf>,
    /// Files of the log: 1 without segments.
    files: usize,
    /// The oldest segment read, of a segmented log.
    first_segment: Option<SegmentStart>,
    /// Events at the start of the current segment that may repeat attach events already read.
    carried: u64,
    /// Processes attached and not ended in what was read (of a segmented log): their attach
    /// events that a segment repeats are skipped.
    alive: BTreeSet<u32>,
}

/// One file of the log, opened: its header read.
struct Opened {
    input: BufReader<File>,
    header: LogHeader,
    version: u16,
    /// The header block, and the read position after the header (and segment) records.
    block: Vec<u8>,
    pos: usize,
    next_offset: u64,
    segment: Option<SegmentRecord>,
}

impl SampleLogReader {
    /// Opens the log at `path` (a recording's `samples.log`) and reads its header; a log kept
    /// in segments is read from its oldest segment on.
    pub fn open(path: &Path) -> Result<SampleLogReader, LogError> {
        let mut files: VecDeque<PathBuf> = log_files(path).into();
        if files.len() > 1 {
            keep_one_recording(&mut files);
        }
        SampleLogReader::open_files(path, files)
    }

    /// Opens the one file at `path` alone: a log without segments, or one segment of a log,
    /// which decodes without the others.
    pub fn open_segment(path: &Path) -> Result<SampleLogReader, LogError> {
        SampleLogReader::open_files(path, VecDeque::from([path.to_owned()]))
    }

    fn open_files(path: &Path, mut rest: VecDeque<PathBuf>) -> Result<SampleLogReader, LogError> {
        let mut damage = Damage::default();
        let files = rest.len();
        let (file_path, opened) = loop {
            let Some(file) = rest.pop_front() else {
                // No file at all (the last one's error is returned below).
                return Err(LogError::NotALog {
                    path: path.to_owned(),
                });
            };
            match open_file(&file) {
                Ok(opened) => break (file, opened),
                Err(e) if rest.is_empty() => return Err(e),
                Err(_) => {
                    damage.blocks += 1;
                    damage.bytes += file_size(&file);
                }
            }
        };
        Ok(SampleLogReader {
            path: path.to_owned(),
            file_path,
            input: opened.input,
            header: opened.header,
            block: opened.block,
            pos: opened.pos,
            payload_offset: (PREFIX_LEN + BLOCK_HEAD_LEN) as u64,
            next_offset: opened.next_offset,
            replay: Replay::default(),
            events: 0,
            end: None,
            failed: false,
            version: opened.version,
            at_block_start: false,
            damage,
            rest,
            files,
            first_segment: opened.segment.map(|s| SegmentStart {
                index: s.index,
                start: s.start,
            }),
            carried: 0,
            alive: BTreeSet::new(),
        })
    }

    /// Goes on with the next segment, if there is one: `false` at the log's end. A segment
    /// that cannot be opened counts as damage.
    fn next_file(&mut self) -> bool {
        while let Some(file) = self.rest.pop_front() {
            match open_file(&file) {
                Ok(opened) => {
                    self.file_path = file;
                    self.input = opened.input;
                    self.block = opened.block;
                    self.pos = opened.pos;
                    self.payload_offset = (PREFIX_LEN + BLOCK_HEAD_LEN) as u64;
                    self.next_offset = opened.next_offset;
                    self.damage.lost_events += self.replay.lost_events();
                    self.replay = Replay::default();
                    self.version = opened.version;
                    self.at_block_start = false;
                    self.carried = opened.segment.map_or(0, |s| s.carried);
                    return true;
                }
                Err(_) => {
                    self.damage.blocks += 1;
                    self.damage.bytes += file_size(&file);
                }
            }
        }
        false
    }

    /// Files the log is in: 1 without segments.
    pub fn files(&self) -> usize {
        self.files
    }

    /// The oldest segment read of a log kept in segments; `None` for a log in one file.
    pub fn first_segment(&self) -> Option<SegmentStart> {
        self.first_segment
    }

    /// Where the log starts when its oldest segments were deleted (to keep it within its
    /// limits): the start of the oldest one kept, on the event clock. `None` when the log
    /// starts with the recording.
    pub fn kept_from(&self) -> Option<Timestamp> {
        self.first_segment.filter(|s| s.index > 1).map(|s| s.start)
    }

    /// The damage skipped so far.
    pub fn damage(&self) -> Damage {
        Damage {
            lost_events: self.damage.lost_events + self.replay.lost_events(),
            ..self.damage
        }
    }

    /// Whether the format goes on past a damaged block (format 2 and later).
    fn resyncs(&self) -> bool {
        self.version >= 2
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
        let opens = matches!(record, Record::BlockStart(_));
        if opens != std::mem::take(&mut self.at_block_start) {
            return Err(DecodeError::Unsynced(if opens {
                "a block start inside a block"
            } else {
                "a block that does not open with a block start"
            }));
        }
        let event = self.replay.apply(record)?;
        self.pos += consumed;
        Ok(event)
    }

    /// Goes on past the damaged block at `offset` (whose length field says `claimed`) at the
    /// next good one; `false` when there is none (or the format cannot).
    fn skip_damage(&mut self, offset: u64, claimed: u64) -> Result<bool, LogError> {
        if !self.resyncs() {
            return Ok(false);
        }
        let read_error = |source| LogError::Read {
            path: self.file_path.clone(),
            source,
        };
        let file_len = self.file_len();
        let Some(next) =
            find_block(self.input.get_ref(), offset, claimed, file_len).map_err(read_error)?
        else {
            return Ok(false);
        };
        self.input
            .seek(SeekFrom::Start(next))
            .map_err(|source| LogError::Read {
                path: self.file_path.clone(),
                source,
            })?;
        self.damage.blocks += 1;
        self.damage.bytes += next - offset;
        self.next_offset = next;
        self.block.clear();
        self.pos = 0;
        self.replay.lose_sync();
        Ok(true)
    }

    fn file_len(&self) -> u64 {
        self.input.get_ref().metadata().map_or(0, |m| m.len())
    }

    /// An I/O error: the iteration yields it and ends.
    fn fail(&mut self, source: std::io::Error) -> LogError {
        self.failed = true;
        LogError::Read {
            path: self.file_path.clone(),
            source,
        }
    }

    /// Reading the current file ends early at `offset`: a segment before the last counts it
    /// as damage and goes on with the next; else the log ends there.
    fn stop(&mut self, offset: u64, corrupt: Option<String>) {
        let ignored_bytes = self.file_len().saturating_sub(offset);
        if !self.rest.is_empty() {
            self.damage.blocks += 1;
            self.damage.bytes += ignored_bytes;
            self.block.clear();
            self.pos = 0;
            if self.next_file() {
                return;
            }
        }
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

    /// Whether `event` is one of the attach events a segment repeats at its start of a process
    /// already attached in what was read, to be skipped; notes which processes are alive.
    fn repeated(&mut self, event: &Event) -> bool {
        let carried = self.carried > 0;
        self.carried = self.carried.saturating_sub(1);
        if self.first_segment.is_none() {
            return false;
        }
        let Event::Process(process) = event else {
            return false;
        };
        match process.kind {
            ProcessEventKind::Attached => {
                let known = !self.alive.insert(process.pid);
                carried && known
            }
            ProcessEventKind::Exited => {
                self.alive.remove(&process.pid);
                false
            }
        }
    }
}

/// Opens one file of a log: checks its prefix, reads its header block (the header, and the
/// segment record of a segmented log).
fn open_file(path: &Path) -> Result<Opened, LogError> {
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
    if !(OLDEST_FORMAT..=FORMAT_VERSION).contains(&version) {
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
        BlockRead::Corrupt { .. } => return Err(header_error("its header block is damaged")),
    };
    let mut bytes = Bytes::new(&block);
    let header = match decode(&mut bytes) {
        Ok(Record::Header(header)) => header,
        Ok(_) => return Err(header_error("its first record is not a header")),
        Err(e) => return Err(header_error(&e.to_string())),
    };
    let mut pos = bytes.position();
    let mut segment = None;
    if bytes.remaining() > 0 {
        if let Ok(Record::Segment(record)) = decode(&mut bytes) {
            segment = Some(record);
            pos = bytes.position();
        }
    }
    Ok(Opened {
        input,
        header,
        version,
        block,
        pos,
        next_offset: PREFIX_LEN as u64 + len,
        segment,
    })
}

/// Keeps, of the files beside a log, those of the recording the newest one (the segment being
/// written) belongs to: the same start, wall-clock start and pid. Segments of another
/// recording left in the directory are not read.
fn keep_one_recording(files: &mut VecDeque<PathBuf>) {
    let key = |path: &PathBuf| {
        open_file(path)
            .ok()
            .map(|o| (o.header.start, o.header.started_at, o.header.pid))
    };
    let Some(newest) = files.iter().rev().find_map(key) else {
        return;
    };
    files.retain(|path| key(path).is_none_or(|k| k == newest));
}

fn file_size(path: &Path) -> u64 {
    std::fs::metadata(path).map_or(0, |m| m.len())
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
                        if self.repeated(&event) {
                            continue;
                        }
                        self.events += 1;
                        return Some(Ok(event));
                    }
                    Ok(None) => continue,
                    Err(_) if self.resyncs() => {
                        // A block whose checksum holds but whose records do not decode: the
                        // rest of it is skipped, and the next block's start resynchronises.
                        let block_offset = self.payload_offset - BLOCK_HEAD_LEN as u64;
                        self.damage.blocks += 1;
                        self.damage.bytes += self.next_offset - block_offset;
                        self.replay.lose_sync();
                        self.block.clear();
                        self.pos = 0;
                        continue;
                    }
                    Err(e) => {
                        let offset = self.payload_offset + self.pos as u64;
                        self.stop(offset, Some(format!("a record does not decode: {e}")));
                        continue;
                    }
                }
            }
            let offset = self.next_offset;
            let read = match read_block(&mut self.input, &mut self.block) {
                Ok(read) => read,
                Err(source) => return Some(Err(self.fail(source))),
            };
            let (claimed, why) = match read {
                BlockRead::Block(len) => {
                    self.pos = 0;
                    self.payload_offset = offset + BLOCK_HEAD_LEN as u64;
                    self.next_offset = offset + len;
                    self.at_block_start = self.resyncs();
                    continue;
                }
                BlockRead::End => {
                    self.block.clear();
                    self.pos = 0;
                    if !self.next_file() {
                        self.end = Some(LogEnd::Complete);
                        return None;
                    }
                    continue;
                }
                BlockRead::Torn => (0, None),
                BlockRead::Corrupt { claimed } => (
                    claimed,
                    Some("a block's length or checksum is wrong".to_owned()),
                ),
            };
            match self.skip_damage(offset, claimed) {
                Ok(true) => {}
                Ok(false) => self.stop(offset, why),
                Err(e) => {
                    self.failed = true;
                    return Some(Err(e));
                }
            }
        }
    }
}
