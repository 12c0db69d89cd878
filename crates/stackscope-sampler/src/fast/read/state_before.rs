//! One thread before a sample's read: its OS state, how that state was had (read now, an
//! earlier reading reused, or deferred until after the read), and where its Python state was.
//! `os_states.rs` makes them before the read and judges by them after it.

use crate::procfs::ProcState;

/// One thread before a sample's read: its OS state and how it was had, and where its Python
/// state was.
#[derive(Clone)]
pub(in crate::fast) struct Before {
    /// Its OS thread id, as the interpreter records it.
    pub(in crate::fast) tid: u64,
    /// Its scheduler state (None: not read yet, or unreadable).
    pub(in crate::fast) state: Option<ProcState>,
    pub(in crate::fast) how: StateFrom,
    /// Its thread state, and its Python state's signature
    /// ([`Known::sig`](crate::fast::read::thread_model::Known::sig)).
    pub(in crate::fast) tstate: usize,
    pub(in crate::fast) sig: u64,
}

/// How a thread's OS state before the read was had.
#[derive(Debug, Clone, Copy)]
pub(in crate::fast) enum StateFrom {
    /// Not read: the GIL's expected holder, read after the read if it turns out not to hold
    /// the GIL then.
    Deferred,
    /// An earlier reading, reused (with, for the idle audit, a reading made now).
    Reused { audited: Option<ProcState> },
    /// Read now.
    Read,
}

impl StateFrom {
    pub(in crate::fast) fn is_reused(&self) -> bool {
        matches!(self, StateFrom::Reused { .. })
    }
}
