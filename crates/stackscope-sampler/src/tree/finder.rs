//! Finding the Python processes below a root, on a thread of its own.
//!
//! Attaching to a process costs tens of milliseconds (py-spy parses the interpreter's symbols),
//! so a sampler that attached between two ticks would skip ticks whenever workers start: six
//! DataLoader workers at the start of an epoch cost a fifth of a second of samples. The finder
//! walks the tree, attaches, and hands each target over through a channel; the sampler takes
//! what is ready at its next tick and never waits for an attach.

use std::collections::HashMap;
use std::path::PathBuf;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;
use std::thread::JoinHandle;

use crossbeam_channel::{Receiver, Sender, TrySendError};

use crate::error::AttachError;
use crate::procfs;
use crate::target::{PythonTarget, TargetOptions};

use super::cue::{Cue, Waker};

/// The most processes followed at once; a fork bomb must not make us attach without end.
const MAX_PROCESSES: usize = procfs::MAX_DESCENDANTS / 4;

/// Targets attached and not yet taken by the sampler (it takes them at every tick). A channel
/// holds its capacity from the start, a few KB a target: one that does not fit is attached
/// again at the next walk.
const FOUND_QUEUE: usize = 16;

/// Attempts at a child that looks like Python but cannot be read yet.
const MAX_TRIES: u32 = 10;

/// What the finder is asked to walk.
pub(super) struct FindOrders {
    pub root: u32,
    /// The root is looked at too: it is not Python yet, and may exec Python.
    pub root_may_exec: bool,
    pub options: TargetOptions,
    /// Processes already followed when the finder starts: not attached again.
    pub followed: Vec<u32>,
}

/// The finder's thread; stopped and joined on drop.
pub(super) struct Finder {
    found: Receiver<PythonTarget>,
    released: Sender<u32>,
    stop: Arc<AtomicBool>,
    waker: Waker,
    handle: Option<JoinHandle<()>>,
}

impl Finder {
    /// Starts walking at once. `None` when the thread cannot be started: the caller then
    /// follows the root alone.
    pub fn start(orders: FindOrders) -> Option<Finder> {
        let (sender, found) = crossbeam_channel::bounded(FOUND_QUEUE);
        let (released, released_here) = crossbeam_channel::bounded(MAX_PROCESSES);
        let stop = Arc::new(AtomicBool::new(false));
        let thread_stop = stop.clone();
        let cue = Cue::open();
        let waker = cue.waker();
        let handle = std::thread::Builder::new()
            .name("stackscope-finder".into())
            .spawn(move || Walker::new(orders, sender, released_here).run(cue, &thread_stop))
            .ok()?;
        Some(Finder {
            found,
            released,
            stop,
            waker,
            handle: Some(handle),
        })
    }

    /// The targets attached since the last call.
    pub fn take_found(&self) -> impl Iterator<Item = PythonTarget> + '_ {
        self.found.try_iter()
    }

    /// Tells the finder that the sampler let `pid` go: should it still be below the root (a
    /// process that exec'd something else, say), it is looked at again. Never blocks: a
    /// message that does not fit is lost, and the pid is then forgotten once it leaves the
    /// tree.
    pub fn release(&self, pid: u32) {
        let _ = self.released.try_send(pid);
    }
}

impl Drop for Finder {
    fn drop(&mut self) {
        self.stop.store(true, Ordering::Relaxed);
        if let Some(handle) = self.handle.take() {
            self.waker.wake();
            // A walk ends within one attach: the thread is never left behind.
            let _ = handle.join();
        }
    }
}

/// One process, named so that a reused pid is a new process.
#[derive(Clone, Copy, PartialEq, Eq)]
struct Identity {
    pid: u32,
    start_ticks: Option<u64>,
}

impl Identity {
    fn of(pid: u32) -> Identity {
        Identity {
            pid,
            start_ticks: procfs::start_ticks(pid),
        }
    }
}

/// The finder's state, on its own thread.
struct Walker {
    orders: FindOrders,
    sender: Sender<PythonTarget>,
    released: Receiver<u32>,
    /// Processes handed over (or followed from the start), while they are below the root.
    followed: HashMap<u32, Identity>,
    /// Children we could not attach to, with the executable they had when we looked: one that
    /// is not Python is tried again only once it execs something else; one that failed
    /// otherwise (an interpreter still starting) a few more times.
    unreadable: HashMap<u32, Unreadable>,
}

struct Unreadable {
    who: Identity,
    exe: Option<PathBuf>,
    not_python: bool,
    tries: u32,
}

impl Walker {
    fn new(orders: FindOrders, sender: Sender<PythonTarget>, released: Receiver<u32>) -> Walker {
        let followed = orders
            .followed
            .iter()
            .map(|&pid| (pid, Identity::of(pid)))
            .collect();
        Walker {
            orders,
            sender,
            released,
            followed,
            unreadable: HashMap::new(),
        }
    }

    fn run(mut self, mut cue: Cue, stop: &AtomicBool) {
        while !stop.load(Ordering::Relaxed) {
            let below = self.below_root();
            cue.walked(below.iter().copied().chain([self.orders.root]));
            if !self.walk(below, stop) {
                return;
            }
            cue.wait(self.retrying());
        }
    }

    /// Whether a child that looked like Python could not be read yet and is to be tried
    /// again.
    fn retrying(&self) -> bool {
        self.unreadable
            .values()
            .any(|u| !u.not_python && u.tries < MAX_TRIES)
    }

    /// One walk of the tree, over `below` (as [`Walker::below_root`] found it); `false` once
    /// the sampler is gone.
    fn walk(&mut self, below: Vec<u32>, stop: &AtomicBool) -> bool {
        for pid in self.released.try_iter() {
            self.followed.remove(&pid);
        }
        self.forget_gone(&below);
        for pid in below {
            if stop.load(Ordering::Relaxed) {
                return true;
            }
            if self.followed.len() >= MAX_PROCESSES {
                break;
            }
            if self.followed.contains_key(&pid) {
                continue;
            }
            if !self.try_attach(pid) {
                return false;
            }
        }
        true
    }

    /// Every process below the root, the root too while it may yet exec Python.
    fn below_root(&self) -> Vec<u32> {
        let mut below = procfs::descendants(self.orders.root);
        if self.orders.root_may_exec {
            below.insert(0, self.orders.root);
        }
        below
    }

    /// Forgets processes that left the tree, or whose pid now names another process.
    fn forget_gone(&mut self, below: &[u32]) {
        let still_there = |who: &Identity| {
            below.contains(&who.pid) && procfs::start_ticks(who.pid) == who.start_ticks
        };
        self.followed.retain(|_, who| still_there(who));
        self.unreadable.retain(|_, u| still_there(&u.who));
    }

    /// Attaches to `pid` unless it is known not to be readable; `false` once the sampler is
    /// gone.
    fn try_attach(&mut self, pid: u32) -> bool {
        let who = Identity::of(pid);
        let exe = procfs::exe(pid).ok();
        let tries = match self.unreadable.get(&pid) {
            Some(u) if u.exe == exe && (u.not_python || u.tries >= MAX_TRIES) => return true,
            Some(u) if u.exe == exe => u.tries,
            _ => 0,
        };
        match PythonTarget::attach(pid, &self.orders.options) {
            Ok(target) => {
                self.unreadable.remove(&pid);
                match self.sender.try_send(target) {
                    Ok(()) => {
                        self.followed.insert(pid, who);
                    }
                    // Not taken: looked at again at the next walk.
                    Err(TrySendError::Full(_)) => {}
                    Err(TrySendError::Disconnected(_)) => return false,
                }
            }
            Err(AttachError::NoSuchProcess(_)) => {}
            Err(e) => {
                let not_python = matches!(e, AttachError::NotPython { .. });
                self.unreadable.insert(
                    pid,
                    Unreadable {
                        who,
                        exe,
                        not_python,
                        tries: tries + 1,
                    },
                );
            }
        }
        true
    }
}
