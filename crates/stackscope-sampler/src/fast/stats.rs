//! What the fast reader did, counted: for benchmarks and for telling why a target was slow to
//! read ([`crate::ReaderTuning::stats`], `STACKSCOPE_READER_STATS=1` to the binary, prints
//! it when a reader is dropped).

use std::fmt;

#[derive(Debug, Default, Clone)]
pub(crate) struct ReaderStats {
    pub samples: u64,
    /// Tries (a sample is one try, plus one per re-read of moving threads).
    pub attempts: u64,
    /// Threads read again because they moved during a read.
    pub rereads: u64,
    /// Threads stopped alone, for a second read: they held the GIL during the first, or
    /// their frames kept moving.
    pub thread_stops: u64,
    /// Threads that may have run during their read, kept as read (no blocking).
    pub unverified: u64,
    /// Stopped threads caught in the middle of a call, stopped again.
    pub midway: u64,
    /// Samples taken with the whole process stopped.
    pub process_stops: u64,
    /// Samples failed because a thread kept moving and stopping was not allowed.
    pub torn: u64,
    pub errors: u64,
    pub list_rebuilds: u64,
    pub syscalls: u64,
    /// The ranges (iovecs) those calls read.
    pub ranges: u64,
    pub bytes: u64,
    pub stat_reads: u64,
    /// Thread states taken from an earlier stat read (a sleeping thread whose Python state
    /// did not change).
    pub stat_reused: u64,
    /// Of those, states renewed past their window because the thread had not run (by its
    /// switch ring, or by a `schedstat` reading), those by a ring, and `schedstat` readings
    /// in all.
    pub stat_renewed: u64,
    pub ring_renewed: u64,
    pub sched_reads: u64,
    /// States told by switch rings instead of a stat reading, and (with
    /// [`crate::ReaderTuning::idle_audit`]) those a fresh reading contradicted.
    pub ring_states: u64,
    pub ring_disagreed: u64,
    /// With [`crate::ReaderTuning::idle_audit`]: idle decisions made, and how many differ from the
    /// decision a fresh stat read would have given.
    pub idle_decisions: u64,
    pub idle_disagreed: u64,
    /// Reads after the snapshot for frames outside the copies.
    pub late_rounds: u64,
    /// Still threads read only for what proves they did not move, found so ([`super::proof::still`]).
    pub unchanged: u64,
    /// Still threads taken as still on the GIL's word, nothing of them read
    /// ([`super::proof::quiet`]), and samples where that bet was lost (read again).
    pub quiet: u64,
    pub quiet_misses: u64,
    /// Time spent reading still threads again after lost bets.
    pub quiet_miss_ns: u64,
    /// Threads that may have run, kept on a stack a sound read gave
    /// ([`super::proof::vouch`]), and likely holders read without later copies that had to be
    /// read again with them.
    pub vouched: u64,
    pub vouch_misses: u64,
    /// Checked reads kept with the callee that returned during their later copies on top, and
    /// stops made to prove such stacks ([`super::proof::vouch::ProvingStops`]).
    pub returned_kept: u64,
    pub proving_stops: u64,
    /// Threads of lost bets shown still by their switch rings instead ([`super::proof::switches`]),
    /// and rings opened and refused.
    pub switch_proven: u64,
    pub rings_opened: u64,
    pub rings_refused: u64,
    pub code_hits: u64,
    pub code_misses: u64,
    pub code_replaced: u64,
    pub codes_cached: u64,
    pub name_lookups: u64,
    /// Time spent in reads, and in the part of it with a thread stopped alone.
    pub read_ns: u64,
    pub thread_stop_ns: u64,
    /// Thread CPU time inside `process_vm_readv` (with `STACKSCOPE_READER_STATS` only).
    pub syscall_ns: u64,
}

impl fmt::Display for ReaderStats {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let per = |n: u64| n as f64 / self.samples.max(1) as f64;
        write!(
            f,
            "{} samples, {:.2} memory reads and {:.2} stat reads per sample ({:.0} bytes in {:.1} ranges), \
             {:.2} stat readings reused ({:.2} renewed, {:.2} of them by switch rings; {:.2} schedstat reads), {:.2} states told by switch rings ({} audited wrong), {:.2} stacks found unchanged and {:.2} proven by the GIL per sample ({} bets lost, {:.1} us each, {:.2} threads a sample shown still by switch rings, {} rings, {} refused), {:.2} stacks a sample kept on a sound read's word ({} misses), {:.2} with a returned callee on top ({} proving stops), idle audit {} of {} decisions differ, \
             {} re-reads, {} threads stopped alone ({} caught mid-call), {} unverified, \
             {} process stops, {} torn, \
             {} errors, \
             {} list rebuilds, {} late rounds, code cache {} hits / {} misses / {} replaced \
             ({} cached), {} name lookups, {:.1} us per sample ({:.1} us stopping threads; \
             {:.1} us of thread CPU in process_vm_readv)",
            self.samples,
            per(self.syscalls),
            per(self.stat_reads),
            per(self.bytes),
            per(self.ranges),
            per(self.stat_reused),
            per(self.stat_renewed),
            per(self.ring_renewed),
            per(self.sched_reads),
            per(self.ring_states),
            self.ring_disagreed,
            per(self.unchanged),
            per(self.quiet),
            self.quiet_misses,
            self.quiet_miss_ns as f64 / self.quiet_misses.max(1) as f64 / 1e3,
            per(self.switch_proven),
            self.rings_opened,
            self.rings_refused,
            per(self.vouched),
            self.vouch_misses,
            per(self.returned_kept),
            self.proving_stops,
            self.idle_disagreed,
            self.idle_decisions,
            self.rereads,
            self.thread_stops,
            self.midway,
            self.unverified,
            self.process_stops,
            self.torn,
            self.errors,
            self.list_rebuilds,
            self.late_rounds,
            self.code_hits,
            self.code_misses,
            self.code_replaced,
            self.codes_cached,
            self.name_lookups,
            per(self.read_ns) / 1e3,
            per(self.thread_stop_ns) / 1e3,
            per(self.syscall_ns) / 1e3
        )
    }
}
