//! The kernel log (`/dev/kmsg`, readable by root), read from the moment we open it on, for the
//! pids the OOM killer names: "Memory cgroup out of memory: Killed process 20205 (python3)",
//! "Out of memory: Killed process 20205 (python3)".

use std::fs::File;
use std::io::{ErrorKind, Read, Seek, SeekFrom};
use std::os::unix::fs::OpenOptionsExt;

pub(super) struct KernelLog {
    file: File,
}

/// The most records taken in one drain: a log flooding must not hold up a tick.
const MAX_RECORDS: usize = 1024;

impl KernelLog {
    /// The log from its end on; `None` where it cannot be read.
    pub(super) fn open() -> Option<KernelLog> {
        let mut file = std::fs::OpenOptions::new()
            .read(true)
            .custom_flags(libc::O_NONBLOCK)
            .open("/dev/kmsg")
            .ok()?;
        file.seek(SeekFrom::End(0)).ok()?;
        Some(KernelLog { file })
    }

    /// The pids named killed by the OOM killer in the records since the last drain.
    pub(super) fn drain_oom_kills(&mut self) -> Vec<u32> {
        let mut pids = Vec::new();
        let mut record = [0u8; 8192];
        for _ in 0..MAX_RECORDS {
            match self.file.read(&mut record) {
                Ok(0) => break,
                Ok(n) => pids.extend(oom_killed_pid(&String::from_utf8_lossy(&record[..n]))),
                // EPIPE: records were overwritten before we read them; go on with the next.
                Err(e) if e.raw_os_error() == Some(libc::EPIPE) => continue,
                Err(e) if e.kind() == ErrorKind::Interrupted => continue,
                Err(_) => break,
            }
        }
        pids
    }
}

/// The pid of "Killed process N" in one record (`PRIORITY,SEQ,TIME,FLAGS;MESSAGE`).
fn oom_killed_pid(record: &str) -> Option<u32> {
    let message = record.split_once(';').map_or(record, |(_, m)| m);
    let after = message.split_once("Killed process ")?.1;
    let digits: String = after.chars().take_while(char::is_ascii_digit).collect();
    digits.parse().ok()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_oom_killers_lines_name_the_pid() {
        assert_eq!(
            oom_killed_pid(
                "3,812,98765432,-;Memory cgroup out of memory: Killed process 20205 (python3) \
                 total-vm:1234kB"
            ),
            Some(20205)
        );
        assert_eq!(
            oom_killed_pid("3,9,1,-;Out of memory: Killed process 7 (x)"),
            Some(7)
        );
        assert_eq!(oom_killed_pid("6,10,2,-;eth0: link up"), None);
    }
}
