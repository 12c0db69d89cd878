//! The target's memory map: which file (or the vDSO) is mapped executable where.

use std::path::PathBuf;

use crate::error::NativeError;

/// One executable mapping of the target: code of a file, or of the vDSO.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct CodeMapping {
    pub start: u64,
    pub end: u64,
    /// Offset in the file of the first mapped byte.
    pub offset: u64,
    /// The inode of the file (0 for the vDSO).
    pub inode: u64,
    pub source: MappingSource,
}

/// What a code mapping maps.
#[derive(Debug, Clone, PartialEq, Eq, Hash)]
pub enum MappingSource {
    /// A file, by the path the target sees (in its mount namespace).
    File(PathBuf),
    /// The kernel's vDSO, an ELF image that exists only in memory.
    Vdso,
}

impl CodeMapping {
    pub fn contains(&self, address: u64) -> bool {
        (self.start..self.end).contains(&address)
    }
}

/// Reads the executable mappings of `pid`, sorted by address.
pub fn read_code_mappings(pid: u32) -> Result<Vec<CodeMapping>, NativeError> {
    let path = PathBuf::from(format!("/proc/{pid}/maps"));
    let text = std::fs::read_to_string(&path)
        .map_err(|source| NativeError::from_proc_io(pid, path, source))?;
    let mut mappings: Vec<CodeMapping> = text.lines().filter_map(parse_line).collect();
    mappings.sort_by_key(|m| m.start);
    Ok(mappings)
}

/// Parses one line of `/proc/PID/maps`, keeping it only when it is executable code of a file
/// or of the vDSO. Format: `start-end perms offset dev inode   path`.
pub(crate) fn parse_line(line: &str) -> Option<CodeMapping> {
    let mut rest = line;
    let mut field = || {
        let trimmed = rest.trim_start();
        let end = trimmed.find(char::is_whitespace).unwrap_or(trimmed.len());
        let (value, tail) = trimmed.split_at(end);
        rest = tail;
        value
    };
    let range = field();
    let perms = field();
    let offset = field();
    let _dev = field();
    let inode = field();
    let path = rest.trim();

    if perms.as_bytes().get(2) != Some(&b'x') {
        return None;
    }
    let (start, end) = range.split_once('-')?;
    let start = u64::from_str_radix(start, 16).ok()?;
    let end = u64::from_str_radix(end, 16).ok()?;
    let offset = u64::from_str_radix(offset, 16).ok()?;
    let inode = inode.parse().ok()?;
    let source = if path == "[vdso]" {
        MappingSource::Vdso
    } else if path.starts_with('/') && inode != 0 {
        MappingSource::File(PathBuf::from(path))
    } else {
        // Anonymous executable memory (JIT code), [vsyscall], a deleted file's "(deleted)"
        // still has its inode and path and is kept above.
        return None;
    };
    (start < end).then_some(CodeMapping {
        start,
        end,
        offset,
        inode,
        source,
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn executable_file_mappings_are_kept() {
        let m = parse_line(
            "7f1c2a428000-7f1c2a57d000 r-xp 00028000 00:2f 1234567                    \
             /usr/lib/x86_64-linux-gnu/libc.so.6",
        )
        .unwrap();
        assert_eq!(m.start, 0x7f1c2a428000);
        assert_eq!(m.end, 0x7f1c2a57d000);
        assert_eq!(m.offset, 0x28000);
        assert_eq!(m.inode, 1234567);
        assert_eq!(
            m.source,
            MappingSource::File(PathBuf::from("/usr/lib/x86_64-linux-gnu/libc.so.6"))
        );
    }

    #[test]
    fn paths_with_spaces_survive() {
        let m = parse_line("400000-401000 r-xp 00000000 08:01 42 /opt/my app/lib x.so").unwrap();
        assert_eq!(
            m.source,
            MappingSource::File(PathBuf::from("/opt/my app/lib x.so"))
        );
    }

    #[test]
    fn data_anonymous_and_special_mappings_are_skipped() {
        assert!(parse_line("7f00-8f00 r--p 00000000 08:01 42 /usr/lib/libc.so.6").is_none());
        assert!(parse_line("7f00-8f00 rwxp 00000000 00:00 0 ").is_none());
        assert!(parse_line("7f00-8f00 r-xp 00000000 00:00 0 [vsyscall]").is_none());
        assert!(parse_line("garbage").is_none());
        let vdso = parse_line("7ffd0000-7ffd2000 r-xp 00000000 00:00 0 [vdso]").unwrap();
        assert_eq!(vdso.source, MappingSource::Vdso);
    }
}
