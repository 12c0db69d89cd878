//! Which threads can have changed their stacks while we read them: those that held the GIL.
//!
//! A thread pushes and pops frames only while it runs Python, and it runs Python only while
//! it holds the GIL. The GIL's `last_holder` names the thread that has (or last had) it, and
//! its `switch_number` counts the times a thread other than the last holder took it. Read
//! before and after the copies, they bound who can have run: with no switch in between, only
//! the last holder; with one, the holders before and after; with more, threads we cannot
//! name. Every other thread was still, so its copy is a stack it had; the ones that may have
//! run are read again stopped.

use crate::fast::layout::{common, i32_at, usize_at, word};

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) struct GilWords {
    pub interval: u64,
    pub last_holder: usize,
    pub locked: i32,
    pub switch_number: u64,
}

impl GilWords {
    pub(crate) fn parse(bytes: &[u8]) -> Option<GilWords> {
        Some(GilWords {
            interval: word(bytes, common::GIL_INTERVAL)?,
            last_holder: usize_at(bytes, common::GIL_LAST_HOLDER)?,
            locked: i32_at(bytes, common::GIL_LOCKED)?,
            switch_number: word(bytes, common::GIL_SWITCH_NUMBER)?,
        })
    }

    /// Whether these look like a GIL at all (the switch interval is in microseconds, 5000 by
    /// default; `locked` is -1 before the GIL exists): a check that the layout table matches
    /// the interpreter before we rely on it.
    pub(crate) fn plausible(&self) -> bool {
        (1..=100_000_000).contains(&self.interval) && (-1..=1).contains(&self.locked)
    }
}

/// Who may have run Python between two readings of the GIL.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Ran {
    /// At most these threads (thread state addresses; 0 names none): one holder, or the two
    /// of one switch. Asked once per thread and sample, so it allocates nothing.
    Only([usize; 2]),
    /// Threads we cannot name (several switches, or the GIL could not be read).
    Anyone,
}

impl Ran {
    /// No thread ran (they were all stopped).
    pub(crate) const NONE: Ran = Ran::Only([0, 0]);

    /// From the GIL read before and after.
    pub(crate) fn between(before: Option<GilWords>, after: Option<GilWords>) -> Ran {
        let (Some(a), Some(b)) = (before, after) else {
            return Ran::Anyone;
        };
        match b.switch_number.wrapping_sub(a.switch_number) {
            0 if a.last_holder == b.last_holder => Ran::Only([a.last_holder, 0]),
            1 if a.last_holder != b.last_holder => Ran::Only([a.last_holder, b.last_holder]),
            // A holder changed without a switch counted, or a switch counted that left the
            // holder as it was (a switch always names a new one): the two words were read
            // while being written (`last_holder` is stored first, then `switch_number`). Or
            // many switches. Either way, assume the worst.
            _ => Ran::Anyone,
        }
    }

    pub(crate) fn may_have_run(&self, tstate: usize) -> bool {
        match self {
            Ran::Only(holders) => tstate != 0 && holders.contains(&tstate),
            Ran::Anyone => true,
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn gil(last_holder: usize, switch_number: u64) -> Option<GilWords> {
        Some(GilWords {
            interval: 5000,
            last_holder,
            locked: 1,
            switch_number,
        })
    }

    #[test]
    fn without_a_switch_only_the_holder_ran() {
        let ran = Ran::between(gil(0x10, 7), gil(0x10, 7));
        assert!(ran.may_have_run(0x10));
        assert!(!ran.may_have_run(0x20));
    }

    #[test]
    fn one_switch_names_both_holders() {
        let ran = Ran::between(gil(0x10, 7), gil(0x20, 8));
        assert!(ran.may_have_run(0x10) && ran.may_have_run(0x20));
        assert!(!ran.may_have_run(0x30));
    }

    #[test]
    fn more_switches_or_torn_words_suspect_everyone() {
        assert_eq!(Ran::between(gil(0x10, 7), gil(0x20, 9)), Ran::Anyone);
        assert_eq!(Ran::between(gil(0x10, 7), gil(0x20, 7)), Ran::Anyone);
        assert_eq!(Ran::between(None, gil(0x20, 7)), Ran::Anyone);
        // The old holder read before the new one was stored, the count read after.
        assert_eq!(Ran::between(gil(0x10, 7), gil(0x10, 8)), Ran::Anyone);
    }

    #[test]
    fn a_gil_is_recognised() {
        let mut bytes = vec![0u8; 32];
        bytes[0..8].copy_from_slice(&5000u64.to_le_bytes());
        bytes[8..16].copy_from_slice(&0x1234u64.to_le_bytes());
        bytes[16..20].copy_from_slice(&1i32.to_le_bytes());
        bytes[24..32].copy_from_slice(&3u64.to_le_bytes());
        let words = GilWords::parse(&bytes).expect("parse");
        assert!(words.plausible());
        assert_eq!(words.last_holder, 0x1234);
        assert!(!GilWords::parse(&[0u8; 32]).expect("parse").plausible());
    }
}
