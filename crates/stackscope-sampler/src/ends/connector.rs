//! The kernel's process events (the netlink process connector): every process's exit, with
//! its wait status, as it happens, whoever its parent is and whether or not it is ever reaped.
//! Needs root (CAP_NET_ADMIN), and the host's network namespace.

use std::os::fd::{AsRawFd, FromRawFd, OwnedFd};

/// `NETLINK_CONNECTOR`, `CN_IDX_PROC`, `CN_VAL_PROC` (linux/connector.h, linux/cn_proc.h).
const NETLINK_CONNECTOR: i32 = 11;
const CN_IDX_PROC: u32 = 1;
const CN_VAL_PROC: u32 = 1;
const PROC_CN_MCAST_LISTEN: u32 = 1;
const PROC_EVENT_EXIT: u32 = 0x8000_0000;
/// The receive buffer asked for: a busy machine's exits between two drains (each event costs
/// the buffer about a kilobyte).
const RECEIVE_BUFFER: i32 = 8 << 20;
/// struct nlmsghdr, then struct cn_msg's header, then struct proc_event's header (what, cpu,
/// timestamp_ns): the event's data starts here.
const NLMSG_HDR: usize = 16;
const CN_MSG_HDR: usize = 20;
const EVENT_DATA: usize = NLMSG_HDR + CN_MSG_HDR + 16;
/// Messages read at most per drain.
const MAX_MESSAGES: usize = 4096;

pub(super) struct ExitEvents {
    socket: OwnedFd,
}

impl ExitEvents {
    /// Subscribes to the events; `None` where the kernel refuses (not root, no connector).
    pub(super) fn open() -> Option<ExitEvents> {
        // SAFETY: plain socket(2); the descriptor is owned at once.
        let fd = unsafe {
            libc::socket(
                libc::AF_NETLINK,
                libc::SOCK_DGRAM | libc::SOCK_NONBLOCK | libc::SOCK_CLOEXEC,
                NETLINK_CONNECTOR,
            )
        };
        if fd < 0 {
            return None;
        }
        // SAFETY: `fd` is a fresh descriptor nobody else owns.
        let socket = unsafe { OwnedFd::from_raw_fd(fd) };
        // SAFETY: a zeroed sockaddr_nl is valid; the fields are set below.
        let mut addr: libc::sockaddr_nl = unsafe { std::mem::zeroed() };
        addr.nl_family = libc::AF_NETLINK as u16;
        addr.nl_groups = CN_IDX_PROC;
        // SAFETY: `addr` is a valid sockaddr_nl of the size given.
        let bound = unsafe {
            libc::bind(
                socket.as_raw_fd(),
                std::ptr::addr_of!(addr).cast(),
                std::mem::size_of::<libc::sockaddr_nl>() as u32,
            )
        };
        if bound != 0 {
            return None;
        }
        set_receive_buffer(&socket);
        // Every event, then (kernels since 6.6, which read the longer message) exits alone:
        // forks and execs are most of a machine's events. An older kernel ignores the second.
        let sent = send(&socket, &listen_message(None));
        let _ = send(&socket, &listen_message(Some(PROC_EVENT_EXIT)));
        sent.then_some(ExitEvents { socket })
    }

    /// Appends `(pid, wait status)` of every process (not thread) that exited since the last
    /// drain.
    pub(super) fn drain(&mut self, out: &mut Vec<(u32, i32)>) {
        let mut buf = [0u8; 1024];
        for _ in 0..MAX_MESSAGES {
            // SAFETY: receiving into a buffer of its own length.
            let n = unsafe {
                libc::recv(
                    self.socket.as_raw_fd(),
                    buf.as_mut_ptr().cast(),
                    buf.len(),
                    0,
                )
            };
            // EAGAIN: nothing more; ENOBUFS: some were lost, the next ones still come.
            if n < 0 {
                if std::io::Error::last_os_error().raw_os_error() == Some(libc::ENOBUFS) {
                    continue;
                }
                break;
            }
            if let Some(exit) = parse_exit(&buf[..n as usize]) {
                out.push(exit);
            }
        }
    }
}

/// Asks for a large receive buffer: beyond the limit as root (`SO_RCVBUFFORCE`), else up to it.
fn set_receive_buffer(socket: &OwnedFd) {
    let size: i32 = RECEIVE_BUFFER;
    for option in [libc::SO_RCVBUFFORCE, libc::SO_RCVBUF] {
        // SAFETY: setsockopt with an int option of its own size.
        let set = unsafe {
            libc::setsockopt(
                socket.as_raw_fd(),
                libc::SOL_SOCKET,
                option,
                std::ptr::addr_of!(size).cast(),
                std::mem::size_of::<i32>() as u32,
            )
        };
        if set == 0 {
            return;
        }
    }
}

/// Sends `message` whole; whether it went.
fn send(socket: &OwnedFd, message: &[u8]) -> bool {
    // SAFETY: sending an initialised buffer of its own length.
    let sent = unsafe {
        libc::send(
            socket.as_raw_fd(),
            message.as_ptr().cast(),
            message.len(),
            0,
        )
    };
    sent == message.len() as isize
}

/// nlmsghdr + cn_msg + `PROC_CN_MCAST_LISTEN`, with the event type to keep (struct
/// proc_input) where one is given.
fn listen_message(only: Option<u32>) -> Vec<u8> {
    let mut payload = PROC_CN_MCAST_LISTEN.to_ne_bytes().to_vec();
    if let Some(event) = only {
        payload.extend_from_slice(&event.to_ne_bytes());
    }
    let total = NLMSG_HDR + CN_MSG_HDR + payload.len();
    let mut m = Vec::with_capacity(total);
    m.extend_from_slice(&(total as u32).to_ne_bytes()); // nlmsg_len
    m.extend_from_slice(&(libc::NLMSG_DONE as u16).to_ne_bytes()); // nlmsg_type
    m.extend_from_slice(&0u16.to_ne_bytes()); // nlmsg_flags
    m.extend_from_slice(&0u32.to_ne_bytes()); // nlmsg_seq
    m.extend_from_slice(&std::process::id().to_ne_bytes()); // nlmsg_pid
    m.extend_from_slice(&CN_IDX_PROC.to_ne_bytes()); // id.idx
    m.extend_from_slice(&CN_VAL_PROC.to_ne_bytes()); // id.val
    m.extend_from_slice(&0u32.to_ne_bytes()); // seq
    m.extend_from_slice(&0u32.to_ne_bytes()); // ack
    m.extend_from_slice(&(payload.len() as u16).to_ne_bytes()); // len
    m.extend_from_slice(&0u16.to_ne_bytes()); // flags
    m.extend_from_slice(&payload);
    m
}

/// An exit event's `(pid, wait status)`, for a whole process (its thread-group leader).
fn parse_exit(msg: &[u8]) -> Option<(u32, i32)> {
    let u32_at = |at: usize| -> Option<u32> {
        Some(u32::from_ne_bytes(msg.get(at..at + 4)?.try_into().ok()?))
    };
    if u32_at(NLMSG_HDR + CN_MSG_HDR)? != PROC_EVENT_EXIT {
        return None;
    }
    // struct exit_proc_event: process_pid, process_tgid, exit_code, exit_signal, ...
    let pid = u32_at(EVENT_DATA)?;
    let tgid = u32_at(EVENT_DATA + 4)?;
    let status = u32_at(EVENT_DATA + 8)?;
    (pid == tgid).then_some((pid, status as i32))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn an_exit_event_gives_the_process_and_its_status() {
        let mut msg = vec![0u8; EVENT_DATA + 24];
        msg[NLMSG_HDR + CN_MSG_HDR..][..4].copy_from_slice(&PROC_EVENT_EXIT.to_ne_bytes());
        for (i, v) in [617u32, 617, 9, 17].iter().enumerate() {
            msg[EVENT_DATA + 4 * i..][..4].copy_from_slice(&v.to_ne_bytes());
        }
        assert_eq!(parse_exit(&msg), Some((617, 9)));
        // A thread's exit (pid is not the group's) is no process's.
        msg[EVENT_DATA..][..4].copy_from_slice(&618u32.to_ne_bytes());
        assert_eq!(parse_exit(&msg), None);
        assert_eq!(parse_exit(&msg[..10]), None);
        assert_eq!(listen_message(None).len(), 40);
        assert_eq!(listen_message(Some(PROC_EVENT_EXIT)).len(), 44);
    }
}
