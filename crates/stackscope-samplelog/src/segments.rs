//! Keeping the log within a size or an age for open-ended recordings: segments.
//!
//! Without limits the log is one file, `samples.log`, written as it always was. With a limit
//! ([`LogLimits`]) it is written in segments: `samples.log` is the segment being written, and
//! each segment it closes is renamed `samples.log.000001`, `samples.log.000002`, ... in the
//! order written. Every segment is a log of its own: the prefix, the header block (the
//! recording's header, then a segment record: its number, the time it starts at, and how many
//! attach events it repeats), and blocks whose tables and time bases start afresh, so a
//! segment decodes without the ones before it. A segment opens by repeating the attach events
//! of the processes still alive, at their own times, so that a log whose older segments were
//! deleted still names every process's command; a reader of the whole log skips those copies.
//!
//! Once the files hold more than the size limit together, or the newest event of the oldest
//! closed segment is older than the age limit (behind the newest event logged), the oldest
//! closed segments are deleted, whole. The segment being written is never deleted, so the log
//! holds at most the limit plus one segment.
//!
//! Readers are given `samples.log` ([`crate::SampleLogReader::open`]) and read every segment
//! beside it oldest first ([`log_files`]).

use std::collections::{BTreeMap, VecDeque};
use std::fs;
use std::io;
use std::path::{Path, PathBuf};
use std::time::Duration;

use stackscope_event::{Event, ProcessEvent, ProcessEventKind, Timestamp};

use crate::block::BLOCK_TARGET;
use crate::LOG_FILE_NAME;

/// A segment closes at no less than this under a size limit: a few blocks, so that a tiny
/// limit still keeps whole blocks.
const MIN_SEGMENT_BYTES: u64 = BLOCK_TARGET as u64;
/// Under a size limit a segment holds an eighth of it, and at least a quarter of it up to
/// this: few files, each a few MB at least.
const SMALL_SEGMENT_BYTES: u64 = 4 << 20;
/// Under an age limit alone, a segment closes at this size at the latest.
const AGE_ONLY_SEGMENT_BYTES: u64 = 64 << 20;
/// Segments the log is kept in, about: a limit's share of one.
const SEGMENTS_PER_LIMIT: u64 = 8;
/// Digits of a closed segment's number in its file name (more once there are more).
const SEGMENT_DIGITS: usize = 6;

/// How much of the log to keep. The default keeps everything in one file.
#[derive(Debug, Clone, Copy, Default, PartialEq)]
pub struct LogLimits {
    /// The most bytes the log's files hold together; beyond it the oldest segments are
    /// deleted (the segment being written may take the log past it by up to one segment).
    pub max_bytes: Option<u64>,
    /// Segments whose newest event is older than this, behind the newest event logged, are
    /// deleted.
    pub max_age: Option<Duration>,
}

impl LogLimits {
    /// One file, kept whole.
    pub const NONE: LogLimits = LogLimits {
        max_bytes: None,
        max_age: None,
    };

    /// Whether the log is one file, kept whole.
    pub fn is_unlimited(&self) -> bool {
        self.max_bytes.is_none() && self.max_age.is_none()
    }

    /// The size at which a segment closes: an eighth of the size limit, at least a quarter of
    /// it up to 4 MiB, and never less than a block; 64 MiB under an age limit alone.
    pub fn segment_bytes(&self) -> u64 {
        match self.max_bytes {
            Some(max) => (max / SEGMENTS_PER_LIMIT)
                .max((max / 4).min(SMALL_SEGMENT_BYTES))
                .max(MIN_SEGMENT_BYTES),
            None => AGE_ONLY_SEGMENT_BYTES,
        }
    }

    /// The span of event time at which a segment closes: an eighth of the age limit.
    pub fn segment_span(&self) -> Option<Duration> {
        self.max_age
            .map(|age| age / SEGMENTS_PER_LIMIT as u32)
            .filter(|span| !span.is_zero())
    }
}

/// The file name of closed segment `index`: `samples.log.000001`.
pub fn segment_file_name(index: u64) -> String {
    format!("{LOG_FILE_NAME}.{index:0SEGMENT_DIGITS$}")
}

/// The number of a closed segment of the log `log_name`, from its file name.
fn segment_index(log_name: &str, name: &str) -> Option<u64> {
    let digits = name.strip_prefix(log_name)?.strip_prefix('.')?;
    if digits.is_empty() || !digits.bytes().all(|b| b.is_ascii_digit()) {
        return None;
    }
    digits.parse().ok()
}

/// The closed segments beside the log at `path` (`path.000001`, ...), by number.
fn closed_segments(path: &Path) -> Vec<(u64, PathBuf)> {
    let (Some(dir), Some(name)) = (path.parent(), path.file_name().and_then(|n| n.to_str())) else {
        return Vec::new();
    };
    let dir = if dir.as_os_str().is_empty() {
        Path::new(".")
    } else {
        dir
    };
    let Ok(entries) = fs::read_dir(dir) else {
        return Vec::new();
    };
    let mut found: Vec<(u64, PathBuf)> = entries
        .filter_map(Result::ok)
        .filter_map(|entry| {
            let file_name = entry.file_name();
            let index = segment_index(name, file_name.to_str()?)?;
            Some((index, path.with_file_name(file_name)))
        })
        .collect();
    found.sort();
    found
}

/// The files of the log at `path` (a recording's `samples.log`), oldest first: its closed
/// segments by number, then `path` itself. Just `path` for a log without segments, whether
/// it exists or not.
pub fn log_files(path: &Path) -> Vec<PathBuf> {
    let mut files: Vec<PathBuf> = closed_segments(path).into_iter().map(|(_, p)| p).collect();
    if files.is_empty() || path.exists() {
        files.push(path.to_owned());
    }
    files
}

/// Whether `dir` holds a sample log: `samples.log`, or segments of one.
pub fn log_exists(dir: &Path) -> bool {
    let path = dir.join(LOG_FILE_NAME);
    path.is_file() || !closed_segments(&path).is_empty()
}

/// Deletes the closed segments left beside `path` by an earlier recording into the same
/// directory, so that they are not read as part of a new log.
pub(crate) fn remove_stale(path: &Path) -> io::Result<()> {
    for (_, stale) in closed_segments(path) {
        match fs::remove_file(&stale) {
            Ok(()) => {}
            Err(e) if e.kind() == io::ErrorKind::NotFound => {}
            Err(e) => return Err(e),
        }
    }
    Ok(())
}

/// What became of a log's segments, for the summary.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct SegmentStats {
    /// Files the log is in now: the closed segments kept and the one being written.
    pub segments: u64,
    /// Bytes in them (the open block not counted).
    pub bytes: u64,
    /// Closed segments deleted to keep within the limits, and their bytes.
    pub dropped_segments: u64,
    pub dropped_bytes: u64,
    /// Where the oldest segment kept starts, on the event clock; `None` while none was
    /// deleted.
    pub first_kept: Option<Timestamp>,
}

/// A closed segment, kept until the limits delete it.
#[derive(Debug)]
struct Closed {
    path: PathBuf,
    bytes: u64,
    start: u64,
    newest: u64,
}

/// The writer's side of segments: which segment is being written, those closed, what was
/// deleted, and the processes alive (whose attach events each new segment repeats).
#[derive(Debug)]
pub(crate) struct Segmenter {
    pub limits: LogLimits,
    /// The number of the segment being written (1 for the first).
    pub index: u64,
    /// Where the segment being written starts, and its newest event, on the event clock.
    start: u64,
    current_newest: u64,
    /// The newest event logged.
    newest: u64,
    closed: VecDeque<Closed>,
    closed_bytes: u64,
    dropped_segments: u64,
    dropped_bytes: u64,
    alive: BTreeMap<u32, ProcessEvent>,
}

impl Segmenter {
    pub fn new(limits: LogLimits, start: Timestamp) -> Segmenter {
        Segmenter {
            limits,
            index: 1,
            start: start.as_nanos(),
            current_newest: start.as_nanos(),
            newest: start.as_nanos(),
            closed: VecDeque::new(),
            closed_bytes: 0,
            dropped_segments: 0,
            dropped_bytes: 0,
            alive: BTreeMap::new(),
        }
    }

    /// Notes an event appended: its time, and the processes it attaches or ends.
    pub fn note(&mut self, event: &Event) {
        let time = event.time().as_nanos();
        self.newest = self.newest.max(time);
        self.current_newest = self.current_newest.max(time);
        if let Event::Process(process) = event {
            match process.kind {
                ProcessEventKind::Attached => {
                    self.alive.insert(process.pid, process.clone());
                }
                ProcessEventKind::Exited => {
                    self.alive.remove(&process.pid);
                }
            }
        }
    }

    /// Whether the segment being written, `bytes` long and holding events past its header
    /// (`has_events`), is due to close.
    pub fn due(&self, bytes: u64, has_events: bool) -> bool {
        if !has_events {
            return false;
        }
        let span = Duration::from_nanos(self.current_newest.saturating_sub(self.start));
        bytes >= self.limits.segment_bytes()
            || self.limits.segment_span().is_some_and(|max| span >= max)
    }

    /// The attach events of the processes alive, oldest first: what a new segment repeats.
    pub fn alive(&self) -> Vec<ProcessEvent> {
        let mut alive: Vec<ProcessEvent> = self.alive.values().cloned().collect();
        alive.sort_by_key(|p| (p.time, p.pid));
        alive
    }

    /// Where the next segment starts: the newest event logged.
    pub fn next_start(&self) -> Timestamp {
        Timestamp(self.newest)
    }

    /// The segment being written was closed as `path`, `bytes` long; the next one starts.
    pub fn closed(&mut self, path: PathBuf, bytes: u64) {
        self.closed.push_back(Closed {
            path,
            bytes,
            start: self.start,
            newest: self.current_newest,
        });
        self.closed_bytes += bytes;
        self.index += 1;
        self.start = self.newest;
        self.current_newest = self.newest;
    }

    /// Deletes the oldest closed segments while the log, with `open_bytes` in the segment
    /// being written, is over a limit. A segment that cannot be deleted stays, and is tried
    /// again next time.
    pub fn drop_oldest(&mut self, open_bytes: u64) {
        while let Some(oldest) = self.closed.front() {
            let total = self.closed_bytes + open_bytes;
            let too_big = self.limits.max_bytes.is_some_and(|max| total > max);
            let age = Duration::from_nanos(self.newest.saturating_sub(oldest.newest));
            let too_old = self.limits.max_age.is_some_and(|max| age > max);
            if !(too_big || too_old) {
                break;
            }
            match fs::remove_file(&oldest.path) {
                Ok(()) => {}
                Err(e) if e.kind() == io::ErrorKind::NotFound => {}
                Err(_) => break,
            }
            self.closed_bytes -= oldest.bytes;
            self.dropped_segments += 1;
            self.dropped_bytes += oldest.bytes;
            self.closed.pop_front();
        }
    }

    pub fn stats(&self, open_bytes: u64) -> SegmentStats {
        SegmentStats {
            segments: self.closed.len() as u64 + 1,
            bytes: self.closed_bytes + open_bytes,
            dropped_segments: self.dropped_segments,
            dropped_bytes: self.dropped_bytes,
            first_kept: (self.dropped_segments > 0).then(|| {
                Timestamp(
                    self.closed
                        .front()
                        .map_or(self.start, |oldest| oldest.start),
                )
            }),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn segment_sizes_keep_the_files_few() {
        let size = |max: u64| {
            LogLimits {
                max_bytes: Some(max),
                max_age: None,
            }
            .segment_bytes()
        };
        assert_eq!(size(500 << 20), (500 << 20) / 8);
        assert_eq!(size(16 << 20), 4 << 20);
        assert_eq!(size(4 << 20), 1 << 20);
        assert_eq!(size(64 << 10), 16 << 10);
        assert_eq!(size(1), BLOCK_TARGET as u64);
        let age_only = LogLimits {
            max_bytes: None,
            max_age: Some(Duration::from_secs(6 * 3600)),
        };
        assert_eq!(age_only.segment_bytes(), 64 << 20);
        assert_eq!(
            age_only.segment_span(),
            Some(Duration::from_secs(6 * 3600 / 8))
        );
        assert!(LogLimits::NONE.is_unlimited());
        assert!(!age_only.is_unlimited());
    }

    #[test]
    fn segment_names_sort_and_parse_back() {
        assert_eq!(segment_file_name(1), "samples.log.000001");
        assert_eq!(segment_file_name(1_234_567), "samples.log.1234567");
        assert_eq!(segment_index("samples.log", "samples.log.000042"), Some(42));
        for other in [
            "samples.log",
            "samples.log.",
            "samples.log.tmp",
            "samples.log.12a",
            "samples.logs.1",
            "other.log.000001",
        ] {
            assert_eq!(segment_index("samples.log", other), None, "{other}");
        }
    }

    #[test]
    fn the_files_of_a_log_are_read_oldest_first() {
        let dir = tempfile::tempdir().expect("tempdir");
        let log = dir.path().join(LOG_FILE_NAME);
        assert_eq!(log_files(&log), vec![log.clone()]);
        assert!(!log_exists(dir.path()));
        for index in [10, 9, 11] {
            fs::write(dir.path().join(segment_file_name(index)), b"x").expect("write");
        }
        fs::write(dir.path().join("samples.log.tmp"), b"x").expect("write");
        // The segment being written is missing between a close and the next open.
        assert_eq!(
            log_files(&log),
            [9, 10, 11]
                .map(|i| dir.path().join(segment_file_name(i)))
                .to_vec()
        );
        assert!(log_exists(dir.path()));
        fs::write(&log, b"x").expect("write");
        assert_eq!(log_files(&log).last(), Some(&log));
        assert_eq!(log_files(&log).len(), 4);
        remove_stale(&log).expect("remove");
        assert_eq!(log_files(&log), vec![log.clone()]);
        assert!(dir.path().join("samples.log.tmp").exists());
    }
}
