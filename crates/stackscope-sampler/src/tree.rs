//! The set of processes one sampler reads: the target alone, or with `--subprocesses` the
//! target and every Python process below it, as they come and go.

use std::collections::HashMap;
use std::path::PathBuf;
use std::time::{Duration, Instant};

use stackscope_event::{ProcessEvent, ProcessEventKind, Timestamp};

use crate::error::AttachError;
use crate::procfs;
use crate::root::{OtherProcess, Root};
use crate::target::{PythonTarget, TargetOptions};

/// How often the tree is rescanned for new children: DataLoader workers and torchrun ranks live
/// for minutes to days, so a second's delay in noticing one costs nothing.
const RESCAN_INTERVAL: Duration = Duration::from_millis(500);

/// The most processes followed at once; a fork bomb must not make us attach without end.
const MAX_PROCESSES: usize = procfs::MAX_DESCENDANTS / 4;

pub struct ProcessSet {
    root: u32,
    /// Set when the root is not Python (a launcher): a process node without stacks, followed
    /// while it lives, looked at again when it execs.
    other_root: Option<OtherProcess>,
    follow_children: bool,
    options: TargetOptions,
    /// In attach order, the root first.
    targets: Vec<PythonTarget>,
    /// Children we could not attach to, with the executable they had when we looked: one that
    /// is not Python is tried again only once it execs something else; one that failed
    /// otherwise (an interpreter still starting) a few more times.
    unreadable: HashMap<u32, Unreadable>,
    next_scan: Instant,
}

impl ProcessSet {
    pub fn new(root: PythonTarget, follow_children: bool, options: TargetOptions) -> ProcessSet {
        ProcessSet::from_root(Root::from(root), follow_children, options)
    }

    /// A set rooted at any process; one that is not Python is followed only for its
    /// descendants (`follow_children` is then taken as set).
    pub fn from_root(root: Root, follow_children: bool, options: TargetOptions) -> ProcessSet {
        let pid = root.pid();
        let (targets, other_root, follow_children) = match root {
            Root::Python(target) => (vec![*target], None, follow_children),
            Root::Other(other) => (Vec::new(), Some(other), true),
        };
        ProcessSet {
            root: pid,
            other_root,
            follow_children,
            options,
            targets,
            unreadable: HashMap::new(),
            next_scan: Instant::now(),
        }
    }

    /// The event that announces a root that is not Python, at the start.
    pub fn other_root_event(&self, time: Timestamp) -> Option<ProcessEvent> {
        self.other_root.as_ref().map(|o| ProcessEvent {
            time,
            pid: o.pid,
            command_line: o.command_line.clone(),
            kind: ProcessEventKind::Attached,
            rank: stackscope_event::RankInfo::of_process(o.pid),
            how: None,
        })
    }

    /// The event that announces a target.
    pub fn attached_event(target: &PythonTarget, time: Timestamp) -> ProcessEvent {
        ProcessEvent {
            time,
            pid: target.pid(),
            command_line: target.command_line().to_owned(),
            kind: ProcessEventKind::Attached,
            rank: stackscope_event::RankInfo::of_process(target.pid()),
            how: None,
        }
    }

    pub fn targets_mut(&mut self) -> &mut [PythonTarget] {
        &mut self.targets
    }

    pub fn targets(&self) -> &[PythonTarget] {
        &self.targets
    }

    /// Whether the process the user named is still among the targets.
    pub fn has_root(&self) -> bool {
        self.targets.iter().any(|t| t.pid() == self.root)
            || (self.other_root.is_some() && procfs::is_alive(self.root))
    }

    /// Drops a target that is gone; returns the event to announce it.
    pub fn remove(&mut self, pid: u32, time: Timestamp) -> Option<ProcessEvent> {
        let at = self.targets.iter().position(|t| t.pid() == pid)?;
        let target = self.targets.remove(at);
        Some(ProcessEvent {
            time,
            pid,
            command_line: target.command_line().to_owned(),
            kind: ProcessEventKind::Exited,
            rank: stackscope_event::RankInfo::default(),
            how: None,
        })
    }

    /// When it is time, looks for Python processes below the root that are not followed yet
    /// and attaches to them. Returns the events for those attached.
    pub fn rescan(&mut self, time: Timestamp) -> Vec<ProcessEvent> {
        if !self.follow_children || Instant::now() < self.next_scan {
            return Vec::new();
        }
        self.next_scan = Instant::now() + RESCAN_INTERVAL;
        let mut descendants = procfs::descendants(self.root);
        // A root that is not Python may yet exec Python (`exec python3 job.py` in a script).
        if self.other_root.is_some() {
            descendants.insert(0, self.root);
        }
        self.unreadable.retain(|pid, _| descendants.contains(pid));
        let mut events = Vec::new();
        for pid in descendants {
            if self.targets.len() >= MAX_PROCESSES {
                break;
            }
            if self.targets.iter().any(|t| t.pid() == pid) {
                continue;
            }
            let exe = procfs::exe(pid).ok();
            let tries = match self.unreadable.get(&pid) {
                Some(u) if u.exe == exe && (u.not_python || u.tries >= MAX_TRIES) => continue,
                Some(u) if u.exe == exe => u.tries,
                _ => 0,
            };
            match PythonTarget::attach(pid, &self.options) {
                Ok(target) => {
                    self.unreadable.remove(&pid);
                    events.push(Self::attached_event(&target, time));
                    self.targets.push(target);
                }
                Err(AttachError::NoSuchProcess(_)) => {}
                Err(e) => {
                    let not_python = matches!(e, AttachError::NotPython { .. });
                    self.unreadable.insert(
                        pid,
                        Unreadable {
                            exe,
                            not_python,
                            tries: tries + 1,
                        },
                    );
                }
            }
        }
        events
    }
}

/// Attempts at a child that looks like Python but cannot be read yet.
const MAX_TRIES: u32 = 10;

struct Unreadable {
    exe: Option<PathBuf>,
    not_python: bool,
    tries: u32,
}
