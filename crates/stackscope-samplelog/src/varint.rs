//! LEB128 varints, zigzag for signed deltas, and a bounds-checked reader over a record's bytes.

use crate::error::DecodeError;

/// The longest LEB128 encoding of a `u64`.
pub const MAX_VARINT_LEN: usize = 10;

/// Appends `value` as unsigned LEB128: seven bits a byte, low bits first, high bit = more.
pub fn put_varint(out: &mut Vec<u8>, mut value: u64) {
    while value >= 0x80 {
        out.push((value as u8) | 0x80);
        value >>= 7;
    }
    out.push(value as u8);
}

/// Maps a signed value to an unsigned one so that small magnitudes stay small: 0, -1, 1, -2...
pub fn zigzag(value: i64) -> u64 {
    ((value << 1) ^ (value >> 63)) as u64
}

pub fn unzigzag(value: u64) -> i64 {
    ((value >> 1) as i64) ^ -((value & 1) as i64)
}

/// Appends a length-prefixed UTF-8 string.
pub fn put_str(out: &mut Vec<u8>, s: &str) {
    put_varint(out, s.len() as u64);
    out.extend_from_slice(s.as_bytes());
}

pub fn put_f32(out: &mut Vec<u8>, value: f32) {
    out.extend_from_slice(&value.to_le_bytes());
}

pub fn put_f64(out: &mut Vec<u8>, value: f64) {
    out.extend_from_slice(&value.to_le_bytes());
}

/// Reads values back from a byte slice; every read checks the bounds.
#[derive(Debug)]
pub struct Bytes<'a> {
    buf: &'a [u8],
    pos: usize,
}

impl<'a> Bytes<'a> {
    pub fn new(buf: &'a [u8]) -> Bytes<'a> {
        Bytes { buf, pos: 0 }
    }

    /// Bytes not read yet.
    pub fn remaining(&self) -> usize {
        self.buf.len().saturating_sub(self.pos)
    }

    /// Bytes read so far.
    pub fn position(&self) -> usize {
        self.pos
    }

    pub fn u8(&mut self) -> Result<u8, DecodeError> {
        let byte = *self.buf.get(self.pos).ok_or(DecodeError::Truncated)?;
        self.pos += 1;
        Ok(byte)
    }

    pub fn varint(&mut self) -> Result<u64, DecodeError> {
        let mut value = 0u64;
        for i in 0..MAX_VARINT_LEN {
            let byte = self.u8()?;
            let bits = u64::from(byte & 0x7f);
            if i == MAX_VARINT_LEN - 1 && bits > 1 {
                return Err(DecodeError::Overflow);
            }
            value |= bits << (7 * i);
            if byte & 0x80 == 0 {
                return Ok(value);
            }
        }
        Err(DecodeError::Overflow)
    }

    /// A varint that must fit a `u32`.
    pub fn varint_u32(&mut self) -> Result<u32, DecodeError> {
        u32::try_from(self.varint()?).map_err(|_| DecodeError::Overflow)
    }

    /// A varint used as an index or a count.
    pub fn varint_usize(&mut self) -> Result<usize, DecodeError> {
        usize::try_from(self.varint()?).map_err(|_| DecodeError::Overflow)
    }

    pub fn take(&mut self, len: usize) -> Result<&'a [u8], DecodeError> {
        let end = self.pos.checked_add(len).ok_or(DecodeError::Truncated)?;
        let bytes = self.buf.get(self.pos..end).ok_or(DecodeError::Truncated)?;
        self.pos = end;
        Ok(bytes)
    }

    pub fn str(&mut self) -> Result<&'a str, DecodeError> {
        let len = self.varint_usize()?;
        std::str::from_utf8(self.take(len)?).map_err(|_| DecodeError::Utf8)
    }

    pub fn f32(&mut self) -> Result<f32, DecodeError> {
        let bytes = self.take(4)?;
        Ok(f32::from_le_bytes([bytes[0], bytes[1], bytes[2], bytes[3]]))
    }

    pub fn f64(&mut self) -> Result<f64, DecodeError> {
        let mut raw = [0u8; 8];
        raw.copy_from_slice(self.take(8)?);
        Ok(f64::from_le_bytes(raw))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn varints_round_trip_and_stay_short() {
        for value in [
            0,
            1,
            127,
            128,
            300,
            16_383,
            16_384,
            u64::from(u32::MAX),
            u64::MAX,
        ] {
            let mut out = Vec::new();
            put_varint(&mut out, value);
            let mut bytes = Bytes::new(&out);
            assert_eq!(bytes.varint().unwrap(), value);
            assert_eq!(bytes.remaining(), 0);
        }
        let mut out = Vec::new();
        put_varint(&mut out, 127);
        assert_eq!(out.len(), 1);
        out.clear();
        put_varint(&mut out, u64::MAX);
        assert_eq!(out.len(), MAX_VARINT_LEN);
    }

    #[test]
    fn zigzag_keeps_small_magnitudes_small() {
        for (value, expected) in [(0, 0), (-1, 1), (1, 2), (-2, 3), (2, 4)] {
            assert_eq!(zigzag(value), expected);
            assert_eq!(unzigzag(expected), value);
        }
        for value in [i64::MIN, i64::MAX, -12_345_678, 98_765_432] {
            assert_eq!(unzigzag(zigzag(value)), value);
        }
    }

    #[test]
    fn truncated_and_overlong_input_is_an_error_not_a_panic() {
        assert_eq!(Bytes::new(&[0x80]).varint(), Err(DecodeError::Truncated));
        assert_eq!(Bytes::new(&[0xff; 11]).varint(), Err(DecodeError::Overflow));
        assert_eq!(Bytes::new(&[5, b'a']).str(), Err(DecodeError::Truncated));
        assert_eq!(Bytes::new(&[2, 0xff, 0xfe]).str(), Err(DecodeError::Utf8));
        assert_eq!(Bytes::new(&[1, 2, 3]).f32(), Err(DecodeError::Truncated));
        assert_eq!(
            Bytes::new(&[0xff, 0xff, 0xff, 0xff, 0x1f]).varint_u32(),
            Err(DecodeError::Overflow)
        );
    }
}
