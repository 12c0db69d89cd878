//! Why reading another process was refused, told apart the way a container user needs it.
//!
//! Two causes answer EPERM alike. A missing capability (`CAP_SYS_PTRACE`, which Docker and
//! Kubernetes drop by default) or Yama's `ptrace_scope` refuses every ptrace-level access, so
//! even `/proc/PID/maps` cannot be read. A seccomp profile that blocks `process_vm_readv`
//! (Docker's default one does, unless the container has `CAP_SYS_PTRACE`) lets `/proc` be read
//! and refuses only the memory reads, and only in a process under a seccomp filter
//! (`Seccomp: 2` in `/proc/self/status`).

use std::fs;

use crate::procfs;

/// What refused us.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Refusal {
    /// ptrace-level access is denied: a capability, or Yama.
    Access,
    /// Access is granted, but a seccomp filter blocks `process_vm_readv`.
    Seccomp,
}

/// Tells why reading `pid` was refused.
pub(crate) fn refusal(pid: u32) -> Refusal {
    if seccomp_filtered() && procfs::maps(pid).is_ok() && memory_read_refused(pid) {
        Refusal::Seccomp
    } else {
        Refusal::Access
    }
}

/// Whether this process runs under a seccomp filter.
fn seccomp_filtered() -> bool {
    fs::read_to_string("/proc/self/status")
        .ok()
        .and_then(|s| {
            s.lines()
                .find(|l| l.starts_with("Seccomp:"))
                .map(|l| l["Seccomp:".len()..].trim() == "2")
        })
        .unwrap_or(false)
}

/// Whether one byte of the target's first readable mapping cannot be read for EPERM.
fn memory_read_refused(pid: u32) -> bool {
    let Ok(maps) = procfs::maps(pid) else {
        return false;
    };
    let Some(start) = maps.lines().find_map(|line| {
        let mut fields = line.split_whitespace();
        let range = fields.next()?;
        let perms = fields.next()?;
        perms
            .starts_with('r')
            .then(|| usize::from_str_radix(range.split('-').next()?, 16).ok())?
    }) else {
        return false;
    };
    let mut byte = [0u8; 1];
    let local = libc::iovec {
        iov_base: byte.as_mut_ptr().cast(),
        iov_len: 1,
    };
    let remote = libc::iovec {
        iov_base: start as *mut libc::c_void,
        iov_len: 1,
    };
    // SAFETY: the local iovec is our one-byte buffer; the remote one is only read by the kernel.
    let n = unsafe { libc::process_vm_readv(pid as libc::pid_t, &local, 1, &remote, 1, 0) };
    n < 0 && std::io::Error::last_os_error().raw_os_error() == Some(libc::EPERM)
}

/// How to grant the access in a container, for the error's second line.
pub(crate) const CONTAINER_FIXES: &str = "in a container, grant CAP_SYS_PTRACE: Docker \
     `--cap-add SYS_PTRACE`; Kubernetes `securityContext.capabilities.add: [SYS_PTRACE]` on the \
     container (and `shareProcessNamespace: true` on the pod, for a sidecar), or \
     `kubectl debug --profile=general --target=CONTAINER`";

/// How to lift a seccomp profile's ban on `process_vm_readv`.
pub(crate) const SECCOMP_FIXES: &str = "Docker allows it with `--cap-add SYS_PTRACE` (its \
     default profile then permits process_vm_readv) or `--security-opt seccomp=unconfined`; \
     Kubernetes with `securityContext.seccompProfile.type: Unconfined` (or a profile that \
     allows process_vm_readv and ptrace)";

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn reading_ourselves_is_never_refused() {
        assert_eq!(refusal(std::process::id()), Refusal::Access);
        assert!(!memory_read_refused(std::process::id()));
    }
}
