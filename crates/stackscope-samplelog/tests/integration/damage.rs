//! A log cut short (crash, `kill -9`, a recording still being written) or damaged reads up to
//! its last whole block, quietly.

// Helpers outside #[test] functions unwrap too: a test fails loudly on any error.
#![allow(clippy::unwrap_used)]

use crate::common;

use std::path::Path;

use common::{header, same, Typical};
use stackscope_event::Event;
use stackscope_samplelog::{LogEnd, LogError, SampleLogReader, SampleLogWriter};

/// Writes `events`, flushing every `every` events to make many small blocks. Returns the
/// file's bytes and, after each flush, (file length, events in the file).
fn write_in_blocks(dir: &Path, events: &[Event], every: usize) -> (Vec<u8>, Vec<(u64, usize)>) {
    let mut writer = SampleLogWriter::create(dir, &header(false, true)).unwrap();
    let mut boundaries = vec![(writer.bytes_written(), 0)];
    for (i, event) in events.iter().enumerate() {
        writer.append(event).unwrap();
        if (i + 1) % every == 0 || i + 1 == events.len() {
            writer.flush().unwrap();
            boundaries.push((writer.bytes_written(), i + 1));
        }
    }
    drop(writer);
    (std::fs::read(dir.join("samples.log")).unwrap(), boundaries)
}

fn read(path: &Path) -> Result<(Vec<Event>, LogEnd), LogError> {
    let mut reader = SampleLogReader::open(path)?;
    let mut events = Vec::new();
    for event in reader.by_ref() {
        events.push(event?);
    }
    Ok((events, reader.end().cloned().expect("read to the end")))
}

#[test]
fn a_log_cut_at_any_byte_reads_every_whole_block_before_the_cut() {
    let dir = tempfile::tempdir().unwrap();
    let events: Vec<Event> = Typical::new(2, 3).take(300).collect();
    let (bytes, boundaries) = write_in_blocks(dir.path(), &events, 7);
    assert!(boundaries.len() > 40);
    let path = dir.path().join("cut.log");
    let header_end = boundaries[0].0 as usize;
    // Every byte of the header and of the last six blocks, and each side of every boundary.
    let last_blocks = boundaries[boundaries.len() - 7].0 as usize;
    let mut cuts: Vec<usize> = (0..=header_end).chain(last_blocks..=bytes.len()).collect();
    for &(len, _) in &boundaries {
        cuts.extend([len as usize - 1, len as usize, len as usize + 1]);
    }
    cuts.retain(|&cut| cut <= bytes.len());
    for cut in cuts {
        std::fs::write(&path, &bytes[..cut]).unwrap();
        if cut < header_end {
            // Cut inside the header: the log is unreadable, and says so.
            let err = read(&path).unwrap_err();
            assert!(matches!(err, LogError::Header { .. }), "cut {cut}: {err}");
            continue;
        }
        let (read, end) = read(&path).unwrap_or_else(|e| panic!("cut at {cut}: {e}"));
        let &(whole, expected) = boundaries
            .iter()
            .rev()
            .find(|(len, _)| *len as usize <= cut)
            .unwrap();
        assert_eq!(read.len(), expected, "cut at {cut}");
        assert!(events.iter().zip(&read).all(|(a, b)| same(a, b)));
        let ignored = (cut as u64) - whole;
        if ignored == 0 {
            assert_eq!(end, LogEnd::Complete, "cut at {cut}");
        } else {
            assert_eq!(
                end,
                LogEnd::Torn {
                    offset: whole,
                    ignored_bytes: ignored
                },
                "cut at {cut}"
            );
        }
    }
}

#[test]
fn a_damaged_byte_stops_reading_at_its_block() {
    let dir = tempfile::tempdir().unwrap();
    let events: Vec<Event> = Typical::new(2, 5).take(400).collect();
    let (bytes, boundaries) = write_in_blocks(dir.path(), &events, 10);
    let path = dir.path().join("damaged.log");
    let header_end = boundaries[0].0 as usize;
    // Every byte of a block in the middle, and a few elsewhere.
    let middle = boundaries.len() / 2;
    let (start, end) = (boundaries[middle].0, boundaries[middle + 1].0);
    let mut positions: Vec<usize> = (start as usize..end as usize).collect();
    positions.extend([header_end, header_end + 9, bytes.len() - 1]);
    for at in positions {
        let mut damaged = bytes.clone();
        damaged[at] ^= 0x5a;
        std::fs::write(&path, &damaged).unwrap();
        let (read, log_end) = read(&path).unwrap_or_else(|e| panic!("damage at {at}: {e}"));
        let &(block_start, expected) = boundaries
            .iter()
            .rev()
            .find(|(len, _)| *len as usize <= at)
            .unwrap();
        assert_eq!(read.len(), expected, "damage at {at}");
        assert!(events.iter().zip(&read).all(|(a, b)| same(a, b)));
        assert_eq!(
            log_end.ignored_bytes(),
            bytes.len() as u64 - block_start,
            "damage at {at}: {log_end:?}"
        );
        // A damaged length may read as a block running past the end of the file.
        assert!(
            matches!(log_end, LogEnd::Corrupt { offset, .. } | LogEnd::Torn { offset, .. } if offset == block_start),
            "damage at {at}: {log_end:?}"
        );
    }
}

#[test]
fn a_damaged_header_is_an_error() {
    let dir = tempfile::tempdir().unwrap();
    let events: Vec<Event> = Typical::new(1, 1).take(10).collect();
    let (bytes, _) = write_in_blocks(dir.path(), &events, 10);
    let path = dir.path().join("damaged.log");
    let mut damaged = bytes.clone();
    damaged[20] ^= 1;
    std::fs::write(&path, &damaged).unwrap();
    assert!(matches!(read(&path), Err(LogError::Header { .. })));
}

#[test]
fn a_zero_filled_tail_is_not_read_as_blocks() {
    // What a filesystem may leave after a power loss: the file's length grew, its data did not.
    let dir = tempfile::tempdir().unwrap();
    let events: Vec<Event> = Typical::new(1, 2).take(50).collect();
    let (mut bytes, boundaries) = write_in_blocks(dir.path(), &events, 25);
    let whole = bytes.len() as u64;
    bytes.resize(bytes.len() + 4096, 0);
    let path = dir.path().join("zeros.log");
    std::fs::write(&path, &bytes).unwrap();
    let (read, end) = read(&path).unwrap();
    assert_eq!(read.len(), boundaries.last().unwrap().1);
    assert!(matches!(end, LogEnd::Corrupt { offset, ignored_bytes: 4096, .. } if offset == whole));
}

#[test]
fn a_log_being_written_reads_up_to_its_last_block_and_then_further() {
    let dir = tempfile::tempdir().unwrap();
    let events: Vec<Event> = Typical::new(2, 9).take(200).collect();
    let mut writer = SampleLogWriter::create(dir.path(), &header(false, true)).unwrap();
    for event in &events[..100] {
        writer.append(event).unwrap();
    }
    writer.flush().unwrap();
    for event in &events[100..] {
        writer.append(event).unwrap();
    }
    let path = dir.path().join("samples.log");
    let (read_now, end) = read(&path).unwrap();
    assert_eq!(read_now.len(), 100);
    assert_eq!(end, LogEnd::Complete);
    writer.flush().unwrap();
    let (read_later, _) = read(&path).unwrap();
    assert_eq!(read_later.len(), 200);
}
