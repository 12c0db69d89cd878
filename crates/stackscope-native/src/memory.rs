//! Reading the target: its memory (process_vm_readv) and a stopped thread's registers.

use std::io::IoSliceMut;

use nix::errno::Errno;
use nix::sys::uio::{process_vm_readv, RemoteIoVec};
use nix::unistd::Pid;

use crate::error::NativeError;

/// How much of the stack the first read fetches: most native stacks of a Python thread (the
/// thread's start, the eval loop, a C call or a wait) fit in it. Each further read fetches
/// [`WINDOW`]: a deep native stack (C recursion, a compiled package) costs a read per window.
const FIRST_WINDOW: usize = 8 * 1024;
const WINDOW: usize = 32 * 1024;

/// Reads up to `buf.len()` bytes of `pid`'s memory at `address`; returns how many were read
/// (fewer when the range runs into unmapped memory).
pub(crate) fn read_into(pid: u32, address: u64, buf: &mut [u8]) -> Result<usize, NativeError> {
    let base =
        usize::try_from(address).map_err(|_| NativeError::UnreadableMemory { pid, address })?;
    let remote = [RemoteIoVec {
        base,
        len: buf.len(),
    }];
    let mut local = [IoSliceMut::new(buf)];
    process_vm_readv(Pid::from_raw(pid as i32), &mut local, &remote).map_err(|e| match e {
        Errno::ESRCH => NativeError::ProcessGone { pid },
        Errno::EPERM => NativeError::PermissionDenied { pid },
        _ => NativeError::UnreadableMemory { pid, address },
    })
}

/// Reads exactly `len` bytes of `pid`'s memory at `address`.
pub(crate) fn read_exact(pid: u32, address: u64, len: usize) -> Result<Vec<u8>, NativeError> {
    let mut bytes = vec![0u8; len];
    let read = read_into(pid, address, &mut bytes)?;
    if read < len {
        return Err(NativeError::UnreadableMemory {
            pid,
            address: address + read as u64,
        });
    }
    Ok(bytes)
}

/// The registers an unwind starts from.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Registers {
    pub ip: u64,
    pub sp: u64,
    pub bp: u64,
    /// The thread pointer: on x86_64 Linux, glibc's `pthread_self()`, which is what Python's
    /// `threading.get_ident()` returns. Matches a Python thread to its OS thread where the
    /// interpreter does not record the OS id (before 3.11).
    pub fs_base: u64,
}

/// Reads the registers of thread `tid` of `pid`, which must be ptrace-stopped by the calling
/// OS thread.
pub(crate) fn read_registers(pid: u32, tid: u32) -> Result<Registers, NativeError> {
    match nix::sys::ptrace::getregs(Pid::from_raw(tid as i32)) {
        Ok(regs) => Ok(Registers {
            ip: regs.rip,
            sp: regs.rsp,
            bp: regs.rbp,
            fs_base: regs.fs_base,
        }),
        Err(Errno::EPERM) => Err(NativeError::PermissionDenied { pid }),
        // ESRCH: gone, not ours, not traced by this thread, or not stopped.
        Err(_) => Err(if std::fs::metadata(format!("/proc/{pid}")).is_err() {
            NativeError::ProcessGone { pid }
        } else if std::fs::metadata(format!("/proc/{pid}/task/{tid}")).is_err() {
            NativeError::ThreadGone { pid, tid }
        } else {
            NativeError::NotStopped { pid, tid }
        }),
    }
}

/// A thread's stack, read lazily in windows and kept for the length of one unwind: framehop
/// asks for one 8-byte word at a time, almost all of them in the first window at `sp`.
pub(crate) struct StackReader {
    pid: u32,
    /// Windows read so far: start address and bytes (possibly shorter than `WINDOW` where
    /// the stack mapping ends).
    windows: Vec<(u64, Vec<u8>)>,
    /// The first address that could not be read, for the error report.
    pub failed_at: Option<u64>,
    /// How many reads this unwind cost.
    pub reads: usize,
}

impl StackReader {
    pub fn new(pid: u32) -> StackReader {
        StackReader {
            pid,
            windows: Vec::new(),
            failed_at: None,
            reads: 0,
        }
    }

    /// Reads the 8-byte word at `address`.
    pub fn read_u64(&mut self, address: u64) -> Result<u64, ()> {
        if let Some(word) = self.cached(address) {
            return Ok(word);
        }
        let len = if self.windows.is_empty() {
            FIRST_WINDOW
        } else {
            WINDOW
        };
        let mut bytes = vec![0u8; len];
        self.reads += 1;
        let read = match read_into(self.pid, address, &mut bytes) {
            Ok(read) if read >= 8 => read,
            _ => {
                self.failed_at.get_or_insert(address);
                return Err(());
            }
        };
        bytes.truncate(read);
        self.windows.push((address, bytes));
        self.cached(address).ok_or(())
    }

    fn cached(&self, address: u64) -> Option<u64> {
        self.windows.iter().find_map(|(start, bytes)| {
            let offset = usize::try_from(address.checked_sub(*start)?).ok()?;
            let word = bytes.get(offset..offset.checked_add(8)?)?;
            Some(u64::from_le_bytes(word.try_into().ok()?))
        })
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn reads_our_own_stack_in_windows() {
        let values: [u64; 4] = [1, 2, 3, 0xdead_beef];
        let pid = std::process::id();
        let mut reader = StackReader::new(pid);
        let base = values.as_ptr() as u64;
        for (i, v) in values.iter().enumerate() {
            assert_eq!(reader.read_u64(base + 8 * i as u64), Ok(*v));
        }
        assert_eq!(reader.reads, 1, "one window serves neighbouring words");
    }

    #[test]
    fn unmapped_memory_is_an_error_not_a_panic() {
        let mut reader = StackReader::new(std::process::id());
        assert_eq!(reader.read_u64(8), Err(()));
        assert_eq!(reader.failed_at, Some(8));
        let err = read_exact(std::process::id(), 8, 16).unwrap_err();
        assert!(matches!(err, NativeError::UnreadableMemory { .. }), "{err}");
    }
}
