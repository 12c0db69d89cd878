//! A log cut short (crash, `kill -9`, a recording still being written) reads up to its last
//! whole block, quietly; a damaged block in the middle is skipped and counted, and what follows
//! it is read.

// Helpers outside #[test] functions unwrap too: a test fails loudly on any error.
#![allow(clippy::unwrap_used)]

use crate::common;

use std::path::Path;

use common::{header, same, Typical};
use stackscope_event::Event;
use stackscope_samplelog::{
    Damage, LogEnd, LogError, SampleLogReader, SampleLogWriter, RESET_EVERY_BLOCKS,
};

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

/// What reading a damaged log gave: its events, how it ended, what it skipped.
fn read_damaged(path: &Path) -> (Vec<Event>, LogEnd, Damage) {
    let mut reader = SampleLogReader::open(path).unwrap();
    let events = reader.by_ref().map(Result::unwrap).collect();
    (events, reader.end().cloned().unwrap(), reader.damage())
}

/// `events` without those written in the blocks `lost` (indexes into the blocks between
/// `boundaries`).
fn all_but<'a>(events: &'a [Event], boundaries: &[(u64, usize)], lost: &[usize]) -> Vec<&'a Event> {
    let mut kept = Vec::new();
    for (block, pair) in boundaries.windows(2).enumerate() {
        if !lost.contains(&block) {
            kept.extend(&events[pair[0].1..pair[1].1]);
        }
    }
    kept
}

/// The block of `boundaries` that byte `at` is in.
fn block_of(boundaries: &[(u64, usize)], at: usize) -> usize {
    boundaries
        .iter()
        .rposition(|&(len, _)| len as usize <= at)
        .unwrap()
}

fn assert_same(read: &[Event], expected: &[&Event], what: &str) {
    assert_eq!(read.len(), expected.len(), "{what}");
    assert!(
        read.iter().zip(expected).all(|(a, b)| same(a, b)),
        "{what}: other events"
    );
}

#[test]
fn a_damaged_block_is_skipped_and_counted_and_the_rest_is_read() {
    let dir = tempfile::tempdir().unwrap();
    let events: Vec<Event> = Typical::new(2, 5).take(400).collect();
    let (bytes, boundaries) = write_in_blocks(dir.path(), &events, 10);
    let path = dir.path().join("damaged.log");
    let header_end = boundaries[0].0 as usize;
    // Every byte of a block in the middle (its length, its checksum, its block start, its
    // records), and of the first block after the header, which defines most of what follows.
    let middle = boundaries.len() / 2;
    let (start, end) = (boundaries[middle].0, boundaries[middle + 1].0);
    let mut positions: Vec<usize> = (start as usize..end as usize).collect();
    positions.extend(header_end..boundaries[1].0 as usize);
    for at in positions {
        let mut damaged = bytes.clone();
        damaged[at] ^= 0x5a;
        std::fs::write(&path, &damaged).unwrap();
        let (read, log_end, damage) = read_damaged(&path);
        let block = block_of(&boundaries, at);
        let what = format!("damage at {at}, block {block}");
        assert_same(&read, &all_but(&events, &boundaries, &[block]), &what);
        assert_eq!(log_end, LogEnd::Complete, "{what}");
        let block_len = boundaries[block + 1].0 - boundaries[block].0;
        assert_eq!(
            damage,
            Damage {
                blocks: 1,
                bytes: block_len,
                lost_events: 0
            },
            "{what}"
        );
    }
}

#[test]
fn damage_in_the_last_block_ends_the_log_there() {
    let dir = tempfile::tempdir().unwrap();
    let events: Vec<Event> = Typical::new(2, 5).take(400).collect();
    let (bytes, boundaries) = write_in_blocks(dir.path(), &events, 10);
    let path = dir.path().join("damaged.log");
    let mut damaged = bytes.clone();
    damaged[bytes.len() - 1] ^= 1;
    std::fs::write(&path, &damaged).unwrap();
    let (read, log_end, damage) = read_damaged(&path);
    let last = boundaries.len() - 2;
    assert_same(&read, &all_but(&events, &boundaries, &[last]), "last block");
    let offset = boundaries[last].0;
    assert!(
        matches!(log_end, LogEnd::Corrupt { offset: o, ignored_bytes, .. }
            if o == offset && ignored_bytes == bytes.len() as u64 - offset),
        "{log_end:?}"
    );
    assert_eq!(
        damage,
        Damage::default(),
        "nothing skipped: the log ends there"
    );
}

#[test]
fn two_damaged_blocks_in_a_row_lose_what_the_first_defined_until_the_next_reset() {
    let dir = tempfile::tempdir().unwrap();
    let events: Vec<Event> = Typical::new(10, 5).take(1000).collect();
    let (bytes, boundaries) = write_in_blocks(dir.path(), &events, 10);
    let reset_at = RESET_EVERY_BLOCKS as usize;
    assert!(boundaries.len() > reset_at + 10);
    let path = dir.path().join("damaged.log");
    let mut damaged = bytes.clone();
    // A byte of each of the first two blocks' records: the second block's copy of the first
    // one's definitions is lost with it.
    for block in [0, 1] {
        damaged[boundaries[block].0 as usize + 20] ^= 0x10;
    }
    std::fs::write(&path, &damaged).unwrap();
    let (read, log_end, damage) = read_damaged(&path);
    assert_eq!(log_end, LogEnd::Complete);
    // One damaged stretch, two blocks long.
    let stretch = boundaries[2].0 - boundaries[0].0;
    assert_eq!((damage.blocks, damage.bytes), (1, stretch), "{damage:?}");
    assert!(damage.lost_events > 0, "{damage:?}");
    let after = all_but(&events, &boundaries, &[0, 1]);
    assert_eq!(read.len() as u64 + damage.lost_events, after.len() as u64);
    // What is read is what was written, in order: the lost events are left out, not garbled.
    let mut expected = after.iter();
    for event in &read {
        assert!(
            expected.any(|e| same(e, event)),
            "an event that was not written: {event:?}"
        );
    }
    // From the block where the writer reset its tables on, nothing is lost.
    let from_reset = events.len() - boundaries[reset_at].1;
    assert!(
        damage.lost_events <= (after.len() - from_reset) as u64,
        "{damage:?}"
    );
    assert_same(
        &read[read.len() - from_reset..],
        &events[boundaries[reset_at].1..].iter().collect::<Vec<_>>(),
        "after the reset",
    );
}

/// A format-1 log (written before block starts) still reads, and stops at damage as it did.
#[test]
fn a_format_1_log_still_reads() {
    let v1 = include_bytes!("../../../../tests/data/recordings/gpu-kernel-hang/samples.log");
    assert_eq!(&v1[8..10], &1u16.to_le_bytes(), "a format-1 log");
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("v1.log");
    std::fs::write(&path, v1).unwrap();
    let (whole, log_end, damage) = read_damaged(&path);
    assert_eq!((log_end, damage), (LogEnd::Complete, Damage::default()));
    assert!(whole.len() > 100, "{} events", whole.len());
    let mut damaged = v1.to_vec();
    let at = damaged.len() / 2;
    damaged[at] ^= 0x10;
    std::fs::write(&path, &damaged).unwrap();
    let (read, log_end, damage) = read_damaged(&path);
    assert!(read.len() < whole.len());
    assert!(read.iter().zip(&whole).all(|(a, b)| same(a, b)));
    assert!(
        matches!(log_end, LogEnd::Corrupt { .. } | LogEnd::Torn { .. }),
        "{log_end:?}"
    );
    assert_eq!(damage, Damage::default());
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
