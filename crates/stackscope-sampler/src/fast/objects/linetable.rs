//! Line numbers from a code object's location table: 3.11+'s `co_linetable` (PEP 626/657),
//! and 3.10's simpler one ([`LineTable::decode_310`]).
//!
//! The table is a sequence of entries, each covering 1 to 8 code units and giving the line
//! as a delta from the previous entry's (with columns we skip). Decoding it once per code
//! object turns every later lookup into a binary search.
//!
//! The decoding follows py-spy's (`LineNo::LastInstruction`) exactly, quirks included, so that
//! both readers report the same line for the same instruction: an entry with no location
//! keeps the previous line, and an instruction past the table gets the last line.

/// A decoded table: for each entry, the byte offset just past it and the line within it.
#[derive(Debug, Clone, Default)]
pub(crate) struct LineTable {
    first_line: i32,
    entries: Vec<(i32, i32)>,
    /// py-spy refuses to copy a table this large and reports line 0 for every frame of the
    /// code object; so do we.
    refused: bool,
}

/// py-spy's limit on a copied line table, in bytes.
pub(crate) const MAX_TABLE: usize = 65536;

impl LineTable {
    /// A table of `(end, line)` entries: instructions before byte offset `end` are on `line`
    /// (tests).
    #[cfg(test)]
    pub(crate) fn from_entries(first_line: i32, entries: Vec<(i32, i32)>) -> LineTable {
        LineTable {
            first_line,
            entries,
            ..LineTable::default()
        }
    }

    pub(crate) fn refused() -> LineTable {
        LineTable {
            refused: true,
            ..LineTable::default()
        }
    }

    pub(crate) fn decode(first_line: i32, table: &[u8]) -> LineTable {
        let mut entries = Vec::new();
        let mut line = first_line;
        let mut address: i32 = 0;
        let mut index = 0;
        while index < table.len() {
            let byte = table[index];
            index += 1;
            let units = i32::from(byte & 7) + 1;
            address = address.wrapping_add(units * 2);
            let code = (byte >> 3) & 15;
            let delta: i32 = match code {
                // No location: the line stays.
                15 => 0,
                // Long form: line delta, end line, start column, end column.
                14 => {
                    let delta = read_signed_varint(&mut index, table).unwrap_or(0);
                    read_varint(&mut index, table);
                    read_varint(&mut index, table);
                    read_varint(&mut index, table);
                    delta as i32
                }
                // No column: line delta only.
                13 => read_signed_varint(&mut index, table).unwrap_or(0) as i32,
                // One-line forms: the delta is in the code, two column bytes follow.
                10..=12 => {
                    index += 2;
                    i32::from(code - 10)
                }
                // Short forms: same line, one column byte.
                _ => {
                    index += 1;
                    0
                }
            };
            line = line.wrapping_add(delta);
            entries.push((address, line));
        }
        LineTable {
            first_line,
            entries,
            refused: false,
        }
    }

    /// A 3.10 table (Objects/lnotab_notes.txt of 3.10): pairs of a bytecode delta (unsigned)
    /// and a line delta (signed, -128: no line). Decoded as py-spy walks it, quirk included:
    /// a pair with no line adds no bytecode either.
    pub(crate) fn decode_310(first_line: i32, table: &[u8]) -> LineTable {
        let mut entries = Vec::new();
        let mut line = first_line;
        let mut address: i32 = 0;
        for pair in table.chunks_exact(2) {
            let line_delta = pair[1] as i8;
            if line_delta == -128 {
                continue;
            }
            line = line.wrapping_add(i32::from(line_delta));
            address = address.wrapping_add(i32::from(pair[0]));
            entries.push((address, line));
        }
        LineTable {
            first_line,
            entries,
            refused: false,
        }
    }

    /// The line of the instruction at byte offset `lasti` from the start of the bytecode.
    pub(crate) fn line(&self, lasti: i32) -> i32 {
        if self.refused {
            return 0;
        }
        let i = self.entries.partition_point(|&(end, _)| end <= lasti);
        match self.entries.get(i).or(self.entries.last()) {
            Some(&(_, line)) => line,
            None => self.first_line,
        }
    }
}

fn read_varint(index: &mut usize, table: &[u8]) -> Option<usize> {
    let mut byte = *table.get(*index)?;
    *index += 1;
    let mut value = usize::from(byte & 63);
    let mut shift = 0u32;
    while byte & 64 != 0 {
        byte = *table.get(*index)?;
        *index += 1;
        shift += 6;
        // A torn or corrupt table cannot make the shift overflow.
        if shift < usize::BITS {
            value = value.wrapping_add(usize::from(byte & 63) << shift);
        }
    }
    Some(value)
}

fn read_signed_varint(index: &mut usize, table: &[u8]) -> Option<isize> {
    let value = read_varint(index, table)?;
    let magnitude = (value >> 1) as isize;
    Some(if value & 1 != 0 {
        -magnitude
    } else {
        magnitude
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    /// The reference: py-spy's walk, recomputed for each lookup.
    fn walk(first_line: i32, table: &[u8], lasti: i32) -> i32 {
        let mut line = first_line;
        let mut address = 0;
        let mut index = 0;
        while index < table.len() {
            let byte = table[index];
            index += 1;
            address += (i32::from(byte & 7) + 1) * 2;
            let code = (byte >> 3) & 15;
            let delta = match code {
                15 => 0,
                14 => {
                    let d = read_signed_varint(&mut index, table).unwrap_or(0);
                    read_varint(&mut index, table);
                    read_varint(&mut index, table);
                    read_varint(&mut index, table);
                    d as i32
                }
                13 => read_signed_varint(&mut index, table).unwrap_or(0) as i32,
                10..=12 => {
                    index += 2;
                    i32::from(code - 10)
                }
                _ => {
                    index += 1;
                    0
                }
            };
            line += delta;
            if address > lasti {
                break;
            }
        }
        line
    }

    #[test]
    fn lookups_match_the_linear_walk_everywhere() {
        // Entries of every form: short, one-line (+0..+2), no-column (+5, -3), long (+40),
        // no location.
        let mut table = vec![
            (1 << 7) | 1,
            7,
            (1 << 7) | (11 << 3) | 2,
            0,
            4,
            (1 << 7) | (13 << 3),
            10,
            (1 << 7) | (13 << 3) | 3,
            7,
            (1 << 7) | (12 << 3),
            1,
            2,
            (1 << 7) | (15 << 3) | 4,
            (1 << 7) | (14 << 3) | 7,
            80,
            0,
            1,
            5,
        ];
        // A varint over two bytes: delta +70 -> 140 = 0b10_001100.
        table.extend([(1 << 7) | (13 << 3), 64 | 12, 2]);
        let decoded = LineTable::decode(10, &table);
        for lasti in -4..80 {
            assert_eq!(
                decoded.line(lasti),
                walk(10, &table, lasti),
                "lasti {lasti}"
            );
        }
    }

    /// py-spy's 3.10 walk, recomputed for each lookup.
    fn walk_310(first_line: i32, table: &[u8], lasti: i32) -> i32 {
        let (mut line, mut address, mut i) = (first_line, 0, 0);
        while i + 1 < table.len() {
            let (delta, line_delta) = (table[i], table[i + 1] as i8);
            i += 2;
            if line_delta == -128 {
                continue;
            }
            line += i32::from(line_delta);
            address += i32::from(delta);
            if address > lasti {
                break;
            }
        }
        line
    }

    #[test]
    fn tables_of_3_10_match_py_spys_walk() {
        // Deltas: +1 line over 6 bytes, no line for 4, -2 over 10, +3 over 0, +1 over 8.
        let table = [6u8, 1, 4, 0x80, 10, 0xfe, 0, 3, 8, 1, 7];
        let decoded = LineTable::decode_310(20, &table);
        for lasti in -2..40 {
            assert_eq!(
                decoded.line(lasti),
                walk_310(20, &table, lasti),
                "lasti {lasti}"
            );
        }
        assert_eq!(LineTable::decode_310(5, &[]).line(0), 5);
    }

    #[test]
    fn empty_and_refused_tables() {
        assert_eq!(LineTable::decode(7, &[]).line(0), 7);
        assert_eq!(LineTable::refused().line(0), 0);
    }

    #[test]
    fn a_truncated_varint_does_not_panic() {
        let table = [(1 << 7) | (14 << 3), 64, 64, 64];
        let t = LineTable::decode(1, &table);
        assert_eq!(t.line(0), walk(1, &table, 0));
        let table = [
            (1 << 7) | (13 << 3),
            0xff,
            0xff,
            0xff,
            0xff,
            0xff,
            0xff,
            0xff,
            0xff,
            0xff,
            0xff,
            0xff,
            0xff,
            0xff,
            0x3f,
        ];
        let _ = LineTable::decode(1, &table).line(100);
    }
}
