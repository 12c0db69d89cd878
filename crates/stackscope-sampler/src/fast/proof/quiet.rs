//! A still thread proven where it was by the GIL alone, with no read of its own.
//!
//! A thread pushes and pops frames only while it holds the GIL, and it cannot take the GIL
//! without the GIL's `switch_number` counting it, unless it was already the last holder
//! ([`crate::fast::proof::gil`]). So when the GIL's words read now show no switch since the moment a
//! thread's stack was last known good ([`Known::proven_at`]: the GIL words read at the end of
//! that read), and the thread is not the last holder, that thread has not run Python since:
//! its stack is the one it had, with nothing of it read. In a training process whose one busy
//! thread keeps the GIL while the others sleep (a pool's idle workers, a watchdog), a sample
//! then reads the GIL, the list head and the busy thread, however many threads sleep.
//!
//! The bet is made before the read: a still thread with a proof is planned with no ranges,
//! and the sample's read shows whether the bet held. When a switch happened meanwhile (some
//! thread woke), the read is made again with the proofs of [`crate::fast::proof::still`], one more system
//! call, and the bet is not made for the next [`backoff`] samples: none after a first loss,
//! then 1, 3, 7 ... with each loss in a row up to [`MAX_BACKOFF`], so that a process whose
//! threads wake all the time pays that extra call on one sample in 64, and one whose threads
//! wake now and then loses one sample's bet per wake-up.
//!
//! The thread list: a thread that starts is linked at the list's head, which every sample
//! reads; a thread that ends unlinks itself holding the GIL, which it had to take (a switch).

use crate::fast::proof::gil::{GilWords, Ran};
use crate::fast::read::thread_model::Known;

/// The most samples without the bet after lost ones.
pub(crate) const MAX_BACKOFF: u32 = 63;

/// Samples without the bet after `losses` lost in a row: none after one (a thread woke once,
/// the next sample bets again), then 1, 3, 7 ... up to [`MAX_BACKOFF`].
pub(crate) fn backoff(losses: u32) -> u32 {
    1u32.checked_shl(losses.saturating_sub(1))
        .map_or(MAX_BACKOFF, |n| n - 1)
        .min(MAX_BACKOFF)
}

/// Whether `k` may be planned with no reads: a still thread (`still`, this sample's
/// [`crate::fast::read::thread_model::StillThreads`]) with a stack to stand for it, known good as of a
/// GIL reading.
pub(crate) fn possible(k: &Known, still: bool) -> bool {
    still && k.proof.is_some() && k.proven_at.is_some()
}

/// Whether the GIL read at the end of this sample's read (`now`) proves that `k` did not run
/// since its stack was last known good.
pub(crate) fn holds(k: &Known, now: Option<GilWords>) -> bool {
    now.is_some() && !Ran::between(k.proven_at, now).may_have_run(k.tstate)
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::fast::memory::snapshot::TsWords;

    fn gil(last_holder: usize, switch_number: u64) -> Option<GilWords> {
        Some(GilWords {
            interval: 5000,
            last_holder,
            locked: 1,
            switch_number,
        })
    }

    fn sleeper(tstate: usize, proven_at: Option<GilWords>) -> Known {
        Known {
            tstate,
            ts: TsWords::default(),
            extra: Vec::new(),
            window_floor: 0,
            codes: Vec::new(),
            entries: Vec::new(),
            sig: 1,
            proof: None,
            proven_at,
            recent: Default::default(),
            off_cpu: None,
            vouch: Default::default(),
            proving: Default::default(),
            walk_spare: Default::default(),
        }
    }

    #[test]
    fn no_switch_since_proves_a_sleeper_still_but_not_the_holder() {
        let k = sleeper(0x20, gil(0x10, 7));
        assert!(holds(&k, gil(0x10, 7)));
        // The busy thread itself may have run: never proven this way.
        let holder = sleeper(0x10, gil(0x10, 7));
        assert!(!holds(&holder, gil(0x10, 7)));
    }

    #[test]
    fn any_switch_or_an_unread_gil_loses_the_bet() {
        let k = sleeper(0x20, gil(0x10, 7));
        // The sleeper woke and took the GIL: one switch, and it is the holder now.
        assert!(!holds(&k, gil(0x20, 8)));
        // It took the GIL and gave it back: two switches, holder unchanged.
        assert!(!holds(&k, gil(0x10, 9)));
        assert!(!holds(&k, None));
        assert!(!holds(&sleeper(0x20, None), gil(0x10, 7)));
    }

    #[test]
    fn lost_bets_in_a_row_back_off_doubling_to_a_bound() {
        let waits: Vec<u32> = (1..=9).map(backoff).collect();
        assert_eq!(waits, [0, 1, 3, 7, 15, 31, 63, 63, 63]);
        assert_eq!(backoff(1000), MAX_BACKOFF);
    }

    #[test]
    fn one_switch_between_two_others_still_proves_a_third() {
        // The GIL went from 0x10 to 0x30: only those two can have run.
        let k = sleeper(0x20, gil(0x10, 7));
        assert!(holds(&k, gil(0x30, 8)));
    }
}
