//! After a lost bet: the sleepers taken as still on the GIL's word, when the GIL shows that
//! some thread other than its holder ran, are proven where they were by their switch rings
//! ([`crate::fast::proof::switches`]) where they have one, and otherwise read for their still proofs
//! ([`crate::fast::proof::still`]), as one more system call of the sample.

use crate::fast::error::ReadError;
use crate::fast::proof::switches::OffCpu;
use crate::fast::read::attempt::Attempt;
use crate::fast::read::thread_model::Outcome;
use crate::fast::FastReader;

impl FastReader {
    /// After a lost bet: the threads taken as still on the GIL's word that may have run
    /// (`first.quiet_failed`, by position in `all`) get their outcomes and states in `first`.
    pub(in crate::fast) fn reread_lost_bet(
        &mut self,
        first: &mut Attempt,
        all: &[usize],
        process_stopped: bool,
    ) -> Result<(), ReadError> {
        let positions = std::mem::take(&mut first.quiet_failed);
        // Those off every CPU since a moment no later than a read that found their
        // stacks good cannot have run (`switches`): their stacks stand as of this
        // read. The list can have changed only where a thread that ran unlinked
        // itself, which changes its predecessor's link: such predecessors are read
        // for their thread states alone (one not bet on was read with this sample's
        // first read, and the list's head too). The others are read for their proofs,
        // and a moment off the CPU taken now, before that read, stands for those it
        // finds where they were.
        let proven: Vec<bool> = positions
            .iter()
            .map(|&p| self.off_since_proof(all[p]))
            .collect();
        let mut read_words: Vec<bool> = vec![false; all.len()];
        for (&p, &ok) in positions.iter().zip(&proven) {
            if !ok && p > 0 {
                read_words[p - 1] = true;
            }
        }
        let mut which = Vec::new();
        let mut marks: Vec<Option<(u64, OffCpu)>> = Vec::new();
        let mut reread: Vec<usize> = Vec::new();
        // Those whose rings show they did not run: their thread states alone are read.
        let mut words_only: Vec<usize> = Vec::new();
        for (&p, &ok) in positions.iter().zip(&proven) {
            let i = all[p];
            if ok {
                self.stats.switch_proven += 1;
                if !read_words[p] {
                    let k = &mut self.threads[i];
                    if let Some(proof) = k.proof.as_ref() {
                        first.outcomes[p] = Outcome::Done(proof.frames.clone());
                        k.proven_at = first.gil_after;
                        continue;
                    }
                }
                words_only.push(i);
                marks.push(self.threads[i].off_cpu);
            } else {
                marks.push(self.off_cpu_now(i));
            }
            which.push(i);
            reread.push(p);
        }
        let again = self.attempt_still(&which, &words_only, process_stopped)?;
        for (((&p, outcome), state), mark) in reread
            .iter()
            .zip(again.outcomes)
            .zip(again.states)
            .zip(marks)
        {
            self.threads[all[p]].off_cpu = if matches!(outcome, Outcome::Done(_)) {
                mark
            } else {
                None
            };
            first.outcomes[p] = outcome;
            first.states[p] = state;
        }
        Ok(())
    }

    /// Whether thread `i`'s switch ring shows it off every CPU since a moment no later than
    /// a read that found its proof good.
    fn off_since_proof(&mut self, i: usize) -> bool {
        let Some(k) = self.threads.get(i) else {
            return false;
        };
        let (Some((tid, then)), true) = (k.off_cpu, k.proof.is_some()) else {
            return false;
        };
        let native = k.ts.native_thread_id;
        self.tids.ours(native) == Some(tid) && self.activity.switches.still_off(tid, then)
    }

    /// Thread `i`'s moment off every CPU now, if its switch ring shows one.
    fn off_cpu_now(&mut self, i: usize) -> Option<(u64, OffCpu)> {
        let tid = self.tids.ours(self.threads.get(i)?.ts.native_thread_id)?;
        self.activity.switches.off_cpu(tid).map(|then| (tid, then))
    }
}
