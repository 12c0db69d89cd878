//! When the finder walks the tree next.
//!
//! A walk reads one `children` file per thread of every process below the root: about 25 µs a
//! thread on a small VM, so ten walks a second of a job of a hundred threads cost a quarter of
//! a core's hundredth, whether or not anything started. Where the kernel's process events can
//! be had (`proc_events`: root, the host's namespaces), the finder walks when they say that a
//! process of the tree made a process or ran a new program, [`SETTLE`] later, and otherwise
//! only every [`BACKSTOP`] (for events lost to a full socket buffer, said at once by the
//! kernel, or missed otherwise). Without them it walks every [`FIND_INTERVAL`], as it does
//! while a child that looked like Python could not be read yet and is tried again.

use std::collections::HashSet;
use std::os::fd::{AsFd, AsRawFd, BorrowedFd, FromRawFd, OwnedFd};
use std::sync::Arc;
use std::time::{Duration, Instant};

use crate::proc_events::{ProcEvent, ProcEvents, PROC_EVENT_EXEC, PROC_EVENT_FORK};

/// How often the tree is walked without events: ten walks a second find a worker that lives a
/// fifth of a second.
pub(super) const FIND_INTERVAL: Duration = Duration::from_millis(100);

/// How often the tree is walked with events, for any the finder did not see.
pub(super) const BACKSTOP: Duration = Duration::from_secs(1);

/// How long after a process of the tree forks the walk comes: a child started to run another
/// program (`subprocess`, `spawn`) has exec'd by then, and is read as that program rather than
/// as a copy of its parent; and the children of a pool started together are found in one walk.
const SETTLE: Duration = Duration::from_millis(30);

/// Ends a [`Cue::wait`] at once, from another thread (the finder's owner, when it stops).
#[derive(Clone)]
pub(super) struct Waker(Option<Arc<OwnedFd>>);

impl Waker {
    pub(super) fn wake(&self) {
        let Some(fd) = &self.0 else {
            return;
        };
        let one = 1u64.to_ne_bytes();
        // SAFETY: writing 8 initialised bytes to an eventfd we own.
        let _ = unsafe { libc::write(fd.as_raw_fd(), one.as_ptr().cast(), one.len()) };
    }
}

/// What the finder waits on between walks.
pub(super) struct Cue {
    events: Option<ProcEvents>,
    /// An eventfd the [`Waker`] writes; None where one could not be made (the wait then
    /// ends at least every [`FIND_INTERVAL`], so that a stop is seen).
    wake: Option<Arc<OwnedFd>>,
    /// The root and every process below it at the last walk, and those forked by them since.
    tree: HashSet<u32>,
}

impl Cue {
    /// Subscribes to the kernel's fork and exec events where it can; never fails.
    pub(super) fn open() -> Cue {
        Cue {
            events: ProcEvents::open(PROC_EVENT_FORK | PROC_EVENT_EXEC),
            wake: event_fd().map(Arc::new),
            tree: HashSet::new(),
        }
    }

    /// A cue that never has events, for the finder's fallback (tests).
    #[cfg(test)]
    fn without_events() -> Cue {
        Cue {
            events: None,
            wake: event_fd().map(Arc::new),
            tree: HashSet::new(),
        }
    }

    pub(super) fn waker(&self) -> Waker {
        Waker(self.wake.clone())
    }

    /// The tree as a walk found it: the processes whose forks and execs matter.
    pub(super) fn walked(&mut self, tree: impl IntoIterator<Item = u32>) {
        self.tree.clear();
        self.tree.extend(tree);
    }

    /// Waits until the next walk is due, or the waker is woken. `retrying`: a child is being
    /// tried again, at the pace of the clock.
    pub(super) fn wait(&mut self, retrying: bool) {
        let every = if self.events.is_some() && !retrying {
            BACKSTOP
        } else {
            FIND_INTERVAL
        };
        let mut deadline = Instant::now() + every;
        let mut due = false;
        loop {
            let left = deadline.saturating_duration_since(Instant::now());
            if left.is_zero() {
                return;
            }
            let (woken, events) = self.poll(left);
            if woken {
                return;
            }
            if events && self.take_events() && !due {
                // Walked a little later, with whatever else starts meanwhile.
                due = true;
                deadline = deadline.min(Instant::now() + SETTLE);
            }
        }
    }

    /// Waits at most `left` for the waker or an event: which of them came.
    fn poll(&self, left: Duration) -> (bool, bool) {
        let fds: [Option<BorrowedFd<'_>>; 2] = [
            self.wake.as_ref().map(|w| w.as_fd()),
            self.events.as_ref().map(ProcEvents::fd),
        ];
        let mut polled: Vec<libc::pollfd> = fds
            .iter()
            .flatten()
            .map(|fd| libc::pollfd {
                fd: fd.as_raw_fd(),
                events: libc::POLLIN,
                revents: 0,
            })
            .collect();
        let cap = if self.wake.is_some() {
            left
        } else {
            left.min(FIND_INTERVAL)
        };
        let ms = cap.as_millis().clamp(1, i32::MAX as u128) as i32;
        // SAFETY: `polled` is a valid array of its own length.
        let n = unsafe { libc::poll(polled.as_mut_ptr(), polled.len() as libc::nfds_t, ms) };
        if n <= 0 {
            // A timeout (or EINTR): the caller looks at the clock. Without a waker, a wait
            // capped short ends the wait so that a stop is seen.
            return (self.wake.is_none() && cap < left, false);
        }
        let ready = |fd: Option<BorrowedFd<'_>>| {
            fd.and_then(|fd| polled.iter().find(|p| p.fd == fd.as_raw_fd()))
                .is_some_and(|p| p.revents != 0)
        };
        let woken = ready(fds[0]);
        if let (true, Some(fd)) = (woken, fds[0]) {
            let mut count = [0u8; 8];
            // SAFETY: reading an eventfd's 8-byte count into a buffer of that size.
            let _ = unsafe { libc::read(fd.as_raw_fd(), count.as_mut_ptr().cast(), count.len()) };
        }
        (woken, ready(fds[1]))
    }

    /// Reads the events that came: whether a walk is due (one changed the tree, or some were
    /// lost).
    fn take_events(&mut self) -> bool {
        let Some(events) = self.events.as_mut() else {
            return false;
        };
        let tree = &mut self.tree;
        let mut changed = false;
        let drained = events.drain(|event| changed |= changes_tree(tree, event));
        changed || drained.lost
    }
}

/// Whether `event` changes the tree: a process of it made a process, which joins it at once
/// (its own children count too, before the next walk), or ran a new program. A new thread is
/// no new process.
fn changes_tree(tree: &mut HashSet<u32>, event: ProcEvent) -> bool {
    match event {
        ProcEvent::Fork {
            parent_tgid,
            child_pid,
            child_tgid,
        } if child_pid == child_tgid && tree.contains(&parent_tgid) => {
            tree.insert(child_pid);
            true
        }
        ProcEvent::Exec { tgid } => tree.contains(&tgid),
        _ => false,
    }
}

/// A non-blocking eventfd, closed on exec.
fn event_fd() -> Option<OwnedFd> {
    // SAFETY: plain eventfd(2); the descriptor is owned at once.
    let fd = unsafe { libc::eventfd(0, libc::EFD_NONBLOCK | libc::EFD_CLOEXEC) };
    // SAFETY: a fresh descriptor nobody else owns.
    (fd >= 0).then(|| unsafe { OwnedFd::from_raw_fd(fd) })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn forks_and_execs_of_the_tree_change_it_and_others_do_not() {
        let mut tree: HashSet<u32> = [10, 11].into_iter().collect();
        let fork = |parent_tgid, child_pid, child_tgid| ProcEvent::Fork {
            parent_tgid,
            child_pid,
            child_tgid,
        };
        // A thread of the tree, and a process made outside it: nothing to walk for.
        assert!(!changes_tree(&mut tree, fork(10, 20, 10)));
        assert!(!changes_tree(&mut tree, fork(99, 21, 21)));
        assert!(!changes_tree(&mut tree, ProcEvent::Exec { tgid: 99 }));
        let exit = ProcEvent::Exit {
            pid: 11,
            tgid: 11,
            status: 0,
        };
        assert!(!changes_tree(&mut tree, exit));
        // A child of the tree joins it, and its own child counts before any walk.
        assert!(changes_tree(&mut tree, fork(11, 30, 30)));
        assert!(changes_tree(&mut tree, fork(30, 31, 31)));
        assert!(changes_tree(&mut tree, ProcEvent::Exec { tgid: 31 }));
        assert!(!tree.contains(&21));
    }

    #[test]
    fn a_waker_ends_a_wait_at_once() {
        let mut cue = Cue::open();
        let waker = cue.waker();
        // Woken before it waits, from another thread: the wake is kept until then.
        std::thread::spawn(move || waker.wake())
            .join()
            .expect("waker thread");
        let started = Instant::now();
        cue.wait(false);
        assert!(started.elapsed() < FIND_INTERVAL, "{:?}", started.elapsed());
        // The wake was taken: the next wait is the clock's again.
        let started = Instant::now();
        cue.wait(true);
        assert!(
            started.elapsed() >= FIND_INTERVAL,
            "{:?}",
            started.elapsed()
        );
    }

    #[test]
    fn without_events_the_wait_is_the_clocks() {
        let mut cue = Cue::without_events();
        assert!(cue.events.is_none());
        let started = Instant::now();
        cue.wait(false);
        let took = started.elapsed();
        assert!(took >= FIND_INTERVAL && took < BACKSTOP, "{took:?}");
    }
}
