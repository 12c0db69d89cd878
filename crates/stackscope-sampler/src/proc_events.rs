//! The kernel's process events (the netlink process connector): every process's fork, exec
//! and exit, as it happens, whoever its parent is and whether or not it is ever reaped. Needs
//! root (CAP_NET_ADMIN), the host's network namespace, and (for the pids to be ours) the
//! host's PID namespace. Two readers subscribe, each to what it needs: the exits of `ends`
//! (with their wait status) and the forks and execs that wake the finder (`tree`).

use std::os::fd::{AsRawFd, BorrowedFd, FromRawFd, OwnedFd};

/// `NETLINK_CONNECTOR`, `CN_IDX_PROC`, `CN_VAL_PROC` (linux/connector.h, linux/cn_proc.h).
const NETLINK_CONNECTOR: i32 = 11;
const CN_IDX_PROC: u32 = 1;
const CN_VAL_PROC: u32 = 1;
const PROC_CN_MCAST_LISTEN: u32 = 1;
/// The events' types (enum proc_cn_event), also the bits of a subscription's filter.
pub(crate) const PROC_EVENT_FORK: u32 = 0x0000_0001;
pub(crate) const PROC_EVENT_EXEC: u32 = 0x0000_0002;
pub(crate) const PROC_EVENT_EXIT: u32 = 0x8000_0000;
/// The receive buffer asked for: a busy machine's events between two drains (each event costs
/// the buffer about a kilobyte).
const RECEIVE_BUFFER: i32 = 8 << 20;
/// struct nlmsghdr, then struct cn_msg's header, then struct proc_event's header (what, cpu,
/// timestamp_ns): the event's data starts here.
const NLMSG_HDR: usize = 16;
const CN_MSG_HDR: usize = 20;
const EVENT_DATA: usize = NLMSG_HDR + CN_MSG_HDR + 16;
/// Messages read at most per drain.
const MAX_MESSAGES: usize = 4096;

/// One event, of those read here.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum ProcEvent {
    /// `parent` (a process) made `child`: a new process when `child_pid == child_tgid`, else
    /// a thread of `child_tgid`.
    Fork {
        parent_tgid: u32,
        child_pid: u32,
        child_tgid: u32,
    },
    /// Process `tgid` ran a new program.
    Exec { tgid: u32 },
    /// Thread `pid` of `tgid` exited with wait status `status`.
    Exit { pid: u32, tgid: u32, status: i32 },
}

/// What one drain found besides the events.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub(crate) struct Drained {
    /// The socket's buffer overflowed since the last drain: some events were lost.
    pub lost: bool,
}

/// A subscription to the process connector.
pub(crate) struct ProcEvents {
    socket: OwnedFd,
}

impl ProcEvents {
    /// Subscribes to the events of the types in `mask` (`PROC_EVENT_*`); `None` where the
    /// kernel refuses (not root, no connector, another network namespace) or the pids would
    /// not be ours (this process is in a PID namespace of its own).
    pub(crate) fn open(mask: u32) -> Option<ProcEvents> {
        if in_nested_pid_namespace() {
            return None;
        }
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
        // Every event, then (kernels since 6.6, which read the longer message) those of
        // `mask` alone: most of a machine's events are of no interest to one reader. An older
        // kernel ignores the second, and its reader skips what it did not ask for.
        let sent = send(&socket, &listen_message(None));
        let _ = send(&socket, &listen_message(Some(mask)));
        sent.then_some(ProcEvents { socket })
    }

    /// The socket, to wait on for events (readable when one came).
    pub(crate) fn fd(&self) -> BorrowedFd<'_> {
        use std::os::fd::AsFd;
        self.socket.as_fd()
    }

    /// Hands every event that came since the last drain to `each`, oldest first, and says
    /// whether some were lost.
    pub(crate) fn drain(&mut self, mut each: impl FnMut(ProcEvent)) -> Drained {
        let mut drained = Drained::default();
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
                    drained.lost = true;
                    continue;
                }
                break;
            }
            if let Some(event) = parse(&buf[..n as usize]) {
                each(event);
            }
        }
        drained
    }
}

/// Whether this process sees the machine from a PID namespace of its own (more than one pid in
/// `NSpid:`), where the connector's pids, the host's, are not the ones `/proc` shows.
fn in_nested_pid_namespace() -> bool {
    std::fs::read_to_string("/proc/self/status").is_ok_and(|status| {
        status
            .lines()
            .find_map(|l| l.strip_prefix("NSpid:"))
            .is_some_and(|ids| ids.split_whitespace().count() > 1)
    })
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

/// The event in one message, if it is of a type read here.
fn parse(msg: &[u8]) -> Option<ProcEvent> {
    let u32_at = |at: usize| -> Option<u32> {
        Some(u32::from_ne_bytes(msg.get(at..at + 4)?.try_into().ok()?))
    };
    let data = |i: usize| u32_at(EVENT_DATA + 4 * i);
    match u32_at(NLMSG_HDR + CN_MSG_HDR)? {
        // struct fork_proc_event: parent_pid, parent_tgid, child_pid, child_tgid.
        PROC_EVENT_FORK => Some(ProcEvent::Fork {
            parent_tgid: data(1)?,
            child_pid: data(2)?,
            child_tgid: data(3)?,
        }),
        // struct exec_proc_event: process_pid, process_tgid.
        PROC_EVENT_EXEC => Some(ProcEvent::Exec { tgid: data(1)? }),
        // struct exit_proc_event: process_pid, process_tgid, exit_code, exit_signal, ...
        PROC_EVENT_EXIT => Some(ProcEvent::Exit {
            pid: data(0)?,
            tgid: data(1)?,
            status: data(2)? as i32,
        }),
        _ => None,
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn message(what: u32, data: &[u32]) -> Vec<u8> {
        let mut msg = vec![0u8; EVENT_DATA + 24];
        msg[NLMSG_HDR + CN_MSG_HDR..][..4].copy_from_slice(&what.to_ne_bytes());
        for (i, v) in data.iter().enumerate() {
            msg[EVENT_DATA + 4 * i..][..4].copy_from_slice(&v.to_ne_bytes());
        }
        msg
    }

    #[test]
    fn events_are_read_from_their_messages() {
        assert_eq!(
            parse(&message(PROC_EVENT_EXIT, &[618, 617, 9, 17])),
            Some(ProcEvent::Exit {
                pid: 618,
                tgid: 617,
                status: 9
            })
        );
        assert_eq!(
            parse(&message(PROC_EVENT_FORK, &[40, 40, 51, 51])),
            Some(ProcEvent::Fork {
                parent_tgid: 40,
                child_pid: 51,
                child_tgid: 51
            })
        );
        assert_eq!(
            parse(&message(PROC_EVENT_EXEC, &[77, 77])),
            Some(ProcEvent::Exec { tgid: 77 })
        );
        // Another type (a comm change), and a message cut short, are none of ours.
        assert_eq!(parse(&message(0x200, &[1, 1])), None);
        assert_eq!(parse(&message(PROC_EVENT_EXIT, &[617, 617])[..10]), None);
        assert_eq!(listen_message(None).len(), 40);
        assert_eq!(listen_message(Some(PROC_EVENT_EXIT)).len(), 44);
    }
}
