//! The stack reader's experiment switches, as one value ([`ReaderTuning`]).
//!
//! They are set by whoever attaches (the `stackscope` binary fills them once from its
//! environment; tests set them per target) and passed down with the [`crate::TargetOptions`]:
//! nothing in this crate reads the environment for them.

/// Which stack reader a target is read with.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub enum ReaderChoice {
    /// Ours where the interpreter's version has one, stopping only the GIL's holders; py-spy's
    /// otherwise.
    #[default]
    Default,
    /// py-spy's reader, whatever the version.
    PySpy,
    /// Ours, stopping the whole process for each read (py-spy's way; not for a process whose
    /// leader thread exited, which cannot be stopped whole: that one gets the default).
    StopProcess,
    /// Ours, stopping only the GIL's holders (the default strategy, named).
    StopGilHolders,
}

/// When the sampling thread asks the scheduler for short time slices (the sampler's `slice`
/// module, docs/performance.md, "Short slices").
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub enum ShortSlices {
    /// Never.
    Never,
    /// From the start, all the time.
    Always,
    /// After a tick that woke a whole period late, for a while.
    #[default]
    WhenLosingTicks,
}

/// How the stack reader works, for measurements and comparisons: every field's default is
/// what stackscope does when nothing is asked for.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct ReaderTuning {
    /// Which reader reads the target ([`crate::PythonTarget::attach`]; `attach_with_reader`
    /// names its own). Default: [`ReaderChoice::Default`].
    pub reader: ReaderChoice,
    /// Keep and print the reader's counters (each reader's when it is dropped, the sampling
    /// thread's CPU time by phase when it ends), timing each `process_vm_readv`. Default: off
    /// (nothing is measured: each measurement costs a system call).
    pub stats: bool,
    /// When the sampling thread asks for short time slices. Default:
    /// [`ShortSlices::WhenLosingTicks`].
    pub short_slices: ShortSlices,
    /// A sleeping thread whose Python state did not change keeps its last OS state for a
    /// while instead of having its `/proc` stat file read every sample (our reader, when it
    /// does not stop the whole process). Default: on.
    pub idle_reuse: bool,
    /// Also read every reused OS state, and count the idle decisions a fresh reading would
    /// have changed ([`crate::PythonTarget::idle_audit`]; costs a `/proc` read per thread per
    /// sample). Default: off.
    pub idle_audit: bool,
    /// A still thread is read only for what proves it did not move, not copied whole.
    /// Default: on (off copies every thread's frames every sample, for comparisons).
    pub still_reads: bool,
    /// Each sleeping thread gets a context-switch ring (`perf_event_open`) whose look renews
    /// its reused state without a `schedstat` read. Default: on.
    pub switch_rings: bool,
    /// A thread that may have run while it was copied is kept, without the later copies that
    /// check it, when its stack is one that a sound read of it gave before (3.11+); a short
    /// call the thread was in when the read began is kept on top on the same word, and a
    /// thread whose such stacks no sound read gave is stopped now and then to prove them.
    /// Default: on (off reads the GIL's likely holder with its later copies every sample, and
    /// gives a call that returned meanwhile to its caller).
    pub proven_stacks: bool,
    /// A code object found unchanged at its address for 2 s has its identity read once every
    /// 200 ms (`CodeCache::SETTLED_AFTER`, `TRUST_FOR`), and at once when a frame's
    /// instruction lies outside it. Default: on (off reads every code object a stack uses,
    /// every sample).
    pub code_trust: bool,
    /// `--native`: a thread whose switch ring shows it has not run since its native stack was
    /// unwound keeps that stack and is not stopped again (`target`'s `native_kept`).
    /// Default: on (off stops and unwinds every Python thread every sample, as py-spy does).
    pub kept_native: bool,
    /// `--native`: stop and unwind every other sample's kept threads anyway, and count the
    /// kept stacks that differ from the fresh ones ([`crate::PythonTarget::idle_audit`]).
    /// Default: off.
    pub native_audit: bool,
}

impl ReaderTuning {
    /// What stackscope does when nothing is asked for.
    pub const DEFAULT: ReaderTuning = ReaderTuning {
        reader: ReaderChoice::Default,
        stats: false,
        short_slices: ShortSlices::WhenLosingTicks,
        idle_reuse: true,
        idle_audit: false,
        still_reads: true,
        switch_rings: true,
        proven_stacks: true,
        code_trust: true,
        kept_native: true,
        native_audit: false,
    };
}

impl Default for ReaderTuning {
    fn default() -> Self {
        ReaderTuning::DEFAULT
    }
}
