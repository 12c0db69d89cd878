//! The set of processes one sampler reads: the target alone, or with `--subprocesses` the
//! target and every Python process below it, as they come and go. New ones are found and
//! attached to by the finder, on a thread of its own (`finder.rs`).

mod cue;
mod finder;

use stackscope_event::{ProcessEvent, ProcessEventKind, Timestamp};

use crate::procfs;
use crate::root::{OtherProcess, Root};
use crate::target::{PythonTarget, TargetOptions};
use finder::{FindOrders, Finder};

pub struct ProcessSet {
    root: u32,
    /// Set when the root is not Python (a launcher): a process node without stacks, followed
    /// while it lives, looked at again when it execs.
    other_root: Option<OtherProcess>,
    /// In attach order, the root first.
    targets: Vec<PythonTarget>,
    /// Walks the tree for new processes when children are followed.
    finder: Option<Finder>,
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
        let finder = follow_children
            .then(|| {
                Finder::start(FindOrders {
                    root: pid,
                    root_may_exec: other_root.is_some(),
                    options,
                    followed: targets.iter().map(PythonTarget::pid).collect(),
                })
            })
            .flatten();
        ProcessSet {
            root: pid,
            other_root,
            targets,
            finder,
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
        if let Some(finder) = &self.finder {
            finder.release(pid);
        }
        Some(ProcessEvent {
            time,
            pid,
            command_line: target.command_line().to_owned(),
            kind: ProcessEventKind::Exited,
            rank: stackscope_event::RankInfo::default(),
            how: None,
        })
    }

    /// Takes the processes the finder attached to since the last call (it walks the tree on a
    /// thread of its own: an attach never delays a sample). Returns the events for them.
    pub fn rescan(&mut self, time: Timestamp) -> Vec<ProcessEvent> {
        let Some(finder) = &self.finder else {
            return Vec::new();
        };
        let mut events = Vec::new();
        for target in finder.take_found() {
            if self.targets.iter().any(|t| t.pid() == target.pid()) {
                continue;
            }
            events.push(Self::attached_event(&target, time));
            self.targets.push(target);
        }
        events
    }
}
