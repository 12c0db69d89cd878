//! Python `str` objects, decoded from copied bytes the way py-spy decodes them.

use crate::fast::layout::{common, u32_at, usize_at, word, Layout};

/// py-spy refuses to copy longer strings (and then leaves the frame out); so do we.
pub(crate) const MAX_CHARS: usize = 4096;

/// What a string's header says about where its characters are and how they are stored.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) struct StrShape {
    pub length: usize,
    /// Bytes per character: 1, 2 or 4.
    pub kind: usize,
    pub ascii: bool,
    /// Where the characters are: right after the header for the compact strings all names
    /// are, elsewhere for the old-style ones (found through a pointer we must read).
    pub data: DataAt,
}

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum DataAt {
    Address(usize),
    /// The address is the pointer stored at this address.
    Pointer(usize),
}

/// Bytes to read of a string object to learn its shape.
pub(crate) fn header_len(layout: &Layout) -> usize {
    layout.unicode_ascii_header
}

/// The shape of the string at `addr` from its first [`header_len`] bytes.
pub(crate) fn shape(layout: &Layout, addr: usize, header: &[u8]) -> Result<StrShape, &'static str> {
    let length = usize_at(header, common::UNICODE_LENGTH).ok_or("short string header")?;
    let state = u32_at(header, common::UNICODE_STATE).ok_or("short string header")?;
    let kind = ((state >> 2) & 7) as usize;
    let compact = (state >> 5) & 1 == 1;
    let ascii = (state >> 6) & 1 == 1;
    if length >= MAX_CHARS {
        return Err("string too long");
    }
    if !matches!(kind, 1 | 2 | 4) {
        return Err("unknown string kind");
    }
    let data = match (compact, ascii) {
        (true, true) => DataAt::Address(addr + layout.unicode_ascii_header),
        (true, false) => DataAt::Address(addr + layout.unicode_compact_header),
        (false, _) => DataAt::Pointer(addr + layout.unicode_compact_header),
    };
    Ok(StrShape {
        length,
        kind,
        ascii,
        data,
    })
}

/// The pointer at the start of `bytes`, for [`DataAt::Pointer`].
pub(crate) fn pointer(bytes: &[u8]) -> Option<usize> {
    word(bytes, 0).and_then(|w| usize::try_from(w).ok())
}

/// Decodes a string's characters (`shape.length * shape.kind` bytes).
pub(crate) fn decode(shape: &StrShape, bytes: &[u8]) -> Result<String, &'static str> {
    if bytes.len() != shape.length * shape.kind {
        return Err("short string data");
    }
    match (shape.kind, shape.ascii) {
        (4, _) => bytes
            .chunks_exact(4)
            .map(|c| {
                char::from_u32(u32::from_le_bytes([c[0], c[1], c[2], c[3]]))
                    .ok_or("invalid code point")
            })
            .collect(),
        (2, _) => {
            let units: Vec<u16> = bytes
                .chunks_exact(2)
                .map(|c| u16::from_le_bytes([c[0], c[1]]))
                .collect();
            String::from_utf16(&units).map_err(|_| "invalid UTF-16")
        }
        (1, true) => String::from_utf8(bytes.to_vec()).map_err(|_| "invalid UTF-8"),
        // Latin-1: each byte is its own code point.
        (1, false) => Ok(bytes.iter().map(|&b| char::from(b)).collect()),
        _ => Err("unknown string kind"),
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::fast::layout::PY311;

    fn header(length: usize, kind: u32, compact: bool, ascii: bool) -> Vec<u8> {
        let mut h = vec![0u8; 48];
        h[16..24].copy_from_slice(&(length as u64).to_le_bytes());
        let state = (kind << 2) | (u32::from(compact) << 5) | (u32::from(ascii) << 6);
        h[32..36].copy_from_slice(&state.to_le_bytes());
        h
    }

    #[test]
    fn compact_ascii_data_follows_the_header() {
        let s = shape(&PY311, 0x1000, &header(3, 1, true, true)).expect("shape");
        assert_eq!(s.data, DataAt::Address(0x1000 + 48));
        assert_eq!(decode(&s, b"abc").as_deref(), Ok("abc"));
    }

    #[test]
    fn wide_and_latin1_strings_decode() {
        let s = shape(&PY311, 0x1000, &header(2, 2, true, false)).expect("shape");
        assert_eq!(s.data, DataAt::Address(0x1000 + 72));
        let bytes: Vec<u8> = "πx".encode_utf16().flat_map(u16::to_le_bytes).collect();
        assert_eq!(decode(&s, &bytes).as_deref(), Ok("πx"));
        let s = shape(&PY311, 0x1000, &header(1, 1, true, false)).expect("shape");
        assert_eq!(decode(&s, &[0xe9]).as_deref(), Ok("é"));
        let s = shape(&PY311, 0x1000, &header(1, 4, true, false)).expect("shape");
        assert!(decode(&s, &0xd800u32.to_le_bytes()).is_err());
    }

    #[test]
    fn garbage_headers_are_refused() {
        assert!(shape(&PY311, 0x1000, &header(5000, 1, true, true)).is_err());
        assert!(shape(&PY311, 0x1000, &header(3, 3, true, true)).is_err());
        assert!(shape(&PY311, 0x1000, &[0u8; 10]).is_err());
        let s = shape(&PY311, 0x1000, &header(3, 1, false, true)).expect("shape");
        assert_eq!(s.data, DataAt::Pointer(0x1000 + 72));
    }
}
