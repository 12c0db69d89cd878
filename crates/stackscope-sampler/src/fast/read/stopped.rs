//! Reads for a caller that stops threads itself (`--native`, the deep read): each thread's OS
//! state taken before the stop, the threads to stop, the read of them stopped, and what the
//! switch rings say of a thread the caller would rather not stop (has it run since a moment?).

use std::time::Instant;

use crate::fast::error::ReadError;
use crate::fast::proof::switches::OffCpu;
use crate::fast::read::reader::{FastReader, StatesBefore, ThreadRead};

impl FastReader {
    /// For a caller about to stop the whole process: each thread's OS state, read now, since
    /// during the stop every thread reads as stopped. [`FastReader::read_stopped`] takes it.
    pub(crate) fn states_before_stop(&mut self) -> StatesBefore {
        // The GIL's last holder too: a read of a stopped process brackets no GIL, so the
        // holder it would be judged by is the one the reader expected, maybe long ago.
        // Taken before the read begins: its states are timed by a clock of their own.
        self.read_at = Instant::now();
        StatesBefore(self.states_before_read(false))
    }

    /// The OS ids (ours) of the threads the interpreter lists: the ones whose stacks a read
    /// of a stopped process needs stopped.
    pub(crate) fn os_thread_ids(&mut self) -> Vec<u64> {
        let natives: Vec<u64> = self.threads.iter().map(|k| k.ts.native_thread_id).collect();
        natives
            .into_iter()
            .filter_map(|native| self.tids.ours(native))
            .collect()
    }

    /// A read of the process its caller stopped after [`FastReader::states_before_stop`]: no
    /// thread can run, so none is copied more than once, and each is judged busy or idle by
    /// its state before the stop. A thread the caller left running must be shown, by
    /// [`FastReader::still_off`] after the read, not to have run during it.
    pub(crate) fn read_stopped(
        &mut self,
        states: StatesBefore,
    ) -> Result<Vec<ThreadRead>, ReadError> {
        let started = Instant::now();
        self.read_at = started;
        let out = self.read_inner(false, Some(states.0));
        self.stats.read_ns += started.elapsed().as_nanos() as u64;
        out
    }

    /// If thread `tid` (our id) is off every CPU now, as its switch ring tells, that moment
    /// (None: on a CPU, or no ring: switch rings off, or refused).
    pub(crate) fn off_cpu(&mut self, tid: u64) -> Option<OffCpu> {
        self.activity.switches.off_cpu(tid)
    }

    /// Whether thread `tid` has stayed off every CPU since `then`: it ran no instruction in
    /// between.
    pub(crate) fn still_off(&self, tid: u64, then: OffCpu) -> bool {
        self.activity.switches.still_off(tid, then)
    }
}
