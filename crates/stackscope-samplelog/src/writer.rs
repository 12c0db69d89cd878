//! [`SampleLogWriter`]: appends events to `samples.log` as the recording runs.

use std::fs::{self, File};
use std::io::{Seek, SeekFrom, Write};
use std::path::{Path, PathBuf};
use std::sync::Arc;

use stackscope_event::{
    CgroupSample, Event, Frame, GpuSample, LastStacks, MemorySample, ProcessEvent, SampleError,
    StackSample,
};

use crate::block::{prefix, seal, BLOCK_HEAD_LEN, BLOCK_TARGET};
use crate::error::LogError;
use crate::header::LogHeader;
use crate::intern::{Growth, InternLimits, TableSizes, ThreadEntry, WriterTables};
use crate::memory_record::{put_cgroup, put_memory};
use crate::record::{
    put_block_start, put_error, put_frame, put_gpu, put_header, put_process, put_reset, put_sample,
    put_segment, put_stack, put_string, put_thread, SegmentRecord, ThreadRecord,
};
use crate::segments::{remove_stale, segment_file_name, LogLimits, SegmentStats, Segmenter};
use crate::sync::{Counts, Definitions};
use crate::LOG_FILE_NAME;

/// The longest string stored; longer ones are cut at a character boundary.
pub const MAX_STRING_LEN: usize = 64 * 1024;
/// The deepest stack stored; of deeper ones the innermost frames are kept.
pub const MAX_STACK_DEPTH: usize = 65_536;
/// The writer resets its tables after this many blocks, at the next block's start: a block
/// start's copy covers one lost block, and this bounds what two or more lost in a row cost
/// (their definitions, and so the events that use them, up to the next reset: at most 1 MiB of
/// full blocks), for a few percent of redefinitions.
pub const RESET_EVERY_BLOCKS: u64 = 64;

/// Counts of what the writer did, for the summary and for tests.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct WriterStats {
    /// Events appended (including any lost to a write error since).
    pub events: u64,
    /// Resets written because an interning table reached its limit.
    pub resets: u64,
    /// Events that were buffered when a write failed, and so are not in the log.
    pub lost_events: u64,
}

/// Appends events to a sample log: buffered in blocks of [`BLOCK_TARGET`] bytes, each handed
/// to the OS in one write; [`SampleLogWriter::flush`] writes the open block and syncs the file.
/// With [`LogLimits`] the log is written in segments, the oldest deleted (`segments.rs`).
///
/// Dropping the writer writes the open block (without syncing); call `flush` at the end to
/// know it reached the disk.
#[derive(Debug)]
pub struct SampleLogWriter {
    path: PathBuf,
    file: File,
    /// The open block: [`BLOCK_HEAD_LEN`] bytes left for its head, then records.
    block: Vec<u8>,
    block_events: u64,
    tables: WriterTables,
    limits: InternLimits,
    /// Time of the last stack sample, error or process event (the tick clock).
    tick_base: u64,
    /// Time of the last GPU sample.
    gpu_base: u64,
    /// Time of the open block's last memory or cgroup reading: 0 at each block start and
    /// reset, which is where the reader starts it too (`memory_record.rs`).
    memory_base: u64,
    /// Bytes in the file: the prefix and every block written.
    written: u64,
    poisoned: bool,
    stats: WriterStats,
    /// Frame ids of the stack being written.
    scratch: Vec<u32>,
    /// Each thread's last stack as written, and its id: cleared with the tables.
    last_stacks: LastStacks<(u32, u64), u32>,
    /// The epoch and the definitions each block-start record copies (`sync.rs`).
    defs: Definitions,
    /// Blocks written since the tables were last reset.
    blocks_since_reset: u64,
    /// The log's segments, under limits; `None`: one file, kept whole.
    segments: Option<Segmenter>,
    /// The recording's header, which every segment repeats (under limits only).
    header: Option<LogHeader>,
    /// Bytes of the current file's prefix and header block.
    header_bytes: u64,
}

impl SampleLogWriter {
    /// Creates (or truncates) `dir/samples.log` and writes the header, synced.
    pub fn create(dir: &Path, header: &LogHeader) -> Result<SampleLogWriter, LogError> {
        SampleLogWriter::create_with_limits(dir, header, InternLimits::default())
    }

    /// As [`SampleLogWriter::create`], with other table limits (clamped to the hard ones).
    pub fn create_with_limits(
        dir: &Path,
        header: &LogHeader,
        limits: InternLimits,
    ) -> Result<SampleLogWriter, LogError> {
        SampleLogWriter::create_with(dir, header, limits, LogLimits::NONE)
    }

    /// As [`SampleLogWriter::create`], keeping the log within `log_limits`: in segments, the
    /// oldest deleted (`segments.rs`). Without limits the log is one file, as `create` writes
    /// it.
    pub fn create_with(
        dir: &Path,
        header: &LogHeader,
        limits: InternLimits,
        log_limits: LogLimits,
    ) -> Result<SampleLogWriter, LogError> {
        let path = dir.join(LOG_FILE_NAME);
        // Segments an earlier recording left here would read as this log's.
        remove_stale(&path).map_err(|source| LogError::Create {
            path: path.clone(),
            source,
        })?;
        let segments =
            (!log_limits.is_unlimited()).then(|| Segmenter::new(log_limits, header.start));
        let segment = segments.as_ref().map(|s| SegmentRecord {
            index: s.index,
            start: header.start,
            carried: 0,
        });
        let (file, written) = create_file(&path, header, segment.as_ref())?;
        let block = vec![0u8; BLOCK_HEAD_LEN];
        Ok(SampleLogWriter {
            path,
            file,
            block,
            block_events: 0,
            tables: WriterTables::default(),
            limits: limits.clamped(),
            tick_base: 0,
            gpu_base: 0,
            memory_base: 0,
            written,
            poisoned: false,
            stats: WriterStats::default(),
            scratch: Vec::new(),
            last_stacks: LastStacks::default(),
            defs: Definitions::default(),
            blocks_since_reset: 0,
            header: segments.is_some().then(|| header.clone()),
            segments,
            header_bytes: written,
        })
    }

    /// Adds one event. Writes to the file only when a block fills; never syncs.
    ///
    /// After a failed write the events of that block are lost (counted in
    /// [`WriterStats::lost_events`]), the file is cut back to its last whole block and the
    /// writer goes on with a reset; only when even that fails does it refuse further events.
    pub fn append(&mut self, event: &Event) -> Result<(), LogError> {
        if self.poisoned {
            return Err(LogError::Poisoned {
                path: self.path.clone(),
            });
        }
        if let Some(segments) = self.segments.as_mut() {
            segments.note(event);
        }
        if self.block.len() == BLOCK_HEAD_LEN {
            self.start_block();
        }
        match event {
            Event::Stack(sample) => self.stack(sample),
            Event::SampleError(error) => self.error(error),
            Event::Gpu(sample) => self.gpu(sample),
            Event::Process(process) => self.process(process),
            Event::Memory(sample) => self.memory(sample),
            Event::Cgroup(sample) => self.cgroup(sample),
        }
        self.stats.events += 1;
        self.block_events += 1;
        if self.block.len() >= BLOCK_HEAD_LEN + BLOCK_TARGET {
            self.write_block()?;
            self.keep_within_limits()?;
        }
        Ok(())
    }

    /// Writes the open block and syncs the file's data (fdatasync): call at every checkpoint.
    pub fn flush(&mut self) -> Result<(), LogError> {
        if self.poisoned {
            return Err(LogError::Poisoned {
                path: self.path.clone(),
            });
        }
        self.write_block()?;
        self.sync()?;
        let segment = self.segments.as_ref().map(|s| s.index);
        self.keep_within_limits()?;
        // A segment opened here starts with the processes alive: on disk too, now.
        if self.segments.as_ref().map(|s| s.index) != segment {
            self.write_block()?;
            self.sync()?;
        }
        Ok(())
    }

    fn sync(&mut self) -> Result<(), LogError> {
        self.file.sync_data().map_err(|source| LogError::Write {
            path: self.path.clone(),
            source,
        })
    }

    /// Under limits, after a block was written: closes the segment when it is full or spans
    /// its share of the age limit, and deletes the oldest segments while the log is over a
    /// limit.
    fn keep_within_limits(&mut self) -> Result<(), LogError> {
        let Some(segments) = self.segments.as_ref() else {
            return Ok(());
        };
        if segments.due(self.written, self.written > self.header_bytes) {
            self.next_segment()?;
        }
        if let Some(segments) = self.segments.as_mut() {
            segments.drop_oldest(self.written);
        }
        Ok(())
    }

    /// Closes the segment being written (whole, synced), renames it after its number, and
    /// opens the next as `samples.log`: the header, the segment record, and the attach events
    /// of the processes alive, with the tables and time bases started afresh. The open block
    /// is empty here. A failure here leaves the writer unusable.
    fn next_segment(&mut self) -> Result<(), LogError> {
        let (Some(segments), Some(header)) = (self.segments.as_mut(), self.header.as_ref()) else {
            return Ok(());
        };
        let write_error = |path: &Path, source| LogError::Write {
            path: path.to_owned(),
            source,
        };
        let closed = self.path.with_file_name(segment_file_name(segments.index));
        let alive = segments.alive();
        let segment = SegmentRecord {
            index: segments.index + 1,
            start: segments.next_start(),
            carried: alive.len() as u64,
        };
        let opened = self
            .file
            .sync_data()
            .map_err(|e| write_error(&self.path, e))
            .and_then(|()| fs::rename(&self.path, &closed).map_err(|e| write_error(&closed, e)))
            .and_then(|()| create_file(&self.path, header, Some(&segment)));
        let (file, written) = match opened {
            Ok(opened) => opened,
            Err(e) => {
                self.poisoned = true;
                return Err(e);
            }
        };
        segments.closed(closed, self.written);
        self.file = file;
        self.written = written;
        self.header_bytes = written;
        // What a new writer starts from: the segment decodes without the ones before it.
        self.tables.clear();
        self.last_stacks.clear();
        self.tick_base = 0;
        self.gpu_base = 0;
        self.memory_base = 0;
        self.defs = Definitions::default();
        self.blocks_since_reset = 0;
        self.block.truncate(BLOCK_HEAD_LEN);
        self.block_events = 0;
        for process in &alive {
            if self.block.len() == BLOCK_HEAD_LEN {
                self.start_block();
            }
            self.process(process);
        }
        Ok(())
    }

    /// What became of the log's segments: one file and nothing deleted without limits.
    pub fn segments(&self) -> SegmentStats {
        match &self.segments {
            Some(segments) => segments.stats(self.written),
            None => SegmentStats {
                segments: 1,
                bytes: self.written,
                ..SegmentStats::default()
            },
        }
    }

    /// The limits the log is kept within.
    pub fn log_limits(&self) -> LogLimits {
        self.segments
            .as_ref()
            .map_or(LogLimits::NONE, |segments| segments.limits)
    }

    /// Bytes handed to the OS so far: the file's size, not counting the open block.
    pub fn bytes_written(&self) -> u64 {
        self.written
    }

    /// Bytes of records waiting in the open block.
    pub fn bytes_pending(&self) -> u64 {
        (self.block.len() - BLOCK_HEAD_LEN) as u64
    }

    pub fn stats(&self) -> WriterStats {
        self.stats
    }

    /// What the interning tables hold now: at most the limits, plus one sample's worth.
    pub fn table_sizes(&self) -> TableSizes {
        self.tables.sizes()
    }

    pub fn limits(&self) -> InternLimits {
        self.limits
    }

    pub fn path(&self) -> &Path {
        &self.path
    }

    fn stack(&mut self, sample: &StackSample) {
        let frames = &sample.frames[..sample.frames.len().min(MAX_STACK_DEPTH)];
        let key = (sample.pid, sample.thread.python_thread_id);
        let thread = match self.tables.threads.get(&key) {
            Some(t)
                if t.os_thread_id == sample.thread.os_thread_id && t.name == sample.thread.name =>
            {
                Some(t.id)
            }
            _ => None,
        };
        let remembered = self.last_stacks.get(&key, frames);
        let stack = remembered.or_else(|| self.known_stack(frames));
        let (thread, stack) = match (thread, stack) {
            (Some(thread), Some(stack)) => (thread, stack),
            (thread, stack) => {
                let mut growth = Growth::default();
                if thread.is_none() {
                    growth.threads = 1;
                    growth.strings = 1;
                    growth.string_bytes = sample.thread.name.as_ref().map_or(0, |n| n.len());
                }
                if stack.is_none() {
                    growth.strings += 2 * frames.len();
                    growth.string_bytes += frames
                        .iter()
                        .map(|f| f.function.len() + f.file.len())
                        .sum::<usize>();
                    growth.frames = frames.len();
                    growth.stacks = 1;
                    growth.stack_frames = frames.len();
                }
                self.make_room(&growth);
                (self.define_thread(sample), self.define_stack(frames))
            }
        };
        if remembered != Some(stack) {
            if frames.len() == sample.frames.len() {
                self.last_stacks.remember(key, &sample.frames, stack);
            } else {
                self.last_stacks.remember(key, &frames.into(), stack);
            }
        }
        let delta = delta(sample.time.0, &mut self.tick_base);
        let info = &sample.thread;
        put_sample(
            &mut self.block,
            delta,
            thread,
            stack,
            info.active,
            info.owns_gil,
        );
    }

    /// The stack's id when it and all its frames are in the tables; fills `scratch`.
    fn known_stack(&mut self, frames: &[Frame]) -> Option<u32> {
        self.scratch.clear();
        for frame in frames {
            self.scratch.push(*self.tables.frames.get(frame)?);
        }
        self.tables.stacks.get(&self.scratch[..]).copied()
    }

    /// Resets the tables when `growth` would take them past their limits.
    fn make_room(&mut self, growth: &Growth) {
        if !self.tables.is_empty() && !self.tables.has_room(growth, &self.limits) {
            self.reset();
        }
    }

    fn reset(&mut self) {
        put_reset(&mut self.block);
        self.clear_state();
        self.stats.resets += 1;
    }

    /// Forgets the tables and the time bases, as a reset record (or a block start of the next
    /// epoch) tells the reader to.
    fn clear_state(&mut self) {
        self.tables.clear();
        self.last_stacks.clear();
        self.tick_base = 0;
        self.gpu_base = 0;
        self.memory_base = 0;
        self.defs.reset();
        self.blocks_since_reset = 0;
    }

    /// Opens a block with what a reader needs to read it alone (`sync.rs`), and resets the
    /// tables there every [`RESET_EVERY_BLOCKS`].
    fn start_block(&mut self) {
        let sizes = Counts::of(self.tables.sizes());
        let start = self.defs.block_start(sizes, self.tick_base, self.gpu_base);
        put_block_start(&mut self.block, &start);
        self.memory_base = 0;
        if self.blocks_since_reset >= RESET_EVERY_BLOCKS && !self.tables.is_empty() {
            self.reset();
        }
    }

    /// Writes a definition record into the open block, and keeps its copy for the next.
    fn define(&mut self, put: impl FnOnce(&mut Vec<u8>)) {
        let at = self.block.len();
        put(&mut self.block);
        self.defs.note(&self.block[at..]);
    }

    /// The thread's id, writing its definition when it is new or its name or OS id changed.
    fn define_thread(&mut self, sample: &StackSample) -> u32 {
        let key = (sample.pid, sample.thread.python_thread_id);
        let info = &sample.thread;
        let id = match self.tables.threads.get(&key) {
            Some(t) if t.os_thread_id == info.os_thread_id && t.name == info.name => return t.id,
            Some(t) => t.id,
            None => self.tables.threads.len() as u32,
        };
        let name = info.name.as_deref().map(|name| self.string(name));
        let record = ThreadRecord {
            id: u64::from(id),
            pid: sample.pid,
            python_thread_id: info.python_thread_id,
            os_thread_id: info.os_thread_id,
            name: name.map(u64::from),
        };
        self.define(|block| put_thread(block, &record));
        self.tables.threads.insert(
            key,
            ThreadEntry {
                id,
                os_thread_id: info.os_thread_id,
                name: info.name.clone(),
            },
        );
        id
    }

    fn define_stack(&mut self, frames: &[Frame]) -> u32 {
        let mut ids = std::mem::take(&mut self.scratch);
        ids.clear();
        for frame in frames {
            ids.push(self.frame(frame));
        }
        let id = match self.tables.stacks.get(&ids[..]) {
            Some(&id) => id,
            None => {
                let id = self.tables.stacks.len() as u32;
                self.define(|block| put_stack(block, &ids));
                self.tables.stacks.insert(ids.as_slice().into(), id);
                self.tables.stack_frames += ids.len();
                id
            }
        };
        self.scratch = ids;
        id
    }

    fn frame(&mut self, frame: &Frame) -> u32 {
        if let Some(&id) = self.tables.frames.get(frame) {
            return id;
        }
        let function = self.shared_string(&frame.function);
        let file = self.shared_string(&frame.file);
        let id = self.tables.frames.len() as u32;
        self.define(|block| put_frame(block, function, file, frame.line, frame));
        self.tables.frames.insert(frame.clone(), id);
        id
    }

    /// The id of a string the sampler shares: the table keeps the same allocation.
    fn shared_string(&mut self, s: &Arc<str>) -> u32 {
        if s.len() > MAX_STRING_LEN {
            return self.string(s);
        }
        let (id, new) = self.tables.string(s);
        if new {
            self.define(|block| put_string(block, s));
        }
        id
    }

    fn string(&mut self, s: &str) -> u32 {
        let s = cut(s);
        if let Some(&id) = self.tables.strings.get(s) {
            return id;
        }
        let (id, _) = self.tables.string(&Arc::from(s));
        self.define(|block| put_string(block, s));
        id
    }

    fn error(&mut self, error: &SampleError) {
        let message = cut(&error.message);
        if !self.tables.strings.contains_key(message) {
            self.make_room(&Growth {
                strings: 1,
                string_bytes: message.len(),
                ..Growth::default()
            });
        }
        let message = self.string(message);
        let delta = delta(error.time.0, &mut self.tick_base);
        put_error(&mut self.block, delta, error.pid, error.kind, message);
    }

    fn process(&mut self, process: &ProcessEvent) {
        let delta = delta(process.time.0, &mut self.tick_base);
        let command_line = cut(&process.command_line);
        put_process(
            &mut self.block,
            delta,
            process.pid,
            process.kind,
            process.how,
            command_line,
        );
    }

    fn gpu(&mut self, sample: &GpuSample) {
        let delta = delta(sample.time.0, &mut self.gpu_base);
        put_gpu(&mut self.block, delta, sample);
    }

    fn memory(&mut self, sample: &MemorySample) {
        let delta = delta(sample.time.0, &mut self.memory_base);
        put_memory(&mut self.block, delta, sample);
    }

    fn cgroup(&mut self, sample: &CgroupSample) {
        let delta = delta(sample.time.0, &mut self.memory_base);
        put_cgroup(&mut self.block, delta, sample);
    }

    /// Hands the open block to the OS in one write.
    fn write_block(&mut self) -> Result<(), LogError> {
        if self.block.len() <= BLOCK_HEAD_LEN {
            return Ok(());
        }
        seal(&mut self.block);
        match self.file.write_all(&self.block) {
            Ok(()) => {
                self.written += self.block.len() as u64;
                self.block.truncate(BLOCK_HEAD_LEN);
                self.block_events = 0;
                self.defs.block_written(Counts::of(self.tables.sizes()));
                self.blocks_since_reset += 1;
                Ok(())
            }
            Err(source) => {
                self.recover();
                Err(LogError::Write {
                    path: self.path.clone(),
                    source,
                })
            }
        }
    }

    /// After a failed write: drops the block, cuts the file back to its last whole block and
    /// starts afresh, in the next epoch: the next block's start tells the reader to forget its
    /// tables, so that what follows decodes without what was lost.
    fn recover(&mut self) {
        self.stats.lost_events += self.block_events;
        self.block_events = 0;
        self.block.truncate(BLOCK_HEAD_LEN);
        let cut_back = self
            .file
            .set_len(self.written)
            .and_then(|()| self.file.seek(SeekFrom::Start(self.written)));
        match cut_back {
            Ok(_) => self.clear_state(),
            Err(_) => self.poisoned = true,
        }
    }
}

impl Drop for SampleLogWriter {
    fn drop(&mut self) {
        if !self.poisoned {
            // Best effort: whoever needed to know has called `flush`.
            let _ = self.write_block();
        }
    }
}

/// Creates (or truncates) the file at `path` and writes the prefix and the header block (the
/// header, and the segment record of a segmented log), synced; gives the file and its length.
fn create_file(
    path: &Path,
    header: &LogHeader,
    segment: Option<&SegmentRecord>,
) -> Result<(File, u64), LogError> {
    let create_error = |source| LogError::Create {
        path: path.to_owned(),
        source,
    };
    let mut file = File::create(path).map_err(create_error)?;
    let mut block = vec![0u8; BLOCK_HEAD_LEN];
    put_header(&mut block, header);
    if let Some(segment) = segment {
        put_segment(&mut block, segment);
    }
    seal(&mut block);
    file.write_all(&prefix()).map_err(create_error)?;
    file.write_all(&block).map_err(create_error)?;
    file.sync_data().map_err(create_error)?;
    Ok((file, (prefix().len() + block.len()) as u64))
}

/// The delta from `base` to `time`, moving `base` to `time`. Wrapping, so any pair of times
/// round-trips.
fn delta(time: u64, base: &mut u64) -> i64 {
    let delta = time.wrapping_sub(*base) as i64;
    *base = time;
    delta
}

/// `s` cut to at most [`MAX_STRING_LEN`] bytes, at a character boundary.
fn cut(s: &str) -> &str {
    if s.len() <= MAX_STRING_LEN {
        return s;
    }
    let mut end = MAX_STRING_LEN;
    while !s.is_char_boundary(end) {
        end -= 1;
    }
    &s[..end]
}

#[cfg(test)]
mod tests {
    use super::*;

    /// The prefix and a header block holding `records`.
    fn head_of(records: impl FnOnce(&mut Vec<u8>)) -> Vec<u8> {
        let mut block = vec![0u8; BLOCK_HEAD_LEN];
        records(&mut block);
        seal(&mut block);
        let mut out = prefix().to_vec();
        out.extend(block);
        out
    }

    #[test]
    fn without_limits_the_header_block_holds_the_header_alone() {
        let dir = tempfile::tempdir().unwrap();
        let header = LogHeader::default();
        drop(SampleLogWriter::create(dir.path(), &header).unwrap());
        let written = fs::read(dir.path().join(LOG_FILE_NAME)).unwrap();
        assert_eq!(written, head_of(|b| put_header(b, &header)));

        let limits = LogLimits {
            max_bytes: Some(1 << 20),
            max_age: None,
        };
        let writer =
            SampleLogWriter::create_with(dir.path(), &header, InternLimits::default(), limits)
                .unwrap();
        assert_eq!(writer.log_limits(), limits);
        drop(writer);
        let written = fs::read(dir.path().join(LOG_FILE_NAME)).unwrap();
        let segment = SegmentRecord {
            index: 1,
            start: header.start,
            carried: 0,
        };
        assert_eq!(
            written,
            head_of(|b| {
                put_header(b, &header);
                put_segment(b, &segment);
            })
        );
    }
}
