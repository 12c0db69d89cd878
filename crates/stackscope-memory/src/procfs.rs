//! What one process's memory files say: `/proc/PID/statm` (cheap, every reading) and
//! `/proc/PID/smaps_rollup` (a walk of the process's page tables, at a lower rate). The parsers
//! are pure functions of the text; a text that does not parse is `None`, never a panic: a
//! process may vanish or change mid-read.
//!
//! Files read at every reading (`statm`, the cgroup's) are opened once and read again from
//! their start with `pread` ([`read_from_start`]): procfs and cgroupfs make the text anew for a
//! read at offset 0, and one system call instead of four (open, fstat, read, close) is most of
//! a reading's cost. An open `/proc/PID/statm` stays that process's: a pid reused after it
//! ended is not mistaken for it.

use std::fs::File;
use std::io::Read;
use std::os::unix::fs::FileExt;
use std::path::Path;

/// `smaps_rollup`'s sums over every mapping of a process, in bytes.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct Rollup {
    /// `Private_Clean + Private_Dirty`: pages mapped by this process alone.
    pub private: u64,
    /// `Shared_Clean + Shared_Dirty`: resident pages other processes map too.
    pub shared: u64,
    /// `Swap`.
    pub swap: u64,
}

/// The resident set in bytes from `statm`'s text: its second field (resident pages) times
/// `page_size`. `None` for a process without memory (`0 0 0 ...`: a zombie, whose memory is
/// gone): it has ended.
pub fn parse_statm(text: &str, page_size: u64) -> Option<u64> {
    let mut fields = text.split_ascii_whitespace();
    let size: u64 = fields.next()?.parse().ok()?;
    let resident: u64 = fields.next()?.parse().ok()?;
    if size == 0 {
        return None;
    }
    resident.checked_mul(page_size)
}

/// The private, shared and swapped memory from `smaps_rollup`'s text (`Key:   N kB` lines);
/// `None` unless all five fields are there.
pub fn parse_smaps_rollup(text: &str) -> Option<Rollup> {
    let mut fields = [None::<u64>; 5];
    const KEYS: [&str; 5] = [
        "Private_Clean",
        "Private_Dirty",
        "Shared_Clean",
        "Shared_Dirty",
        "Swap",
    ];
    for line in text.lines() {
        let Some((key, rest)) = line.split_once(':') else {
            continue;
        };
        let Some(slot) = KEYS.iter().position(|&k| k == key) else {
            continue;
        };
        fields[slot] = kib(rest);
    }
    let [private_clean, private_dirty, shared_clean, shared_dirty, swap] = fields;
    Some(Rollup {
        private: private_clean?.checked_add(private_dirty?)?,
        shared: shared_clean?.checked_add(shared_dirty?)?,
        swap: swap?,
    })
}

/// `   1234 kB` as bytes.
fn kib(rest: &str) -> Option<u64> {
    let mut words = rest.split_ascii_whitespace();
    let value: u64 = words.next()?.parse().ok()?;
    match words.next() {
        Some("kB") => value.checked_mul(1024),
        _ => None,
    }
}

/// Reads a file once into `buffer` (cleared first), reusing its allocation.
pub fn read_into(path: &Path, buffer: &mut String) -> std::io::Result<()> {
    buffer.clear();
    File::open(path)?.read_to_string(buffer)?;
    Ok(())
}

/// Reads an open file again from its start into `buffer`: usually one `pread`, since the
/// buffer keeps the size the longest text needed. An error, no bytes (a process gone) or text
/// that is not UTF-8 is an error.
pub fn read_from_start<'b>(file: &File, buffer: &'b mut Vec<u8>) -> std::io::Result<&'b str> {
    if buffer.len() < 4096 {
        buffer.resize(4096, 0);
    }
    let mut filled = 0;
    loop {
        let read = file.read_at(&mut buffer[filled..], filled as u64)?;
        filled += read;
        if read == 0 || filled < buffer.len() {
            break;
        }
        // Full: there may be more.
        let grown = buffer.len() * 2;
        buffer.resize(grown, 0);
    }
    if filled == 0 {
        return Err(std::io::ErrorKind::UnexpectedEof.into());
    }
    std::str::from_utf8(&buffer[..filled]).map_err(|_| std::io::ErrorKind::InvalidData.into())
}

/// The CPU time the calling thread has used (`CLOCK_THREAD_CPUTIME_ID`); zero if unreadable.
pub fn thread_cpu_time() -> std::time::Duration {
    let mut ts = libc::timespec {
        tv_sec: 0,
        tv_nsec: 0,
    };
    // SAFETY: a valid clock id and a pointer to a timespec we own.
    let rc = unsafe { libc::clock_gettime(libc::CLOCK_THREAD_CPUTIME_ID, &mut ts) };
    if rc != 0 {
        return std::time::Duration::ZERO;
    }
    let secs = u64::try_from(ts.tv_sec).unwrap_or(0);
    let nanos = u32::try_from(ts.tv_nsec).unwrap_or(0);
    std::time::Duration::new(secs, nanos)
}

/// The system's page size, the unit of `statm`.
pub fn page_size() -> u64 {
    // SAFETY: sysconf has no preconditions.
    let size = unsafe { libc::sysconf(libc::_SC_PAGESIZE) };
    u64::try_from(size).ok().filter(|&s| s > 0).unwrap_or(4096)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn statm_resident_pages_times_the_page_size() {
        assert_eq!(
            parse_statm("5231 1892 1024 1 0 2000 0\n", 4096),
            Some(1892 * 4096)
        );
        assert_eq!(parse_statm("5231\n", 4096), None);
        assert_eq!(parse_statm("", 4096), None);
        assert_eq!(parse_statm("5231 -3 0", 4096), None);
        assert_eq!(parse_statm("1 18446744073709551615 0", 4096), None);
        // A zombie's.
        assert_eq!(parse_statm("0 0 0 0 0 0 0\n", 4096), None);
    }

    #[test]
    fn an_open_file_is_read_again_from_its_start() {
        let dir = tempfile::tempdir().expect("tempdir");
        let path = dir.path().join("f");
        std::fs::write(&path, "first\n").expect("write");
        let file = File::open(&path).expect("open");
        let mut buffer = Vec::new();
        assert_eq!(
            read_from_start(&file, &mut buffer).expect("read"),
            "first\n"
        );
        let long = "x".repeat(10_000);
        std::fs::write(&path, &long).expect("write");
        assert_eq!(read_from_start(&file, &mut buffer).expect("read"), long);
        std::fs::write(&path, "").expect("write");
        assert!(read_from_start(&file, &mut buffer).is_err());
        let statm = File::open("/proc/self/statm").expect("open");
        let first = read_from_start(&statm, &mut buffer)
            .expect("read")
            .to_owned();
        assert!(parse_statm(&first, page_size()).is_some_and(|rss| rss > 0));
        assert!(read_from_start(&statm, &mut buffer).is_ok());
    }

    const ROLLUP: &str = "\
55c4a27d5000-7ffe4a6ef000 ---p 00000000 00:00 0                          [rollup]
Rss:              793884 kB
Pss:              792029 kB
Shared_Clean:       2104 kB
Shared_Dirty:         16 kB
Private_Clean:      4568 kB
Private_Dirty:    787212 kB
Referenced:       793884 kB
Anonymous:        787212 kB
Swap:                 64 kB
SwapPss:              64 kB
Locked:                0 kB
";

    #[test]
    fn rollup_sums_private_and_shared() {
        assert_eq!(
            parse_smaps_rollup(ROLLUP),
            Some(Rollup {
                private: (4568 + 787212) * 1024,
                shared: (2104 + 16) * 1024,
                swap: 64 * 1024,
            })
        );
    }

    #[test]
    fn a_torn_or_partial_rollup_is_none() {
        // Cut before Swap, as a process that vanished mid-read would leave it.
        let cut = &ROLLUP[..ROLLUP.find("Referenced").expect("in the text")];
        assert_eq!(parse_smaps_rollup(cut), None);
        assert_eq!(parse_smaps_rollup(""), None);
        assert_eq!(
            parse_smaps_rollup(&ROLLUP.replace("Swap:                 64 kB", "Swap: x kB")),
            None
        );
        assert_eq!(
            parse_smaps_rollup(&ROLLUP.replace(" 64 kB", " 64 MB")),
            None
        );
    }

    #[test]
    fn the_page_size_is_a_power_of_two() {
        assert!(page_size().is_power_of_two());
    }
}
