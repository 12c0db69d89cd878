//! Attaching to a Python process: finding its interpreter, checking its version, and choosing
//! the reader of its stacks (ours where it reads the version and a first read agrees with
//! py-spy's on the threads; py-spy's otherwise).

use std::time::{Duration, Instant};

use py_spy::config::{LineNo, LockingStrategy};
use py_spy::{Config, PythonSpy};
use stackscope_native::NativeUnwinder;

use super::native_kept::NativeKept;

use super::{
    check_supported_version, PythonTarget, StringCache, TargetOptions, PY_SPY_NEWEST_MINOR,
};
use crate::error::{AttachError, SampleFailure};
use crate::fast::{FastReader, Misfits, Strategy, Unread};
use crate::ident_reuse::{IdentOwners, NamesByIdent};
use crate::leader;
use crate::namespace::TidMap;
use crate::origin::Origins;
use crate::procfs;
use crate::tuning::{ReaderChoice, ReaderTuning};

impl PythonTarget {
    /// Attaches to `pid`: finds its interpreter and checks that its version is supported.
    /// The stack reader is the one `options.tuning.reader` names (the default one unless a
    /// benchmark asks otherwise).
    pub fn attach(pid: u32, options: &TargetOptions) -> Result<PythonTarget, AttachError> {
        PythonTarget::attach_with_reader(pid, options, options.tuning.reader)
    }

    /// [`attach`](PythonTarget::attach) with the stack reader chosen by the caller, whatever
    /// `options.tuning.reader` says: tests compare the readers within one process.
    pub fn attach_with_reader(
        pid: u32,
        options: &TargetOptions,
        reader: ReaderChoice,
    ) -> Result<PythonTarget, AttachError> {
        if !procfs::is_alive(pid) {
            return Err(AttachError::NoSuchProcess(pid));
        }
        let read_pid = leader::reader_pid(pid);
        // ptrace cannot stop a zombie leader: such a process is stopped thread by thread.
        let leader_exited = read_pid != pid;
        if let Err(e) = procfs::maps(read_pid) {
            if e.kind() == std::io::ErrorKind::PermissionDenied {
                return Err(AttachError::permission(pid));
            }
        }
        let config = spy_config(options, leader_exited);
        let mut spy = open_interpreter(read_pid, &config).map_err(|e| e.for_pid(pid))?;
        check_supported_version(pid, spy.version.major, spy.version.minor)?;
        let version = spy.version.to_string();
        let origins = Origins::of_process(read_pid, spy.version.major, spy.version.minor);
        let (fast, fast_retry) =
            choose_reader(pid, read_pid, &mut spy, options, reader, leader_exited)?;
        let command_line = procfs::command_line(read_pid).unwrap_or_default();
        let native = if options.native {
            Some(
                NativeUnwinder::new(read_pid).map_err(|e| AttachError::Other {
                    pid,
                    message: format!("cannot read its native modules: {e}"),
                })?,
            )
        } else {
            None
        };
        Ok(PythonTarget {
            pid,
            read_pid,
            spy,
            version,
            command_line,
            exe: procfs::exe(read_pid).ok(),
            keep_raw: options.locals,
            locals: options.locals,
            blocking: options.blocking,
            tuning: options.tuning,
            native,
            names: IdentOwners::default(),
            live_idents: Vec::new(),
            spare_idents: Vec::new(),
            thread_names: NamesByIdent::default(),
            strings: StringCache {
                origins,
                ..StringCache::default()
            },
            fast,
            fast_retry,
            misfits: Misfits::default(),
            os_tids: None,
            tids: TidMap::new(pid),
            ns_pid: crate::namespace::own_pid(pid),
            kept: NativeKept::new(&options.tuning),
        })
    }

    /// Attaches to a process that is still starting up (just spawned by `record`): its
    /// interpreter may not be initialised yet, so retry until `timeout`. A process that is
    /// definitely not Python fails only once the timeout has passed, since a launcher (a shell
    /// script, say) may yet exec Python.
    pub fn attach_when_ready(
        pid: u32,
        options: &TargetOptions,
        timeout: Duration,
    ) -> Result<PythonTarget, AttachError> {
        let deadline = Instant::now() + timeout;
        loop {
            match PythonTarget::attach(pid, options) {
                Ok(mut target) => match target.read_stacks() {
                    Ok(_) => return Ok(target),
                    Err(SampleFailure::ProcessGone(_)) => {
                        return Err(AttachError::NoSuchProcess(pid))
                    }
                    Err(e) if Instant::now() >= deadline => {
                        return Err(AttachError::Other {
                            pid,
                            message: e.to_string(),
                        })
                    }
                    Err(_) => {}
                },
                Err(
                    e @ (AttachError::NoSuchProcess(_)
                    | AttachError::PermissionDenied { .. }
                    | AttachError::SeccompBlocked { .. }),
                ) => return Err(e),
                Err(e) if Instant::now() >= deadline => return Err(e),
                Err(_) => {}
            }
            std::thread::sleep(Duration::from_millis(5));
        }
    }
}

/// py-spy's configuration for a target: it stops the process around its reads unless asked
/// not to, or native frames are read (then we stop it ourselves, around both reads), or the
/// leader exited (ptrace cannot stop a zombie leader).
fn spy_config(options: &TargetOptions, leader_exited: bool) -> Config {
    Config {
        blocking: if options.blocking && !options.native && !leader_exited {
            LockingStrategy::Lock
        } else {
            LockingStrategy::NonBlocking
        },
        dump_locals: u64::from(options.locals),
        lineno: LineNo::LastInstruction,
        collect_thread_names: true,
        ..Config::default()
    }
}

/// Our reader for the target, or None for py-spy's: ours wherever it reads the version
/// (with locals or native frames, where the interpreter describes them: 3.13+). A version
/// no reader reads is refused with one line; one whose `_Py_DebugOffsets` ours does not know
/// gets one notice where py-spy's takes over. A first read of ours that failed in a way that
/// comes and goes (a process caught starting) is tried again later ([`FastRetry`]).
fn choose_reader(
    pid: u32,
    read_pid: u32,
    spy: &mut PythonSpy,
    options: &TargetOptions,
    reader: ReaderChoice,
    leader_exited: bool,
) -> Result<(Option<FastReader>, Option<FastRetry>), AttachError> {
    let version = spy.version.to_string();
    let py_spy_reads = spy.version.minor <= PY_SPY_NEWEST_MINOR;
    match fast_reader_for(read_pid, spy, options, reader, leader_exited) {
        Ok(fast) => Ok((Some(fast), None)),
        Err(NoFast::Transient(_)) if py_spy_reads => Ok((None, Some(FastRetry::first()))),
        Err(why) if py_spy_reads => {
            if let NoFast::Refused(why) = why {
                crate::fast::notice_once(&format!(
                    "stackscope: Python {version}: {why}; its stacks are read by py-spy's reader"
                ));
            }
            Ok((None, None))
        }
        Err(NoFast::Refused(why) | NoFast::Quiet(why) | NoFast::Transient(why)) => {
            Err(AttachError::Other {
                pid,
                message: format!(
                    "Python {version}: {why}, and py-spy's reader does not read this version"
                ),
            })
        }
    }
}

/// Our reader, where it reads what `options` ask for: native frames are merged by the
/// sample's own walk from 3.11; locals need the deep read (3.13+).
fn fast_reader_for(
    read_pid: u32,
    spy: &mut PythonSpy,
    options: &TargetOptions,
    reader: ReaderChoice,
    leader_exited: bool,
) -> Result<FastReader, NoFast> {
    let fast = open_fast_reader(
        read_pid,
        spy,
        options.blocking,
        leader_exited,
        reader,
        &options.tuning,
    )?;
    if !fast.reads_deep() && (options.locals || (options.native && !fast.knows_entries())) {
        return Err(NoFast::Quiet(
            "its local variables and native frames are read by py-spy's reader".into(),
        ));
    }
    Ok(fast)
}

/// When our reader is tried again for a target that py-spy's reads because our first read
/// failed in a way that comes and goes: a process caught while its interpreter starts, or
/// while threads start as we look. Without it such a target would keep the slower reader for
/// as long as it is watched, days for a training job.
#[derive(Debug, Clone, Copy)]
pub(super) struct FastRetry {
    at: Instant,
    tries: u32,
}

impl FastRetry {
    /// Tries after the first, each after twice the wait of the one before: the last about
    /// 25 s after attaching.
    const TRIES: u32 = 8;
    const FIRST_WAIT: Duration = Duration::from_millis(100);

    pub(super) fn first() -> FastRetry {
        FastRetry {
            at: Instant::now() + FastRetry::FIRST_WAIT,
            tries: 1,
        }
    }

    /// A try due now.
    #[cfg(test)]
    pub(super) fn due_now() -> FastRetry {
        FastRetry {
            at: Instant::now(),
            tries: 1,
        }
    }

    fn due(&self) -> bool {
        Instant::now() >= self.at
    }

    /// The try after this one, or None when this was the last.
    fn next(self) -> Option<FastRetry> {
        (self.tries < FastRetry::TRIES).then(|| FastRetry {
            at: Instant::now() + FastRetry::FIRST_WAIT * (1 << self.tries),
            tries: self.tries + 1,
        })
    }
}

impl PythonTarget {
    /// Opens our reader for a target py-spy's reads, when a try is due ([`FastRetry`]).
    pub(super) fn retry_fast_reader(&mut self) {
        let Some(retry) = self.fast_retry else {
            return;
        };
        if self.fast.is_some() || !retry.due() {
            return;
        }
        let options = self.options();
        let leader_exited = self.leader_exited();
        let reader = self.tuning.reader;
        match fast_reader_for(
            self.read_pid,
            &mut self.spy,
            &options,
            reader,
            leader_exited,
        ) {
            Ok(fast) => {
                self.fast = Some(fast);
                self.fast_retry = None;
            }
            Err(NoFast::Transient(_)) => self.fast_retry = retry.next(),
            Err(_) => self.fast_retry = None,
        }
    }
}

/// Our own reader for this interpreter, if its version has one and a first read agrees with
/// py-spy's on which threads there are (a build whose layout differs from the tables, say a
/// debug build, fails that and keeps py-spy's reader), unless `reader` asks for py-spy's. A
/// version py-spy does not read is checked by a first read alone. Err: why there is none.
fn open_fast_reader(
    pid: u32,
    spy: &mut PythonSpy,
    blocking: bool,
    leader_exited: bool,
    reader: ReaderChoice,
    tuning: &ReaderTuning,
) -> Result<FastReader, NoFast> {
    let strategy = match reader {
        ReaderChoice::PySpy => {
            return Err(NoFast::Quiet(
                "STACKSCOPE_READER=py-spy asks for py-spy's reader".into(),
            ))
        }
        // A process whose leader exited cannot be stopped whole.
        ReaderChoice::StopProcess if !leader_exited => Strategy::StopProcess,
        ReaderChoice::StopGilHolders => Strategy::StopGilHolders,
        _ => Strategy::DEFAULT,
    };
    let mut fast = match FastReader::new(pid, spy, strategy, tuning) {
        Ok(fast) => fast,
        Err(Unread::Refused(why)) => return Err(NoFast::Refused(why)),
        Err(Unread::NoLayout) => return Err(NoFast::Quiet("no layout for it".into())),
        Err(Unread::Failed(e)) => {
            return Err(NoFast::Transient(format!(
                "stackscope's reader failed: {e}"
            )))
        }
    };
    let py_spy_reads = spy.version.minor <= PY_SPY_NEWEST_MINOR;
    // Threads that come and go can make two reads disagree: a few more tries.
    for _ in 0..6 {
        let Ok(ours) = fast.read(blocking) else {
            continue;
        };
        if !py_spy_reads {
            return Ok(fast);
        }
        let Ok(theirs) = spy.get_stack_traces() else {
            continue;
        };
        let a: Vec<u64> = ours.iter().map(|t| t.thread_id).collect();
        let b: Vec<u64> = theirs.iter().map(|t| t.thread_id).collect();
        if same_threads(&a, &b) {
            return Ok(fast);
        }
    }
    Err(NoFast::Transient(
        "stackscope's reader did not read the threads py-spy's did".into(),
    ))
}

/// Whether two reads of a process's thread list, ours and py-spy's a moment apart, name the
/// same threads, but for those that started or ended between them: a server that starts a
/// thread per request changes a few threads between any two reads. A layout that does not fit
/// the build reads other threads altogether (or one, or none), far more than a quarter apart.
fn same_threads(ours: &[u64], theirs: &[u64]) -> bool {
    let ours: std::collections::HashSet<u64> = ours.iter().copied().collect();
    let theirs: std::collections::HashSet<u64> = theirs.iter().copied().collect();
    if ours == theirs {
        return true;
    }
    let both = ours.intersection(&theirs).count();
    let either = ours.union(&theirs).count();
    both > 0 && (either - both) * 4 <= either
}

/// Why a target has no reader of ours.
enum NoFast {
    /// A `_Py_DebugOffsets` our reader does not know: said once where py-spy's reader takes
    /// over.
    Refused(String),
    /// Asked for, or a version our reader cannot read: said only where no reader is left.
    Quiet(String),
    /// A first read that failed, or did not see the threads py-spy's reader saw: tried again
    /// ([`FastRetry`]); said only where no reader is left.
    Transient(String),
}

/// Finds the interpreter. A process caught mid-start (just exec'd, still mapping libraries)
/// can fail a first look with a spurious ESRCH or a missing symbol, so a live process gets a
/// few quick retries before the failure is diagnosed.
fn open_interpreter(pid: u32, config: &Config) -> Result<PythonSpy, AttachError> {
    let mut attempt = 0;
    loop {
        attempt += 1;
        match new_spy(pid, config) {
            Ok(spy) => return Ok(spy),
            Err(e) if attempt >= 5 || !procfs::is_alive(pid) => {
                return Err(AttachError::diagnose(pid, &e))
            }
            Err(_) => std::thread::sleep(Duration::from_millis(20)),
        }
    }
}

/// py-spy's `PythonSpy::new`, with a panic in it (its scan of a starting process's memory
/// reads whatever is there) turned into an error like any other failed look: a target's
/// memory must never bring us down.
fn new_spy(pid: u32, config: &Config) -> anyhow::Result<PythonSpy> {
    std::panic::catch_unwind(std::panic::AssertUnwindSafe(|| {
        PythonSpy::new(pid as py_spy::Pid, config)
    }))
    .unwrap_or_else(|panic| {
        let why = panic
            .downcast_ref::<&str>()
            .map(|s| (*s).to_owned())
            .or_else(|| panic.downcast_ref::<String>().cloned())
            .unwrap_or_else(|| "a panic".to_owned());
        Err(anyhow::anyhow!("py-spy failed reading the process: {why}"))
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn thread_lists_agree_but_for_a_few_that_came_or_went() {
        let list: Vec<u64> = (1..=16).collect();
        assert!(same_threads(&list, &list));
        assert!(same_threads(&[], &[]));
        // A thread per request: one ended and one started between the reads.
        let mut churned = list[1..].to_vec();
        churned.push(99);
        assert!(same_threads(&list, &churned));
        // A layout that does not fit: other threads, one of them, or none.
        assert!(!same_threads(&list, &[1_000, 2_000, 3_000]));
        assert!(!same_threads(&list, &[1]));
        assert!(!same_threads(&list, &[]));
        assert!(!same_threads(&[1, 2], &[1, 3]));
    }

    #[test]
    fn our_reader_is_tried_again_a_bounded_number_of_times_each_wait_twice_the_last() {
        let mut retry = Some(FastRetry::first());
        let mut waits = Vec::new();
        while let Some(r) = retry {
            waits.push(r.at.saturating_duration_since(Instant::now()));
            retry = r.next();
        }
        assert_eq!(waits.len(), FastRetry::TRIES as usize);
        let last = waits.last().copied().unwrap_or_default();
        assert!(
            last > Duration::from_secs(12) && last <= Duration::from_secs(13),
            "{waits:?}"
        );
    }
}
