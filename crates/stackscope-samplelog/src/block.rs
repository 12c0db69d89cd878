//! The file's framing: a prefix (magic and format version), then blocks.
//!
//! A block is `[payload length: u32 LE][CRC-32 of the payload: u32 LE][payload]`, the payload a
//! run of whole records. The writer hands each block to the OS in one `write`, so after a crash
//! or `kill -9` the file ends at a block boundary or inside the last block; the reader keeps
//! every block whose length and checksum hold. Past a block that fails them, a format-2 reader
//! finds the next good block ([`find_block`]): where the damaged block's length says, or, when
//! the length itself is what was damaged, by looking at every byte after it.

use std::fs::File;
use std::io::{self, Read};
use std::os::unix::fs::FileExt;

use crate::record::TAG_BLOCK_START;

/// The first bytes of every sample log.
pub const MAGIC: &[u8; 8] = b"STKSCPLG";
/// The format this crate writes; bumped on any incompatible change. Format 2 opens every block
/// but the header's with a block-start record (`sync.rs`), so a reader goes on past a damaged
/// block; format 1 (read still) does not, and its reader stops there. Format 3 writes each
/// Python frame's origin in its kind byte (`record.rs`); formats 1 and 2 are read with the
/// origin inferred from the file name.
pub const FORMAT_VERSION: u16 = 3;
/// The oldest format this crate reads.
pub const OLDEST_FORMAT: u16 = 1;
/// Magic plus the version.
pub const PREFIX_LEN: usize = MAGIC.len() + 2;
pub const BLOCK_HEAD_LEN: usize = 8;
/// The writer closes a block once its payload reaches this size (and at every flush), so a
/// checksum costs 8 bytes per 16 KiB and a crash loses at most this much beyond the last flush.
pub const BLOCK_TARGET: usize = 16 * 1024;
/// No valid block is larger; a length beyond it is corruption, not an allocation to attempt.
pub const MAX_BLOCK: usize = 64 << 20;

pub fn prefix() -> [u8; PREFIX_LEN] {
    let mut out = [0u8; PREFIX_LEN];
    out[..MAGIC.len()].copy_from_slice(MAGIC);
    out[MAGIC.len()..].copy_from_slice(&FORMAT_VERSION.to_le_bytes());
    out
}

/// Fills in the head of `block`, whose first [`BLOCK_HEAD_LEN`] bytes were left for it.
pub fn seal(block: &mut [u8]) {
    let (head, payload) = block.split_at_mut(BLOCK_HEAD_LEN);
    let len = u32::try_from(payload.len()).unwrap_or(u32::MAX);
    head[..4].copy_from_slice(&len.to_le_bytes());
    head[4..].copy_from_slice(&crc32fast::hash(payload).to_le_bytes());
}

/// What reading the next block found.
#[derive(Debug, PartialEq, Eq)]
pub enum BlockRead {
    /// A valid block; its payload is in the buffer. The value is the bytes it took in the file.
    Block(u64),
    /// The end of the file, exactly at a block boundary.
    End,
    /// The file ends inside this block: cut short by a crash, or still being written.
    Torn,
    /// A complete block whose length or checksum is wrong; `claimed` is what its length field
    /// says (0 when no block can be that long).
    Corrupt { claimed: u64 },
}

/// Reads one block into `payload` (replacing what it held).
pub fn read_block(input: &mut impl Read, payload: &mut Vec<u8>) -> io::Result<BlockRead> {
    let mut head = [0u8; BLOCK_HEAD_LEN];
    match read_full(input, &mut head)? {
        0 => return Ok(BlockRead::End),
        n if n < BLOCK_HEAD_LEN => return Ok(BlockRead::Torn),
        _ => {}
    }
    let len = u32::from_le_bytes([head[0], head[1], head[2], head[3]]) as usize;
    let crc = u32::from_le_bytes([head[4], head[5], head[6], head[7]]);
    // The writer never writes an empty block: a zero length is a zero-filled tail.
    if len == 0 || len > MAX_BLOCK {
        return Ok(BlockRead::Corrupt { claimed: 0 });
    }
    payload.clear();
    payload.resize(len, 0);
    if read_full(input, payload)? < len {
        return Ok(BlockRead::Torn);
    }
    if crc32fast::hash(payload) != crc {
        return Ok(BlockRead::Corrupt {
            claimed: len as u64,
        });
    }
    Ok(BlockRead::Block((BLOCK_HEAD_LEN + len) as u64))
}

/// The offset of the first good format-2 block after the damaged one at `damaged` (whose
/// length field claims `claimed` bytes), in a file of `file_len` bytes; `None` when no good
/// block follows. A good block: its length fits the file, its payload opens with a block
/// start, and its checksum holds (a chance match is one in 2^32 of the offsets looked at).
pub fn find_block(
    file: &File,
    damaged: u64,
    claimed: u64,
    file_len: u64,
) -> io::Result<Option<u64>> {
    let next = damaged + BLOCK_HEAD_LEN as u64 + claimed;
    if claimed > 0 && is_block_at(file, next, file_len)? {
        return Ok(Some(next));
    }
    const CHUNK: usize = 1 << 16;
    let mut buf = vec![0u8; CHUNK + BLOCK_HEAD_LEN];
    let mut at = damaged + 1;
    while at + (BLOCK_HEAD_LEN as u64) < file_len {
        let got = read_full_at(file, &mut buf, at)?;
        // Every offset whose head and first payload byte are in this chunk.
        let offsets = got.saturating_sub(BLOCK_HEAD_LEN);
        for i in 0..offsets {
            let head = &buf[i..=i + BLOCK_HEAD_LEN];
            let len = u32::from_le_bytes([head[0], head[1], head[2], head[3]]) as u64;
            let candidate = at + i as u64;
            let fits = len > 0
                && len <= MAX_BLOCK as u64
                && candidate + BLOCK_HEAD_LEN as u64 + len <= file_len;
            if fits
                && head[BLOCK_HEAD_LEN] == TAG_BLOCK_START
                && is_block_at(file, candidate, file_len)?
            {
                return Ok(Some(candidate));
            }
        }
        if offsets == 0 {
            break;
        }
        at += offsets as u64;
    }
    Ok(None)
}

/// Whether a good format-2 block starts at `offset`.
fn is_block_at(file: &File, offset: u64, file_len: u64) -> io::Result<bool> {
    let mut head = [0u8; BLOCK_HEAD_LEN + 1];
    if offset + head.len() as u64 > file_len || read_full_at(file, &mut head, offset)? < head.len()
    {
        return Ok(false);
    }
    let len = u32::from_le_bytes([head[0], head[1], head[2], head[3]]) as usize;
    let crc = u32::from_le_bytes([head[4], head[5], head[6], head[7]]);
    if len == 0
        || len > MAX_BLOCK
        || offset + (BLOCK_HEAD_LEN + len) as u64 > file_len
        || head[BLOCK_HEAD_LEN] != TAG_BLOCK_START
    {
        return Ok(false);
    }
    let mut payload = vec![0u8; len];
    let got = read_full_at(file, &mut payload, offset + BLOCK_HEAD_LEN as u64)?;
    Ok(got == len && crc32fast::hash(&payload) == crc)
}

/// Reads at `offset` until `buf` is full or the file ends; returns how much was read.
fn read_full_at(file: &File, buf: &mut [u8], offset: u64) -> io::Result<usize> {
    let mut filled = 0;
    while filled < buf.len() {
        match file.read_at(&mut buf[filled..], offset + filled as u64) {
            Ok(0) => break,
            Ok(n) => filled += n,
            Err(e) if e.kind() == io::ErrorKind::Interrupted => {}
            Err(e) => return Err(e),
        }
    }
    Ok(filled)
}

/// Reads until `buf` is full or the input ends; returns how much was read.
pub fn read_full(input: &mut impl Read, buf: &mut [u8]) -> io::Result<usize> {
    let mut filled = 0;
    while filled < buf.len() {
        match input.read(&mut buf[filled..]) {
            Ok(0) => break,
            Ok(n) => filled += n,
            Err(e) if e.kind() == io::ErrorKind::Interrupted => {}
            Err(e) => return Err(e),
        }
    }
    Ok(filled)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn block(payload: &[u8]) -> Vec<u8> {
        let mut out = vec![0u8; BLOCK_HEAD_LEN];
        out.extend_from_slice(payload);
        seal(&mut out);
        out
    }

    #[test]
    fn a_sealed_block_reads_back() {
        let bytes = block(b"hello");
        let mut payload = Vec::new();
        let mut input = &bytes[..];
        assert_eq!(
            read_block(&mut input, &mut payload).unwrap(),
            BlockRead::Block(13)
        );
        assert_eq!(payload, b"hello");
        assert_eq!(
            read_block(&mut input, &mut payload).unwrap(),
            BlockRead::End
        );
    }

    #[test]
    fn every_cut_is_torn_and_every_flipped_bit_is_corrupt() {
        let bytes = block(b"some records");
        let mut payload = Vec::new();
        for cut in 1..bytes.len() {
            let mut input = &bytes[..cut];
            assert_eq!(
                read_block(&mut input, &mut payload).unwrap(),
                BlockRead::Torn,
                "cut at {cut}"
            );
        }
        for at in 0..bytes.len() {
            let mut damaged = bytes.clone();
            damaged[at] ^= 0x10;
            let found = read_block(&mut &damaged[..], &mut payload).unwrap();
            // A damaged length reads as a longer (torn) or shorter (corrupt) block.
            assert!(
                matches!(found, BlockRead::Corrupt { .. } | BlockRead::Torn),
                "flip at {at}: {found:?}"
            );
        }
    }

    /// Three format-2 blocks in a file, and their offsets.
    fn three_blocks() -> (tempfile::NamedTempFile, Vec<u64>, Vec<u8>) {
        let mut bytes = Vec::new();
        let mut offsets = Vec::new();
        for text in [&b"first block"[..], b"the second", b"third and last"] {
            offsets.push(bytes.len() as u64);
            let mut payload = vec![TAG_BLOCK_START];
            payload.extend_from_slice(text);
            bytes.extend(block(&payload));
        }
        let file = tempfile::NamedTempFile::new().unwrap();
        std::fs::write(file.path(), &bytes).unwrap();
        (file, offsets, bytes)
    }

    fn find_in(bytes: &[u8], damaged: u64, claimed: u64) -> Option<u64> {
        let file = tempfile::NamedTempFile::new().unwrap();
        std::fs::write(file.path(), bytes).unwrap();
        find_block(file.as_file(), damaged, claimed, bytes.len() as u64).unwrap()
    }

    #[test]
    fn the_next_good_block_is_found_past_any_damaged_byte() {
        let (file, offsets, bytes) = three_blocks();
        let len = bytes.len() as u64;
        // Where the damaged block's own length says.
        let claimed = offsets[2] - offsets[1] - BLOCK_HEAD_LEN as u64;
        assert_eq!(
            find_block(file.as_file(), offsets[1], claimed, len).unwrap(),
            Some(offsets[2])
        );
        // Whatever byte of the second block is damaged, length and checksum included: the
        // third is found by looking.
        for at in offsets[1]..offsets[2] {
            let mut damaged = bytes.clone();
            damaged[at as usize] ^= 0x40;
            let mut payload = Vec::new();
            let claimed = match read_block(&mut &damaged[offsets[1] as usize..], &mut payload) {
                Ok(BlockRead::Corrupt { claimed }) => claimed,
                Ok(BlockRead::Torn) => 0,
                other => panic!("damage at {at}: {other:?}"),
            };
            assert_eq!(
                find_in(&damaged, offsets[1], claimed),
                Some(offsets[2]),
                "damage at {at}"
            );
        }
        // Damage in the last block: no good block follows.
        assert_eq!(
            find_block(file.as_file(), offsets[2], 0, len).unwrap(),
            None
        );
    }

    #[test]
    fn a_block_without_a_block_start_is_not_where_reading_goes_on() {
        // A format-1 block (no block start) after the damage is not taken for a format-2 one.
        let mut bytes = block(&[TAG_BLOCK_START, 1]);
        bytes[9] ^= 1;
        bytes.extend(block(b"\x03\x01a"));
        assert_eq!(find_in(&bytes, 0, 2), None);
    }

    #[test]
    fn zeros_are_not_a_block() {
        let zeros = [0u8; 32];
        let mut payload = Vec::new();
        assert_eq!(
            read_block(&mut &zeros[..], &mut payload).unwrap(),
            BlockRead::Corrupt { claimed: 0 }
        );
    }
}
