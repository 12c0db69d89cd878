//! Why reading another process was refused, told apart the way a container user needs it.
//!
//! Two causes answer EPERM alike. A missing capability (`CAP_SYS_PTRACE`, which Docker and
//! Kubernetes drop by default) refuses every ptrace-level access, so that even
//! `/proc/PID/maps` cannot be read. A seccomp profile that blocks `ptrace` or
//! `process_vm_readv` lets `/proc` be read and refuses only those system calls, and only in a
//! process under a seccomp filter (`Seccomp: 2` in `/proc/self/status`). (A profile that blocks
//! `process_vm_readv` alone does not stop stackscope: py-spy's reader then reads through
//! `/proc/PID/mem`.) Yama's `ptrace_scope` also lets `/proc` be read and refuses attaching, so
//! it is ruled out first.

use std::fs;

use crate::procfs;

/// What refused us.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Refusal {
    /// ptrace-level access is denied: a capability, or Yama.
    Access,
    /// Access is granted, but a seccomp filter blocks the system calls that use it.
    Seccomp,
}

/// Tells why reading `pid` was refused (after an EPERM).
pub(crate) fn refusal(pid: u32) -> Refusal {
    let yama = procfs::ptrace_scope().is_some_and(|scope| scope > 0);
    if !yama && seccomp_filtered() && procfs::maps(pid).is_ok() {
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

/// How to grant the access in a container, for the error's second line.
pub(crate) const CONTAINER_FIXES: &str = "in a container, grant CAP_SYS_PTRACE: Docker \
     `--cap-add SYS_PTRACE`; Kubernetes `securityContext.capabilities.add: [SYS_PTRACE]` on the \
     container (and `shareProcessNamespace: true` on the pod, for a sidecar), or \
     `kubectl debug --profile=general --target=CONTAINER`";

/// How to lift a seccomp profile's ban on `ptrace` and `process_vm_readv`.
pub(crate) const SECCOMP_FIXES: &str = "Docker allows it with `--cap-add SYS_PTRACE` (its \
     default profile then permits process_vm_readv) or `--security-opt seccomp=unconfined`; \
     Kubernetes with `securityContext.seccompProfile.type: Unconfined` (or a profile that \
     allows ptrace and process_vm_readv)";

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn without_a_seccomp_filter_a_refusal_is_about_access() {
        if !seccomp_filtered() {
            assert_eq!(refusal(std::process::id()), Refusal::Access);
        }
        // A process we cannot see at all is never blamed on seccomp.
        assert_eq!(refusal(u32::MAX - 1), Refusal::Access);
    }
}
