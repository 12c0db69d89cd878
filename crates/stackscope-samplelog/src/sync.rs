//! What lets a reader go on past a damaged block (format 2): every block but the header's opens
//! with a block-start record that says what a reader needs to decode the block without the
//! ones before it.
//!
//! Records lean on what came before them: times are deltas, and strings, frames, stacks and
//! threads are defined once and referred to by id. So a block-start record carries
//!
//! - the epoch (resets so far, a lost write's included): a reader in another epoch forgets its
//!   tables, as a reset tells it to;
//! - both time bases, so times are right again from the first record;
//! - the size of each table, so ids stay where they were when definitions were lost (a lost
//!   definition reads as lost: the samples that use it are left out and counted);
//! - a copy of the definitions the previous block made (since its start, or its reset), and
//!   where their ids begin: a reader that lost only the previous block loses none of them.
//!
//! The copy costs each definition a second time, a small share of a log that mostly repeats
//! known stacks; a reader that read the previous block skips it.

use crate::error::DecodeError;
use crate::intern::TableSizes;
use crate::varint::{put_varint, Bytes};

/// How many definitions each table holds (ids `0..n`).
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct Counts {
    pub strings: u64,
    pub frames: u64,
    pub stacks: u64,
    pub threads: u64,
}

impl Counts {
    pub fn of(sizes: TableSizes) -> Counts {
        Counts {
            strings: sizes.strings as u64,
            frames: sizes.frames as u64,
            stacks: sizes.stacks as u64,
            threads: sizes.threads as u64,
        }
    }

    fn put(&self, out: &mut Vec<u8>) {
        for n in [self.strings, self.frames, self.stacks, self.threads] {
            put_varint(out, n);
        }
    }

    fn decode(bytes: &mut Bytes<'_>) -> Result<Counts, DecodeError> {
        Ok(Counts {
            strings: bytes.varint()?,
            frames: bytes.varint()?,
            stacks: bytes.varint()?,
            threads: bytes.varint()?,
        })
    }
}

/// The record that opens every block of a format-2 log but the header's.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct BlockStart<'a> {
    pub epoch: u64,
    pub tick_base: u64,
    pub gpu_base: u64,
    /// The tables' sizes at the block's start.
    pub sizes: Counts,
    /// Where the ids of the copied definitions begin.
    pub copy_from: Counts,
    /// The previous block's definitions: string, frame, stack and thread records.
    pub copy: &'a [u8],
}

impl BlockStart<'_> {
    /// The fields after the tag.
    pub fn put(&self, out: &mut Vec<u8>) {
        put_varint(out, self.epoch);
        put_varint(out, self.tick_base);
        put_varint(out, self.gpu_base);
        self.sizes.put(out);
        self.copy_from.put(out);
        put_varint(out, self.copy.len() as u64);
        out.extend_from_slice(self.copy);
    }

    pub fn decode<'a>(bytes: &mut Bytes<'a>) -> Result<BlockStart<'a>, DecodeError> {
        let epoch = bytes.varint()?;
        let tick_base = bytes.varint()?;
        let gpu_base = bytes.varint()?;
        let sizes = Counts::decode(bytes)?;
        let copy_from = Counts::decode(bytes)?;
        let len = bytes.varint_usize()?;
        Ok(BlockStart {
            epoch,
            tick_base,
            gpu_base,
            sizes,
            copy_from,
            copy: bytes.take(len)?,
        })
    }
}

/// The writer's side: the definitions of the open block, and those of the block before it,
/// which the next block-start record copies.
#[derive(Debug, Default)]
pub struct Definitions {
    /// Resets so far.
    pub epoch: u64,
    /// Definition records written into the open block since its start or its last reset, and
    /// the table sizes when they began.
    open: Vec<u8>,
    open_from: Counts,
    /// The same of the last block written.
    previous: Vec<u8>,
    previous_from: Counts,
}

impl Definitions {
    /// Keeps a copy of the definition records `record` (just written to the open block).
    pub fn note(&mut self, record: &[u8]) {
        self.open.extend_from_slice(record);
    }

    /// The tables were reset (a reset record, or a lost write): ids start again from 0, and no
    /// earlier definition is worth copying.
    pub fn reset(&mut self) {
        self.epoch += 1;
        self.open.clear();
        self.open_from = Counts::default();
        self.previous.clear();
        self.previous_from = Counts::default();
    }

    /// The open block was written: its definitions become the ones the next block copies.
    pub fn block_written(&mut self, sizes: Counts) {
        self.previous = std::mem::take(&mut self.open);
        self.previous_from = std::mem::replace(&mut self.open_from, sizes);
    }

    /// The record that opens the next block, given the tables' sizes and time bases now.
    pub fn block_start(&self, sizes: Counts, tick_base: u64, gpu_base: u64) -> BlockStart<'_> {
        BlockStart {
            epoch: self.epoch,
            tick_base,
            gpu_base,
            sizes,
            copy_from: self.previous_from,
            copy: &self.previous,
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_block_start_round_trips() {
        let start = BlockStart {
            epoch: 3,
            tick_base: u64::MAX - 5,
            gpu_base: 1 << 40,
            sizes: Counts {
                strings: 300,
                frames: 200,
                stacks: 20,
                threads: 4,
            },
            copy_from: Counts {
                strings: 290,
                frames: 195,
                stacks: 19,
                threads: 0,
            },
            copy: b"\x03\x01a",
        };
        let mut out = Vec::new();
        start.put(&mut out);
        out.push(0xff);
        let mut bytes = Bytes::new(&out);
        assert_eq!(BlockStart::decode(&mut bytes), Ok(start));
        assert_eq!(bytes.remaining(), 1, "reads its own bytes only");
    }

    #[test]
    fn the_next_block_copies_the_definitions_of_the_block_before() {
        let mut defs = Definitions::default();
        let at = |n| Counts {
            strings: n,
            ..Counts::default()
        };
        defs.note(b"first");
        defs.block_written(at(5));
        assert_eq!(defs.block_start(at(5), 0, 0).copy, b"first");
        assert_eq!(defs.block_start(at(5), 0, 0).copy_from, at(0));
        defs.note(b"second");
        defs.block_written(at(9));
        let start = defs.block_start(at(9), 0, 0);
        assert_eq!((start.copy, start.copy_from), (&b"second"[..], at(5)));
        defs.note(b"lost to a reset");
        defs.reset();
        let start = defs.block_start(at(0), 0, 0);
        assert_eq!((start.epoch, start.copy), (1, &b""[..]));
    }
}
