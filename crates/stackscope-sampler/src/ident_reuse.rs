//! Thread names that stay true when the interpreter reuses thread idents, and the main
//! thread's name before `threading` gives it one.
//!
//! Python hands a finished thread's ident (`threading.get_ident()`) to the next thread it
//! starts, and py-spy caches names by that ident, so a target that starts short threads all the
//! time would have each new thread reported under an old thread's name. The OS thread id is not
//! reused that quickly: an ident seen with a new OS thread id is a new thread, whose name must
//! be looked up again.

use std::sync::Arc;

use stackscope_event::ThreadInfo;

use crate::caps::CapHits;
// Looked up for every thread at every read: hashed by a multiply, not SipHash.
use crate::fast::ByTid as ByIdent;

/// The name `threading` gives Python's main thread.
pub const MAIN_THREAD_NAME: &str = "MainThread";

/// Names Python's main thread `MainThread` when nothing named it: names are read from
/// `threading._active`, which does not exist until something imports `threading`. Whether it
/// is imported at startup depends on the installation, not on the job: a base interpreter whose
/// site-packages holds a `.pth` that imports it (setuptools' `distutils-precedence.pth`) names
/// the main thread from the start, the same interpreter run through a venv's `bin/python` (no
/// such `.pth`) does not. The main thread is the one Python starts on, the process's first OS
/// thread (its id is the pid), and `threading` names it `MainThread` whenever it is imported.
/// Threads started with `_thread` alone stay unnamed, as `threading` does not know them.
pub fn name_the_main_thread<'a>(threads: impl IntoIterator<Item = &'a mut ThreadInfo>, pid: u32) {
    for thread in threads {
        if thread.name.is_none() && thread.os_thread_id == Some(u64::from(pid)) {
            thread.name = Some(Arc::from(MAIN_THREAD_NAME));
        }
    }
}

/// Idents kept at most. The idents of threads that ended are released at each read
/// ([`IdentOwners::release`]), so this is only a guard against a thread list read wrong (py-spy
/// bounds the list at 4096 threads).
const MAX_TRACKED: usize = 65_536;

/// Which OS thread each Python ident belonged to when last seen.
#[derive(Default)]
pub struct IdentOwners {
    /// The OS thread each Python ident belonged to when last seen.
    owner: ByIdent<u64>,
    caps: CapHits,
}

impl IdentOwners {
    /// Clears the name of every thread whose ident now belongs to another OS thread than
    /// before (the cached name was its predecessor's), and returns those idents so the
    /// caller can drop them from its name cache.
    pub fn check<'a>(&mut self, threads: impl IntoIterator<Item = &'a mut ThreadInfo>) -> Vec<u64> {
        let mut reused = Vec::new();
        if self.owner.len() > MAX_TRACKED {
            self.caps.hit(self.owner.len());
            self.owner.clear();
        }
        for thread in threads {
            let Some(os_thread) = thread.os_thread_id else {
                continue;
            };
            let ident = thread.python_thread_id;
            match self.owner.insert(ident, os_thread) {
                Some(previous) if previous != os_thread => {
                    thread.name = None;
                    reused.push(ident);
                }
                _ => {}
            }
        }
        reused
    }

    /// Forgets the idents of threads that ended: those not in `live` (sorted), the idents of
    /// the read just made. An ident a new thread takes later is then new to us, and its name
    /// is looked up afresh (the name caches release the same idents at the same read).
    pub fn release(&mut self, live: &[u64]) {
        self.owner
            .retain(|ident, _| live.binary_search(ident).is_ok());
    }

    /// Idents tracked now.
    #[cfg(test)]
    pub fn len(&self) -> usize {
        self.owner.len()
    }

    /// Times the guard emptied the table, handed on once.
    pub(crate) fn take_caps(&mut self) -> CapHits {
        self.caps.take()
    }
}

/// Each live thread's name, shared: one allocation per thread rather than one per sample, for
/// the names py-spy's reader hands over as fresh strings. Keyed by ident and released with the
/// ident at the read that finds its thread gone, so a target that starts a thread per task
/// (`Thread-123456 (worker)`) does not leave a name behind per thread it ever had.
#[derive(Default)]
pub struct NamesByIdent {
    names: ByIdent<Arc<str>>,
}

impl NamesByIdent {
    /// The shared name of thread `ident`, now called `name`.
    pub fn name(&mut self, ident: u64, name: &str) -> Arc<str> {
        match self.names.get(&ident) {
            Some(known) if **known == *name => known.clone(),
            _ => {
                let shared: Arc<str> = Arc::from(name);
                self.names.insert(ident, shared.clone());
                shared
            }
        }
    }

    /// Forgets the names of threads not in `live` (sorted).
    pub fn release(&mut self, live: &[u64]) {
        self.names
            .retain(|ident, _| live.binary_search(ident).is_ok());
    }

    #[cfg(test)]
    pub fn len(&self) -> usize {
        self.names.len()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn stack(ident: u64, os: u64, name: &str) -> ThreadInfo {
        ThreadInfo {
            os_thread_id: Some(os),
            python_thread_id: ident,
            name: Some(name.into()),
            active: true,
            owns_gil: false,
        }
    }

    #[test]
    fn the_unnamed_leader_is_the_main_thread() {
        let mut stacks = [
            stack(1, 500, "x"),
            stack(2, 501, "y"),
            stack(3, 502, "worker"),
        ];
        stacks[0].name = None;
        stacks[1].name = None;
        name_the_main_thread(&mut stacks, 500);
        assert_eq!(stacks[0].name.as_deref(), Some(MAIN_THREAD_NAME));
        // A thread `_thread` started: no name, as `threading` gives it none.
        assert_eq!(stacks[1].name, None);
        assert_eq!(stacks[2].name.as_deref(), Some("worker"));
        // A main thread renamed through `threading` keeps its name.
        let mut renamed = [stack(1, 500, "trainer")];
        name_the_main_thread(&mut renamed, 500);
        assert_eq!(renamed[0].name.as_deref(), Some("trainer"));
    }

    #[test]
    fn a_reused_ident_loses_its_predecessors_name() {
        let mut names = IdentOwners::default();
        let mut first = [stack(0x7f00, 101, "churn-1")];
        assert!(names.check(&mut first).is_empty());
        assert_eq!(first[0].name.as_deref(), Some("churn-1"));
        // Same ident, another OS thread: the cached name "churn-1" is stale.
        let mut second = [stack(0x7f00, 102, "churn-1")];
        assert_eq!(names.check(&mut second), vec![0x7f00]);
        assert_eq!(second[0].name, None);
        // Seen again with the same OS thread: its (freshly looked up) name stands.
        let mut third = [stack(0x7f00, 102, "churn-2")];
        assert!(names.check(&mut third).is_empty());
        assert_eq!(third[0].name.as_deref(), Some("churn-2"));
    }

    /// A thread that is not in a read's thread list ended: its ident and its name are let go,
    /// those of the threads still there are kept.
    #[test]
    fn the_ident_and_name_of_a_thread_that_ended_are_released() {
        let mut owners = IdentOwners::default();
        let mut names = NamesByIdent::default();
        for n in 0..1000u64 {
            let ident = 0x7f00_0000 + n * 0x1000;
            let mut read = [stack(1, 100, "main"), stack(ident, 1000 + n, "churn")];
            owners.check(&mut read);
            names.name(1, "main");
            let a = names.name(ident, &format!("Thread-{n} (work)"));
            assert!(Arc::ptr_eq(
                &a,
                &names.name(ident, &format!("Thread-{n} (work)"))
            ));
            // The next read finds the short thread gone.
            let live = [1];
            owners.release(&live);
            names.release(&live);
        }
        assert_eq!((owners.len(), names.len()), (1, 1));
        let mut read = [stack(1, 100, "main")];
        assert!(
            owners.check(&mut read).is_empty(),
            "the main thread is known"
        );
        assert_eq!(owners.take_caps(), CapHits::default());
    }
}
