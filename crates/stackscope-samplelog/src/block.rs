//! The file's framing: a prefix (magic and format version), then blocks.
//!
//! A block is `[payload length: u32 LE][CRC-32 of the payload: u32 LE][payload]`, the payload a
//! run of whole records. The writer hands each block to the OS in one `write`, so after a crash
//! or `kill -9` the file ends at a block boundary or inside the last block; the reader keeps
//! every block whose length and checksum hold and stops at the first that does not.

use std::io::{self, Read};

/// The first bytes of every sample log.
pub const MAGIC: &[u8; 8] = b"STKSCPLG";
/// The format this crate writes and reads; bumped on any incompatible change.
pub const FORMAT_VERSION: u16 = 1;
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
    /// A complete block whose length or checksum is wrong.
    Corrupt,
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
        return Ok(BlockRead::Corrupt);
    }
    payload.clear();
    payload.resize(len, 0);
    if read_full(input, payload)? < len {
        return Ok(BlockRead::Torn);
    }
    if crc32fast::hash(payload) != crc {
        return Ok(BlockRead::Corrupt);
    }
    Ok(BlockRead::Block((BLOCK_HEAD_LEN + len) as u64))
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
                matches!(found, BlockRead::Corrupt | BlockRead::Torn),
                "flip at {at}: {found:?}"
            );
        }
    }

    #[test]
    fn zeros_are_not_a_block() {
        let zeros = [0u8; 32];
        let mut payload = Vec::new();
        assert_eq!(
            read_block(&mut &zeros[..], &mut payload).unwrap(),
            BlockRead::Corrupt
        );
    }
}
